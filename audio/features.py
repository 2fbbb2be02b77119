"""Log-mel features in numpy: Whisper's, computed as openai-whisper computes it, and Gemma 4's audio front end.

openai-whisper (whisper/audio.py) takes 16 kHz mono float audio, runs ``torch.stft`` with n_fft 400, hop 160, a
periodic Hann window and ``center=True`` (reflect padding of n_fft // 2 on both ends), drops the last frame, squares
the magnitudes, applies librosa's Slaney mel filter bank (``librosa.filters.mel(sr=16000, n_fft=400, n_mels)``,
shipped as ``mel_filters.npz``), takes log10 of max(x, 1e-10), clamps everything to at least max - 8 and maps the
result through (x + 4) / 4. The same steps here, with the filter bank built in numpy so neither torch nor librosa is
needed at run time; tests/audio/test_features.py compares against openai-whisper itself.
"""

from __future__ import annotations

import functools

import numpy as np

SAMPLE_RATE = 16000  # Hz; every Whisper model takes 16 kHz input
N_FFT = 400  # samples per STFT window (25 ms)
HOP_LENGTH = 160  # samples between frames (10 ms), so 100 frames a second
CHUNK_LENGTH = 30  # seconds in one Whisper window
N_SAMPLES = CHUNK_LENGTH * SAMPLE_RATE  # 480000 samples in a window
N_FRAMES = N_SAMPLES // HOP_LENGTH  # 3000 mel frames in a window

_BLOCK_FRAMES = 3000  # STFT frames computed at once (30 s): bounds the float64 temporaries to ~30 MB


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale (librosa's default, htk=False): linear below 1 kHz, logarithmic above."""
    f_sp = 200.0 / 3  # Hz per mel in the linear part
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    hz = np.asarray(hz, dtype=np.float64)
    linear = hz / f_sp
    # np.maximum keeps log() away from 0 Hz; those entries take the linear branch anyway.
    log_part = min_log_mel + np.log(np.maximum(hz, min_log_hz) / min_log_hz) / logstep
    return np.where(hz >= min_log_hz, log_part, linear)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    """Inverse of _hz_to_mel."""
    f_sp = 200.0 / 3
    min_log_hz = 1000.0
    min_log_mel = min_log_hz / f_sp
    logstep = np.log(6.4) / 27.0
    mel = np.asarray(mel, dtype=np.float64)
    return np.where(mel >= min_log_mel, min_log_hz * np.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def _triangles(fft_freqs: np.ndarray, hz_edges: np.ndarray) -> np.ndarray:
    """Triangular bands [len(hz_edges) - 2, len(fft_freqs)] in float64: band i rises from edge i to edge i + 1 and
    falls to edge i + 2, peaking at 1 (librosa's and transformers' construction, before any normalisation)."""
    widths = np.diff(hz_edges)  # [n_mels + 1]
    ramps = hz_edges[:, None] - fft_freqs[None, :]  # [n_mels + 2, n_freqs]
    lower = -ramps[:-2] / widths[:-1, None]  # rising slope of band i
    upper = ramps[2:] / widths[1:, None]  # falling slope of band i
    return np.maximum(0.0, np.minimum(lower, upper))


@functools.lru_cache(maxsize=4)
def mel_filters(n_mels: int = 80, *, sample_rate: int = SAMPLE_RATE, n_fft: int = N_FFT) -> np.ndarray:
    """The Slaney-normalised triangular mel filter bank [n_mels, n_fft // 2 + 1], float32.

    Follows ``librosa.filters.mel(sr, n_fft, n_mels, fmin=0, fmax=sr / 2, htk=False, norm="slaney")`` step by step
    (computed in float64 and rounded to float32 once, as librosa does), which is where openai-whisper's
    ``mel_filters.npz`` comes from. The result is cached and read-only.
    """
    fft_freqs = np.fft.rfftfreq(n_fft, d=1.0 / sample_rate)  # [n_fft // 2 + 1] Hz
    mel_edges = np.linspace(_hz_to_mel(0.0), _hz_to_mel(sample_rate / 2), n_mels + 2)
    hz_edges = _mel_to_hz(mel_edges)  # [n_mels + 2]: left edge, centre, right edge of each band
    weights = _triangles(fft_freqs, hz_edges)
    # Slaney normalisation: each triangle has unit area in Hz, so wide high bands do not dominate.
    weights *= (2.0 / (hz_edges[2:] - hz_edges[:-2]))[:, None]
    out = weights.astype(np.float32)
    out.setflags(write=False)
    return out


@functools.lru_cache(maxsize=2)
def _hann_window(n: int) -> np.ndarray:
    """The periodic Hann window of torch.hann_window(n) (periodic=True): sin^2(pi k / n), k < n."""
    k = np.arange(n, dtype=np.float64)
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * k / n)


def pad_or_trim(array: np.ndarray, length: int = N_SAMPLES, *, axis: int = -1) -> np.ndarray:
    """Zero-pad or cut ``array`` along ``axis`` to ``length`` entries, as whisper.audio.pad_or_trim does."""
    size = array.shape[axis]
    if size > length:
        return np.take(array, np.arange(length), axis=axis)
    if size < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - size)
        return np.pad(array, widths)
    return array


