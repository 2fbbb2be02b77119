"""A worker per loaded model: a thread that owns the model (its wgpu device, weights, KV cache, executor).

Requests reach it through a bounded queue and run one sequence at a time (until continuous batching);
a job's choices run one after another. Tokens travel back to the event loop as events put on an
asyncio.Queue with loop.call_soon_threadsafe. A job's cancel flag is checked at every token: a client
that goes away stops its generation within one token, and the session (its KV cache) goes back to the
model at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from models.chat_template import ChatTemplate
from models.generate import generate
from models.sampler import SampledToken, SamplingParams
from server.errors import QueueFull, to_hearth_error
from server.text_stream import TextStream

log = logging.getLogger("hearth.worker")

Loader = Callable[..., Any]  # (source, *, progress, kv_dtype, context_length) -> TextModel


def load_on_own_device(source: str, **kwargs: Any) -> Any:
    """Load a text model on a wgpu device of its own, so workers never share a device or a queue."""
    import os

    from gpu.device import Device, choose_adapter
    from models.text_model import load_text_model

    device = Device(choose_adapter(os.environ.get("HEARTH_ADAPTER")))
    return load_text_model(source, device=device, **kwargs)


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


@dataclass(frozen=True)
class _JobFailed:
    error: BaseException


_JOB_DONE = object()


@dataclass
class Job:
    """A request's work: its choices, stop strings and whether per-token logprobs are wanted."""

    choices: list[ChoiceSpec]
    stop: tuple[str, ...] = ()
    logprobs: bool = False
    cancelled: threading.Event = field(default_factory=threading.Event)
    finished: bool = False
    _loop: asyncio.AbstractEventLoop | None = None
    _events: asyncio.Queue[Any] | None = None

    def emit(self, event: Any) -> None:
        """From the worker thread: hand an event to the event loop (dropped once the job is cancelled)."""
        if self._loop is None or self._events is None:
            return
        try:
            self._loop.call_soon_threadsafe(self._events.put_nowait, event)
        except RuntimeError:  # the loop has closed (server shutting down): nobody is listening any more
            self.cancelled.set()


class JobQueue:
    """A bounded FIFO that lets a cancelled job leave before its turn (freeing its place at once)."""

    def __init__(self, max_waiting: int) -> None:
        self.max_waiting = max_waiting
        self._jobs: deque[Job] = deque()
        self._cond = threading.Condition()
        self._closed = False

    def put(self, job: Job) -> bool:
        with self._cond:
            if self._closed or len(self._jobs) >= self.max_waiting:
                return False
            self._jobs.append(job)
            self._cond.notify()
            return True

    def get(self) -> Job | None:
        """The next job, waiting for one; None once closed."""
        with self._cond:
            while not self._jobs and not self._closed:
                self._cond.wait()
            return None if self._closed else self._jobs.popleft()

    def remove(self, job: Job) -> None:
        with self._cond:
            if job in self._jobs:
                self._jobs.remove(job)

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


