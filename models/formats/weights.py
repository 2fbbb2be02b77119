"""One way to read a checkpoint's tensors and put them on the GPU, whatever file they come from.

    source = GGUFSource(GGUFFile(path))          # or DirSource(ModelDir(path), "model."), CT2Source, ONNXSource, ...
    up = Uploader(executor, source.total_bytes, progress)
    wq = up.matrix("blk.0.attn_q.weight", source.matrix("blk.0.attn_q.weight"))
    qkv = up.fused([source.matrix(n) for n in names])          # one matrix where their types allow
    norm = up.vector("blk.0.attn_norm.weight", source.array("blk.0.attn_norm.weight"))

A WeightSource names its tensors and gives each as a Matrix (rows of K values, in the file's block format or
float32) or as a float32 array; the Uploader uploads matrices, fused row groups (gpu/weights.py's concat_rows)
and vectors, counting the file bytes read for a progress callback and the GPU bytes held for the log.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, Protocol

import numpy as np
from gguf import GGMLQuantizationType, quants

from gpu.program import Executor
from gpu.tensor import Tensor
from gpu.weights import QuantWeight, concat_rows, upload_weight

if TYPE_CHECKING:
    from models.formats.gguf_file import GGUFFile
    from models.formats.safetensors_dir import ModelDir

Progress = Callable[[int, int], None]


class Matrix(NamedTuple):
    """A weight before upload: N rows of K values, as raw GGUF blocks or a float32 array."""

    qtype: GGMLQuantizationType
    k: int
    n: int
    data: np.ndarray  # uint8 GGUF bytes, or float32 [n, k]


class WeightSource(Protocol):
    """A checkpoint's tensors by name."""

    def has(self, name: str) -> bool:
        """Whether the checkpoint holds a tensor of that name."""
        ...

    def matrix(self, name: str) -> Matrix:
        """A 2-D (or higher, rows flattened) tensor as it is stored: the file's block type, K values a row."""
        ...

    def array(self, name: str) -> np.ndarray:
        """A tensor as float32, dequantised on the host (norms, tables looked up on the host)."""
        ...


class GGUFSource:
    """Weights of a GGUF file by tensor name: matrices stay in their block format."""

    def __init__(self, f: GGUFFile) -> None:
        self.f = f

    @property
    def total_bytes(self) -> int:
        return self.f.tensor_bytes

    def has(self, name: str) -> bool:
        return name in self.f.tensors

    def matrix(self, name: str) -> Matrix:
        qtype, shape, raw = self.f.raw(name)
        return Matrix(qtype, shape[0], int(np.prod(shape[1:])) if len(shape) > 1 else 1, raw)

    def array(self, name: str) -> np.ndarray:
        qtype, shape, raw = self.f.raw(name)
        rows = int(np.prod(shape[1:])) if len(shape) > 1 else 1
        values = dequantize_rows(raw.reshape(rows, -1), qtype)
        return values.reshape(tuple(reversed(shape))) if len(shape) > 1 else values.reshape(-1)


class DirSource:
    """Weights of a safetensors model directory (transformers, sentence-transformers) by checkpoint name, under an
    optional prefix: matrices become float32, or with keep_f16 stay float16 where the file stores them so."""

    def __init__(self, d: ModelDir, prefix: str = "", *, keep_f16: bool = False) -> None:
        self.d, self.prefix, self.keep_f16 = d, prefix, keep_f16

    def has(self, name: str) -> bool:
        return self.d.has(self.prefix + name)

    def matrix(self, name: str) -> Matrix:
        if self.keep_f16:
            return host_matrix(self.d.stored(self.prefix + name))
        w = self.d.tensor(self.prefix + name)
        return Matrix(GGMLQuantizationType.F32, w.shape[1], w.shape[0], w)

    def array(self, name: str) -> np.ndarray:
        return self.d.tensor(self.prefix + name)


