"""Builders of hostile uploads and request bodies, for any test that wants to throw them at the server.

Each builder returns bytes or a JSON-able body; what the server should answer is the caller's business (the
soak, tests/server/test_soak.py, names the statuses it accepts for each). Sizes are small on purpose: the
hostility is in what the bytes claim or expand to, not in how many there are.
"""

from __future__ import annotations

import io
import json
import struct
import wave

import numpy as np

WAVE_FORMAT_PCM = 1
WAVE_FORMAT_IEEE_FLOAT = 3


def pcm16_wav(seconds: float, rate: int = 16000, amplitude: float = 8000.0) -> bytes:
    """A legitimate 16-bit mono WAV: a tone of `seconds` at `rate` Hz."""
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.sin(np.arange(int(seconds * rate)) * 0.05) * amplitude).astype(np.int16).tobytes())
    return buffer.getvalue()


def _riff(format_tag: int, channels: int, rate: int, bits: int, data: bytes) -> bytes:
    """A canonical RIFF/WAVE file: a 16-byte fmt chunk, then one data chunk holding `data`."""
    block_align = channels * bits // 8
    fmt = struct.pack("<HHIIHH", format_tag, channels, rate, rate * block_align, block_align, bits)
    body = b"WAVE" + b"fmt " + struct.pack("<I", len(fmt)) + fmt + b"data" + struct.pack("<I", len(data)) + data
    return b"RIFF" + struct.pack("<I", len(body)) + body


def bomb_wav(claimed_seconds: int = 3600, rate: int = 1) -> bytes:
    """The audio decompression bomb: 8-bit mono PCM at `rate` Hz, so each byte is a whole second of audio.

    The default is a 3.6 KB file holding one hour; resampled to Whisper's 16 kHz it is 57.6 million float32
    samples (230 MB) before any model sees it. claimed_seconds=36_000 gives the 36 KB, ten-hour variant. The
    samples are 0x80, silence in unsigned 8-bit PCM, so the cost is all in decoding, none in what is heard.
    """
    return _riff(WAVE_FORMAT_PCM, 1, rate, 8, b"\x80" * (claimed_seconds * rate))


def float_wav(samples: np.ndarray | float, seconds: float = 1.0, rate: int = 16000) -> bytes:
    """A 32-bit IEEE float mono WAV (format tag 3) of `samples`, or of one value repeated for `seconds`.

    Float WAVs carry whatever the bits say: NaN, +-Inf and 1e30 pass through FFmpeg's decoder untouched (at the
    model's own rate no resampler filters them), so they reach feature extraction unless the server guards.
    """
    values = np.asarray(samples, np.float32).reshape(-1)
    if values.size == 1:
        values = np.full(int(seconds * rate), values[0], np.float32)
    return _riff(WAVE_FORMAT_IEEE_FLOAT, 1, rate, 32, values.astype("<f4").tobytes())


def alternating(high: float, low: float, seconds: float = 1.0, rate: int = 16000) -> np.ndarray:
    """Samples swinging between `high` and `low` every sample (e.g. +-1e30, or +Inf and -Inf)."""
    out = np.full(int(seconds * rate), high, np.float32)
    out[1::2] = low
    return out


def sprinkled_nan(seconds: float = 1.0, rate: int = 16000, every: int = 997) -> np.ndarray:
    """A normal tone with a NaN every `every` samples: one bad sample spoils every frame it falls in."""
    out = (np.sin(np.arange(int(seconds * rate)) * 0.05) * 0.25).astype(np.float32)
    out[::every] = np.nan
    return out


def garbage(size: int = 4096, seed: int = 0) -> bytes:
    """Random bytes: no container format at all."""
    return np.random.default_rng(seed).bytes(size)


def multipart(fields: dict[str, bytes], file: tuple[str, bytes, str] | None,
              boundary: bytes = b"hearthXX") -> tuple[bytes, str]:
    """A multipart/form-data body and its Content-Type, with the text fields then the `file` part."""
    out = b""
    for name, value in fields.items():
        out += b"--" + boundary + b'\r\nContent-Disposition: form-data; name="' + name.encode() + b'"\r\n\r\n'
        out += value + b"\r\n"
    if file is not None:
        filename, data, kind = file
        out += (b"--" + boundary + b'\r\nContent-Disposition: form-data; name="file"; filename="' + filename.encode()
                + b'"\r\nContent-Type: ' + kind.encode() + b"\r\n\r\n" + data + b"\r\n")
    return out + b"--" + boundary + b"--\r\n", "multipart/form-data; boundary=" + boundary.decode()


def truncated_multipart(fraction: float = 0.5, model: str = "whisper-1") -> tuple[bytes, str]:
    """A transcription upload cut off at `fraction` of its length (inside the audio for 0.5): the closing
    boundary never comes, as when a client dies mid-upload."""
    body, content_type = multipart({"model": model.encode()}, ("a.wav", pcm16_wav(0.5), "audio/wav"))
    return body[: int(len(body) * fraction)], content_type


def many_prompts(count: int = 5000, model: str = "gemma-3-270m", max_tokens: int = 2) -> dict[str, object]:
    """A /v1/completions body of `count` one-word prompts (about 5 bytes each on the wire, a whole sequence each
    in the model): far more work than bytes."""
    return {"model": model, "prompt": [f"p{i % 10}" for i in range(count)], "max_tokens": max_tokens}


def digits(count: int = 4000, group: int = 0, seed: int = 0) -> str:
    """`count` random decimal digits, in one run or in space-separated groups of `group`: text under the
    4,096-character input limit whose phonemes (the digits read out as numbers) run to 5-10 times its length
    (4,000 digits in one run: about 21,000 of Kokoro's phonemes; in groups of ten, about 9 per character)."""
    text = "".join(str(d) for d in np.random.default_rng(seed).integers(0, 10, count))
    return " ".join(text[i:i + group] for i in range(0, count, group)) if group else text


def form_encoded_json(body: dict[str, object]) -> tuple[bytes, dict[str, str]]:
    """A JSON body sent as `curl -d` sends it: Content-Type application/x-www-form-urlencoded."""
    return json.dumps(body).encode(), {"content-type": "application/x-www-form-urlencoded"}
