"""Hostile input: whatever a client sends, the answer is a 4xx in OpenAI's error format or a success, never a 5xx,
never a crash, and no file outside the model locations is ever opened.

Two halves, both against the production app with every endpoint family on fakes (tests/server/all_fakes.py):
- schemathesis generates requests from the app's own OpenAPI schema, in process over ASGI
  (HEARTH_FUZZ_EXAMPLES per operation, default 20 so it fits CI; a 150-example run passed here too);
- hand-written cases a generator does not think of: huge numbers, wrong types, invalid UTF-8 and lone
  surrogates, truncated multipart, audio that lies about its format, path-like model names.
"""

from __future__ import annotations

import io
import json
import os
import sys
import threading
import wave
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import numpy as np
import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings

from tests.models.ollama_store import add_model, fake_gguf
from tests.server.all_fakes import fake_app
from tests.server.fake_model import SCRIPT
from tests.server.live_server import ThreadServer

EXAMPLES = int(os.environ.get("HEARTH_FUZZ_EXAMPLES", "20"))
CHAT = {"model": "gemma-3-270m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}

# schemathesis's pytest integration wants the schema when the module is collected (its lazy fixture loader does
# not work with pytest 9); loading it starts the app's lifespan over ASGI, which with fakes takes milliseconds.
schema = schemathesis.openapi.from_asgi("/openapi.json", fake_app())


def assert_openai_error(response: Any, context: object, path: str | None = None) -> None:
    """A 4xx body is the error object of the API the path belongs to (Ollama's `{"error": "..."}` under /api/,
    Anthropic's typed error under /v1/messages, OpenAI's elsewhere); a 5xx is a failure whatever its body."""
    assert response.status_code < 500, (context, response.status_code, response.text[:500])
    if response.status_code < 400:
        return
    path = path if path is not None else response.request.url.path
    body = response.json()
    if path.startswith("/api/"):
        assert set(body) == {"error"} and isinstance(body["error"], str) and body["error"], (context, response.text)
    elif path.startswith("/v1/messages"):
        assert body["type"] == "error" and body["error"]["type"] and body["error"]["message"], (context, response.text)
    else:
        error = body["error"]
        assert set(error) == {"message", "type", "param", "code"} and error["message"], (context, response.text)


@schema.parametrize()
# derandomize: CI runs the same examples every time (a red build is a real bug, reproducible); a larger
# HEARTH_FUZZ_EXAMPLES explores further. database=None: no .hypothesis folder left in the tree.
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck),
          phases=[Phase.explicit, Phase.generate], derandomize=True, database=None)
def test_schema_generated_requests_never_get_a_5xx(case: schemathesis.Case) -> None:
    response = case.call()
    assert_openai_error(response, (case.operation.label, getattr(case, "body", None)), case.operation.path)


# -- hand-written cases ---------------------------------------------------------------------------------
def wav(seconds: float = 0.5, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.sin(np.arange(int(seconds * rate)) * 0.05) * 8000).astype(np.int16).tobytes())
    return buffer.getvalue()


