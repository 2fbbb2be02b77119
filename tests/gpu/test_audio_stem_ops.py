"""rope (table-driven NeoX rotation of heads inside wider rows) and group_norm (with its tanh input) against numpy.

Tolerances: f32 kernels against float64 references. rope is two products and a sum per value: rtol/atol 1e-6 of
values near 1. group_norm sums thousands of values per group (mean, then variance around it) in another order than
numpy: atol 2e-5 on unit-scale outputs, the bound test_encoder_ops.py uses for LayerNorm's row sums.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops import encoder as ops
from gpu.program import Executor, ProgramBuilder, StepParams


def _run(ex: Executor, build, n_tokens: int, read):
    b = ProgramBuilder(ex, "t")
    build(b)
    return ex.run(b.build(), StepParams(n_tokens=n_tokens), read=read)


def test_rope_partial_heads_inside_rows(ex: Executor) -> None:
    rng = np.random.default_rng(0)
    t_max, n, heads, d, offset, width = 6, 5, 2, 16, 8, 48  # heads in columns [8, 40) of 48-wide rows
    x = rng.standard_normal((t_max, width)).astype(np.float32)
    positions = np.array([3, 0, 7, 1, 9, 2], np.uint32)
    angles = np.arange(12)[:, None] * (1.0 / 10000 ** (np.arange(d // 2) / (d // 2)))[None]
    cos, sin = np.cos(angles), np.sin(angles)
    cos[:, 6:], sin[:, 6:] = 1.0, 0.0  # the last two pairs left alone (partial rotary)
    table = np.stack([cos, sin], -1).reshape(12, d).astype(np.float32)
    tx = ex.tensor("x", x.shape, data=x)
    tt = ex.tensor("table", table.shape, data=table)
    tp = ex.tensor("pos", positions.shape, "u32", data=positions)
    got, = _run(ex, lambda b: ops.rope(b, tx, tt, tp, heads=heads, head_dim=d, offset=offset), n, [tx])
    want = x.astype(np.float64).copy()
    for t in range(n):
        c, s = cos[positions[t]], sin[positions[t]]
        for h in range(heads):
            lo = offset + h * d
            a, b2 = want[t, lo:lo + d // 2].copy(), want[t, lo + d // 2:lo + d].copy()
            want[t, lo:lo + d // 2] = a * c - b2 * s
            want[t, lo + d // 2:lo + d] = b2 * c + a * s
    want[n:] = x[n:]  # rows past n_tokens untouched
    np.testing.assert_allclose(got.reshape(t_max, width), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(("groups", "tanh"), [(1, True), (4, False)])
def test_group_norm(ex: Executor, groups: int, tanh: bool) -> None:
    rng = np.random.default_rng(1)
    t_max, n, c = 600, 499, 32
    x = (rng.standard_normal((t_max, c)) * 3 + 0.7).astype(np.float32)
    gamma, beta = (rng.standard_normal(c).astype(np.float32) for _ in range(2))
    tx, tg, tb = (ex.tensor(f"i{i}", a.shape, data=a) for i, a in enumerate((x, gamma, beta)))
    out = ex.tensor("o", x.shape, data=np.zeros_like(x))
    got, = _run(ex, lambda b: ops.group_norm(b, tx, tg, tb, out, groups=groups, tanh=tanh), n, [out])
    v = x[:n].astype(np.float64)
    v = np.tanh(v) if tanh else v
    g = v.reshape(n, groups, c // groups)
    mean = g.mean(axis=(0, 2), keepdims=True)
    var = g.var(axis=(0, 2), keepdims=True)
    want = ((g - mean) / np.sqrt(var + 1e-5)).reshape(n, c) * gamma + beta
    np.testing.assert_allclose(got.reshape(t_max, c)[:n], want, rtol=0, atol=2e-5)
    assert not np.any(got.reshape(t_max, c)[n:])  # rows past n_tokens are not written


def test_group_norm_tanh_far_out_is_finite(ex: Executor) -> None:
    x = np.array([[1e30, -1e30, 50.0, -50.0]] * 4, np.float32)
    tx = ex.tensor("x", x.shape, data=x)
    ones, zeros = np.ones(4, np.float32), np.zeros(4, np.float32)
    tg, tb = ex.tensor("g", (4,), data=ones), ex.tensor("b", (4,), data=zeros)
    out = ex.tensor("o", x.shape, data=np.zeros_like(x))
    got, = _run(ex, lambda b: ops.group_norm(b, tx, tg, tb, out, tanh=True), 4, [out])
    np.testing.assert_allclose(got.reshape(4, 4), [[1, -1, 1, -1]] * 4, atol=1e-4)
