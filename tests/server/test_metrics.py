"""/metrics: what a Prometheus scrape shows after real requests to a live server on the fake model."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from server.metrics import Metrics, gpu_memory_bytes, meter_audio, observe_audio
from tests.server.live_server import ThreadServer
from tests.server.test_app import CHAT, health, start, wait_until

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(server: ThreadServer) -> Samples:
    response = httpx.get(f"{server.url}/metrics")
    assert response.status_code == 200 and response.headers["content-type"].startswith("text/plain")
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(response.text) for s in family.samples}


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    srv = start(step_s=0.01, max_batch=1)
    yield srv
    srv.__exit__()


def test_requests_are_counted_by_route_template_and_status(server: ThreadServer) -> None:
    before = scrape(server)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    client.models.retrieve("gemma-3-270m")
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no/such:model")
    httpx.get(f"{server.url}/no/such/path")
    route = "/v1/models/{model}"  # one label for every model name a client sends

    def counted() -> bool:  # a request is counted once its response has gone out: just after the client's read
        after = scrape(server)
        return (value(after, "hearth_http_requests_total", route=route, method="GET", status="200")
                == value(before, "hearth_http_requests_total", route=route, method="GET", status="200") + 1
                and value(after, "hearth_http_requests_total", route=route, method="GET", status="404") >= 1
                and value(after, "hearth_http_requests_total", route="unmatched", method="GET", status="404") >= 1
                and value(after, "hearth_http_request_duration_seconds_count", route=route, method="GET") >= 2)

    assert wait_until(counted, timeout=5)


def test_generation_tokens_time_to_first_token_and_rate(server: ThreadServer) -> None:
    before = scrape(server)
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    whole = client.chat.completions.create(**CHAT, max_tokens=6)  # type: ignore[arg-type]
    stream = client.chat.completions.create(**CHAT, max_tokens=5, stream=True,  # type: ignore[arg-type]
                                            stream_options={"include_usage": True})
    usage = [chunk.usage for chunk in stream if chunk.usage][0]
    completion = client.completions.create(model="gemma-3-270m", prompt="abc", max_tokens=4)
    after = scrape(server)
    model = {"model": "gemma-3-270m"}

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("hearth_generated_tokens_total", **model) == whole.usage.completion_tokens + 5 + 4  # type: ignore
    prompts = whole.usage.prompt_tokens + usage.prompt_tokens + completion.usage.prompt_tokens  # type: ignore
    assert grew("hearth_prompt_tokens_total", **model) == prompts
    assert grew("hearth_time_to_first_token_seconds_count", **model) == 3
    assert grew("hearth_generation_tokens_per_second_count", **model) == 3
    assert grew("hearth_generations_total", outcome="completed", **model) == 3
    # At 10 ms a token the first one cannot take a minute; the sum is in seconds.
    assert 0 < grew("hearth_time_to_first_token_seconds_sum", **model) < 60
    route = "/v1/chat/completions"
    assert wait_until(lambda: value(scrape(server), "hearth_http_requests_total", route=route, method="POST",
                                    status="200") - value(before, "hearth_http_requests_total", route=route,
                                                          method="POST", status="200") == 2, timeout=5)


def test_queue_depth_and_model_state_are_read_at_scrape_time(server: ThreadServer) -> None:
    samples = scrape(server)
    assert value(samples, "hearth_model_state", model="gemma-3-270m", kind="text", state="ready") == 1
    assert value(samples, "hearth_models_loaded") == 1
    assert value(samples, "hearth_model_loads_total", model="gemma-3-270m") == 1
    assert value(samples, "process_resident_memory_bytes") > 10e6
    assert ("hearth_gpu_memory_bytes", frozenset()) in samples
    # max_batch is 1: a second stream waits in the queue while the first runs.
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json={**CHAT, "max_tokens": 200, "stream": True},
                      timeout=30) as first:
        lines = first.iter_lines()  # kept: a dropped iterator closes the response, and the server sees a disconnect
        next(lines)
        with httpx.stream("POST", f"{server.url}/v1/chat/completions",
                          json={**CHAT, "max_tokens": 200, "stream": True}, timeout=30) as second:
            assert second.status_code == 200
            busy = scrape(server)
            assert value(busy, "hearth_model_running_requests", model="gemma-3-270m") == 1
            assert value(busy, "hearth_http_requests_in_flight") >= 2
    # Both left early: their generations end as cancelled, and nothing stays queued.
    assert wait_until(lambda: health(server)["gemma-3-270m"]["running"] == 0)
    after = scrape(server)
    assert value(after, "hearth_model_queue_depth", model="gemma-3-270m") == 0
    assert value(after, "hearth_generations_total", model="gemma-3-270m", outcome="cancelled") >= 1


def test_errors_are_counted_with_their_status(server: ThreadServer) -> None:
    bad = httpx.post(f"{server.url}/v1/chat/completions", content=b"{not json", headers={"content-type": "x"})
    assert bad.status_code == 400
    samples = scrape(server)
    assert value(samples, "hearth_http_requests_total", route="/v1/chat/completions", method="POST", status="400") >= 1


def test_audio_seconds_count_inside_a_request_and_do_nothing_outside() -> None:
    metrics = Metrics()
    observe_audio("generated", "kokoro", 2.5)  # no request: no metrics to count in, no error
    token = metrics.activate()
    try:
        observe_audio("generated", "kokoro", 2.5)
        observe_audio("transcribed", "whisper-tiny.en", 30.0)
        observe_audio("transcribed", "whisper-tiny.en", 0.0)
    finally:
        Metrics.deactivate(token)
    got = {(s.name, json.dumps(s.labels, sort_keys=True)): s.value
           for family in metrics.registry.collect() for s in family.samples}
    assert got[("hearth_audio_seconds_total", '{"direction": "generated", "model": "kokoro"}')] == 2.5
    assert got[("hearth_audio_seconds_total", '{"direction": "transcribed", "model": "whisper-tiny.en"}')] == 30.0


def test_gpu_memory_counts_wgpu_buffers() -> None:
    """wgpu-py's own tally of buffer bytes goes up by what a buffer holds while it lives."""
    from gpu.device import default_device

    device = default_device()
    before = gpu_memory_bytes()
    buffer = device.create_buffer(1 << 20, "metrics test")
    assert gpu_memory_bytes() - before == 1 << 20
    buffer.destroy()
    del buffer


