"""ThreadWorker: jobs run on the worker thread in order, results and streamed items come back, errors reach the
caller without stopping the worker, a full queue is QueueFull, and a client that leaves a stream closes it."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from config.settings import load_settings
from server.errors import QueueFull
from server.thread_worker import ThreadWorker


class Model:
    def __init__(self) -> None:
        self.threads: list[str] = []
        self.closed = threading.Event()

    def count(self, n: int, delay: float = 0.0) -> Iterator[int]:
        self.threads.append(threading.current_thread().name)
        try:
            for i in range(n):
                time.sleep(delay)
                yield i
        finally:
            self.closed.set()


def started(**kwargs: Any) -> ThreadWorker:
    worker = ThreadWorker("m", "src", lambda source, progress: Model(), max_queue=kwargs.get("max_queue", 4))
    worker.start()
    return worker


def test_call_runs_on_the_worker_thread_and_errors_come_back() -> None:
    async def main() -> None:
        worker = started()
        await worker.wait_ready()
        assert await worker.call(lambda model: threading.current_thread().name, 1) == "hearth-model-m"
        with pytest.raises(ZeroDivisionError):
            await worker.call(lambda model: 1 / 0, 1)
        assert await worker.call(lambda model: 42, 1) == 42  # still serving after a failed job
        worker.stop()

    asyncio.run(main())


def test_stream_yields_items_in_order_and_reports_errors() -> None:
    def broken(model: Model) -> Iterator[int]:
        yield 1
        raise ValueError("bad input")

    async def main() -> None:
        worker = started()
        await worker.wait_ready()
        assert [i async for i in worker.stream(lambda model: model.count(5), 1)] == [0, 1, 2, 3, 4]
        got = []
        with pytest.raises(ValueError, match="bad input"):
            async for item in worker.stream(broken, 1):
                got.append(item)
        assert got == [1]
        worker.stop()

    asyncio.run(main())


def test_leaving_a_stream_early_closes_the_generator() -> None:
    async def main() -> None:
        worker = started()
        await worker.wait_ready()
        model = worker.model
        stream = worker.stream(lambda m: m.count(10_000, delay=0.001), 1)
        async for item in stream:
            if item == 3:
                break
        await stream.aclose()
        assert await asyncio.to_thread(model.closed.wait, 5)
        assert await worker.call(lambda m: "next", 1) == "next"
        worker.stop()

    asyncio.run(main())


def test_full_queue_is_queue_full() -> None:
    async def main() -> None:
        worker = started(max_queue=1)
        await worker.wait_ready()
        gate = threading.Event()
        first = asyncio.ensure_future(worker.call(lambda m: gate.wait(5), 1))
        while worker.running == 0:  # the first job has left the queue
            await asyncio.sleep(0.01)
        second = asyncio.ensure_future(worker.call(lambda m: "queued", 1))
        await asyncio.sleep(0.05)
        with pytest.raises(QueueFull):
            await worker.call(lambda m: "over", 1)
        gate.set()
        assert await first and await second == "queued"
        worker.stop()

    asyncio.run(main())


def test_every_family_has_a_default_and_the_openai_aliases() -> None:
    settings = load_settings(env={})
    assert settings.speech.alias_target("tts-1") == "kokoro"
    assert settings.transcription.alias_target("whisper-1") == "whisper-tiny.en"
    assert settings.embeddings.alias_target("text-embedding-3-small") == "all-minilm-l6-v2"


def test_a_name_may_reach_only_one_model() -> None:
    from config.settings import SettingsError

    with pytest.raises(SettingsError, match="also a chat model or alias"):
        load_settings(env={}, overrides={"speech.aliases": {"gpt-4o-mini": ""}})
