"""A worker per loaded speech model (Kokoro): a thread that owns the model (its wgpu device, weights, programs).

Jobs are generators that synthesise a request chunk by chunk (ThreadWorker.stream), so the first chunk's audio
goes out while the rest is being made, and one request's chunks run back to back before the next request's.
Extra voicepacks named in the settings (speech_voices) are read once per worker and offered beside the model's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from server.protocols import SpeechModel
from server.thread_worker import ThreadWorker
from server.thread_worker import load_on_own_device as _on_own_device

log = logging.getLogger("hearth.worker")
VOICEPACK_SUFFIXES = (".pt", ".pth", ".npz", ".bin")


def load_on_own_device(source: str, **kwargs: object) -> SpeechModel:
    """Load a Kokoro model on a wgpu device of its own, so workers never share a device or a queue."""
    from models.kokoro import load_kokoro

    return _on_own_device(load_kokoro, source, **kwargs)


def _voicepack_files(paths: Iterable[str]) -> list[Path]:
    """The voicepack files named by the settings: files as given, folders expanded (sorted, for stable ids)."""
    files: list[Path] = []
    for name in paths:
        path = Path(name).expanduser()
        if path.is_dir():
            files.extend(sorted(p for p in path.iterdir() if p.suffix in VOICEPACK_SUFFIXES and p.is_file()))
        elif path.is_file():
            files.append(path)
        else:
            raise FileNotFoundError(f"speech_voices: {name!r} is neither a voicepack file nor a folder")
    return files


def read_voicepacks(paths: Iterable[str]) -> dict[str, np.ndarray]:
    """Voice id -> float32 [510, 256] from every file or folder in paths (later files win on a repeated id)."""
    try:
        from models.kokoro import load_voices
    except ImportError:  # the converter has it too
        from models.kokoro_convert import load_voices
    voices: dict[str, np.ndarray] = {}
    for path in _voicepack_files(paths):
        for voice_id, pack in load_voices(path).items():
            voices[voice_id] = np.asarray(pack, np.float32).reshape(-1, 256)
    return voices


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
