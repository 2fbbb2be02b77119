"""Host side of row-wise ops on a step's activations (kernels/residual_add.wgsl, copy_rows.wgsl, sigmoid_gate.wgsl).
Activations are f32 row-major [T_MAX, width]; kernels process the step's first n_tokens rows (or n_out for the
output-row gathers).
"""

from __future__ import annotations

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor


def residual_add(b: ProgramBuilder, x: Tensor, y: Tensor, bias: Tensor | None) -> None:
    """x += y (+ bias) on the step's rows (kernels/residual_add.wgsl)."""
    d = x.shape[1]
    b.dispatch("residual_add", {"D": d, "HAS_BIAS": bias is not None}, [b.step, x, y, bias or y],
               workgroup_grid(-(-x.shape[0] * d // 256)))


def copy_rows(b: ProgramBuilder, src: Tensor, pairs: Tensor, dst: Tensor, width: int, *, src_offset: int = 0,
              dst_offset: int = 0, by_out: bool = False) -> None:
    """dst[pairs[r].y, dst_offset:+width] = src[pairs[r].x, src_offset:+width] (kernels/copy_rows.wgsl)."""
    rows = pairs.shape[0]
    constants = {"WIDTH": width, "SRC_STRIDE": src.shape[1], "SRC_OFFSET": src_offset, "DST_STRIDE": dst.shape[1],
                 "DST_OFFSET": dst_offset, "BY_OUT": by_out}
    b.dispatch("copy_rows", constants, [b.step, src, pairs, dst], workgroup_grid(-(-rows * width // 256)))


def sigmoid_gate(b: ProgramBuilder, x: Tensor, g: Tensor, *, heads: int, head_dim: int, g_offset: int = 0,
                 g_head_stride: int | None = None) -> None:
    """x[:, h * head_dim + j] *= sigmoid(g[:, g_offset + h * g_head_stride + j]) on the step's rows
    (kernels/sigmoid_gate.wgsl); g_head_stride defaults to head_dim (the gates side by side)."""
    stride = head_dim if g_head_stride is None else g_head_stride
    if x.shape[1] != heads * head_dim:
        raise ValueError(f"sigmoid_gate: x {x} is not [rows, {heads} x {head_dim}]")
    if stride < head_dim or g.shape[1] < g_offset + (heads - 1) * stride + head_dim:
        raise ValueError(f"sigmoid_gate: g {g} has no {heads} gates of {head_dim} from column {g_offset}, {stride} "
                         "apart")
    constants = {"D": head_dim, "HEADS": heads, "G_STRIDE": g.shape[1], "G_OFFSET": g_offset,
                 "G_HEAD_STRIDE": stride}
    b.dispatch("sigmoid_gate", constants, [b.step, g, x], workgroup_grid(-(-x.shape[0] * x.shape[1] // 256)))