def test_audio_seconds_of_transcriptions_and_of_a_metered_speech_job() -> None:
    import io
    import wave

    import numpy as np

    from tests.server.all_fakes import fake_app

    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes(np.zeros(24000, np.int16).tobytes())  # 1.5 s
    with ThreadServer(fake_app()) as srv:
        assert wait_until(lambda: httpx.get(f"{srv.url}/ready").status_code == 200)
        upload = {"file": ("a.wav", buffer.getvalue(), "audio/wav")}
        reply = httpx.post(f"{srv.url}/v1/audio/transcriptions", files=upload, data={"model": "whisper-1"}, timeout=60)
        assert reply.status_code == 200, reply.text
        body = {"model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "pcm"}
        speech = httpx.post(f"{srv.url}/v1/audio/speech", json=body, timeout=60)
        assert speech.status_code == 200, speech.text
        samples = scrape(srv)
    assert value(samples, "hearth_audio_seconds_total", model="whisper-tiny.en", direction="transcribed") == 1.5
    # pcm is 16-bit mono at 24 kHz: the seconds counted are the seconds sent.
    spoken = len(speech.content) / 2 / 24000
    assert value(samples, "hearth_audio_seconds_total", model="kokoro", direction="generated") == pytest.approx(spoken)

    metrics = Metrics()
    token = metrics.activate()
    try:
        job = meter_audio(lambda model: iter([np.zeros(24000), np.zeros(12000)]), "generated", "kokoro",
                          lambda piece: piece.size / 24000)
    finally:
        Metrics.deactivate(token)
    pieces = list(job(None))  # on the worker thread: no request context needed any more
    assert len(pieces) == 2
    assert metrics.audio_seconds.labels("kokoro", "generated")._value.get() == 1.5
