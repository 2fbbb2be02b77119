"""GET /health (alive), /ready (default models loaded) and / (a pointer to the docs); HEAD too (server.middleware)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.responses import JSONResponse

from server import __version__
from server.dependencies import get_manager
from server.model_manager import ModelManager, load_failure
from server.schemas.health import HealthStatus, RootInfo, WorkerStatus

router = APIRouter(tags=["health"])


def _status(manager: ModelManager) -> HealthStatus:
    models = {
        name: WorkerStatus(state=w.state, queued=w.queued, running=w.running, load_progress=w.progress,
                           error=w.error and load_failure(name, w.error))
        for name, w in manager.workers().items()
    }
    failed = any(w.state == "failed" for w in models.values())
    status = "ok" if manager.ready else ("unavailable" if failed else "loading")
    return HealthStatus(status=status, models=models)  # type: ignore[arg-type]


@router.get("/", response_model=RootInfo)
async def root() -> RootInfo:
    """What this server is and where its API docs are."""
    return RootInfo(version=__version__)


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
