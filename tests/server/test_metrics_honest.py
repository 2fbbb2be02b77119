"""Generation metrics from the model's own times: time to first token ends with the first sampled token, and the
rate is tokens over the time the model took to make them, even when tokens come back several to a round.

The generator here behaves as models/text/batch.py does: a sequence's prefill and its first decode submission
(8 steps) share a round, so its first 9 tokens reach the worker together at the round's end. The assertions
compare the metrics with the times the generator stamped on its tokens, never with the wall clock, so a loaded
machine cannot make them fail.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Hashable, Sequence
from typing import Any

import pytest

from config.settings import load_settings
from models.text.batch import EndEvent, Event, TokenEvent
from models.text.sampler import SampledToken, SamplingParams
from server.chat_worker import ChatWorker
from server.jobs import ChoiceSpec, Job
from server.metrics import Metrics
from server.services.generation import submit
from tests.server.fake_model import BYTE0, FakeModel

GREEDY = SamplingParams(temperature=0.0)
BURST = 8  # decode steps per submission, as STEPS_PER_SUBMIT


class BurstGenerator:
    """A round prefills the new sequences (prefill_s each) and runs a decode submission of BURST steps (decode_s);
    each token carries the time it was made, the end of its submission."""

    def __init__(self, prefill_s: float, decode_s: float) -> None:
        self.prefill_s, self.decode_s = prefill_s, decode_s
        self.seqs: dict[Hashable, dict[str, int]] = {}
        self.made: dict[Hashable, list[float]] = {}  # every token's time, by key

    @property
    def busy(self) -> bool:
        return bool(self.seqs)

    def can_admit(self, prompt: Sequence[int], max_tokens: int, n_sequences: int = 1) -> bool:
        return True

    def add(self, key: Hashable, prompt_ids: list[int], sampling: SamplingParams, max_tokens: int,
            logprobs: bool = False) -> None:
        self.seqs[key] = {"max": max_tokens, "produced": 0}
        self.made[key] = []

    def cancel(self, key: Hashable) -> None:
        self.seqs.pop(key, None)

    def cached(self, key: Hashable) -> int:
        return 0

    def _token(self, key: Hashable, at: float) -> TokenEvent:
        self.seqs[key]["produced"] += 1
        self.made[key].append(at)
        return TokenEvent(key, SampledToken(BYTE0 + ord("a"), math.nan), at)

    def step(self) -> list[Event]:
        events: list[Event] = []
        for key, seq in list(self.seqs.items()):
            if seq["produced"] == 0:
                time.sleep(self.prefill_s)
                events.append(self._token(key, time.perf_counter()))
            time.sleep(self.decode_s)
            at = time.perf_counter()
            for _ in range(BURST):
                if seq["produced"] < seq["max"]:
                    events.append(self._token(key, at))
            if seq["produced"] >= seq["max"]:
                events.append(EndEvent(key, "length", at=at))
                del self.seqs[key]
        return events


class BurstModel(FakeModel):
    def __init__(self) -> None:
        super().__init__("burst")
        self.last: BurstGenerator | None = None

    def generator(self) -> BurstGenerator:  # type: ignore[override]
        self.last = BurstGenerator(prefill_s=0.01, decode_s=0.05)
        return self.last


def load_burst(source: str, **_: Any) -> BurstModel:
    return BurstModel()


def sample(metrics: Metrics, name: str) -> float:
    return metrics.registry.get_sample_value(name, {"model": "burst"}) or 0.0


def test_time_to_first_token_ends_at_the_prefill_and_the_rate_is_the_models() -> None:
    """9 tokens: the prefill's at t1, 8 more at t2 (one decode submission later), all reaching the worker at t2.
    TTFT is at most t1 - submission (it was t2 or later: 8 decode steps too long); the rate is 8 / (t2 - t1)
    (it was 9 tokens over the microseconds between the first text and the end: tens of thousands a second)."""
    metrics = Metrics()
    settings = load_settings(env={"HEARTH_OLLAMA": "false"})
    submitted = 0.0

    async def main() -> BurstModel:
        nonlocal submitted
        worker = ChatWorker("burst", "burst", load_burst, max_queue=4, warm_up=False)
        worker.start()
        await worker.wait_ready()
        active = metrics.activate()
        try:
            submitted = time.perf_counter()
            handle = submit(worker, Job([ChoiceSpec(0, [1, 2 + BYTE0], GREEDY, 9)]), settings)
        finally:
            metrics.deactivate(active)
        async for _ in handle.events():
            pass
        worker.stop()
        return worker.model  # type: ignore[return-value]

    model = asyncio.run(main())
    assert model.last is not None
    (made,) = model.last.made.values()
    first, last = made[0], made[-1]
    assert len(made) == 9 and last > first
    assert sample(metrics, "hearth_time_to_first_token_seconds_count") == 1
    assert 0 < sample(metrics, "hearth_time_to_first_token_seconds_sum") <= first - submitted
    assert sample(metrics, "hearth_generation_tokens_per_second_count") == 1
    assert sample(metrics, "hearth_generation_tokens_per_second_sum") == pytest.approx(8 / (last - first))
    assert sample(metrics, "hearth_generated_tokens_total") == 9
