"""A worker thread per loaded model of the non-chat families (embeddings, speech, transcription).

The thread loads the model (on a wgpu device of its own), then runs queued jobs one at a time: a job is a
function of the model, run on the thread because the model's device, buffers and programs belong to it.
`call` returns a job's result; `stream` yields what a generator job produces, item by item, as the thread
makes it, so audio can go out while the rest is synthesised. Subclasses change how jobs are taken (the
embedding worker merges waiting requests into one GPU pass) and what warms a model up after loading.

A request that goes away (its client left, its timeout passed, the server stops) takes its job with it: a
waiting job leaves the queue at once, and a running one is asked to stop. Models end a job at their next step
boundary when the `should_stop` they were given (the worker's `should_stop`) says so, by raising
concurrent.futures.CancelledError; nobody hears of it.

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
from server.errors import ModelUnavailable, QueueFull
from server.protocols import Loader
from server.worker_base import M, WorkerBase

log = logging.getLogger("hearth.worker")

T = TypeVar("T")


@dataclass
class Job(Generic[M]):
    """A function of the model, run on the worker thread; its outcome goes to `future`."""

    run: Callable[[M], object]
    future: concurrent.futures.Future[object] = field(default_factory=concurrent.futures.Future)
    stop: threading.Event = field(default_factory=threading.Event)  # set when nobody wants the result any more


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
        self._running_stop: threading.Event | None = None  # the running job's stop flag (worker thread)

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
        """Queue a job (or a subclass's request); QueueFull when max_queue wait already.

        Cancelling the item's future (its request went away) takes it out of the queue at once, freeing its place.
        """
        with self._cond:
            if self._closed or len(self._pending) >= self.max_queue:
                raise QueueFull(self.name, retry_after_s)
            self._pending.append(item)
            self._cond.notify()
        item.future.add_done_callback(lambda future: self._withdraw(item) if future.cancelled() else None)
        self.last_used = time.monotonic()

    def _withdraw(self, item: Pending) -> None:
        with self._cond:
            try:
                self._pending.remove(item)
            except ValueError:  # taken by the worker thread already, or by stop()
                pass

    def should_stop(self) -> bool:
        """On the worker thread, during a job: whether the job's request has gone or the worker is stopping, so
        the model should end the job at its next step boundary."""
        stop = self._running_stop
        return self._closed or (stop is not None and stop.is_set())

    async def call(self, fn: Callable[[M], T], retry_after_s: int) -> T:
        """fn(model), run on the worker thread after the jobs queued before it.

        Cancelling the awaiting task drops the job if it has not started, and asks a started one to stop (the
        model ends it at its next step boundary).
        """
        job = Job(fn)
        self._enqueue(job, retry_after_s)
        try:
            return cast(T, await asyncio.wrap_future(job.future))
        finally:
            if not job.future.done():
                job.stop.set()

    async def stream(self, fn: Callable[[M], Iterator[T]], retry_after_s: int) -> AsyncGenerator[T, None]:
        """What the generator fn(model) yields, each item as soon as the worker thread has made it.

        Leaving the `async for` early (the client went away) closes the generator before its next item, or the
        model ends its current item at its next step boundary.
        """
        loop = asyncio.get_running_loop()
        items: asyncio.Queue[T | _Finished] = asyncio.Queue()

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
        stop = job.stop
        self._enqueue(job, retry_after_s)
        finished = asyncio.ensure_future(asyncio.wrap_future(job.future))
        getter: asyncio.Future[T | _Finished] | None = None
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
            if getter is not None:
                getter.cancel()
            job.future.cancel()  # drops the job if it never started
            if not finished.done():
                finished.cancel()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop serving: fail waiting jobs (503), ask the running one to stop at its next step, join the thread
        (for at most `timeout` seconds: a daemon thread still inside a step does not hold up the process's exit)."""
        with self._cond:
            self._closed = True
            left, self._pending = list(self._pending), deque()
            self._cond.notify_all()
        for item in left:
            if item.future.set_running_or_notify_cancel():
                item.future.set_exception(_shutting_down())
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
            self._running_stop = job.stop
            try:
                job.future.set_result(job.run(self.model))
            except BaseException as error:  # noqa: BLE001 - the caller gets the error; the worker goes on
                if isinstance(error, concurrent.futures.CancelledError) and self._closed:
                    error = _shutting_down()  # stopped for the shutdown: a caller still waiting gets a 503
                job.future.set_exception(error)
            finally:
                self._running_stop = None
                self.running = 0
                self.last_used = time.monotonic()


def _shutting_down() -> ModelUnavailable:
    return ModelUnavailable("The server is shutting down; the request was cancelled. Retry on another instance.")


def load_on_own_device(load: Callable[..., M], source: str, adapter: int | None = None, **kwargs: object) -> M:
    """load(source, device=..., **kwargs) on a wgpu device of its own, so workers never share a device or a queue.

    adapter: an index of gpu.device.list_adapters() (a replica's, server/replicas.py); None: the adapter
    HEARTH_ADAPTER names, else the best one."""
    import os

    from gpu.device import Device, choose_adapter, list_adapters

    if adapter is not None:
        device = list_adapters()[adapter].device()
    else:
        device = Device(choose_adapter(os.environ.get("HEARTH_ADAPTER")))
    return load(source, device=device, **kwargs)
