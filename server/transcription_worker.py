"""A worker per loaded transcription model (Whisper or Moonshine): a thread that owns the model (its wgpu device,
weights, programs) and runs one transcription at a time, handing back each segment as its window finishes.

A job first settles the language (the request's, "en" on an English-only model, or the multilingual model's
detection) and yields it as a `Language`, then yields the model's `Segment`s. Leaving the stream early (the client
went away) stops the model at its next step (an encoder pass or a decoded token), so the worker moves on.
"""

from __future__ import annotations

import importlib
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import numpy as np

from server.errors import InvalidRequest
from server.protocols import TranscribedSegment, TranscriptionModel
from server.thread_worker import ThreadWorker
from server.thread_worker import load_on_own_device as _on_own_device

SAMPLE_RATE = 16000  # Hz, what Whisper takes
# Where the Whisper package's option and error types live.
_MODEL_MODULES = ("models.whisper.decode",)


def load_on_own_device(source: str, **kwargs: object) -> TranscriptionModel:
    """Load a transcription model on a wgpu device of its own, so workers never share a device or a queue: Moonshine
    for a Hugging Face folder whose config.json says so, else Whisper (the shipped one, CTranslate2 or HF folders)."""
    from models.moonshine.checkpoint import is_moonshine_dir

    if is_moonshine_dir(Path(source).expanduser()):
        from models.moonshine.model import load_moonshine

        return _on_own_device(load_moonshine, source, **kwargs)
    from models.whisper.model import load_whisper

    return _on_own_device(load_whisper, source, **kwargs)


@dataclass(frozen=True)
class TranscribeParams:
    """What a request asks of the model, in the service's terms (converted to the model's TranscribeOptions here,
    on the worker side, so the service needs nothing from models/)."""

    task: str = "transcribe"  # or "translate" (to English)
    language: str | None = None  # ISO-639-1 code; None: "en" on English-only models, else detected
    prompt: str | None = None
    temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
    beam_size: int = 1
    word_timestamps: bool = False
    seed: int | None = None  # sampling at temperatures above 0


@dataclass(frozen=True)
class Language:
    """The language a job transcribes: the request's (probability 1) or the model's detection."""

    code: str
    probability: float


def model_type(model: TranscriptionModel, name: str) -> type:
    """A type of the model's own package (TranscribeOptions, UnknownLanguage): from the module that defines the
    model's class when it has one by that name (a test's stand-in model brings its own), else models.whisper.decode."""
    for module_name in (type(model).__module__, *_MODEL_MODULES):
        try:
            found = getattr(importlib.import_module(module_name), name, None)
        except ImportError:
            continue
        if found is not None:
            return found
    raise ImportError(f"no {name} next to {type(model).__name__} or in {', '.join(_MODEL_MODULES)}")


def transcribe_job(model: TranscriptionModel, audio: np.ndarray, params: TranscribeParams,
                   should_stop: Callable[[], bool] | None = None) -> Iterator[Language | TranscribedSegment]:
    """Run on the worker thread: the job's Language, then each Segment as its window finishes. should_stop (the
    worker's) is asked between the model's steps (the encoder pass, each decoded token), so a request that went
    away ends within one step.

    An UnknownLanguage from the model (the service checks the language first, so this is a model that knows fewer
    languages than it lists) becomes a 400 naming `language`.
    """
    unknown_language = cast(type[Exception], model_type(model, "UnknownLanguage"))
    try:
        if params.language is not None:
            language = Language(params.language, 1.0)
        elif not model.multilingual:
            language = Language("en", 1.0)
        else:
            language = Language(*model.detect_language(audio))
        yield language
        options = model_type(model, "TranscribeOptions")(
            task=params.task, language=language.code, prompt=params.prompt, temperature=params.temperature,
            beam_size=params.beam_size, word_timestamps=params.word_timestamps, seed=params.seed)
        yield from model.transcribe(audio, options, should_stop=should_stop)
    except unknown_language as error:
        raise InvalidRequest(f"The model `{model.name}` does not know this language: {error}",
                             param="language", code="unsupported_language") from error


class TranscriptionWorker(ThreadWorker[TranscriptionModel]):
    """Loads one Whisper model in its own thread, then transcribes queued requests one at a time."""

    kind = "transcription"

    def transcribe(self, audio: np.ndarray, params: TranscribeParams,
                   retry_after_s: int) -> AsyncGenerator[Language | TranscribedSegment, None]:
        """The job's Language, then its Segments, each as the worker thread makes it (QueueFull when max_queue
        requests wait already; leaving the `async for` early stops the job at the model's next step)."""
        return self.stream(lambda model: transcribe_job(model, audio, params, self.should_stop), retry_after_s)

    # -- worker thread -------------------------------------------------------------------
    def warm_up(self, model: TranscriptionModel) -> None:
        """Transcribe one second of silence, greedy, so the first request does not compile the pipelines."""
        options = model_type(model, "TranscribeOptions")(language="en", temperature=0.0)
        for _ in model.transcribe(np.zeros(SAMPLE_RATE, dtype=np.float32), options):
            pass

    def describe(self, model: TranscriptionModel) -> str:
        kind = f"multilingual ({len(model.languages)} languages)" if model.multilingual else "English-only"
        return f"{kind}, {f'{model.n_mels} mel bins' if model.n_mels else 'raw audio'}"
