"""Gemma 4's image encoder (models/vision/gemma4.py) against transformers: a tiny random-weight
Gemma4ForConditionalGeneration whose vision tower and embedder llama.cpp's convert_hf_to_gguf.py --mmproj wrote
(projector type "gemma4v"), with transformers 5.24's float32 get_image_features on the same weights and
Gemma4ImageProcessorPil's pixel values (scripts/make_gemma4_vision_fixtures.py; tests/golden/vision/gemma4_meta.json).

Preprocessing: the pixels of every test photo (JPEG, WebP, RGBA and palette PNGs, landscape and portrait, so 60 to 70
soft tokens) equal the reference processor's exactly (max |diff| 0: the same Pillow bicubic resize, then / 255).
Features: per image the projected soft tokens [T, 128] have a cosine of at least 0.9999 with the reference (measured
0.9999999) and differ by at most 2e-5 anywhere (measured 3.2e-6 on values up to about 4: f32 sums in another order,
the sqrt(D_v) scale folded into the norm's epsilon).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from gpu.program import Executor
from models.formats.gguf_file import GGUFFile
from models.vision.gemma4 import Gemma4ImageEncoder, preprocess, rope_permutation, target_size
from models.vision.projector import load_image_encoder

VISION_DIR = Path(__file__).resolve().parent.parent / "golden" / "vision"
META = json.loads((VISION_DIR / "gemma4_meta.json").read_text())
MMPROJ = VISION_DIR / f"mmproj-{META['name']}.f32.gguf"
MAX_SOFT = META["processor"]["max_soft_tokens"]
PHOTOS = sorted(META["soft_tokens"])
MIN_COSINE = 0.9999
MAX_ABS = 2e-5


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(VISION_DIR / "gemma4_golden.npz") as data:
        return {key: data[key] for key in data.files}


@pytest.fixture(scope="module")
def encoder(ex: Executor) -> Gemma4ImageEncoder:
    return Gemma4ImageEncoder(GGUFFile(MMPROJ), ex, max_soft_tokens=MAX_SOFT)


def test_fixture_files_match_meta() -> None:
    for name, digest in META["sha256"].items():
        assert hashlib.sha256((VISION_DIR / name).read_bytes()).hexdigest() == digest, name


def hf_patches(pixels: np.ndarray, patch: int) -> np.ndarray:
    """[3, H, W] -> the processor's patch rows [P, p p 3] (row-major grid; row, column, channel in a patch)."""
    _, h, w = pixels.shape
    return pixels.reshape(3, h // patch, patch, w // patch, patch).transpose(1, 3, 2, 4, 0).reshape(-1, 3 * patch ** 2)


@pytest.mark.parametrize("name", PHOTOS)
def test_preprocess_matches_processor(golden: dict[str, np.ndarray], name: str) -> None:
    p, k = META["processor"]["patch_size"], META["processor"]["pooling_kernel_size"]
    pixels = preprocess(Image.open(VISION_DIR / "photos" / name), p, k, MAX_SOFT)
    ref = golden[f"pixels/{name}"].astype(np.float32) * np.float32(1 / 255)
    got = hf_patches(pixels, p)
    assert got.shape == ref.shape
    assert np.abs(got - ref).max() == 0
    assert pixels.shape[1] * pixels.shape[2] // (p * k) ** 2 == META["soft_tokens"][name]


def test_target_size_edges() -> None:
    """The processor's corner cases: a sliver keeps one block on its short side, capped on the long one."""
    assert target_size(10, 4000, 16, 3, 70) == (48, 3360)
    assert target_size(4000, 10, 16, 3, 70) == (3360, 48)
    assert target_size(896, 896, 16, 3, 280) == (768, 768)


def test_rope_permutation_pairs() -> None:
    """After the permutation, pair (j, j + d/2) holds the original pair (i, i + d/4) of one half of the head."""
    d = 16
    perm = rope_permutation(d)
    pairs = {(int(perm[j]), int(perm[j + d // 2])) for j in range(d // 2)}
    q = d // 4
    assert pairs == {(i, i + q) for i in range(q)} | {(2 * q + i, 3 * q + i) for i in range(q)}


@pytest.mark.parametrize("name", META["feature_photos"])
def test_features_match_transformers(encoder: Gemma4ImageEncoder, golden: dict[str, np.ndarray], name: str) -> None:
    pixels = encoder.preprocess(Image.open(VISION_DIR / "photos" / name))
    assert encoder.soft_tokens(pixels) == META["soft_tokens"][name]
    got = encoder.encode(pixels[None])[0].astype(np.float64)
    ref = golden[f"features/{name}"].astype(np.float64)
    assert got.shape == ref.shape
    np.testing.assert_allclose(got, ref, rtol=0, atol=MAX_ABS)
    cos = (got * ref).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1))
    assert cos.min() >= MIN_COSINE


def test_two_images_of_one_size(encoder: Gemma4ImageEncoder, golden: dict[str, np.ndarray]) -> None:
    """A batch of same-size images (as the worker groups them) is each image's own soft tokens."""
    name = META["feature_photos"][0]
    pixels = encoder.preprocess(Image.open(VISION_DIR / "photos" / name))
    got = encoder.encode(np.stack([pixels, pixels]))
    for rows in got:
        np.testing.assert_allclose(rows, golden[f"features/{name}"], rtol=0, atol=MAX_ABS)


def test_bad_pixels(encoder: Gemma4ImageEncoder) -> None:
    with pytest.raises(ValueError, match="whole"):
        encoder.encode(np.zeros((1, 3, 50, 48), np.float32))
    with pytest.raises(ValueError, match="patches"):
        encoder.encode(np.zeros((1, 3, 48 * 10, 48 * 10), np.float32))
    with pytest.raises(ValueError, match=r"\[N, 3, H, W\]"):
        encoder.encode(np.zeros((3, 48, 48), np.float32))


def test_loader_picks_gemma4(ex: Executor) -> None:
    loaded = load_image_encoder(MMPROJ, ex)
    assert isinstance(loaded, Gemma4ImageEncoder)
    assert loaded.tokens_per_image == 280 and loaded.embedding_size == META["text_config"]["hidden_size"]


def test_f16_projector(ex: Executor, golden: dict[str, np.ndarray], tmp_path: Path) -> None:
    """Matrices stored F16 (the converter's default type for projectors): against transformers' F32 features, where
    the weights' rounding shows (measured cosine 0.9999992, max |diff| 3e-3), the issue's bar."""
    from tests.models.vision_files import requantized

    path = requantized(tmp_path / "mmproj.gguf", MMPROJ, {"attn_": "f16", "ffn_": "f16", "mm.": "f16"})
    encoder = Gemma4ImageEncoder(GGUFFile(path), ex, max_soft_tokens=MAX_SOFT)
    name = META["feature_photos"][0]
    got = encoder.encode(encoder.preprocess(Image.open(VISION_DIR / "photos" / name))[None])[0].astype(np.float64)
    ref = golden[f"features/{name}"].astype(np.float64)
    cos = (got * ref).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1))
    assert cos.min() >= MIN_COSINE


def test_permuted_rows_of_a_quantised_matrix(tmp_path: Path) -> None:
    """The RoPE permutation moves whole rows of Q8_0 blocks: dequantised, they are the matrix's rows reordered."""
    from gguf import quants

    from models.formats.weights import GGUFSource
    from models.vision.gemma4 import _permute_rows
    from tests.models.vision_files import requantized

    src = GGUFSource(GGUFFile(requantized(tmp_path / "q8.gguf", MMPROJ, {"attn_q.": "q8_0"})))
    name = "v.blk.0.attn_q.weight"
    m = src.matrix(name)
    perm = np.concatenate([h * 16 + rope_permutation(16) for h in range(4)])
    got = quants.dequantize(np.asarray(_permute_rows(m, perm).data).reshape(m.n, -1), m.qtype)
    np.testing.assert_array_equal(got, src.array(name).reshape(m.n, m.k)[perm])


def test_clipped_linears(ex: Executor, golden: dict[str, np.ndarray]) -> None:
    """A tower with Gemma4ClippableLinear bounds that bind (scripts/make_gemma4_vision_fixtures.py's set_bounds; the
    value projections' left infinite; they move the features by up to 1.7 from the plain tower's): the same bar as
    the plain tower (measured max |diff| 1.8e-6)."""
    name = META["clipped_photo"]
    encoder = Gemma4ImageEncoder(GGUFFile(VISION_DIR / "mmproj-gemma4_clipped_tiny.f32.gguf"), ex,
                                 max_soft_tokens=MAX_SOFT)
    assert len(encoder.bounds) == 6 * encoder.config.n_layers  # q, k, o, gate, up, down
    got = encoder.encode(encoder.preprocess(Image.open(VISION_DIR / "photos" / name))[None])[0].astype(np.float64)
    ref = golden[f"clipped/features/{name}"].astype(np.float64)
    np.testing.assert_allclose(got, ref, rtol=0, atol=MAX_ABS)
    cos = (got * ref).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1))
    assert cos.min() >= MIN_COSINE


