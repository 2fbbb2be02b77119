"""GET /health and /ready: liveness, readiness and what each model's worker is doing."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class WorkerStatus(BaseModel):
    state: Literal["loading", "ready", "failed", "stopped"]
    queued: int  # requests waiting
    running: int  # 0 or 1: one sequence at a time until continuous batching
    load_progress: float  # 0..1
    error: str | None = None


class HealthStatus(BaseModel):
    status: Literal["ok", "loading", "unavailable"]
    models: dict[str, WorkerStatus]
