"""The HTTP layer on a fake model (fast): readiness, auth, limits, queueing, disconnects, two models at once.

The same server code as production runs in uvicorn on loopback; only the model is the fake of
tests/server/fake_model.py. The real model's tests are in test_api.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from config.settings import load_settings
from server.app import create_app
from tests.server.fake_model import SCRIPT, fake_loader
from tests.server.live_server import ThreadServer

CHAT = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}]}


def wait_until(condition: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


def start(env: dict[str, str] | None = None, loader: Any = None, **loader_kwargs: Any) -> ThreadServer:
    settings = load_settings(env={"HEARTH_OLLAMA": "false", **(env or {})})
    app = create_app(settings, loader=loader or fake_loader(**loader_kwargs))
    server = ThreadServer(app).__enter__()
    assert wait_until(lambda: httpx.get(f"{server.url}/ready").status_code == 200)
    return server


def health(server: ThreadServer) -> dict[str, Any]:
    return httpx.get(f"{server.url}/health").json()["models"]


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    srv = start(step_s=0.02)
    yield srv
    srv.__exit__()


def test_ready_is_503_until_the_default_model_has_loaded() -> None:
    gate = threading.Event()
    inner = fake_loader()

    def slow_loader(source: str, **kwargs: Any) -> Any:
        gate.wait(10)
        return inner(source, **kwargs)

    settings = load_settings(env={"HEARTH_OLLAMA": "false"})
    with ThreadServer(create_app(settings, loader=slow_loader)) as srv:
        assert httpx.get(f"{srv.url}/health").status_code == 200  # alive while loading
        not_ready = httpx.get(f"{srv.url}/ready")
        assert not_ready.status_code == 503 and not_ready.json()["models"]["gemma-3-270m"]["state"] == "loading"
        gate.set()
        assert wait_until(lambda: httpx.get(f"{srv.url}/ready").status_code == 200)


def test_a_failed_load_keeps_ready_at_503_and_requests_get_503() -> None:
    settings = load_settings(env={"HEARTH_OLLAMA": "false"})
    with ThreadServer(create_app(settings, loader=fake_loader(fail=True))) as srv:
        assert wait_until(lambda: httpx.get(f"{srv.url}/health").json()["status"] == "unavailable")
        assert httpx.get(f"{srv.url}/ready").status_code == 503
        response = httpx.post(f"{srv.url}/v1/chat/completions", json=CHAT)
        assert response.status_code == 503
        assert response.json()["error"]["code"] == "model_unavailable"


def test_root_answers_as_ollama_and_sends_browsers_to_the_playground(server: ThreadServer) -> None:
    response = httpx.get(f"{server.url}/")
    assert (response.status_code, response.text) == (200, "Ollama is running")
    assert response.headers["content-type"].startswith("text/plain")
    browser = httpx.get(f"{server.url}/", headers={"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"})
    assert (browser.status_code, browser.headers["location"]) == (307, "/playground")
    assert httpx.get(f"{server.url}/docs").status_code == 200


def test_api_key_is_required_when_configured() -> None:
    srv = start(env={"HEARTH_API_KEY": "sekret"})
    try:
        denied = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="wrong", max_retries=0)
        with pytest.raises(openai.AuthenticationError) as raised:
            denied.models.list()
        assert raised.value.body["code"] == "invalid_api_key"  # type: ignore[index]
        allowed = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="sekret", max_retries=0)
        assert allowed.models.list().data[0].id == "gemma-3-270m"
        assert httpx.get(f"{srv.url}/health").status_code == 200  # health needs no key
    finally:
        srv.__exit__()


def test_oversized_bodies_get_413_declared_or_streamed() -> None:
    srv = start(env={"HEARTH_MAX_BODY_BYTES": "2048"})
    try:
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 4096}]}
        declared = httpx.post(f"{srv.url}/v1/chat/completions", json=big)
        assert declared.status_code == 413 and declared.json()["error"]["code"] == "request_too_large"

        def chunks() -> Iterator[bytes]:  # no Content-Length: sent chunked, counted as it arrives
            data = json.dumps(big).encode()
            yield from (data[i:i + 1000] for i in range(0, len(data), 1000))

        streamed = httpx.post(f"{srv.url}/v1/chat/completions", content=chunks(),
                              headers={"content-type": "application/json"})
        assert streamed.status_code == 413
        assert httpx.post(f"{srv.url}/v1/chat/completions", json={**CHAT, "max_tokens": 2}).status_code == 200
    finally:
        srv.__exit__()


def test_full_queue_gives_429_with_retry_after_and_cancelled_streams_free_their_places() -> None:
    srv = start(env={"HEARTH_MAX_QUEUE": "1", "HEARTH_RETRY_AFTER": "3"}, step_s=0.05, max_batch=1)
    client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
    try:
        running = client.chat.completions.create(**CHAT, max_tokens=200, stream=True)
        next(iter(running))
        waiting = client.chat.completions.create(**CHAT, max_tokens=200, stream=True)
        assert wait_until(lambda: health(srv)["gemma-3-270m"]["queued"] == 1)
        with pytest.raises(openai.RateLimitError) as raised:
            client.chat.completions.create(**CHAT, max_tokens=2)
        assert raised.value.response.headers["retry-after"] == "3"
        assert raised.value.body["code"] == "queue_full"  # type: ignore[index]
        waiting.close()
        running.close()
        # Both slots come back: nothing queued, nothing running, and the next request is served.
        assert wait_until(lambda: health(srv)["gemma-3-270m"] == {**health(srv)["gemma-3-270m"], "queued": 0,
                                                                  "running": 0})
        reply = client.chat.completions.create(**CHAT, max_tokens=3)
        assert reply.choices[0].message.content == SCRIPT[:3]
    finally:
        srv.__exit__()


def test_disconnecting_stream_cancels_its_generation(server: ThreadServer) -> None:
    model = server.app.state.manager.workers()["gemma-3-270m"].model
    with httpx.stream("POST", f"{server.url}/v1/chat/completions", json={**CHAT, "max_tokens": 250, "stream": True},
                      timeout=30) as response:
        for line in response.iter_lines():
            if '"content":"H"' in line:
                break
    # 250 tokens take 5 s at 20 ms each; the worker must notice the client within a token or two.
    started = time.monotonic()
    assert wait_until(lambda: health(server)["gemma-3-270m"]["running"] == 0, timeout=3)
    assert time.monotonic() - started < 2
    assert model.open_sessions == 0


def test_disconnecting_non_streaming_request_cancels_too(server: ThreadServer) -> None:
    async def leave_early() -> None:
        async with httpx.AsyncClient() as client:
            with pytest.raises(httpx.ReadTimeout):
                await client.post(f"{server.url}/v1/completions", timeout=0.5,
                                  json={"model": "gemma-3-270m", "prompt": "x", "max_tokens": 250})

    asyncio.run(leave_early())
    assert wait_until(lambda: health(server)["gemma-3-270m"]["running"] == 0, timeout=3)


def test_two_models_serve_at_once() -> None:
    """A slow model's long generation does not hold up a second model's request."""
    slow, fast = fake_loader(step_s=0.05), fake_loader(step_s=0.0)

    def loader(source: str, **kwargs: Any) -> Any:
        return (slow if source == "slow" else fast)(source, **kwargs)

    env = {"HEARTH_MODELS": "slow=slow,fast=fast", "HEARTH_OLLAMA": "false"}
    settings = load_settings(env=env)
    with ThreadServer(create_app(settings, loader=loader)) as srv:
        assert wait_until(lambda: httpx.get(f"{srv.url}/ready").status_code == 200)
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
        long_run = client.completions.create(model="slow", prompt="a", max_tokens=100, stream=True)
        next(iter(long_run))
        started = time.monotonic()
        quick = client.completions.create(model="fast", prompt="a", max_tokens=5)
        assert quick.choices[0].text == SCRIPT[:5]
        assert time.monotonic() - started < 2.0  # the slow one needs 5 s more: it was not waited for
        assert health(srv)["slow"]["running"] == 1
        long_run.close()


def test_server_keeps_serving_after_client_errors(server: ThreadServer) -> None:
    for body in (b"{", b"[]", b'{"model": 1}', json.dumps({**CHAT, "n": 0}).encode()):
        response = httpx.post(f"{server.url}/v1/chat/completions", content=body,
                              headers={"content-type": "application/json"})
        assert response.status_code == 400, body
        assert set(response.json()["error"]) == {"message", "type", "param", "code"}
    assert httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "max_tokens": 2}).status_code == 200


def test_ignore_eos_generates_max_tokens_on_chat_and_completions() -> None:
    server = start(eos_after=3)
    try:
        completion = {"model": "gemma-3-270m", "prompt": "x"}
        for path, body in (("/v1/completions", completion), ("/v1/chat/completions", CHAT)):
            for ignore_eos, want in ((False, ("stop", 3)), (True, ("length", 6))):
                reply = httpx.post(f"{server.url}{path}", json={**body, "max_tokens": 6, "ignore_eos": ignore_eos})
                assert reply.status_code == 200, reply.text
                got = reply.json()
                assert (got["choices"][0]["finish_reason"], got["usage"]["completion_tokens"]) == want, path
    finally:
        server.__exit__()


def test_logprobs_shapes(server: ThreadServer) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="x", max_retries=0)
    chat = client.chat.completions.create(**CHAT, max_tokens=3, logprobs=True, top_logprobs=2)  # type: ignore
    content = chat.choices[0].logprobs.content  # type: ignore[union-attr]
    assert [t.token for t in content] == list(SCRIPT[:3])  # type: ignore[union-attr]
    assert all(len(t.top_logprobs) == 2 for t in content)  # type: ignore[union-attr]
    plain = client.chat.completions.create(**CHAT, max_tokens=2, logprobs=True)  # type: ignore[arg-type]
    assert all(t.top_logprobs == [] for t in plain.choices[0].logprobs.content)  # type: ignore[union-attr]
    assert client.chat.completions.create(**CHAT, max_tokens=2).choices[0].logprobs is None  # type: ignore
    legacy = client.completions.create(model="gemma-3-270m", prompt="x", max_tokens=3, logprobs=1, echo=False)
    assert legacy.choices[0].logprobs.text_offset == [0, 1, 2]  # type: ignore[union-attr]
