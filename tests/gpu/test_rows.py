"""gpu/ops/rows.py against numpy: residual_add and copy_rows (KV-cache stores and output-row gathers).

Tolerance: the copies are exact and the add is exact up to one rounding (1e-6).
"""

from __future__ import annotations

import numpy as np

from gpu.ops.rows import copy_rows, residual_add
from gpu.program import Executor, ProgramBuilder, StepParams


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
