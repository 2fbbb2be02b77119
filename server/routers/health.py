"""GET /health (alive), /ready (default models loaded) and / (Ollama's probe, or the playground for a browser); HEAD
too (server.middleware)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response

from server.dependencies import get_manager
from server.model_manager import ModelManager, load_failure
from server.protocols import Worker
from server.replicas import ReplicaSet
from server.schemas.health import HealthStatus, ReplicaStatus, WorkerStatus

router = APIRouter(tags=["health"])


def _replicas(name: str, worker: Worker) -> list[ReplicaStatus] | None:
    if not isinstance(worker, ReplicaSet):
        return None
    # A lost device's message is the server's own; a load failure's may hold a path, so clients get its kind only.
    return [ReplicaStatus(replica=r.replica, adapter=r.adapter, state=r.state, queued=r.queued, running=r.running,
                          requests=r.requests, error=r.error if r.error is None or r.error.startswith("the device")
                          else load_failure(name, r.error)) for r in worker.status()]


def _status(manager: ModelManager) -> HealthStatus:
    models = {
        name: WorkerStatus(state=w.state, queued=w.queued, running=w.running, load_progress=w.progress,
                           error=w.error and load_failure(name, w.error), replicas=_replicas(name, w))
        for name, w in manager.workers().items()
    }
    failed = any(w.state == "failed" for w in models.values())
    status = "ok" if manager.ready else ("unavailable" if failed else "loading")
    return HealthStatus(status=status, models=models)  # type: ignore[arg-type]


@router.get("/", response_class=PlainTextResponse, responses={307: {"description": "a browser: to /playground"}})
async def root(request: Request) -> Response:
    """`Ollama is running`, as Ollama answers it: tools that speak Ollama's API probe this path. A browser (one that
    accepts HTML) goes to the playground instead."""
    if "text/html" in request.headers.get("accept", ""):
        return RedirectResponse("/playground", status_code=307)
    return PlainTextResponse("Ollama is running")


@router.get("/health", response_model=HealthStatus)
async def health(manager: Annotated[ModelManager, Depends(get_manager)]) -> HealthStatus:
    """200 while the process serves HTTP, with each model's worker state (loading models included)."""
    return _status(manager)


@router.get("/ready", response_model=HealthStatus, responses={503: {"model": HealthStatus}})
async def ready(manager: Annotated[ModelManager, Depends(get_manager)]) -> HealthStatus | JSONResponse:
    """200 once the default models are loaded and warmed up; 503 until then (or if one failed)."""
    status = _status(manager)
    if manager.ready:
        return status
    return JSONResponse(status.model_dump(mode="json"), status_code=503)
