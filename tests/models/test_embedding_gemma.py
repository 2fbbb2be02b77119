"""EmbeddingGemma on a tiny random-weight model against transformers (through sentence-transformers).

scripts/make_embedding_golden.py built tests/golden/embeddings_gemma_tiny/ (a sentence-transformers directory:
Gemma3TextModel with bidirectional attention, 6 layers of which 5 slide over a window of 8, grouped heads,
mean pooling, two Dense projections, Normalize) and the same weights as a `gemma-embedding` GGUF, and
golden.npz: sentence-transformers' float32 vectors for 13 inputs of 4 to 128 tokens. Acceptance: cosine
>= 0.9999 for every input, from the directory and from the GGUF. Both sides compute in float32; measured
max |diff| is 2.3e-7 per value.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.embeddings.engine import EmbeddingModel, load_embedding_model

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
TINY_DIR = GOLDEN / "embeddings_gemma_tiny"
TINY_GGUF = GOLDEN / "embeddings_gemma_tiny.gguf"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def golden() -> tuple[list[str], np.ndarray, list[list[int]]]:
    data = np.load(TINY_DIR / "golden.npz")
    texts = json.loads((GOLDEN / "embeddings_corpus.json").read_text())
    offsets = data["offsets"]
    ids = [data["ids"][offsets[i]:offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]
    return [texts[i] for i in data["texts"]], data["embeddings"], ids


@pytest.fixture(scope="module", params=["dir", "gguf"])
def model(request: pytest.FixtureRequest) -> EmbeddingModel:
    return load_embedding_model(str(TINY_DIR if request.param == "dir" else TINY_GGUF))


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_config(model: EmbeddingModel) -> None:
    c = model.arch.config
    assert (c.n_layers, c.d_model, c.n_heads, c.window) == (6, 96, 3, 8)
    assert c.kv_heads == (1,) * 6 and c.head_dims == (32,) * 6
    assert c.sliding == (True, True, True, True, True, False)
    assert (model.dimensions, model.max_tokens, model.matryoshka) == (96, 128, True)


def test_matches_transformers(model: EmbeddingModel, golden) -> None:
    _, want, ids = golden
    got = model.embed(ids)  # one batch of uneven lengths, packed
    cos = cosines(got, want)
    assert cos.min() >= MIN_COSINE, f"input {int(cos.argmin())}: cosine {cos.min():.6f}"
    alone = np.stack([model.embed([i])[0] for i in ids[:4]])
    np.testing.assert_allclose(alone, got[:4], atol=1e-6)


def test_directory_tokenizer_matches(golden) -> None:
    texts, _, ids = golden
    model = load_embedding_model(str(TINY_DIR))
    assert [model.tokenize(t, truncate=True) for t in texts] == ids
    assert len(model.tokenize(texts[-2])) > 128  # untruncated: the endpoint rejects it


def test_gguf_tokenizer_adds_bos_and_eos() -> None:
    model = load_embedding_model(str(TINY_GGUF))
    ids = model.tokenize("the river")
    assert ids[0] == 2 and ids[-1] == 1 and len(ids) > 2
    long = model.tokenize("the river " * 200, truncate=True)
    assert len(long) == 128 and long[0] == 2 and long[-1] == 1
