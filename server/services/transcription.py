"""Transcriptions and translations (/v1/audio/transcriptions, /v1/audio/translations): checks that name their
parameter, the upload decoded off the event loop, the model's worker, then the segments in the asked format.

Decisions where OpenAI leaves room:
- Audio shorter than 0.1 s is a 400 (`audio_too_short`), as OpenAI answers. Silent audio is transcribed: Whisper's
  no-speech check drops its windows, so the answer is a valid empty transcript (text "", no segments, a WebVTT
  header alone), not an error.
- temperature 0 (the default) is Whisper's fallback schedule (0, 0.2, ..., 1.0, a step up on each window that fails
  the compression-ratio or log-prob checks); a temperature t > 0 starts the schedule at t, as openai-whisper's CLI.
- `timestamp_granularities[]` with `word` needs verbose_json (a 400 otherwise); `segment` alone changes nothing.
  With only `word`, verbose_json has words and no segments, as OpenAI's does.
- `stream=true` sends `transcript.text.delta` per segment and `transcript.text.done`; it needs json or text.
- Audio longer than `limits.max_audio_seconds` (HEARTH_MAX_AUDIO_SECONDS) is a 413 (`audio_too_long`), found while
  decoding (audio/decode.py), before the samples past the limit exist.
- Samples must be finite: NaN or infinity (a float file holding them, or values past float32's range) is a 400
  (`invalid_audio`) naming the time of the first one.
- Amplitude: audio whose peak exceeds MAX_PEAK (16, 24 dB over full scale) is scaled to a peak of 1 before the model
  hears it; nothing quieter is touched. No decoder makes such a peak from real audio (FFmpeg's downmix of
  full-scale channels stays under 6.3, lossy codecs overshoot by a little), while float files written in integer
  units (peaks near 32768) do occur, and Whisper's log-mel of a peak far above 1 lies off its training range
  (samples of 1e30 turned a one-second clip into 42 s of fallback decoding). Scaling keeps such files usable.
- Moonshine (models/moonshine/): English-only, a segment per window of up to 30 s, no word timing (`word` is a 400
  naming the model), greedy only (beam_size > 1 is a 400), no prompt conditioning (a prompt is not used).
- Segment and word times are clamped to the decoded audio's duration in every format: Whisper's last timestamp
  token can point past the end of the audio (a 1.175 s clip's cue ended at 2.000 s).
"""

from __future__ import annotations

import math
from collections.abc import AsyncGenerator, AsyncIterator
from typing import cast

import numpy as np
from fastapi import Response
from fastapi.responses import JSONResponse, PlainTextResponse

from audio.decode import AudioDecodeError, AudioTooLong, NonFiniteAudio, decode_audio
from audio.subtitles import write_srt, write_vtt
from config.settings import Settings
from server.errors import InvalidRequest, RequestTooLarge
from server.metrics import observe_audio
from server.model_manager import ModelManager
from server.protocols import TranscribedSegment, TranscribedWord
from server.schemas.common import dump
from server.schemas.transcription import (
    Transcription,
    TranscriptionForm,
    TranscriptionSegment,
    TranscriptionVerbose,
    TranscriptionWord,
    TranscriptTextDelta,
    TranscriptTextDone,
    TranslationForm,
    UsageDuration,
)
from server.transcription_worker import SAMPLE_RATE, Language, TranscribeParams

MIN_DURATION_S = 0.1  # OpenAI refuses shorter audio
FRAMES_PER_SECOND = 100  # mel frames (hop 160 at 16 kHz): the unit of a segment's seek
TEMPERATURE_STEP = 0.2  # Whisper's fallback increment
# A peak no decoder makes from real audio: FFmpeg's downmix adds full-scale channels with coefficients up to 1
# (sqrt(2) for stereo, at most 6.3 for its 16- and 24-channel layouts) and lossy codecs overshoot by a little.
MAX_PEAK = 16.0
SUPPORTED_FORMATS = "flac, m4a, mp3, mp4, mpeg, mpga, oga, ogg, wav, webm"