def host_matrix(array: np.ndarray) -> Matrix:
    """A matrix held as a numpy array (rows flattened past the last axis): float16 stays float16 (F16 on the GPU),
    any other dtype becomes float32."""
    a = np.asarray(array)
    a = np.ascontiguousarray(a) if a.dtype == np.float16 else np.ascontiguousarray(a, np.float32)
    k = a.shape[-1]
    return Matrix(GGMLQuantizationType.F16 if a.dtype == np.float16 else GGMLQuantizationType.F32, k, a.size // k, a)


def dequantize_rows(raw: np.ndarray, qtype: GGMLQuantizationType) -> np.ndarray:
    """float32 [rows, K] from rows of GGUF bytes (uint8 [rows, row bytes])."""
    if qtype == GGMLQuantizationType.F32:
        return raw.view(np.float32).copy()
    if qtype == GGMLQuantizationType.F16:
        return raw.view(np.float16).astype(np.float32)
    if qtype == GGMLQuantizationType.BF16:
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return quants.dequantize(raw, qtype).astype(np.float32, copy=False)


def fuse_rows(matrices: Sequence[Matrix]) -> Matrix | None:
    """The matrices stacked row after row (a fused QKV), or None when their types or widths differ."""
    first = matrices[0]
    if any(m.qtype != first.qtype or m.k != first.k for m in matrices):
        return None
    data = np.concatenate([np.asarray(m.data).reshape(m.n, -1) for m in matrices], axis=0)
    return Matrix(first.qtype, first.k, sum(m.n for m in matrices), data)


@dataclass(frozen=True)
class Fused:
    """Matrices with the same input stacked along the rows: one product computes them all."""

    weight: QuantWeight
    parts: list[int]  # first row (output column) of each matrix


class Uploader:
    """Puts weights on the GPU, counting the source bytes read (progress: bytes done of total) and the GPU bytes
    held (uploaded_bytes; shards are padded to 4 bytes)."""

    def __init__(self, executor: Executor, total_bytes: int, progress: Progress | None) -> None:
        self.executor, self.total, self.progress = executor, max(1, total_bytes), progress
        self.done = 0
        self.uploaded_bytes = 0

    def _count(self, read: int, held: int) -> None:
        self.done += read
        self.uploaded_bytes += held
        if self.progress:
            self.progress(min(self.done, self.total), self.total)

    def matrix(self, name: str, m: Matrix) -> QuantWeight:
        weight = upload_weight(self.executor, name, m.qtype, m.k, m.n, m.data)
        self._count(np.asarray(m.data).nbytes, weight.nbytes)
        return weight

    def fused(self, named: Sequence[tuple[str, Matrix]]) -> list[Fused]:
        """Matrices with the same input, as few as possible (gpu/weights.py's concat_rows), in order."""
        groups = concat_rows([(name, m.qtype, m.k, m.n, np.asarray(m.data).reshape(-1).view(np.uint8))
                              for name, m in named])
        out = []
        for group in groups:
            weight = upload_weight(self.executor, group.name, group.qtype, group.k, group.rows, group.raw)
            self._count(group.file_bytes, weight.nbytes)
            out.append(Fused(weight, group.row_starts))
        return out

    def vector(self, name: str, data: np.ndarray) -> Tensor:
        data = np.ascontiguousarray(data, np.float32).reshape(-1)
        tensor = self.executor.tensor(name, data.shape, data=data)
        self._count(data.nbytes, tensor.nbytes)
        return tensor

    def tensor(self, name: str, data: np.ndarray) -> Tensor:
        """A float32 tensor kept in its shape (conv kernels, tables in the model's own layout), counted as read."""
        data = np.ascontiguousarray(data, np.float32)
        tensor = self.executor.tensor(name, data.shape, data=data)
        self._count(data.nbytes, tensor.nbytes)
        return tensor

    def array(self, name: str, data: np.ndarray) -> Tensor:
        """A tensor the model derives from its weights (not read from the file: no progress)."""
        data = np.ascontiguousarray(data, np.float32)
        return self.executor.tensor(name, data.shape, data=data)

    def host(self, nbytes: int) -> None:
        """Count bytes kept on the host (embedding tables looked up there)."""
        self._count(nbytes, 0)
