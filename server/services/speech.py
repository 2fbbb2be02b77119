"""Speech (/v1/audio/speech): text -> phoneme chunks -> the model's worker, chunk by chunk -> encoded audio, as a
whole file, a chunked stream or SSE events; and the voice list (/v1/audio/voices). Voice specs, blends and OpenAI's
voice names are the Kokoro package's (models/kokoro/voices.py).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from fastapi import Request

from audio.encode import MEDIA_TYPES, AudioEncoder, encoder
from config.settings import Settings
from models.kokoro.phonemes import Chunk, PhonemizerError, chunk_text, language, text_language
from models.kokoro.voices import VoiceError, gender, openai_aliases, resolve_voice, voice_language
from models.kokoro.words import WordTime, word_times
from server.errors import InvalidRequest
from server.metrics import meter_audio
from server.model_manager import ModelManager
from server.protocols import SpeechHandler, SpeechModel
from server.schemas.speech import (
    CaptionedSpeech,
    SpeechAudioDelta,
    SpeechAudioDone,
    SpeechRequest,
    SpeechUsage,
    VoiceInfo,
    VoiceList,
    WordTimestamp,
)

log = logging.getLogger("hearth.server")
NDJSON = "application/x-ndjson"


@dataclass
class Synthesised:
    """One chunk's audio, its predicted frames (for usage) and, for captions, when its words are said."""

    audio: np.ndarray
    frames: int
    words: list[WordTime] = field(default_factory=list)


