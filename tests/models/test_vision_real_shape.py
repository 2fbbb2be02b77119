"""Gemma 3's image encoder at the real model's shapes (Gemma 3 4B's tower: 896 px, 64 x 64 patches of 14 px, so a
588-column patch matrix padded to 608; width 1152, 16 heads of 72, FFN 4304, pooled 4 x 4 into 256 tokens, text
width 2560), one of its 27 layers, on seeded random F16 weights and a real photo, against the float64 numpy reference
(tests/models/vision_reference.py, itself held to transformers on the tiny fixture by test_vision_parity.py).

Tolerance: f32 on the GPU against float64, sums of up to 4304 products and softmaxes over 4096 keys: cosine >= 0.9999
per image as the issue asks, and max |diff| <= 1e-3 of the largest reference value (measured: cosine 1 - 4e-14, max
|diff| 1.8e-6 of values up to 4.4). About 70 s on 2-core lavapipe (the GPU pass about 55 s, the reference 12 s).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpu.program import Executor
from models.vision.projector import load_image_encoder
from scripts.make_synthetic_gguf import gemma3_projector
from tests.models.vision_reference import reference_features

PHOTO = Path(__file__).resolve().parent.parent / "golden" / "vision" / "photos" / "china.jpg"


@pytest.mark.slow
def test_real_shapes_match_reference(ex: Executor, tmp_path: Path) -> None:
    path = gemma3_projector(tmp_path / "mmproj-real-shape.gguf", layers=1)
    encoder = load_image_encoder(path, ex)
    assert (encoder.tokens_per_image, encoder.embedding_size) == (256, 2560)
    pixels = encoder.preprocess(Image.open(PHOTO))[None]
    got = encoder.encode(pixels)[0].astype(np.float64)
    ref = reference_features(path, pixels)[0]
    cosine = got.ravel() @ ref.ravel() / (np.linalg.norm(got) * np.linalg.norm(ref))
    assert cosine >= 0.9999, cosine
    assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max(), (np.abs(got - ref).max(), np.abs(ref).max())
