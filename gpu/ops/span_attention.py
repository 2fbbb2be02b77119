"""Host side of split attention for a few query rows over many keys, each row over its own span of key rows
(kernels/attention_spans.wgsl, attention_spans_combine.wgsl): a decoder's self-attention over its KV-cache slot and
cross-attention over an encoder's rows.
"""

from __future__ import annotations

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

CHUNK = 256  # keys per workgroup of attention_spans.wgsl


def span_attention(b: ProgramBuilder, q: Tensor, k: Tensor, v: Tensor, spans: Tensor, out: Tensor, *, heads: int,
                   head_dim: int, scale: float, max_keys: int, v_offset: int = 0) -> None:
    """out[t, h] = attention of q's row t, head h over the key rows spans[t] of k and v (head h of a row at h *
    head_dim, v's from v_offset): the keys split into chunks of CHUNK over workgroups, then merged."""
    t_max = q.shape[0]
    splits = -(-max_keys // CHUNK)
    partial = b.activation("attn_partial", (t_max * heads * splits, head_dim + 2))
    constants = {"HEADS": heads, "D": head_dim, "CHUNK": CHUNK, "SPLITS": splits, "SCALE": scale,
                 "Q_STRIDE": q.shape[1], "Q_OFFSET": 0, "K_STRIDE": k.shape[1], "K_OFFSET": 0,
                 "V_STRIDE": v.shape[1], "V_OFFSET": v_offset}
    b.dispatch("attention_spans", constants, [b.step, q, k, v, spans, partial],
               workgroup_grid(t_max * heads * splits))
    b.dispatch("attention_spans_combine", {"HEADS": heads, "D": head_dim, "SPLITS": splits},
               [b.step, partial, out], workgroup_grid(-(-t_max * heads * head_dim // 64)))
