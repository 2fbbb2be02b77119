"""The FastAPI application: routers, error handlers, the body size limit, and the lifespan that loads models.

The lifespan starts loading the default models in their workers and returns at once, so /health answers
while they load and /ready turns from 503 to 200 when they are loaded and warmed up. Requests for a model
that is still loading wait for it.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI

from config.settings import Settings, load_settings
from server import __version__
from server.errors import install_handlers
from server.metrics import Metrics
from server.middleware import install_middleware
from server.model_manager import ModelManager
from server.protocols import Loader
from server.routers import (
    anthropic,
    audio_speech,
    audio_transcriptions,
    captioned_speech,
    chat,
    completions,
    embeddings,
    health,
    models,
    ollama,
    playground,
    rerank,
    responses,
)
from server.routers import metrics as metrics_router

log = logging.getLogger("hearth.server")


def create_app(settings: Settings | None = None, *, loader: Loader | None = None, warm_up: bool = True) -> FastAPI:
    """The app for these settings (default: from the environment and config file).

    loader replaces settings.model_loader (tests pass a fake model's loader); warm_up=False skips the
    compile-ahead step after each load.
    """
    settings = settings or load_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        manager = ModelManager(settings, loader=loader, warm_up=warm_up)
        app.state.settings = settings
        app.state.manager = manager
        names = ", ".join(entry.id for entry in manager.registry.preloaded()) or "none"
        log.info("Hearth %s: loading default models (%s); /ready answers 200 once they are loaded", __version__,
                 names)
        manager.start_preloading()
        try:
            yield
        finally:
            log.info("shutting down: stopping model workers")
            await manager.shutdown()

    app = FastAPI(
        title="Hearth",
        version=__version__,
        summary="OpenAI-compatible local inference on WGSL compute shaders (wgpu)",
        lifespan=lifespan,
    )
    install_handlers(app)
    for router in (health.router, models.router, chat.router, completions.router, embeddings.router,
                   audio_transcriptions.router, audio_speech.router, anthropic.router, captioned_speech.router,
                   responses.router, ollama.router, rerank.router, playground.router):
        app.include_router(router)
    # Request ids, metrics, CORS, API keys, the response timeout and the body limits, for every route.
    app.state.metrics = Metrics(lambda: getattr(app.state, "manager", None))
    app.include_router(metrics_router.router)
    install_middleware(app, settings, app.state.metrics)
    return app
