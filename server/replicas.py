"""A chat model on several GPUs of one machine: one replica (a ChatWorker with a device of its own) per adapter.

Settings name the adapters (`adapters = ["0", "1"]`, a name such as `"H200"`, or `"all"`; config/settings.py);
the model manager then builds a ReplicaSet for the model instead of one ChatWorker. To the services it is one chat
worker: `submit` hands a job to the replica with the shortest queue (jobs waiting plus jobs in its batch; ties go to
the replica chosen least recently), `cancel` finds it wherever it is. /health and /metrics list each replica.

A replica whose device is lost (gpu.errors.is_device_lost: a driver reset, a GPU fallen off the bus) is marked down:
the requests in its batch end with a 503 that says so (their tokens so far are gone with the device), the requests
still waiting in its queue move to the other replicas, and no new request goes to it. When every replica is down
the model is `failed` and requests get a 503.

    submit(job) -> shortest queue -> ChatReplica 0 (adapter 0) ... ChatReplica n (adapter n)
                                        device lost -> waiting jobs -> the others
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from config.settings import Settings
from gpu.device import AdapterSlot
from gpu.errors import is_device_lost
from models.registry import ModelEntry
from models.text.chat_template import ChatTemplate
from server.chat_worker import ChatWorker, _ChoiceRun
from server.errors import ModelUnavailable, QueueFull
from server.jobs import Job, JobHandle, _JobFailed
from server.protocols import ChatModel, Loader, WorkerState

log = logging.getLogger("hearth.worker")


@dataclass(frozen=True)
class ReplicaInfo:
    """What /health and /metrics tell of one replica."""

    replica: int
    adapter: str  # the adapter's index and name, "0: NVIDIA H200"
    state: WorkerState
    queued: int
    running: int
    requests: int  # jobs it has been given (moved ones included)
    error: str | None


class ChatReplica(ChatWorker):
    """A ChatWorker on one adapter that tells its set when its device is lost."""

    def __init__(self, *args: Any, replica: int, adapter: AdapterSlot, owner: ReplicaSet, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.replica = replica
        self.adapter = adapter
        self.down = False  # its device was lost: no job goes to it any more
        self.requests = 0
        self._owner = owner
        self._load_kwargs["adapter"] = adapter.index  # the loader makes its device there (thread_worker)

    def _end_run(self, run: _ChoiceRun, runs: dict[tuple[int, int], _ChoiceRun], error: BaseException | None) -> None:
        if error is not None and is_device_lost(error):
            self._owner._lost(self, error)
            error = ModelUnavailable(
                f"The GPU serving this request (replica {self.replica} of `{self.name}`) was lost; the request was "
                "stopped. Retry it: the model's other replicas serve it.", code="device_lost",
                headers={"Retry-After": "1"})
        super()._end_run(run, runs, error)

    def take(self, job: Job) -> bool:
        """Queue a job that is already submitted (its event queue stays the caller's), for another replica."""
        job.turn = -1  # its place in this replica's rotation is set when the worker first sees it
        if not self._queue.put(job):
            return False
        self.requests += 1
        return True

    def drain(self) -> list[Job]:
        """Take every waiting job out of the queue (the queue stays open, and empty: nothing is routed here)."""
        return [job for job in self._queue.waiting() if self._queue.take(job)]


class ReplicaSet:
    """One chat model as several ChatReplicas, one per adapter; the ChatHandler the services see."""

    kind = "text"

    @classmethod
    def for_entry(cls, entry: ModelEntry, loader: Loader, settings: Settings, *, max_queue: int, warm_up: bool,
                  adapters: list[AdapterSlot]) -> ReplicaSet:
        """A replica of a chat model's registry entry on each adapter; max_queue is each replica's."""
        replicas = ReplicaSet(entry.alias_of or entry.id, entry.source)
        for index, adapter in enumerate(adapters):
            replica = ChatReplica(
                f"{replicas.name}#{index}", entry.source, loader, max_queue=max_queue,
                max_batch=settings.limits.max_batch, context_length=entry.context_length, kv_dtype=entry.kv_dtype,
                int8_activations=entry.int8_activations, warm_up=warm_up, replica=index, adapter=adapter,
                owner=replicas, prefix_caching=settings.prefix_caching, compile_ahead=settings.compile_ahead,
                steps_per_submit=settings.steps_per_submit,
                jump_forward=settings.jump_forward)
            replica.name = replicas.name  # its errors (queue full, ...) name the model the client asked for
            replicas.replicas.append(replica)
        return replicas

    def __init__(self, name: str, source: str) -> None:
        self.name = name
        self.source = source
        self.replicas: list[ChatReplica] = []
        self._lock = threading.Lock()  # routing against a replica going down (the event loop vs a worker thread)
        self._chosen = 0  # a clock: the replica chosen least recently wins a tie
        self._last_chosen: dict[int, int] = {}
        self._stopped = False

    # -- the Worker protocol ---------------------------------------------------------------
    @property
    def state(self) -> WorkerState:
        """loading while any replica loads; ready once none does and one serves; failed when none can serve."""
        states = [r.state for r in self.replicas]
        if self._stopped:
            return "stopped"
        if "loading" in states:
            return "loading"
        return "ready" if any(self._serving(r) for r in self.replicas) else "failed"

    @property
    def error(self) -> str | None:
        if self.state != "failed":
            return None
        return "; ".join(f"replica {r.replica}: {r.error}" for r in self.replicas if r.error) or None

    @property
    def progress(self) -> float:
        return sum(r.progress for r in self.replicas) / max(1, len(self.replicas))

    @property
    def running(self) -> int:
        return sum(r.running for r in self.replicas)

    @property
    def queued(self) -> int:
        return sum(r.queued for r in self.replicas)

    @property
    def idle(self) -> bool:
        return all(r.idle for r in self.replicas)

    @property
    def last_used(self) -> float:
        return max(r.last_used for r in self.replicas)

    @last_used.setter
    def last_used(self, value: float) -> None:
        for replica in self.replicas:
            replica.last_used = value

    def start(self) -> None:
        for replica in self.replicas:
            replica.start()

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop every replica (their threads are joined one after another, each for at most `timeout`)."""
        self._stopped = True
        for replica in self.replicas:
            replica.stop(timeout)

    async def wait_ready(self) -> None:
        """Return once every replica has loaded or failed; raise the first failure when none loaded."""
        outcomes = await asyncio.gather(*(r.wait_ready() for r in self.replicas), return_exceptions=True)
        if all(isinstance(o, BaseException) for o in outcomes):
            raise outcomes[0]  # type: ignore[misc]

    # -- the ChatHandler protocol ------------------------------------------------------------
    @property
    def model(self) -> ChatModel:
        """A serving replica's model (every replica loads the same file): its tokenizer, context and so on."""
        return self._any().model

    @property
    def chat_template(self) -> ChatTemplate | None:
        return self._any().chat_template

    def submit(self, job: Job, retry_after_s: int) -> JobHandle:
        """Queue a job on the replica with the shortest queue; QueueFull when every replica's queue is full."""
        job._loop = asyncio.get_running_loop()
        job._events = asyncio.Queue()
        with self._lock:
            for replica in self._by_load():
                if replica.take(job):
                    self._chosen += 1
                    self._last_chosen[replica.replica] = self._chosen
                    replica.last_used = time.monotonic()
                    return JobHandle(self, job)
            if not any(self._serving(r) for r in self.replicas):
                raise ModelUnavailable(f"Every replica of `{self.name}` has stopped: " + (self.error or "stopped"))
        raise QueueFull(self.name, retry_after_s)

    def cancel(self, job: Job) -> None:
        job.cancelled.set()
        for replica in self.replicas:  # it waits in one queue at most; taking it from the others is a no-op
            replica.cancel(job)

    def status(self) -> list[ReplicaInfo]:
        """Each replica's state and load, for /health and /metrics."""
        return [ReplicaInfo(r.replica, f"{r.adapter.index}: {r.adapter.name}", r.state, r.queued, r.running,
                            r.requests, r.error) for r in self.replicas]

    # -- routing -----------------------------------------------------------------------------
    @staticmethod
    def _serving(replica: ChatReplica) -> bool:
        return replica.state == "ready" and not replica.down

    def _any(self) -> ChatReplica:
        return next((r for r in self.replicas if self._serving(r)), self.replicas[0])

    def _by_load(self) -> list[ChatReplica]:
        """Serving replicas, shortest queue (waiting + running jobs) first, the least recently chosen on a tie."""
        serving = [r for r in self.replicas if self._serving(r)]
        return sorted(serving, key=lambda r: (r.queued + r.running, self._last_chosen.get(r.replica, 0)))

    def _lost(self, replica: ChatReplica, error: BaseException) -> None:
        """On the lost replica's thread: mark it down and move its waiting jobs to the others (a job none can take
        ends with a 503)."""
        with self._lock:
            if replica.down:
                return
            replica.down = True
            replica.state = "failed"
            replica.error = f"the device was lost ({type(error).__name__}: {error})"
            moved = replica.drain()
            others = [r for r in self._by_load() if r is not replica]
            log.error("%s: replica %d (adapter %s) lost its device; %d waiting requests move to %d other replicas",
                      self.name, replica.replica, replica.adapter.name, len(moved), len(others))
            for job in moved:
                if not any(other.take(job) for other in sorted(others, key=lambda r: r.queued + r.running)):
                    job.cancelled.set()
                    job.emit(_JobFailed(ModelUnavailable(
                        f"The GPU of the replica `{self.name}` had queued this request on was lost and no other "
                        "replica could take it; retry later.", code="device_lost", headers={"Retry-After": "1"})))