# Whisper's languages, code and name (openai-whisper's tokenizer.LANGUAGES, in its order), and other names for them.
_LANGUAGE_TABLE = (
    "en:english zh:chinese de:german es:spanish ru:russian ko:korean fr:french ja:japanese pt:portuguese tr:turkish "
    "pl:polish ca:catalan nl:dutch ar:arabic sv:swedish it:italian id:indonesian hi:hindi fi:finnish vi:vietnamese "
    "he:hebrew uk:ukrainian el:greek ms:malay cs:czech ro:romanian da:danish hu:hungarian ta:tamil no:norwegian "
    "th:thai ur:urdu hr:croatian bg:bulgarian lt:lithuanian la:latin mi:maori ml:malayalam cy:welsh sk:slovak "
    "te:telugu fa:persian lv:latvian bn:bengali sr:serbian az:azerbaijani sl:slovenian kn:kannada et:estonian "
    "mk:macedonian br:breton eu:basque is:icelandic hy:armenian ne:nepali mn:mongolian bs:bosnian kk:kazakh "
    "sq:albanian sw:swahili gl:galician mr:marathi pa:punjabi si:sinhala km:khmer sn:shona yo:yoruba so:somali "
    "af:afrikaans oc:occitan ka:georgian be:belarusian tg:tajik sd:sindhi gu:gujarati am:amharic yi:yiddish lo:lao "
    "uz:uzbek fo:faroese ht:haitian_creole ps:pashto tk:turkmen nn:nynorsk mt:maltese sa:sanskrit "
    "lb:luxembourgish my:myanmar bo:tibetan tl:tagalog mg:malagasy as:assamese tt:tatar haw:hawaiian ln:lingala "
    "ha:hausa ba:bashkir jw:javanese su:sundanese yue:cantonese")
LANGUAGES = {code: name.replace("_", " ") for code, name in (item.split(":") for item in _LANGUAGE_TABLE.split())}
_BY_NAME = {name: code for code, name in LANGUAGES.items()} | {
    "burmese": "my", "valencian": "ca", "flemish": "nl", "haitian": "ht", "letzeburgesch": "lb", "pushto": "ps",
    "panjabi": "pa", "moldavian": "ro", "moldovan": "ro", "sinhalese": "si", "castilian": "es", "mandarin": "zh"}


def language_code(language: str, model_name: str, languages: tuple[str, ...], multilingual: bool) -> str:
    """The ISO-639-1 code a request's `language` names (a code or Whisper's name for it, any case); a 400 naming
    `language` when it is unknown, or not English on an English-only model."""
    wanted = language.strip().lower()
    code = wanted if wanted in LANGUAGES or wanted in languages else _BY_NAME.get(wanted)
    if code is None:
        raise InvalidRequest(f"Unknown language {language!r}: send an ISO-639-1 code such as 'en', 'de' or 'ja'.",
                             param="language", code="unsupported_language")
    if not multilingual and code != "en":
        raise InvalidRequest(f"The model `{model_name}` is English-only: language must be 'en' (got {language!r}); "
                             "use a multilingual Whisper model for other languages.",
                             param="language", code="unsupported_language")
    if code not in languages:
        raise InvalidRequest(f"The model `{model_name}` does not know the language {language!r}.",
                             param="language", code="unsupported_language")
    return code


def temperatures(temperature: float) -> tuple[float, ...]:
    """Whisper's fallback schedule from `temperature` up to 1.0 in steps of 0.2 (0 -> 0, 0.2, ..., 1.0)."""
    steps = int(math.floor((1.0 - temperature) / TEMPERATURE_STEP + 1e-6))
    return tuple(round(temperature + i * TEMPERATURE_STEP, 6) for i in range(steps + 1))


def read_audio(data: bytes, max_seconds: float) -> np.ndarray:
    """decode_audio at Whisper's rate within `max_seconds`, then the amplitude rule of the module docstring: a peak
    above MAX_PEAK is scaled to 1, anything quieter is left as decoded. Runs on a preparation thread."""
    audio = decode_audio(data, sample_rate=SAMPLE_RATE, max_seconds=max_seconds)
    peak = max(float(audio.max()), -float(audio.min()))  # finite: decode_audio refuses NaN and infinity
    if peak > MAX_PEAK:
        audio /= np.float32(peak)  # a reciprocal of a peak near 3e38 would be subnormal and lose precision
    return audio


