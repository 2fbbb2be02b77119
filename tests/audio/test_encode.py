"""audio/encode.py: every format decodes back with PyAV to the right rate and length, and a stream of chunks
decodes to the same audio as the whole file."""

from __future__ import annotations

import hashlib
import io
import shutil
import struct
import subprocess

import av
import numpy as np
import pytest

from audio.encode import FORMATS, encode, encoder, to_int16, wav_header

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


def streaminfo(flac: bytes) -> dict[str, object]:
    """The fields of a FLAC file's STREAMINFO, parsed from its bits (FLAC spec, RFC 9639 8.2)."""
    assert flac[:4] == b"fLaC" and flac[4] & 0x7F == 0 and int.from_bytes(flac[5:8], "big") == 34
    body = flac[8:42]
    packed = struct.unpack(">Q", body[10:18])[0]
    return {"min_block": struct.unpack(">H", body[0:2])[0], "max_block": struct.unpack(">H", body[2:4])[0],
            "min_frame": int.from_bytes(body[4:7], "big"), "max_frame": int.from_bytes(body[7:10], "big"),
            "sample_rate": packed >> 44, "channels": ((packed >> 41) & 0x7) + 1,
            "bits_per_sample": ((packed >> 36) & 0x1F) + 1, "total_samples": packed & ((1 << 36) - 1),
            "md5": body[18:34]}


@pytest.mark.parametrize("seconds", [0.731, 2.5])
def test_whole_flac_states_its_length_and_md5(seconds: float) -> None:
    """A whole FLAC's STREAMINFO has the total samples and the MD5 of the signed 16-bit little-endian samples, so
    readers know its length (soundfile read 3.8e14 s when total_samples was 0) and can verify it."""
    audio = tone(seconds)
    flac = encode(audio, RATE, "flac")
    info = streaminfo(flac)
    assert info["total_samples"] == len(audio)
    assert info["md5"] == hashlib.md5(to_int16(audio).tobytes()).digest()
    assert (info["sample_rate"], info["channels"], info["bits_per_sample"]) == (RATE, 1, 16)
    assert 0 < info["min_frame"] <= info["max_frame"] and 0 < info["min_block"] <= info["max_block"]
    with av.open(io.BytesIO(flac)) as container:
        assert container.duration / av.time_base == pytest.approx(len(audio) / RATE, abs=1e-5)
        decoded = np.concatenate([f.to_ndarray().reshape(-1) for f in container.decode(audio=0)])
    assert hashlib.md5(decoded.astype("<i2").tobytes()).digest() == info["md5"]  # what a verifier computes
    soundfile = pytest.importorskip("soundfile")
    assert soundfile.info(io.BytesIO(flac)).frames == len(audio)
    if shutil.which("flac"):
        subprocess.run(["flac", "-t", "-s", "-"], input=flac, check=True)


def test_streamed_flac_leaves_length_and_md5_unknown() -> None:
    """A stream cannot seek back to its STREAMINFO: 0 (unknown) samples and an all-zero MD5, which decoders accept;
    only the header differs from the whole file."""
    audio = tone(1.0)
    stream = streamed(audio, "flac", 4321)
    info = streaminfo(stream)
    assert info["total_samples"] == 0 and info["md5"] == bytes(16)
    whole = encode(audio, RATE, "flac")
    assert stream[42:] == whole[42:]
