"""A worker per loaded embedding model: a thread that owns the model (its wgpu device, weights, programs).

Requests queue their token sequences; the thread takes every request waiting when it comes round, up to
one GPU pass of work (models.embeddings.engine.TOKEN_BUCKETS[-1] tokens or MAX_SEQUENCES sequences; a
request larger than that alone still runs whole, in several passes), and embeds them together: concurrent
requests share one GPU pass. Results go back through concurrent futures wrapped for the event loop; a
request whose client has gone is cancelled, and skipped if it has not started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np

from server.protocols import EmbeddingModel, Loader
from server.thread_worker import ThreadWorker
from server.thread_worker import load_on_own_device as _on_own_device


def load_on_own_device(source: str, **kwargs: object) -> EmbeddingModel:
    """Load an embedding model on a wgpu device of its own, so workers never share a device or a queue."""
    from models.embeddings.engine import load_embedding_model

    return _on_own_device(load_embedding_model, source, **kwargs)


@dataclass
class _Request:
    inputs: list[list[int]]
    types: list[list[int]] | None = None  # each input's token types (a reranker's pairs)
    future: concurrent.futures.Future[np.ndarray] = field(default_factory=concurrent.futures.Future)

    @property
    def tokens(self) -> int:
        return sum(len(i) for i in self.inputs)


class EmbeddingWorker(ThreadWorker[EmbeddingModel]):
    """Loads one embedding model in its own thread, then embeds queued requests in shared batches."""

    kind = "embedding"

    def __init__(self, name: str, source: str, loader: Loader, *, max_queue: int, warm_up: bool = True,
                 max_batch_tokens: int | None = None, max_batch_sequences: int | None = None) -> None:
        from models.embeddings.engine import MAX_SEQUENCES, TOKEN_BUCKETS

        super().__init__(name, source, loader, max_queue=max_queue, warm_up=warm_up)
        self.max_batch_tokens = max_batch_tokens or TOKEN_BUCKETS[-1]
        self.max_batch_sequences = max_batch_sequences or MAX_SEQUENCES
        self.batches = 0  # GPU batches run, for tests and logs

    async def embed(self, inputs: Sequence[Sequence[int]], retry_after_s: int) -> np.ndarray:
        """float32 [len(inputs), dimensions], computed with whatever other requests are waiting.

        QueueFull when max_queue requests wait already; cancelling the awaiting task drops the request.
        """
        request = _Request([list(i) for i in inputs])
        self._enqueue(request, retry_after_s)
        return await asyncio.wrap_future(request.future)

    # -- worker thread -------------------------------------------------------------------
    def warm_up(self, model: EmbeddingModel) -> None:
        model.embed([model.tokenize("Hello")])  # compiles the smallest bucket's pipelines

    def describe(self, model: EmbeddingModel) -> str:
        return f"{model.dimensions} dimensions, up to {model.max_tokens} tokens per input"

    def _next_batch(self) -> list[_Request] | None:
        """The requests waiting now, up to one pass (the first one whatever its size); None once closed."""
        with self._cond:
            if not self._wait_for_work():
                return None
            batch: list[_Request] = []
            tokens = sequences = 0
            while self._pending:
                request = cast(_Request, self._pending[0])  # this class queues only _Requests
                if request.future.cancelled():
                    self._pending.popleft()
                    continue
                if batch and (tokens + request.tokens > self.max_batch_tokens
                              or sequences + len(request.inputs) > self.max_batch_sequences):
                    break
                self._pending.popleft()
                if request.future.set_running_or_notify_cancel():
                    batch.append(request)
                    tokens += request.tokens
                    sequences += len(request.inputs)
            return batch

    def _compute(self, batch: list[_Request]) -> np.ndarray:
        """One row per input of the batch's requests, in order: their embeddings (a subclass's scores)."""
        return self.model.embed([ids for r in batch for ids in r.inputs])

    def _serve(self) -> None:
        while (batch := self._next_batch()) is not None:
            if not batch:
                continue
            self.running = len(batch)
            try:
                vectors = self._compute(batch)
                self.batches += 1
                start = 0
                for request in batch:
                    request.future.set_result(vectors[start:start + len(request.inputs)])
                    start += len(request.inputs)
            except BaseException as error:  # noqa: BLE001 - the requests get the error; the worker goes on
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(error)
            finally:
                self.running = 0
                self.last_used = time.monotonic()
