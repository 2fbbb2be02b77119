"""A chat worker's encoded images and audio clips: kept by digest, and images of one size encoded together.

An image's soft tokens come from a pass of its patches through the vision tower. Images of the same size from
several requests (a burst of image chats, or one request with several photos) go through the tower in one call:
the call reads the tower's weights once for all of them and runs its matmuls on more rows. The worker asks for the
images of the request it admits and passes those of the requests still waiting, so that their turn finds their rows
ready.

Rows are kept by the input's digest (a hash of its pixels or features) in a cache bounded in bytes, least recently
used out first: a multi-turn chat sends its images again with every turn, and each turn after the first skips the
encode (and, through the prefix cache, whose page keys include image digests, the prefill of those rows).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from server.services.audio_inputs import PromptAudio
from server.services.images import PromptImage

log = logging.getLogger("hearth.worker")

MediaInput = PromptImage | PromptAudio
ImagesByShape = dict[tuple[int, ...], list[PromptImage]]

# Most images one encoder call takes: bounds the call's activations and how long the admitted request waits for
# other requests' images.
IMAGES_PER_CALL = 8
# Rows kept for later requests (a Gemma 3 image's rows take a few MB).
CACHE_BYTES = 256 << 20


class MediaRows:
    """Rows of the text model's input embeddings for prompt images and clips, by digest."""

    def __init__(self, image_encoder: Any, audio_encoder: Any, *, cache_bytes: int = CACHE_BYTES,
                 images_per_call: int = IMAGES_PER_CALL) -> None:
        self._image_encoder = image_encoder
        self._audio_encoder = audio_encoder
        self._cache_bytes = cache_bytes
        self._images_per_call = images_per_call
        self._cache: OrderedDict[str, np.ndarray] = OrderedDict()
        self._held = 0  # bytes in the cache

    def rows(self, inputs: Sequence[MediaInput], waiting: Iterable[MediaInput] = ()) -> list[np.ndarray]:
        """Each input's rows, in order: from the cache, or encoded now. Images among `waiting` (inputs of requests
        not yet admitted, in their order) that have the size of an image encoded now join its calls, up to
        images_per_call a call, and are cached for their own turn."""
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
            ahead = self._waiting_images(waiting, set(missing))
            for shape, group in _by_shape(pictures).items():
                for start in range(0, len(group), self._images_per_call):
                    own = group[start:start + self._images_per_call]
                    queued = ahead.setdefault(shape, [])
                    extra = queued[:self._images_per_call - len(own)]
                    del queued[:len(extra)]
                    found.update(self._encode_images(own, extra))
        return [found[i.digest] for i in inputs]

    def _waiting_images(self, waiting: Iterable[MediaInput], taken: set[str]) -> ImagesByShape:
        """Waiting requests' images not cached and not among this call's, by pixel shape, each once."""
        ahead: dict[str, PromptImage] = {}
        for item in waiting:
            if isinstance(item, PromptImage) and item.digest not in taken and item.digest not in self._cache:
                ahead.setdefault(item.digest, item)
        return _by_shape(list(ahead.values()))

    def _encode_images(self, own: list[PromptImage], extra: list[PromptImage]) -> dict[str, np.ndarray]:
        """One encoder call for `own` and `extra` together; all their rows cached, `own`'s returned. Should the
        joint call fail, `own` is encoded alone, so that another request's image never fails this one."""
        batch = own + extra
        try:
            out = self._image_encoder.encode(np.stack([i.pixels for i in batch]))
        except Exception:
            if not extra:
                raise
            log.exception("encoding %d images with %d of waiting requests failed; encoding this request's alone",
                          len(own), len(extra))
            batch, out = own, self._image_encoder.encode(np.stack([i.pixels for i in own]))
        rows = {i.digest: self._keep(i.digest, r) for i, r in zip(batch, out, strict=True)}
        if extra:
            log.debug("encoded %d images with %d of waiting requests in one call", len(own), len(extra))
        return {i.digest: rows[i.digest] for i in own}

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


def _by_shape(images: list[PromptImage]) -> ImagesByShape:
    groups: dict[tuple[int, ...], list[PromptImage]] = {}
    for image in images:
        groups.setdefault(image.pixels.shape, []).append(image)
    return groups