def _joined(deltas: list[str], text: str) -> str:
    """The next delta of the transcript: a segment's text, the first one without its leading space."""
    return text if deltas else text.lstrip()


class TranscriptionService:
    """Turns audio requests into work for the Whisper worker and its segments into OpenAI responses."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    async def create(self, form: TranscriptionForm | TranslationForm, task: str) -> Response | AsyncIterator[dict]:
        """A response in form.response_format, or (stream) the payloads of the SSE events."""
        form.check()
        fmt = form.response_format
        granularities = set(getattr(form, "timestamp_granularities", ()))
        stream = getattr(form, "stream", False)
        if "word" in granularities and fmt != "verbose_json":
            raise InvalidRequest("timestamp_granularities[] word needs response_format verbose_json "
                                 f"(got {fmt}).", param="timestamp_granularities[]", code="invalid_value")
        if stream and fmt not in ("json", "text"):
            raise InvalidRequest(f"stream=true sends transcript.text events; response_format must be json or text "
                                 f"(got {fmt}).", param="stream", code="invalid_value")

        entry, worker = await self.manager.worker_for(form.model, kind="transcription", keep_alive=form.keep_alive)
        model = worker.model
        language = None
        if task == "translate" and not model.multilingual:
            raise InvalidRequest(f"The model `{form.model}` is English-only and cannot translate: "
                                 "/v1/audio/translations needs a multilingual Whisper model.",
                                 param="model", code="model_not_supported")
        if "word" in granularities and not model.word_timestamps:
            raise InvalidRequest(f"The model `{form.model}` cannot time words: timestamp_granularities[] word needs a "
                                 "Whisper model.", param="timestamp_granularities[]", code="model_not_supported")
        if form.beam_size > 1 and not model.beam_search:
            raise InvalidRequest(f"The model `{form.model}` decodes greedily: beam_size must be 1 "
                                 f"(got {form.beam_size}).", param="beam_size", code="model_not_supported")
        if getattr(form, "language", None):
            language = language_code(form.language, form.model, tuple(model.languages), model.multilingual)

        audio = await self._decode(form)
        duration = audio.size / SAMPLE_RATE
        params = TranscribeParams(task=task, language=language, prompt=form.prompt or None,
                                  temperature=temperatures(form.temperature), beam_size=form.beam_size,
                                  word_timestamps="word" in granularities, seed=form.seed)
        items = worker.transcribe(audio, params, self.settings.limits.retry_after_s)
        # The first item (the language) comes once the job runs: a full queue or a load failure is still an HTTP
        # error rather than an event inside a stream whose headers went out.
        try:
            first = cast(Language, await anext(items))
        except BaseException:
            await items.aclose()
            raise
        observe_audio("transcribed", worker.name, duration)  # the job is running: the audio counts as heard
        rest = cast(AsyncGenerator[TranscribedSegment, None], items)  # segments only, after the language
        if stream:
            return self._events(rest)
        try:
            segments = [segment async for segment in rest]
        finally:
            await rest.aclose()  # now, not at garbage collection, if this request is cancelled
        return self._respond(fmt, task, first.code, duration, segments, granularities or {"segment"})

    async def _decode(self, form: TranscriptionForm | TranslationForm) -> np.ndarray:
        """The upload as float32 mono 16 kHz, decoded, resampled and checked on a preparation thread (PyAV holds
        no event loop): a 413 past limits.max_audio_seconds, a 400 for undecodable or non-finite audio."""
        data = await form.file.read()
        limit = self.settings.limits.max_audio_seconds
        name = form.file.filename or "unnamed"
        try:
            audio = await self.manager.preparation.run(read_audio, data, limit)
        except AudioTooLong as error:
            raise RequestTooLarge(f"The audio file ({name}) is too long: {error}. This server takes at most "
                                  f"{limit:g} s of audio per request (limits.max_audio_seconds, "
                                  "HEARTH_MAX_AUDIO_SECONDS); split the audio into shorter files.",
                                  param="file", code="audio_too_long") from error
        except NonFiniteAudio as error:
            raise InvalidRequest(f"The audio file ({name}) cannot be transcribed: {error}. Send audio whose samples "
                                 "are finite numbers (integer PCM, or floats in [-1, 1]).", param="file",
                                 code="invalid_audio") from error
        except AudioDecodeError as error:
            raise InvalidRequest(f"Could not read the audio file ({name}): {error}. "
                                 f"Supported formats: {SUPPORTED_FORMATS}.", param="file",
                                 code="invalid_file_format") from error
        if audio.size < MIN_DURATION_S * SAMPLE_RATE:
            raise InvalidRequest(f"Audio file is too short ({audio.size / SAMPLE_RATE:.3f} s). Minimum audio length "
                                 f"is {MIN_DURATION_S} seconds.", param="file", code="audio_too_short")
        return audio

    @staticmethod
    async def _events(items: AsyncGenerator[TranscribedSegment, None]) -> AsyncIterator[dict]:
        """transcript.text.delta per segment with text, then transcript.text.done with the deltas joined."""
        deltas: list[str] = []
        try:
            async for segment in items:
                delta = _joined(deltas, segment.text)
                if delta:
                    deltas.append(delta)
                    yield dump(TranscriptTextDelta(delta=delta))
        finally:
            await items.aclose()
        yield dump(TranscriptTextDone(text="".join(deltas)))

    def _respond(self, fmt: str, task: str, language: str, duration: float, segments: list[TranscribedSegment],
                 granularities: set[str]) -> Response:
        deltas: list[str] = []
        for segment in segments:
            if delta := _joined(deltas, segment.text):
                deltas.append(delta)
        text = "".join(deltas)
        usage = UsageDuration(seconds=math.ceil(duration))
        if fmt == "text":
            return PlainTextResponse(text + "\n")
        cues = [(_clamp(s.start, duration), _clamp(s.end, duration), s.text) for s in segments]
        if fmt == "srt":
            return PlainTextResponse(write_srt(cues))
        if fmt == "vtt":
            return PlainTextResponse(write_vtt(cues), media_type="text/vtt")
        if fmt == "json":
            return JSONResponse(dump(Transcription(text=text, usage=usage)))
        verbose = TranscriptionVerbose(
            task=task, language="english" if task == "translate" else LANGUAGES.get(language, language),
            duration=round(duration, 3), text=text, usage=usage,
            segments=[_segment(i, s, duration) for i, s in enumerate(segments)] if "segment" in granularities else None,
            words=[_word(w, duration) for s in segments for w in s.words or ()] if "word" in granularities else None)
        return JSONResponse(dump(verbose, exclude_none=True))


def _clamp(seconds: float, duration: float) -> float:
    """A model's time placed inside the audio: Whisper's timestamp tokens can point past its end."""
    return min(max(seconds, 0.0), duration)


def _segment(index: int, segment: TranscribedSegment, duration: float) -> TranscriptionSegment:
    """OpenAI's segment from the model's, its times clamped to the audio's `duration`: ids count from 0 as OpenAI's
    do (faster-whisper's from 1); seek is the model's window start where it gives one, else the segment's own start
    (both in mel frames)."""
    seek = getattr(segment, "seek", None)
    return TranscriptionSegment(
        id=index, seek=int(seek if seek is not None else round(segment.start * FRAMES_PER_SECOND)),
        start=round(_clamp(segment.start, duration), 3), end=round(_clamp(segment.end, duration), 3),
        text=segment.text, tokens=list(segment.tokens),
        temperature=segment.temperature, avg_logprob=segment.avg_logprob,
        compression_ratio=segment.compression_ratio, no_speech_prob=segment.no_speech_prob)


def _word(word: TranscribedWord, duration: float) -> TranscriptionWord:
    return TranscriptionWord(word=word.word.strip(), start=round(_clamp(word.start, duration), 3),
                             end=round(_clamp(word.end, duration), 3))
