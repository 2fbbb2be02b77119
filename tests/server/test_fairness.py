"""Fairness, counted in rounds rather than seconds (so a loaded machine cannot make these flaky).

- The chat worker gives the batch's places to jobs in turn: a small request behind one of many choices gets one
  of the first places to free (server/chat_worker.py).
- The batch generator shares prefill: a short prompt behind long ones is prefilled in the next round, and long
  ones keep going while short ones keep coming (models/text/batch.py, run here on a fake engine that records
  which prompt chunks each round submits).
- Each round holds the adapter's turn and lets it go, so a model on the same GPU alternates with it round by round.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Hashable
from dataclasses import dataclass, field

import numpy as np

from gpu.turns import Turns
from models.text.batch import BatchGenerator, EndEvent, Event, TokenEvent
from models.text.sampler import SamplingParams
from models.text.step_io import PREFILL_BUCKETS, ChunkRow, DecodeRow
from server.chat_worker import ChatWorker
from server.jobs import ChoiceDone, ChoiceSpec, Job, JobEvent, JobHandle
from tests.server.fake_model import fake_loader
from tests.server.test_chat_worker import wait_for

GREEDY = SamplingParams(temperature=0.0)
PROMPT = [1, 5 + ord("H"), 5 + ord("i")]


async def drain(handle: JobHandle) -> None:
    async for _ in handle.events():
        pass


def steps_at_choice_ends(job: Job, model: object) -> list[int]:
    """The model's round count each time one of the job's choices ends, recorded on the worker thread."""
    ends: list[int] = []
    emit = job.emit

    def recording(event: JobEvent) -> None:
        if isinstance(event, ChoiceDone):
            ends.append(model.steps)  # type: ignore[attr-defined]
        emit(event)

    job.emit = recording  # type: ignore[method-assign]
    return ends


def test_a_small_request_is_admitted_at_once_behind_a_request_of_many_choices() -> None:
    """40 choices of 8 tokens on a batch of 4 places: the big request takes 3 and leaves the last free, so a
    1-choice request of 4 tokens that arrives during the first round joins the batch in the second and ends with
    round 5. Admitted in order of arrival, it waited for all 40 (ending near round 84)."""
    started, arrived = threading.Event(), threading.Event()

    def on_step(n: int) -> None:
        if n == 1:  # hold the first round until the small request is queued
            started.set()
            assert arrived.wait(10)

    async def main() -> None:
        worker = ChatWorker("fake", "fake", fake_loader(max_batch=4, on_step=on_step), max_queue=4)
        worker.start()
        await worker.wait_ready()
        big = Job([ChoiceSpec(i, PROMPT, GREEDY, 8) for i in range(40)])
        small = Job([ChoiceSpec(0, PROMPT, GREEDY, 4)])
        big_ends, small_ends = steps_at_choice_ends(big, worker.model), steps_at_choice_ends(small, worker.model)
        big_handle = worker.submit(big, 1)
        assert await asyncio.to_thread(started.wait, 10)
        small_handle = worker.submit(small, 1)
        arrived.set()
        await asyncio.gather(drain(big_handle), drain(small_handle))
        worker.stop()
        assert len(big_ends) == 40 and len(small_ends) == 1
        assert small_ends == [1 + 4], small_ends
        assert max(big_ends) >= 80  # the big one still ran all its choices, 3 at a time

    asyncio.run(main())


def test_places_go_round_robin_between_requests_of_many_choices() -> None:
    """Two requests of 12 choices each, the second arriving while the first fills the batch (3 of 4 places, the
    last kept free): the second takes the free place, and from then on each place that frees goes to the
    requests in turn, so their choices end interleaved rather than the first's 12 before the second's."""
    started, arrived = threading.Event(), threading.Event()

    def on_step(n: int) -> None:
        if n == 1:
            started.set()
            assert arrived.wait(10)

    async def main() -> tuple[list[int], list[int]]:
        worker = ChatWorker("fake", "fake", fake_loader(max_batch=4, on_step=on_step), max_queue=4)
        worker.start()
        await worker.wait_ready()
        first = Job([ChoiceSpec(i, PROMPT, GREEDY, 4) for i in range(12)])
        second = Job([ChoiceSpec(i, PROMPT, GREEDY, 4) for i in range(12)])
        first_ends, second_ends = steps_at_choice_ends(first, worker.model), steps_at_choice_ends(second, worker.model)
        first_handle = worker.submit(first, 1)
        assert await asyncio.to_thread(started.wait, 10)
        second_handle = worker.submit(second, 1)
        arrived.set()
        await asyncio.gather(drain(first_handle), drain(second_handle))
        worker.stop()
        return first_ends, second_ends

    first_ends, second_ends = asyncio.run(main())
    assert len(first_ends) == len(second_ends) == 12
    # In order of arrival the second's first choice ended after all 12 of the first's, with round 16.
    assert min(second_ends) <= 5
    assert abs(max(first_ends) - max(second_ends)) <= 4 + 1  # they finish within a generation of each other


def test_each_round_holds_the_adapter_turn_and_gives_it_back() -> None:
    """Another model on the same adapter asks for a turn during every round of the chat model's: they alternate,
    round by round, and each chat round runs while holding the turn. (Without turns, rounds ran back to back
    whoever was waiting.)"""
    turns = Turns()
    order: list[str] = []
    held: list[bool] = []
    chat_done = threading.Event()

    def on_step(n: int) -> None:  # inside generator.step(): the round itself
        held.append(turns._holder == threading.get_ident())
        order.append("chat")
        wait_for(lambda: turns.waiting >= 1, timeout=5)  # the other model is waiting for the adapter

    def other_model() -> None:
        while not chat_done.is_set():
            with turns.turn():
                order.append("other")
                wait_for(lambda: turns.waiting >= 1 or chat_done.is_set(), timeout=5)

    async def main() -> None:
        worker = ChatWorker("fake", "fake", fake_loader(turns=turns, on_step=on_step), max_queue=4)
        worker.start()
        await worker.wait_ready()
        other = threading.Thread(target=other_model, daemon=True)
        other.start()
        assert await asyncio.to_thread(wait_for, lambda: turns.waiting >= 1 or "other" in order)
        await drain(worker.submit(Job([ChoiceSpec(0, PROMPT, GREEDY, 6)]), 1))
        chat_done.set()
        other.join(10)
        worker.stop()

    asyncio.run(main())
    chat = [i for i, who in enumerate(order) if who == "chat"]
    assert len(chat) == 6 and all(held), (order, held)
    # Between two chat rounds the other model always had its turn.
    assert all(order[i + 1] == "other" for i in chat[:-1]), order


# -- the batch generator's prefill, on a fake engine ------------------------------------------------------------
class FakePool:
    """As much KV cache as anyone wants; slots are counted."""

    page_tokens = 16
    n_ctx = 1 << 16
    n_pages = 1 << 20

    def __init__(self, n_slots: int) -> None:
        self.n_slots = n_slots
        self.open = 0
        self.opened = 0  # sessions made so far: each one's slot number, so that none is reused

    @property
    def free_slots(self) -> int:
        return self.n_slots - self.open

    @property
    def free_tokens(self) -> int:
        return self.n_pages * self.page_tokens

    def pages_for(self, n_positions: int) -> int:
        return -(-n_positions // self.page_tokens)

    def pages_needed(self, slot: int, n_positions: int) -> int:
        return 0

    def forget_prefixes(self) -> None:
        pass


class FakeSession:
    def __init__(self, pool: FakePool) -> None:
        self.pool = pool
        self.slot = pool.opened
        self.n_past = 0
        pool.open += 1
        pool.opened += 1

    def _check_ids(self, ids: list[int]) -> None:
        pass

    def _reserve(self, n: int) -> None:
        pass

    def take_cached_prefix(self, ids: list[int], images: object = ()) -> int:
        return 0  # no prefix cache here: every prompt is prefilled whole

    def publish(self, ids: list[int], images: object = ()) -> None:
        pass

    def close(self) -> None:
        self.pool.open -= 1


class FakePending:
    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = tokens
        self.candidates: dict[int, object] = {}

    def wait(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        return self.tokens, {}


@dataclass
class FakeEngine:
    """Runs nothing: records the prompt chunks of each round (by session) and samples token 100 everywhere."""

    pool: FakePool
    round: int = 0
    chunks: list[tuple[int, int, int]] = field(default_factory=list)  # (round, session slot, tokens)
    packs: list[tuple[int, list[int]]] = field(default_factory=list)  # (round, tokens of each chunk) shared programs
    programs: list[tuple[int, int]] = field(default_factory=list)  # (round, rows) of each prompt program

    def new_session(self) -> FakeSession:
        return FakeSession(self.pool)

    def submit_prefill(self, session: FakeSession, ids: list[int], sampling: object = None, read_logits: bool = False,
                       last: bool = True, read_candidates: bool = False, mask: object = None) -> FakePending:
        self.chunks.append((self.round, session.slot, len(ids)))
        self.programs.append((self.round, bucket(len(ids))))
        session.n_past += len(ids)
        return FakePending(np.full((1, 1), 100))

    def submit_last_chunks(self, rows: list[ChunkRow]) -> FakePending:
        assert sum(len(r.ids) for r in rows) <= PREFILL_BUCKETS[-1]
        self.packs.append((self.round, [len(r.ids) for r in rows]))
        self.programs.append((self.round, bucket(sum(len(r.ids) for r in rows))))
        for row in rows:
            self.chunks.append((self.round, row.session.slot, len(row.ids)))
            row.session.n_past += len(row.ids)
        return FakePending(np.full((1, len(rows)), 100))

    def submit_decode(self, rows: list[DecodeRow], n_steps: int = 1) -> FakePending:
        for row in rows:
            row.session.n_past += n_steps
        return FakePending(np.full((n_steps, len(rows)), 100))


@dataclass
class FakeTextModel:
    max_batch: int = 32
    tokenizer: object = None


def generator(max_batch: int = 32) -> tuple[BatchGenerator, FakeEngine]:
    engine = FakeEngine(FakePool(max_batch + 4))
    model = FakeTextModel(max_batch)
    return BatchGenerator(model, engine=engine, overlap_rounds=True), engine  # type: ignore[arg-type]


def run_round(gen: BatchGenerator, engine: FakeEngine) -> list[Event]:
    engine.round += 1
    return gen.step()


def first_token_round(events_by_round: list[tuple[int, list[Event]]], key: Hashable) -> int | None:
    return next((r for r, events in events_by_round for e in events if isinstance(e, TokenEvent) and e.key == key),
                None)


def rows_by_round(engine: FakeEngine) -> dict[int, int]:
    """The rows of the prompt programs each round ran."""
    rows: dict[int, int] = {}
    for r, n in engine.programs:
        rows[r] = rows.get(r, 0) + n
    return rows


def bucket(n: int) -> int:
    return next(b for b in PREFILL_BUCKETS if b >= n)


def test_a_short_prompt_behind_long_ones_is_prefilled_the_next_round() -> None:
    """31 prompts of 2,000 tokens (4 chunks each) are prefilling when a 4-token prompt arrives: its one chunk goes
    in the next round and its first token comes back the round after (rounds are pipelined). Oldest first, it
    waited for every chunk of the 31 (about 120 rounds); in turn alone, for one chunk of each (31 rounds)."""
    gen, engine = generator()
    for i in range(31):
        gen.add(("long", i), [7] * 2000, GREEDY, 4, stop_ids=frozenset())
    seen = [(1, run_round(gen, engine))]
    gen.add("short", [7] * 4, GREEDY, 4, stop_ids=frozenset())
    added = engine.round
    while gen.busy:
        events = run_round(gen, engine)
        seen.append((engine.round, events))
    assert [r for r, slot, _ in engine.chunks if slot == 31] == [added + 1]  # the short prompt's session
    assert first_token_round(seen, "short") == added + 2
    # Every round's prompt programs ran at most two chunks' worth of rows: the first in turn and 512 more.
    assert max(rows_by_round(engine).values()) <= 2 * 512
    ends = [e for _, events in seen for e in events if isinstance(e, EndEvent)]
    assert len(ends) == 32 and all(e.reason == "length" for e in ends)


def test_long_prompts_keep_going_while_short_ones_keep_coming() -> None:
    """Short prompts go ahead of long chunks within a round, but never past the first in turn: a prompt of 4
    chunks, with 40 new 4-token prompts arriving every round (their chunks alone would fill every round's extra
    rows), is still in within 8 rounds. Smallest-first without the turn, it would never get a chunk."""
    gen, engine = generator(max_batch=128)
    gen.add("long", [7] * 2000, GREEDY, 1, stop_ids=frozenset())
    n = 0
    while engine.round < 8:
        for _ in range(40):
            gen.add(("short", n), [7] * 4, GREEDY, 1, stop_ids=frozenset())  # ends the round after its prefill
            n += 1
        run_round(gen, engine)
    long_rounds = [r for r, slot, _ in engine.chunks if slot == 0]
    assert len(long_rounds) == 4, long_rounds


def test_a_burst_of_short_prompts_shares_prompt_programs() -> None:
    """32 prompts of 128 tokens arriving together are prefilled four to a program of 512 rows, eight a round, so
    the last one's first token comes back in round 5 (rounds are pipelined). A program each, at the 256 rows of
    its bucket, three went in a round and the last first token waited for round 12."""
    gen, engine = generator()
    for i in range(32):
        gen.add(i, [7] * 128, GREEDY, 4, stop_ids=frozenset())
    seen = []
    while gen.busy:
        events = run_round(gen, engine)
        seen.append((engine.round, events))
    assert {round_ for round_, _ in engine.packs} == {1, 2, 3, 4}
    assert all(sizes == [128] * 4 for _, sizes in engine.packs) and len(engine.packs) == 8
    assert max(rows_by_round(engine).values()) == 2 * 512
    assert max(first_token_round(seen, i) for i in range(32)) == 5  # type: ignore[type-var]
