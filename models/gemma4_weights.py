"""Gemma 4's tensors from a GGUF onto the GPU, in the forms models/gemma4.py computes with.

Matrices go up as the file stores them (sharded at the binding limit by gpu.weights), except where one
product can stand for several: projections with the same input and type fused along the rows, and the
experts' tensors of a MoE block rearranged (gate and up per expert; the down projections side by side).
Tensor names come from gguf-py's constants (TENSOR_NAMES) with their suffix.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from gguf import MODEL_TENSOR, TENSOR_NAMES, GGMLQuantizationType

from gpu.program import Executor
from gpu.tensor import Tensor
from gpu.weights import QuantWeight, concat_rows, row_bytes, upload_weight
from models.gguf_file import GGUFFile, GGUFFormatError

Progress = Callable[[int, int], None]
T = MODEL_TENSOR


def tensor_name(kind: MODEL_TENSOR, layer: int | None = None, suffix: str = "weight") -> str:
    """A tensor's GGUF name: gguf-py's template for the kind, the layer filled in, and the suffix."""
    name = TENSOR_NAMES[kind]
    return (name.format(bid=layer) if layer is not None else name) + "." + suffix


class WeightLoader:
    """Uploads GGUF tensors by name, reporting bytes done to a progress callback."""

    def __init__(self, executor: Executor, f: GGUFFile, progress: Progress | None) -> None:
        self.executor, self.f, self.progress = executor, f, progress
        self.total = f.tensor_bytes
        self.read_bytes = 0
        self.uploaded_bytes = 0

    def _done(self, file_bytes: int, gpu_bytes: int) -> None:
        self.read_bytes += file_bytes
        self.uploaded_bytes += gpu_bytes
        if self.progress:
            self.progress(self.read_bytes, self.total)

    def _upload(self, name: str, qtype: GGMLQuantizationType, k: int, n: int, raw: np.ndarray) -> QuantWeight:
        weight = upload_weight(self.executor, name, qtype, k, n, raw)
        self._done(raw.nbytes, weight.nbytes)
        return weight

    def matrix(self, name: str) -> QuantWeight:
        qtype, shape, raw = self.f.raw(name)
        return self._upload(name, qtype, shape[0], int(np.prod(shape[1:])), raw)

    def vector(self, name: str) -> Tensor:
        qtype, _, raw = self.f.raw(name)
        if qtype == GGMLQuantizationType.BF16:  # unquantised Ollama blobs may keep small tensors in BF16
            data = (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
        else:
            data = self.f.f32(name)
        tensor = self.executor.tensor(name, data.shape, data=data)
        self._done(data.nbytes, tensor.nbytes)
        return tensor

    def array(self, name: str, data: np.ndarray) -> Tensor:
        data = np.asarray(data, np.float32)
        return self.executor.tensor(name, data.shape, data=data)

    def fused(self, names: list[str]) -> list[tuple[QuantWeight, list[int]]]:
        """Matrices with the same input, as few as possible (gpu/weights.py's concat_rows)."""
        matrices = []
        for name in names:
            qtype, shape, raw = self.f.raw(name)
            matrices.append((name, qtype, shape[0], shape[1], raw))
        out = []
        for group in concat_rows(matrices):
            weight = upload_weight(self.executor, group.name, group.qtype, group.k, group.rows, group.raw)
            self._done(group.file_bytes, weight.nbytes)
            out.append((weight, group.row_starts))
        return out

    def experts_gate_up(self, layer: int) -> QuantWeight:
        """ffn_gate_up_exps [E, 2I, D] as one [E * 2I, D] matrix; Ollama's separate gate and up tensors are
        interleaved per expert into the same layout."""
        name = tensor_name(T.FFN_GATE_UP_EXP, layer)
        if name in self.f.tensors:
            return self.matrix(name)
        gate, up = tensor_name(T.FFN_GATE_EXP, layer), tensor_name(T.FFN_UP_EXP, layer)
        (gt, gs, graw), (ut, us, uraw) = self.f.raw(gate), self.f.raw(up)
        if gt != ut or gs != us:
            raise GGUFFormatError(f"{gate} and {up} differ in type or shape")
        e = gs[2]
        raw = np.concatenate([graw.reshape(e, -1), uraw.reshape(e, -1)], axis=1).reshape(-1)
        return self._upload(f"{gate}+up", gt, gs[0], 2 * gs[1] * e, raw)

    def experts_fit_one_binding(self, layer: int) -> bool:
        """Whether a layer's expert tensors (gate and up together) each fit one binding, as the sparse expert
        kernel (kernels/moe_matvec.wgsl) reads them."""
        size = lambda kind: int(self.f.tensor(tensor_name(kind, layer)).n_bytes)  # noqa: E731
        fused = tensor_name(T.FFN_GATE_UP_EXP, layer) in self.f.tensors
        gate_up = size(T.FFN_GATE_UP_EXP) if fused else size(T.FFN_GATE_EXP) + size(T.FFN_UP_EXP)
        return max(gate_up, size(T.FFN_DOWN_EXP)) <= self.executor.device.limits.max_binding_bytes

    def experts_down(self, layer: int, sparse: bool) -> QuantWeight:
        """ffn_down_exps [E, D, I]: sparse, as the file has it ([E * D, I]: expert e's rows from e * D);
        dense, as one [D, E * I] matrix whose row d holds every expert's row d side by side (whole blocks,
        since I is a whole number of blocks), so one product sums the experts' outputs."""
        name = tensor_name(T.FFN_DOWN_EXP, layer)
        qtype, (i, d, e), raw = self.f.raw(name)
        if sparse:
            return self._upload(name, qtype, i, d * e, raw)
        stride = row_bytes(qtype, i)
        raw = np.ascontiguousarray(raw.reshape(e, d, stride).transpose(1, 0, 2)).reshape(-1)
        return self._upload(name, qtype, e * i, d, raw)
