"""GET /health and /ready: liveness, readiness and what each model's worker is doing."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class ReplicaStatus(BaseModel):
    """One replica of a chat model that runs on several adapters (server/replicas.py)."""

    replica: int
    adapter: str  # its adapter's index and name
    state: Literal["loading", "ready", "failed", "stopped"]  # failed: did not load, or its device was lost
    queued: int
    running: int
    requests: int  # requests it has been given since it started
    error: str | None = None


class WorkerStatus(BaseModel):
    state: Literal["loading", "ready", "failed", "stopped"]
    queued: int  # requests waiting
    running: int  # requests being served (in the batch)
    load_progress: float  # 0..1
    error: str | None = None
    replicas: list[ReplicaStatus] | None = None  # a model on several adapters: each replica


class HealthStatus(BaseModel):
    status: Literal["ok", "loading", "unavailable"]
    models: dict[str, WorkerStatus]
