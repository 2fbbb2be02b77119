"""A chat worker's encoded images and audio clips, kept by digest so that a resent input is not encoded again.

A multi-turn chat sends its images (and clips) again with every turn: each turn after the first finds their rows
here and skips the encode (and, through the prefix cache, whose page keys include image digests, the prefill of those
rows). Rows are kept by the input's digest (a hash of its pixels or features) in a cache bounded in bytes, least
recently used out first.

Images are not encoded ahead for requests still waiting: the encoders run a call's images one after another, and on
the H200 Gemma 3's tower takes the same time per image alone or four to a call, so encoding another request's image
first would only delay this one.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

import numpy as np

from server.services.audio_inputs import PromptAudio
from server.services.images import PromptImage

MediaInput = PromptImage | PromptAudio

# Rows kept for later requests (a Gemma 3 image's rows take a few MB).
CACHE_BYTES = 256 << 20


class MediaRows:
    """Rows of the text model's input embeddings for prompt images and clips, by digest."""

    def __init__(self, image_encoder: Any, audio_encoder: Any, *, cache_bytes: int = CACHE_BYTES) -> None:
        self._image_encoder = image_encoder
        self._audio_encoder = audio_encoder
        self._cache_bytes = cache_bytes
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._held = 0  # bytes in the cache

    def rows(self, inputs: Sequence[MediaInput]) -> list[np.ndarray]:
        """Each input's rows, in order: from the cache, or encoded now (images of one size in one call)."""
        found: dict[str, np.ndarray] = {}
        missing: dict[str, MediaInput] = {}
        for item in inputs:
            cached = self._cache.get(item.digest)
            if cached is not None:
                self._cache.move_to_end(item.digest)
                found[item.digest] = cached
            else:
                missing.setdefault(item.digest, item)
        clips = [i for i in missing.values() if isinstance(i, PromptAudio)]
        if clips:
            if self._audio_encoder is None:
                raise ValueError("this model has no audio encoder")
            for clip in clips:  # clips differ in length: one call each
                found[clip.digest] = self._keep(clip.digest, self._audio_encoder.encode(clip.features))
        pictures = [i for i in missing.values() if isinstance(i, PromptImage)]
        if pictures:
            if self._image_encoder is None:
                raise ValueError("this model has no image encoder")
            by_shape: dict[tuple[int, ...], list[PromptImage]] = {}
            for picture in pictures:
                by_shape.setdefault(picture.pixels.shape, []).append(picture)
            for group in by_shape.values():
                out = self._image_encoder.encode(np.stack([i.pixels for i in group]))
                found.update({i.digest: self._keep(i.digest, r) for i, r in zip(group, out, strict=True)})
        return [found[i.digest] for i in inputs]

    def _keep(self, digest: str, rows: np.ndarray) -> np.ndarray:
        """Cache one input's rows (float32), evicting the least recently used past the byte budget."""
        rows = np.ascontiguousarray(rows, np.float32)
        if digest in self._cache:
            self._held -= self._cache.pop(digest).nbytes
        if rows.nbytes <= self._cache_bytes:
            self._cache[digest] = rows
            self._held += rows.nbytes
            while self._held > self._cache_bytes:
                _, dropped = self._cache.popitem(last=False)
                self._held -= dropped.nbytes
        return rows

