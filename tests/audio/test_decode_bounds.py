"""audio/decode.py under hostile input: the duration limit (declared and counted), the memory it bounds, and
non-finite samples.

The decompression bomb is an 8-bit WAV at 1 Hz: a few KB that are hours of audio, 16,000 output samples per input
byte at Whisper's rate. Memory is measured with tracemalloc, which sees numpy's buffers (a deterministic count of
bytes, so the bounds are not timing- or load-dependent).
"""

from __future__ import annotations

import io
import struct
import tracemalloc
import wave

import numpy as np
import pytest

import audio.decode
from audio.decode import AudioDecodeError, AudioTooLong, NonFiniteAudio, decode_audio
from tests.audio.test_decode import FORMATS, chirp, encode, has_encoder

RATE = 16000
FLOAT32 = 4  # bytes


def bomb(seconds: int) -> bytes:
    """An 8-bit mono WAV at 1 Hz holding `seconds` of noise: `seconds` bytes of samples."""
    out = io.BytesIO()
    with wave.open(out, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(1)
        f.setframerate(1)
        f.writeframes(np.random.default_rng(0).integers(0, 256, seconds, dtype=np.uint8).tobytes())
    return out.getvalue()


def float_wav(samples: np.ndarray, rate: int = RATE) -> bytes:
    """A mono IEEE-float WAV (format tag 3) of `samples` as they are: NaN, infinities and any amplitude."""
    body = np.asarray(samples, "<f4").tobytes()
    fmt = struct.pack("<HHIIHH", 3, 1, rate, 4 * rate, 4, 32)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(body)) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body)


@pytest.fixture
def undeclared(monkeypatch: pytest.MonkeyPatch) -> None:
    """Containers declare no duration, as a lying or missing header would: only the frame count can stop them."""
    monkeypatch.setattr(audio.decode, "_declared_seconds", lambda container, stream: 0.0)


def traced_peak(fn, *args, **kwargs) -> tuple[int, object]:
    """(peak bytes allocated while fn ran, its result or the exception it raised)."""
    tracemalloc.start()
    try:
        try:
            result: object = fn(*args, **kwargs)
        except Exception as error:  # noqa: BLE001 - the caller inspects it
            result = error
        return tracemalloc.get_traced_memory()[1], result
    finally:
        tracemalloc.stop()


def test_declared_duration_past_the_limit_is_refused_before_decoding() -> None:
    peak, error = traced_peak(decode_audio, bomb(3600), max_seconds=1800)
    assert isinstance(error, AudioTooLong) and error.declared and error.seen_s == pytest.approx(3600)
    assert error.limit_s == 1800 and "1800 s" in str(error)
    assert peak < 1 << 20  # nothing was decoded


def test_the_frame_count_stops_a_bomb_whose_duration_is_not_declared(undeclared: None) -> None:
    """Ten hours in 36 KB, nothing declared: decoding stops once the counted frames pass 60 s, and what was
    allocated stays within the limit's output (60 s at 16 kHz, 3.8 MB) plus one second of slack and 1 MiB;
    decoding it all took 4.4 GB of RSS."""
    peak, error = traced_peak(decode_audio, bomb(36_000), max_seconds=60)
    assert isinstance(error, AudioTooLong) and not error.declared
    assert 60 < error.seen_s <= 61  # the frame that passed the limit (the WAV demuxer reads a few samples a packet)
    assert peak < 61 * RATE * FLOAT32 + (1 << 20)


@pytest.mark.parametrize(("fmt", "codec", "sr", "sample_fmt"), FORMATS, ids=[f"{f[0]}-{f[1]}" for f in FORMATS])
def test_every_container_is_counted_frame_by_frame(fmt: str, codec: str, sr: int, sample_fmt: str,
                                                   undeclared: None) -> None:
    if not has_encoder(codec):
        pytest.skip(f"this FFmpeg build has no {codec} encoder")
    data = encode(fmt, codec, sr, sample_fmt, chirp(sr)[None])  # 2 s
    with pytest.raises(AudioTooLong) as caught:
        decode_audio(data, max_seconds=1.0)
    assert not caught.value.declared and 1.0 < caught.value.seen_s < 1.2  # stopped within a frame of the limit
    assert decode_audio(data, max_seconds=3.0).size >= 2 * RATE  # under the limit: all of it


