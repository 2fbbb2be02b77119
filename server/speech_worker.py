"""A worker per loaded speech model (Kokoro): a thread that owns the model (its wgpu device, weights, programs).

Jobs are generators that synthesise a request chunk by chunk (ThreadWorker.stream), so the first chunk's audio
goes out while the rest is being made, and one request's chunks run back to back before the next request's.
Extra voicepacks named in the settings (speech_voices) are read once per worker and offered beside the model's.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import numpy as np

from models.kokoro.voices import read_voicepacks
from server.protocols import SpeechModel
from server.thread_worker import ThreadWorker
from server.thread_worker import load_on_own_device as _on_own_device

log = logging.getLogger("hearth.worker")


def load_on_own_device(source: str, **kwargs: object) -> SpeechModel:
    """Load a Kokoro model on a wgpu device of its own, so workers never share a device or a queue."""
    from models.kokoro.model import load_kokoro

    return _on_own_device(load_kokoro, source, **kwargs)


class SpeechWorker(ThreadWorker[SpeechModel]):
    """Loads one speech model in its own thread, then runs queued synthesis jobs on it in order."""

    kind = "speech"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._voices_lock = threading.Lock()
        self._voices: dict[tuple[str, ...], dict[str, np.ndarray]] = {}

    def voices(self, extra: tuple[str, ...] = ()) -> dict[str, np.ndarray]:
        """The model's voicepacks and those of the `extra` files or folders (read once, then kept)."""
        with self._voices_lock:
            if extra not in self._voices:
                added = read_voicepacks(extra) if extra else {}
                if added:
                    log.info("%s: %d extra voices from %s", self.name, len(added), ", ".join(extra))
                self._voices[extra] = {**self.model.voices, **added}
            return self._voices[extra]

    # -- worker thread -------------------------------------------------------------------
    def warm_up(self, model: SpeechModel) -> None:
        """Synthesise a few phonemes once so the first request does not pay for compiling pipelines."""
        voice = next(iter(model.voices.values()))
        ids = [model.vocab[s] for s in "həlˈO" if s in model.vocab]
        model.synthesize(ids, model.style(voice, len(ids)), 1.0)

    def describe(self, model: SpeechModel) -> str:
        return f"{len(model.voices)} voices, {model.sample_rate} Hz"
