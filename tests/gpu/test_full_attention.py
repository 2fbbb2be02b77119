"""gpu/ops/full_attention.py against numpy: full attention over a fused q|k|v (attention_full_scores + softmax_rows
+ attention_full_values, and attention_full where the row count is not a multiple of 4).

Tolerance: f32 kernels against float64 references; attention sums 200 keys of 16-value dot products with an
online softmax, a few f32 ulps of results of order 1 (rtol/atol 1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops.full_attention import full_attention
from gpu.program import Executor, ProgramBuilder, StepParams


@pytest.mark.parametrize("n", [200, 201])  # tiled scores + values (n % 4 == 0), one pass per row (else)
def test_full_attention(ex: Executor, n: int) -> None:
    heads, d = 3, 16
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((n, 3 * heads * d)).astype(np.float32)
    q_t, out_t = ex.tensor("qkv", qkv.shape, data=qkv), ex.tensor("out", (n, heads * d))
    b = ProgramBuilder(ex, "attn")
    full_attention(b, q_t, out_t, n, heads, d, d ** -0.5)
    out, = ex.run(b.build(), StepParams(n_tokens=n), read=[out_t])
    x = qkv.astype(np.float64).reshape(n, 3, heads, d)
    scores = np.einsum("thd,jhd->htj", x[:, 0], x[:, 1]) * d ** -0.5
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = np.einsum("htj,jhd->thd", p, x[:, 2]).reshape(n, heads * d)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
