"""Images into a chat model: a vision tower and projector that turn pictures into soft tokens.

A multimodal chat model is a text decoder (models/text/decoder.py) and, beside it, an image encoder read from
llama.cpp's projector file (`mmproj-*.gguf`, written by `convert_hf_to_gguf.py --mmproj`) or Ollama's projector
blob. The encoder runs on the text model's executor. The text side splices its output into the prompt: an image
becomes `soft_tokens(pixels)` rows (always `tokens_per_image` for Gemma 3; for Gemma 4 it varies with the image's
aspect-preserving size, `tokens_per_image` the most) whose input embeddings are the encoder's rows instead of token
embeddings, at the positions of the template's image markers.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np
from PIL import Image


class ImageEncoder(Protocol):
    """A model's vision tower and projector: images in, rows of the text model's input embeddings out."""

    tokens_per_image: int  # soft tokens (prompt rows) an image becomes, at most
    embedding_size: int  # the text model's hidden size D

    def preprocess(self, image: Image.Image) -> np.ndarray:
        """The pixel values the tower takes, as the reference processor makes them: float32 [3, H, W]."""
        ...

    def soft_tokens(self, pixels: np.ndarray) -> int:
        """How many soft tokens (prompt rows) one image's preprocessed pixels [3, H, W] become."""
        ...

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        """Soft tokens of N preprocessed images of one size: [N, 3, H, W] float32 -> [N, soft_tokens, D] float32,
        already in the text model's embedding space (added to the prompt as they are, not scaled again)."""
        ...
