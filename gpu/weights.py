"""Weights on the GPU as GGUF stores them, split over bindings where too large.

A GGUF matrix of ne = [K, N] is N rows of K values; each row is K / block_size blocks of
type_size bytes. A weight larger than the device's max storage binding is cut at row
boundaries into shards, each its own buffer; ops over a weight emit one dispatch per shard
and offset their output by the shard's first row.

Matrices that share an input may be concatenated along their rows (concat_rows), one dispatch computing all
their products; where their types differ but each is exactly a Q8_0 matrix, those of other types are
re-encoded as Q8_0 blocks with every value unchanged (as_q8_0).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

from gpu.program import Executor
from gpu.tensor import Tensor

# Weight types the matmul and embedding kernels read, named as kernels/quant/<name>.wgsl.
SUPPORTED_TYPES = {
    GGMLQuantizationType.F32: "f32",
    GGMLQuantizationType.F16: "f16",
    GGMLQuantizationType.BF16: "bf16",
    GGMLQuantizationType.Q8_0: "q8_0",
    GGMLQuantizationType.Q4_0: "q4_0",
    GGMLQuantizationType.Q4_1: "q4_1",
    GGMLQuantizationType.Q5_0: "q5_0",
    GGMLQuantizationType.Q5_1: "q5_1",
    GGMLQuantizationType.Q4_K: "q4_k",
    GGMLQuantizationType.Q5_K: "q5_k",
    GGMLQuantizationType.Q6_K: "q6_k",
}


@dataclass
class WeightShard:
    tensor: Tensor  # raw bytes of rows [row_start, row_start + n_rows)
    row_start: int
    n_rows: int


@dataclass
class QuantWeight:
    """A [N, K] matrix in a GGML block format, resident on the GPU as stored in the file."""

    name: str
    qtype: GGMLQuantizationType
    k: int  # values per row (GGUF ne[0])
    n: int  # rows (GGUF ne[1])
    shards: list[WeightShard]

    @property
    def type_name(self) -> str:
        return SUPPORTED_TYPES[self.qtype]

    @property
    def row_bytes(self) -> int:
        return row_bytes(self.qtype, self.k)

    @property
    def nbytes(self) -> int:
        return sum(s.tensor.nbytes for s in self.shards)


def row_bytes(qtype: GGMLQuantizationType, k: int) -> int:
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    if k % block_size:
        raise ValueError(f"row of {k} values is not a whole number of {qtype.name} blocks ({block_size})")
    return k // block_size * type_size


def upload_weight(
    executor: Executor, name: str, qtype: GGMLQuantizationType, k: int, n: int, data: np.ndarray,
    max_shard_bytes: int | None = None,
) -> QuantWeight:
    """Upload a GGUF matrix (its raw bytes, as memory-mapped from the file) in row shards."""
    if qtype not in SUPPORTED_TYPES:
        raise ValueError(f"{name}: weight type {qtype.name} is not supported")
    raw = np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), dtype=np.uint8)
    stride = row_bytes(qtype, k)
    if raw.nbytes != stride * n:
        raise ValueError(f"{name}: {raw.nbytes} bytes for {n} rows of {stride}")
    device_limit = executor.device.limits.max_binding_bytes
    limit = max_shard_bytes or device_limit
    rows_per_shard = max(1, (limit - 4) // stride)
    shards = []
    for start in range(0, n, rows_per_shard):
        count = min(rows_per_shard, n - start)
        chunk = raw[start * stride:(start + count) * stride]
        # Bound with zeros up to a multiple of 16 bytes (within the device's binding limit): a kernel reading the
        # weight as vec4 words (matvec_q8_0_rows.wgsl takes a block pair's 17th word from the vec4 after its
        # first 16) then finds a shard's last words inside the binding, whose count of vec4 rounds down. On an
        # H100 the last row of a shard of 68-byte pairs summed wrong without this: its bounds checks drop the
        # partial vec4 (lavapipe's do not).
        size = max(chunk.nbytes, min((chunk.nbytes + 15) & ~15, device_limit & ~3))
        tensor = Tensor(f"{name}[{start}:{start + count}]", (size,), "bytes")
        tensor.buffer = executor.device.create_buffer(size, tensor.name)
        executor.device.write(tensor.buffer, chunk, tensor.name)
        shards.append(WeightShard(tensor, start, count))
    return QuantWeight(name, qtype, k, n, shards)


# Block types whose values are all d * (an integer of at most 8 bits) with one f16 d per 32 values, so that each
# block is a Q8_0 block exactly: the same d, its integers as int8 (Q4_0: q - 8, Q5_0: q - 16).
_EXACT_IN_Q8_0 = frozenset({GGMLQuantizationType.Q4_0, GGMLQuantizationType.Q5_0, GGMLQuantizationType.Q8_0})


def as_q8_0(qtype: GGMLQuantizationType, raw: np.ndarray) -> np.ndarray:
    """The bytes of a Q4_0, Q5_0 or Q8_0 matrix re-encoded as Q8_0 with every value unchanged (34 bytes a
    block instead of 18 or 22)."""
    if qtype is GGMLQuantizationType.Q8_0:
        return raw
    if qtype not in _EXACT_IN_Q8_0:
        raise ValueError(f"{qtype.name} values are not Q8_0 values")
    block_bytes = GGML_QUANT_SIZES[qtype][1]
    blocks = np.frombuffer(memoryview(np.ascontiguousarray(raw)).cast("B"), np.uint8).reshape(-1, block_bytes)
    qs = blocks[:, -16:]
    q = np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.int16)  # values 0..15 low nibbles, 16..31 high
    if qtype is GGMLQuantizationType.Q5_0:  # bit i of qh (bytes 2..5) is value i's fifth bit
        qh = blocks[:, 2:6].copy().view("<u4")
        q |= ((qh >> np.arange(32, dtype=np.uint32)) & 1).astype(np.int16) << 4
        q -= 16
    else:
        q -= 8
    out = np.empty((len(blocks), 34), np.uint8)
    out[:, :2] = blocks[:, :2]
    out[:, 2:] = q.astype(np.int8).view(np.uint8)
    return out.reshape(-1)


def _common_type(types: Sequence[GGMLQuantizationType]) -> GGMLQuantizationType | None:
    if all(t == types[0] for t in types):
        return types[0]
    if all(t in _EXACT_IN_Q8_0 for t in types):
        return GGMLQuantizationType.Q8_0
    return None


@dataclass
class RowConcat:
    """Matrices of one input width as one: their rows one after another (row_starts: each one's first row)."""

    name: str
    qtype: GGMLQuantizationType
    k: int
    rows: int
    row_starts: list[int]
    raw: np.ndarray
    file_bytes: int  # bytes of the sources as stored, before any re-encoding


def concat_rows(matrices: Sequence[tuple[str, GGMLQuantizationType, int, int, np.ndarray]]) -> list[RowConcat]:
    """Consecutive matrices (name, type, K, rows, their bytes as a flat uint8 array, as GGUFFile.raw gives
    them) with the same input as few matrices as possible, so that one dispatch computes their products:
    concatenated along the rows (their bytes, since rows are contiguous in every GGML type) where their types
    agree, or where each is exactly a Q8_0 matrix (Q4_0, Q5_0 and Q8_0: llama.cpp's Q4_K_M files give Gemma 3
    270M and 1B a Q5_0 q and k beside a Q8_0 v in half the layers; as one Q8_0 matrix the q and k read 55% more
    bytes but the step has one dispatch less)."""
    groups: list[list[tuple[str, GGMLQuantizationType, int, int, np.ndarray]]] = []
    for m in matrices:
        group = groups[-1] if groups else None
        if group and group[0][2] == m[2] and _common_type([g[1] for g in group] + [m[1]]) is not None:
            group.append(m)
        else:
            groups.append([m])
    out = []
    for group in groups:
        qtype = _common_type([g[1] for g in group])
        assert qtype is not None
        parts = [raw if t == qtype else as_q8_0(t, raw) for _, t, _, _, raw in group]
        rows = [g[3] for g in group]
        out.append(RowConcat("+".join(g[0] for g in group), qtype, group[0][2], sum(rows),
                             [sum(rows[:j]) for j in range(len(group))],
                             np.concatenate(parts) if len(parts) > 1 else parts[0], sum(g[4].nbytes for g in group)))
    return out
