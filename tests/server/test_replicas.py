"""A chat model on several adapters (server/replicas.py): routing to the shortest queue, /health and /metrics per
replica, and a replica that loses its device.

The replicas run fake models on one adapter (this machine's lavapipe, listed twice: "0,0"); the fake's device
loss is a decode that raises a GPUFailure saying so (FakeModel.fail_after), as a lost wgpu device does.
"""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import httpx
import openai
import pytest

from config.settings import SettingsError, load_settings
from gpu.device import list_adapters, resolve_adapters
from gpu.errors import DeviceLost, GPUFailure, is_device_lost
from server.errors import ModelUnavailable, QueueFull
from server.jobs import ChoiceDone, Job, TextDelta
from server.replicas import ReplicaSet
from tests.server.fake_model import FakeModel, fake_loader
from tests.server.test_app import health, start
from tests.server.test_chat_worker import job

pytestmark = pytest.mark.timeout(60)


def replica_set(n: int = 2, max_queue: int = 4, loader: Any = None, **model: Any) -> ReplicaSet:
    settings = load_settings(env={"HEARTH_OLLAMA": "false", "HEARTH_MAX_BATCH": "2"})
    entry = type("Entry", (), {"id": "fake", "alias_of": None, "source": "fake", "context_length": None,
                               "kv_dtype": "f16", "int8_activations": False})()
    adapters = resolve_adapters(["0"] * n)
    replicas = ReplicaSet.for_entry(entry, loader or fake_loader(**model), settings,  # type: ignore[arg-type]
                                    max_queue=max_queue, warm_up=False, adapters=adapters)
    replicas.start()
    return replicas


def loader_per_replica(*kwargs: dict[str, Any], step_s: float = 0.01) -> Any:
    """A loader that gives the n-th model loaded the n-th kwargs (the replicas load in their own threads)."""
    lock, loaded = threading.Lock(), []

    def load(source: str, **_: Any) -> FakeModel:
        with lock:
            own = kwargs[len(loaded)]
            loaded.append(source)
        return FakeModel(source, step_s=step_s, **own)

    return load


async def collect(replicas: ReplicaSet, j: Job) -> str:
    text = ""
    async for event in replicas.submit(j, 1).events():
        if isinstance(event, TextDelta):
            text += event.text
        else:
            assert isinstance(event, ChoiceDone)
    return text


def test_adapters_resolve_by_index_name_and_all() -> None:
    adapters = list_adapters()
    assert adapters and [a.index for a in adapters] == list(range(len(adapters)))
    assert resolve_adapters(["all"])[0] == adapters[0]
    assert [a.index for a in resolve_adapters(["0", "0"])] == [0, 0]
    assert resolve_adapters([adapters[0].name[:5].upper()])[0].index == 0
    with pytest.raises(ValueError, match="does not exist"):
        resolve_adapters([str(len(adapters))])
    with pytest.raises(ValueError, match="no adapter's name contains"):
        resolve_adapters(["no such gpu"])
    with pytest.raises(SettingsError, match="takes no other"):
        load_settings(env={"HEARTH_ADAPTERS": "all,0"})
    with pytest.raises(SettingsError, match="chat models only"):
        load_settings(overrides={"embeddings.models": [{"id": "e", "source": "e", "adapters": ["0"]}]})


def test_device_lost_is_told_from_other_gpu_failures() -> None:
    assert is_device_lost(DeviceLost("reading back", "x", TimeoutError("no map")))
    assert is_device_lost(GPUFailure("submitting", "decode", RuntimeError("Parent device is lost")))
    assert not is_device_lost(GPUFailure("compiling shader", "matmul", RuntimeError("validation error")))
    try:
        try:
            raise DeviceLost("a", "b", RuntimeError("c"))
        except DeviceLost as lost:
            raise RuntimeError("generation failed") from lost
    except RuntimeError as wrapped:
        assert is_device_lost(wrapped)


def test_jobs_go_to_the_shortest_queue_and_cancel_wherever_they_wait() -> None:
    async def main() -> None:
        replicas = replica_set(step_s=0.02)
        await replicas.wait_ready()
        assert replicas.state == "ready" and len(replicas.replicas) == 2
        texts = await asyncio.gather(*(collect(replicas, job(max_tokens=6)) for _ in range(8)))
        assert set(texts) == {"Hello "}
        assert sorted(r.requests for r in replicas.status()) == [4, 4]  # alternating: equal queues, least recent
        # A cancelled waiting job leaves whichever queue holds it.
        handles = [replicas.submit(job(max_tokens=50), 1) for _ in range(8)]
        assert replicas.queued + replicas.running > 0
        for handle in handles:
            handle.cancel()
        assert replicas.queued == 0
        replicas.stop()
        assert replicas.state == "stopped"

    asyncio.run(main())


def test_full_queues_everywhere_give_429() -> None:
    async def main() -> None:
        replicas = replica_set(max_queue=1, step_s=0.05)
        await replicas.wait_ready()
        # Each queue holds one; the worker threads take jobs into their batches meanwhile (up to the fake's 4), so
        # how many fit depends on them, but a 429 comes once both queues are full, not when the first one is.
        handles = []
        with pytest.raises(QueueFull):
            for _ in range(40):
                handles.append(replicas.submit(job(max_tokens=200), 1))
        given = [r.requests for r in replicas.status()]
        assert len(handles) >= 2 and sum(given) == len(handles) and min(given) >= 1
        for handle in handles:
            handle.cancel()
        replicas.stop()

    asyncio.run(main())


