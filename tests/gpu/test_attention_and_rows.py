"""Full and span attention and the row ops against numpy: full attention (attention_full_scores + softmax_rows +
attention_full_values, and attention_full where the row count is not a multiple of 4) over a fused q|k|v, span
attention, residual_add and copy_rows (KV-cache stores and output-row gathers).

Tolerance: f32 kernels against float64 references; attention sums 200 keys of 16-value dot products with an
online softmax, a few f32 ulps of results of order 1 (rtol/atol 1e-5); the copies and the add are exact up to one
rounding (1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.device import default_device
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.ops.full_attention import full_attention
from gpu.ops.rows import copy_rows, residual_add
from gpu.ops.span_attention import span_attention


@pytest.fixture(scope="module")
def ex() -> Executor:
    return Executor(default_device())


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


def test_residual_add_and_copy_rows(ex: Executor) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 8)).astype(np.float32)
    y = rng.standard_normal((6, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    src = rng.standard_normal((6, 24)).astype(np.float32)
    pairs = np.array([[0, 5], [1, 2], [2, 9], [3, 0]], np.uint32)
    xt, yt, bt = ex.tensor("x", x.shape, data=x), ex.tensor("y", y.shape, data=y), ex.tensor("b", (8,), data=bias)
    st, pt, dt = ex.tensor("s", src.shape, data=src), ex.tensor("p", pairs.shape, "u32", data=pairs), \
        ex.tensor("d", (10, 16))
    gather_pairs = np.array([[4, 1], [2, 3], [0, 0]], np.uint32)
    gp, gathered = ex.tensor("gp", gather_pairs.shape, "u32", data=gather_pairs), ex.tensor("g", (4, 8))
    b = ProgramBuilder(ex, "misc")
    residual_add(b, xt, yt, bt)
    copy_rows(b, st, pt, dt, 8, src_offset=8, dst_offset=4)
    copy_rows(b, st, gp, gathered, 8, by_out=True)
    got_x, got_d, got_g = ex.run(b.build(), StepParams(n_tokens=3, n_out=2), read=[xt, dt, gathered])
    expected_x = x.copy()
    expected_x[:3] += y[:3] + bias  # only the step's 3 rows
    np.testing.assert_allclose(got_x, expected_x, rtol=1e-6, atol=1e-6)
    expected_d = np.zeros((10, 16), np.float32)
    for s, t in pairs[:3]:  # n_tokens pairs
        expected_d[t, 4:12] = src[s, 8:16]
    np.testing.assert_array_equal(got_d, expected_d)
    expected_g = np.zeros((4, 8), np.float32)
    for s, t in gather_pairs[:2]:  # n_out pairs (BY_OUT)
        expected_g[t] = src[s, :8]
    np.testing.assert_array_equal(got_g, expected_g)


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
