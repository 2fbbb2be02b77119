"""A worker per loaded embedding model: a thread that owns the model (its wgpu device, weights, programs).

Requests queue their token sequences; the thread takes every request waiting when it comes round, up to
one GPU pass of work (models.embedding_model.TOKEN_BUCKETS[-1] tokens or MAX_SEQUENCES sequences; a
request larger than that alone still runs whole, in several passes), and embeds them together: concurrent
requests share one GPU pass. Results go back through concurrent futures wrapped for the event loop; a
request whose client has gone is cancelled, and skipped if it has not started.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from server.errors import QueueFull

log = logging.getLogger("hearth.worker")

EmbeddingLoader = Callable[..., Any]  # (source, *, progress) -> EmbeddingModel


def load_on_own_device(source: str, **kwargs: Any) -> Any:
    """Load an embedding model on a wgpu device of its own, so workers never share a device or a queue."""
    import os

    from gpu.device import Device, choose_adapter
    from models.embedding_model import load_embedding_model

    device = Device(choose_adapter(os.environ.get("HEARTH_ADAPTER")))
    return load_embedding_model(source, device=device, **kwargs)


@dataclass
class _Request:
    inputs: list[list[int]]
    future: concurrent.futures.Future[np.ndarray] = field(default_factory=concurrent.futures.Future)

    @property
    def tokens(self) -> int:
        return sum(len(i) for i in self.inputs)


class EmbeddingWorker:
    """Loads one embedding model in its own thread, then embeds queued requests in shared batches."""

    kind = "embedding"

    def __init__(self, name: str, source: str, loader: EmbeddingLoader, *, max_queue: int, warm_up: bool = True,
                 max_batch_tokens: int | None = None, max_batch_sequences: int | None = None) -> None:
        from models.embedding_model import MAX_SEQUENCES, TOKEN_BUCKETS

        self.name = name
        self.source = source
        self._loader = loader
        self._warm_up = warm_up
        self.max_queue = max_queue
        self.max_batch_tokens = max_batch_tokens or TOKEN_BUCKETS[-1]
        self.max_batch_sequences = max_batch_sequences or MAX_SEQUENCES
        self._pending: deque[_Request] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._loaded: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name=f"hearth-embeddings-{name}", daemon=True)
        self.model: Any = None
        self.state = "loading"
        self.error: str | None = None
        self.progress = 0.0
        self.running = 0
        self.batches = 0  # GPU batches run, for tests and logs
        self.last_used = time.monotonic()

    # -- event-loop side -----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._pending)

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.queued == 0

    async def wait_ready(self) -> None:
        """Return once loaded; raise the load's exception if it failed."""
        await asyncio.wrap_future(self._loaded)

    async def embed(self, inputs: Sequence[Sequence[int]], retry_after_s: int) -> np.ndarray:
        """float32 [len(inputs), dimensions], computed with whatever other requests are waiting.

        QueueFull when max_queue requests wait already; cancelling the awaiting task drops the request.
        """
        request = _Request([list(i) for i in inputs])
        with self._cond:
            if self._closed or len(self._pending) >= self.max_queue:
                raise QueueFull(self.name, retry_after_s)
            self._pending.append(request)
            self._cond.notify()
        self.last_used = time.monotonic()
        return await asyncio.wrap_future(request.future)

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop serving: fail waiting requests, let the running batch finish, join the thread."""
        with self._cond:
            self._closed = True
            left, self._pending = list(self._pending), deque()
            self._cond.notify_all()
        for request in left:
            if request.future.set_running_or_notify_cancel():
                request.future.set_exception(RuntimeError("the server is shutting down"))
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.state = "stopped"

    # -- worker thread -------------------------------------------------------------------
    def _on_progress(self, done: int, total: int) -> None:
        fraction = done / total if total else 1.0
        if int(fraction * 10) > int(self.progress * 10) or done == total:
            log.info("loading %s: %3.0f%% (%.0f/%.0f MB)", self.name, 100 * fraction, done / 1e6, total / 1e6)
        self.progress = fraction

    def _load(self) -> None:
        started = time.perf_counter()
        log.info("loading embedding model %s from %s", self.name, self.source)
        self.model = self._loader(self.source, progress=self._on_progress)
        if self._warm_up:  # compile the smallest bucket's pipelines now, not on the first request
            self.model.embed([self.model.tokenize("Hello")])
        self.progress = 1.0
        log.info("%s ready in %.1f s (%d dimensions, up to %d tokens per input)", self.name,
                 time.perf_counter() - started, self.model.dimensions, self.model.max_tokens)

    def _next_batch(self) -> list[_Request] | None:
        """The requests waiting now, up to one pass (the first one whatever its size); None once closed."""
        with self._cond:
            while not self._pending and not self._closed:
                self._cond.wait()
            if self._closed:
                return None
            batch: list[_Request] = []
            tokens = sequences = 0
            while self._pending:
                request = self._pending[0]
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

    def _run(self) -> None:
        try:
            self._load()
        except BaseException as error:  # noqa: BLE001 - reported to every waiting request and to /health
            log.exception("loading %s failed", self.name)
            self.state, self.error = "failed", f"{type(error).__name__}: {error}"
            self._loaded.set_exception(error)
            return
        self.state = "ready"
        self._loaded.set_result(None)
        while (batch := self._next_batch()) is not None:
            if not batch:
                continue
            self.running = len(batch)
            try:
                vectors = self.model.embed([ids for r in batch for ids in r.inputs])
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
