"""A worker thread per loaded model of the non-chat families (embeddings, speech, transcription).

The thread loads the model (on a wgpu device of its own), then runs queued jobs one at a time: a job is a
function of the model, run on the thread because the model's device, buffers and programs belong to it.
`call` returns a job's result; `stream` yields what a generator job produces, item by item, as the thread
makes it, so audio can go out while the rest is synthesised. Subclasses change how jobs are taken (the
embedding worker merges waiting requests into one GPU pass) and what warms a model up after loading.

    event loop                      worker thread
    call(fn) / stream(fn) --queue-->  fn(model)  --future / items--> back to the awaiting request
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, Self, TypeVar, cast

from config.settings import Settings
from models.registry import ModelEntry
from server.errors import QueueFull
from server.protocols import Loader
from server.worker_base import M, WorkerBase

log = logging.getLogger("hearth.worker")

T = TypeVar("T")


@dataclass
class Job(Generic[M]):
    """A function of the model, run on the worker thread; its outcome goes to `future`."""

    run: Callable[[M], object]
    future: concurrent.futures.Future[object] = field(default_factory=concurrent.futures.Future)


class Pending(Protocol):
    """What waits in a worker's queue: a Job, or a subclass's request; either ends by setting its future."""

    @property
    def future(self) -> concurrent.futures.Future[Any]: ...


class _Finished:
    """Marks the end of a streamed job's items."""


_FINISHED = _Finished()


class ThreadWorker(WorkerBase[M]):
    """Loads one model in its own thread, then runs queued jobs on it in order."""

    def __init__(self, name: str, source: str, loader: Loader, *, max_queue: int, warm_up: bool = True) -> None:
        super().__init__(name, source, loader, warm_up=warm_up, thread_name=f"hearth-{self.kind}-{name}")
        self.max_queue = max_queue
        self._pending: deque[Pending] = deque()  # Jobs, or a subclass's requests
        self._cond = threading.Condition()
        self._closed = False

    @classmethod
    def for_entry(cls, entry: ModelEntry, loader: Loader, settings: Settings, *, max_queue: int,
                  warm_up: bool) -> Self:
        """The worker for a registry entry of this class's kind."""
        return cls(entry.alias_of or entry.id, entry.source, loader, max_queue=max_queue, warm_up=warm_up)

    # -- event-loop side -----------------------------------------------------------------
    @property
    def queued(self) -> int:
        with self._cond:
            return len(self._pending)

    def _enqueue(self, item: Pending, retry_after_s: int) -> None:
        """Queue a job (or a subclass's request); QueueFull when max_queue wait already."""
        with self._cond:
            if self._closed or len(self._pending) >= self.max_queue:
                raise QueueFull(self.name, retry_after_s)
            self._pending.append(item)
            self._cond.notify()
        self.last_used = time.monotonic()

    async def call(self, fn: Callable[[M], T], retry_after_s: int) -> T:
        """fn(model), run on the worker thread after the jobs queued before it.

        Cancelling the awaiting task drops the job if it has not started (a started one runs to its end).
        """
        job = Job(fn)
        self._enqueue(job, retry_after_s)
        return cast(T, await asyncio.wrap_future(job.future))

    async def stream(self, fn: Callable[[M], Iterator[T]], retry_after_s: int) -> AsyncGenerator[T, None]:
        """What the generator fn(model) yields, each item as soon as the worker thread has made it.

        Leaving the `async for` early (the client went away) closes the generator before its next item.
        """
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[T | _Finished] = asyncio.Queue()
        stop = threading.Event()

        def produce(model: M) -> None:
            generator = fn(model)
            try:
                for item in generator:
                    loop.call_soon_threadsafe(items.put_nowait, item)
                    if stop.is_set():
                        break
            finally:
                generator.close()
            loop.call_soon_threadsafe(items.put_nowait, _FINISHED)

        job: Job[M] = Job(produce)
        self._enqueue(job, retry_after_s)
        finished = asyncio.ensure_future(asyncio.wrap_future(job.future))
        try:
            while True:
                getter = asyncio.ensure_future(items.get())
                await asyncio.wait({getter, finished}, return_when=asyncio.FIRST_COMPLETED)
                if getter.done():
                    item = getter.result()
                    if isinstance(item, _Finished):
                        break
                    yield item
                    continue
                getter.cancel()
                finished.result()  # the job failed before its first item or between items: raise its error
                while not items.empty():  # it finished: hand over what it made before the end mark
                    item = items.get_nowait()
                    if isinstance(item, _Finished):
                        return
                    yield item
                return
        finally:
            stop.set()
            job.future.cancel()  # drops the job if it never started
            if not finished.done():
                finished.cancel()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop serving: fail waiting jobs, let the running one finish, join the thread."""
        with self._cond:
            self._closed = True
            left, self._pending = list(self._pending), deque()
            self._cond.notify_all()
        for item in left:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(RuntimeError("the server is shutting down"))
        self._join(timeout)

    # -- worker thread -------------------------------------------------------------------
    def warm_up(self, model: M) -> None:
        """Run something small once after loading so the first request does not pay for compiling pipelines."""

    def describe(self, model: M) -> str:
        """A few words about the loaded model for the log line that says it is ready."""
        return type(model).__name__

    def _load(self) -> None:
        started = time.perf_counter()
        log.info("loading %s model %s from %s", self.kind, self.name, self.source)
        self.model = cast(M, self._loader(self.source, progress=self._on_progress))
        if self._warm_up:
            self.warm_up(self.model)
        self.progress = 1.0
        log.info("%s ready in %.1f s (%s)", self.name, time.perf_counter() - started, self.describe(self.model))

    def _wait_for_work(self) -> bool:
        """Block until something is queued (True) or the worker is closed (False). Hold self._cond."""
        while not self._pending and not self._closed:
            self._cond.wait()
        return not self._closed

    def _next_job(self) -> Job[M] | None:
        """The next job that has not been cancelled, marked running; None once closed."""
        with self._cond:
            while self._wait_for_work():
                job = cast(Job[M], self._pending.popleft())  # this class queues only Jobs
                if job.future.set_running_or_notify_cancel():
                    return job
            return None

    def _serve(self) -> None:
        """Run jobs in order until stopped; a job's error goes to its caller and the worker goes on."""
        while (job := self._next_job()) is not None:
            self.running = 1
            try:
                job.future.set_result(job.run(self.model))
            except BaseException as error:  # noqa: BLE001 - the caller gets the error; the worker goes on
                job.future.set_exception(error)
            finally:
                self.running = 0
                self.last_used = time.monotonic()


def load_on_own_device(load: Callable[..., M], source: str, **kwargs: object) -> M:
    """load(source, device=..., **kwargs) on a wgpu device of its own, so workers never share a device or a queue."""
    import os

    from gpu.device import Device, choose_adapter

    device = Device(choose_adapter(os.environ.get("HEARTH_ADAPTER")))
    return load(source, device=device, **kwargs)
