"""The chat worker on a fake model: events, finish reasons, stop strings, queueing and cancellation."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest

from models.text.sampler import SamplingParams
from server.chat_worker import ChatWorker
from server.errors import QueueFull
from server.jobs import _JOB_DONE, ChoiceDone, ChoiceSpec, Job, JobHandle, TextDelta, TokenInfo, hold_events, send_held
from tests.server.fake_model import SCRIPT, fake_loader

GREEDY = SamplingParams(temperature=0.0)


def make_worker(step_s: float = 0.0, max_queue: int = 4, **kwargs: object) -> ChatWorker:
    worker = ChatWorker("fake", "fake-source", fake_loader(step_s=step_s, **kwargs), max_queue=max_queue)
    worker.start()
    return worker


def job(prompt: str = "Hi", max_tokens: int = 8, n: int = 1, stop: tuple[str, ...] = (), logprobs: bool = False,
        sampling: SamplingParams = GREEDY) -> Job:
    ids = [1, *(5 + b for b in prompt.encode())]
    return Job([ChoiceSpec(i, ids, sampling, max_tokens) for i in range(n)], stop=stop, logprobs=logprobs)


async def run_job(worker: ChatWorker, j: Job) -> tuple[dict[int, str], list[ChoiceDone]]:
    texts: dict[int, str] = {}
    done: list[ChoiceDone] = []
    async for event in worker.submit(j, 1).events():
        if isinstance(event, TextDelta):
            texts[event.index] = texts.get(event.index, "") + event.text
        else:
            done.append(event)
    return texts, done


def wait_for(condition: Callable[[], bool], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def test_generates_until_length_then_until_eos() -> None:
    async def main() -> None:
        worker = make_worker()
        await worker.wait_ready()
        texts, done = await run_job(worker, job(max_tokens=8))
        assert texts[0] == SCRIPT[:8]
        assert (done[0].finish_reason, done[0].completion_tokens, done[0].prompt_tokens) == ("length", 8, 3)
        worker.stop()

        eos_worker = make_worker(eos_after=3)
        await eos_worker.wait_ready()
        texts, done = await run_job(eos_worker, job(max_tokens=8))
        assert texts[0] == SCRIPT[:3]
        assert (done[0].finish_reason, done[0].completion_tokens) == ("stop", 3)
        ignoring = job(max_tokens=8)
        ignoring.ignore_eos = True  # past the end-of-sequence token, to max_tokens
        texts, done = await run_job(eos_worker, ignoring)
        assert (done[0].finish_reason, done[0].completion_tokens) == ("length", 8)
        eos_worker.stop()

    asyncio.run(main())


def test_stop_string_is_matched_across_tokens_and_never_sent() -> None:
    async def main() -> None:
        worker = make_worker()
        await worker.wait_ready()
        texts, done = await run_job(worker, job(max_tokens=12, stop=("o w", "zzz")))
        assert texts[0] == "Hell"
        assert done[0].finish_reason == "stop"
        assert worker.model.open_sessions == 0
        worker.stop()

    asyncio.run(main())


def test_choices_run_together_with_their_own_indexes() -> None:
    async def main() -> None:
        worker = make_worker(max_batch=2)  # three choices: two in the batch, the third joins when one ends
        await worker.wait_ready()
        texts, done = await run_job(worker, job(max_tokens=5, n=3))
        assert texts == {0: SCRIPT[:5], 1: SCRIPT[:5], 2: SCRIPT[:5]}
        assert sorted(d.index for d in done) == [0, 1, 2]
        assert worker.model.open_sessions == 0
        worker.stop()

    asyncio.run(main())


def test_requests_share_the_batch() -> None:
    """Two requests generate at the same time: the second starts before the first has ended."""

    async def main() -> None:
        worker = make_worker(step_s=0.01)
        await worker.wait_ready()
        first, second = (worker.submit(job(max_tokens=30), 1) for _ in range(2))
        order: list[str] = []

        async def consume(name: str, handle: object) -> None:
            async for event in handle.events():  # type: ignore[attr-defined]
                order.append(f"{name}:{type(event).__name__}")

        await asyncio.gather(consume("a", first), consume("b", second))
        assert order.index("b:TextDelta") < order.index("a:ChoiceDone")
        worker.stop()

    asyncio.run(main())


def test_logprobs_travel_with_their_text() -> None:
    async def main() -> None:
        worker = make_worker()
        await worker.wait_ready()
        sampling = SamplingParams(temperature=0.0, top_logprobs=2)
        tokens = []
        async for event in worker.submit(job(max_tokens=4, logprobs=True, sampling=sampling), 1).events():
            if isinstance(event, TextDelta):
                tokens += event.tokens
        assert "".join(t.text for t in tokens) == SCRIPT[:4]
        assert all(len(t.top) == 2 and t.top[0][0] == t.text for t in tokens)
        assert tokens[0].bytes == list(b"H")
        worker.stop()

    asyncio.run(main())


def test_leaving_early_cancels_and_releases_the_session() -> None:
    async def main() -> None:
        worker = make_worker(step_s=0.02)
        await worker.wait_ready()
        events = worker.submit(job(max_tokens=200), 1).events()
        async for _ in events:
            break
        await events.aclose()  # what a disconnecting client's stream does
        started = time.monotonic()
        assert await asyncio.to_thread(wait_for, lambda: worker.model.open_sessions == 0 and worker.running == 0)
        # Cancellation is seen at the next token: well within 200 tokens' time (4 s at 20 ms a token).
        assert time.monotonic() - started < 1.0
        texts, _ = await run_job(worker, job(max_tokens=3))
        assert texts[0] == SCRIPT[:3]
        worker.stop()

    asyncio.run(main())


def test_queue_bound_gives_queue_full_and_cancelled_waiters_leave_at_once() -> None:
    async def main() -> None:
        worker = make_worker(step_s=0.02, max_queue=1, max_batch=1)
        await worker.wait_ready()
        running = worker.submit(job(max_tokens=100), 1)
        assert await asyncio.to_thread(wait_for, lambda: worker.running == 1)
        waiting = worker.submit(job(max_tokens=100), 1)
        with pytest.raises(QueueFull) as raised:
            worker.submit(job(max_tokens=1), 7)
        assert raised.value.status == 429 and raised.value.headers["Retry-After"] == "7"
        waiting.cancel()
        assert worker.queued == 0
        worker.submit(job(max_tokens=1), 1).cancel()  # the freed place can be taken again
        running.cancel()
        assert await asyncio.to_thread(wait_for, lambda: worker.idle and worker.model.open_sessions == 0)
        worker.stop()

    asyncio.run(main())


def test_load_failure_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    async def main() -> None:
        worker = make_worker(fail=True)
        with pytest.raises(RuntimeError, match="cannot load"):
            await worker.wait_ready()
        assert worker.state == "failed" and "cannot load" in (worker.error or "")

    with caplog.at_level(logging.INFO, logger="hearth.worker"):
        asyncio.run(main())
    assert "loading fake: 100% (4/4)" in caplog.text


@pytest.mark.parametrize("compile_ahead", [True, False], ids=["compile-ahead", "short-warm-up"])
def test_ready_only_after_compiling_ahead(compile_ahead: bool) -> None:
    """With compile_ahead the worker calls the model's warm_up (every pipeline a request can hit) and is loading
    until it returns; without it, only the short prompt and decode step of the plain warm-up run."""
    release = threading.Event()
    worker = ChatWorker("fake", "fake-source", fake_loader(on_warm_up=release.wait), max_queue=1,
                        compile_ahead=compile_ahead)
    worker.start()
    try:
        if compile_ahead:
            assert wait_for(lambda: hasattr(worker, "model"))
            time.sleep(0.05)
            assert worker.state == "loading"
        release.set()
        assert wait_for(lambda: worker.state == "ready")
        assert worker.model.warm_ups == (1 if compile_ahead else 0)
    finally:
        release.set()
        worker.stop()


def test_steps_per_submit_reaches_the_loader_when_set() -> None:
    seen: list[dict[str, object]] = []

    def loader(source: str, **kwargs: object) -> object:
        seen.append(kwargs)
        return fake_loader()(source, **kwargs)

    for steps in (None, 1):
        worker = ChatWorker("fake", "fake-source", loader, max_queue=1, steps_per_submit=steps)
        worker.start()
        assert wait_for(lambda: worker.state == "ready")
        worker.stop()
    assert "steps_per_submit" not in seen[0]  # the default: loaders without the argument still work
    assert seen[1]["steps_per_submit"] == 1


def test_a_dropped_handle_cancels_its_job() -> None:
    """A stream whose response never started never iterates its handle; dropping it must free the place."""

    async def main() -> None:
        worker = make_worker(step_s=0.02, max_queue=2, max_batch=1)
        await worker.wait_ready()
        running = worker.submit(job(max_tokens=100), 1)
        assert await asyncio.to_thread(wait_for, lambda: worker.running == 1)
        worker.submit(job(max_tokens=100), 1)  # the handle is dropped at once
        assert worker.queued == 0
        del running
        assert await asyncio.to_thread(wait_for, lambda: worker.idle and worker.model.open_sessions == 0)
        worker.stop()

    asyncio.run(main())


def test_deltas_waiting_together_come_as_one_event() -> None:
    """A choice's deltas that wait in the queue together (a round's tokens) reach the service as one: one chunk
    for the client, the tokens' logprobs in order; another choice's deltas and a choice's end are not merged."""

    class NoWorker:
        def cancel(self, job: Job) -> None:
            raise AssertionError("the job ended: nothing to cancel")

    async def main() -> list[object]:
        j = Job([])
        j._loop, j._events = asyncio.get_running_loop(), asyncio.Queue()
        tokens = [TokenInfo(i, str(i), [48 + i], -0.5, []) for i in range(5)]
        done = ChoiceDone(0, "length", 3, 3)
        for event in (TextDelta(0, "a", tokens[:1]), TextDelta(0, "b", tokens[1:2]), TextDelta(1, "c", tokens[2:3]),
                      TextDelta(1, "d", tokens[3:4]), done, TextDelta(0, "e", tokens[4:]), _JOB_DONE):
            j._events.put_nowait(event)
        return [event async for event in JobHandle(NoWorker(), j).events()]  # type: ignore[arg-type]

    tokens = [TokenInfo(i, str(i), [48 + i], -0.5, []) for i in range(5)]
    assert asyncio.run(main()) == [TextDelta(0, "ab", tokens[:2]), TextDelta(1, "cd", tokens[2:4]),
                                   ChoiceDone(0, "length", 3, 3), TextDelta(0, "e", tokens[4:])]


def test_a_rounds_events_wake_the_event_loop_once() -> None:
    """Held events (the worker's round) go to the loop in one call for all jobs; an event not held goes at once."""

    class Loop:
        calls = 0

        def call_soon_threadsafe(self, callback: Callable[..., None], *args: object) -> None:
            self.calls += 1
            callback(*args)

    loop = Loop()
    jobs = [Job([]) for _ in range(3)]
    for j in jobs:
        j._loop, j._events = loop, asyncio.Queue()  # type: ignore[assignment]
    hold_events(jobs)
    for j in jobs:
        j.emit(TextDelta(0, "a", []))
        j.emit(TextDelta(0, "b", []))
    assert loop.calls == 0
    send_held(jobs)
    assert loop.calls == 1
    assert [[j._events.get_nowait().text for _ in range(2)] for j in jobs] == [["a", "b"]] * 3
    jobs[0].emit(_JOB_DONE)
    assert loop.calls == 2 and jobs[0]._events.get_nowait() is _JOB_DONE
