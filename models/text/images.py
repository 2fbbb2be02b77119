"""Images in a prompt: spans of rows whose input embeddings an image encoder made (models/vision/).

A prompt with images is its token ids (an image's rows hold the template's soft-token id, so that lengths, usage and
penalties count them as tokens) and, for each image, an ImageSpan: where its rows start and their embeddings, already in
the text model's embedding space. The step takes those rows as they are (no embedding scale) and, where the family's
markers say so, lets them attend to each other both ways (Gemma 3's bidirectional attention within an image; the row
table's token source 2 and later keys, gpu/kernels/common/rows.wgsl), or where the decoder's config does, on its sliding
layers only (Gemma 4's 26B and 31B). Audio clips (Gemma 4) are spans of the same kind, causal. A row sees later rows of
its image only once their keys are in the cache, so an image's rows go in one prompt chunk: chunk_end moves a chunk's
end to before an image it would cut. On sliding-window layers a row's first key stays bounded by its own position, as
llama.cpp's non-causal image batches do and transformers 5.24's Gemma 4 mask (the window ANDed over causal OR image
block): an image wider than the window lets its first rows see all its later ones, while its later rows no longer see
its first (tests/models/test_gemma4_multimodal_parity.py's "wide" prompt).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from models.text.step_io import PREFILL_BUCKETS


@dataclass(frozen=True, eq=False)
class ImageSpan:
    """An image's rows in a prompt: rows [start, start + len(embeddings)) take embeddings (f32 [n, D]) as inputs.
    digest: a hash of the image's pixels, the image's identity wherever rows of prompts are compared or reused.
    audio: the rows are an audio clip's, causal whatever the family does for images (Gemma 4's mm_token_type_ids
    mark only images as a block)."""

    start: int
    embeddings: np.ndarray
    digest: str = field(default="")
    audio: bool = False

    @property
    def end(self) -> int:
        """One past the image's last row."""
        return self.start + len(self.embeddings)


def pixel_digest(pixels: np.ndarray) -> str:
    """A hash of an image's preprocessed pixels (its shape too): two images share rows only if it matches."""
    data = np.ascontiguousarray(pixels)
    return hashlib.sha256(repr((data.dtype.str, data.shape)).encode() + data.tobytes()).hexdigest()


def check_spans(spans: Sequence[ImageSpan], n_prompt: int, embedding_size: int) -> list[ImageSpan]:
    """The spans in prompt order, checked: inside the prompt, apart, of f32 [n, D] rows, each at most one chunk
    (PREFILL_BUCKETS[-1] rows) long. ValueError otherwise."""
    ordered = sorted(spans, key=lambda s: s.start)
    at = 0
    for span in ordered:
        e = span.embeddings
        if e.ndim != 2 or e.shape[1] != embedding_size or e.dtype != np.float32 or not len(e):
            raise ValueError(f"an image's embeddings must be f32 [n >= 1, {embedding_size}], not {e.dtype} {e.shape}")
        if len(e) > PREFILL_BUCKETS[-1]:
            raise ValueError(f"an image of {len(e)} rows exceeds a prompt chunk ({PREFILL_BUCKETS[-1]} rows)")
        if span.start < at or span.end > n_prompt:
            raise ValueError(f"image rows [{span.start}, {span.end}) overlap another image or leave the prompt of "
                             f"{n_prompt} tokens")
        at = span.end
    return ordered


def chunk_end(spans: Sequence[ImageSpan], start: int, n_prompt: int, chunk: int) -> int:
    """The end of the prompt chunk that starts at `start` and would take `chunk` tokens: before an image that
    chunk would cut, or (an image that starts the chunk and is longer than it) after that image."""
    end = min(start + chunk, n_prompt)
    for span in spans:
        if span.start < end < span.end:
            return span.start if span.start > start else span.end
    return end


class ChunkImage(NamedTuple):
    """An image (or audio clip) inside a prompt chunk."""

    first: int  # its first row in the chunk
    embeddings: np.ndarray  # f32 [n, D]
    audio: bool = False  # ImageSpan.audio


