"""A stand-in image encoder (models/vision's ImageEncoder Protocol) for tests of the text side: deterministic rows
from the pixels, no GPU work. Its rows are a fixed random projection of an 8x8 thumbnail, scaled like a Gemma
model's embedded tokens, so that they move the decoder's logits as much as real tokens do."""

from __future__ import annotations

import numpy as np
from PIL import Image

SIDE = 8  # the thumbnail's side in pixels


class FakeImageEncoder:
    """tokens_per_image rows of width embedding_size per image."""

    def __init__(self, embedding_size: int, tokens_per_image: int = 5, scale: float = 1.0, seed: int = 0) -> None:
        self.embedding_size = embedding_size
        self.tokens_per_image = tokens_per_image
        rng = np.random.default_rng(seed)
        self._projection = (rng.standard_normal((tokens_per_image, 3 * SIDE * SIDE, embedding_size))
                            / np.sqrt(3 * SIDE * SIDE)).astype(np.float32)
        self._scale = np.float32(scale)
        self.encoded = 0  # images encoded so far
        self.calls = 0  # encode calls so far

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """float32 [3, 8, 8] in [-1, 1], as SigLIP's processors normalise (mean 0.5, std 0.5)."""
        small = image.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BILINEAR)
        return (np.asarray(small, np.float32).transpose(2, 0, 1) / 127.5 - 1.0).astype(np.float32)

    def soft_tokens(self, pixels: np.ndarray) -> int:
        """Every image becomes tokens_per_image rows."""
        return self.tokens_per_image

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        """[N, 3, 8, 8] -> [N, tokens_per_image, D]."""
        if pixels.ndim != 4 or pixels.shape[1:] != (3, SIDE, SIDE):
            raise ValueError(f"pixels must be [N, 3, {SIDE}, {SIDE}], not {pixels.shape}")
        self.encoded += len(pixels)
        self.calls += 1
        flat = pixels.reshape(len(pixels), -1).astype(np.float32)
        rows = np.einsum("nk,tkd->ntd", flat, self._projection) + 0.5
        return (rows * self._scale).astype(np.float32)
