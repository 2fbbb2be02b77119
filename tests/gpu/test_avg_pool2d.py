"""kernels/avg_pool2d.wgsl against numpy: Gemma 3's pooling of a patch grid into soft tokens (one and two images,
the real 64 -> 16 side and the fixture's 16 -> 4, a width that is no multiple of the workgroup).

The kernel adds a block's K * K values in f32 and divides once; the reference does the same in float64, so they
agree to a few f32 ulps of the values (rtol 1e-6, atol 1e-6).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops import encoder as ops
from gpu.program import Executor, ProgramBuilder, StepParams


def _reference(x: np.ndarray, side: int, k: int) -> np.ndarray:
    images = x.shape[0] // (side * side)
    d = x.shape[1]
    grid = x.astype(np.float64).reshape(images, side // k, k, side // k, k, d)
    return grid.mean(axis=(2, 4)).reshape(-1, d)


@pytest.mark.parametrize(("images", "side", "k", "d"), [(1, 16, 4, 64), (2, 8, 2, 72), (1, 64, 4, 40)])
def test_avg_pool2d(ex: Executor, images: int, side: int, k: int, d: int) -> None:
    rng = np.random.default_rng(side + d)
    x = (rng.standard_normal((images * side * side, d)) * 3 + 1).astype(np.float32)
    tx = ex.tensor("x", x.shape, data=x)
    out = ex.tensor("out", (images * (side // k) ** 2, d), data=np.full((images * (side // k) ** 2, d), 7, np.float32))
    b = ProgramBuilder(ex, "pool2d")
    ops.avg_pool2d(b, tx, out, side=side, kernel=k)
    got, = ex.run(b.build(), StepParams(n_tokens=x.shape[0]), read=[out])
    np.testing.assert_allclose(got, _reference(x, side, k), rtol=1e-6, atol=1e-6)


def test_avg_pool2d_fewer_images_than_rows(ex: Executor) -> None:
    """A step of one image in a program sized for two leaves the second image's output untouched."""
    side, k, d = 8, 4, 16
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2 * side * side, d)).astype(np.float32)
    tx = ex.tensor("x", x.shape, data=x)
    out = ex.tensor("out", (8, d), data=np.full((8, d), 7, np.float32))
    b = ProgramBuilder(ex, "pool2d")
    ops.avg_pool2d(b, tx, out, side=side, kernel=k)
    got, = ex.run(b.build(), StepParams(n_tokens=side * side), read=[out])
    np.testing.assert_allclose(got[:4], _reference(x[:side * side], side, k), rtol=1e-6, atol=1e-6)
    assert (got[4:] == 7).all()


def test_avg_pool2d_rejects_partial_blocks(ex: Executor) -> None:
    b = ProgramBuilder(ex, "pool2d")
    x = ex.tensor("x", (36, 4))
    with pytest.raises(ValueError, match="blocks"):
        ops.avg_pool2d(b, x, ex.tensor("o", (4, 4)), side=6, kernel=4)