def test_a_lost_replica_fails_its_batch_with_503_and_its_queue_moves_to_the_other() -> None:
    async def main() -> None:
        # Replica 0's device is lost at its 5th token; replica 1 keeps serving. Batches of one, so jobs queue.
        replicas = replica_set(loader=loader_per_replica({"fail_after": 5, "max_batch": 1}, {"max_batch": 1}))
        await replicas.wait_ready()
        results = await asyncio.gather(*(collect(replicas, job(max_tokens=8)) for _ in range(6)),
                                       return_exceptions=True)
        failed = [r for r in results if isinstance(r, BaseException)]
        assert len(failed) == 1  # the one in replica 0's batch; the ones waiting behind it moved
        assert isinstance(failed[0], ModelUnavailable) and failed[0].code == "device_lost"
        assert "was lost" in str(failed[0]) and failed[0].status == 503
        assert all(r == "Hello wo" for r in results if not isinstance(r, BaseException))
        lost, alive = replicas.status()
        assert (lost.state, alive.state) == ("failed", "ready") and "device was lost" in (lost.error or "")
        assert replicas.state == "ready"
        assert await collect(replicas, job(max_tokens=3)) == "Hel"  # new requests go to the one left
        # Given at first 3 each; replica 1 then took replica 0's 2 waiting ones, and the last request.
        assert [r.requests for r in replicas.status()] == [3, 6]
        replicas.stop()

    asyncio.run(main())


def test_when_every_replica_is_lost_the_model_is_failed_and_requests_get_503() -> None:
    async def main() -> None:
        replicas = replica_set(n=1, loader=loader_per_replica({"fail_after": 2}))
        await replicas.wait_ready()
        with pytest.raises(ModelUnavailable, match="was lost"):
            await collect(replicas, job(max_tokens=8))
        assert replicas.state == "failed" and "device was lost" in (replicas.error or "")
        with pytest.raises(ModelUnavailable, match="Every replica"):
            replicas.submit(job(), 1)
        replicas.stop()

    asyncio.run(main())


def test_the_server_serves_replicas_and_reports_each_in_health_and_metrics() -> None:
    srv = start(env={"HEARTH_ADAPTERS": "0,0"}, step_s=0.02)
    try:
        client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="none", max_retries=0)

        def ask(_: int) -> str:
            stream = client.chat.completions.create(model="gemma-3-270m", max_tokens=5, stream=True,
                                                    messages=[{"role": "user", "content": "Hi"}])
            return "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)

        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(6) as pool:
            assert len(set(pool.map(ask, range(6)))) == 1
        model = health(srv)["gemma-3-270m"]
        assert model["state"] == "ready" and len(model["replicas"]) == 2
        assert all(r["state"] == "ready" and r["requests"] >= 1 for r in model["replicas"])
        assert sum(r["requests"] for r in model["replicas"]) == 6
        metrics = httpx.get(f"{srv.url}/metrics").text
        adapter = model["replicas"][0]["adapter"]
        assert f'hearth_replica_up{{adapter="{adapter}",model="gemma-3-270m",replica="1"}} 1.0' in metrics
        assert 'hearth_replica_requests_total{adapter=' in metrics
    finally:
        srv.__exit__()


def test_over_http_a_lost_gpu_is_a_503_in_the_apis_shape_and_the_server_goes_on() -> None:
    srv = start(env={"HEARTH_ADAPTERS": "0,0"}, loader=loader_per_replica({"fail_after": 2}, {"fail_after": 2}))
    try:
        body = {"model": "gemma-3-270m", "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]}
        first = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=30)
        assert first.status_code == 503 and first.headers["retry-after"] == "1"
        error = first.json()["error"]
        assert (error["type"], error["code"]) == ("server_error", "device_lost") and "was lost" in error["message"]
        model = health(srv)["gemma-3-270m"]
        assert [r["state"] for r in model["replicas"]] == ["failed", "ready"] and model["state"] == "ready"
        assert "device was lost" in model["replicas"][0]["error"]
        assert httpx.get(f"{srv.url}/ready").status_code == 200
        # A stream on the other replica: its device goes too, mid-stream: the stream ends with an error event.
        with httpx.stream("POST", f"{srv.url}/v1/chat/completions", json={**body, "stream": True}, timeout=30) as r:
            events = [line for line in r.iter_lines() if line.startswith("data: ")]
        assert any('"device_lost"' in event for event in events), events
        # No replica left: the model is failed, its requests get a 503 at once, and /ready says so.
        again = httpx.post(f"{srv.url}/v1/chat/completions", json=body, timeout=30)
        assert again.status_code == 503 and again.json()["error"]["code"] == "model_unavailable"
        assert httpx.get(f"{srv.url}/ready").status_code == 503
        metrics = httpx.get(f"{srv.url}/metrics").text
        assert metrics.count('hearth_replica_up{') == 2 and 'replica="0"} 0.0' in metrics
    finally:
        srv.__exit__()
