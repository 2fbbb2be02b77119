"""Model lifecycle (server/model_manager.py): load on first request, unload after keep_alive, the LRU cap.

Models come from a fake Ollama store and load as the fake model, so loading is instant and the test is about
when workers come and go.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from tests.models.ollama_store import add_model, fake_gguf
from tests.server.live_server import ThreadServer
from tests.server.test_app import health, start, wait_until

DEFAULT = "gemma-3-270m"


@pytest.fixture()
def store(tmp_path: Path) -> Path:
    root = tmp_path / "store"
    for name in ("one", "two", "three"):
        add_model(root, fake_gguf(tmp_path / f"{name}.gguf", "gemma3"), name, "1b")
    return root


def serve(store: Path, **env: str) -> ThreadServer:
    return start(env={"HEARTH_OLLAMA": "true", "OLLAMA_MODELS": str(store), **env}, step_s=0.01)


def complete(server: ThreadServer, model: str, **extra: Any) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/completions", json={"model": model, "prompt": "a", "max_tokens": 2, **extra},
                      timeout=30)


def loaded(server: ThreadServer) -> set[str]:
    return set(health(server))


def test_on_demand_models_unload_after_the_servers_keep_alive_and_preloaded_ones_stay(store: Path) -> None:
    srv = serve(store, HEARTH_KEEP_ALIVE="0.3s")
    try:
        assert complete(srv, "one:1b").status_code == 200
        assert loaded(srv) == {DEFAULT, "one:1b"}
        assert wait_until(lambda: loaded(srv) == {DEFAULT}, timeout=5)
        # It comes back on the next request.
        assert complete(srv, "one:1b").json()["model"] == "one:1b"
        metrics = httpx.get(f"{srv.url}/metrics").text
        assert 'hearth_model_unloads_total{model="one:1b",reason="idle"} 1.0' in metrics
        assert 'hearth_model_loads_total{model="one:1b"} 2.0' in metrics
    finally:
        srv.__exit__()


def test_a_requests_keep_alive_rules_from_then_on_as_in_ollama(store: Path) -> None:
    srv = serve(store, HEARTH_KEEP_ALIVE="1h")
    try:
        assert complete(srv, "one:1b", keep_alive=0).status_code == 200  # unload once answered
        assert wait_until(lambda: loaded(srv) == {DEFAULT}, timeout=5)
        assert complete(srv, "two:1b", keep_alive="200ms").status_code == 200
        assert wait_until(lambda: loaded(srv) == {DEFAULT}, timeout=5)
        assert complete(srv, "two:1b", keep_alive="1h").status_code == 200
        assert complete(srv, "two:1b").status_code == 200  # no keep_alive: the server's (1h here), as in Ollama
        assert not wait_until(lambda: "two:1b" not in loaded(srv), timeout=0.5)
        assert complete(srv, "three:1b", keep_alive="0.2s").status_code == 200
        assert complete(srv, "three:1b", keep_alive=-1).status_code == 200  # for ever
        assert not wait_until(lambda: "three:1b" not in loaded(srv), timeout=1.0)
        # The preloaded default model ignores keep_alive: /ready promises it.
        assert complete(srv, DEFAULT, keep_alive=0).status_code == 200
        assert not wait_until(lambda: DEFAULT not in loaded(srv), timeout=0.5)
    finally:
        srv.__exit__()


@pytest.mark.parametrize("keep_alive", ["soon", "5 minutes", "1d", True, [], float("inf")])
def test_a_bad_keep_alive_is_a_400_naming_it(store: Path, keep_alive: Any) -> None:
    srv = serve(store)
    try:
        body = {"model": "one:1b", "prompt": "a", "max_tokens": 1, "keep_alive": keep_alive}
        response = httpx.post(f"{srv.url}/v1/completions", content=_json(body),
                              headers={"content-type": "application/json"})
        assert response.status_code == 400, response.text
        assert response.json()["error"]["param"] == "keep_alive"
        assert loaded(srv) == {DEFAULT}  # nothing was loaded for it
    finally:
        srv.__exit__()


def _json(body: dict[str, Any]) -> bytes:
    import json

    return json.dumps(body, allow_nan=True).encode()  # Infinity is not JSON, but clients send it


def test_a_model_in_use_is_never_unloaded_and_goes_once_its_stream_ends(store: Path) -> None:
    srv = serve(store, HEARTH_KEEP_ALIVE="0")
    try:
        body = {"model": "one:1b", "prompt": "a", "max_tokens": 100, "stream": True}
        with httpx.stream("POST", f"{srv.url}/v1/completions", json=body, timeout=30) as stream:
            lines = stream.iter_lines()
            for _ in range(20):  # ~0.2 s of tokens with keep_alive 0
                next(lines)
            assert "one:1b" in loaded(srv)
            assert sum(1 for line in lines if line.startswith("data: ")) > 10  # it ran to its end
        assert wait_until(lambda: loaded(srv) == {DEFAULT}, timeout=5)
    finally:
        srv.__exit__()


def test_the_cap_evicts_the_least_recently_used_idle_model(store: Path) -> None:
    srv = serve(store, HEARTH_MAX_LOADED_MODELS="3")
    try:
        for model in ("one:1b", "two:1b", "one:1b"):  # two is now the least recently used
            assert complete(srv, model).status_code == 200
        assert complete(srv, "three:1b").status_code == 200
        assert loaded(srv) == {DEFAULT, "one:1b", "three:1b"}
        assert 'hearth_model_unloads_total{model="two:1b",reason="evicted"} 1.0' in httpx.get(
            f"{srv.url}/metrics").text
    finally:
        srv.__exit__()


def test_when_every_loaded_model_is_busy_a_new_one_is_503_with_retry_after(store: Path) -> None:
    srv = serve(store, HEARTH_MAX_LOADED_MODELS="2")
    try:
        body = {"model": "one:1b", "prompt": "a", "max_tokens": 150, "stream": True}
        with httpx.stream("POST", f"{srv.url}/v1/completions", json=body, timeout=30) as stream:
            lines = stream.iter_lines()  # kept: a dropped iterator closes the response (a disconnect)
            next(lines)
            client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="x", max_retries=0)
            with pytest.raises(openai.InternalServerError) as raised:
                client.completions.create(model="two:1b", prompt="a", max_tokens=1)
            assert raised.value.status_code == 503 and raised.value.response.headers["retry-after"] == "2"
            assert raised.value.body["code"] == "model_unavailable"  # type: ignore[index]
        # Room again once the stream is over (its model's lease ends with its response, just after the client left).
        assert wait_until(lambda: complete(srv, "two:1b").status_code == 200, timeout=10)
    finally:
        srv.__exit__()


def test_concurrent_first_requests_for_new_models_respect_the_cap(store: Path) -> None:
    srv = serve(store, HEARTH_MAX_LOADED_MODELS="2")
    statuses: list[int] = []
    try:
        def ask(model: str) -> None:
            statuses.append(complete(srv, model).status_code)

        threads = [threading.Thread(target=ask, args=(m,)) for m in ("one:1b", "two:1b", "three:1b") * 3]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        # Never more than the cap, whatever interleaving; every answer is a 200 or a 503 to retry.
        assert len(loaded(srv)) <= 2 and set(statuses) <= {200, 503} and 200 in statuses
    finally:
        srv.__exit__()



@pytest.mark.slow
@pytest.mark.heavy  # ~12 s alone on lavapipe, 35 s with the CPU shared
def test_unloading_a_real_model_gives_its_gpu_memory_back() -> None:
    """The shipped embedding model on the real adapter: loaded, used, unloaded (keep_alive 0) twice; wgpu's tally
    of buffer bytes goes back to where it was each time (the model's weights and activations, ~42 MiB)."""
    from config.settings import load_settings
    from server.app import create_app
    from server.metrics import gpu_memory_bytes
    from tests.server.fake_model import fake_loader

    app = create_app(load_settings(path=None, env={"HEARTH_OLLAMA": "false"}), loader=fake_loader())
    with ThreadServer(app) as srv:
        assert wait_until(lambda: httpx.get(f"{srv.url}/ready").status_code == 200)
        before = gpu_memory_bytes()
        for _ in range(2):
            body = {"model": "all-minilm-l6-v2", "input": ["hello"] * 4, "keep_alive": 0}
            assert httpx.post(f"{srv.url}/v1/embeddings", json=body, timeout=600).status_code == 200
            assert gpu_memory_bytes() - before > 10 << 20  # loaded: its weights alone are ~22 MB
            assert wait_until(lambda: "all-minilm-l6-v2" not in loaded(srv), timeout=60)
            # It leaves the list first; its thread is joined and its buffers collected just after.
            assert wait_until(lambda: gpu_memory_bytes() == before, timeout=30), gpu_memory_bytes() - before


def test_every_kind_has_a_worker_class_that_builds_from_an_entry() -> None:
    from config.settings import load_settings
    from server.model_manager import WORKER_KINDS, import_object

    assert set(WORKER_KINDS) == set(load_settings(env={}).groups())
    for kind in WORKER_KINDS.values():
        worker_class = import_object(kind.worker_class)
        assert callable(getattr(worker_class, "for_entry", None)), kind
