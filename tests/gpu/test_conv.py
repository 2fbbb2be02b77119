"""conv1d (kernels/conv1d.wgsl) against a float64 numpy convolution written from PyTorch's definition.

Tolerance: the kernel sums C_in / groups * K products in f32 (four at a time); the reference sums in float64.
With inputs and weights of order 1 and at most a few hundred terms, the f32 error stays below about
1e-6 * sqrt(terms) * magnitude, so rtol 1e-5 / atol 1e-5 leaves margin without hiding an indexing mistake
(which gives errors of order 1).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops.conv import conv1d, conv1d_out_len, upload_conv1d
from gpu.program import Executor, ProgramBuilder, StepParams

TOL = 1e-5



def reference(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None, stride: int, padding: tuple[int, int],
              dilation: int, groups: int) -> np.ndarray:
    """y [t_out, C_out] of x [t_in, C_in] and w [C_out, C_in / groups, K], as torch's conv1d."""
    t_in, c_in = x.shape
    c_out, cin_g, k = w.shape
    xp = np.concatenate([np.zeros((padding[0], c_in)), x, np.zeros((padding[1], c_in))]).astype(np.float64)
    t_out = conv1d_out_len(t_in, k, stride, padding, dilation)
    y = np.zeros((t_out, c_out))
    cout_g = c_out // groups
    for co in range(c_out):
        g = co // cout_g
        for tap in range(k):
            rows = xp[np.arange(t_out) * stride + tap * dilation, g * cin_g:(g + 1) * cin_g]  # [t_out, cin_g]
            y[:, co] += rows @ w[co, :, tap].astype(np.float64)
    if bias is not None:
        y += bias
    return y


CASES = [  # (t_in, c_in, c_out, k, stride, padding, dilation, groups, bias)
    (40, 8, 12, 3, 1, (1, 1), 1, 1, True),      # Whisper's conv1 shape, small
    (41, 12, 8, 3, 2, (1, 1), 1, 1, True),      # Whisper's conv2: stride 2, odd length
    (30, 6, 6, 5, 1, (2, 2), 1, 1, False),      # no bias
    (50, 8, 8, 3, 1, (3, 3), 3, 1, True),       # dilation (HiFi-GAN / ISTFTNet resblocks)
    (33, 8, 16, 7, 1, (3, 3), 5, 2, True),      # groups and dilation
    (20, 5, 5, 3, 1, (1, 1), 1, 5, True),       # depthwise, odd channels (tile of 1)
    (25, 7, 6, 4, 3, (0, 2), 1, 1, True),       # asymmetric padding, stride 3, even kernel
    (9, 3, 10, 1, 1, (0, 0), 1, 1, True),       # pointwise
]


@pytest.mark.parametrize("case", CASES, ids=[f"t{c[0]}_c{c[1]}-{c[2]}_k{c[3]}_s{c[4]}_d{c[6]}_g{c[7]}" for c in CASES])
def test_conv1d_matches_reference(ex: Executor, case) -> None:
    t_in, c_in, c_out, k, stride, padding, dilation, groups, has_bias = case
    rng = np.random.default_rng(t_in * 100 + c_in * 10 + k)
    x = rng.standard_normal((t_in, c_in)).astype(np.float32)
    w = rng.standard_normal((c_out, c_in // groups, k)).astype(np.float32)
    bias = rng.standard_normal(c_out).astype(np.float32) if has_bias else None
    weight = upload_conv1d(ex, "c", w, bias, groups=groups)
    t_out = conv1d_out_len(t_in, k, stride, padding, dilation)
    xt = ex.tensor("x", (t_in, c_in), data=x)
    yt = ex.tensor("y", (t_out, c_out))
    b = ProgramBuilder(ex, "conv")
    assert conv1d(b, weight, xt, yt, t_in=t_in, stride=stride, padding=padding, dilation=dilation) == t_out
    y, = ex.run(b.build(), StepParams(n_tokens=1), read=[yt])
    np.testing.assert_allclose(y, reference(x, w, bias, stride, padding, dilation, groups), rtol=TOL, atol=TOL)


def test_conv1d_column_slices_and_runtime_length(ex: Executor) -> None:
    """x read from columns [3, 3 + C_in) of wider rows, y written into columns [2, 2 + C_out), the input length
    taken from the step's n_tokens (rows past t_out and columns outside the slice stay as they were)."""
    rng = np.random.default_rng(7)
    c_in, c_out, k = 4, 8, 3
    x = rng.standard_normal((16, 10)).astype(np.float32)
    w = rng.standard_normal((c_out, c_in, k)).astype(np.float32)
    weight = upload_conv1d(ex, "c", w, None)
    xt = ex.tensor("x", x.shape, data=x)
    fill = np.full((8, 12), 5.0, np.float32)
    yt = ex.tensor("y", fill.shape, data=fill)
    b = ProgramBuilder(ex, "conv")
    conv1d(b, weight, xt, yt, t_in=None, stride=2, padding=1, x_offset=3, y_offset=2)
    program = b.build()
    t_in = 11
    y, = ex.run(program, StepParams(n_tokens=t_in), read=[yt])
    t_out = conv1d_out_len(t_in, k, 2, 1)
    expected = fill.copy()
    expected[:t_out, 2:2 + c_out] = reference(x[:t_in, 3:3 + c_in], w, None, 2, (1, 1), 1, 1)
    np.testing.assert_allclose(y, expected, rtol=TOL, atol=TOL)


def test_conv1d_rejects_bad_shapes(ex: Executor) -> None:
    weight = upload_conv1d(ex, "c", np.zeros((4, 2, 3), np.float32))
    b = ProgramBuilder(ex, "conv")
    with pytest.raises(ValueError, match="fewer than the"):
        conv1d(b, weight, ex.tensor("x", (10, 2)), ex.tensor("y", (5, 4)), t_in=10, padding=1)
    with pytest.raises(ValueError, match="too few"):
        conv1d(b, weight, ex.tensor("x", (1, 2)), ex.tensor("y", (5, 4)), t_in=1)
    with pytest.raises(ValueError, match="groups"):
        upload_conv1d(ex, "c", np.zeros((5, 2, 3), np.float32), groups=2)
