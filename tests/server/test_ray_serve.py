"""Hearth on Ray Serve (server/serve_ray.py): a local one-node Ray cluster runs two replicas of the app, each
with its own lifespan and models (the fake model: the real ones would take minutes per replica on two cores),
behind Ray's HTTP proxy. The openai SDK talks to the proxy, streams, its concurrent requests reach both replicas
(the x-hearth-replica header says which), and when one replica's actor is killed Serve starts another: requests
during and after the restart are answered, none hangs.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import pytest
import yaml

from tests.server.live_server import free_port

ray = pytest.importorskip("ray", reason="the `ray` extra (make test installs it)")
serve = pytest.importorskip("ray.serve")

from server.serve_ray import REPLICA_HEADER, build  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
MODEL = "gemma-3-270m"  # the default model's name, served by the fake
pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # nothing leaves the machine
    # A one-node cluster of this machine (Ray puts its own processes on the node's address, never 127.0.0.1); the
    # HTTP proxy listens on loopback.
    ray.init(num_cpus=2, num_gpus=0, include_dashboard=False, namespace="hearth-test",
             runtime_env={"env_vars": {"PYTHONPATH": str(ROOT), "RAY_USAGE_STATS_ENABLED": "0"}},
             log_to_driver=False)
    try:
        port = free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        # The documented config (deploy/ray/serve.yaml), on this machine: no GPUs, half a core per replica (Ray is
        # given two), two replicas, the fake model.
        (config,) = yaml.safe_load((ROOT / "deploy" / "ray" / "serve.yaml").read_text())["applications"]
        env = {**config["args"]["env"], "HEARTH_MODEL_LOADER": "tests.server.fake_model:load_slow_fake_model",
               "HEARTH_LOG_LEVEL": "warning"}
        args = {**config["args"], "num_gpus": 0, "num_cpus": 0.5, "min_replicas": 2, "max_replicas": 2,
                "health_check_period_s": 1, "env": env}
        serve.run(build(args), name=config["name"], route_prefix=config["route_prefix"])
        url = f"http://127.0.0.1:{port}"
        assert wait_for(lambda: httpx.get(f"{url}/ready", timeout=5).status_code == 200, 60)
        yield url
    finally:
        serve.shutdown()
        ray.shutdown()


def wait_for(condition: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():  # type: ignore[operator]
                return True
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    return False


def stream_chat(url: str, text: str = "Hi") -> tuple[str, str]:
    """(the replica that served it, the streamed text), through httpx to read the header."""
    body = {"model": MODEL, "max_tokens": 6, "stream": True, "messages": [{"role": "user", "content": text}]}
    with httpx.stream("POST", f"{url}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200, response.read()
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
        return response.headers[REPLICA_HEADER], "".join(lines)


def test_the_openai_sdk_streams_through_rays_proxy(proxy: str) -> None:
    client = openai.OpenAI(base_url=f"{proxy}/v1", api_key="none", max_retries=0, timeout=30)
    answer = client.chat.completions.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "Hi"}])
    assert answer.choices[0].message.content == "Hello"
    chunks = client.chat.completions.create(model=MODEL, max_tokens=5, stream=True,
                                            messages=[{"role": "user", "content": "Hi"}])
    deltas = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(deltas) > 1 and "".join(deltas) == "Hello"
    assert {m.id for m in client.models.list().data} >= {MODEL}


def test_concurrent_requests_reach_both_replicas_and_a_killed_one_is_replaced(proxy: str) -> None:
    with ThreadPoolExecutor(8) as pool:
        served = [replica for replica, _ in pool.map(lambda _: stream_chat(proxy), range(16))]
    replicas = set(served)
    assert len(replicas) == 2, served

    victim = sorted(replicas)[0]
    actors = [a for a in ray.util.list_named_actors(all_namespaces=True) if a["name"].endswith(victim)]
    assert len(actors) == 1, actors
    ray.kill(ray.get_actor(actors[0]["name"], namespace=actors[0]["namespace"]), no_restart=True)

    # Until Serve has noticed, a request routed to the dead replica may fail, but fast (nothing hangs); the other
    # replica answers meanwhile, and a new one joins.
    seen: set[str] = set()
    failures = 0

    def one() -> None:
        nonlocal failures
        started = time.monotonic()
        try:
            seen.add(stream_chat(proxy)[0])
        except (httpx.HTTPError, AssertionError, KeyError):
            failures += 1
        assert time.monotonic() - started < 30

    assert wait_for(lambda: (one(), bool(seen - replicas))[1], 90), (seen, failures)
    # After the restart every request succeeds, on the survivor and the new replica.
    with ThreadPoolExecutor(8) as pool:
        after = [replica for replica, text in pool.map(lambda _: stream_chat(proxy), range(16))]
    assert victim not in after and len(set(after)) == 2, after
