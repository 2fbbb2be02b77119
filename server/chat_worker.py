"""The chat model worker: a thread per loaded chat model that owns it (its wgpu device, weights, KV cache, executor).

Requests (server/jobs.py) reach it through a bounded queue; their choices join the model's running batch
(models.text.batch.BatchGenerator: continuous batching) as soon as it has room for them, and leave it
when they end. Tokens travel back to the event loop as events put on an asyncio.Queue, a round's events for all
jobs with one loop.call_soon_threadsafe (server/jobs.py's hold_events and send_held). Cancel flags are checked at
every round of the batch: a client that goes away leaves the batch within one round, and its KV pages go back to
the pool.

Fairness. Places in the batch go to the jobs in turn (round-robin), one choice per job per turn: a job that
waits gets a place before any other job gets a second one since it began waiting. A job with choices in the
batch never takes its last free place (it runs at most max_batch - 1 at once): a request that arrives while
one of many choices fills the batch is admitted at once, and otherwise within one place per job ahead of it
in turn, however many choices those jobs have. The batch then prefills it within a round or so, whatever the
prompts of the others (models/text/batch.py shares its prefill). Each round (one generator.step()) holds the
adapter's turn (gpu/turns.py) and lets it go, so models loaded on the same GPU alternate round by round
instead of one starving the others.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from dataclasses import dataclass
from typing import cast

from PIL import Image

from config.settings import Settings
from models.registry import ModelEntry
from models.text.batch import EndEvent, Event
from models.text.chat_template import ChatTemplate
from models.text.images import ImageSpan
from models.text.sampler import SampledToken
from server.errors import QueueFull
from server.jobs import (
    _JOB_DONE,
    ChoiceDone,
    ChoiceSpec,
    Job,
    JobHandle,
    JobQueue,
    TextDelta,
    TokenInfo,
    _JobFailed,
    hold_events,
    send_held,
)
from server.media_rows import MediaRows
from server.protocols import BatchGenerator, ChatModel, Loader, TextTokenizer, adapter_turns
from server.request_context import logging_as
from server.services.audio_inputs import PromptAudio
from server.text_stream import TextStream
from server.thread_worker import load_on_own_device as _on_own_device
from server.worker_base import WorkerBase

log = logging.getLogger("hearth.worker")


def load_on_own_device(source: str, **kwargs: object) -> ChatModel:
    """Load a text model on a wgpu device of its own, so workers never share a device or a queue."""
    from models.text.engine import load_text_model

    return _on_own_device(load_text_model, source, **kwargs)


class ChatWorker(WorkerBase[ChatModel]):
    """Loads one chat model in its own thread, then serves its queue until stopped."""

    kind = "text"

    @classmethod
    def for_entry(cls, entry: ModelEntry, loader: Loader, settings: Settings, *, max_queue: int,
                  warm_up: bool) -> ChatWorker:
        """The worker for a chat model's registry entry: its context, KV type and matmul numerics."""
        return cls(entry.alias_of or entry.id, entry.source, loader, max_queue=max_queue,
                   max_batch=settings.limits.max_batch, context_length=entry.context_length, kv_dtype=entry.kv_dtype,
                   int8_activations=entry.int8_activations, warm_up=warm_up, projector=entry.projector,
                   prefix_caching=settings.prefix_caching, compile_ahead=settings.compile_ahead,
                   steps_per_submit=settings.steps_per_submit,
                   jump_forward=settings.jump_forward)

    def __init__(self, name: str, source: str, loader: Loader, *, max_queue: int, context_length: int | None = None,
                 kv_dtype: str = "f16", warm_up: bool = True, max_batch: int | None = None,
                 int8_activations: bool = False, projector: str | None = None, prefix_caching: bool = True,
                 compile_ahead: bool = True, steps_per_submit: int | None = None,
                 jump_forward: bool = True) -> None:
        """compile_ahead: with warm_up, every pipeline a request can hit is compiled (the model's warm_up) before
        the worker says it is ready, not only those of a short prompt and a decode step."""
        super().__init__(name, source, loader, warm_up=warm_up, thread_name=f"hearth-worker-{name}")
        self._compile_ahead = compile_ahead
        self._load_kwargs: dict[str, object] = {"kv_dtype": kv_dtype, "context_length": context_length}
        if int8_activations:  # only then, so that loaders without the argument (tests' fakes) still work
            self._load_kwargs["int8_activations"] = True
        if not prefix_caching:  # likewise
            self._load_kwargs["prefix_caching"] = False
        if steps_per_submit is not None:  # likewise (None: the loader's default for its adapter)
            self._load_kwargs["steps_per_submit"] = steps_per_submit
        if max_batch is not None:
            self._load_kwargs["max_batch"] = max_batch
        if projector is not None:
            self._load_kwargs["projector"] = projector
        self._jump_forward = jump_forward  # whether its generator feeds a grammar's forced tokens as one chunk
        self._queue = JobQueue(max_queue)
        self.chat_template: ChatTemplate | None = None
        self._current: Job | None = None
        self._places = 0  # places in the batch given so far: the clock of the admission rotation
        self._media = MediaRows(None, None)  # the model's encoders once it has loaded

    # -- event-loop side -----------------------------------------------------------------
    @property
    def queued(self) -> int:
        return len(self._queue)

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
        self._join(timeout)

    # -- worker thread -------------------------------------------------------------------
    def _load(self) -> None:
        started = time.perf_counter()
        log.info("loading %s from %s", self.name, self.source)
        self.model = cast(ChatModel, self._loader(self.source, progress=self._on_progress, **self._load_kwargs))
        tokenizer = self.model.tokenizer
        self.chat_template = chat_template_of(tokenizer)
        if self._warm_up:  # compile the pipelines now, not on the first request
            turns = adapter_turns(self.model)
            session = self.model.new_session()
            try:
                with turns.turn() if turns is not None else contextlib.nullcontext():
                    warm_up = getattr(self.model, "warm_up", None) if self._compile_ahead else None
                    if warm_up is not None:  # every prompt chunk, decode bucket and sampler (run on a GPU only)
                        compile_started = time.perf_counter()
                        compiled = warm_up()
                        log.info("%s: %d pipelines compiled ahead in %.1f s", self.name, compiled,
                                 time.perf_counter() - compile_started)
                    # a short prompt and a decode step run: on a software adapter, whose driver finishes a
                    # pipeline at its first dispatch, the commonest request's pipelines are then ready too
                    logits = session.prefill(tokenizer.encode("Hello", add_bos=True))
                    session.decode(int(logits.argmax()))
                    encoder = getattr(self.model, "image_encoder", None)
                    if encoder is not None:  # its pipelines too, so the first image waits for no compiling
                        encoder.encode(encoder.preprocess(Image.new("RGB", (64, 64)))[None])
            finally:
                session.close()
        self.progress = 1.0
        log.info("%s ready in %.1f s (context %d tokens%s)", self.name, time.perf_counter() - started,
                 self.model.context_length, ", built-in Gemma chat format" if self.chat_template.builtin else "")

    def _serve(self) -> None:
        """The batch loop: admit choices while the batch has room, run a round, route its events."""
        # only when off, so that generators without the setting (tests' fakes) still serve
        generator = self.model.generator(**({} if self._jump_forward else {"jump_forward": False}))
        turns = adapter_turns(self.model)
        self._media = MediaRows(getattr(self.model, "image_encoder", None), getattr(self.model, "audio_encoder", None))
        admitting: list[tuple[Job, deque[ChoiceSpec]]] = []  # jobs taken from the queue, choices left
        runs: dict[tuple[int, int], _ChoiceRun] = {}  # by (id(job), choice index)
        while True:
            if not generator.busy and not admitting and not self._queue.wait():
                break  # closed
            if self._queue.closed:
                break
            self._admit(generator, admitting, runs)
            try:
                # One round per turn of the adapter, never more: other models on it get theirs in between.
                with turns.turn() if turns is not None else contextlib.nullcontext():
                    events = generator.step()
            except BaseException as error:  # noqa: BLE001 - a bug in the batch loop: fail its jobs, go on
                ids = sorted({run.job.request_id for run in runs.values()})
                log.exception("%s: batch step failed; it fails requests %s", self.name, ", ".join(ids) or "-")
                events = [EndEvent(key, "error", error) for key in runs]
            jobs = {id(run.job): run.job for run in runs.values()}
            hold_events(jobs.values())  # the round's events go to the event loop together
            try:
                for event in events:
                    run = runs.get(cast(tuple[int, int], event.key))  # the keys this worker gave generator.add
                    if run is not None:
                        self._route(generator, run, event, runs)
                for key, run in list(runs.items()):
                    if run.job.cancelled.is_set():
                        generator.cancel(key)
                        self._end_run(run, runs, None)
            finally:
                send_held(jobs.values())
            self.running = len({id(run.job) for run in runs.values()})
            self._current = next(iter(runs.values())).job if runs else None
            if not runs and not admitting:
                self.last_used = time.monotonic()
        for run in list(runs.values()):
            run.job.cancelled.set()
        for job, _ in admitting:
            job.cancelled.set()
        self.running, self._current = 0, None

    def _admit(self, generator: BatchGenerator, admitting: list[tuple[Job, deque[ChoiceSpec]]],
               runs: dict[tuple[int, int], _ChoiceRun]) -> None:
        """Give the batch's free places to the jobs in turn (the module docstring) while they fit.

        A job stays in the queue (counted as queued, its place held against max_queue, cancellable) until its
        first choice is admitted.
        """
        while True:
            chosen = self._next_choice(generator, admitting)
            if chosen is None:
                return
            job, specs, spec = chosen
            if specs is None:  # its first choice
                if not self._queue.take(job):  # cancelled and removed meanwhile
                    continue
                specs = deque(job.choices)
                admitting.append((job, specs))
                job.remaining = len(job.choices)
                with logging_as(job.request_id):
                    log.debug("%s: the request's first choice joins the batch (%d choices)", self.name,
                              len(job.choices))
            specs.popleft()
            self._places += 1
            job.turn = self._places
            key = (id(job), spec.index)
            decoder = (self.model.tokenizer.stream_decoder(show=job.shown_ids) if job.shown_ids
                       else self.model.tokenizer.stream_decoder())
            stream: TextStream[TokenInfo] = TextStream(decoder, job.stop)
            runs[key] = _ChoiceRun(job, spec, stream)
            extra: dict[str, object] = {}  # only what is asked for, so that simpler generators (tests') still serve
            if spec.constraint is not None:
                extra["constraint"] = spec.constraint
            if job.ignore_eos:
                extra["stop_ids"] = job.stop_ids
            elif job.stop_ids:
                extra["stop_ids"] = self.model.tokenizer.eos_ids | job.stop_ids
            try:
                if spec.images:
                    extra["images"] = self._image_spans(spec)
                generator.add(key, spec.prompt_ids, spec.sampling, spec.max_tokens, logprobs=job.logprobs, **extra)
                runs[key].cached = generator.cached(key)
            except BaseException as error:  # noqa: BLE001 - this request's error (context too long, ...)
                self._end_run(runs[key], runs, error)

    def _image_spans(self, spec: ChoiceSpec) -> list[ImageSpan]:
        """The choice's images and audio clips as rows of the model's embeddings (server/media_rows.py: inputs seen
        before reused, images of one size in one call; the encoders take the adapter's turn themselves, a part at a
        time, so other models' steps get in between)."""
        rows = self._media.rows(spec.images)
        return [ImageSpan(item.start, r, item.digest, audio=isinstance(item, PromptAudio))
                for item, r in zip(spec.images, rows, strict=True)]

    def _next_choice(self, generator: BatchGenerator, admitting: list[tuple[Job, deque[ChoiceSpec]]],
                     ) -> tuple[Job, deque[ChoiceSpec] | None, ChoiceSpec] | None:
        """The choice that gets the next place (with its job and the job's choices left, None for a queued job),
        or None when it must wait for room.

        A job's turn is the clock (places given) when the worker first saw it, then one past the place it was
        last given; the lowest turn goes first, the earlier arrival on a tie. A job with a choice in the batch
        does not take its last free place but passes it on, so a new job finds a place at once however many
        choices others have waiting. A job with none in the batch waits for room when it is its turn rather
        than let a smaller one pass (a large prompt is never starved).
        """
        admitting[:] = [(job, specs) for job, specs in admitting if specs and not job.cancelled.is_set()]
        queued = self._queue.waiting()
        for job in queued:
            if job.turn < 0:
                job.turn = self._places
            if (job.cancelled.is_set() or not job.choices) and self._queue.take(job):
                if not job.choices and not job.finished_sent:  # nothing to do: it ends at once
                    job.finished_sent = True
                    job.emit(_JOB_DONE)
        candidates: list[tuple[Job, deque[ChoiceSpec] | None]] = [(job, specs) for job, specs in admitting]
        candidates += [(job, None) for job in queued if job.choices and not job.cancelled.is_set()]
        for job, specs in sorted(candidates, key=lambda c: (c[0].turn, c[0].arrival)):
            spec = job.choices[0] if specs is None else specs[0]
            in_batch = specs is not None and job.remaining > len(specs)  # some of its choices are running
            if generator.can_admit(spec.prompt_ids, spec.max_tokens, 2 if in_batch else 1):
                return job, specs, spec
            if not in_batch:
                return None
        return None

    def _route(self, generator: BatchGenerator, run: _ChoiceRun, event: Event,
               runs: dict[tuple[int, int], _ChoiceRun]) -> None:
        job, spec = run.job, run.spec
        if isinstance(event, EndEvent):
            if event.reason == "error":
                self._end_run(run, runs, event.error or RuntimeError("generation failed"))
                return
            if run.first_at is None:  # the first token it sampled ended it (an end-of-sequence id)
                run.first_at = run.last_at = event.at
            self._flush(run)
            job.emit(run.done(event.reason))
            self._end_run(run, runs, None)
            return
        run.count += 1
        if run.first_at is None:
            run.first_at = event.at
        run.last_at = event.at
        token = event.token
        piece = run.stream.push(token.id, self._token_info(token) if job.logprobs else None)
        if piece:
            job.emit(TextDelta(spec.index, piece.text, piece.tokens if job.logprobs else []))
        if run.stream.stopped:
            generator.cancel((id(job), spec.index))
            self._flush(run)
            job.emit(run.done("stop"))
            self._end_run(run, runs, None)

    def _flush(self, run: _ChoiceRun) -> None:
        piece = run.stream.flush()
        if piece:
            run.job.emit(TextDelta(run.spec.index, piece.text, piece.tokens if run.job.logprobs else []))

    def _end_run(self, run: _ChoiceRun, runs: dict[tuple[int, int], _ChoiceRun], error: BaseException | None) -> None:
        """A choice has left the batch: the job ends with its last choice, or at once with an error."""
        key = (id(run.job), run.spec.index)
        if runs.pop(key, None) is None:
            return
        job = run.job
        if error is not None and not job.finished_sent:
            job.finished_sent = True
            job.cancelled.set()  # its other choices leave the batch too
            with logging_as(job.request_id):
                log.warning("%s: the request failed in the batch (choice %d): %s: %s", self.name, run.spec.index,
                            type(error).__name__, error)
            job.emit(_JobFailed(error))
            return
        job.remaining -= 1
        if job.remaining == 0 and not job.finished_sent:
            job.finished_sent = True
            job.emit(_JOB_DONE)

    def _token_info(self, token: SampledToken) -> TokenInfo:
        top = [(*_token_text(self.model.tokenizer, tid), lp) for tid, lp in token.top]
        return TokenInfo(token.id, *_token_text(self.model.tokenizer, token.id), token.logprob, top)