class ModelWorker:
    """Loads one model in its own thread, then serves its queue until stopped."""

    def __init__(self, name: str, source: str, loader: Loader, *, max_queue: int, context_length: int | None = None,
                 kv_dtype: str = "f16", warm_up: bool = True) -> None:
        self.name = name
        self.source = source
        self._loader = loader
        self._load_kwargs = {"kv_dtype": kv_dtype, "context_length": context_length}
        self._warm_up = warm_up
        self._queue = JobQueue(max_queue)
        self._loaded: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._thread = threading.Thread(target=self._run, name=f"hearth-worker-{name}", daemon=True)
        self.model: Any = None
        self.chat_template: ChatTemplate | None = None
        self.state = "loading"
        self.error: str | None = None
        self.progress = 0.0
        self.running = 0
        self.last_used = time.monotonic()
        self._current: Job | None = None

    # -- event-loop side -----------------------------------------------------------------
    def start(self) -> None:
        self._thread.start()

    @property
    def queued(self) -> int:
        return len(self._queue)

    @property
    def idle(self) -> bool:
        return self.running == 0 and self.queued == 0

    async def wait_ready(self) -> None:
        """Return once loaded; raise the load's exception if it failed."""
        await asyncio.wrap_future(self._loaded)

    def submit(self, job: Job, retry_after_s: int) -> JobHandle:
        """Queue a job (on the event loop's thread); QueueFull when too many wait already."""
        job._loop = asyncio.get_running_loop()
        job._events = asyncio.Queue()
        if not self._queue.put(job):
            raise QueueFull(self.name, retry_after_s)
        self.last_used = time.monotonic()
        return JobHandle(self, job)

    def cancel(self, job: Job) -> None:
        job.cancelled.set()
        self._queue.remove(job)

    def stop(self, timeout: float | None = 10.0) -> None:
        """Stop serving: cancel waiting jobs, let the running one see its cancel flag, join the thread."""
        for job in self._queue.close():
            job.cancelled.set()
            job.emit(_JobFailed(RuntimeError("the server is shutting down")))
        current = self._current
        if current is not None:  # stops within a token
            current.cancelled.set()
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
        started = time.perf_counter()
        log.info("loading %s from %s", self.name, self.source)
        self.model = self._loader(self.source, progress=self._on_progress, **self._load_kwargs)
        tokenizer = self.model.tokenizer
        self.chat_template = chat_template_of(tokenizer)
        if self._warm_up:  # compile the prefill and decode pipelines now, not on the first request
            session = self.model.new_session()
            try:
                logits = session.prefill(tokenizer.encode("Hello", add_bos=True))
                session.decode(int(logits.argmax()))
            finally:
                session.close()
        self.progress = 1.0
        log.info("%s ready in %.1f s (context %d tokens%s)", self.name, time.perf_counter() - started,
                 self.model.context_length, ", built-in Gemma chat format" if self.chat_template.builtin else "")

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
        while (job := self._queue.get()) is not None:
            if job.cancelled.is_set():
                continue
            self.running, self._current = 1, job
            try:
                for spec in job.choices:
                    if job.cancelled.is_set():
                        break
                    self._run_choice(job, spec)
                job.emit(_JOB_DONE)
            except BaseException as error:  # noqa: BLE001 - the request gets the error; the worker goes on
                job.emit(_JobFailed(error))
            finally:
                self.running, self._current = 0, None
                self.last_used = time.monotonic()

    def _token_info(self, token: SampledToken) -> TokenInfo:
        top = [(*_token_text(self.model.tokenizer, tid), lp) for tid, lp in token.top]
        return TokenInfo(token.id, *_token_text(self.model.tokenizer, token.id), token.logprob, top)

    def _run_choice(self, job: Job, spec: ChoiceSpec) -> None:
        model = self.model
        session = model.new_session()
        stream: TextStream[TokenInfo] = TextStream(model.tokenizer.stream_decoder(), job.stop)
        tokens = generate(model, session, spec.prompt_ids, spec.sampling, spec.max_tokens)
        count, finish = 0, "length"
        try:
            for token in tokens:
                count += 1
                if job.cancelled.is_set():
                    return
                piece = stream.push(token.id, self._token_info(token) if job.logprobs else None)
                if piece:
                    job.emit(TextDelta(spec.index, piece.text, piece.tokens if job.logprobs else []))
                if stream.stopped:
                    finish = "stop"
                    break
            else:
                finish = "stop" if count < spec.max_tokens else "length"  # fewer tokens: end of sequence
        finally:
            tokens.close()
            session.close()  # the KV cache goes back to the model for the next request
        piece = stream.flush()
        if piece:
            job.emit(TextDelta(spec.index, piece.text, piece.tokens if job.logprobs else []))
        job.emit(ChoiceDone(spec.index, finish, len(spec.prompt_ids), count))


def chat_template_of(tokenizer: Any) -> ChatTemplate:
    """The tokenizer's chat template (the built-in Gemma format when it has none) with its special tokens."""
    bos = tokenizer.id_to_piece(tokenizer.bos_id) if tokenizer.bos_id >= 0 else ""  # bos_id is -1 when absent
    eos = tokenizer.id_to_piece(min(tokenizer.eos_ids)) if tokenizer.eos_ids else ""
    return ChatTemplate(getattr(tokenizer, "chat_template", None), bos_token=bos, eos_token=eos)


def _token_text(tokenizer: Any, token_id: int) -> tuple[str, list[int]]:
    """A token's text and bytes for logprobs; bytes that are not whole UTF-8 show as `\\xe2` escapes."""
    to_bytes = getattr(tokenizer, "id_to_bytes", None)
    if to_bytes is not None:
        raw = bytes(to_bytes(token_id))
    else:  # a tokenizer without id_to_bytes: SentencePiece pieces, "<0xAB>" for byte fallback
        piece = tokenizer.id_to_piece(token_id)
        is_byte = len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")
        raw = bytes([int(piece[3:5], 16)]) if is_byte else piece.replace("\u2581", " ").encode("utf-8")
    return raw.decode("utf-8", "backslashreplace"), list(raw)


class JobHandle:
    """The event loop's end of a queued job: iterate its events; leaving early cancels it."""

    def __init__(self, worker: ModelWorker, job: Job) -> None:
        self.worker = worker
        self.job = job

    async def events(self) -> AsyncIterator[TextDelta | ChoiceDone]:
        """TextDelta and ChoiceDone events until the job ends; the worker's error is raised here."""
        assert self.job._events is not None
        try:
            while True:
                event = await self.job._events.get()
                if event is _JOB_DONE:
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
