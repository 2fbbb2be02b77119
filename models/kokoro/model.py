"""Kokoro-82M (StyleTTS 2 + ISTFTNet) on the executor, following upstream hexgrad/kokoro (model.py, modules.py,
istftnet.py) op for op, in f32.

    model = load_kokoro("kokoro")                      # the shipped int8 ONNX, converted once and cached
    voice = model.voices["jf_alpha"]
    out = model.synthesize(ids, model.style(voice, len(ids)), speed=1.0, seed=0)
    out.audio  # float32 at 24 kHz;  out.durations: frames per input token (with the two pads)

A call runs two programs, built for its lengths: the front (ALBERT, the prosody text encoder, the duration
LSTM and projection, and the text encoder) up to the durations, which come back to the host and become the
alignment (each frame's token); then the back (length regulation, the shared LSTM and F0/N blocks, the
decoder's AdaIN residual blocks, and the generator: harmonic source, STFT, upsampling, Snake resblocks,
iSTFT). Activations are [T, C] rows in the front and channel-major [C, T] in the conv stacks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpu.device import Device
from models.kokoro import net
from models.kokoro.convert import converted_model_path
from models.kokoro.weights import KokoroWeights

SAMPLE_RATE = 24000


@dataclass
class SpeechOutput:
    """One synthesised utterance: audio (float32, 24 kHz) and frames per input token (with the two pads)."""

    audio: np.ndarray
    durations: np.ndarray


class KokoroModel(KokoroWeights):
    """Kokoro-82M on one device; see the module docstring."""

    sample_rate = SAMPLE_RATE

    def style(self, voice: np.ndarray, n_phonemes: int) -> np.ndarray:
        """The voicepack row for an input of n_phonemes phonemes (upstream: pack[len(phonemes) - 1])."""
        voice = np.asarray(voice, np.float32).reshape(voice.shape[0], -1)
        return voice[min(max(n_phonemes, 1), voice.shape[0]) - 1].copy()

    def synthesize(self, phoneme_ids: list[int], style: np.ndarray, speed: float = 1.0, seed: int | None = 0,
                   *, noise: bool = True, should_stop: Callable[[], bool] | None = None) -> SpeechOutput:
        """Speech for phoneme ids (wrapped [0, *ids, 0] here) in the voice of `style` ([256]).

        seed: the harmonic source's noise (None: a fresh one); noise=False turns that noise off (parity).
        should_stop: asked before each step (a stage of the network, see net.py); when it says so the synthesis
        ends with concurrent.futures.CancelledError. Each step holds the adapter's turn (gpu/turns.py)."""
        if not phoneme_ids or len(phoneme_ids) > self.max_phonemes:
            raise ValueError(f"need 1..{self.max_phonemes} phoneme ids, got {len(phoneme_ids)}")
        if not speed > 0:
            raise ValueError(f"speed must be positive, got {speed}")
        if seed is None:
            seed = int(np.random.default_rng().integers(0, 2**32))
        ids = np.array([0, *phoneme_ids, 0], np.uint32)
        style = np.ascontiguousarray(np.asarray(style).reshape(-1), dtype=np.float32)
        durations = net.front(self, ids, style, float(speed), should_stop)
        if len(phoneme_ids) > 1 and not self._back_fits(int(durations.sum())):
            # Speech too long for the device's buffers in one piece (slow speech, a small binding limit): two
            # halves, cut at the space nearest the middle, each spoken on its own.
            cut = self._split_point(phoneme_ids)
            first = self.synthesize(phoneme_ids[:cut], style, speed, seed, noise=noise, should_stop=should_stop)
            second = self.synthesize(phoneme_ids[cut:], style, speed, seed + 1, noise=noise, should_stop=should_stop)
            # Frames per input token: the pads between the halves are spoken; count them to their neighbours.
            left, right = first.durations[:-1].copy(), second.durations[1:].copy()
            left[-1] += first.durations[-1]
            right[0] += second.durations[0]
            return SpeechOutput(np.concatenate([first.audio, second.audio]), np.concatenate([left, right]))
        audio = net.back(self, ids, durations, style, seed=seed, noise=noise, should_stop=should_stop)
        return SpeechOutput(audio=audio, durations=durations)

    def _back_fits(self, frames: int) -> bool:
        return net.largest_back_bytes(self.config, frames) <= self.device.limits.max_binding_bytes

    def _split_point(self, phoneme_ids: list[int]) -> int:
        """Where to cut phoneme_ids in two: after the space nearest the middle, else at the middle."""
        middle = len(phoneme_ids) // 2
        space = self.vocab.get(" ")
        spaces = [i + 1 for i, token in enumerate(phoneme_ids[:-1]) if token == space]
        return min(spaces, key=lambda i: abs(i - middle)) if spaces else middle


def load_kokoro(source: str = "kokoro", *, device: Device | None = None,
                progress: Callable[[int, int], None] | None = None) -> KokoroModel:
    """Kokoro from "kokoro" (the shipped int8 ONNX, converted and cached), our GGUF, a .pth or an .onnx."""
    return KokoroModel(converted_model_path(source), device=device, progress=progress)
