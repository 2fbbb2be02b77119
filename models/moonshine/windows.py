"""How Moonshine's transcription splits audio and bounds its tokens (pure functions: numpy only, so benchmarks and
reference runs plan their windows the same way).

Moonshine reads a clip of any length in one encoder pass; audio past WINDOW_S is cut into windows, each cut at the
quietest 10 ms in the CUT_SEARCH_S before the limit. A window decodes at most TOKENS_PER_SECOND tokens per second
of its audio, the bound of transformers' and useful-moonshine's examples.
"""

from __future__ import annotations

import math

import numpy as np

SAMPLE_RATE = 16000
WINDOW_S = 30.0  # longest window the encoder reads
CUT_SEARCH_S = 5.0  # a window's cut falls in its last seconds, at the quietest frame
MIN_TAIL_S = 1.0  # shortest last window a cut leaves
FRAME = 160  # samples of the 10 ms frames the cut compares
MIN_SAMPLES = 895  # 127 + 64 * 12: the fewest samples whose stem gives an encoder row (3 rows of conv2)
TOKENS_PER_SECOND = 6.5


def windows(audio: np.ndarray, max_samples: int, search: int = int(CUT_SEARCH_S * SAMPLE_RATE),
            min_tail: int = int(MIN_TAIL_S * SAMPLE_RATE)) -> list[tuple[int, int]]:
    """[start, end) sample bounds covering audio, each at most max_samples: a cut falls at the start of the quietest
    FRAME in the `search` samples before the limit, leaving at least min_tail for the last window."""
    n, start, bounds = audio.size, 0, []
    while n - start > max_samples:
        hi = min(start + max_samples, n - min_tail)
        lo = max(start + 1, hi - search)
        if hi - lo < FRAME:
            cut = hi
        else:
            energy = np.square(audio[lo:hi - (hi - lo) % FRAME].astype(np.float64)).reshape(-1, FRAME).sum(1)
            cut = lo + int(np.argmin(energy)) * FRAME
        bounds.append((start, cut))
        start = cut
    bounds.append((start, n))
    return bounds


def token_limit(samples: int, n_text_ctx: int) -> int:
    """The most tokens a window of `samples` decodes (within the decoder's positions, <s> taking one)."""
    return min(math.ceil(samples / SAMPLE_RATE * TOKENS_PER_SECOND), n_text_ctx - 1)
