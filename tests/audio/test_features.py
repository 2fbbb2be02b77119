"""audio/features.py against openai-whisper's log-mel spectrogram (tests/golden/audio_log_mel.npz).

The golden file comes from scripts/make_audio_golden.py: ``whisper.audio.log_mel_spectrogram`` (torch 2.13 CPU,
float32 torch.stft, whisper's shipped mel_filters.npz) on the stored inputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from audio.features import N_FRAMES, N_SAMPLES, log_mel_spectrogram, mel_filters, pad_or_trim

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "audio_log_mel.npz"
LONG = int(31.5 * 16000)  # as in scripts/make_audio_golden.py

# Tolerance on the scaled log-mel ((log10 + 4) / 4). torch computes the STFT in float32, this module in float64.
# A float32 FFT's absolute error is ~1e-7 of the frame's largest coefficient, so a mel bin 80 dB (the max - 8
# clamp) below the loudest has a relative power error up to ~1e-3, i.e. ~1e-4 after log10 / 4; 2e-4 leaves
# headroom. Measured: 4.4e-5 on the chirp (in its decaying tail, near the clamp), 3.5e-5 on the long signal,
# 6.6e-6 padded, 2e-6 on noise, 0 on silence.
TOL = 2e-4
# The filter banks differ only by float32 rounding of librosa's float64 arithmetic (measured 3.7e-9, entries
# up to 0.042): a few ulps.
FILTER_TOL = 1e-8


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN) as z:
        return {k: z[k] for k in z.files}


@pytest.mark.parametrize("n_mels", [80, 128])
def test_mel_filters_match_whisper_assets(golden: dict[str, np.ndarray], n_mels: int) -> None:
    ours = mel_filters(n_mels)
    assert ours.shape == (n_mels, 201) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, golden[f"mel_filters_{n_mels}"], rtol=0, atol=FILTER_TOL)


@pytest.mark.parametrize("n_mels", [80, 128])
@pytest.mark.parametrize("name", ["chirp", "noise", "silence"])
def test_short_signals(golden: dict[str, np.ndarray], name: str, n_mels: int) -> None:
    sig = golden[f"sig_{name}"] if name != "silence" else np.zeros(int(1.3 * 16000), np.float32)
    ours = log_mel_spectrogram(sig, n_mels=n_mels)
    ref = golden[f"ref_{name}_{n_mels}"]
    assert ours.shape == ref.shape == (n_mels, 130) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=0, atol=TOL)


@pytest.mark.parametrize("n_mels", [80, 128])
def test_long_signal_past_one_window(golden: dict[str, np.ndarray], n_mels: int) -> None:
    # Rebuilt exactly as the script does: the stored inputs tiled to 31.5 s.
    long = np.resize(np.concatenate([golden["sig_chirp"], golden["sig_noise"]]), LONG)
    ours = log_mel_spectrogram(long, n_mels=n_mels)
    assert ours.shape == (n_mels, LONG // 160)
    np.testing.assert_allclose(ours[:, golden["frames_long"]], golden[f"ref_long_{n_mels}"], rtol=0, atol=TOL)


def test_padding_as_transcribe_uses_it(golden: dict[str, np.ndarray]) -> None:
    ours = log_mel_spectrogram(golden["sig_chirp"], padding=N_SAMPLES)
    assert ours.shape == (80, 130 + N_FRAMES)
    np.testing.assert_allclose(ours[:, golden["frames_padded"]], golden["ref_padded_80"], rtol=0, atol=TOL)


def test_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="mono"):
        log_mel_spectrogram(np.zeros((2, 16000), np.float32))
    with pytest.raises(ValueError, match="too short"):
        log_mel_spectrogram(np.zeros(200, np.float32))


def test_pad_or_trim() -> None:
    x = np.arange(10, dtype=np.float32)
    np.testing.assert_array_equal(pad_or_trim(x, 4), x[:4])
    np.testing.assert_array_equal(pad_or_trim(x, 12), np.concatenate([x, [0, 0]]))
    assert pad_or_trim(x, 10) is x
    mel = np.ones((80, 3100), np.float32)
    assert pad_or_trim(mel, N_FRAMES).shape == (80, N_FRAMES)
    assert pad_or_trim(mel[:, :5], N_FRAMES, axis=1)[:, 5:].sum() == 0


def test_memory_stays_near_the_output_for_long_audio() -> None:
    """Ten minutes (38 MB of float32 samples): the STFT runs a block of frames at a time, so what is allocated stays
    within a few copies of the audio (the padded samples, the float64 log-mel, the output: 115 MB) plus the blocks'
    temporaries (~30 MB), under 160 MB; the whole-clip float64 frames, spectrum and power took 440 MB."""
    import tracemalloc

    audio = np.random.default_rng(0).normal(0, 0.1, 600 * 16000).astype(np.float32)
    tracemalloc.start()
    try:
        features = log_mel_spectrogram(audio, 80, padding=160)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert features.shape == (80, 60001)
    assert peak < 160 << 20, peak / 2**20


# Gemma 4's front end against transformers' Gemma4AudioFeatureExtractor (tests/golden/gemma4_audio/golden.npz, from
# scripts/make_gemma4_audio_fixtures.py): 2 s of real speech (whisper clip 00), 199 frames. transformers takes the
# FFT of float32 frames (numpy's float32 pocketfft), this module of float64 ones; on ln(mel + 0.001) values in about
# [-6.9, 3] that differs by float32 rounding of the larger spectra. Measured 6.2e-5; 2e-4 leaves headroom.
GEMMA4_GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "gemma4_audio" / "golden.npz"
GEMMA4_TOL = 2e-4


def test_gemma4_log_mel_matches_transformers() -> None:
    from audio.features import gemma4_log_mel, gemma4_num_frames

    with np.load(GEMMA4_GOLDEN) as z:
        samples, ref = z["samples"], z["features"]
    ours = gemma4_log_mel(samples)
    assert ours.shape == ref.shape == (gemma4_num_frames(samples.shape[0]), 128) and ours.dtype == np.float32
    np.testing.assert_allclose(ours, ref, rtol=0, atol=GEMMA4_TOL)
    # a clip's prefix is computed alike (frames see only their own window)
    np.testing.assert_allclose(gemma4_log_mel(samples[:8000]), ref[:gemma4_num_frames(8000)], rtol=0, atol=GEMMA4_TOL)


@pytest.mark.parametrize(("samples", "frames", "tokens"), [
    # transformers' extractor and processor (_compute_audio_num_tokens) on zeros of these lengths
    (161, 1, 1), (1234, 7, 2), (16000, 99, 25), (16161, 101, 26), (480_000, 2999, 750), (631_775, 2999, 750)])
def test_gemma4_frame_and_token_counts(samples: int, frames: int, tokens: int) -> None:
    from audio.features import gemma4_num_audio_tokens, gemma4_num_frames

    assert gemma4_num_frames(samples) == frames
    assert gemma4_num_audio_tokens(samples) == tokens


def test_gemma4_log_mel_rejects_bad_input() -> None:
    from audio.features import gemma4_log_mel

    with pytest.raises(ValueError, match="too short"):
        gemma4_log_mel(np.zeros(160, np.float32))
    with pytest.raises(ValueError, match="mono"):
        gemma4_log_mel(np.zeros((2, 16000), np.float32))
