"""API keys, CORS, request ids and limits, through the openai SDK and httpx against a live server on a fake model.

The server is the production app (all middleware) in uvicorn on loopback; only the model is the fake of
tests/server/fake_model.py, so these run in seconds.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.server.fake_model import SCRIPT
from tests.server.live_server import ThreadServer
from tests.server.test_app import CHAT, health, start, wait_until

KEYS = "key-one,key-two"
ORIGIN = "https://app.example.org"


@pytest.fixture(scope="module")
def locked() -> Iterator[ThreadServer]:
    """A server with two API keys and one CORS origin."""
    srv = start(env={"HEARTH_API_KEY": KEYS, "HEARTH_CORS_ORIGINS": f"{ORIGIN}, http://localhost:3000"})
    yield srv
    srv.__exit__()


def sdk(server: ThreadServer, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key=key, max_retries=0)


@pytest.mark.parametrize("key", ["key-one", "key-two"])
def test_each_configured_key_is_accepted_as_openai_sends_it(locked: ThreadServer, key: str) -> None:
    reply = sdk(locked, key).chat.completions.create(**CHAT, max_tokens=3)  # type: ignore[arg-type]
    assert reply.choices[0].message.content == SCRIPT[:3]
    assert {m.id for m in sdk(locked, key).models.list().data} >= {"gemma-3-270m"}


def test_anthropic_clients_x_api_key_header_is_accepted(locked: ThreadServer) -> None:
    reply = httpx.get(f"{locked.url}/v1/models", headers={"X-Api-Key": "key-two"})
    assert reply.status_code == 200, reply.text


@pytest.mark.parametrize("key", ["wrong", "key-one,key-two", "key-on", "KEY-ONE", "key-one-and-more"])
def test_a_wrong_key_is_401_in_openai_format(locked: ThreadServer, key: str) -> None:
    with pytest.raises(openai.AuthenticationError) as raised:
        sdk(locked, key).chat.completions.create(**CHAT, max_tokens=1)  # type: ignore[arg-type]
    assert raised.value.status_code == 401
    assert raised.value.body["type"] == "invalid_request_error"  # type: ignore[index]
    assert raised.value.body["code"] == "invalid_api_key"  # type: ignore[index]


@pytest.mark.parametrize("headers", [{}, {"Authorization": "key-one"}, {"Authorization": "Basic key-one"},
                                     {"Authorization": "Bearer"}, {"X-Api-Key": "wrong"}])
def test_missing_or_malformed_authorization_is_401_on_every_v1_route(locked: ThreadServer,
                                                                     headers: dict[str, str]) -> None:
    for method, path, body in [("POST", "/v1/chat/completions", CHAT), ("GET", "/v1/models", None),
                               ("GET", "/v1/models/gemma-3-270m", None),
                               ("POST", "/v1/embeddings", {"model": "all-minilm-l6-v2", "input": "x"}),
                               ("POST", "/v1/audio/speech", {"model": "tts-1", "input": "x", "voice": "af"}),
                               ("POST", "/v1/no/such/route", {})]:
        response = httpx.request(method, f"{locked.url}{path}", json=body, headers=headers)
        assert response.status_code == 401, path
        error = response.json()["error"]
        assert set(error) == {"message", "type", "param", "code"}
        assert (error["type"], error["code"]) == ("invalid_request_error", "invalid_api_key")


def test_probes_docs_and_metrics_are_open(locked: ThreadServer) -> None:
    for path in ("/health", "/ready", "/", "/openapi.json", "/metrics"):
        assert httpx.get(f"{locked.url}{path}").status_code == 200, path


def test_metrics_can_need_a_key_too() -> None:
    srv = start(env={"HEARTH_API_KEY": "k", "HEARTH_METRICS_NEED_KEY": "true"})
    try:
        assert httpx.get(f"{srv.url}/metrics").status_code == 401
        assert httpx.get(f"{srv.url}/metrics", headers={"Authorization": "Bearer k"}).status_code == 200
        assert httpx.get(f"{srv.url}/ready").status_code == 200
    finally:
        srv.__exit__()


def test_cors_preflight_and_responses_name_only_the_configured_origins(locked: ThreadServer) -> None:
    preflight = {"Origin": ORIGIN, "Access-Control-Request-Method": "POST",
                 "Access-Control-Request-Headers": "authorization, content-type"}
    # A browser's preflight carries no credentials: it must not be refused for want of a key.
    allowed = httpx.options(f"{locked.url}/v1/chat/completions", headers=preflight)
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == ORIGIN
    assert "authorization" in allowed.headers["access-control-allow-headers"].lower()
    refused = httpx.options(f"{locked.url}/v1/chat/completions", headers={**preflight, "Origin": "https://evil.test"})
    assert refused.status_code == 400 and "access-control-allow-origin" not in refused.headers
    reply = httpx.post(f"{locked.url}/v1/chat/completions", json={**CHAT, "max_tokens": 1},
                       headers={"Origin": ORIGIN, "Authorization": "Bearer key-two"})
    assert reply.status_code == 200 and reply.headers["access-control-allow-origin"] == ORIGIN
    assert "x-request-id" in reply.headers["access-control-expose-headers"].lower()


def test_without_cors_origins_no_cors_headers_are_sent() -> None:
    srv = start()
    try:
        reply = httpx.get(f"{srv.url}/v1/models", headers={"Origin": ORIGIN})
        assert reply.status_code == 200 and "access-control-allow-origin" not in reply.headers
    finally:
        srv.__exit__()


def test_request_ids_come_back_and_unsafe_ones_are_replaced(locked: ThreadServer) -> None:
    mine = httpx.get(f"{locked.url}/health", headers={"X-Request-Id": "trace-42.a"})
    assert mine.headers["x-request-id"] == "trace-42.a"
    made = httpx.get(f"{locked.url}/v1/models").headers["x-request-id"]  # a 401 carries one too
    assert made.startswith("req_") and len(made) == 28
    for forged in ("a b", "x" * 129, "caf\u00e9".encode("latin-1"), "id\\n"):  # spaces, too long, not ASCII
        assert httpx.get(f"{locked.url}/health", headers={"X-Request-Id": forged}).headers["x-request-id"] != forged
        assert httpx.get(f"{locked.url}/health", headers={"X-Request-Id": forged}).headers["x-request-id"
                                                                                            ].startswith("req_")
    stream = httpx.post(f"{locked.url}/v1/chat/completions", json={**CHAT, "max_tokens": 2, "stream": True},
                        headers={"Authorization": "Bearer key-one", "X-Request-Id": "stream-1"})
    assert stream.headers["x-request-id"] == "stream-1" and stream.text.rstrip().endswith("[DONE]")


def test_body_limit_is_413_and_upload_routes_have_their_own() -> None:
    srv = start(env={"HEARTH_MAX_BODY_BYTES": "2048", "HEARTH_MAX_UPLOAD_BYTES": "8192"})
    try:
        big = {**CHAT, "messages": [{"role": "user", "content": "x" * 4000}]}
        response = httpx.post(f"{srv.url}/v1/chat/completions", json=big)
        assert response.status_code == 413 and response.json()["error"]["code"] == "request_too_large"
        with pytest.raises(openai.APIStatusError) as raised:
            sdk(srv, "x").chat.completions.create(**big)  # type: ignore[arg-type]
        assert raised.value.status_code == 413

        def chunks() -> Iterator[bytes]:  # no Content-Length: counted as it arrives
            yield b'{"model": "gemma-3-270m", "messages": [{"role": "user", "content": "'
            for _ in range(10):
                yield b"y" * 500
            yield b'"}]}'

        streamed = httpx.post(f"{srv.url}/v1/chat/completions", content=chunks(),
                              headers={"Content-Type": "application/json"})
        assert streamed.status_code == 413
        # The transcription route takes bodies up to the upload limit (what it makes of them is its own business),
        # and refuses larger ones before reading them.
        upload = {"file": ("a.wav", b"\0" * 4000, "audio/wav")}
        assert httpx.post(f"{srv.url}/v1/audio/transcriptions", files=upload, data={"model": "no-such-model"}
                          ).status_code != 413
        upload = {"file": ("a.wav", b"\0" * 9000, "audio/wav")}
        assert httpx.post(f"{srv.url}/v1/audio/transcriptions", files=upload, data={"model": "no-such-model"}
                          ).status_code == 413
    finally:
        srv.__exit__()


def test_per_model_queue_limit_from_the_config_file(tmp_path: Path) -> None:
    config = tmp_path / "hearth.toml"
    config.write_text('[[models]]\nid = "gemma-3-270m"\nsource = "gemma-3-270m"\nmax_queue = 1\n')
    srv = start(env={"HEARTH_CONFIG": str(config)}, step_s=0.05, max_batch=1)
    streams: list[Any] = []
    try:
        # One runs, one may be taken towards the batch, one waits in the queue of 1: by the fourth, a 429
        # (the server-wide default of 32 would take 33).
        with pytest.raises(openai.RateLimitError) as raised:
            for _ in range(4):
                streams.append(sdk(srv, "x").chat.completions.create(**CHAT, max_tokens=100, stream=True))
                wait_until(lambda: health(srv)["gemma-3-270m"]["queued"] == 0, timeout=0.5)
        assert raised.value.response.headers["retry-after"] == "2" and len(streams) >= 2
    finally:
        for stream in streams:
            stream.close()
        srv.__exit__()


def test_a_request_past_the_timeout_is_504_and_its_generation_is_cancelled() -> None:
    srv = start(env={"HEARTH_REQUEST_TIMEOUT": "0.5"}, step_s=0.05)
    try:
        with pytest.raises(openai.APIStatusError) as raised:
            sdk(srv, "x").chat.completions.create(**CHAT, max_tokens=200)  # type: ignore[arg-type]
        assert raised.value.status_code == 504
        assert raised.value.body["code"] == "timeout"  # type: ignore[index]
        assert wait_until(lambda: health(srv)["gemma-3-270m"]["running"] == 0, timeout=5)
        # A stream is bounded too: past the limit it ends with an error event, and its generation stops.
        stream = sdk(srv, "x").chat.completions.create(**CHAT, max_tokens=200, stream=True)  # type: ignore[arg-type]
        with pytest.raises(openai.APIError, match="request_timeout_s"):
            for _ in stream:
                pass
        assert wait_until(lambda: health(srv)["gemma-3-270m"]["running"] == 0, timeout=5)
    finally:
        srv.__exit__()
