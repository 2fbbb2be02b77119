"""kernels/clamp.wgsl against numpy: values held to [lo, hi] on the step's rows only (rows past n_tokens keep what
they held), a width that is no multiple of the workgroup. min and max are exact, so the match is exact."""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops import encoder as ops
from gpu.program import Executor, ProgramBuilder, StepParams


@pytest.mark.parametrize(("rows", "n", "d", "lo", "hi"), [(8, 8, 64, -1.5, 2.0), (10, 7, 72, 0.25, 0.5),
                                                         (4, 4, 16, -3.0e38, 1.0)])
def test_clamp(ex: Executor, rows: int, n: int, d: int, lo: float, hi: float) -> None:
    rng = np.random.default_rng(rows + d)
    x = (rng.standard_normal((rows, d)) * 2).astype(np.float32)
    tx = ex.tensor("x", x.shape, data=x)
    out = ex.tensor("out", x.shape, data=np.full(x.shape, 7, np.float32))
    b = ProgramBuilder(ex, "clamp")
    ops.clamp(b, tx, out, lo, hi)
    got, = ex.run(b.build(), StepParams(n_tokens=n), read=[out])
    want = np.full(x.shape, 7, np.float32)
    want[:n] = np.clip(x[:n], np.float32(lo), np.float32(hi))
    np.testing.assert_array_equal(got, want)


def test_clamp_rejects_empty_bounds(ex: Executor) -> None:
    t = ex.tensor("t", (2, 4))
    with pytest.raises(ValueError, match="empty"):
        ops.clamp(ProgramBuilder(ex, "bad"), t, t, 1.0, 0.0)
