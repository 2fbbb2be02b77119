"""Gemma 4's expert tensors from a GGUF onto the GPU, in the forms its MoE blocks compute with.

The experts' tensors of a MoE block are rearranged as they go up: gate and up per expert in one matrix; the
down projections as the file has them (the sparse expert matvec reads each expert's rows) or side by side (the
dense fallback's one product sums the experts' outputs). Other tensors load through models/formats/weights.py.
"""

from __future__ import annotations

import numpy as np
from gguf import MODEL_TENSOR

from gpu.weights import QuantWeight, row_bytes
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.formats.weights import Matrix, Uploader
from models.text.decoder import tensor_name

T = MODEL_TENSOR


def experts_gate_up(f: GGUFFile, up: Uploader, layer: int) -> QuantWeight:
    """ffn_gate_up_exps [E, 2I, D] as one [E * 2I, D] matrix; Ollama's separate gate and up tensors are
    interleaved per expert into the same layout."""
    name = tensor_name(T.FFN_GATE_UP_EXP, layer)
    if name in f.tensors:
        qtype, shape, raw = f.raw(name)
        return up.matrix(name, Matrix(qtype, shape[0], int(np.prod(shape[1:])), raw))
    gate, up_name = tensor_name(T.FFN_GATE_EXP, layer), tensor_name(T.FFN_UP_EXP, layer)
    (gt, gs, graw), (ut, us, uraw) = f.raw(gate), f.raw(up_name)
    if gt != ut or gs != us:
        raise GGUFFormatError(f"{gate} and {up_name} differ in type or shape")
    e = gs[2]
    raw = np.concatenate([graw.reshape(e, -1), uraw.reshape(e, -1)], axis=1).reshape(-1)
    return up.matrix(f"{gate}+up", Matrix(gt, gs[0], 2 * gs[1] * e, raw))


def experts_fit_one_binding(f: GGUFFile, layer: int, max_binding_bytes: int) -> bool:
    """Whether a layer's expert tensors (gate and up together) each fit one binding, as the sparse expert
    matvec (gpu/ops/moe.py) reads them."""
    def size(kind: MODEL_TENSOR) -> int:
        return int(f.tensor(tensor_name(kind, layer)).n_bytes)

    fused = tensor_name(T.FFN_GATE_UP_EXP, layer) in f.tensors
    gate_up = size(T.FFN_GATE_UP_EXP) if fused else size(T.FFN_GATE_EXP) + size(T.FFN_UP_EXP)
    return max(gate_up, size(T.FFN_DOWN_EXP)) <= max_binding_bytes


def experts_down(f: GGUFFile, up: Uploader, layer: int, sparse: bool) -> QuantWeight:
    """ffn_down_exps [E, D, I]: sparse, as the file has it ([E * D, I]: expert e's rows from e * D);
    dense, as one [D, E * I] matrix whose row d holds every expert's row d side by side (whole blocks,
    since I is a whole number of blocks), so one product sums the experts' outputs."""
    name = tensor_name(T.FFN_DOWN_EXP, layer)
    qtype, (i, d, e), raw = f.raw(name)
    if sparse:
        return up.matrix(name, Matrix(qtype, i, d * e, raw))
    stride = row_bytes(qtype, i)
    raw = np.ascontiguousarray(raw.reshape(e, d, stride).transpose(1, 0, 2)).reshape(-1)
    return up.matrix(name, Matrix(qtype, e * i, d, raw))
