"""audio/encode.py: every format decodes back with PyAV to the right rate and length, and a stream of chunks
decodes to the same audio as the whole file."""

from __future__ import annotations

import io
import struct

import av
import numpy as np
import pytest

from audio.encode import FORMATS, encode, encoder, wav_header

RATE = 24000
# The bound on a decoded clip's length. Measured worst cases over six lengths: wav, pcm, flac and opus
# exact; whole mp3 exact (LAME tag); streamed mp3 +40 ms (placeholder tag); aac +41 ms (ADTS priming at 48 kHz).
DURATION_TOL_S = 0.050
DECODED_RATE = {"mp3": 24000, "opus": 48000, "aac": 48000, "flac": 24000, "wav": 24000}


def tone(seconds: float) -> np.ndarray:
    """A speech-like test signal: a 300 Hz tone with a 2 Hz envelope and some noise."""
    t = np.arange(int(seconds * RATE)) / RATE
    noise = np.random.default_rng(0).normal(0, 0.01, len(t))
    return (0.4 * np.sin(2 * np.pi * 300 * t) * np.sin(2 * np.pi * 2 * t + 0.3) + noise).astype(np.float32)


def decode(data: bytes, fmt: str) -> tuple[int, np.ndarray]:
    """(sample rate, float samples) of an encoded clip, decoded by PyAV (pcm is read as s16le)."""
    if fmt == "pcm":
        return RATE, np.frombuffer(data, "<i2").astype(np.float32) / 32767
    with av.open(io.BytesIO(data)) as container:
        frames = [f for f in container.decode(audio=0)]
    samples = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    if samples.dtype == np.int16:  # wav and flac decode to s16
        samples = samples.astype(np.float32) / 32767
    return frames[0].sample_rate, samples.astype(np.float32)


def streamed(audio: np.ndarray, fmt: str, chunk: int) -> bytes:
    enc = encoder(fmt, RATE)
    return b"".join([enc.write(audio[i:i + chunk]) for i in range(0, len(audio), chunk)] + [enc.finish()])


def best_correlation(a: np.ndarray, b: np.ndarray, max_lag: int) -> float:
    """The largest normalised correlation of a and b over lags up to max_lag samples (codec delays shift audio)."""
    n = min(len(a), len(b)) - max_lag
    best = -1.0
    for lag in range(max_lag + 1):
        x, y = a[:n], b[lag:lag + n]
        best = max(best, float(np.dot(x, y) / (np.linalg.norm(x) * np.linalg.norm(y) + 1e-12)))
    return best


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("seconds", [0.731, 2.5])
def test_whole_file_decodes_to_rate_and_duration(fmt: str, seconds: float) -> None:
    audio = tone(seconds)
    rate, decoded = decode(encode(audio, RATE, fmt), fmt)
    assert rate == DECODED_RATE.get(fmt, RATE)
    assert abs(len(decoded) / rate - seconds) <= DURATION_TOL_S, (fmt, len(decoded) / rate)


@pytest.mark.parametrize("fmt", ["pcm", "wav", "flac"])
def test_lossless_formats_keep_the_samples(fmt: str) -> None:
    audio = tone(1.0)
    _, decoded = decode(encode(audio, RATE, fmt), fmt)
    np.testing.assert_allclose(decoded, np.round(audio * 32767) / 32767, atol=1.5 / 32767)  # int16 rounding


@pytest.mark.parametrize("fmt", FORMATS)
def test_stream_decodes_like_the_whole_file(fmt: str) -> None:
    audio = tone(2.0)
    whole = encode(audio, RATE, fmt)
    chunks = streamed(audio, fmt, 4321)
    rate_w, a = decode(whole, fmt)
    rate_s, b = decode(chunks, fmt)
    assert rate_w == rate_s
    assert abs(len(b) / rate_s - 2.0) <= DURATION_TOL_S
    if fmt in ("pcm", "wav", "flac"):
        np.testing.assert_array_equal(a, b)  # same samples exactly
    else:
        # Lossy codecs: the same encoder on the same samples; only the stream's missing LAME values shift mp3.
        assert best_correlation(a, b, max_lag=rate_s // 20) > 0.99


def test_wav_headers() -> None:
    audio = tone(0.5)
    whole = encode(audio, RATE, "wav")
    riff, data = struct.unpack("<I", whole[4:8])[0], struct.unpack("<I", whole[40:44])[0]
    assert whole[:4] == b"RIFF" and riff == len(whole) - 8 and data == 2 * len(audio)
    stream = streamed(audio, "wav", 1000)
    assert stream[:44] == wav_header(RATE, None) and stream[44:] == whole[44:]


def test_streams_emit_bytes_before_the_end() -> None:
    """Each format hands out bytes while audio is still coming, not only at finish (what streaming is for)."""
    audio = tone(3.0)
    for fmt in FORMATS:
        enc = encoder(fmt, RATE)
        early = b"".join(enc.write(audio[i:i + 2400]) for i in range(0, len(audio), 2400))
        assert len(early) > 0, fmt


def test_unknown_format() -> None:
    with pytest.raises(ValueError, match="unknown audio format"):
        encoder("ogg-vorbis", RATE)
