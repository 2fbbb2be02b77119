"""Continuous batching: many sequences of one model generating together, joining and leaving
the running batch at any step.

    generator = BatchGenerator(model)
    generator.add("a", prompt_ids, SamplingParams(temperature=0), max_tokens=64)
    while generator.busy:
        for event in generator.step():          # TokenEvent / EndEvent, in each sequence's order
            ...
        if generator.can_admit(other_prompt, 64):
            generator.add("b", other_prompt, ...)

Each call of step() submits one round of GPU work and then handles the round before it, so the
host records round N+1 while the GPU runs round N. On a CPU adapter (lavapipe) there is no GPU to keep
busy, and round N+1's submission would only wait behind round N: there step() submits a round and
handles that same round, so a round is done when step() returns (the chat worker's turn on the adapter
then covers its work). A round holds at most:
- prompt chunks of the sequences still prefilling (below): a long prompt goes in over several
  rounds, 512 tokens at a time, while the others keep decoding;
- one batched decode submission of every sequence the GPU samples for (greedy or plain
  temperature), STEPS_PER_SUBMIT steps long, each step's tokens fed to the next on the GPU;
- one single-step decode submission of the sequences the CPU samples for (penalties, top-k/p, logprobs),
  whose logits come back. It is recorded with the round, while the GPU still runs the round before, and sent
  once that round is handled, with its inputs (the tokens the CPU sampled, and the token masks of those also
  under a grammar) written then: so these sequences also advance a token a round, and the host's recording
  overlaps the GPU's work;
- a split decode step (Engine.submit_logits) of the GPU-sampled sequences under a grammar (constrained
  decoding: each step's token mask comes from the tokens so far, models/text/grammar.py): its sampling half
  goes first in the round, once the tokens sampled before are back and the masks filled, and the network half
  of their next step right after it (before the round's other submissions), the token it reads left on the GPU
  by that sampling. So the GPU runs a step's network while the host reads the last token back and fills the
  grammar's masks, and these sequences advance a token a round (a sequence whose prompt ends in a round joins
  them in the next). On a GPU both halves are recorded ahead (the sampling while the host waits for the round, the
  network halves a few steps ahead, wgpu's encoding of them on another thread), so that once the masks are known
  only the sending is left. Where a row's mask takes the host longer than the GPU's step (llguidance's mask near a
  string's maxLength walks most of the vocabulary), the host would hold the GPU up: such a row checks first
  (_checks_first): it draws unmasked, and the grammar checks the token when it comes back, in microseconds. With the
  noise keyed by position, the unmasked draw is the masked one whenever the grammar takes it (the best of all tokens
  is then the best of the allowed), so only a refused token costs more: the row goes back a position and runs its
  last token again as a chunk, the token after it drawn under the mask with the same noise (_refused), and then
  fills masks again. So a row gives the same tokens either way.
- the chunks of the constrained sequences jumping forward, in one submission (Engine.submit_last_chunks): where a
  grammar allows one continuation only (a schema's keys and punctuation), the tokens it forces (up to JUMP_TOKENS)
  are handed out at once and go in as a prompt chunk, the token after them sampled at its end under the mask, so
  they cost a round rather than a round each (the same tokens: they are the only ones the masks would allow). A
  step already recorded or sent for such a sequence runs on, its sampled token dropped.
A sequence's slot and KV pages go back to the pool once it has ended and no submission in flight
still writes to them. Admission looks ahead, not to the end: a sequence is admitted when the
pool's free pages cover its prompt and its next ADMIT_LOOKAHEAD tokens beside what the running
sequences need next, so requests that ask for "up to the context end" still share the batch.
When a round would not fit, the newest sequences are preempted (vLLM's recompute preemption):
their pages go back (published, with prefix caching), and they rejoin later by prefilling their prompt and the
tokens they have produced so far, less the leading pages still cached where the round has pages to spare for them,
then go on exactly where they were.

Prefill is shared, so that a long prompt cannot hold a short one back. A round's prompt chunks are the
next chunk of the sequence first in turn (round-robin: one just served goes behind every sequence waiting
then, a new one behind those already waiting), and then the smallest of the other waiting chunks (the earlier
in turn on a tie) within 2 * prefill_chunk rows in all, the first counted at no more than prefill_chunk. A
chunk counts the rows it costs: a prompt's last chunk shares one program with the round's other last chunks
(up to PREFILL_BUCKETS[-1] tokens a program, so a burst of short prompts is prefilled a program of 512 rows at
a time), counted at its tokens; any other chunk runs a program of its own, counted at the rows that program
runs (16, 64, 256 or 512). So a round prefills at most 2 * prefill_chunk rows (and what the packing of last
chunks rounds up), and with k other sequences waiting to prefill (fewer than max_batch):
- every waiting sequence's next chunk goes in within k + 1 rounds (as the first in turn, if not sooner):
  nobody starves, however many small prompts keep coming;
- a chunk of c rows goes in the next round when the waiting chunks of at most c rows ahead of it fill
  no more than prefill_chunk rows, which k * c <= prefill_chunk ensures: a prompt of up to 16 tokens
  behind fewer than 32 others is prefilled in the next round, however long their prompts.
Where KV pages are short a round holds one chunk or none. Chunk boundaries are those of a sequence
prefilling alone (every prefill_chunk tokens, moved to keep each image's rows in one chunk:
models/text/images.py), so the arithmetic does not depend on who else prefills.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpu.kv_cache import PoolExhausted
from models.text.generate import STEPS_PER_SUBMIT, gpu_sampling
from models.text.grammar import fill_masks
from models.text.images import ImageSpan, check_spans, chunk_end, rows_in
from models.text.prefix_cache import cached_prefix
from models.text.sampler import SampledToken, Sampler, SamplingParams, candidates_can_serve
from models.text.step_io import CANDIDATES, PREFILL_BUCKETS, ChunkRow, DecodeRow, GpuSampling, PendingStep

if TYPE_CHECKING:  # annotations only: the engine builds on this module
    from models.text.engine import Engine, LogitsStep, RecordedDecode, RecordedLogits, Session, TextModel
    from models.text.grammar import TokenConstraint


@dataclass(frozen=True)
class TokenEvent:
    key: Hashable
    token: SampledToken  # logprob is NaN where the GPU sampled it
    at: float = field(default_factory=time.perf_counter)  # when the host had the token (its submission waited for)


@dataclass(frozen=True)
class EndEvent:
    key: Hashable
    reason: str  # "stop" (an end-of-sequence or stop id), "length" (max_tokens) or "error"
    error: BaseException | None = None
    at: float = field(default_factory=time.perf_counter)  # when the host knew the sequence had ended


Event = TokenEvent | EndEvent
ADMIT_LOOKAHEAD = 256  # generated tokens a new sequence must find KV pages for (beyond: preemption)
JUMP_TOKENS = PREFILL_BUCKETS[0]  # most tokens of a jump-forward chunk (the smallest prompt program's rows)
# A split row checks first once filling its mask took more than this share of the host's time between two split
# steps: the mask then holds the GPU up (or nearly), and a refused token costs one step.
CHECK_FIRST_SHARE = 0.5
LOGITS_AHEAD = 2  # split steps' network halves recorded ahead (their encoding can take a small model's step)


def _rows_key(rows: list[_Sequence]) -> list[tuple[_Sequence, Session]]:
    """What a recorded network half is for: the rows and their sessions (a preempted row comes back with another)."""
    return [(s, s.session) for s in rows]  # type: ignore[misc]  # decoding rows hold a session


def _discard_when_finished(recorded: RecordedLogits, finishing: Future[RecordedLogits]) -> None:
    """Give back the buffers of a network half recorded ahead and not sent, once the recorder thread is done with it."""
    finishing.add_done_callback(lambda _: recorded.discard())


@dataclass(eq=False)
class _Sequence:
    key: Hashable
    order: int  # admission order: the newest are preempted first
    turn: int  # its place in the prefill rotation: the lowest (then the oldest) gets the next chunk
    session: Session | None  # None while preempted (no slot, no pages)
    prompt: list[int]  # to prefill: the request's prompt, and after a preemption the tokens produced too
    max_tokens: int
    stops: frozenset[int]
    gpu: GpuSampling | None  # None: the CPU samples from read-back logits
    sampler: Sampler | None
    history: list[int]  # prompt and tokens so far, for the CPU sampler's penalties
    candidates: bool  # CPU path: the row's best logits come back rather than all (models/text/generate.py)
    request: list[int] = field(default_factory=list)  # the request's prompt
    emitted: list[int] = field(default_factory=list)  # tokens handed out
    prefilled: int = 0  # prompt tokens submitted
    submitted: int = 0  # tokens whose sampling has been submitted
    produced: int = 0  # tokens handed out
    next_token: int | None = None  # CPU path: the sampled token not yet fed back
    finished: bool = False
    in_flight: int = 0  # submissions not yet handled that hold this sequence (and an open split step)
    constraint: TokenConstraint | None = None  # the grammar its tokens must follow
    images: list[ImageSpan] = field(default_factory=list)  # the request's images, in prompt order
    cached: int = 0  # prompt tokens taken from the prefix cache rather than prefilled (at admission)
    jump: bool = False  # its next chunk is tokens handed out already: forced by its grammar (jump-forward, _jump), or
    # its last token again where the token after it was refused (_refused)
    check_first: bool = False  # its grammar checks its GPU-drawn tokens rather than mask them (the module docstring)

    @property
    def cacheable(self) -> list[int]:
        """The tokens its cache's positions hold for certain, in order: the request's prompt and the tokens handed out
        since, but the last of those (a row whose grammar ended on it runs its recorded step on a placeholder)."""
        return self.request + self.emitted[:-1]

    def next_chunk(self, chunk: int) -> int:
        """How many prompt tokens its next chunk takes: up to `chunk`, an image's rows never cut."""
        return chunk_end(self.images, self.prefilled, len(self.prompt), chunk) - self.prefilled

    @property
    def stepwise(self) -> bool:
        """Whether the host samples each token from read-back logits before the next step (CPU sampling)."""
        return self.gpu is None

    @property
    def split(self) -> bool:
        """Whether its steps go in halves, the sampling under a grammar's mask after the network (Engine.submit_logits):
        a GPU-sampled sequence under a grammar."""
        return self.gpu is not None and self.constraint is not None

    @property
    def decoding(self) -> bool:
        return (self.session is not None and self.prefilled == len(self.prompt) and not self.finished
                and self.submitted < self.max_tokens)

    @property
    def prefilling(self) -> bool:
        return not self.finished and self.prefilled < len(self.prompt)


