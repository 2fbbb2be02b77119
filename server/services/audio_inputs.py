"""Audio in chat requests: `input_audio` parts (base64 WAV or MP3) decoded with PyAV under the server's limits into
the features the model's audio encoder takes (models/audio_encoder/).

Everything here runs on the preparation thread (server/preparation.py), before the model's queue. Limits
(config/settings.py): limits.max_audio_clips per request (400); limits.max_input_audio_bytes per encoded clip (413,
checked on the base64 before it is decoded) and limits.max_input_audio_seconds per clip, or the encoder's own
maximum where that is shorter (413, checked while decoding, so a long clip is never decoded whole). The format field
is only a label, as an image's media type is: FFmpeg reads the container from the data. Data that is not audio, is
cut short or holds non-finite samples is a 400 naming the part.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

import numpy as np

from audio.decode import AudioDecodeError, AudioTooLong, decode_audio
from config.settings import Limits
from models.audio_encoder import AudioEncoder
from server.errors import InvalidRequest, RequestTooLarge


@dataclass(frozen=True)
class AudioPart:
    """An input_audio part of a request: its base64 data, stated format and where it sits (`param`, for errors)."""

    data: str
    format: str
    param: str


@dataclass(frozen=True)
class PreparedAudio:
    """A decoded clip as its model's encoder takes it: features and the soft tokens (prompt rows) they make."""

    features: np.ndarray  # f32 [frames, mels]
    soft_tokens: int
    seconds: float


@dataclass(frozen=True)
class PromptAudio:
    """A clip of a prompt: its rows start at `start`; features as the encoder takes them."""

    start: int
    features: np.ndarray  # f32 [frames, mels]
    digest: str  # pixel_digest(features): the clip's identity


def check_count(parts: list[AudioPart], limits: Limits) -> None:
    """400 past limits.max_audio_clips."""
    if len(parts) > limits.max_audio_clips:
        raise InvalidRequest(f"The request carries {len(parts)} audio clips; this server takes at most "
                             f"{limits.max_audio_clips} per request.", param="messages", code="too_many_audio_clips")


def read_bytes(part: AudioPart, limits: Limits) -> bytes:
    """The encoded clip of a part, its size checked on the base64 before decoding and again after."""
    if len(part.data) * 3 // 4 > limits.max_input_audio_bytes + 3:
        raise _too_large(part, limits)
    try:
        raw = base64.b64decode(part.data.strip(), validate=True)
    except (binascii.Error, ValueError) as error:
        raise InvalidRequest(f"The audio's base64 data does not decode: {error}.", param=part.param,
                             code="invalid_audio") from error
    if len(raw) > limits.max_input_audio_bytes:
        raise _too_large(part, limits)
    return raw


def _too_large(part: AudioPart, limits: Limits) -> RequestTooLarge:
    return RequestTooLarge(f"The audio is larger than this server's limit of {limits.max_input_audio_bytes} bytes.",
                           param=part.param, code="audio_too_large")


def max_seconds(encoder: AudioEncoder, limits: Limits) -> float:
    """The longest clip taken: the server's limit, or the encoder's where that is shorter."""
    return min(limits.max_input_audio_seconds, encoder.max_samples / encoder.sample_rate)


def decode(raw: bytes, part: AudioPart, encoder: AudioEncoder, limits: Limits) -> np.ndarray:
    """The clip as mono float32 samples at the encoder's rate; 413 past max_seconds, 400 for anything not audio."""
    limit = max_seconds(encoder, limits)
    try:
        return decode_audio(raw, sample_rate=encoder.sample_rate, max_seconds=limit)
    except AudioTooLong as error:
        raise RequestTooLarge(f"The audio is longer than the {limit:g} s this model and server take per clip "
                              f"({error}).", param=part.param, code="audio_too_long") from error
    except AudioDecodeError as error:
        raise InvalidRequest(f"The audio could not be decoded as {part.format}: {error}.", param=part.param,
                             code="invalid_audio") from error


def prepare(parts: list[AudioPart], encoder: AudioEncoder, limits: Limits) -> list[PreparedAudio]:
    """Each part's features and soft-token count (limits checked first); a clip too short to make one frame is a
    400."""
    check_count(parts, limits)
    prepared = []
    for part in parts:
        samples = decode(read_bytes(part, limits), part, encoder, limits)
        try:
            features = encoder.features(samples)
        except ValueError as error:
            raise InvalidRequest(f"The audio is too short for the model: {error}.", param=part.param,
                                 code="invalid_audio") from error
        prepared.append(PreparedAudio(features, encoder.soft_tokens(samples.shape[0]),
                                      samples.shape[0] / encoder.sample_rate))
    return prepared
