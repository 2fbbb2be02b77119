"""Gemma 4's clipped linears (transformers' Gemma4ClippableLinear), in its vision and audio towers: y = W x with the
input, and then the output, clamped to bounds the checkpoint stores beside the weight (llama.cpp's converter writes
them as `<name>.input_min`, `input_max`, `output_min`, `output_max` scalars)."""

from __future__ import annotations

from gpu.ops import encoder as ops
from gpu.ops.matmul import linear
from gpu.program import ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight
from models.formats.gguf_file import GGUFFile

Bounds = tuple[float | None, float | None, float | None, float | None]  # input lo, hi, output lo, hi
CLAMP_LIMIT = 3.0e38  # a bound past this (the buffers' +-inf default) clamps nothing a float32 can hold


def read_bounds(f: GGUFFile, base: str) -> Bounds | None:
    """A clipped linear's bounds (`<base>.input_min` ... scalars), each None where the file has none or it is
    infinite; None where all are."""
    values: list[float | None] = []
    for suffix in ("input_min", "input_max", "output_min", "output_max"):
        name = f"{base}.{suffix}"
        value = float(f.f32(name).reshape(-1)[0]) if name in f.tensors else None
        values.append(value if value is not None and abs(value) < CLAMP_LIMIT else None)
    return None if all(v is None for v in values) else (values[0], values[1], values[2], values[3])


def clipped_linear(b: ProgramBuilder, weight: QuantWeight, x: Tensor, y: Tensor, rows: int, bounds: Bounds | None,
                   tag: str) -> None:
    """y = W x in f32 (a tower runs once an input, whatever the executor's int8_matmuls), its input and output held
    to bounds (kernels/clamp.wgsl) where given; tag names the activations it adds."""
    if bounds is None:
        linear(b, weight, x, y, rows, int8=False)
        return
    lo, hi, out_lo, out_hi = bounds
    if lo is not None or hi is not None:
        clipped = b.activation(f"{tag}_in", x.shape)
        ops.clamp(b, x, clipped, -CLAMP_LIMIT if lo is None else lo, CLAMP_LIMIT if hi is None else hi)
        x = clipped
    if out_lo is None and out_hi is None:
        linear(b, weight, x, y, rows, int8=False)
        return
    raw = b.activation(f"{tag}_raw", y.shape)
    linear(b, weight, x, raw, rows, int8=False)
    ops.clamp(b, raw, y, -CLAMP_LIMIT if out_lo is None else out_lo, CLAMP_LIMIT if out_hi is None else out_hi)
