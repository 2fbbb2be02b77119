"""POST /v1/audio/transcriptions and /v1/audio/translations: the multipart forms and the responses, in the order of
OpenAI's API reference (the openai SDK's types in openai/types/audio/ are the check).

The forms are pydantic models read with FastAPI's `Form()`. The SDK sends lists with brackets
(`timestamp_granularities[]=word`; the bare name is accepted too), and pydantic's errors cannot name a field
with brackets in it, so the forms keep unknown fields and the granularities as sent, and `check()` raises the
400s that name them, as for JSON bodies.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import UploadFile
from pydantic import AliasChoices, BaseModel, ConfigDict, Field

from server.errors import InvalidRequest
from server.schemas.common import KeepAlive

ResponseFormat = Literal["json", "text", "srt", "verbose_json", "vtt"]
GRANULARITIES = ("word", "segment")
# OpenAI's range for audio: 0 asks for Whisper's temperature fallback (0, 0.2, ..., 1.0 on failed windows).
AudioTemperature = Annotated[float, Field(ge=0.0, le=1.0, description="0: greedy, with fallback on failed windows")]
BeamSize = Annotated[int, Field(ge=1, le=16, description="beam search width; 1 is greedy (Hearth's extension)")]
AudioSeed = Annotated[int, Field(ge=0, lt=2**63, description="makes sampling at temperatures above 0 repeatable")]


class AudioForm(BaseModel):
    """Base of the audio forms: unknown fields are kept for `check`, which refuses them by name."""

    model_config = ConfigDict(extra="allow")

    keep_alive: KeepAlive = None  # Hearth's extension (Ollama's): how long the model stays loaded once idle

    def check(self) -> None:
        """400 naming the first unknown field, or a granularity that is neither word nor segment."""
        unknown = next(iter(self.model_extra or {}), None)
        if unknown is not None:
            raise InvalidRequest(f"Unrecognized request argument supplied: {unknown}", param=unknown,
                                 code="unknown_parameter")
        bad = next((g for g in getattr(self, "timestamp_granularities", ()) if g not in GRANULARITIES), None)
        if bad is not None:
            raise InvalidRequest(f"Invalid value for 'timestamp_granularities[]': {bad!r} is not one of "
                                 f"{list(GRANULARITIES)}.", param="timestamp_granularities[]", code="invalid_value")


class TranslationForm(AudioForm):
    """The /v1/audio/translations form: speech in any language the model knows, to English text."""

    file: UploadFile = Field(description="flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav or webm (anything FFmpeg reads)")
    model: str
    prompt: str | None = Field(None, description="text that comes before the audio, to guide style and spelling")
    response_format: ResponseFormat = "json"
    temperature: AudioTemperature = 0.0
    # Hearth's extensions.
    beam_size: BeamSize = 1
    seed: AudioSeed | None = None


class TranscriptionForm(AudioForm):
    """The /v1/audio/transcriptions form."""

    file: UploadFile = Field(description="flac, mp3, mp4, mpeg, mpga, m4a, ogg, wav or webm (anything FFmpeg reads)")
    model: str
    language: str | None = Field(None, description="ISO-639-1 code (`en`); None: detected (multilingual models)")
    prompt: str | None = Field(None, description="text that comes before the audio, to guide style and spelling")
    response_format: ResponseFormat = "json"
    stream: bool = Field(False, description="Server-Sent Events: transcript.text.delta per segment, then done")
    temperature: AudioTemperature = 0.0
    timestamp_granularities: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("timestamp_granularities[]", "timestamp_granularities"),
        description="verbose_json only: `segment` (the default) and/or `word`")
    # Hearth's extensions.
    beam_size: BeamSize = 1
    seed: AudioSeed | None = None


class UsageDuration(BaseModel):
    """What OpenAI bills Whisper by: the input's length, in whole seconds rounded up."""

    type: Literal["duration"] = "duration"
    seconds: float


class Transcription(BaseModel):
    """response_format json (translations answer the same shape)."""

    text: str
    usage: UsageDuration | None = None


class TranscriptionWord(BaseModel):
    word: str
    start: float  # s
    end: float  # s


class TranscriptionSegment(BaseModel):
    id: int
    seek: int  # where the segment's 30 s window starts, in mel frames (10 ms)
    start: float  # s
    end: float  # s
    text: str
    tokens: list[int]
    temperature: float
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float


class TranscriptionVerbose(BaseModel):
    """response_format verbose_json: segments unless only word timestamps were asked for, words when they were."""

    task: Literal["transcribe", "translate"]
    language: str  # the language's name, as OpenAI writes it ("english"); translations: always "english"
    duration: float  # s
    text: str
    segments: list[TranscriptionSegment] | None = None
    words: list[TranscriptionWord] | None = None
    usage: UsageDuration | None = None


class TranscriptTextDelta(BaseModel):
    """A stream event: more text (a segment's, as each 30 s window finishes)."""

    type: Literal["transcript.text.delta"] = "transcript.text.delta"
    delta: str


class TranscriptTextDone(BaseModel):
    """The stream's last event: the whole text, which is the deltas joined."""

    type: Literal["transcript.text.done"] = "transcript.text.done"
    text: str
