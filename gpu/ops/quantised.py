"""Activations kept as 8-bit integers between two dispatches of a decode step (int8 activations): written by a
matvec's epilogue (kernels/matvec/store_q8.wgsl) or a residual norm (kernels/residual_norm_q8.wgsl), read by the
int8 matvecs (kernels/matvec/x_q8_buffer.wgsl)."""

from __future__ import annotations

from dataclasses import dataclass

from gpu.program import ProgramBuilder
from gpu.tensor import Tensor


@dataclass(frozen=True)
class QuantisedActivation:
    """An activation kept as int8 per 32 values (quantize_q8's rule) in one u32 tensor [t_max, width * 5 / 16]:
    a row's width / 4 words of q, then its width / 32 (d, exact sum) pairs as f32 bits. A decode gate-up writes
    its output so (kernels/matvec/store_q8.wgsl) for an int8 down projection to read (matvec/x_q8_buffer.wgsl),
    where a quantize_q8 dispatch between them would cost more than the int8 arithmetic saves."""

    tensor: Tensor
    width: int


def quantised_activation(builder: ProgramBuilder, name: str, t_max: int, width: int) -> QuantisedActivation:
    """A QuantisedActivation of t_max rows of width values (a multiple of 64: a row is whole vec4s)."""
    if width % 64:
        raise ValueError(f"{name}: a quantised activation needs rows of a multiple of 64 values, not {width}")
    return QuantisedActivation(builder.activation(name, (t_max, width * 5 // 16), "u32"), width)
