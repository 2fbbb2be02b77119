"""A stand-in for a loaded cross-encoder (models/embeddings/engine.py's EmbeddingModel over a BERT sequence
classifier, its reranking API), for fast tests of whole servers.

One token per UTF-8 byte (ids 3..258) between [CLS] = 1 and [SEP] = 2, the query's tokens of type 0 and the
document's of type 1, as a BERT pair. score() is the number of the query's words that appear in the document
minus 0.01 per document token: predictable orderings, ties broken by length. Like the real model it refuses pairs
that are empty, too long, or whose types do not match their ids.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

CLS, SEP = 1, 2


def _bytes(ids: Sequence[int]) -> str:
    return bytes(i - 3 for i in ids).decode("utf-8", errors="replace")


class FakeReranker:
    name = "fake-reranker"
    max_tokens = 128
    reranker = True

    def tokenize_pair(self, query: str, document: str, truncate: bool = False) -> tuple[list[int], list[int]]:
        a = [3 + b for b in query.encode("utf-8")]
        b = [3 + b for b in document.encode("utf-8")]
        while truncate and len(a) + len(b) + 3 > self.max_tokens:
            (a if len(a) > len(b) else b).pop()
        return [CLS, *a, SEP, *b, SEP], [0] * (len(a) + 2) + [1] * (len(b) + 1)

    def score(self, batch: Sequence[Sequence[int]], token_types: Sequence[Sequence[int]]) -> np.ndarray:
        out = np.zeros(len(batch), np.float32)
        for row, (ids, types) in enumerate(zip(batch, token_types)):
            if not 0 < len(ids) <= self.max_tokens or len(types) != len(ids):
                raise ValueError(f"pair {row} has {len(ids)} tokens and {len(types)} types")
            query = [i for i, t in zip(ids, types) if t == 0 and i > SEP]
            document = [i for i, t in zip(ids, types) if t == 1 and i > SEP]
            words = set(_bytes(document).lower().split())
            out[row] = sum(w in words for w in _bytes(query).lower().split()) - 0.01 * len(document)
        return out


def load(source: str, *, progress: Callable[[int, int], None] | None = None, **_: Any) -> FakeReranker:
    """The rerank loader tests put in settings.rerank.loader."""
    if progress is not None:
        progress(1, 1)
    return FakeReranker()
