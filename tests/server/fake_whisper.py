"""A stand-in for models/whisper/model.py's WhisperModel that follows its public API, for fast endpoint tests.

It "hears" each second of audio that is not silent as one segment, " Second <i>." (translated: " Translated <i>."),
with two words inside it; silence gives no segment, as Whisper's no-speech check does. A multilingual instance
detects German. It records the options of every call so tests can see what the server asked for.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# The model's own types (numpy only, no GPU), so the stand-in takes and returns exactly what WhisperModel does; the
# server finds them next to the model's class (server/transcription_worker.py's model_type).
from models.whisper.decode import Segment, TranscribeOptions, UnknownLanguage, Word

SAMPLE_RATE = 16000
SILENCE_RMS = 1e-3  # a second quieter than this is silence


@dataclass
class FakeWhisper:
    name: str = "fake-whisper"
    multilingual: bool = False
    n_mels: int = 80
    word_timestamps: bool = True
    beam_search: bool = True
    languages: tuple[str, ...] = ("en",)
    sample_rate = SAMPLE_RATE
    step_s: float = 0.0  # time each segment takes
    calls: list[TranscribeOptions] = field(default_factory=list)
    produced: int = 0  # segments made, over all calls
    steps_per_segment: int = 1  # should_stop is asked before each
    stopped: int = 0  # calls that ended early because should_stop said so

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions,
                   should_stop: Callable[[], bool] | None = None) -> Iterator[Segment]:
        if options.language is not None and options.language not in self.languages:
            raise UnknownLanguage(options.language)
        self.calls.append(options)
        return self._segments(audio, options, should_stop)

    def _segments(self, audio: np.ndarray, options: TranscribeOptions,
                  should_stop: Callable[[], bool] | None = None) -> Iterator[Segment]:
        duration = audio.size / SAMPLE_RATE
        word = "Translated" if options.task == "translate" else "Second"
        for i in range(int(np.ceil(duration))):
            chunk = audio[i * SAMPLE_RATE:(i + 1) * SAMPLE_RATE]
            if float(np.sqrt(np.mean(chunk.astype(np.float64) ** 2))) < SILENCE_RMS:
                continue
            for _ in range(self.steps_per_segment):  # the real model's steps (tokens) inside a window
                if should_stop is not None and should_stop():
                    self.stopped += 1
                    raise concurrent.futures.CancelledError("transcription stopped")
                time.sleep(self.step_s / self.steps_per_segment)
            self.produced += 1
            end = min(i + 0.9, duration)
            words = [Word(i, i + (end - i) / 2, f" {word}", 0.9), Word(i + (end - i) / 2, end, f" {i}.", 0.8)]
            yield Segment(id=i, start=float(i), end=end, text=f" {word} {i}.", tokens=[1000 + i, 2000 + i],
                          temperature=0.0, avg_logprob=-0.25, compression_ratio=1.1, no_speech_prob=0.01,
                          words=words if options.word_timestamps else None)

    def detect_language(self, audio: np.ndarray) -> tuple[str, float]:
        return ("de", 0.75) if self.multilingual else ("en", 1.0)


def load_fake_whisper(source: str, *, progress: Callable[[int, int], None] | None = None, **_: Any) -> FakeWhisper:
    """Settings' transcription loader for tests: source "multilingual" gives a model that knows en, de and fr;
    "slow" one that takes 0.2 s a segment, "long" a minute a segment (in steps that ask should_stop)."""
    if progress is not None:
        progress(1, 1)
    if source == "slow":
        return FakeWhisper(name=source, step_s=0.2)
    if source == "long":  # a minute a segment, in 50 ms steps
        return FakeWhisper(name=source, step_s=60.0, steps_per_segment=1200)
    if source == "multilingual":
        return FakeWhisper(name=source, multilingual=True, languages=("en", "de", "fr"))
    return FakeWhisper(name=source)
