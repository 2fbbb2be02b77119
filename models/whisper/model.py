"""A loaded Whisper model: transcription and language detection over models/whisper/net.py's network.

    model = load_whisper("whisper-tiny.en")
    for segment in model.transcribe(audio, TranscribeOptions()):      # float32 mono 16 kHz
        print(segment.start, segment.end, segment.text)
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from gpu.device import Device, default_device
from gpu.program import Executor
from models.whisper.decode import Segment, TranscribeOptions, check_language, detect_language, transcribe
from models.whisper.net import Progress, WhisperNet
from models.whisper.weights import load_checkpoint, shipped_model_dir

log = logging.getLogger("hearth.models")

DEFAULT_WHISPER_MODEL = "whisper-tiny.en"


class WhisperModelNotFound(FileNotFoundError):
    """No Whisper model by that name or path."""


class WhisperModel:
    """A loaded Whisper model: transcription and language detection (one caller at a time: the GPU state of a
    window, its caches and programs are shared)."""

    sample_rate = 16000
    word_timestamps = True  # from the alignment heads
    beam_search = True

    def __init__(self, name: str, net: WhisperNet) -> None:
        self.name = name
        self.net = net
        self.multilingual: bool = net.tokenizer.multilingual
        self.n_mels: int = net.config.n_mels
        self.languages: tuple[str, ...] = net.tokenizer.languages

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions | None = None,
                   should_stop: Callable[[], bool] | None = None) -> Iterator[Segment]:
        """Segments of float32 mono 16 kHz audio, yielded as each 30 s window finishes. Raises UnknownLanguage
        (before any work) for a language the model does not know.

        should_stop: asked before every GPU step (an encoder pass, a decoded token); when it says so the
        transcription ends with concurrent.futures.CancelledError. Each step holds the adapter's turn."""
        options = options or TranscribeOptions()
        check_language(self.net, options.language)
        return self._stoppable(transcribe(self.net, audio, options), should_stop)

    def _stoppable(self, segments: Iterator[Segment], should_stop: Callable[[], bool] | None) -> Iterator[Segment]:
        """segments, with the network asking should_stop while they are being made."""
        self.net.should_stop = should_stop
        try:
            yield from segments
        finally:
            self.net.should_stop = None

    def detect_language(self, audio: np.ndarray) -> tuple[str, float]:
        """(language code, probability) of the first 30 s."""
        return detect_language(self.net, audio)


def resolve_whisper_path(source: str) -> tuple[str, Path]:
    """(model name, directory) of a model id or a path to a CTranslate2 or Hugging Face directory."""
    if source in (DEFAULT_WHISPER_MODEL, "tiny.en"):
        return DEFAULT_WHISPER_MODEL, shipped_model_dir()
    path = Path(source).expanduser()
    if not path.is_dir():
        raise WhisperModelNotFound(f"no Whisper model named {source!r} (not {DEFAULT_WHISPER_MODEL!r} or a directory)")
    return path.name, path


def load_whisper(source: str = DEFAULT_WHISPER_MODEL, *, device: Device | None = None,
                 progress: Progress | None = None) -> WhisperModel:
    """Load a Whisper model onto the GPU: the shipped tiny.en by default, or a CTranslate2 / HF directory."""
    started = time.perf_counter()
    name, path = resolve_whisper_path(source)
    ckpt = load_checkpoint(path)
    net = WhisperNet(Executor(device or default_device()), ckpt, progress)
    log.info("loaded Whisper model %s (%.0f MB of weights, %s, %d mel bins) in %.1f s", name, net.weight_bytes / 1e6,
             "multilingual" if ckpt.tokenizer.multilingual else "English-only", ckpt.config.n_mels,
             time.perf_counter() - started)
    return WhisperModel(name, net)
