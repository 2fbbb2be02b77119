"""Limits on work and the smaller request-handling defects: prompts x n, embedding tokens, speech phonemes,
JSON bodies under another Content-Type, HEAD, unknown-model hints, load failures that must not show paths, and a
quiet start-up without XDG_RUNTIME_DIR.

All against the production app on fakes (tests/server/all_fakes.py) in uvicorn on loopback, so each refusal is
checked as a client sees it: a 4xx in OpenAI's error shape whose message names the setting to change.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import wave
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import pytest

from server.app import create_app
from tests.server.all_fakes import fake_app, fake_settings
from tests.server.fake_model import fake_loader
from tests.server.live_server import ROOT, ThreadServer

CHAT = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
# Small limits so each refusal needs only a small request; the defaults are checked where they matter (speech).
ENV = {"HEARTH_MAX_CHOICES": "6", "HEARTH_MAX_N": "8", "HEARTH_MAX_EMBEDDING_TOKENS": "100"}
# Ordinary English prose (about 1.0 phoneme per character with the shipped phonemizer).
PROSE = ("The old lighthouse keeper climbed the stairs each evening, lit the great lamp, and watched the ships pass "
         "safely beyond the rocks. In winter the wind howled around the tower, but he never missed a night. "
         "Villagers said he knew every captain by the sound of a horn, and perhaps that was true. ")


def wait_ready(server: ThreadServer) -> bool:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if httpx.get(f"{server.url}/ready").status_code == 200:
            return True
        time.sleep(0.05)
    return False


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    with ThreadServer(fake_app(env=ENV)) as srv:
        assert wait_ready(srv)
        yield srv


def post(server: ThreadServer, path: str, body: dict[str, Any], timeout: float = 60) -> httpx.Response:
    # 60 s: far above what any of these requests takes when refused (milliseconds), yet a request the old code
    # accepted fails the test by its status rather than hanging it.
    return httpx.post(f"{server.url}{path}", json=body, timeout=timeout)


def error_of(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


# -- prompts x n -----------------------------------------------------------------------------------------------
def test_many_prompts_in_one_completion_are_refused_before_any_work(server: ThreadServer) -> None:
    # 100,000 token-id prompts in a body well under the 4 MiB limit: refused from the count alone.
    body = {"model": "gemma-3-270m", "prompt": [[1, 2]] * 100_000, "max_tokens": 1}
    error = error_of(post(server, "/v1/completions", body))
    assert error["param"] == "prompt" and "HEARTH_MAX_CHOICES" in error["message"] and "100000" in error["message"]


def test_prompts_times_n_is_bounded_and_within_the_limit_passes(server: ThreadServer) -> None:
    error = error_of(post(server, "/v1/completions", {"model": "gemma-3-270m", "prompt": ["a", "b", "c", "d"],
                                                      "n": 2, "max_tokens": 1}))
    assert error["param"] == "prompt" and "limits.max_choices" in error["message"] and "8 choices" in error["message"]
    ok = post(server, "/v1/completions", {"model": "gemma-3-270m", "prompt": ["a", "b", "c"], "n": 2, "max_tokens": 1})
    assert ok.status_code == 200 and len(ok.json()["choices"]) == 6


def test_chat_n_is_bounded_by_max_choices(server: ThreadServer) -> None:
    error = error_of(post(server, "/v1/chat/completions", {**CHAT, "n": 7}))
    assert error["param"] == "n" and "HEARTH_MAX_CHOICES" in error["message"]
    error = error_of(post(server, "/v1/chat/completions", {**CHAT, "n": 9}))
    assert error["param"] == "n" and "HEARTH_MAX_N" in error["message"]
    assert post(server, "/v1/chat/completions", {**CHAT, "n": 6}).status_code == 200


# -- embeddings ------------------------------------------------------------------------------------------------
def test_embedding_inputs_are_bounded_by_their_total_tokens(server: ThreadServer) -> None:
    # The fake embedding model: one token per byte plus one; three 40-byte inputs are 123 tokens, over 100.
    body = {"model": "text-embedding-3-small", "input": ["x" * 40] * 3}
    error = error_of(post(server, "/v1/embeddings", body))
    assert error["param"] == "input" and "HEARTH_MAX_EMBEDDING_TOKENS" in error["message"]
    assert "input[2]" in error["message"]
    ok = post(server, "/v1/embeddings", {**body, "input": ["x" * 40] * 2})
    assert ok.status_code == 200 and len(ok.json()["data"]) == 2


def test_embedding_input_count_is_bounded_as_openai() -> None:
    from server.schemas.embeddings import EmbeddingRequest

    with pytest.raises(ValueError, match="at most 2048"):
        EmbeddingRequest(model="m", input=["x"] * 2049)


# -- speech ----------------------------------------------------------------------------------------------------
def test_speech_that_expands_into_too_many_phonemes_is_refused(server: ThreadServer) -> None:
    digits = ("1234567890 " * 373)[:4000]  # under the 4,096-character limit; about 9 phonemes a character
    error = error_of(post(server, "/v1/audio/speech", {"model": "tts-1", "voice": "af_bella", "input": digits,
                                                       "response_format": "pcm"}, timeout=120))
    assert error["param"] == "input" and "HEARTH_MAX_SPEECH_PHONEMES" in error["message"]


def test_speech_of_4096_characters_of_prose_passes_the_default_phoneme_limit(server: ThreadServer) -> None:
    prose = (PROSE * 20)[:4096]
    response = post(server, "/v1/audio/speech", {"model": "tts-1", "voice": "af_bella", "input": prose,
                                                 "response_format": "pcm"}, timeout=120)
    assert response.status_code == 200 and len(response.content) > 0


# -- JSON bodies, HEAD -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("content_type",
                         ["application/x-www-form-urlencoded", "text/plain", "application/octet-stream"])
def test_a_json_body_is_read_as_json_whatever_its_content_type(server: ThreadServer, content_type: str) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", content=json.dumps(CHAT),
                          headers={"content-type": content_type}, timeout=60)
    assert response.status_code == 200, response.text
    assert response.json()["object"] == "chat.completion"


def test_a_json_body_without_a_content_type_is_read_as_json(server: ThreadServer) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", content=json.dumps(CHAT).encode(), timeout=60)
    assert "content-type" not in response.request.headers
    assert response.status_code == 200, response.text


def test_a_body_that_is_not_json_says_so(server: ThreadServer) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", content=b"model=gemma&messages=hi",
                          headers={"content-type": "application/x-www-form-urlencoded"}, timeout=60)
    assert "could not parse the JSON body" in error_of(response)["message"]


def test_multipart_uploads_keep_their_content_type(server: ThreadServer) -> None:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16000)
        out.writeframes((np.sin(np.arange(8000) * 0.05) * 8000).astype(np.int16).tobytes())
    response = httpx.post(f"{server.url}/v1/audio/transcriptions", data={"model": "whisper-1"},
                          files={"file": ("a.wav", buffer.getvalue())}, timeout=60)
    assert response.status_code == 200, response.text


@pytest.mark.parametrize("path", ["/health", "/ready", "/", "/v1/models", "/metrics"])
def test_head_is_answered_like_get_without_a_body(server: ThreadServer, path: str) -> None:
    head = httpx.head(f"{server.url}{path}", timeout=30)
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == httpx.get(f"{server.url}{path}").headers["content-type"]


def test_head_on_a_post_route_is_405_not_a_crash(server: ThreadServer) -> None:
    assert httpx.head(f"{server.url}/v1/chat/completions", timeout=30).status_code == 405


# -- unknown models, failed loads ------------------------------------------------------------------------------
def test_an_unknown_model_suggests_the_closest_names_and_the_model_list(server: ThreadServer) -> None:
    error = error_of(post(server, "/v1/chat/completions", {**CHAT, "model": "gemma-3-27m"}), 404)
    assert error["code"] == "model_not_found" and "`gemma-3-270m`" in error["message"]
    assert "GET /v1/models" in error["message"]
    error = error_of(post(server, "/v1/embeddings", {"model": "nothing-like-it", "input": "x"}), 404)
    assert "GET /v1/models" in error_of(httpx.get(f"{server.url}/v1/models/gemma-3-27m"), 404)["message"]
    assert "`all-minilm-l6-v2`" in error["message"] and "gemma" not in error["message"]  # its own kind's names
    huge = error_of(post(server, "/v1/chat/completions", {**CHAT, "model": "m" * 100_000}), 404)
    assert len(huge["message"]) < 1000


def test_a_long_model_list_is_not_spelled_out() -> None:
    from server.errors import ModelNotFound

    names = [f"family-{i}:{size}b" for i in range(200) for size in (1, 4, 12)]
    far = ModelNotFound("zzz", names).message
    assert "family" not in far and "GET /v1/models" in far
    near = ModelNotFound("family-7:4", names).message
    assert "`family-7:4b`" in near and len(near) < 300
    few = ModelNotFound("zzz", ["a-model", "b-model"]).message
    assert "`a-model`, `b-model`" in few


def test_the_model_list_says_what_each_alias_reaches(server: ThreadServer) -> None:
    models = {m["id"]: m for m in httpx.get(f"{server.url}/v1/models").json()["data"]}
    assert models["gpt-4o-mini"]["alias_of"] == "gemma-3-270m" and models["tts-1"]["alias_of"] == "kokoro"
    assert models["gemma-3-270m"]["alias_of"] is None


SECRET = "/srv/hearth-secret-dir/broken.gguf"


def test_a_model_that_fails_to_load_does_not_show_its_path() -> None:
    inner = fake_loader()

    def loader(source: str, **kwargs: Any) -> Any:
        if source == SECRET:
            raise FileNotFoundError(f"[Errno 2] No such file or directory: '{source}'")
        return inner(source, **kwargs)

    models = [{"id": "gemma-3-270m", "source": "gemma-3-270m"}, {"id": "broken", "source": SECRET, "preload": False}]
    app = create_app(fake_settings(models=models), loader=loader, warm_up=False)
    with ThreadServer(app) as srv:
        assert wait_ready(srv)
        response = httpx.post(f"{srv.url}/v1/chat/completions", json={**CHAT, "model": "broken"}, timeout=60)
        error = error_of(response, 503)
        assert "hearth-secret-dir" not in response.text and "`broken`" in error["message"]
        assert "configuration" in error["message"]
        health = httpx.get(f"{srv.url}/health").text
        assert "hearth-secret-dir" not in health and "failed" in health


# -- start-up --------------------------------------------------------------------------------------------------
def test_enumerating_adapters_without_xdg_runtime_dir_prints_nothing() -> None:
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = "import gpu.device, wgpu; print(len(wgpu.gpu.enumerate_adapters_sync()))"
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert "XDG_RUNTIME_DIR" not in done.stderr, done.stderr


def test_an_alias_is_logged_once_with_its_target(server: ThreadServer, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level("INFO", logger="hearth.server"):
        for _ in range(2):
            assert post(server, "/v1/chat/completions", {**CHAT, "model": "gpt-3.5-turbo"}).status_code == 200
    told = [r.getMessage() for r in caplog.records if "is an alias of" in r.getMessage()]
    assert told == ["`gpt-3.5-turbo` is an alias of `gemma-3-270m` (a base model: it continues text rather than "
                    "follows instructions)"]
