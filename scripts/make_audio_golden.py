"""Write tests/golden/audio_log_mel.npz: openai-whisper's log-mel spectrograms of a few synthetic signals.

Run with the reference environment (CPU torch + openai-whisper), never the project's venv:

    /work/refvenv/bin/pip install openai-whisper
    /work/refvenv/bin/python scripts/make_audio_golden.py

The reference is ``whisper.audio.log_mel_spectrogram`` from openai-whisper (torch.stft in float32 with its shipped
``mel_filters.npz``), the implementation audio/features.py reproduces. Stored, compressed:
  - ``sig_chirp`` and ``sig_noise``: the 1.3 s inputs (float32), so the test feeds the exact same samples;
  - ``ref_<signal>_<n_mels>``: full spectrograms of chirp, noise and silence (1.3 s) for 80 and 128 mels;
  - ``ref_long_<n_mels>`` / ``ref_padded_80``: every FRAME_STEP-th frame (``frames_long`` / ``frames_padded``
    hold the indices) of a 31.5 s signal tiled from the two stored inputs (np.resize, exact), and of the chirp
    with ``padding=480000`` as whisper's transcribe calls it; whole spectrograms of those would not fit in 1 MB;
  - ``mel_filters_<n_mels>``: whisper's shipped filter bank, to check the numpy one on its own.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
import whisper.audio as wa

SR = 16000
SHORT = int(1.3 * SR)  # 20800 samples
LONG = int(31.5 * SR)  # past one 30 s window
FRAME_STEP = 50  # keep every 50th frame of the long and padded spectrograms
OUT = Path(__file__).resolve().parent.parent / "tests" / "golden" / "audio_log_mel.npz"


def make_chirp() -> np.ndarray:
    """A 100 Hz -> 7 kHz linear chirp at 0.5 that decays over its last 0.3 s, so the max - 8 clamp is exercised."""
    t = np.arange(SHORT) / SR
    f0, f1, dur = 100.0, 7000.0, SHORT / SR
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * dur))
    envelope = np.where(t < 1.0, 1.0, np.exp(-(t - 1.0) * 40.0))
    return (0.5 * np.sin(phase) * envelope).astype(np.float32)


def make_noise() -> np.ndarray:
    """White Gaussian noise at 0.1 RMS from a fixed seed."""
    return (0.1 * np.random.default_rng(1234).standard_normal(SHORT)).astype(np.float32)


def make_long(chirp: np.ndarray, noise: np.ndarray) -> np.ndarray:
    """31.5 s of the chirp and noise in turn (the test rebuilds it the same way)."""
    return np.resize(np.concatenate([chirp, noise]), LONG)


def reference(audio: np.ndarray, n_mels: int, padding: int = 0) -> np.ndarray:
    """openai-whisper's log-mel spectrogram [n_mels, frames], float32."""
    with torch.no_grad():
        return wa.log_mel_spectrogram(torch.from_numpy(audio), n_mels=n_mels, padding=padding).numpy()


def main() -> None:
    torch.set_num_threads(1)  # one thread: deterministic float32 reductions in torch's FFT
    chirp, noise = make_chirp(), make_noise()
    silence = np.zeros(SHORT, dtype=np.float32)
    long = make_long(chirp, noise)
    out: dict[str, np.ndarray] = {"sig_chirp": chirp, "sig_noise": noise}
    for n_mels in (80, 128):
        for name, sig in (("chirp", chirp), ("noise", noise), ("silence", silence)):
            out[f"ref_{name}_{n_mels}"] = reference(sig, n_mels)
        full = reference(long, n_mels)
        out["frames_long"] = np.arange(0, full.shape[1], FRAME_STEP)
        out[f"ref_long_{n_mels}"] = full[:, out["frames_long"]]
        filters_path = os.path.join(os.path.dirname(wa.__file__), "assets", "mel_filters.npz")
        with np.load(filters_path) as f:
            out[f"mel_filters_{n_mels}"] = f[f"mel_{n_mels}"]
    padded = reference(chirp, 80, padding=wa.N_SAMPLES)
    out["frames_padded"] = np.arange(0, padded.shape[1], FRAME_STEP)
    out["ref_padded_80"] = padded[:, out["frames_padded"]]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **out)
    print(f"wrote {OUT} ({OUT.stat().st_size / 1024:.0f} KiB, torch {torch.__version__})")


if __name__ == "__main__":
    main()
