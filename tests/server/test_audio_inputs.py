"""server/services/audio_inputs.py: input_audio parts decoded under the limits (a WAV and an MP3 made here with the
standard library and PyAV), and the errors: not base64, not audio, too many clips, too many bytes (413 before the
base64 is decoded), too long for the server or the model (413 while decoding), too short for one frame (400).
"""

from __future__ import annotations

import base64
import io
import wave

import av
import numpy as np
import pytest

from audio.features import GEMMA4_MAX_SAMPLES, gemma4_log_mel, gemma4_num_audio_tokens
from config.settings import Limits
from server.errors import InvalidRequest, RequestTooLarge
from server.services import audio_inputs
from server.services.audio_inputs import AudioPart


class _Encoder:
    """Gemma 4's front end without its tower: what prepare() asks of an AudioEncoder."""

    sample_rate = 16000
    max_samples = GEMMA4_MAX_SAMPLES
    embedding_size = 8

    def features(self, samples: np.ndarray) -> np.ndarray:
        return gemma4_log_mel(samples)

    def soft_tokens(self, samples: int) -> int:
        return gemma4_num_audio_tokens(samples)


def _tone(seconds: float, rate: int) -> np.ndarray:
    t = np.arange(int(seconds * rate)) / rate
    return (0.3 * np.sin(2 * np.pi * (300 + 400 * t) * t)).astype(np.float32)


def wav(seconds: float, rate: int = 22050) -> bytes:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes((_tone(seconds, rate) * 32767).astype("<i2").tobytes())
    return out.getvalue()


def mp3(seconds: float, rate: int = 44100) -> bytes:
    out = io.BytesIO()
    with av.open(out, "w", format="mp3") as container:
        stream = container.add_stream("mp3", rate=rate, layout="mono")
        samples = _tone(seconds, rate)
        for start in range(0, samples.shape[0], 1152):
            frame = av.AudioFrame.from_ndarray(samples[None, start:start + 1152], format="flt", layout="mono")
            frame.sample_rate = rate
            for packet in stream.encode(frame):
                container.mux(packet)
        for packet in stream.encode(None):
            container.mux(packet)
    return out.getvalue()


def part(raw: bytes, fmt: str = "wav") -> AudioPart:
    return AudioPart(base64.b64encode(raw).decode(), fmt, "messages[0].content[1].input_audio")


@pytest.mark.parametrize(("make", "fmt"), [(wav, "wav"), (mp3, "mp3")])
def test_prepare_decodes_to_features(make, fmt: str) -> None:  # noqa: ANN001
    got, = audio_inputs.prepare([part(make(1.5), fmt)], _Encoder(), Limits())
    assert abs(got.seconds - 1.5) < 0.08  # an MP3 encoder's delay and padding
    assert got.features.shape[1] == 128 and got.features.dtype == np.float32
    assert got.soft_tokens == gemma4_num_audio_tokens(int(round(got.seconds * 16000)))


@pytest.mark.parametrize(("p", "limits", "error", "code"), [
    (AudioPart("@@@not base64", "wav", "p"), Limits(), InvalidRequest, "invalid_audio"),
    (part(b"plain text, no audio at all"), Limits(), InvalidRequest, "invalid_audio"),
    (part(wav(1.0)[:30]), Limits(), InvalidRequest, "invalid_audio"),  # cut inside the header
    (part(wav(1.0)), Limits(max_input_audio_bytes=1000), RequestTooLarge, "audio_too_large"),
    (part(wav(3.0)), Limits(max_input_audio_seconds=2.0), RequestTooLarge, "audio_too_long"),
    (part(wav(31.0, rate=8000)), Limits(max_input_audio_seconds=60.0), RequestTooLarge, "audio_too_long"),  # model
    (part(wav(0.005)), Limits(), InvalidRequest, "invalid_audio"),  # shorter than one frame
])
def test_prepare_errors(p: AudioPart, limits: Limits, error: type, code: str) -> None:
    with pytest.raises(error) as raised:
        audio_inputs.prepare([p], _Encoder(), limits)
    assert raised.value.code == code and raised.value.param == p.param  # type: ignore[attr-defined]


def test_too_many_clips() -> None:
    with pytest.raises(InvalidRequest) as raised:
        audio_inputs.prepare([part(wav(0.2))] * 3, _Encoder(), Limits(max_audio_clips=2))
    assert raised.value.code == "too_many_audio_clips"


def test_a_message_with_audio_renders_an_audio_item() -> None:
    """Chat templates see an input_audio part as {"type": "audio"} (transformers' processors' convention), in place
    among the text and image items."""
    from server.schemas.chat import ChatMessage

    message = ChatMessage(role="user", content=[
        {"type": "text", "text": "hi"}, {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "mp3"}},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}])
    assert message.for_template()["content"] == [{"type": "text", "text": "hi"}, {"type": "audio"},
                                                 {"type": "image"}]
    assert message.text() == "hi" and message.image_urls() == ["data:image/png;base64,AAAA"]
