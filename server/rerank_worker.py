"""A worker per loaded reranker (a cross-encoder): the embedding worker's thread and shared batches, over
(query, document) pairs that come out as one relevance logit each instead of a vector.

A rerank request is one encoder batch of its pairs; concurrent requests to the same model share GPU passes as
embedding requests do (server/embedding_worker.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import cast

import numpy as np

from server.embedding_worker import EmbeddingWorker, _Request
from server.protocols import RerankModel
from server.thread_worker import load_on_own_device as _on_own_device


class NotAReranker(ValueError):
    """The configured model loads, but has no one-label classification head to score pairs with."""


def load_on_own_device(source: str, **kwargs: object) -> RerankModel:
    """Load a cross-encoder on a wgpu device of its own; a model without a classification head is refused."""
    from models.embeddings.engine import load_embedding_model

    model = _on_own_device(load_embedding_model, source, **kwargs)
    if not model.reranker:
        raise NotAReranker(f"{source} has no one-label sequence-classification head: it is not a cross-encoder")
    return cast(RerankModel, model)


class RerankWorker(EmbeddingWorker):
    """Loads one cross-encoder in its own thread, then scores queued pairs in shared batches."""

    kind = "rerank"
    model: RerankModel  # type: ignore[assignment]  # the embedding worker's model, with pairs and scores

    async def score(self, pairs: Sequence[tuple[Sequence[int], Sequence[int]]], retry_after_s: int) -> np.ndarray:
        """float32 [len(pairs)]: the relevance logit of each (ids, token types) pair.

        QueueFull when max_queue requests wait already; cancelling the awaiting task drops the request.
        """
        request = _Request([list(ids) for ids, _ in pairs], [list(types) for _, types in pairs])
        self._enqueue(request, retry_after_s)
        return await asyncio.wrap_future(request.future)

    # -- worker thread -------------------------------------------------------------------
    def warm_up(self, model: RerankModel) -> None:  # type: ignore[override]
        ids, types = model.tokenize_pair("Hello", "world")
        model.score([ids], [types])  # compiles the smallest bucket's pipelines

    def describe(self, model: RerankModel) -> str:  # type: ignore[override]
        return f"cross-encoder, up to {model.max_tokens} tokens per pair"

    def _compute(self, batch: list[_Request]) -> np.ndarray:
        types = [t for r in batch for t in (r.types or [[0] * len(ids) for ids in r.inputs])]
        return self.model.score([ids for r in batch for ids in r.inputs], types)