@dataclass
class _ChoiceRun:
    """A choice in the batch: its job, its spec, its text stream, the tokens it has had and when."""

    job: Job
    spec: ChoiceSpec
    stream: TextStream[TokenInfo]
    count: int = 0
    first_at: float | None = None  # when the worker had its first and last sampled tokens (perf_counter)
    last_at: float | None = None
    cached: int = 0  # prompt tokens its admission found in the prefix cache

    def done(self, reason: str) -> ChoiceDone:
        return ChoiceDone(self.spec.index, reason, len(self.spec.prompt_ids), self.count, self.first_at, self.last_at,
                          self.stream.matched, self.cached)


def chat_template_of(tokenizer: TextTokenizer) -> ChatTemplate:
    """The tokenizer's chat template (the built-in Gemma format when it has none) with its special tokens."""
    bos = tokenizer.id_to_piece(tokenizer.bos_id) if tokenizer.bos_id >= 0 else ""  # bos_id is -1 when absent
    # The file's eos piece, as llama.cpp and transformers give templates (Mistral's write it after each reply); the
    # lowest of the ids that end generation would be Llama 3's <|end_of_text|> where the file names <|eot_id|>.
    eos = tokenizer.id_to_piece(tokenizer.eos_id) if tokenizer.eos_id >= 0 else ""
    return ChatTemplate(tokenizer.chat_template, bos_token=bos, eos_token=eos)


def _token_text(tokenizer: TextTokenizer, token_id: int) -> tuple[str, list[int]]:
    """A token's text and bytes for logprobs; bytes that are not whole UTF-8 show as `\\xe2` escapes."""
    to_bytes = getattr(tokenizer, "id_to_bytes", None)
    if to_bytes is not None:
        raw = bytes(to_bytes(token_id))
    else:  # a tokenizer without id_to_bytes: SentencePiece pieces, "<0xAB>" for byte fallback
        piece = tokenizer.id_to_piece(token_id)
        is_byte = len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">")
        raw = bytes([int(piece[3:5], 16)]) if is_byte else piece.replace("\u2581", " ").encode("utf-8")
    return raw.decode("utf-8", "backslashreplace"), list(raw)
