"""Hearth on a Ray cluster: the FastAPI app as a Ray Serve deployment, one Hearth per replica, Ray's proxy in front.

Each replica builds the app in its own process (`__serve_build_asgi_app__`), so the app's lifespan, loading the
preloaded models, runs there; Ray's HTTP proxy on every node routes to the replicas, which serve the same endpoints
with the same streaming as `hearth serve`. Replicas ask for `num_gpus` GPUs each; Ray gives a replica its GPUs'
indices and the replica runs its chat models on those adapters (HEARTH_ADAPTERS, server/replicas.py), so two
replicas on one machine do not share a GPU. Serve scales the replicas between `min_replicas` and `max_replicas` on
the requests each one holds (`target_ongoing_requests`), and replaces a replica that dies or whose health check
fails (a model that failed to load or lost every device). Responses carry `x-hearth-replica`, the replica's id.

Ray is an extra (`pip install 'hearth[ray]'`). Run it with the documented config (deploy/ray/serve.yaml):

    ray start --head                       # or join: ray start --address HEAD:6379 (deploy/ray/README.md)
    serve run deploy/ray/serve.yaml        # http://HOST:8000/v1, the OpenAI API

or from Python: `serve.run(build({"num_gpus": 1, "max_replicas": 4}))`. Settings reach the replicas as HEARTH_*
variables in the config's `runtime_env` (or a HEARTH_CONFIG file present on every node).
"""

from __future__ import annotations

import os
from typing import Any

from ray import serve
from ray.serve import Application
from starlette.types import ASGIApp, Message, Receive, Scope, Send

REPLICA_HEADER = "x-hearth-replica"
# Ray's default (5) would hold a replica's requests to a handful: Hearth batches up to limits.max_batch sequences
# and queues limits.max_queue more (32 each by default), and answers 429 itself past them.
MAX_ONGOING_REQUESTS = 96


class ReplicaHeader:
    """ASGI middleware: every response names the replica that served it (streams too: it touches headers only)."""

    def __init__(self, app: ASGIApp, replica: str) -> None:
        self.app = app
        self.header = (REPLICA_HEADER.encode(), replica.encode())

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_header(message: Message) -> None:
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), self.header]}
            await send(message)

        await self.app(scope, receive, send_with_header)


@serve.ingress()
class Hearth:
    """One Hearth server in a Ray Serve replica."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        """env: HEARTH_* settings for this deployment, on top of the replica's environment."""
        os.environ.update(env or {})
        import ray

        gpus = [str(int(float(i))) for i in ray.get_gpu_ids()]
        if gpus and not os.environ.get("HEARTH_ADAPTERS"):
            # Vulkan lists every GPU whatever CUDA_VISIBLE_DEVICES says: take the ones Ray gave this replica by
            # index (the same order when CUDA_DEVICE_ORDER=PCI_BUS_ID; either way two replicas get two GPUs).
            os.environ["HEARTH_ADAPTERS"] = ",".join(gpus)
        self.replica = serve.get_replica_context().replica_id.unique_id
        self._hearth: Any = None  # the app (the wrapper Serve adds owns `app`)

    def __serve_build_asgi_app__(self) -> ASGIApp:
        from config.settings import load_settings
        from server.app import create_app
        from server.request_context import configure_logging

        settings = load_settings()
        configure_logging(settings.log_level, settings.log_format)
        self._hearth = create_app(settings)
        self._hearth.add_middleware(ReplicaHeader, replica=self.replica)
        return self._hearth

    def check_health(self) -> None:
        """Ray's periodic check: a replica whose preloaded model failed (or lost every device) is replaced."""
        manager = getattr(getattr(self._hearth, "state", None), "manager", None)
        failed = [name for name, worker in (manager.workers() if manager else {}).items() if worker.state == "failed"]
        if failed:
            raise RuntimeError(f"models failed: {', '.join(failed)}")


def build(args: dict[str, Any]) -> Application:
    """The application for `serve run` (an application builder: deploy/ray/serve.yaml's `args`).

    args: num_gpus (per replica, default 1), num_cpus (default 1), min_replicas (1), max_replicas (default
    min_replicas), target_ongoing_requests (requests per replica Serve scales towards, default 32: one full
    batch), max_ongoing_requests (per replica, MAX_ONGOING_REQUESTS), env (HEARTH_* settings for every replica).
    """
    minimum = int(args.get("min_replicas", 1))
    maximum = int(args.get("max_replicas", minimum))
    deployment = serve.deployment(
        Hearth, name="Hearth",
        ray_actor_options={"num_gpus": float(args.get("num_gpus", 1)), "num_cpus": float(args.get("num_cpus", 1))},
        max_ongoing_requests=int(args.get("max_ongoing_requests", MAX_ONGOING_REQUESTS)),
        autoscaling_config={"min_replicas": minimum, "max_replicas": maximum,
                            "target_ongoing_requests": float(args.get("target_ongoing_requests", 32))},
        health_check_period_s=float(args.get("health_check_period_s", 10)),
    )
    env = {str(k): str(v) for k, v in (args.get("env") or {}).items()}
    return deployment.bind(env)
