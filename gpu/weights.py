"""Weights on the GPU exactly as GGUF stores them, split over bindings where too large.

A GGUF matrix of ne = [K, N] is N rows of K values; each row is K / block_size blocks of
type_size bytes. A weight larger than the device's max storage binding is cut at row
boundaries into shards, each its own buffer; ops over a weight emit one dispatch per shard
and offset their output by the shard's first row.
"""

from __future__ import annotations

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
    limit = max_shard_bytes or executor.device.limits.max_binding_bytes
    rows_per_shard = max(1, (limit - 4) // stride)
    shards = []
    for start in range(0, n, rows_per_shard):
        count = min(rows_per_shard, n - start)
        chunk = raw[start * stride:(start + count) * stride]
        tensor = Tensor(f"{name}[{start}:{start + count}]", (chunk.nbytes,), "bytes")
        tensor.buffer = executor.device.upload(chunk, tensor.name)
        shards.append(WeightShard(tensor, start, count))
    return QuantWeight(name, qtype, k, n, shards)
