"""The harmonic source's noise in numpy, bit for bit the hash of gpu/kernels/common/pcg_noise.wgsl (and within float
rounding its Box-Muller), so a reference implementation can be fed the same noise (scripts/make_kokoro_golden.py)."""

from __future__ import annotations

import numpy as np


def pcg_hash(v: np.ndarray) -> np.ndarray:
    """PCG-style 32-bit hash of each value (uint32 arithmetic, wrapping)."""
    v = np.asarray(v, np.uint32)
    with np.errstate(over="ignore"):
        state = v * np.uint32(747796405) + np.uint32(2891336453)
        word = ((state >> ((state >> np.uint32(28)) + np.uint32(4))) ^ state) * np.uint32(277803737)
    return (word >> np.uint32(22)) ^ word


def uniform01(seed: int, index: np.ndarray) -> np.ndarray:
    """Uniforms in (0, 1) with 24 bits, one per counter value."""
    with np.errstate(over="ignore"):
        h = pcg_hash(np.asarray(index, np.uint32) + pcg_hash(np.uint32(seed & 0xFFFFFFFF)))
    return ((h >> np.uint32(8)).astype(np.float32) + np.float32(0.5)) / np.float32(16777216.0)


def source_noise(seed: int, samples: int, harmonics: int = 9) -> np.ndarray:
    """Standard normal noise [samples, harmonics]: value (j, m) from counter j * harmonics + m."""
    i = np.arange(samples * harmonics, dtype=np.uint32)
    u1 = uniform01(seed, 2 * i)
    u2 = uniform01(seed, 2 * i + 1)
    g = np.sqrt(np.float32(-2.0) * np.log(u1)) * np.cos(np.float32(6.2831855) * u2)
    return g.astype(np.float32).reshape(samples, harmonics)
