"""Gemma 3's image encoder (models/vision/gemma3.py) against transformers: a tiny random-weight
Gemma3ForConditionalGeneration converted by llama.cpp's convert_hf_to_gguf.py --mmproj (F32 and the converter's
default F16), with transformers 5.24's float32 get_image_features on the same weights (scripts/make_vision_fixtures.py;
tests/golden/vision/meta.json).

Per file and image: the projected soft tokens [16, 128] have a cosine of at least 0.9999 with the reference and
differ by at most 2e-5 anywhere (measured 2.4e-6 on values up to 5.6: f32 sums in another order; the F16 golden is
transformers on the weights rounded as the file holds them, so both files are held to the same bar).
Also: the loader's errors (a text GGUF, a projector type Hearth does not run, pixels of the wrong shape).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFWriter

from gpu.program import Executor
from models.formats.gguf_file import GGUFFormatError
from models.vision.projector import load_image_encoder

VISION_DIR = Path(__file__).resolve().parent.parent / "golden" / "vision"
META = json.loads((VISION_DIR / "meta.json").read_text())
MIN_COSINE = 0.9999
MAX_ABS = 2e-5


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(VISION_DIR / "golden.npz") as data:
        return {key: data[key] for key in data.files}


def pixel_values(u8: np.ndarray) -> np.ndarray:
    """The reference processor's pixel values from its resized uint8 image (rescale 1/255, mean 0.5, std 0.5)."""
    return ((u8.astype(np.float32) * np.float32(1 / 255)) - np.float32(0.5)) / np.float32(0.5)


def _projector(kind: str) -> Path:
    path = VISION_DIR / f"mmproj-gemma3_tiny.{kind}.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == META["sha256"][path.name], "fixture file changed"
    return path


@pytest.mark.parametrize("kind", ["f32", "f16"])
def test_projected_features_match_transformers(ex: Executor, golden: dict[str, np.ndarray], kind: str) -> None:
    encoder = load_image_encoder(_projector(kind), ex)
    assert encoder.tokens_per_image == META["tokens_per_image"] == 16
    assert encoder.embedding_size == META["config"]["text_config"]["hidden_size"]
    names = [str(n) for n in golden["features/images"]]
    pixels = np.stack([pixel_values(golden[f"pixels/{n}/pil"]) for n in names])
    got = encoder.encode(pixels)
    ref = golden[f"features/{kind}"]
    assert got.shape == ref.shape == (len(names), 16, encoder.embedding_size) and got.dtype == np.float32
    for i, name in enumerate(names):
        a, b = got[i].ravel().astype(np.float64), ref[i].ravel().astype(np.float64)
        cosine = a @ b / (np.linalg.norm(a) * np.linalg.norm(b))
        assert cosine >= MIN_COSINE, f"{name}: cosine {cosine}"
        assert np.abs(a - b).max() <= MAX_ABS, f"{name}: max |diff| {np.abs(a - b).max()}"


def test_encode_rejects_wrong_pixel_shape(ex: Executor) -> None:
    encoder = load_image_encoder(_projector("f32"), ex)
    with pytest.raises(ValueError, match=r"\[N, 3, 224, 224\]"):
        encoder.encode(np.zeros((1, 3, 112, 112), np.float32))


def test_text_model_is_not_a_projector(ex: Executor) -> None:
    with pytest.raises(GGUFFormatError, match="not a projector"):
        load_image_encoder(VISION_DIR / "gemma3_tiny.f32.gguf", ex)


def test_unsupported_projector_type(ex: Executor, tmp_path: Path) -> None:
    path = tmp_path / "mmproj-qwen.gguf"
    writer = GGUFWriter(path, "clip")
    writer.add_bool("clip.has_vision_encoder", True)
    writer.add_string("clip.projector_type", "qwen2vl_merger")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(GGUFFormatError, match="projector type 'qwen2vl_merger' is not supported.*gemma3"):
        load_image_encoder(path, ex)
