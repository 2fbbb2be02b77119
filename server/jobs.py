"""Jobs: what a request asks a model worker for, and the events that come back.

A Job holds a request's choices; the worker emits TextDelta and ChoiceDone events for it onto the
event loop (Job.emit, thread-safe), then the job's end. JobQueue is the bounded wait before the
batch; JobHandle is the event loop's end of a job (iterate its events; leaving cancels it).
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from models.text.grammar import TokenConstraint
from models.text.sampler import SamplingParams
from server.errors import to_hearth_error
from server.request_context import current_request_id

if TYPE_CHECKING:
    from server.protocols import ChatHandler
    from server.services.audio_inputs import PromptAudio
    from server.services.images import PromptImage


@dataclass(frozen=True)
class TokenInfo:
    """A sampled token as logprobs report it: its text, its bytes, its logprob and the alternatives."""

    id: int
    text: str
    bytes: list[int]
    logprob: float
    top: list[tuple[str, list[int], float]]


@dataclass(frozen=True)
class ChoiceSpec:
    """One sequence to generate."""

    index: int
    prompt_ids: list[int]
    sampling: SamplingParams
    max_tokens: int
    constraint: TokenConstraint | None = None  # the grammar its tokens follow (its own copy)
    images: tuple[PromptImage | PromptAudio, ...] = ()  # the prompt's images and audio clips, encoded by the
    # worker as the choice joins the batch


@dataclass(frozen=True)
class TextDelta:
    index: int
    text: str
    tokens: list[TokenInfo]


@dataclass(frozen=True)
class ChoiceDone:
    index: int
    finish_reason: str  # "stop" (end of sequence or a stop string) or "length"
    prompt_tokens: int
    completion_tokens: int  # every sampled token, those inside a stop string too
    # When the worker had the choice's first and last sampled tokens (time.perf_counter(), seconds): the model's
    # own times, not when text reached the client. None when it sampled none (cancelled before its prefill ended).
    first_token_at: float | None = None
    last_token_at: float | None = None
    stop_sequence: str | None = None  # the stop string that ended it, if one did
    cached_tokens: int = 0  # prompt tokens found in the prefix cache (not prefilled)


@dataclass(frozen=True)
class _JobFailed:
    error: BaseException


class _JobDone:
    """Marks a job's end once all its choices have ended."""


_JOB_DONE = _JobDone()
# What the worker thread hands the event loop for a job.
JobEvent = TextDelta | ChoiceDone | _JobFailed | _JobDone


@dataclass
class Job:
    """A request's work: its choices, stop strings and whether per-token logprobs are wanted.

    It keeps the id of the request it was made in, so the worker thread's log lines about it carry that id.
    """

    choices: list[ChoiceSpec]
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    stop_ids: frozenset[int] = frozenset()  # tokens that end a choice besides the model's end ids (never sent)
    shown_ids: frozenset[int] = frozenset()  # control tokens whose text the reply keeps (a tool format's markers)
    ignore_eos: bool = False  # the model's end ids do not end a choice (stop_ids and stop strings still do)
    cancelled: threading.Event = field(default_factory=threading.Event)
    request_id: str = field(default_factory=current_request_id)
    finished: bool = False  # the event loop has seen its end
    remaining: int = 0  # worker side: choices not yet ended
    finished_sent: bool = False  # worker side: its end (done or failed) has been emitted
    arrival: int = 0  # its place in the order of arrival (JobQueue.put)
    turn: int = -1  # worker side: its place in the admission rotation (-1 until the worker has seen it)
    _loop: asyncio.AbstractEventLoop | None = None
    _events: asyncio.Queue[JobEvent] | None = None
    _held: list[JobEvent] | None = None  # worker side: events held back since hold_events, for send_held

    def emit(self, event: JobEvent) -> None:
        """From the worker thread: hand an event to the event loop (dropped once the job is cancelled), or hold it
        for send_held while the worker routes a round (hold_events)."""
        if self._held is not None:
            self._held.append(event)
        else:
            _send([(self, [event])])


def hold_events(jobs: Iterable[Job]) -> None:
    """From the worker thread: hold the jobs' events (Job.emit) until send_held sends them all at once."""
    for job in jobs:
        job._held = []