@pytest.mark.parametrize("clipped", [False, True])
def test_reference_matches_transformers(golden: dict[str, np.ndarray], clipped: bool) -> None:
    """The float64 reference (tests/models/gemma4_vision_reference.py) on the fixture files is transformers' float32
    output to float32 rounding (measured max |diff| 2.2e-6), so it can stand in for it on other weights."""
    from tests.models.gemma4_vision_reference import reference_features

    name = META["clipped_photo"] if clipped else META["feature_photos"][0]
    path = VISION_DIR / ("mmproj-gemma4_clipped_tiny.f32.gguf" if clipped else MMPROJ.name)
    pixels = preprocess(Image.open(VISION_DIR / "photos" / name), 16, 3, MAX_SOFT)
    ref = golden[f"clipped/features/{name}" if clipped else f"features/{name}"]
    np.testing.assert_allclose(reference_features(path, pixels), ref, rtol=0, atol=MAX_ABS)


def test_q8_0_projector(ex: Executor, tmp_path: Path) -> None:
    """Q8_0 matrices (where rows are whole 32-value blocks; ffn_down's 176 columns F16, as the converter's q8_0 choice
    leaves them): against the float64 reference on the same dequantised weights, the F32 file's bar (measured
    1.5e-6)."""
    from tests.models.gemma4_vision_reference import reference_features
    from tests.models.vision_files import requantized

    path = requantized(tmp_path / "mmproj-q8_0.gguf", MMPROJ,
                       {"attn_": "q8_0", "ffn_gate": "q8_0", "ffn_up": "q8_0", "ffn_down": "f16"})
    encoder = Gemma4ImageEncoder(GGUFFile(path), ex, max_soft_tokens=MAX_SOFT)
    pixels = encoder.preprocess(Image.open(VISION_DIR / "photos" / META["feature_photos"][1]))
    got = encoder.encode(pixels[None])[0].astype(np.float64)
    ref = reference_features(path, pixels)
    np.testing.assert_allclose(got, ref, rtol=0, atol=MAX_ABS)