@dataclass
class _Submission:
    pending: PendingStep
    sequences: list[_Sequence]
    handle: Callable[[_Submission], list[Event]]
    n_steps: int = 1
    dropped: frozenset[int] = frozenset()  # rows whose sequence jumped forward since the step was recorded


@dataclass
class _Round:
    submissions: list[_Submission] = field(default_factory=list)


_Plan = tuple[list[_Sequence], list[_Sequence], list[_Sequence], list[_Sequence]]  # prompt chunks, GPU, stepwise, split


class BatchGenerator:
    """Runs many sequences of one model together (see the module docstring)."""

    def __init__(self, model: TextModel, kv_dtype: str | None = None, steps_per_submit: int = STEPS_PER_SUBMIT,
                 prefill_chunk: int = PREFILL_BUCKETS[-1], engine: Engine | None = None,
                 overlap_rounds: bool | None = None, jump_forward: bool = True, check_first: bool | None = None
                 ) -> None:
        """engine: the KV pool and programs to run in (the model's, of kv_dtype, by default). overlap_rounds:
        whether round N+1 is recorded while round N runs (None: on a GPU, not on a CPU adapter). jump_forward:
        whether the tokens a grammar forces go in as one prompt chunk rather than a step each (_jump). check_first:
        whether split rows draw unmasked and have the grammar check the token (the module docstring): None where
        their masks take longer than the steps they overlap, True always, False never (nor with recurrent layers,
        whose state cannot go back a position)."""
        if not 1 <= prefill_chunk <= PREFILL_BUCKETS[-1]:
            raise ValueError(f"prefill_chunk must be in [1, {PREFILL_BUCKETS[-1]}], not {prefill_chunk}")
        self.model = model
        self.prefill_chunk = prefill_chunk
        self.engine = engine or model.engine(kv_dtype)
        self.pool = self.engine.pool
        recurrent = getattr(self.pool, "recurrent", None) is not None  # a hybrid's per-sequence recurrent state
        # several sequences' last chunks share one program (Engine.submit_last_chunks), but for a hybrid's recurrent
        # layers, which take a sequence's prompt at a time
        self._shares_programs = not recurrent
        self.steps_per_submit = steps_per_submit
        self.max_batch = model.max_batch
        self._sequences: dict[Hashable, _Sequence] = {}
        self._rounds: deque[_Round] = deque()
        self._order = itertools.count()
        self._chunks = 0  # prompt chunks submitted so far: the clock of the prefill rotation
        self.preemptions = 0  # sequences sent back to prefill for want of KV pages, so far
        self.cached_tokens = 0  # prompt tokens taken from the prefix cache rather than prefilled, so far
        self.resumed_tokens = 0  # tokens preempted sequences took back from the prefix cache on their return, so far
        self._spare_pages = 0  # free KV pages the round's plan leaves (a returning sequence may take cached ones)
        self.jump_forward = jump_forward
        self.check_first = False if recurrent else check_first  # a refused token's row goes back a position
        self.checked_tokens = 0  # tokens drawn unmasked and checked by their grammar, so far
        self.refused_tokens = 0  # of those, the ones the grammar refused (each drawn again under the mask)
        self._split_sent_at: float | None = None  # when the last split step's sampling went
        self.forced_tokens = 0  # tokens handed out by jump-forward (forced by a grammar, not sampled), so far
        self.overlap_rounds = not model.executor.device.is_software if overlap_rounds is None else overlap_rounds
        self._split: tuple[LogitsStep, list[_Sequence]] | None = None  # split rows whose sampling is to be sent
        # On a GPU the split rows' next network halves are recorded ahead, their encoding ended on the recorder thread
        # (_record_logits_ahead)
        self._recorder: ThreadPoolExecutor | None = None
        self._masker: ThreadPoolExecutor | None = None  # split rows' masks, beside this thread's recording
        self._logits_ahead: deque[tuple[RecordedLogits, Future[RecordedLogits], list[tuple[_Sequence, Session]]]] = \
            deque()  # (recorded, its end on the recorder thread, the rows it is for)

    # -- admission ----------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        """Whether any sequence runs or any submission is in flight."""
        return bool(self._sequences) or bool(self._rounds)

    @property
    def running(self) -> int:
        return sum(not s.finished for s in self._sequences.values())

    def _near_pages(self) -> int:
        """Pages the live sequences need before long: a prefilling one its prompt (and a round of
        tokens), a decoding one its next round."""
        need = 0
        for s in self._sequences.values():
            if s.finished:
                continue
            held = s.session.n_past if s.session is not None else 0
            upto = len(s.prompt) if s.prefilling else held
            need += self.pool.pages_for(upto + self.steps_per_submit) - self.pool.pages_for(held)
        return need

    def can_admit(self, prompt: Sequence[int], max_tokens: int, n_sequences: int = 1) -> bool:
        """Whether n_sequences more of this prompt fit now: a slot and a batch place each, and KV pages
        for the prompt and the next ADMIT_LOOKAHEAD tokens, less the cached prefix pages that running sequences
        hold (a shared system prompt's: admission shares them by reference)."""
        if self.running + n_sequences > self.max_batch or self.pool.free_slots < n_sequences:
            return False
        ahead = min(max_tokens, ADMIT_LOOKAHEAD) + self.steps_per_submit
        shared = self.pool.held(cached_prefix(self.pool, prompt))
        wanted = n_sequences * (self.pool.pages_for(len(prompt) + ahead) - shared)
        free_pages = self.pool.free_tokens // self.pool.page_tokens
        return wanted + self._near_pages() <= free_pages or not self.running

    def add(self, key: Hashable, prompt_ids: Sequence[int], sampling: SamplingParams, max_tokens: int,
            logprobs: bool = False, stop_ids: frozenset[int] | None = None,
            constraint: TokenConstraint | None = None, images: Sequence[ImageSpan] = ()) -> None:
        """Start a sequence (it prefills over the next rounds, then decodes with the batch); constraint: a
        grammar every token must keep to (the sequence ends with "stop" once the grammar is complete);
        images: the prompt's images (models/text/images.py), each prefilled within one chunk."""
        if key in self._sequences:
            raise ValueError(f"a sequence {key!r} is already running")
        prompt = list(prompt_ids)
        if not prompt:
            raise ValueError("a sequence needs at least one prompt token")
        spans = check_spans(images, len(prompt), self.model.embedding_size) if images else []
        session = self.engine.new_session()
        try:
            session._check_ids(prompt)
            if len(prompt) + max(max_tokens - 1, 0) > self.pool.n_ctx:
                session._reserve(len(prompt) + max_tokens - 1)  # raises the context error
        except BaseException:
            session.close()
            raise
        on_gpu = gpu_sampling(sampling, logprobs)
        cached = session.take_cached_prefix(prompt, spans)
        self.cached_tokens += cached
        seq = self._sequences[key] = _Sequence(
            key, next(self._order), self._chunks, session, prompt, max_tokens,
            self.model.tokenizer.eos_ids if stop_ids is None else stop_ids,
            on_gpu, None if on_gpu else Sampler(sampling), prompt.copy(),
            on_gpu is None and candidates_can_serve(sampling, CANDIDATES), prompt.copy(), constraint=constraint,
            images=spans, cached=cached)
        seq.prefilled = cached

    def cached(self, key: Hashable) -> int:
        """The prompt tokens of a running sequence that its admission found in the prefix cache."""
        return self._sequences[key].cached

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
            if self._split is not None:
                events += self._sample_split()
            plan, made_room = self._make_room()
            events += made_room
            self._spare_pages = self.pool.free_tokens // self.pool.page_tokens - self._pages_wanted(plan)
            if plan[3]:  # first: the GPU may finish the sampling just sent before the rest of the round is sent
                self._submit_logits(plan[3])
            current, stepwise = self._submit_round(plan)
            if stepwise is not None:  # its inputs come from the rounds in flight: handle them, then send it
                while self._rounds:
                    events += self._handle_round(self._rounds.popleft())
                sent, failed = self._send_stepwise(*stepwise)
                current.submissions.append(sent)
                events += failed
            if current.submissions:
                self._rounds.append(current)
            if self._split is not None and self.overlap_rounds:  # recorded while the GPU runs, sent once masked
                self._split[0].record_sample()
            while self._rounds and (len(self._rounds) > 1 or not current.submissions or not self.overlap_rounds):
                events += self._handle_round(self._rounds.popleft())
        except BaseException as error:  # noqa: BLE001 - every running sequence ends with the error
            events += self._fail_all(error)
        return events

    def _plan(self, max_chunks: int | None = None) -> _Plan:
        """What the next round holds: the chunks of forced tokens (jump-forward, _jump) and prompt chunks of the
        sequences waiting to prefill (in turn, see _prefills), the GPU-sampled decode rows, the stepwise rows whose
        token is known or comes back with the round in flight (handled before their submission goes, see step), and
        the split rows."""
        live = sorted((s for s in self._sequences.values() if not s.finished), key=lambda s: s.order)
        on_gpu = [s for s in live if s.decoding and not s.stepwise and not s.split]
        stepwise = [s for s in live if s.decoding and s.stepwise and (s.next_token is not None or s.in_flight)]
        split = [s for s in live if s.decoding and s.split]
        jumps = [s for s in live if s.jump]  # they decode on: outside the prefill rotation, and never held back
        return jumps + self._prefills([s for s in live if not s.jump], max_chunks), on_gpu, stepwise, split

    def _prefills(self, live: list[_Sequence], max_chunks: int | None) -> list[_Sequence]:
        """The sequences that send a prompt chunk this round (the module docstring): the first in turn, then
        the smallest other chunks within prefill_chunk rows; a preempted one only while slots are free; at
        most max_chunks of them (None: no limit)."""
        waiting = sorted((s for s in live if s.prefilling), key=lambda s: (s.turn, s.order))
        free_slots = self.pool.free_slots
        waiting = [s for s in waiting if s.session is not None or free_slots]
        if not waiting or max_chunks == 0:
            return []
        first, others = waiting[0], sorted(waiting[1:], key=lambda s: self._chunk_cost(s))
        chosen, rows = [first], min(self._chunk_cost(first), self.prefill_chunk)
        free_slots -= first.session is None
        for seq in others:
            cost = self._chunk_cost(seq)
            if (max_chunks is not None and len(chosen) >= max_chunks) or rows + cost > 2 * self.prefill_chunk:
                break  # the rest are no smaller
            if seq.session is None:
                if not free_slots:
                    continue
                free_slots -= 1
            chosen.append(seq)
            rows += cost
        return chosen

    def _chunk_cost(self, seq: _Sequence) -> int:
        """The rows a sequence's next chunk costs a round: its tokens where it is a last chunk that shares a program
        (_packs), else the rows its own program runs (models/text/engine.py's prefill_program)."""
        n = seq.next_chunk(self.prefill_chunk)
        return n if self._packs(seq) or n == 1 else next((b for b in PREFILL_BUCKETS if b >= n), n)

    def _packs(self, seq: _Sequence) -> bool:
        """Whether the sequence's next chunk can share a program with other sequences' (Engine.submit_last_chunks):
        it is the prompt's last and holds no image, where the pool's programs are shared at all."""
        return (self._shares_programs and seq.session is not None and not seq.images
                and seq.prefilled + seq.next_chunk(self.prefill_chunk) == len(seq.prompt))

    def _prompt_groups(self, prompts: list[_Sequence]) -> list[list[_Sequence]]:
        """The round's prompt chunks as submissions: the last chunks that can share a program packed in order into
        programs of up to PREFILL_BUCKETS[-1] tokens and max_batch chunks, every other chunk alone."""
        for seq in prompts:
            if seq.session is None:  # a preempted sequence takes what the prefix cache still holds first
                self._resume(seq)
        groups: list[list[_Sequence]] = []
        pack: list[_Sequence] = []
        tokens = 0
        for seq in prompts:
            n = seq.next_chunk(self.prefill_chunk)
            if not self._packs(seq):
                groups.append([seq])
                continue
            if pack and (tokens + n > PREFILL_BUCKETS[-1] or len(pack) == self.max_batch):
                groups.append(pack)
                pack, tokens = [], 0
            pack.append(seq)
            tokens += n
        return groups + [pack] if pack else groups

    def _pages_wanted(self, plan: _Plan) -> int:
        prefills, on_gpu, stepwise, split = plan
        wanted = 0
        for prefilling in prefills:
            wanted += self._chunk_pages(prefilling)
        for s, steps in [(s, self._gpu_steps(on_gpu)) for s in on_gpu] + [(s, 1) for s in stepwise + split]:
            assert s.session is not None
            wanted += self.pool.pages_needed(s.session.slot, s.session.n_past + steps)
        return wanted

    def _chunk_pages(self, seq: _Sequence, held: int | None = None) -> int:
        """New KV pages a prefilling sequence's next chunk takes: the chunk's, and its first decode steps' if the chunk
        is its last; held: the positions its session holds before it (by default, those it holds now)."""
        if held is None:
            held = seq.session.n_past if seq.session is not None else 0
        chunk = seq.next_chunk(self.prefill_chunk)
        last = seq.prefilled + chunk == len(seq.prompt)
        upto = held + chunk + (self.steps_per_submit if last else 0)
        return self.pool.pages_for(upto) - self.pool.pages_for(held)

    def _fits(self, plan: _Plan) -> bool:
        return self._pages_wanted(plan) * self.pool.page_tokens <= self.pool.free_tokens

    def _make_room(self) -> tuple[_Plan, list[Event]]:
        """The next round's plan, made to fit the free KV pages: if it does not, finish the rounds in
        flight (ended sequences give pages back); then keep only the first prompt chunk, then none;
        then preempt the newest decoding sequences until the rest fits."""
        plan = self._plan()
        if self._fits(plan):
            return plan, []
        events: list[Event] = []
        while self._rounds:
            events += self._handle_round(self._rounds.popleft())
        plan = self._plan()
        if not self._fits(plan):
            plan = self._plan(max_chunks=1)
        if not self._fits(plan):
            plan = self._plan(max_chunks=0)
        while not self._fits(plan):
            holders = [s for s in self._sequences.values() if not s.finished and s.session is not None]
            if len(holders) <= 1:
                raise PoolExhausted(f"the KV cache ({self.pool.n_pages} pages) cannot hold the next step "
                                    "of even one sequence")
            self._preempt(max(holders, key=lambda s: s.order))
            plan = self._plan(max_chunks=0)
        return plan, events

    def _preempt(self, seq: _Sequence) -> None:
        """Give a sequence's slot and pages back (published: _resume may find them cached); it will prefill its prompt
        and its tokens so far again."""
        assert seq.session is not None and seq.in_flight == 0
        seq.session.publish(seq.cacheable, seq.images)
        seq.session.close()
        seq.session = None
        seq.prompt = seq.request + seq.emitted
        seq.prefilled = 0
        seq.turn = self._chunks  # it prefills again, behind the sequences waiting now
        seq.submitted = seq.produced
        seq.next_token = None
        seq.jump = False  # its forced tokens are prefilled with the rest
        self.preemptions += 1

    def _gpu_steps(self, rows: list[_Sequence]) -> int:
        room = min((self.pool.n_ctx - s.session.n_past for s in rows if s.session is not None),
                   default=1)
        return max(1, min(self.steps_per_submit, room))

    def _submit_round(self, plan: _Plan) -> tuple[_Round, tuple[RecordedDecode, list[_Sequence]] | None]:
        """Send the round's prompt chunks and GPU decode; record its stepwise decode (sent by step)."""
        round_ = _Round()
        prefills, on_gpu, stepwise, _ = plan
        jumps = [s for s in prefills if s.jump]
        prompts = [s for s in prefills if not s.jump]
        # the forced tokens of every jumping row in one submission where programs are shared
        for group in [jumps] if jumps and self._shares_programs else [[s] for s in jumps]:
            round_.submissions.append(self._submit_last_chunks(group))
        for group in self._prompt_groups(prompts):
            round_.submissions.append(self._submit_prefill(group[0]) if len(group) == 1
                                      else self._submit_last_chunks(group))
            for prefilling in group:
                if prefilling.decoding and not prefilling.stepwise and not prefilling.split:  # it decodes this round
                    on_gpu = sorted([*on_gpu, prefilling], key=lambda s: s.order)
        if on_gpu:
            round_.submissions.append(self._submit_gpu_decode(on_gpu))
        return round_, self._record_stepwise(stepwise) if stepwise else None

    def _handle_round(self, round_: _Round) -> list[Event]:
        events: list[Event] = []
        for submission in round_.submissions:
            events += self._handle(submission)
        return events

    def _resume(self, seq: _Sequence) -> None:
        """A preempted sequence comes back: a new session, which starts with the cached pages of its tokens so far
        (published when it was preempted, if no other sequence's pages have replaced them since) where the round's
        spare pages cover what that costs beyond the plan (the cached pages no sequence holds, and the decode steps
        of a chunk that becomes its last); else it prefills them all again."""
        planned = self._chunk_pages(seq)
        pages = cached_prefix(self.pool, seq.prompt, seq.images)
        seq.session = self.engine.new_session()
        if not pages:
            return
        seq.prefilled = len(pages) * self.pool.page_tokens
        cost = len(pages) - self.pool.held(pages) + self._chunk_pages(seq, held=seq.prefilled)
        if cost - planned > self._spare_pages:
            seq.prefilled = 0
            return
        self._spare_pages -= cost - planned
        seq.prefilled = seq.session.take_cached_prefix(seq.prompt, seq.images)  # the same pages
        self.resumed_tokens += seq.prefilled

    def _submit_prefill(self, seq: _Sequence) -> _Submission:
        if seq.session is None:
            self._resume(seq)
        end = seq.prefilled + seq.next_chunk(self.prefill_chunk)
        chunk = seq.prompt[seq.prefilled:end]
        last = end == len(seq.prompt)
        on_cpu = last and seq.gpu is None
        mask = self._mask(seq) if last and seq.constraint is not None else None
        inside = rows_in(seq.images, seq.prefilled, end)  # passed only when there are some: engines without
        # images (tests' fakes) still serve
        pending = self.engine.submit_prefill(seq.session, chunk, sampling=seq.gpu, last=last,
                                             read_logits=on_cpu and not seq.candidates,
                                             read_candidates=on_cpu and seq.candidates, mask=mask,
                                             **({"images": inside} if inside else {}))
        self._chunk_sent(seq, len(chunk), last)
        return _Submission(pending, [seq], self._handle_prefill if last else self._handle_nothing)

    def _submit_last_chunks(self, seqs: list[_Sequence]) -> _Submission:
        """The last chunks of several sequences in one submission, each sampling the token after its chunk (under its
        grammar's mask where it has one): prompts' last chunks (_prompt_groups), or the forced tokens of jumping
        sequences (_jump)."""
        rows = [ChunkRow(s.session, s.prompt[s.prefilled:], s.gpu or GpuSampling(),
                         read_logits=s.gpu is None and not s.candidates, read_candidates=s.gpu is None and s.candidates,
                         mask=self._mask(s) if s.constraint is not None else None) for s in seqs]
        pending = self.engine.submit_last_chunks(rows)
        for seq, row in zip(seqs, rows, strict=True):
            self._chunk_sent(seq, len(row.ids), True)
        return _Submission(pending, seqs, self._handle_stepwise)

    def _chunk_sent(self, seq: _Sequence, n: int, last: bool) -> None:
        assert seq.session is not None
        seq.prefilled += n
        seq.jump = False
        seq.session.publish(seq.cacheable, seq.images)  # sequences admitted from now on reuse its full pages
        self._chunks += 1
        seq.turn = self._chunks  # behind every sequence waiting now
        if last:
            seq.submitted += 1  # the token after the prompt is sampled in this submission
        seq.in_flight += 1

    def _submit_gpu_decode(self, rows: list[_Sequence]) -> _Submission:
        n_steps = self._gpu_steps(rows)
        pending = self.engine.submit_decode([DecodeRow(s.session, sampling=s.gpu) for s in rows], n_steps)
        for s in rows:
            s.submitted += n_steps
            s.in_flight += 1
        return _Submission(pending, rows, self._handle_gpu_decode, n_steps)

    def _record_stepwise(self, rows: list[_Sequence]) -> tuple[RecordedDecode, list[_Sequence]]:
        """Record one decode step of the stepwise rows; _send_stepwise gives it their tokens and masks."""
        on_cpu = [s.gpu is None for s in rows]
        recorded = self.engine.record_decode([
            DecodeRow(s.session, sampling=s.gpu or GpuSampling(), read_logits=cpu and not s.candidates,
                      read_candidates=cpu and s.candidates, constrained=s.constraint is not None)
            for s, cpu in zip(rows, on_cpu, strict=True)])
        for s in rows:
            s.submitted += 1
            s.in_flight += 1
        return recorded, rows

    def _send_stepwise(self, recorded: RecordedDecode, rows: list[_Sequence]) -> tuple[_Submission, list[Event]]:
        """Send a recorded stepwise step, its rows' tokens and masks known now (a row that ended meanwhile runs
        with token 0 and no mask, a row that jumped forward meanwhile with no mask; their results are dropped)."""
        events: list[Event] = []
        for row, seq in zip(recorded.rows, rows, strict=True):
            if not seq.finished:
                assert seq.next_token is not None, "a stepwise row was sent before its token was known"
                row.token, seq.next_token = seq.next_token, None
        constrained = [(row, seq) for row, seq in zip(recorded.rows, rows, strict=True)
                       if seq.constraint is not None and not seq.finished and not seq.jump]
        if constrained:
            masks, events = self._fill_masks([seq for _, seq in constrained])
            for i, (row, seq) in enumerate(constrained):
                row.mask = masks[i]
        for row, seq in zip(recorded.rows, rows, strict=True):
            if seq.finished:  # the token its position holds where a jump ended the sequence (the cache is published)
                row.token, row.mask, seq.next_token = seq.next_token or 0, None, None
        dropped = frozenset(i for i, seq in enumerate(rows) if seq.jump)
        return _Submission(recorded.submit(), rows, self._handle_stepwise, dropped=dropped), events

    def _submit_logits(self, rows: list[_Sequence]) -> None:
        """The network half of a split step of these rows, each on the token the GPU sampled last (recorded ahead for
        the same rows, or now); the rows stay held (in flight) until their sampling half is handled."""
        recorded, key = None, _rows_key(rows)
        while self._logits_ahead and recorded is None:
            ahead, finishing, recorded_for = self._logits_ahead.popleft()
            if recorded_for == key:
                recorded = finishing.result()
            else:  # the rows changed (one ended, jumped or was preempted since)
                _discard_when_finished(ahead, finishing)
        self._split = ((recorded or self._record_logits(rows)).submit(), rows)
        for s in rows:
            s.in_flight += 1
        if self.overlap_rounds:
            self._record_logits_ahead(rows)

    def _sample_split(self) -> list[Event]:
        """Send the sampling half of the open split step, each row under its grammar's mask: first the rounds in
        flight that hold the rows' last tokens are handled (the grammars take those tokens). Its submission is
        a round of its own, handled like the others; a row that ended or jumped forward meanwhile draws unmasked, its
        token dropped."""
        assert self._split is not None
        step, rows = self._split
        events: list[Event] = []
        while self._rounds and any(not s.finished and s.produced < s.submitted for s in rows):
            events += self._handle_round(self._rounds.popleft())
        self._split = None
        live = [i for i, s in enumerate(rows) if not s.finished and not s.jump]  # a jumped row's chunk samples
        if not live:  # nothing to sample for: the logits are dropped
            step.abandon()
            for s in rows:
                s.in_flight -= 1
                self._release_if_done(s)
            return events
        masks = np.full((len(rows), rows[live[0]].constraint.vocabulary.mask_words), 0xFFFFFFFF, np.uint32)
        live_rows = [rows[i] for i in live]
        masked = [i for i in live if not self._checks_first(rows[i])]
        fill_s = 0.0
        if masked and self.overlap_rounds and len(live_rows) == len(rows):
            filled, failed, fill_s = self._masks_beside_recording([rows[i] for i in masked], rows)
        elif masked:
            start = time.perf_counter()
            filled, failed = self._fill_masks([rows[i] for i in masked])  # llguidance drops the GIL: the recorder
            fill_s = time.perf_counter() - start  # goes on meanwhile
        else:
            filled, failed = masks[:0], []
        masks[masked] = filled
        dropped = frozenset(i for i, s in enumerate(rows) if s.jump)
        masks[[i for i, s in enumerate(rows) if s.finished or i in dropped]] = 0xFFFFFFFF  # a failed grammar too
        events += failed
        now = time.perf_counter()
        if self._split_sent_at is not None and fill_s > CHECK_FIRST_SHARE * (now - self._split_sent_at):
            for i in masked:
                rows[i].check_first = True
        self._split_sent_at = now
        self.checked_tokens += len(live) - len(masked)
        pending = step.sample(masks if masked else None)
        for s in live_rows:
            s.submitted += 1
        # the rows' hold passes from the network half to this submission (_handle releases it)
        self._rounds.append(_Round([_Submission(pending, rows, self._handle_stepwise, dropped=dropped)]))
        return events

    def _record_logits(self, rows: list[_Sequence], finish: bool = True) -> RecordedLogits:
        return self.engine.record_logits([DecodeRow(s.session, sampling=s.gpu) for s in rows], finish)

    def _record_logits_ahead(self, rows: list[_Sequence], ahead: int = LOGITS_AHEAD) -> None:
        """Keep `ahead` network halves of these split rows recorded ahead, each ended on the recorder thread.
        Recording a step costs the host nearly what a small model's step costs the GPU. Its commands are recorded
        here, while the GPU runs the step just sent (Python, which holds the GIL: on another thread it would slow
        this one's work as much); the recording's end, wgpu's encoding of those commands, is one call that drops the
        GIL, so it runs on the recorder thread beside this thread's waits, masks and sends."""
        if self._recorder is None:
            self._recorder = ThreadPoolExecutor(1, thread_name_prefix="split-recorder")
        while len(self._logits_ahead) < ahead:
            recorded = self._record_logits(rows, finish=False)
            self._logits_ahead.append((recorded, self._recorder.submit(recorded.finish), _rows_key(rows)))

    def _masks_beside_recording(self, masked: list[_Sequence], rows: list[_Sequence]
                                ) -> tuple[np.ndarray, list[Event], float]:
        """_fill_masks for the masked ones of these split rows, with the rows' network half after the ones recorded
        ahead recorded meanwhile, and the seconds the masks took: llguidance computes the masks on the masking thread
        without the GIL while this thread records (Python, holding it), so a constrained step's two largest host costs
        overlap rather than add, and the recording _submit_logits would do next is done. The masking thread takes the
        GIL first (this thread waits until it has started), so that it is inside llguidance before the recording
        begins: left to wait for the GIL, it would rarely get it before the recording ends, whose calls into wgpu drop
        it only for moments."""
        if self._masker is None:
            self._masker = ThreadPoolExecutor(1, thread_name_prefix="grammar-masks")
        constraints = [s.constraint for s in masked]
        masks = np.empty((len(masked), constraints[0].vocabulary.mask_words), np.uint32)
        started = threading.Event()

        def fill() -> float:
            start = time.perf_counter()
            started.set()
            fill_masks(constraints, masks)
            return time.perf_counter() - start

        job = self._masker.submit(fill)
        started.wait()
        self._record_logits_ahead(rows, LOGITS_AHEAD + 1)
        try:
            return masks, [], job.result()
        except Exception:  # noqa: BLE001 - a grammar failed: _fill_masks finds whose, row by row
            return *self._fill_masks(masked), 0.0

    def _fill_masks(self, seqs: list[_Sequence]) -> tuple[np.ndarray, list[Event]]:
        """The token masks of these constrained sequences (u32 [n, mask_words]), filled together; a sequence whose
        grammar fails ends with its error (its row is left as it is)."""
        constraints = [seq.constraint for seq in seqs]
        masks = np.empty((len(seqs), constraints[0].vocabulary.mask_words), np.uint32)
        try:
            fill_masks(constraints, masks)
            return masks, []
        except Exception:  # noqa: BLE001 - a grammar failed: find whose, row by row below
            pass
        events: list[Event] = []
        for i, seq in enumerate(seqs):
            try:
                seq.constraint.fill_mask(masks[i])
            except Exception as error:  # noqa: BLE001 - this sequence ends with its grammar's error
                events += self._finish(seq, "error", error)
        return masks, events

    def _mask(self, seq: _Sequence) -> np.ndarray:
        """The tokens a constrained sequence may take next (u32 bits)."""
        assert seq.constraint is not None
        mask = np.empty(seq.constraint.vocabulary.mask_words, np.uint32)
        seq.constraint.fill_mask(mask)
        return mask

    # -- results ------------------------------------------------------------------------
    def _handle(self, submission: _Submission) -> list[Event]:
        try:
            return submission.handle(submission)
        finally:
            for seq in submission.sequences:
                seq.in_flight -= 1
                self._release_if_done(seq)

    def _handle_nothing(self, submission: _Submission) -> list[Event]:
        return []  # a prompt chunk before the last: nothing comes back

    def _handle_prefill(self, submission: _Submission) -> list[Event]:
        seq, = submission.sequences
        tokens, logits = submission.pending.wait()
        if seq.gpu is not None:
            return self._accept(seq, SampledToken(int(tokens[0, 0]), math.nan))
        return self._accept_cpu(seq, submission.pending, 0)

    def _handle_gpu_decode(self, submission: _Submission) -> list[Event]:
        tokens, _ = submission.pending.wait()
        events: list[Event] = []
        for column, seq in enumerate(submission.sequences):
            for token in tokens[:, column].tolist():
                if seq.finished:
                    break
                events += self._accept(seq, SampledToken(token, math.nan))
        return events

    def _handle_stepwise(self, submission: _Submission) -> list[Event]:
        tokens, _ = submission.pending.wait()
        events: list[Event] = []
        for row, seq in enumerate(submission.sequences):
            if row in submission.dropped:
                continue
            if seq.gpu is not None:
                events += self._accept(seq, SampledToken(int(tokens[0, row]), math.nan))
            else:
                events += self._accept_cpu(seq, submission.pending, row)
        return events

    def _accept_cpu(self, seq: _Sequence, pending: PendingStep, row: int) -> list[Event]:
        """The CPU's token for a sequence from its row of a waited-for submission: from the row's candidates
        where they serve, else from its logits (those the submission read, or those kept on the GPU)."""
        if seq.finished:
            return []
        assert seq.sampler is not None and seq.session is not None
        token = seq.sampler.sample_candidates(pending.candidates[row]) if seq.candidates else None
        if token is None:
            logits = pending.wait()[1].get(row)
            logits = self.engine.row_logits(seq.session) if logits is None else logits.reshape(-1)
            token = seq.sampler.sample(logits, seq.history)
        seq.history.append(token.id)  # before _accept: a jump appends the forced tokens after it
        return self._accept(seq, token)

    def _checks_first(self, seq: _Sequence) -> bool:
        """Whether a split row's next token is drawn unmasked and checked by its grammar (the module docstring)."""
        return seq.check_first if self.check_first is None else self.check_first

    def _accept(self, seq: _Sequence, token: SampledToken) -> list[Event]:
        """A sampled token of a running sequence: the end of it, or one more token out (for a stepwise
        sequence, the input of its next step); a grammar takes the token and may end the sequence, or refuses one
        drawn unmasked (_refused)."""
        if seq.finished:
            return []
        constraint = seq.constraint
        if constraint is not None and seq.split and self._checks_first(seq) and not constraint.allows(token.id):
            return self._refused(seq)
        if token.id in seq.stops:
            return self._finish(seq, "stop")
        events = self._take(seq, token)
        if not seq.finished and seq.stepwise:
            seq.next_token = token.id
        if not seq.finished and seq.constraint is not None and self.jump_forward:
            events += self._jump(seq, token.id)
        return events

    def _take(self, seq: _Sequence, token: SampledToken) -> list[Event]:
        """One more token out: its grammar takes it, and it may end the sequence (grammar complete, max_tokens)."""
        seq.produced += 1
        seq.emitted.append(token.id)
        events: list[Event] = [TokenEvent(seq.key, token)]
        if seq.constraint is not None:
            try:
                seq.constraint.advance(token.id)
            except Exception as error:  # noqa: BLE001 - the grammar failed: this sequence ends with it
                return events + self._finish(seq, "error", error)
            if seq.constraint.finished:  # the grammar is complete and allows nothing more
                return events + self._finish(seq, "stop")
        if seq.produced >= seq.max_tokens:
            events += self._finish(seq, "length")
        return events

    def _jump(self, seq: _Sequence, token: int) -> list[Event]:
        """Jump-forward decoding: the tokens seq's grammar forces after `token` (its only legal continuation, so
        greedy or sampled, a step each would give the same) are handed out now and go in as one prompt chunk
        (_submit_last_chunks), with the token if no step sent yet feeds it; the token after them is sampled at the
        chunk's end. So a schema's fixed keys and punctuation cost a round, not a round a token."""
        assert seq.session is not None and seq.constraint is not None
        fed = seq.session.n_past  # positions sent: the token's among them where a step recorded or sent feeds it
        unfed = len(seq.request) + len(seq.emitted) - fed
        forced = seq.constraint.forced_tokens(min(JUMP_TOKENS - unfed, seq.max_tokens - seq.produced))
        if not forced:
            return []
        events: list[Event] = []
        on_cpu = seq.gpu is None  # its logprob under the grammar: the only token allowed
        for taken, forced_id in enumerate(forced, 1):
            events += self._take(seq, SampledToken(forced_id, 0.0 if on_cpu else math.nan,
                                                   [(forced_id, 0.0)] if on_cpu else []))
            seq.history.append(forced_id)
            if seq.finished:
                break
        self.forced_tokens += taken
        if seq.sampler is not None:  # its later draws stay those of a step a token
            seq.sampler.skip(taken)
        # a step in flight feeds the token (and runs on for an ended row, whose cache is published); else the chunk
        seq.next_token = token if seq.stepwise and not unfed else None
        if not seq.finished:
            seq.prompt = seq.request + seq.emitted
            seq.prefilled = fed
            seq.submitted = seq.produced  # a step in flight that samples for it is dropped (_Submission.dropped)
            seq.jump = True
        return events

    def _refused(self, seq: _Sequence) -> list[Event]:
        """A token drawn unmasked that the row's grammar refuses is dropped: the row goes back to the position of its
        last token, which goes in again as a chunk (the positions after it are written again), the token after it
        drawn under the mask there, with the same noise (the noise is keyed by position). The row fills masks again
        until they take long again. A step already sent for the row runs on, its token dropped (as for _jump)."""
        assert seq.session is not None and seq.emitted  # a prompt's first token is drawn under the mask
        self.refused_tokens += 1
        seq.check_first = False
        seq.prompt = seq.request + seq.emitted
        seq.prefilled = len(seq.prompt) - 1
        seq.session.rewind(seq.prefilled)
        seq.submitted = seq.produced
        seq.jump = True
        return []

    def _finish(self, seq: _Sequence, reason: str, error: BaseException | None = None) -> list[Event]:
        seq.finished = True
        self._release_if_done(seq)
        return [EndEvent(seq.key, reason, error)]

    def _release_if_done(self, seq: _Sequence) -> None:
        """Close an ended sequence's session once no submission in flight holds it."""
        if seq.finished and seq.in_flight == 0 and self._sequences.get(seq.key) is seq:
            del self._sequences[seq.key]
            if seq.session is not None:
                seq.session.publish(seq.cacheable, seq.images)  # a chat's next turn finds its pages
                seq.session.close()

    def _fail_all(self, error: BaseException) -> list[Event]:
        while self._logits_ahead:
            _discard_when_finished(*self._logits_ahead.popleft()[:2])
        if self._split is not None:
            self._split[0].abandon()
            self._split = None
        while self._rounds:  # their read-back buffers go back; their results (if any) no longer matter
            for submission in self._rounds.popleft().submissions:
                with contextlib.suppress(Exception):
                    submission.pending.wait()
        events: list[Event] = []
        for seq in list(self._sequences.values()):
            seq.in_flight = 0
            if not seq.finished:
                events += self._finish(seq, "error", error)
            else:
                self._release_if_done(seq)
        self.pool.forget_prefixes()  # a failed submission may have left pages half written
        return events
