"""Image preprocessing (models/vision/preprocess.py) against transformers' Gemma 3 image processors on real photos
of several sizes, formats and modes (tests/golden/vision/photos: JPEG, WebP, PNG RGB, RGBA with an alpha ramp, a
palette with a transparent colour; 98x140 to 320x214, resized to the fixture's 224x224).

Gemma3ImageProcessorPil (Pillow's bilinear filter, as Hearth): equal to float32 rounding (max |diff| 1e-6; the
golden stores the resized uint8 image, from which both compute (u8 / 255 - 0.5) / 0.5). Gemma3ImageProcessor (the
torchvision backend, transformers' default): its antialiased bilinear resize rounds a few values to the neighbouring
uint8 level, so pixels differ by at most one level, 1/255 / 0.5 = 0.0078 (measured: at most 110 of the 150,528
values of a photo), and by 1e-4 on average.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from models.vision.preprocess import preprocess, to_rgb

VISION_DIR = Path(__file__).resolve().parent.parent / "golden" / "vision"
META = json.loads((VISION_DIR / "meta.json").read_text())
SIZE = META["preprocessor"]["size"]["height"]
ONE_LEVEL = 1 / 255 / 0.5


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(VISION_DIR / "golden.npz") as data:
        return {key: data[key] for key in data.files}


def _values(u8: np.ndarray) -> np.ndarray:
    return ((u8.astype(np.float32) * np.float32(1 / 255)) - np.float32(0.5)) / np.float32(0.5)


@pytest.mark.parametrize("photo", META["photos"])
def test_matches_reference_processors(golden: dict[str, np.ndarray], photo: str) -> None:
    image = Image.open(VISION_DIR / "photos" / photo)
    got = preprocess(image, SIZE, golden["image_mean"], golden["image_std"])
    assert got.shape == (3, SIZE, SIZE) and got.dtype == np.float32
    pil = golden[f"pixels/{photo}/pil"]
    np.testing.assert_allclose(got, _values(pil), rtol=0, atol=1e-6)
    torchvision = _values((pil.astype(np.int16) + golden[f"pixels/{photo}/torchvision_minus_pil"]).astype(np.uint8))
    diff = np.abs(got - torchvision)
    assert diff.max() <= ONE_LEVEL + 1e-6
    assert diff.mean() <= 1e-4


def test_the_photos_cover_formats_and_modes() -> None:
    modes = {p: Image.open(VISION_DIR / "photos" / p) for p in META["photos"]}
    assert {im.format for im in modes.values()} == {"JPEG", "PNG", "WEBP"}
    assert {"RGB", "RGBA", "P"} <= {im.mode for im in modes.values()}


def test_transparency_becomes_white() -> None:
    rgba = Image.new("RGBA", (4, 2), (10, 20, 30, 0))
    assert np.asarray(to_rgb(rgba)).tolist() == [[[255, 255, 255]] * 4] * 2
    grey = Image.new("L", (3, 3), 7)
    assert to_rgb(grey).mode == "RGB" and np.asarray(to_rgb(grey)).max() == 7