@pytest.mark.parametrize(("fmt", "codec", "sr", "sample_fmt"), FORMATS[:4], ids=[f[0] for f in FORMATS[:4]])
def test_declared_durations_refuse_early(fmt: str, codec: str, sr: int, sample_fmt: str) -> None:
    if not has_encoder(codec):
        pytest.skip(f"this FFmpeg build has no {codec} encoder")
    with pytest.raises(AudioTooLong):
        decode_audio(encode(fmt, codec, sr, sample_fmt, chirp(sr)[None]), max_seconds=1.0)


def test_audio_at_the_limit_passes() -> None:
    """Exactly max_seconds is not past it (the running total is exact: samples per rate, not summed floats)."""
    out = io.BytesIO()
    with wave.open(out, "wb") as f:
        f.setnchannels(1)
        f.setsampwidth(2)
        f.setframerate(44100)
        f.writeframes(np.zeros(3 * 44100, "<i2").tobytes())
    assert decode_audio(out.getvalue(), max_seconds=3.0).size == pytest.approx(3 * RATE, abs=2)


def test_unbounded_output_is_held_once() -> None:
    """Without a limit the output is one growing buffer, not a list of chunks joined at the end (twice the audio):
    ten minutes at 1 Hz peak within the 38 MB of output plus 2 MiB."""
    peak, audio_ = traced_peak(decode_audio, bomb(600))
    assert isinstance(audio_, np.ndarray) and audio_.size == 600 * RATE
    assert peak < 600 * RATE * FLOAT32 + (2 << 20)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_samples_are_refused(bad: float) -> None:
    samples = np.full(RATE, 0.1, np.float32)
    samples[RATE // 2] = bad
    with pytest.raises(NonFiniteAudio) as caught:
        decode_audio(float_wav(samples))
    assert caught.value.at_s == pytest.approx(0.5, abs=0.01)
    assert "not finite" in str(caught.value) and isinstance(caught.value, AudioDecodeError)


def test_huge_finite_samples_decode_as_they_are() -> None:
    """Amplitude is the service's policy (server/services/transcription.py): decoding keeps 1e30 as 1e30."""
    samples = np.where(np.arange(RATE) % 2 == 0, 1e30, -1e30).astype(np.float32)
    assert np.abs(decode_audio(float_wav(samples))).max() == pytest.approx(1e30, rel=1e-3)


def pcm_wav(rate: int, channels: int, frames: int) -> bytes:
    """A 16-bit PCM WAV header with any rate and channel count (the wave module refuses odd ones), then silence."""
    body = bytes(2 * channels * frames)
    fmt = struct.pack("<HHIIHH", 1, channels, rate, min(2 * channels * rate, 2**32 - 1), 2 * channels, 16)
    return (b"RIFF" + struct.pack("<I", 4 + 8 + len(fmt) + 8 + len(body)) + b"WAVE" + b"fmt " +
            struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(body)) + body)


@pytest.mark.parametrize(("rate", "channels"), [(16000, 64), (16000, 1000), (2**31 - 1, 1)],
                         ids=["64-channels", "1000-channels", "2^31-Hz"])
def test_absurd_layouts_and_rates_are_decode_errors(rate: int, channels: int) -> None:
    """What FFmpeg's resampler cannot take is an AudioDecodeError (a 400 at the server), not a crash or a hang."""
    with pytest.raises(AudioDecodeError):
        decode_audio(pcm_wav(rate, channels, 1600), max_seconds=1800)


def test_a_high_input_rate_is_bounded_by_its_duration() -> None:
    """100 MHz input: 2 M samples are 20 ms, resampled to 320 samples; the limit counts seconds, not samples."""
    assert decode_audio(pcm_wav(100_000_000, 1, 2_000_000), max_seconds=1800).size == 320