def rows_in(spans: Sequence[ImageSpan], start: int, end: int) -> list[ChunkImage]:
    """The images inside chunk [start, end); spans do not straddle chunk edges (chunk_end)."""
    inside = []
    for span in spans:
        if span.start >= start and span.end <= end:
            inside.append(ChunkImage(span.start - start, span.embeddings, span.audio))
        elif span.start < end and span.end > start:
            raise ValueError(f"image rows [{span.start}, {span.end}) straddle the chunk [{start}, {end})")
    return inside


@dataclass(frozen=True)
class ImageMarkers:
    """The pieces a family's prompt marks an image (or an audio clip) with: the template writes `marker` where it
    goes, and the reference processor puts its rows (soft tokens) there as `around` + `start` + soft * n + `end` +
    `around`. bidirectional: whether the rows see each other both ways (Gemma 3's token_type_ids block) or
    causally (Gemma 4's; its larger kinds turn images both ways on sliding layers through DecoderConfig)."""

    start: str
    soft: str
    end: str
    marker: str = ""  # the template's placeholder; "" for `start`
    around: str = ""
    bidirectional: bool = False

    @property
    def placeholder(self) -> str:
        """What the template writes where an image goes."""
        return self.marker or self.start

    def expansion(self, tokens_per_image: int) -> str:
        """The text a placeholder becomes (Gemma3Processor's full_image_sequence, Gemma4Processor's
        replace_image_token and replace_audio_token)."""
        return f"{self.around}{self.start}{self.soft * tokens_per_image}{self.end}{self.around}"


GEMMA3_MARKERS = ImageMarkers("<start_of_image>", "<image_soft_token>", "<end_of_image>", around="\n\n",
                              bidirectional=True)
GEMMA4_MARKERS = ImageMarkers("<|image>", "<|image|>", "<image|>", marker="<|image|>")
GEMMA4_AUDIO_MARKERS = ImageMarkers("<|audio>", "<|audio|>", "<audio|>", marker="<|audio|>")
IMAGE_MARKERS = {"gemma3": GEMMA3_MARKERS, "gemma4": GEMMA4_MARKERS}  # by GGUF architecture
AUDIO_MARKERS = {"gemma4": GEMMA4_AUDIO_MARKERS}


def expand_images(text: str, markers: ImageMarkers, soft_tokens: Sequence[int]) -> str:
    """A rendered prompt with each placeholder expanded into the image's rows (soft_tokens[k] for the k-th image:
    a fixed count for Gemma 3, one per image's size elsewhere), as the reference processor does. ValueError unless
    the text holds exactly one placeholder per image and no other piece of the expansion (a client's text that
    spells them out must not forge or hide an image)."""
    found = text.count(markers.placeholder)
    if found != len(soft_tokens):
        raise ValueError(f"the prompt holds {found} placeholders ({markers.placeholder}) for {len(soft_tokens)} "
                         "inputs: the chat template does not place them, or the text spells the placeholder out")
    pieces = {markers.start, markers.soft, markers.end} - {markers.placeholder}
    if any(piece in text for piece in pieces):
        raise ValueError(f"the text spells out a piece of an image or audio clip ({' or '.join(sorted(pieces))})")
    parts = text.split(markers.placeholder)
    out = [parts[0]]
    for count, part in zip(soft_tokens, parts[1:], strict=True):
        out += [markers.expansion(count), part]
    return "".join(out)


def soft_token_runs(ids: Sequence[int], soft_id: int, soft_tokens: Sequence[int]) -> list[int]:
    """The first row of each image in tokenised prompt ids: one run of soft tokens per image, of soft_tokens[k] ids
    for the k-th (images are apart: their markers lie between them). ValueError where the ids hold soft tokens in
    any other arrangement."""
    at = np.flatnonzero(np.asarray(ids) == soft_id)
    breaks = np.flatnonzero(np.diff(at) != 1) + 1 if len(at) else at
    runs = np.split(at, breaks) if len(at) else []
    lengths = [len(r) for r in runs]
    if lengths != list(soft_tokens):
        raise ValueError(f"the prompt's runs of image soft tokens ({lengths}) are not the images' "
                         f"({list(soft_tokens)})")
    return [int(r[0]) for r in runs]