def send_held(jobs: Iterable[Job]) -> None:
    """From the worker thread: the events held since hold_events, with one wake-up of the event loop for all of
    them (not one a token: a round of 32 streams at 8 tokens each would be 256)."""
    batch: list[tuple[Job, list[JobEvent]]] = []
    for job in jobs:
        events, job._held = job._held, None
        if events:
            batch.append((job, events))
    _send(batch)


def _send(batch: list[tuple[Job, list[JobEvent]]]) -> None:
    """The jobs' events to their event loops, one call_soon_threadsafe a loop."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[Job, list[JobEvent]]]] = {}
    for job, events in batch:
        if job._loop is not None and job._events is not None:
            by_loop.setdefault(job._loop, []).append((job, events))
    for loop, items in by_loop.items():
        try:
            loop.call_soon_threadsafe(_put_all, items)
        except RuntimeError:  # the loop has closed (server shutting down): nobody is listening any more
            for job, _ in items:
                job.cancelled.set()


def _put_all(items: list[tuple[Job, list[JobEvent]]]) -> None:
    """On the event loop: the events into their jobs' queues."""
    for job, events in items:
        assert job._events is not None
        for event in events:
            job._events.put_nowait(event)


class JobQueue:
    """A bounded wait, in order of arrival, that lets a job leave before its turn (freeing its place at once)."""

    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False
        self._arrivals = 0

    def put(self, job: Job) -> bool:
        with self._cond:
            if self._closed or len(self._jobs) >= self.max_waiting:
                return False
            self._arrivals += 1
            job.arrival = self._arrivals
            self._jobs.append(job)
            self._cond.notify()
            return True

    def wait(self) -> bool:
        """Block until a job waits (True) or the queue is closed (False)."""
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            return not self._closed

    def waiting(self) -> list[Job]:
        """The jobs waiting, oldest first, left in the queue (none once it is closed)."""
        with self._cond:
            return [] if self._closed else list(self._jobs)

    def take(self, job: Job) -> bool:
        """Remove `job` if it still waits (it may have been cancelled since it was seen)."""
        with self._cond:
            for i, waiting in enumerate(self._jobs):
                if waiting is job:  # by identity: jobs are dataclasses, equal when their fields are
                    del self._jobs[i]
                    return True
            return False

    @property
    def closed(self) -> bool:
        return self._closed

    def remove(self, job: Job) -> None:
        self.take(job)

    def close(self) -> list[Job]:
        """Stop the queue; the jobs still waiting are returned."""
        with self._cond:
            self._closed = True
            left, self._jobs = list(self._jobs), deque()
            self._cond.notify_all()
            return left

    def __len__(self) -> int:
        with self._cond:
            return len(self._jobs)


class JobHandle:
    """The event loop's end of a queued job: iterate its events; leaving early cancels it."""

    def __init__(self, worker: ChatHandler, job: Job) -> None:
        self.worker = worker
        self.job = job

    async def events(self) -> AsyncIterator[TextDelta | ChoiceDone]:
        """TextDelta and ChoiceDone events until the job ends; the worker's error is raised here. A choice's deltas
        that are waiting together (a round's tokens) come as one, so that a burst costs one chunk, not one a token."""
        queue = self.job._events
        assert queue is not None
        following: JobEvent | None = None  # taken from the queue while merging, not yet given
        try:
            while True:
                event = following if following is not None else await queue.get()
                following = None
                while isinstance(event, TextDelta) and not queue.empty():
                    following = queue.get_nowait()
                    if not isinstance(following, TextDelta) or following.index != event.index:
                        break
                    event = TextDelta(event.index, event.text + following.text, event.tokens + following.tokens)
                    following = None
                if isinstance(event, _JobDone):
                    self.job.finished = True
                    return
                if isinstance(event, _JobFailed):
                    self.job.finished = True
                    # As a HearthError the app answers it (a 500 for a GPU fault or a bug, logged with its
                    # traceback) and keeps the connection; a bare exception would make uvicorn drop it.
                    raise to_hearth_error(event.error) from event.error
                yield event
        finally:
            self.cancel()

    def cancel(self) -> None:
        """Stop the job if it is still queued or running (a no-op once it has finished)."""
        if not self.job.finished:
            self.worker.cancel(self.job)

    def __del__(self) -> None:
        # A stream whose response never started (its client left first) never runs its cleanup: the last
        # reference going away is then what frees the job's place in the queue.
        self.cancel()

    async def __aenter__(self) -> JobHandle:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.cancel()
