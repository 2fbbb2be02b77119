"""The KV cache of one sequence: per layer, keys and values for every position.

Stored as u32 words: two f16 values per word (pack2x16float) by default, or one f32 per
word when exact arithmetic is wanted (parity tests). f16 halves the memory and the bytes
attention reads; its rounding moves Gemma 3 270M's logits by ~1e-3 (see tests/models).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpu.program import Executor
from gpu.tensor import Tensor

KV_DTYPES = ("f16", "f32")


@dataclass
class KVCache:
    n_ctx: int  # positions per layer
    kv_dtype: str  # "f16" or "f32"
    keys: list[Tensor]  # per layer: [n_ctx, width] words
    values: list[Tensor]

    @property
    def f16(self) -> bool:
        return self.kv_dtype == "f16"

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.keys + self.values)

    @classmethod
    def allocate(cls, executor: Executor, name: str, widths: list[int], n_ctx: int, kv_dtype: str) -> KVCache:
        """One key and one value tensor per layer; widths[i] = kv_heads * head_dim of layer i."""
        if kv_dtype not in KV_DTYPES:
            raise ValueError(f"kv_dtype must be one of {KV_DTYPES}, not {kv_dtype!r}")
        words = [(w // 2 if kv_dtype == "f16" else w) for w in widths]
        keys = [executor.tensor(f"{name}.k{i}", (n_ctx, n), "u32") for i, n in enumerate(words)]
        values = [executor.tensor(f"{name}.v{i}", (n_ctx, n), "u32") for i, n in enumerate(words)]
        return cls(n_ctx, kv_dtype, keys, values)


def rope_table(head_dim: int, n_ctx: int, base: float, scale: float = 1.0) -> np.ndarray:
    """(cos, sin) of position * inv_freq for every position and rotated pair: [n_ctx, head_dim/2, 2].

    Computed as HF transformers does (inv_freq and the angle rounded to f32, then cos/sin
    of that f32 angle), so the rotation matches the reference to an ulp. scale is linear
    RoPE scaling (positions divided by the factor).
    """
    exponent = np.arange(0, head_dim, 2, dtype=np.int64).astype(np.float32) / np.float32(head_dim)
    inv_freq = (np.float32(1.0) / np.power(np.float32(base), exponent, dtype=np.float32)).astype(np.float32)
    inv_freq = (inv_freq / np.float32(scale)).astype(np.float32)
    angles = (np.arange(n_ctx, dtype=np.float32)[:, None] * inv_freq[None, :]).astype(np.float32)
    table = np.stack([np.cos(angles.astype(np.float64)), np.sin(angles.astype(np.float64))], axis=-1)
    return table.astype(np.float32)
