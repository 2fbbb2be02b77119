"""A linear's output left as the parts of its k-split matmul tiles (kernels/matmul/tiles.wgsl, tiles_i8.wgsl with
SPLIT > 1), for a consumer that adds the parts as it reads them (the residual norms,
kernels/common/residual_norm_row.wgsl) instead of a matmul_reduce dispatch writing the sums first."""

from __future__ import annotations

from dataclasses import dataclass

from gpu.tensor import Tensor


@dataclass(frozen=True)
class SplitSums:
    """y[t] = the sum over s of parts[s * rows + t], added in order s = 0, 1, ... (kernels/matmul_reduce.wgsl's
    order, so the sums are its bit for bit). Made by `gpu.ops.matmul.linear(..., leave_parts=True)`."""

    parts: Tensor  # f32 [split * rows, N]
    split: int
    rows: int  # rows of each part: the linear's t_max
