"""Tensor handles: a name, a shape, an element type and (once placed) a buffer range.

Activations are placed when their program is built (pooled by liveness); weights, caches
and inputs are placed at creation and never move.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import numpy as np

# Element types a kernel sees; "packed_f16" holds two f16 values per u32 (pack2x16float),
# which needs no shader extension, so f16 storage works on every adapter.
ELEMENT_BYTES = {"f32": 4, "u32": 4, "i32": 4, "packed_f16": 2, "bytes": 1}
NUMPY_DTYPES = {"f32": np.float32, "u32": np.uint32, "i32": np.int32, "packed_f16": np.float16}


class Lifetime(Enum):
    ACTIVATION = "activation"  # lives inside one step; its buffer is shared with others
    PERSISTENT = "persistent"  # weights, KV cache, inputs and outputs: owns its buffer


@dataclass(eq=False)
class Tensor:
    """A typed view of (part of) a GPU buffer. Shapes are row-major, outermost first."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    lifetime: Lifetime = Lifetime.PERSISTENT
    buffer: Any = None
    offset: int = 0  # bytes from the start of the buffer
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return (self.numel * ELEMENT_BYTES[self.dtype] + 3) & ~3

    def binding(self) -> dict[str, Any]:
        """The resource entry of a bind group for this tensor."""
        if self.buffer is None:
            raise RuntimeError(f"tensor {self.name} has no buffer yet (is its program built?)")
        return {"buffer": self.buffer, "offset": self.offset, "size": self.nbytes}

    def __repr__(self) -> str:
        return f"Tensor({self.name}, {list(self.shape)}, {self.dtype}, {self.lifetime.value})"
