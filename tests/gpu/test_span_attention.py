"""gpu/ops/span_attention.py against numpy: split attention of a few rows over spans of a key table.

Tolerance: f32 kernels against float64 references, a few f32 ulps of results of order 1 (rtol/atol 1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops.span_attention import span_attention
from gpu.program import Executor, ProgramBuilder, StepParams


@pytest.mark.parametrize("d, max_keys", [(16, 300), (64, 1500)])
def test_span_attention(ex: Executor, d: int, max_keys: int) -> None:
    """Split attention of a few rows over spans of a key table (cache slots, cross-attention), with an empty chunk,
    a one-key span and v read at an offset of a fused k|v row."""
    heads, t = 3, 4
    rng = np.random.default_rng(d)
    q = rng.standard_normal((t, heads * d)).astype(np.float32)
    kv = rng.standard_normal((max_keys, 2 * heads * d)).astype(np.float32)
    spans = np.array([[0, max_keys], [5, 6], [10, 270], [0, 3]], np.uint32)
    q_t, kv_t = ex.tensor("q", q.shape, data=q), ex.tensor("kv", kv.shape, data=kv)
    s_t, out_t = ex.tensor("spans", spans.shape, "u32", data=spans), ex.tensor("out", (t, heads * d))
    b = ProgramBuilder(ex, "dattn")
    span_attention(b, q_t, kv_t, kv_t, s_t, out_t, heads=heads, head_dim=d, scale=d ** -0.5, max_keys=max_keys,
                   v_offset=heads * d)
    out, = ex.run(b.build(), StepParams(n_tokens=t), read=[out_t])
    expected = np.zeros((t, heads * d))
    for r, (lo, hi) in enumerate(spans):
        for h in range(heads):
            cols = slice(h * d, (h + 1) * d)
            scores = kv[lo:hi, cols].astype(np.float64) @ q[r, cols] * d ** -0.5
            p = np.exp(scores - scores.max())
            expected[r, cols] = (p / p.sum()) @ kv[lo:hi, heads * d:][:, cols]
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
