"""Host side of kernels/conv1d.wgsl: a general 1-D convolution (stride, padding, dilation, groups, bias) over
time-major activations, as torch.nn.functional.conv1d computes it.

    w = upload_conv1d(executor, "conv1", weight, bias)        # weight: PyTorch's [C_out, C_in / groups, K]
    t_out = conv1d(builder, w, x, y, t_in=3000, stride=1, padding=1)

Activations are rows of time: x [t_in, C_in] (a column slice of wider rows via x_offset), y [t_out, C_out]
(likewise via y_offset); sizes are specialisation constants (channel-major activations of run-time length take
gpu/ops/dynamic.py's conv1d). The weight is kept in f32 with its last two axes swapped ([C_out, K, C_in / groups]),
so each invocation reads one contiguous run of an input row and of a weight row per tap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu.program import Executor, ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

WORKGROUP = 64  # invocations per workgroup of conv1d.wgsl


@dataclass(frozen=True)
class Conv1dWeight:
    """A convolution's weight on the GPU (f32 [C_out, K, C_in / groups]) and its optional bias (f32 [C_out])."""

    name: str
    weight: Tensor
    bias: Tensor | None
    c_in: int
    c_out: int
    kernel_size: int
    groups: int


def upload_conv1d(executor: Executor, name: str, weight: np.ndarray, bias: np.ndarray | None = None, *,
                  groups: int = 1) -> Conv1dWeight:
    """Put a PyTorch-layout conv1d weight [C_out, C_in / groups, K] (any float dtype) and bias [C_out] on the GPU."""
    w = np.asarray(weight)
    if w.ndim != 3:
        raise ValueError(f"{name}: a conv1d weight is [C_out, C_in / groups, K], got shape {w.shape}")
    c_out, cin_g, k = w.shape
    if groups < 1 or c_out % groups:
        raise ValueError(f"{name}: {c_out} output channels do not split into {groups} groups")
    if bias is not None and np.asarray(bias).size != c_out:
        raise ValueError(f"{name}: bias of {np.asarray(bias).size} values for {c_out} output channels")
    swapped = np.ascontiguousarray(w.astype(np.float32).transpose(0, 2, 1))  # [C_out, K, C_in / groups]
    w_t = executor.tensor(f"{name}.weight", swapped.shape, data=swapped)
    b_t = None
    if bias is not None:
        b = np.ascontiguousarray(np.asarray(bias, np.float32).reshape(-1))
        b_t = executor.tensor(f"{name}.bias", b.shape, data=b)
    return Conv1dWeight(name, w_t, b_t, cin_g * groups, c_out, k, groups)


def conv1d_out_len(t_in: int, kernel_size: int, stride: int = 1, padding: int | tuple[int, int] = 0,
                   dilation: int = 1) -> int:
    """Output rows of a convolution over t_in input rows (PyTorch's formula; 0 when the input is too short)."""
    left, right = (padding, padding) if isinstance(padding, int) else padding
    span = dilation * (kernel_size - 1) + 1
    padded = t_in + left + right
    return 0 if padded < span else (padded - span) // stride + 1


def conv1d(
    b: ProgramBuilder, w: Conv1dWeight, x: Tensor, y: Tensor, *, t_in: int | None, stride: int = 1,
    padding: int | tuple[int, int] = 0, dilation: int = 1, x_offset: int = 0, y_offset: int = 0,
) -> int:
    """Add y[t, y_offset + co] = conv1d(x[:, x_offset:x_offset + C_in])[t, co] to the program; returns t_out.

    t_in: input rows, fixed when the program is built, or None to take the step's n_tokens at run time
    (then the returned t_out is the most the output can hold, for x's row count). padding: both sides,
    or (left, right). x: f32 [>= t_in, >= x_offset + C_in]; y: f32 [>= t_out, >= y_offset + C_out].
    """
    if stride < 1 or dilation < 1:
        raise ValueError(f"{w.name}: stride and dilation must be >= 1 (got {stride}, {dilation})")
    left, right = (padding, padding) if isinstance(padding, int) else padding
    if left < 0 or right < 0:
        raise ValueError(f"{w.name}: padding must be >= 0 (got {padding})")
    for t, cols, off, what in ((x, w.c_in, x_offset, "x"), (y, w.c_out, y_offset, "y")):
        if t.dtype != "f32" or len(t.shape) != 2 or t.shape[1] < off + cols:
            raise ValueError(f"{w.name}: {what} {t} must be f32 [rows, >= {off + cols}]")
    rows_in = x.shape[0] if t_in is None else t_in
    if t_in is not None and x.shape[0] < t_in:
        raise ValueError(f"{w.name}: x {x} has fewer than t_in = {t_in} rows")
    t_out = conv1d_out_len(rows_in, w.kernel_size, stride, (left, right), dilation)
    if t_out < 1:
        raise ValueError(f"{w.name}: {rows_in} input rows are too few for kernel {w.kernel_size} x dilation {dilation}")
    if y.shape[0] < t_out:
        raise ValueError(f"{w.name}: y {y} has fewer than the {t_out} output rows")
    cout_g = w.c_out // w.groups
    tile = 4 if cout_g % 4 == 0 else 2 if cout_g % 2 == 0 else 1
    constants = {
        "C_IN": w.c_in, "C_OUT": w.c_out, "K": w.kernel_size, "STRIDE": stride, "DILATION": dilation,
        "PAD_LEFT": left, "PAD_RIGHT": right, "GROUPS": w.groups, "T_IN": 0 if t_in is None else t_in,
        "X_STRIDE": x.shape[1], "X_OFFSET": x_offset, "Y_STRIDE": y.shape[1], "Y_OFFSET": y_offset,
        "HAS_BIAS": w.bias is not None, "CO_TILE": tile,
    }
    invocations = t_out * (w.c_out // tile)
    b.dispatch("conv1d", constants, [b.step, x, w.weight, w.bias or w.weight, y],
               workgroup_grid(-(-invocations // WORKGROUP)))
    return t_out
