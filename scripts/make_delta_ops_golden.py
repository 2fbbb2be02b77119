r"""Golden data for Gated DeltaNet's numpy references (tests/gpu/test_gated_delta_rule.py): transformers' own torch
functions of Qwen3.5's linear-attention layer (transformers.models.qwen3_5.modeling_qwen3_5) on seeded inputs.

Written to tests/golden/qwen35/delta_ops.npz:
  gates/{a,b,A_log,dt_bias,g,beta}: the layer's g = -exp(A_log) * softplus(a + dt_bias) and beta = sigmoid(b)
  ([1, T, H_V]);
  rule/{q,k,v,state} inputs (transformers' layouts: q, k [1, T, H_K, D_K], v [1, T, H_V, D_V], state [1, H_V, D_K,
  D_V]; g and beta the gates') and rule/{chunk,recurrent}/{out,state}: torch_chunk_gated_delta_rule (chunk 64) and
  torch_recurrent_gated_delta_rule with use_qk_l2norm_in_kernel, over T = 70 rows (two chunks);
  norm/{x,z,w,y}: Qwen3_5RMSNormGated (eps 1e-6) on 8 rows of D_V values.

Run (seconds, torch CPU, transformers 5.24):

    /work/refvenv/bin/python scripts/make_delta_ops_golden.py --out tests/golden/qwen35/delta_ops.npz
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

T, H_K, H_V, D_K, D_V = 70, 2, 4, 8, 8  # two chunks of 64 rows
T_SHORT = 8  # rows of the norm check


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
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

    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(args.out, **{k: v.detach().numpy().astype(np.float32) for k, v in out.items()})


if __name__ == "__main__":
    main()
