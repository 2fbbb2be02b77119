"""Audio into a chat model: an audio tower and projector that turn a clip into soft tokens.

Beside models/vision's ImageEncoder: a multimodal chat model whose projector file (llama.cpp's `mmproj-*.gguf`,
`clip.has_audio_encoder`) holds an audio tower takes clips as prompt rows. The text side splices them like images:
a clip becomes `soft_tokens(samples)` rows whose input embeddings are the encoder's rows instead of token
embeddings, at the template's audio markers.
"""

from __future__ import annotations

from typing import Protocol

import numpy as np


class AudioEncoder(Protocol):
    """A model's audio tower and projector: 16 kHz mono samples in, rows of the text model's input embeddings out."""

    sample_rate: int  # Hz the samples must have
    max_samples: int  # the longest clip the model takes; longer ones are cut by the reference processor
    embedding_size: int  # the text model's hidden size D

    def features(self, samples: np.ndarray) -> np.ndarray:
        """The features the tower takes, as the reference feature extractor makes them (float32 [frames, mels])."""
        ...

    def soft_tokens(self, samples: int) -> int:
        """How many soft tokens (prompt rows) a clip of ``samples`` samples becomes."""
        ...

    def encode(self, features: np.ndarray) -> np.ndarray:
        """Soft tokens of one clip's features: [frames, mels] -> [soft_tokens, D] float32, already in the text
        model's embedding space (added to the prompt as they are)."""
        ...
