"""models/audio_encoder/gemma4.py against transformers float32 (tests/golden/gemma4_audio, made by
scripts/make_gemma4_audio_fixtures.py): a tiny random-weight Gemma 4 with an audio tower (clipped linears whose
bounds bind), converted by llama.cpp's convert_hf_to_gguf.py --mmproj, on transformers' features of 2 s of speech
(199 frames, 50 soft tokens: five attention blocks, so the left context crosses blocks).

Tolerance: cosine >= 0.9999 per soft token (issue 42's bar). Both sides compute in float32 with the same weights;
measured 1 - 4e-13 for the worst token, max abs 2.6e-6 on values of order 1.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from audio.features import gemma4_num_audio_tokens
from models.audio_encoder.gemma4 import Gemma4AudioEncoder, local_relative_attention
from models.formats.gguf_file import GGUFFile, GGUFFormatError

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "gemma4_audio"
MMPROJ = GOLDEN / "mmproj-gemma4_audio_tiny.f32.gguf"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN / "golden.npz") as z:
        return {k: z[k] for k in z.files}


@pytest.fixture(scope="module")
def encoder() -> Gemma4AudioEncoder:
    return Gemma4AudioEncoder.from_file(MMPROJ)


def _row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def test_config_from_file(encoder: Gemma4AudioEncoder) -> None:
    meta = json.loads((GOLDEN / "meta.json").read_text())
    c, a = encoder.config, meta["audio_config"]
    assert (c.d_model, c.n_layers, c.n_heads, c.conv_kernel) == (a["hidden_size"], a["num_hidden_layers"],
                                                                  a["num_attention_heads"], a["conv_kernel_size"])
    assert c.d_ffn == 4 * c.d_model and c.n_mels == 128 and c.d_text == meta["text_config"]["hidden_size"]
    assert encoder.embedding_size == c.d_text


def test_projected_embeddings_match_transformers(encoder: Gemma4AudioEncoder, golden: dict[str, np.ndarray]) -> None:
    tower = encoder.tower(golden["features"])
    assert tower.shape == golden["tower"].shape
    assert _row_cosines(tower, golden["tower"]).min() >= MIN_COSINE
    out = encoder.encode(golden["features"])
    assert out.shape == golden["embeddings"].shape == (encoder.soft_tokens(golden["samples"].shape[0]), 128)
    assert out.dtype == np.float32
    assert _row_cosines(out, golden["embeddings"]).min() >= MIN_COSINE


def test_features_then_encode(encoder: Gemma4AudioEncoder, golden: dict[str, np.ndarray]) -> None:
    """Hearth's own front end feeding the tower: the end-to-end path from samples."""
    out = encoder.encode(encoder.features(golden["samples"]))
    assert out.shape[0] == gemma4_num_audio_tokens(golden["samples"].shape[0])
    assert _row_cosines(out, golden["embeddings"]).min() >= MIN_COSINE


def test_local_attention_against_dense_masked_softmax() -> None:
    """The windowed formulation against a dense [N, N] softmax with the band mask and a relative bias."""
    rng = np.random.default_rng(0)
    n, h, d, window, cap = 17, 2, 4, 5, 3.0
    q, k, v = (rng.standard_normal((n, h, d)).astype(np.float32) for _ in range(3))
    rel = rng.standard_normal((window, h, d)).astype(np.float32)
    got = local_relative_attention(q, k, v, rel, window, cap)
    want = np.zeros_like(got)
    for i in range(n):
        for hh in range(h):
            js = [j for j in range(n) if 0 <= i - j < window]
            z = np.array([q[i, hh] @ k[j, hh] + q[i, hh] @ rel[i - j, hh] for j in js], np.float64)
            z = cap * np.tanh(z / cap)
            p = np.exp(z - z.max())
            p /= p.sum()
            want[i, hh] = sum(pj * v[j, hh] for pj, j in zip(p, js))
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


def test_rejects_a_file_without_an_audio_tower() -> None:
    vision_only = Path(__file__).resolve().parent.parent / "golden" / "vision" / "mmproj-gemma4_tiny.f32.gguf"
    with pytest.raises(GGUFFormatError, match="audio projector type"):
        Gemma4AudioEncoder(GGUFFile(vision_only))
