"""The model manager: which workers are loaded, loading on demand, and unloading idle ones past the limit.

Configured models marked `preload` load at startup (/ready waits for them); any other name the catalogue
knows (an Ollama model, say) loads on its first request. Names that reach the same file share a worker.
"""

from __future__ import annotations

import asyncio
import importlib
import logging
from typing import Any

from config.catalogue import ModelCatalogue, ModelEntry
from config.settings import Settings
from server.errors import InvalidRequest, ModelNotFound, ModelUnavailable
from server.worker import Loader, ModelWorker

# The worker class per model kind besides chat ("text"), imported when the first such model loads.
WORKER_CLASSES = {
    "embedding": "server.embedding_worker:EmbeddingWorker",
    "speech": "server.speech_worker:SpeechWorker",
    "transcription": "server.transcription_worker:TranscriptionWorker",
}
# What a request for a model of the wrong kind is told to use instead.
ENDPOINTS = {
    "text": "/v1/chat/completions",
    "embedding": "/v1/embeddings",
    "speech": "/v1/audio/speech",
    "transcription": "/v1/audio/transcriptions",
}

log = logging.getLogger("hearth.server")


def import_loader(target: str) -> Any:
    """The function (or class) named `module:name`."""
    module_name, _, function = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), function)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{target!r} cannot be imported: {error}") from error


class ModelManager:
    """Owns the workers; services ask it for the worker behind a request's model name."""

    def __init__(self, settings: Settings, catalogue: ModelCatalogue | None = None, loader: Loader | None = None,
                 warm_up: bool = True) -> None:
        self.settings = settings
        self.catalogue = catalogue or ModelCatalogue(settings)
        self._loader = loader or import_loader(settings.model_loader)
        self._warm_up = warm_up
        self._workers: dict[str, ModelWorker] = {}  # by ModelEntry.key
        self._preloaded: set[str] = set()

    def _start(self, entry: ModelEntry) -> Any:
        if entry.kind == "text":
            worker: Any = ModelWorker(entry.alias_of or entry.id, entry.source, self._loader,
                                      max_queue=self.settings.limits.max_queue,
                                      max_batch=self.settings.limits.max_batch, context_length=entry.context_length,
                                      kv_dtype=entry.kv_dtype, warm_up=self._warm_up)
        else:
            worker_class = import_loader(WORKER_CLASSES[entry.kind])
            loader = import_loader(self.settings.groups()[entry.kind].loader)
            worker = worker_class(entry.alias_of or entry.id, entry.source, loader,
                                  max_queue=self.settings.limits.max_queue, warm_up=self._warm_up)
        self._workers[entry.key] = worker
        worker.start()
        return worker

    def start_preloading(self) -> None:
        """Start loading the preloaded models, each in its own worker thread; returns at once."""
        for entry in self.catalogue.preloaded():
            if entry.key not in self._workers:
                self._start(entry)
            self._preloaded.add(entry.key)

    async def wait_preloaded(self) -> None:
        """Wait until every preloaded model has loaded (or failed)."""
        await asyncio.gather(*(self._workers[k].wait_ready() for k in self._preloaded), return_exceptions=True)

    @property
    def ready(self) -> bool:
        """All preloaded models are loaded."""
        return all(self._workers[key].state == "ready" for key in self._preloaded)

    def workers(self) -> dict[str, ModelWorker]:
        """Loaded (or loading) workers by model name."""
        return {worker.name: worker for worker in self._workers.values()}

    def _make_room(self) -> None:
        """Unload the least recently used idle on-demand model when the limit is reached."""
        limit = self.settings.limits.max_loaded_models
        if len(self._workers) < limit:
            return
        idle = [(w.last_used, key) for key, w in self._workers.items() if key not in self._preloaded and w.idle]
        if not idle:
            raise ModelUnavailable(f"{len(self._workers)} models are loaded (the limit is {limit}) and all are busy; "
                                   "retry later.", headers={"Retry-After": str(self.settings.limits.retry_after_s)})
        _, key = min(idle)
        worker = self._workers.pop(key)
        log.info("unloading %s to make room (limit %d loaded models)", worker.name, limit)
        worker.stop(timeout=None)

    async def worker_for(self, name: str, kind: str = "text") -> tuple[ModelEntry, Any]:
        """The catalogue entry and the ready worker for a request's model, loading it if needed.

        kind: what the endpoint serves ("text", "embedding", "speech", "transcription"); a model of another kind
        is a 400 that names the endpoint it belongs to.
        """
        entry = await asyncio.to_thread(self.catalogue.lookup, name)  # may read the Ollama store
        if entry is None:
            raise ModelNotFound(name)
        if entry.kind != kind:
            what = "a chat" if entry.kind == "text" else f"an {entry.kind}" if entry.kind[0] in "ae" else f"a {entry.kind}"
            raise InvalidRequest(f"The model `{name}` is {what} model (use {ENDPOINTS[entry.kind]}).", param="model",
                                 code="model_not_supported")
        worker = self._workers.get(entry.key)
        if worker is None or worker.state == "stopped":
            self._make_room()
            worker = self._start(entry)
        try:
            await worker.wait_ready()
        except Exception as error:
            raise ModelUnavailable(f"The model `{name}` could not be loaded: {worker.error or error}") from error
        return entry, worker

    async def shutdown(self) -> None:
        """Stop every worker (waiting jobs are cancelled, threads joined)."""
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(asyncio.to_thread(w.stop) for w in workers))
