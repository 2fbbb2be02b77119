r"""Golden data for Gated DeltaNet's numpy references (tests/gpu/test_gated_delta_rule.py): transformers' own torch
functions of Qwen3.5's linear-attention layer (transformers.models.qwen3_5.modeling_qwen3_5) on seeded inputs.

Written to tests/golden/qwen35/delta_ops.npz:
  gates/{a,b,A_log,dt_bias,g,beta}: the layer's g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b)
  ([1, T, H_V]);
  rule/{q,k,v,state} inputs (transformers' layouts: q, k [1, T, H_K, D_K], v [1, T, H_V, D_V], state [1, H_V, D_K,
  D_V]; g and beta the gates') and rule/{chunk,recurrent}/{out,state}: torch_chunk_gated_delta_rule (chunk 64) and
  torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel, over T = 70 rows (two chunks);
  norm/{x,z,w,y}: Qwen3_5RMSNormGated (eps 1e-6) on 8 rows of D_V values;
  layer/{x,y}: a whole Qwen3_5GatedDeltaNet layer (hidden 32, 2 key heads, 4 value heads of 8: grouped value heads)
  on 20 rows, its weights under layer/<GGUF tensor name> as llama.cpp's converter writes them: V heads reordered to
  tiled order by its own _reorder_v_heads, ssm_a = -exp(A_log), conv taps squeezed to [C, K], all [out, in].

Run (seconds, torch CPU, transformers 5.24):

    /work/refvenv/bin/python scripts/make_delta_ops_golden.py --out tests/golden/qwen35/delta_ops.npz
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

T, H_K, H_V, D_K, D_V = 70, 2, 4, 8, 8  # two chunks of 64 rows
T_SHORT = 8  # rows of the norm check
LAYER = dict(hidden_size=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=8,
             linear_value_head_dim=8, linear_conv_kernel_dim=4, rms_norm_eps=1e-6, num_hidden_layers=1,
             layer_types=["linear_attention"], hidden_act="silu")
DEFAULT_LLAMA_CPP = Path("/tmp/lcp/llama_cpp_python-0.3.36/vendor/llama.cpp")


def layer_golden(randn, llama_cpp: Path) -> dict:
    """A Qwen3_5GatedDeltaNet's input and output and its weights in the converter's GGUF layout."""
    import sys

    import torch
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m
    from transformers.models.qwen3_5.configuration_qwen3_5 import Qwen3_5TextConfig

    sys.path[:0] = [str(llama_cpp / "gguf-py"), str(llama_cpp)]
    from conversion.qwen import _LinearAttentionVReorderBase

    config = Qwen3_5TextConfig(**LAYER)
    layer = m.Qwen3_5GatedDeltaNet(config, 0).eval()
    with torch.no_grad():
        for name, p in sorted(layer.named_parameters()):
            p.copy_((1.0 + 0.2 * randn(*p.shape)) if name == "norm.weight" else 0.3 * randn(*p.shape))
        x = randn(1, 20, LAYER["hidden_size"])
        y = layer(x)
    c = config
    reorder = _LinearAttentionVReorderBase._reorder_v_heads
    ratio = c.linear_num_value_heads // c.linear_num_key_heads

    def heads(t: torch.Tensor, dim: int, head_dim: int) -> torch.Tensor:
        return reorder(t, dim, c.linear_num_key_heads, ratio, head_dim)

    key_dim = c.linear_num_key_heads * c.linear_key_head_dim
    qkv = layer.in_proj_qkv.weight.detach()
    conv = layer.conv1d.weight.detach().squeeze(1)
    v_dim = c.linear_value_head_dim
    return {
        "layer/x": x[0], "layer/y": y[0],
        "layer/attn_qkv": torch.cat([qkv[:2 * key_dim], heads(qkv[2 * key_dim:], 0, v_dim)]),
        "layer/attn_gate": heads(layer.in_proj_z.weight.detach(), 0, v_dim),
        "layer/ssm_alpha": heads(layer.in_proj_a.weight.detach(), 0, 1),
        "layer/ssm_beta": heads(layer.in_proj_b.weight.detach(), 0, 1),
        "layer/ssm_a": heads(-torch.exp(layer.A_log.detach()).unsqueeze(-1), 0, 1).squeeze(-1),
        "layer/ssm_dt": heads(layer.dt_bias.detach().unsqueeze(-1), 0, 1).squeeze(-1),
        "layer/ssm_conv1d": torch.cat([conv[:2 * key_dim], heads(conv[2 * key_dim:], 0, v_dim)]),
        "layer/ssm_norm": layer.norm.weight.detach(),
        "layer/ssm_out": heads(layer.out_proj.weight.detach(), 1, v_dim),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--llama-cpp", type=Path, default=DEFAULT_LLAMA_CPP, help="llama.cpp source tree")
    args = parser.parse_args()
    import torch
    import torch.nn.functional as F
    from transformers.models.qwen3_5 import modeling_qwen3_5 as m

    gen = torch.Generator().manual_seed(44)

    def randn(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen, dtype=torch.float32)

    out: dict[str, np.ndarray] = {}
    a, b = randn(1, T, H_V), randn(1, T, H_V)
    a_log, dt_bias = torch.rand(H_V, generator=gen).mul(16).add(0.01).log(), randn(H_V)
    g = -a_log.float().exp() * F.softplus(a.float() + dt_bias)  # as Qwen3_5GatedDeltaNet.forward
    beta = b.sigmoid()
    out.update({"gates/a": a, "gates/b": b, "gates/A_log": a_log, "gates/dt_bias": dt_bias, "gates/g": g,
                "gates/beta": beta})

    q, k, v, state = randn(1, T, H_K, D_K), randn(1, T, H_K, D_K), randn(1, T, H_V, D_V), 0.5 * randn(1, H_V, D_K, D_V)
    out.update({"rule/q": q, "rule/k": k, "rule/v": v, "rule/state": state})
    for name, fn in (("chunk", m.torch_chunk_gated_delta_rule), ("recurrent", m.torch_recurrent_gated_delta_rule)):
        o, s = fn(q, k, v, g=g, beta=beta, initial_state=state.clone(), output_final_state=True,
                  use_qk_l2norm_in_kernel=True)
        out[f"rule/{name}/out"], out[f"rule/{name}/state"] = o, s

    norm = m.Qwen3_5RMSNormGated(D_V, eps=1e-6)
    with torch.no_grad():
        norm.weight.copy_(1.0 + 0.2 * randn(D_V))
        xs, zs = randn(T_SHORT, D_V), randn(T_SHORT, D_V)
        out.update({"norm/x": xs, "norm/z": zs, "norm/w": norm.weight.detach().clone(), "norm/y": norm(xs, zs)})

    out.update(layer_golden(randn, args.llama_cpp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **{k: v.detach().numpy().astype(np.float32) for k, v in out.items()})


if __name__ == "__main__":
    main()