def synthesis_job(chunks: list[Chunk], pack: np.ndarray, speed: float, seed: int | None,
                  should_stop: Callable[[], bool] | None = None):
    """The worker job: fn(model) yields each chunk's audio as soon as it is made. should_stop (the worker's) is
    asked between the model's steps inside a chunk, so a request that went away ends within one step."""

    def run(model: SpeechModel) -> Iterator[Synthesised]:
        elapsed = 0.0  # seconds of audio the earlier chunks made: where this chunk's words start from
        for i, chunk in enumerate(chunks):
            out = model.synthesize(list(chunk.ids), model.style(pack, len(chunk.ids)), speed,
                                   None if seed is None else seed + i, should_stop=should_stop)
            audio = np.asarray(out.audio, np.float32).reshape(-1)
            seconds = audio.size / model.sample_rate
            words = word_times(chunk.words, out.durations, seconds, elapsed) if chunk.words else []
            elapsed += seconds
            yield Synthesised(audio, int(np.sum(out.durations)), words)

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

    async def create(self, request: SpeechRequest, http: Request, *, captioned: bool = False) -> SpeechResult:
        """The response to a speech request. captioned: answer in CaptionedSpeech objects (Kokoro-FastAPI's
        /dev/captioned_speech) even without return_timestamps, whose timestamps are then null."""
        limit = self.settings.limits.max_speech_input
        if len(request.input) > limit:
            raise InvalidRequest(f"input has {len(request.input)} characters; at most {limit} are allowed.",
                                 param="input", code="string_above_max_length")
        entry, worker = await self.manager.worker_for(request.model, kind="speech", keep_alive=request.keep_alive)
        model = worker.model
        try:
            voice = resolve_voice(request.voice_spec, await self._voices(worker))
        except VoiceError as error:
            raise InvalidRequest(str(error), param="voice", code="invalid_value") from error
        try:
            lang = language(request.lang_code) if request.lang_code else text_language(request.input, voice.language)
        except PhonemizerError as error:
            raise InvalidRequest(str(error), param="lang_code", code="invalid_value") from error
        try:
            chunks = await self.manager.preparation.run(chunk_text, request.input, lang, model.vocab,
                                                        max_phonemes=model.max_phonemes,
                                                        words=request.return_timestamps)
        except PhonemizerError as error:
            raise InvalidRequest(f"input: {error}", param="input", code="invalid_value") from error
        self._check_phonemes(chunks)
        if request.instructions:
            log.info("speech request for %s: instructions ignored (Kokoro takes none)", entry.id)
        job = synthesis_job(chunks, voice.pack, request.speed, request.seed, worker.should_stop)
        # /metrics: seconds of audio made, counted per chunk on the worker thread, whichever way it is sent.
        job = meter_audio(job, "generated", worker.name, lambda piece: piece.audio.size / model.sample_rate)
        retry = self.settings.limits.retry_after_s
        fmt, rate = request.response_format, model.sample_rate
        media_type = MEDIA_TYPES[fmt]
        captions, envelope = request.return_timestamps, request.return_timestamps or captioned

        def line(data: bytes, words: list[WordTime]) -> bytes:
            return _captioned(data, media_type, words if captions else None).model_dump_json().encode() + b"\n"

        if request.stream_format == "audio":
            stream = self._audio_stream(worker.stream(job, retry), fmt, rate, http, line if envelope else None)
            return SpeechResult(NDJSON if envelope else media_type, stream=stream)
        if request.stream_format == "sse":
            n_ids = sum(len(c.ids) for c in chunks)
            events = self._sse(worker.stream(job, retry), fmt, rate, n_ids, captions)
            return SpeechResult("text/event-stream", events=events)
        enc = encoder(fmt, rate)
        streamed = []
        words: list[WordTime] = []
        pieces = worker.stream(job, retry)
        async with contextlib.aclosing(pieces):  # leaving early stops the job before its next chunk
            async for piece in pieces:
                if await http.is_disconnected():
                    log.info("client disconnected from /v1/audio/speech; stopping its synthesis")
                    return SpeechResult(media_type, body=b"")
                streamed.append(await asyncio.to_thread(enc.write, piece.audio))
                words.extend(piece.words)
        streamed.append(await asyncio.to_thread(enc.finish))
        body = enc.whole(b"".join(streamed))
        if envelope:
            return SpeechResult("application/json", body=line(body, words))
        return SpeechResult(media_type, body=body)

    def _check_phonemes(self, chunks: list[Chunk]) -> None:
        """The synthesis work is bounded by phonemes, not characters: digits and symbols are read out as words
        (about 9 phonemes a digit) and Chinese takes about 5 a character, against about 1 for English prose."""
        limit = self.settings.limits.max_speech_phonemes
        count = sum(len(chunk.ids) for chunk in chunks)
        if count > limit:
            raise InvalidRequest(f"input expands to {count} phonemes; at most {limit} are allowed (setting "
                                 "limits.max_speech_phonemes, HEARTH_MAX_SPEECH_PHONEMES). Numbers and symbols are "
                                 "read out as words, and a Chinese character is several phonemes, so such text "
                                 "takes more than its length suggests: send shorter input.", param="input",
                                 code="string_above_max_length")

    @staticmethod
    async def _encoded(pieces: AsyncIterator[Synthesised], enc: AudioEncoder,
                       frames: list[int]) -> AsyncIterator[tuple[bytes, list[WordTime]]]:
        """Encoded bytes as each chunk's audio arrives, with the words of that audio (held for the next bytes
        while the encoder has none to give); the encoder's tail, and any words still held, at the end."""
        held: list[WordTime] = []
        try:
            async for piece in pieces:
                frames.append(piece.frames)
                held.extend(piece.words)
                data = await asyncio.to_thread(enc.write, piece.audio)
                if data:
                    yield data, held
                    held = []
            tail = await asyncio.to_thread(enc.finish)
            if tail or held:
                yield tail, held
        finally:
            await pieces.aclose()  # type: ignore[attr-defined] - stops the job between chunks

    async def _audio_stream(self, pieces: AsyncIterator[Synthesised], fmt: str, rate: int, http: Request,
                            render: Callable[[bytes, list[WordTime]], bytes] | None = None) -> AsyncIterator[bytes]:
        """The encoded audio as it is made; with render, each piece and its words as render writes them."""
        source = self._encoded(pieces, encoder(fmt, rate), [])
        try:
            async for data, words in source:
                if await http.is_disconnected():
                    log.info("client disconnected from %s; stopping its synthesis", http.url.path)
                    return
                if render is not None:
                    yield render(data, words)
                elif data:
                    yield data
        finally:
            await source.aclose()

    async def _sse(self, pieces: AsyncIterator[Synthesised], fmt: str, rate: int, n_ids: int,
                   captions: bool = False) -> AsyncIterator[dict[str, Any]]:
        frames: list[int] = []
        source = self._encoded(pieces, encoder(fmt, rate), frames)
        try:
            async for data, words in source:
                delta = SpeechAudioDelta(audio=base64.b64encode(data).decode("ascii"),
                                         timestamps=_timestamps(words) if captions else None)
                yield delta.model_dump(mode="json", exclude_none=True)
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
            data.append(VoiceInfo(id=voice_id, name=voice_id, language=voice_language(voice_id).code,  # type: ignore
                                  gender=gender(voice_id)))
        aliases = openai_aliases(voices)
        return VoiceList(model=entry.id, data=data, aliases=aliases)


def _timestamps(words: list[WordTime]) -> list[WordTimestamp]:
    return [WordTimestamp(word=w.word, start_time=w.start_time, end_time=w.end_time) for w in words]


def _captioned(audio: bytes, media_type: str, words: list[WordTime] | None) -> CaptionedSpeech:
    """Audio and its words in Kokoro-FastAPI's captioned shape; words None: timestamps were not asked for."""
    return CaptionedSpeech(audio=base64.b64encode(audio).decode("ascii"), audio_format=media_type,
                           timestamps=None if words is None else _timestamps(words))
