"""Speech (/v1/audio/speech): text -> phoneme chunks -> the model's worker, chunk by chunk -> encoded audio, as a
whole file, a chunked stream or SSE events; and the voice list (/v1/audio/voices).

Voices: a Kokoro id (af_bella), a blend of ids with `+` (an even mix) and optional weights in parentheses
(af_bella(2)+af_sky(1): two parts to one; packs are mixed as weighted means, as Kokoro-FastAPI does), or one of
OpenAI's names, each mapped to the first available voice of a preference list, else to the first voice of the
wanted gender, else to the first voice (the shipped voices are Japanese: alloy reaches jf_alpha).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
from fastapi import Request

from audio.encode import MEDIA_TYPES, AudioEncoder, encoder
from config.settings import Settings
from models.phonemes import Chunk, Language, PhonemizerError, chunk_text, language, text_language
from server.errors import InvalidRequest
from server.metrics import meter_audio
from server.model_manager import ModelManager
from server.protocols import SpeechHandler, SpeechModel
from server.schemas.speech import SpeechAudioDelta, SpeechAudioDone, SpeechRequest, SpeechUsage, VoiceInfo, VoiceList

log = logging.getLogger("hearth.server")

# OpenAI's voices: Kokoro v1.0 voices of a similar character first (several share the name), then the gender.
OPENAI_VOICES: dict[str, tuple[str, tuple[str, ...]]] = {
    "alloy": ("female", ("af_alloy", "af_heart", "af_bella")),
    "ash": ("male", ("am_adam", "am_michael")),
    "ballad": ("male", ("bm_lewis", "bm_george")),
    "coral": ("female", ("af_heart", "af_nicole", "bf_emma")),
    "echo": ("male", ("am_echo", "am_eric")),
    "fable": ("male", ("bm_fable", "bm_daniel")),
    "onyx": ("male", ("am_onyx", "am_fenrir")),
    "nova": ("female", ("af_nova", "af_sarah")),
    "sage": ("female", ("af_sarah", "af_river")),
    "shimmer": ("female", ("af_sky", "af_jessica")),
    "verse": ("male", ("am_michael", "am_liam")),
    "marin": ("female", ("af_kore", "af_aoede", "af_heart")),
    "cedar": ("male", ("am_puck", "am_liam")),
}
_PART = re.compile(r"^\s*([A-Za-z0-9_.-]+)\s*(?:\(\s*([0-9]*\.?[0-9]+)\s*\))?\s*$")


def gender(voice_id: str) -> str:
    """Kokoro ids carry it in their second letter: af_ (female), am_ (male)."""
    tag = voice_id[1:2] if "_" in voice_id else ""
    return {"f": "female", "m": "male"}.get(tag, "unknown")


def openai_voice(name: str, voices: dict[str, np.ndarray]) -> str:
    """The available voice an OpenAI voice name reaches."""
    wanted, preferred = OPENAI_VOICES[name]
    for voice_id in preferred:
        if voice_id in voices:
            return voice_id
    return next((v for v in voices if gender(v) == wanted), next(iter(voices)))


@dataclass(frozen=True)
class Voice:
    """A resolved voice: its voicepack [510, 256] (one id's, or a weighted mix) and the language it speaks."""

    pack: np.ndarray
    language: Language
    ids: tuple[str, ...]


def resolve_voice(spec: str, voices: dict[str, np.ndarray]) -> Voice:
    """The voicepack for a voice spec; InvalidRequest naming `voice` when a part is unknown or malformed."""
    parts = []
    for text in spec.split("+"):
        match = _PART.match(text)
        if not match:
            raise InvalidRequest(f"voice {spec!r} is not a voice id, a blend like af_bella+af_sky or a weighted "
                                 "blend like af_bella(2)+af_sky(1)", param="voice", code="invalid_value")
        name, weight = match[1], float(match[2]) if match[2] else 1.0
        if name.lower() in OPENAI_VOICES and name not in voices:
            name = openai_voice(name.lower(), voices)
        if name not in voices:
            known = ", ".join(sorted(voices))
            raise InvalidRequest(f"voice {match[1]!r} is not available; the voices are {known} and OpenAI's names "
                                 f"({', '.join(OPENAI_VOICES)})", param="voice", code="invalid_value")
        if weight <= 0:
            raise InvalidRequest(f"voice weight of {name!r} must be positive", param="voice", code="invalid_value")
        parts.append((name, weight))
    total = sum(w for _, w in parts)
    pack = sum(np.asarray(voices[n], np.float32) * (w / total) for n, w in parts)
    try:
        lang = language(parts[0][0])
    except PhonemizerError:
        lang = language("a")  # a user's voicepack without Kokoro's naming: read English
    return Voice(np.asarray(pack, np.float32), lang, tuple(n for n, _ in parts))


@dataclass
class Synthesised:
    """One chunk's audio and its predicted frames (for usage)."""

    audio: np.ndarray
    frames: int


def synthesis_job(chunks: list[Chunk], pack: np.ndarray, speed: float, seed: int | None):
    """The worker job: fn(model) yields each chunk's audio as soon as it is made."""

    def run(model: SpeechModel) -> Iterator[Synthesised]:
        for i, chunk in enumerate(chunks):
            out = model.synthesize(list(chunk.ids), model.style(pack, len(chunk.ids)), speed,
                                   None if seed is None else seed + i)
            yield Synthesised(np.asarray(out.audio, np.float32).reshape(-1), int(np.sum(out.durations)))

    return run


@dataclass
class SpeechResult:
    """What the router sends: a whole body, a byte stream, or SSE payloads."""

    media_type: str
    body: bytes | None = None
    stream: AsyncIterator[bytes] | None = None
    events: AsyncIterator[dict[str, Any]] | None = None


class SpeechService:
    """Turns speech requests into synthesis jobs for the model's worker and their audio into responses."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    async def _voices(self, worker: SpeechHandler) -> dict[str, np.ndarray]:
        try:
            return await asyncio.to_thread(worker.voices, tuple(self.settings.speech_voices))
        except (OSError, ValueError) as error:  # a bad speech_voices entry: the server's configuration
            log.error("reading speech_voices: %s", error)
            return worker.model.voices

    async def create(self, request: SpeechRequest, http: Request) -> SpeechResult:
        limit = self.settings.limits.max_speech_input
        if len(request.input) > limit:
            raise InvalidRequest(f"input has {len(request.input)} characters; at most {limit} are allowed.",
                                 param="input", code="string_above_max_length")
        entry, worker = await self.manager.worker_for(request.model, kind="speech", keep_alive=request.keep_alive)
        model = worker.model
        voice = resolve_voice(request.voice_spec, await self._voices(worker))
        try:
            lang = language(request.lang_code) if request.lang_code else text_language(request.input, voice.language)
        except PhonemizerError as error:
            raise InvalidRequest(str(error), param="lang_code", code="invalid_value") from error
        try:
            chunks = await asyncio.to_thread(chunk_text, request.input, lang, model.vocab,
                                             max_phonemes=model.max_phonemes)
        except PhonemizerError as error:
            raise InvalidRequest(f"input: {error}", param="input", code="invalid_value") from error
        if request.instructions:
            log.info("speech request for %s: instructions ignored (Kokoro takes none)", entry.id)
        job = synthesis_job(chunks, voice.pack, request.speed, request.seed)
        # /metrics: seconds of audio made, counted per chunk on the worker thread, whichever way it is sent.
        job = meter_audio(job, "generated", worker.name, lambda piece: piece.audio.size / model.sample_rate)
        retry = self.settings.limits.retry_after_s
        fmt, rate = request.response_format, model.sample_rate
        media_type = MEDIA_TYPES[fmt]
        if request.stream_format == "audio":
            return SpeechResult(media_type, stream=self._audio_stream(worker.stream(job, retry), fmt, rate, http))
        if request.stream_format == "sse":
            n_ids = sum(len(c.ids) for c in chunks)
            return SpeechResult("text/event-stream", events=self._sse(worker.stream(job, retry), fmt, rate, n_ids))
        enc = encoder(fmt, rate)
        streamed = []
        pieces = worker.stream(job, retry)
        async with contextlib.aclosing(pieces):  # leaving early stops the job before its next chunk
            async for piece in pieces:
                if await http.is_disconnected():
                    log.info("client disconnected from /v1/audio/speech; stopping its synthesis")
                    return SpeechResult(media_type, body=b"")
                streamed.append(await asyncio.to_thread(enc.write, piece.audio))
        streamed.append(await asyncio.to_thread(enc.finish))
        return SpeechResult(media_type, body=enc.whole(b"".join(streamed)))

    @staticmethod
    async def _encoded(pieces: AsyncIterator[Synthesised], enc: AudioEncoder,
                       frames: list[int]) -> AsyncIterator[bytes]:
        """Encoded bytes as each chunk's audio arrives; the encoder's tail at the end."""
        try:
            async for piece in pieces:
                frames.append(piece.frames)
                data = await asyncio.to_thread(enc.write, piece.audio)
                if data:
                    yield data
            tail = await asyncio.to_thread(enc.finish)
            if tail:
                yield tail
        finally:
            await pieces.aclose()  # type: ignore[attr-defined] - stops the job between chunks

    async def _audio_stream(self, pieces: AsyncIterator[Synthesised], fmt: str, rate: int,
                            http: Request) -> AsyncIterator[bytes]:
        source = self._encoded(pieces, encoder(fmt, rate), [])
        try:
            async for data in source:
                if await http.is_disconnected():
                    log.info("client disconnected from /v1/audio/speech; stopping its synthesis")
                    return
                yield data
        finally:
            await source.aclose()

    async def _sse(self, pieces: AsyncIterator[Synthesised], fmt: str, rate: int,
                   n_ids: int) -> AsyncIterator[dict[str, Any]]:
        frames: list[int] = []
        source = self._encoded(pieces, encoder(fmt, rate), frames)
        try:
            async for data in source:
                yield SpeechAudioDelta(audio=base64.b64encode(data).decode("ascii")).model_dump(mode="json")
        finally:
            await source.aclose()
        usage = SpeechUsage(input_tokens=n_ids, output_tokens=sum(frames), total_tokens=n_ids + sum(frames))
        yield SpeechAudioDone(usage=usage).model_dump(mode="json")

    async def voices(self, model_name: str | None) -> VoiceList:
        """The voices of a speech model (the default one when none is named), and where OpenAI's names lead."""
        name = model_name or self.settings.speech.default
        if name is None:
            raise InvalidRequest("no speech model is configured", param="model")
        entry, worker = await self.manager.worker_for(name, kind="speech")
        voices = await self._voices(worker)
        data = []
        for voice_id in voices:
            try:
                code = language(voice_id).code
            except PhonemizerError:
                code = "a"
            data.append(VoiceInfo(id=voice_id, name=voice_id, language=code, gender=gender(voice_id)))  # type: ignore
        aliases = {name: openai_voice(name, voices) for name in OPENAI_VOICES}
        return VoiceList(model=entry.id, data=data, aliases=aliases)