def log_mel_spectrogram(audio: np.ndarray, n_mels: int = 80, padding: int = 0) -> np.ndarray:
    """Whisper's log-mel spectrogram of 16 kHz mono audio: float32 [n_mels, (len(audio) + padding) // 160].

    ``padding`` zero samples are appended first. openai-whisper's transcribe passes 480000 (so the last window is
    full); faster-whisper's transcribe calls its FeatureExtractor with its default of 160 (one more frame), so
    transcripts meant to match faster-whisper's should pass padding=160. With equal padding this agrees with
    faster-whisper 1.2.1's FeatureExtractor within 1.1e-5 (measured on the golden signals; same filter bank).
    Values lie in [max - 2, max] after Whisper's (log10 + 4) / 4 scaling, with max the loudest bin of the clip.
    """
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"log_mel_spectrogram expects mono audio [samples], got shape {audio.shape}")
    if padding < 0:
        raise ValueError(f"padding must be >= 0, got {padding}")
    if padding:
        audio = np.pad(audio, (0, padding))
    half = N_FFT // 2
    if audio.shape[0] <= half:
        # torch.stft's reflect padding needs more than n_fft // 2 samples, so whisper fails here too.
        raise ValueError(f"audio too short for a log-mel spectrogram: {audio.shape[0]} samples, need > {half}")

    # The STFT in float64 (rounding then sits well below torch's float32 FFT, whose error is what the test bounds),
    # a block of frames at a time: whole, a 30-minute clip's float64 frames, spectrum and power took 1.3 GB at once.
    n_frames = audio.shape[0] // HOP_LENGTH  # torch gives 1 + len // hop frames; whisper drops the last one
    padded = np.pad(audio, (half, half), mode="reflect")
    del audio  # the zero-padded copy, when there is one, is not needed past here
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]  # [frames, n_fft]
    filters = mel_filters(n_mels).astype(np.float64)
    log_spec = np.empty((n_mels, n_frames), dtype=np.float64)
    for start in range(0, n_frames, _BLOCK_FRAMES):
        block = frames[start:start + _BLOCK_FRAMES].astype(np.float64)
        spectrum = np.fft.rfft(block * _hann_window(N_FFT), axis=-1)  # [block, n_fft // 2 + 1]
        power = spectrum.real**2 + spectrum.imag**2
        np.log10(np.maximum(filters @ power.T, 1e-10), out=log_spec[:, start:start + len(block)])  # [n_mels, block]
    del frames, padded
    np.maximum(log_spec, log_spec.max() - 8.0, out=log_spec)
    log_spec += 4.0
    log_spec /= 4.0
    return log_spec.astype(np.float32)


# Gemma 4's audio front end (transformers' Gemma4AudioFeatureExtractor with its defaults, which the released
# checkpoints keep): 20 ms frames every 10 ms of 16 kHz audio, a periodic Hann window, a 512-point FFT's magnitude,
# 128 HTK mel bands (no normalisation, 0 - 8 kHz) and ln(mel + 0.001).
GEMMA4_FRAME_LENGTH = 320  # samples per frame (20 ms)
GEMMA4_HOP_LENGTH = 160  # samples between frames (10 ms)
GEMMA4_FFT_LENGTH = 512  # the next power of two above the frame
GEMMA4_N_MELS = 128
GEMMA4_MEL_FLOOR = 1e-3  # added before the log
GEMMA4_MAX_SAMPLES = 480_000  # the extractor truncates a clip to 30 s


