"""Pixels for a vision tower from a decoded picture, as transformers' image processors make them.

    pixels = preprocess(Image.open("photo.webp"), size=896, mean=(0.5, 0.5, 0.5), std=(0.5, 0.5, 0.5))

Gemma 3's processor (Gemma3ImageProcessor, its Pil twin the same arithmetic): any transparency composited onto white
(an RGBA or LA picture, or a palette one with a transparent colour), then RGB; a resize to size x size with Pillow's
bilinear filter (the processor's `resample` 2), ignoring the aspect ratio; values times 1/255, then (v - mean) / std
per channel. Pan-and-scan crops (off by default in Gemma 3's processor config) are not made.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from PIL import Image


def to_rgb(image: Image.Image) -> Image.Image:
    """The picture in RGB with any transparency composited onto a white background (transformers' convert_to_rgb)."""
    if "A" in image.getbands() or image.info.get("transparency") is not None:
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return image if image.mode == "RGB" else image.convert("RGB")


def preprocess(image: Image.Image, size: int, mean: Sequence[float], std: Sequence[float],
               resample: Image.Resampling = Image.Resampling.BILINEAR) -> np.ndarray:
    """float32 [3, size, size]: RGB, resized, rescaled by 1/255 and normalised per channel."""
    rgb = to_rgb(image)
    if rgb.size != (size, size):
        rgb = rgb.resize((size, size), resample=resample)
    values = np.asarray(rgb, dtype=np.float32).transpose(2, 0, 1) * np.float32(1 / 255)
    mean_ = np.asarray(mean, np.float32).reshape(3, 1, 1)
    std_ = np.asarray(std, np.float32).reshape(3, 1, 1)
    return np.ascontiguousarray((values - mean_) / std_, dtype=np.float32)
