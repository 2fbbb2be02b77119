"""A stand-in for models.embeddings.engine.EmbeddingModel (its public API), for fast tests of whole servers.

One token per UTF-8 byte (ids 1..256) after a [CLS]-like id 0; embed() gives each sequence a unit vector made
from its ids, so equal inputs embed equally. Like the real model, embed() refuses sequences that are empty or
longer than max_tokens (the service must never send them).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np


class FakeEmbeddingModel:
    name = "fake-embedding"
    dimensions = 8
    max_tokens = 64
    vocab_size = 257
    matryoshka = True

    def tokenize(self, text: str, truncate: bool = False) -> list[int]:
        ids = [0, *(1 + b for b in text.encode("utf-8"))]
        return ids[: self.max_tokens] if truncate else ids

    def embed(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        out = np.zeros((len(batch), self.dimensions), np.float32)
        for row, ids in enumerate(batch):
            if not 0 < len(ids) <= self.max_tokens:
                raise ValueError(f"input {row} has {len(ids)} tokens; this model takes 1 to {self.max_tokens}")
            for position, token in enumerate(ids):
                out[row, (token + position) % self.dimensions] += 1.0
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def load(source: str, *, progress: Callable[[int, int], None] | None = None, **_: Any) -> FakeEmbeddingModel:
    """The embeddings loader tests put in settings.embeddings.loader."""
    if progress is not None:
        progress(1, 1)
    return FakeEmbeddingModel()
