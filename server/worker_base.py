"""What every model worker does the same way: a thread of its own loads one model, reports its progress, says when it
is ready (or why it failed), and is joined when the worker stops.

The workers differ in how they queue and serve requests: server/chat_worker.py's ChatWorker runs chat choices in a
continuous batch, server/thread_worker.py's ThreadWorker runs queued jobs one at a time. Each fills in `_load`
(build and warm up `self.model`), `_serve` (run until stopped) and `queued`.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from typing import Generic, TypeVar

from server.protocols import Loader, WorkerState

log = logging.getLogger("hearth.worker")
M = TypeVar("M")  # the loaded model's type


class WorkerBase(Generic[M]):
    """A model loaded in its own thread: state, progress and the ready signal that the model manager reads."""

    kind = "model"  # the ModelEntry kind a subclass serves
    model: M  # set by _load, on the worker thread, before the worker is ready

    def __init__(self, name: str, source: str, loader: Loader, *, warm_up: bool, thread_name: str) -> None:
        self.name = name
        self.source = source
        self._loader = loader
        self._warm_up = warm_up
        self._loaded: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name=thread_name, daemon=True)
        self.state: WorkerState = "loading"
        self.error: str | None = None
        self.progress = 0.0
        self.running = 0
        self.last_used = time.monotonic()

    # -- event-loop side -----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def queued(self) -> int:
        """Requests waiting for the worker thread (not yet running)."""
        raise NotImplementedError

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.queued == 0

    async def wait_ready(self) -> None:
        """Return once loaded; raise the load's exception if it failed."""
        await asyncio.wrap_future(self._loaded)

    def _join(self, timeout: float | None) -> None:
        """The last step of stopping, once the queue is closed: wait for the thread to end."""
        if self._thread.is_alive():
            self._thread.join(timeout)
        self.state = "stopped"

    # -- worker thread -------------------------------------------------------------------
    def _on_progress(self, done: int, total: int) -> None:
        fraction = done / total if total else 1.0
        if int(fraction * 10) > int(self.progress * 10) or done == total:
            # Loaders count tensors or bytes; show bytes in MB.
            unit, scale = ("MB", 1e6) if total >= 1e6 else ("", 1)
            log.info("loading %s: %3.0f%% (%.0f/%.0f%s)", self.name, 100 * fraction, done / scale, total / scale,
                     unit and f" {unit}")
        self.progress = fraction

    def _load(self) -> None:
        """Set self.model (and warm it up); runs on the worker thread."""
        raise NotImplementedError

    def _serve(self) -> None:
        """Serve requests until stopped; runs on the worker thread once the model is ready."""
        raise NotImplementedError

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
        self._serve()

