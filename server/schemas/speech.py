"""POST /v1/audio/speech and GET /v1/audio/voices: requests, stream events and the voice list, in the order of
OpenAI's API reference; Hearth's extensions come last."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, Field, field_validator

from server.schemas.common import KeepAlive, OpenAIRequest

Speed = Annotated[float, Field(ge=0.25, le=4.0, description="1.0 is the model's own pace")]
ResponseFormat = Literal["mp3", "opus", "aac", "flac", "wav", "pcm"]


class VoiceRef(OpenAIRequest):
    """OpenAI's custom-voice object: `{"id": "..."}`; here any Kokoro voice id or blend."""

    id: str = Field(min_length=1)


class SpeechRequest(OpenAIRequest):
    """The request body."""

    model: str
    input: str = Field(description="the text to speak (at most limits.max_speech_input characters)")
    voice: str | VoiceRef = Field(
        description="a Kokoro voice id (af_bella), a blend (af_bella+af_sky, af_bella(2)+af_sky(1)), or one of "
                    "OpenAI's names (alloy, echo, ...), which map to the closest available voice")
    instructions: str | None = Field(None, description="accepted for compatibility; Kokoro has no instructions")
    response_format: ResponseFormat = "mp3"
    speed: Speed = 1.0
    stream_format: Literal["sse", "audio"] | None = Field(
        None, description="audio: the encoded audio as chunked transfer, each chunk sent when synthesised; sse: "
                          "speech.audio.delta events of base64 audio, then speech.audio.done. Unset: one whole file")
    # Hearth's extensions.
    lang_code: str | None = Field(
        None, description="the language to read the text in (Kokoro's a, b, e, f, h, i, j, p, z, or en-us, en-gb, "
                          "es, fr, hi, it, ja, pt-br, zh); default: the voice's, and English for text without any "
                          "Japanese script sent to a Japanese voice")
    seed: int | None = Field(0, description="seed of the vocoder's noise source; None: a fresh one per request")
    keep_alive: KeepAlive = None
    return_timestamps: bool = Field(
        False, description="captions, as Kokoro-FastAPI's: each written word with its start and end in seconds. "
                           "Unset stream_format: one JSON object {audio (base64), audio_format, timestamps}; sse: "
                           "each speech.audio.delta carries the timestamps of the words its audio holds; audio: "
                           "one such JSON object a line (NDJSON) per piece of audio")

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("input must not be empty")
        return value

    @property
    def voice_spec(self) -> str:
        """The voice as text, from either form."""
        return self.voice if isinstance(self.voice, str) else self.voice.id


class SpeechUsage(BaseModel):
    """Usage of a speech.audio.done event: phoneme ids in, predicted audio frames out."""

    input_tokens: int
    output_tokens: int
    total_tokens: int


class WordTimestamp(BaseModel):
    """One written word of the input and when it is said, in seconds from the start of the audio
    (Kokoro-FastAPI's shape)."""

    word: str
    start_time: float
    end_time: float


class SpeechAudioDelta(BaseModel):
    type: Literal["speech.audio.delta"] = "speech.audio.delta"
    audio: str = Field(description="base64 of the next bytes of the encoded audio (response_format)")
    timestamps: list[WordTimestamp] | None = Field(
        None, description="with return_timestamps: the words whose audio this event holds (absent otherwise)")


class SpeechAudioDone(BaseModel):
    type: Literal["speech.audio.done"] = "speech.audio.done"
    usage: SpeechUsage


class CaptionedSpeech(BaseModel):
    """Audio with its captions, as Kokoro-FastAPI's /dev/captioned_speech answers: the whole response, or one line
    of a streamed one (NDJSON), holding the next piece of audio and the words it says."""

    audio: str = Field(description="base64 of the encoded audio (or of its next bytes, when streamed)")
    audio_format: str = Field(description="the audio's media type (audio/mpeg, audio/wav, ...)")
    timestamps: list[WordTimestamp] | None = Field(description="the words said; null unless return_timestamps")


class CaptionedSpeechRequest(SpeechRequest):
    """Kokoro-FastAPI's /dev/captioned_speech body: /v1/audio/speech's, streamed by default as NDJSON lines of
    CaptionedSpeech, with timestamps on by default."""

    model: str = "kokoro"
    stream: bool = Field(True, description="one CaptionedSpeech a line as audio is made; false: one JSON object")
    return_timestamps: bool = True

    def speech_request(self) -> SpeechRequest:
        """The /v1/audio/speech request this one is."""
        fields = self.model_dump(exclude={"stream", "stream_format"})
        return SpeechRequest(**fields, stream_format=self.stream_format or ("audio" if self.stream else None))


class VoiceInfo(BaseModel):
    """One voice, shaped like OpenAI's audio.voice object, with Kokoro's language and gender."""

    id: str
    object: Literal["audio.voice"] = "audio.voice"
    name: str
    created_at: int = 0
    language: str = Field(description="Kokoro's language code (a: US English, b: British English, j: Japanese, ...)")
    gender: Literal["female", "male", "unknown"]


class VoiceList(BaseModel):
    object: Literal["list"] = "list"
    model: str
    data: list[VoiceInfo]
    aliases: dict[str, str] = Field(description="OpenAI's voice names and the voice each one reaches here")