@functools.lru_cache(maxsize=1)
def htk_mel_filters(n_mels: int = GEMMA4_N_MELS, *, sample_rate: int = SAMPLE_RATE,
                    n_fft: int = GEMMA4_FFT_LENGTH, max_hz: float = 8000.0) -> np.ndarray:
    """HTK-scale triangular mel filter bank [n_mels, n_fft // 2 + 1] without normalisation, float64.

    transformers' ``mel_filter_bank(norm=None, mel_scale="htk", min_frequency=0)``: band edges evenly spaced on
    2595 log10(1 + f / 700) between 0 Hz and ``max_hz``. Cached and read-only.
    """
    fft_freqs = np.linspace(0.0, sample_rate // 2, n_fft // 2 + 1)
    mel_edges = np.linspace(0.0, 2595.0 * np.log10(1.0 + max_hz / 700.0), n_mels + 2)
    hz_edges = 700.0 * (10.0 ** (mel_edges / 2595.0) - 1.0)
    out = _triangles(fft_freqs, hz_edges)
    out.setflags(write=False)
    return out


def gemma4_num_frames(samples: int) -> int:
    """Mel frames Gemma 4's extractor keeps for a clip of ``samples`` (after its 30 s cut): those whose window lies
    wholly inside the clip once half a frame of zeros is put before it (the rest it masks out and zeroes)."""
    samples = min(samples, GEMMA4_MAX_SAMPLES)
    half = GEMMA4_FRAME_LENGTH // 2
    return max(0, (samples - half - 1) // GEMMA4_HOP_LENGTH + 1)


def gemma4_num_audio_tokens(samples: int) -> int:
    """Soft tokens Gemma 4's audio encoder makes of a clip: its two stride-2 convolutions each halve the frames,
    rounding up (transformers' processor counts them the same way from the feature mask)."""
    frames = gemma4_num_frames(samples)
    for _ in range(2):
        frames = (frames + 1) // 2
    return frames


def gemma4_log_mel(audio: np.ndarray) -> np.ndarray:
    """Gemma 4's log-mel features of 16 kHz mono audio: float32 [frames, 128], frames = gemma4_num_frames(len).

    These are the rows transformers' Gemma4AudioFeatureExtractor marks valid in ``input_features_mask``; the rows
    past them it zeroes and the encoder masks out, so they are not made here. Computed in float64.
    """
    audio = np.asarray(audio, dtype=np.float32)
    if audio.ndim != 1:
        raise ValueError(f"gemma4_log_mel expects mono audio [samples], got shape {audio.shape}")
    audio = audio[:GEMMA4_MAX_SAMPLES]
    n_frames = gemma4_num_frames(audio.shape[0])
    if n_frames == 0:
        raise ValueError(f"audio too short for Gemma 4's features: {audio.shape[0]} samples, need > "
                         f"{GEMMA4_FRAME_LENGTH // 2}")
    padded = np.pad(audio, (GEMMA4_FRAME_LENGTH // 2, 0)).astype(np.float64)
    frames = np.lib.stride_tricks.sliding_window_view(padded, GEMMA4_FRAME_LENGTH)[::GEMMA4_HOP_LENGTH][:n_frames]
    filters = htk_mel_filters()  # [n_mels, n_freqs]
    out = np.empty((n_frames, GEMMA4_N_MELS), dtype=np.float32)
    for start in range(0, n_frames, _BLOCK_FRAMES):
        block = frames[start:start + _BLOCK_FRAMES] * _hann_window(GEMMA4_FRAME_LENGTH)
        magnitude = np.abs(np.fft.rfft(block, n=GEMMA4_FFT_LENGTH, axis=-1))  # [block, n_fft // 2 + 1]
        out[start:start + len(block)] = np.log(magnitude @ filters.T + GEMMA4_MEL_FLOOR)
    return out