class OpenRecorder:
    """Every path this process opens while recording (an audit hook: it sees open() from any thread and library)."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.recording = threading.Event()
        sys.addaudithook(self._hook)  # hooks cannot be removed; this one only records while told to

    def _hook(self, event: str, args: tuple[Any, ...]) -> None:
        if self.recording.is_set() and event == "open" and isinstance(args[0], str | bytes | os.PathLike):
            self.paths.append(os.fsdecode(args[0]))


@pytest.fixture(scope="module")
def recorder() -> OpenRecorder:
    return OpenRecorder()


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """An Ollama store with one model, and a secret GGUF and manifest-like file outside it."""
    root = tmp_path_factory.mktemp("hostile")
    store = root / "store"
    add_model(store, fake_gguf(root / "real.gguf", "gemma3"), "real", "1b")
    secret = fake_gguf(root / "secret.gguf", "gemma3")
    (root / "manifests-outside").mkdir()
    add_model(root / "elsewhere", secret, "secret", "latest")  # a second store the names must not reach
    return {"root": root, "store": store, "secret": secret}


@pytest.fixture(scope="module")
def server(places: dict[str, Path]) -> Iterator[ThreadServer]:
    app = fake_app(env={"HEARTH_OLLAMA": "true", "OLLAMA_MODELS": str(places["store"])})
    with ThreadServer(app) as srv:
        assert wait_ready(srv)
        yield srv


def wait_ready(server: ThreadServer) -> bool:
    import time

    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if httpx.get(f"{server.url}/ready").status_code == 200:
            return True
        time.sleep(0.05)
    return False


def post_raw(server: ThreadServer, path: str, body: bytes, content_type: str = "application/json") -> httpx.Response:
    return httpx.post(f"{server.url}{path}", content=body, headers={"content-type": content_type}, timeout=60)


BIG = "1" + "0" * 400  # a JSON integer far past 64 bits
JSON_CASES = {
    "max_tokens huge": ("/v1/chat/completions", f'{{"model": "gemma-3-270m", "messages": [{{"role": "user", '
                                                f'"content": "x"}}], "max_tokens": {BIG}}}'),
    "n huge": ("/v1/chat/completions", f'{{"model": "gemma-3-270m", "messages": [], "n": {BIG}}}'),
    "temperature 1e308": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [{"role": "user", '
                                                  '"content": "x"}], "temperature": 1e308}'),
    "temperature NaN": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [{"role": "user", '
                                                '"content": "x"}], "temperature": NaN}'),
    "top_p -Infinity": ("/v1/completions", '{"model": "gemma-3-270m", "prompt": "x", "top_p": -Infinity}'),
    "seed 2^400": ("/v1/completions", f'{{"model": "gemma-3-270m", "prompt": "x", "seed": {BIG}}}'),
    "logit_bias huge id": ("/v1/completions", '{"model": "gemma-3-270m", "prompt": "x", "max_tokens": 1, '
                                              f'"logit_bias": {{"{BIG}": 5}}}}'),
    "token ids huge": ("/v1/completions", f'{{"model": "gemma-3-270m", "prompt": [{BIG}], "max_tokens": 1}}'),
    "token ids negative": ("/v1/completions", '{"model": "gemma-3-270m", "prompt": [[-1, 5]], "max_tokens": 1}'),
    "dimensions huge": ("/v1/embeddings", f'{{"model": "text-embedding-3-small", "input": "x", "dimensions": {BIG}}}'),
    "embedding ids huge": ("/v1/embeddings", f'{{"model": "text-embedding-3-small", "input": [{BIG}]}}'),
    "speed 1e308": ("/v1/audio/speech", '{"model": "tts-1", "input": "hi", "voice": "alloy", "speed": 1e308}'),
    "messages a string": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": "hello"}'),
    "content an int": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [{"role": "user", '
                                               '"content": 5}]}'),
    "role unknown": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [{"role": "root", '
                                             '"content": "x"}]}'),
    "model a list": ("/v1/chat/completions", '{"model": ["gemma-3-270m"], "messages": []}'),
    "stream a string": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [], "stream": "yes"}'),
    "input an object": ("/v1/embeddings", '{"model": "text-embedding-3-small", "input": {"a": 1}}'),
    "voice a number": ("/v1/audio/speech", '{"model": "tts-1", "input": "hi", "voice": 3}'),
    "body a list": ("/v1/chat/completions", "[1, 2, 3]"),
    "body a string": ("/v1/embeddings", '"hello"'),
    "body null": ("/v1/audio/speech", "null"),
    "body empty": ("/v1/chat/completions", ""),
    "truncated JSON": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [{"role": "us'),
    "deeply nested": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": ' + "[" * 100_000),
    "lone surrogate in content": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [{"role": '
                                                          '"user", "content": "a\\ud800b"}], "max_tokens": 1}'),
    "lone surrogate in prompt": ("/v1/completions", '{"model": "gemma-3-270m", "prompt": ["ok", "\\udfff"]}'),
    "lone surrogate in input": ("/v1/embeddings", '{"model": "text-embedding-3-small", "input": "\\udc00"}'),
    "lone surrogate in speech": ("/v1/audio/speech", '{"model": "tts-1", "input": "\\ud83d", "voice": "alloy"}'),
    "NUL in content": ("/v1/chat/completions", '{"model": "gemma-3-270m", "messages": [{"role": "user", '
                                               '"content": "\\u0000"}], "stop": ["\\u0000"], "max_tokens": 2}'),
}


@pytest.mark.parametrize("case", list(JSON_CASES))
def test_hostile_json_bodies_are_client_errors(server: ThreadServer, case: str) -> None:
    path, body = JSON_CASES[case]
    response = post_raw(server, path, body.encode())
    assert_openai_error(response, case)


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/audio/speech"])
def test_invalid_utf8_and_wrong_content_types(server: ThreadServer, path: str) -> None:
    bad = b'{"model": "gemma-3-270m", "messages": [{"role": "user", "content": "\xff\xfe\xc0\x80"}]}'
    assert post_raw(server, path, bad).status_code == 400
    for content_type in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", ""):
        assert_openai_error(post_raw(server, path, json.dumps(CHAT).encode(), content_type), (path, content_type))


MULTIPART = "/v1/audio/transcriptions"


def multipart(fields: dict[str, bytes], file: tuple[str, bytes, str] | None, boundary: bytes = b"hearthXX") -> bytes:
    out = b""
    for name, value in fields.items():
        out += b"--" + boundary + b'\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n'
        out += value + b"\r\n"
    if file is not None:
        filename, data, kind = file
        out += (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="' + filename.encode()
                + b'"\r\nContent-Type: ' + kind.encode() + b"\r\n\r\n" + data + b"\r\n")
    return out + b"--" + boundary + b"--\r\n"


def test_truncated_and_malformed_multipart(server: ThreadServer) -> None:
    whole = multipart({"model": b"whisper-1"}, ("a.wav", wav(), "audio/wav"))
    kind = "multipart/form-data; boundary=hearthXX"
    for cut in (10, 60, 120, len(whole) // 2, len(whole) - 30, len(whole) - 5):
        assert_openai_error(post_raw(server, MULTIPART, whole[:cut], kind), f"cut at {cut}")
    for content_type in ("multipart/form-data", "multipart/form-data; boundary=", "multipart/form-data; boundary=other",
                         "multipart/mixed; boundary=hearthXX"):
        assert_openai_error(post_raw(server, MULTIPART, whole, content_type), content_type)
    odd = [multipart({"model": b"\xff\xfe\xed\xa0\x80"}, ("\xff.wav", wav(), "audio/wav")),  # invalid UTF-8 fields
           multipart({"model": b"whisper-1", "temperature": b"1e999", "response_format": b"\x00"}, ("a.wav", wav(),
                                                                                                  "audio/wav")),
           multipart({"model": b"whisper-1"}, None),  # no file
           multipart({"model": b"whisper-1", "file": b"not a file part"}, None),
           multipart({"model": b"whisper-1"}, ("a.wav", wav(), "audio/wav")) * 3]  # parts repeated
    for body in odd:
        assert_openai_error(post_raw(server, MULTIPART, body, kind), body[:80])


LYING_AUDIO = {
    "random bytes as wav": ("a.wav", np.random.default_rng(0).bytes(4096), "audio/wav"),
    "empty file": ("a.wav", b"", "audio/wav"),
    "text as mp3": ("a.mp3", b"hello, I am not audio\n" * 50, "audio/mpeg"),
    "png as flac": ("a.flac", b"\x89PNG\r\n\x1a\n" + bytes(2000), "audio/flac"),
    "wav header only": ("a.wav", wav()[:44], "audio/wav"),
    "wav claiming 2 GB": ("a.wav", wav()[:40] + (2**31 - 1).to_bytes(4, "little") + wav()[44:], "audio/wav"),
    "wav with 0 Hz": ("a.wav", wav()[:24] + (0).to_bytes(4, "little") + wav()[28:], "audio/wav"),
    "mp3 sync word then junk": ("a.mp3", b"\xff\xfb\x90\x64" + bytes(4000), "audio/mpeg"),
    "ogg magic then junk": ("a.ogg", b"OggS" + np.random.default_rng(1).bytes(3000), "audio/ogg"),
    "real wav named mp3": ("a.mp3", wav(), "audio/mpeg"),
    "real wav named exe": ("../../a.exe", wav(), "application/x-msdownload"),
}


@pytest.mark.parametrize("case", list(LYING_AUDIO))
def test_audio_that_lies_about_its_format(server: ThreadServer, case: str) -> None:
    response = httpx.post(f"{server.url}{MULTIPART}", files={"file": LYING_AUDIO[case]}, data={"model": "whisper-1"},
                          timeout=60)
    assert_openai_error(response, case)
    if case.startswith("real wav"):  # audio is known by its bytes, not its name or declared type
        assert response.status_code == 200, response.text


PATH_NAMES = ["../../etc/passwd", "/etc/passwd", "..\\..\\windows\\win.ini", "~/.ssh/id_rsa", "../elsewhere/secret",
              "library/../../secret", "registry.ollama.ai/library/../../../etc:passwd", "real:../../../etc/passwd",
              "real:1b/../../secret", "%2e%2e%2f%2e%2e%2fetc%2fpasswd", "file:///etc/passwd", "real\x00:1b",
              "real:1b\n", "a" * 5000, ".", "..", "/", "", "secret", "manifests-outside"]


def test_path_like_model_names_are_404s_that_read_no_file_outside_the_store(
        server: ThreadServer, places: dict[str, Path], recorder: OpenRecorder) -> None:
    names = [*PATH_NAMES, str(places["secret"]), str(places["root"] / "elsewhere" / "manifests")]
    recorder.paths.clear()
    recorder.recording.set()
    try:
        for name in names:
            for path, body in [("/v1/chat/completions", {**CHAT, "model": name}),
                               ("/v1/completions", {"model": name, "prompt": "x", "max_tokens": 1}),
                               ("/v1/embeddings", {"model": name, "input": "x"}),
                               ("/v1/audio/speech", {"model": name, "input": "hi", "voice": name or "alloy"})]:
                response = httpx.post(f"{server.url}{path}", json=body, timeout=30)
                assert_openai_error(response, (path, name))
                assert response.status_code in (400, 404), (path, name, response.text)
            response = httpx.post(f"{server.url}{MULTIPART}", files={"file": ("a.wav", wav(0.1), "audio/wav")},
                                  data={"model": name}, timeout=30)
            assert_openai_error(response, ("transcriptions", name))
            assert response.status_code in (400, 404), (name, response.text)
            for quoted in (quote(name, safe="/:~"), quote(name, safe="")):  # dot segments as they are, and hidden
                retrieved = httpx.get(f"{server.url}/v1/models/{quoted}", timeout=30)
                # Starlette's path pattern ends in `$`, which matches before a final newline ("real:1b\n" reaches
                # the store's own real:1b), and URLs drop dot segments ("." is the list): never anything else.
                answer = retrieved.json() if retrieved.status_code == 200 else {}
                assert retrieved.status_code in (400, 404, 405) or answer.get("id") == "real:1b" or answer.get(
                    "object") == "list", (name, retrieved.status_code, retrieved.text)
        # The control: a name in the store is read from it, and the recorder sees that.
        assert httpx.post(f"{server.url}/v1/completions", json={"model": "real:1b", "prompt": "x", "max_tokens": 2}
                          ).json()["choices"][0]["text"] == SCRIPT[:2]
    finally:
        recorder.recording.clear()
    assert any(p.startswith(str(places["store"] / "manifests")) for p in recorder.paths), recorder.paths[:20]
    outside = [p for p in recorder.paths if "passwd" in p or "id_rsa" in p or "win.ini" in p
               or p.startswith(str(places["root"])) and not p.startswith(str(places["store"]))]
    assert outside == [], outside


def test_the_server_is_alive_and_serving_after_all_that(server: ThreadServer) -> None:
    assert httpx.get(f"{server.url}/health").json()["status"] == "ok"
    reply = httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "max_tokens": 5}, timeout=30)
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"] == SCRIPT[:5]
    metrics = httpx.get(f"{server.url}/metrics").text
    assert 'status="500"' not in metrics and 'status="502"' not in metrics and 'status="503"' not in metrics
