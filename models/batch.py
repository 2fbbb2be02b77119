"""Continuous batching: many sequences of one model generating together, joining and leaving
the running batch at any step.

    generator = BatchGenerator(model)
    generator.add("a", prompt_ids, SamplingParams(temperature=0), max_tokens=64)
    while generator.busy:
        for event in generator.step():          # TokenEvent / EndEvent, in each sequence's order
            ...
        if generator.can_admit(len(other_prompt), 64):
            generator.add("b", other_prompt, ...)

Each call of step() submits one round of GPU work and then handles the round before it, so the
host records round N+1 while the GPU runs round N. A round holds at most:
- one prompt chunk (up to 512 tokens) of the oldest sequence still prefilling: a long prompt
  goes in over several rounds while the others keep decoding;
- one batched decode submission of every sequence the GPU samples for (greedy or plain
  temperature), STEPS_PER_SUBMIT steps long, each step's tokens fed to the next on the GPU;
- one single-step decode submission of the sequences the CPU samples for (penalties, top-k/p,
  logprobs), whose logits come back; they rejoin once their token is known.
A sequence's slot and KV pages go back to the pool once it has ended and no submission in flight
still writes to them. Admission is by KV budget: a sequence is admitted when the pool's free
pages cover its prompt, its max_tokens and one submission of overshoot, beside what the running
sequences may still claim, so a running sequence never finds the pool empty.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field

from gpu.kv_cache import PAGE_TOKENS
from models.generate import STEPS_PER_SUBMIT, gpu_sampling
from models.sampler import SampledToken, Sampler, SamplingParams
from models.text_model import PREFILL_BUCKETS, DecodeRow, GpuSampling, PendingStep, Session, TextModel


@dataclass(frozen=True)
class TokenEvent:
    key: Hashable
    token: SampledToken  # logprob is NaN where the GPU sampled it


@dataclass(frozen=True)
class EndEvent:
    key: Hashable
    reason: str  # "stop" (an end-of-sequence or stop id), "length" (max_tokens) or "error"
    error: BaseException | None = None


Event = TokenEvent | EndEvent


@dataclass(eq=False)
class _Sequence:
    key: Hashable
    session: Session
    prompt: list[int]
    max_tokens: int
    stops: frozenset[int]
    gpu: GpuSampling | None  # None: the CPU samples from read-back logits
    sampler: Sampler | None
    history: list[int]  # prompt and tokens so far, for the CPU sampler's penalties
    budget: int  # KV positions the sequence may claim: prompt + max_tokens + one submission of overshoot
    prefilled: int = 0  # prompt tokens submitted
    submitted: int = 0  # tokens whose sampling has been submitted
    produced: int = 0  # tokens handed out
    next_token: int | None = None  # CPU path: the sampled token not yet fed back
    finished: bool = False
    in_flight: int = 0  # submissions not yet handled that hold this sequence

    @property
    def decoding(self) -> bool:
        return self.prefilled == len(self.prompt) and not self.finished and self.submitted < self.max_tokens


@dataclass
class _Submission:
    pending: PendingStep
    sequences: list[_Sequence]
    handle: Callable[[_Submission], list[Event]]
    n_steps: int = 1


@dataclass
class _Round:
    submissions: list[_Submission] = field(default_factory=list)


class BatchGenerator:
    """Runs many sequences of one model together (see the module docstring)."""

    def __init__(self, model: TextModel, kv_dtype: str | None = None, steps_per_submit: int = STEPS_PER_SUBMIT,
                 prefill_chunk: int = PREFILL_BUCKETS[-1]) -> None:
        if not 1 <= prefill_chunk <= PREFILL_BUCKETS[-1]:
            raise ValueError(f"prefill_chunk must be in [1, {PREFILL_BUCKETS[-1]}], not {prefill_chunk}")
        self.model = model
        self.prefill_chunk = prefill_chunk
        self.engine = model.engine(kv_dtype)
        self.pool = self.engine.pool
        self.steps_per_submit = steps_per_submit
        self.max_batch = model.max_batch
        self._sequences: dict[Hashable, _Sequence] = {}
        self._rounds: deque[_Round] = deque()

    # -- admission ----------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Whether any sequence runs or any submission is in flight."""
        return bool(self._sequences) or bool(self._rounds)

    @property
    def running(self) -> int:
        return sum(not s.finished for s in self._sequences.values())

    def _pages(self, positions: int) -> int:
        return -(-positions // PAGE_TOKENS)

    def _claimed_pages(self) -> int:
        """Pages the live sequences may still take beyond those they hold."""
        return sum(max(0, self._pages(s.budget) - self._pages(s.session.n_past))
                   for s in self._sequences.values() if not s.finished)

    def _budget(self, n_prompt: int, max_tokens: int) -> int:
        return min(n_prompt + max_tokens + self.steps_per_submit, self.model.context_length)

    def can_admit(self, n_prompt: int, max_tokens: int, n_sequences: int = 1) -> bool:
        """Whether n_sequences more of this size fit now (a slot each, a batch place each, and KV pages)."""
        if self.running + n_sequences > self.max_batch or self.pool.free_slots < n_sequences:
            return False
        wanted = n_sequences * self._pages(self._budget(n_prompt, max_tokens))
        free_pages = self.pool.free_tokens // PAGE_TOKENS
        return wanted + self._claimed_pages() <= free_pages or not self._sequences

    def add(self, key: Hashable, prompt_ids: Sequence[int], sampling: SamplingParams, max_tokens: int,
            logprobs: bool = False, stop_ids: frozenset[int] | None = None) -> None:
        """Start a sequence (it prefills over the next rounds, then decodes with the batch)."""
        if key in self._sequences:
            raise ValueError(f"a sequence {key!r} is already running")
        prompt = list(prompt_ids)
        if not prompt:
            raise ValueError("a sequence needs at least one prompt token")
        session = self.model.new_session(self.engine.pool.kv_dtype)
        try:
            session._check_ids(prompt)
            if len(prompt) + max(max_tokens - 1, 0) > self.model.context_length:
                session._reserve(len(prompt) + max_tokens - 1)  # raises the context error
        except BaseException:
            session.close()
            raise
        on_gpu = gpu_sampling(sampling, logprobs)
        self._sequences[key] = _Sequence(
            key, session, prompt, max_tokens, self.model.tokenizer.eos_ids if stop_ids is None else stop_ids,
            on_gpu, None if on_gpu else Sampler(sampling), prompt.copy(), self._budget(len(prompt), max_tokens))

    def cancel(self, key: Hashable) -> None:
        """End a sequence without an event (its client left, or a stop string matched)."""
        seq = self._sequences.get(key)
        if seq is not None and not seq.finished:
            seq.finished = True
            self._release_if_done(seq)

    # -- rounds -------------------------------------------------------------------------
    def step(self) -> list[Event]:
        """Submit one round, then handle the round before it; the events of the sequences."""
        events: list[Event] = []
        try:
            for seq in [s for s in self._sequences.values() if s.max_tokens <= 0 and not s.finished]:
                events += self._finish(seq, "length")
            current = self._submit_round()
            if current.submissions:
                self._rounds.append(current)
            while self._rounds and (len(self._rounds) > 1 or not current.submissions):
                for submission in self._rounds.popleft().submissions:
                    events += self._handle(submission)
        except BaseException as error:  # noqa: BLE001 - every running sequence ends with the error
            events += self._fail_all(error)
        return events

    def _submit_round(self) -> _Round:
        round_ = _Round()
        prefilling = next((s for s in self._sequences.values()
                           if not s.finished and s.prefilled < len(s.prompt)), None)
        if prefilling is not None:
            round_.submissions.append(self._submit_prefill(prefilling))
        on_gpu = [s for s in self._sequences.values() if s.decoding and s.gpu is not None]
        if on_gpu:
            round_.submissions.append(self._submit_gpu_decode(on_gpu))
        on_cpu = [s for s in self._sequences.values() if s.decoding and s.gpu is None and s.next_token is not None]
        if on_cpu:
            round_.submissions.append(self._submit_cpu_decode(on_cpu))
        return round_

    def _submit_prefill(self, seq: _Sequence) -> _Submission:
        chunk = seq.prompt[seq.prefilled:seq.prefilled + self.prefill_chunk]
        last = seq.prefilled + len(chunk) == len(seq.prompt)
        pending = self.engine.submit_prefill(seq.session, chunk, sampling=seq.gpu,
                                             read_logits=last and seq.gpu is None)
        seq.prefilled += len(chunk)
        if last:
            seq.submitted = 1
        seq.in_flight += 1
        return _Submission(pending, [seq], self._handle_prefill if last else self._handle_nothing)

    def _submit_gpu_decode(self, rows: list[_Sequence]) -> _Submission:
        room = min(self.model.context_length - s.session.n_past for s in rows)
        n_steps = max(1, min(self.steps_per_submit, room))
        pending = self.engine.submit_decode([DecodeRow(s.session, sampling=s.gpu) for s in rows], n_steps)
        for s in rows:
            s.submitted += n_steps
            s.in_flight += 1
        return _Submission(pending, rows, self._handle_gpu_decode, n_steps)

    def _submit_cpu_decode(self, rows: list[_Sequence]) -> _Submission:
        pending = self.engine.submit_decode([DecodeRow(s.session, s.next_token, read_logits=True) for s in rows])
        for s in rows:
            s.next_token = None
            s.submitted += 1
            s.in_flight += 1
        return _Submission(pending, rows, self._handle_cpu_decode)

    # -- results ------------------------------------------------------------------------
    def _handle(self, submission: _Submission) -> list[Event]:
        try:
            return submission.handle(submission)
        finally:
            for seq in submission.sequences:
                seq.in_flight -= 1
                self._release_if_done(seq)

    def _handle_nothing(self, submission: _Submission) -> list[Event]:
        submission.pending.wait()  # a prompt chunk before the last: surfaces its errors
        return []

    def _handle_prefill(self, submission: _Submission) -> list[Event]:
        seq, = submission.sequences
        tokens, logits = submission.pending.wait()
        if seq.gpu is not None:
            return self._accept(seq, SampledToken(int(tokens[0, 0]), math.nan))
        return self._accept_cpu(seq, logits[0].reshape(-1))

    def _handle_gpu_decode(self, submission: _Submission) -> list[Event]:
        tokens, _ = submission.pending.wait()
        events: list[Event] = []
        for column, seq in enumerate(submission.sequences):
            for token in tokens[:, column].tolist():
                if seq.finished:
                    break
                events += self._accept(seq, SampledToken(token, math.nan))
        return events

    def _handle_cpu_decode(self, submission: _Submission) -> list[Event]:
        _, logits = submission.pending.wait()
        events: list[Event] = []
        for row, seq in enumerate(submission.sequences):
            events += self._accept_cpu(seq, logits[row].reshape(-1))
        return events

    def _accept_cpu(self, seq: _Sequence, logits: object) -> list[Event]:
        if seq.finished:
            return []
        assert seq.sampler is not None
        token = seq.sampler.sample(logits, seq.history)  # type: ignore[arg-type]
        events = self._accept(seq, token)
        if not seq.finished:
            seq.history.append(token.id)
            seq.next_token = token.id
        return events

    def _accept(self, seq: _Sequence, token: SampledToken) -> list[Event]:
        """A sampled token of a running sequence: the end of it, or one more token out."""
        if seq.finished:
            return []
        if token.id in seq.stops:
            return self._finish(seq, "stop")
        seq.produced += 1
        events: list[Event] = [TokenEvent(seq.key, token)]
        if seq.produced >= seq.max_tokens:
            events += self._finish(seq, "length")
        return events

    def _finish(self, seq: _Sequence, reason: str, error: BaseException | None = None) -> list[Event]:
        seq.finished = True
        self._release_if_done(seq)
        return [EndEvent(seq.key, reason, error)]

    def _release_if_done(self, seq: _Sequence) -> None:
        """Close an ended sequence's session once no submission in flight holds it."""
        if seq.finished and seq.in_flight == 0 and self._sequences.get(seq.key) is seq:
            del self._sequences[seq.key]
            seq.session.close()

    def _fail_all(self, error: BaseException) -> list[Event]:
        self._rounds.clear()
        events: list[Event] = []
        for seq in list(self._sequences.values()):
            seq.in_flight = 0
            if not seq.finished:
                events += self._finish(seq, "error", error)
            else:
                self._release_if_done(seq)
        return events