@pytest.mark.slow
def test_real_shapes_match_reference(ex: Executor, tmp_path: Path) -> None:
    """Gemma4VisionConfig's default shapes (width 768, 12 heads of 64, FFN 3072, tables of 10240; E4B's text width
    2560), one of its 16 layers, seeded F16 weights, a real photo at the processor's default 280 soft tokens
    (china.jpg: 2340 patches, 260 tokens), against the float64 reference: cosine >= 0.9999 per token and max |diff|
    <= 1e-3 of the largest reference value (measured: cosine 1 - 1e-12, max |diff| 5.2e-6 of values up to 4.8;
    about 35 s on 2-core lavapipe)."""
    from scripts.make_synthetic_gguf import gemma4_projector
    from tests.models.gemma4_vision_reference import reference_features

    path = gemma4_projector(tmp_path / "mmproj-real-shape.gguf", layers=1)
    encoder = load_image_encoder(path, ex)
    assert (encoder.tokens_per_image, encoder.embedding_size) == (280, 2560)
    pixels = encoder.preprocess(Image.open(VISION_DIR / "photos" / "china.jpg"))
    got = encoder.encode(pixels[None])[0].astype(np.float64)
    ref = reference_features(path, pixels)
    assert got.shape == ref.shape == (encoder.soft_tokens(pixels), 2560)
    cos = (got * ref).sum(-1) / (np.linalg.norm(got, axis=-1) * np.linalg.norm(ref, axis=-1))
    assert cos.min() >= MIN_COSINE
    assert np.abs(got - ref).max() <= 1e-3 * np.abs(ref).max()
