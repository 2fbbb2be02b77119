"""gpu/ops/full_attention.py against numpy: full attention over a fused q|k|v (attention_full_scores + softmax_rows
+ attention_full_values, for all heads at once or in groups whose scores fit a binding, and attention_full where
the row count is not a multiple of 4).

Tolerance: f32 kernels against float64 references; attention sums 200 keys of 16-value dot products with an
online softmax, a few f32 ulps of results of order 1 (rtol/atol 1e-5).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops import full_attention as attention_op
from gpu.ops.full_attention import full_attention
from gpu.program import Executor, ProgramBuilder, StepParams


@pytest.mark.parametrize(("n", "heads", "group"), [
    (200, 3, 3),  # tiled scores + values (n % 4 == 0), all heads at once
    (201, 3, 3),  # one pass per row
    (200, 6, 2),  # heads in groups whose scores fit the (here lowered) limit
    (200, 5, 2),  # a limit of 2 heads' scores that does not divide 5 heads: groups of 1
])
def test_full_attention(ex: Executor, monkeypatch: pytest.MonkeyPatch, n: int, heads: int, group: int) -> None:
    monkeypatch.setattr(attention_op, "MAX_SCORES_BYTES", group * 4 * n * n)
    d = 16
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((n, 3 * heads * d)).astype(np.float32)
    q_t, out_t = ex.tensor("qkv", qkv.shape, data=qkv), ex.tensor("out", (n, heads * d))
    b = ProgramBuilder(ex, "attn")
    full_attention(b, q_t, out_t, n, heads, d, d ** -0.5)
    if n % 4 == 0:
        expected_groups = heads // group if heads % group == 0 else heads
        assert sum(d.kernel == "attention_full_scores" for d in b._dispatches) == expected_groups
    out, = ex.run(b.build(), StepParams(n_tokens=n), read=[out_t])
    x = qkv.astype(np.float64).reshape(n, 3, heads, d)
    scores = np.einsum("thd,jhd->htj", x[:, 0], x[:, 1]) * d ** -0.5
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    expected = np.einsum("htj,jhd->thd", p, x[:, 2]).reshape(n, heads * d)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
