"""The model manager: which workers are loaded, loading on demand, and unloading idle ones.

Configured models marked `preload` load at startup (/ready waits for them) and stay; any other name the
registry knows (an Ollama model, say) loads on its first request. Names that reach the same file share a
worker. An on-demand model unloads once it has been idle for its keep_alive (Ollama's, set by each request: its
`keep_alive` when sent, else the model's setting, else the server's, 5 minutes by default; negative: never),
or earlier when a new model needs its place under `limits.max_loaded_models` (least recently used first).

A request holds a lease on its model from `worker_for` until its response has ended (stream included), so a
model is never unloaded between being handed out and being used.

Every kind of model (chat, embeddings, speech, transcription, rerank) is one entry of WORKER_KINDS: its worker class,
built from a registry entry by `for_entry`, and its settings group's loader. Services get their kind's worker
through the protocols of server/protocols.py. A chat model with `adapters` set (its own or the server's) runs as a
ReplicaSet instead, one replica per adapter (server/replicas.py).
"""

from __future__ import annotations

import asyncio
import gc
import importlib
import logging
import time
from collections import Counter
from dataclasses import dataclass
from typing import Literal, cast, overload

from config.settings import SHIPPED_MODEL, Settings, parse_keep_alive
from gpu.device import AdapterSlot, resolve_adapters
from models.registry import ModelEntry, ModelRegistry
from server.errors import InvalidRequest, ModelNotFound, ModelUnavailable
from server.preparation import Preparation
from server.protocols import (
    ChatHandler,
    EmbeddingHandler,
    Loader,
    RerankHandler,
    SpeechHandler,
    TranscriptionHandler,
    Worker,
    WorkerClass,
)
from server.replicas import ReplicaSet
from server.request_context import at_request_end, outside_requests


def load_failure(name: str, error: BaseException | str) -> str:
    """What a client is told about a model that failed to load: its name and the kind of failure, never the
    exception's text (a misconfigured source puts a file-system path there); the server's log has the rest."""
    kind = error.split(":", 1)[0] if isinstance(error, str) else type(error).__name__
    if isinstance(error, OSError) or kind.endswith(("NotFound", "NotFoundError", "PermissionError", "DirectoryError")):
        return (f"The model `{name}` could not be loaded: its file is missing or unreadable, so the server's "
                "configuration of it is wrong. The server's log names the file.")
    return f"The model `{name}` could not be loaded ({kind}); the server's log has the details."


@dataclass(frozen=True)
class WorkerKind:
    """One kind of model the server runs: the worker class that holds such a model, and its endpoint."""

    worker_class: str  # "module:Class", imported when the first model of the kind loads
    endpoint: str  # where a request for this kind of model belongs, for the error that sends it there
    label: str  # "a chat", "an embedding", ... for that error


# Every model kind (ModelEntry.kind, a key of Settings.groups()), each with its worker class.
WORKER_KINDS = {
    "text": WorkerKind("server.chat_worker:ChatWorker", "/v1/chat/completions", "a chat"),
    "embedding": WorkerKind("server.embedding_worker:EmbeddingWorker", "/v1/embeddings", "an embedding"),
    "speech": WorkerKind("server.speech_worker:SpeechWorker", "/v1/audio/speech", "a speech"),
    "transcription": WorkerKind("server.transcription_worker:TranscriptionWorker", "/v1/audio/transcriptions",
                                "a transcription"),
    "rerank": WorkerKind("server.rerank_worker:RerankWorker", "/v1/rerank", "a rerank"),
}

log = logging.getLogger("hearth.server")
# How often the idle reaper looks at most (it looks sooner for short keep_alives, and when woken).
REAP_INTERVAL_S = 5.0
# How long shutdown waits for each worker's thread once its jobs are cancelled: a step ends well within it on a GPU
# (lavapipe's longest Kokoro stage is a few seconds), and a thread still busy past it is left to die with the process.
STOP_JOIN_S = 5.0


def import_object(target: str) -> object:
    """The function or class named `module:name`."""
    module_name, _, name = target.partition(":")
    try:
        return getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as error:
        raise ValueError(f"{target!r} cannot be imported: {error}") from error


class ModelManager:
    """Owns the workers; services ask it for the worker behind a request's model name."""

    def __init__(self, settings: Settings, registry: ModelRegistry | None = None, loader: Loader | None = None,
                 warm_up: bool = True) -> None:
        """loader, when given, replaces the chat models' loader (settings.model_loader): tests pass a fake's."""
        self.settings = settings
        self.registry = registry or ModelRegistry(settings)
        # Each kind's loader, imported now so that a misnamed one is a startup error.
        self._loaders = {kind: cast(Loader, import_object(group.loader)) for kind, group in settings.groups().items()
                         if kind != "text" or loader is None}
        if loader is not None:
            self._loaders["text"] = loader
        self._warm_up = warm_up
        self._workers: dict[str, Worker] = {}  # by ModelEntry.key
        self._preloaded: set[str] = set()
        self._leases: Counter[str] = Counter()  # requests between worker_for and their end, by key
        self._keep_alive: dict[str, float | None] = {}  # idle seconds before unloading (None: never), by key
        self._lock: asyncio.Lock | None = None  # one load or eviction decision at a time (made in the loop)
        self._reaper: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # Lifecycle counts for /metrics: loads by model name, unloads by (name, reason).
        self.loads: Counter[str] = Counter()
        self.unloads: Counter[tuple[str, str]] = Counter()
        # Decoding, tokenising and phonemising before a model's queue: bounded across all requests.
        self.preparation = Preparation(settings.limits.max_preparing)
        self._aliases_told: set[str] = set()  # aliases whose target has been logged once

    def _adapters_of(self, entry: ModelEntry) -> list[AdapterSlot] | None:
        """The adapters a chat model's replicas run on (its `adapters`, else the server's); None: one worker."""
        config = self.registry.config_of(entry)
        spec = config.adapters if config is not None and config.adapters is not None else self.settings.adapters
        if entry.kind != "text" or not spec:
            return None
        return resolve_adapters(spec)

    def _start(self, entry: ModelEntry) -> Worker:
        config = self.registry.config_of(entry)
        max_queue = self.settings.limits.max_queue if config is None or config.max_queue is None else config.max_queue
        adapters = self._adapters_of(entry)
        worker: Worker
        if adapters is not None:
            worker = ReplicaSet.for_entry(entry, self._loaders[entry.kind], self.settings, max_queue=max_queue,
                                          warm_up=self._warm_up, adapters=adapters)
        else:
            worker_class = cast(WorkerClass, import_object(WORKER_KINDS[entry.kind].worker_class))
            worker = worker_class.for_entry(entry, self._loaders[entry.kind], self.settings, max_queue=max_queue,
                                            warm_up=self._warm_up)
        self._workers[entry.key] = worker
        self.loads[worker.name] += 1
        worker.start()
        return worker

    def start_preloading(self) -> None:
        """Start loading the preloaded models, each in its own worker thread; returns at once."""
        for entry in self.registry.preloaded():
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

    def workers(self) -> dict[str, Worker]:
        """Loaded (or loading) workers by model name."""
        return {worker.name: worker for worker in self._workers.values()}

    def keep_alive_of(self, worker: Worker) -> float | None:
        """Seconds a loaded worker's model stays loaded once idle; None: until the server stops (preloaded, or a
        negative keep_alive)."""
        key = next((k for k, w in self._workers.items() if w is worker), None)
        return None if key is None or key in self._preloaded else self._keep_alive.get(key)

    def _unloadable(self, key: str, worker: Worker) -> bool:
        """An on-demand model that no request holds or waits for, and that is not loading."""
        return (key not in self._preloaded and not self._leases[key] and worker.idle
                and worker.state in ("ready", "failed", "stopped"))

    async def _unload(self, key: str, reason: str) -> None:
        """Stop a worker (off the event loop: its thread is joined) and let its model's memory go."""
        worker = self._workers.pop(key)
        self._keep_alive.pop(key, None)
        self.unloads[(worker.name, reason)] += 1
        log.info("unloading %s (%s)", worker.name, reason)

        def stop() -> None:
            worker.stop(timeout=None)
            gc.collect()  # the model's buffers sit in reference cycles; free them now, not at some later pass

        await asyncio.to_thread(stop)

    async def _make_room(self) -> None:
        """Unload models to stay under the limit: failed ones first, then the least recently used idle one."""
        limit = self.settings.limits.max_loaded_models
        while len(self._workers) >= limit:
            idle = [(w.state != "failed", w.last_used, key) for key, w in self._workers.items()
                    if self._unloadable(key, w)]
            if not idle:
                raise ModelUnavailable(f"{len(self._workers)} models are loaded (the limit is {limit}) and all are "
                                       "busy; retry later.",
                                       headers={"Retry-After": str(self.settings.limits.retry_after_s)})
            await self._unload(min(idle)[2], "evicted")

    def _lease(self, key: str) -> None:
        """Hold the model for the current request; released (and its idle time started) when the response ends."""

        def release() -> None:
            self._leases[key] -= 1
            if self._leases[key] <= 0:
                del self._leases[key]
            worker = self._workers.get(key)
            if worker is not None:
                worker.last_used = time.monotonic()
            self._wake.set()

        if at_request_end(release):
            self._leases[key] += 1

    def _set_keep_alive(self, entry: ModelEntry, requested: str | float | None) -> None:
        """Ollama's rule, set by every request: its keep_alive (already checked), else the model's setting, else
        the server's; preloaded models are never unloaded."""
        if entry.key in self._preloaded:
            self._keep_alive[entry.key] = None
        else:
            config = self.registry.config_of(entry)
            own = config.keep_alive if config is not None else None
            chosen = next(v for v in (requested, own, self.settings.keep_alive) if v is not None)
            self._keep_alive[entry.key] = parse_keep_alive(chosen)
        self._wake.set()

    @overload
    async def worker_for(self, name: str, kind: Literal["text"] = "text",
                         keep_alive: str | float | None = None) -> tuple[ModelEntry, ChatHandler]: ...

    @overload
    async def worker_for(self, name: str, kind: Literal["embedding"],
                         keep_alive: str | float | None = None) -> tuple[ModelEntry, EmbeddingHandler]: ...

    @overload
    async def worker_for(self, name: str, kind: Literal["speech"],
                         keep_alive: str | float | None = None) -> tuple[ModelEntry, SpeechHandler]: ...

    @overload
    async def worker_for(self, name: str, kind: Literal["transcription"],
                         keep_alive: str | float | None = None) -> tuple[ModelEntry, TranscriptionHandler]: ...

    @overload
    async def worker_for(self, name: str, kind: Literal["rerank"],
                         keep_alive: str | float | None = None) -> tuple[ModelEntry, RerankHandler]: ...

    async def worker_for(self, name: str, kind: str = "text",
                         keep_alive: str | float | None = None) -> tuple[ModelEntry, Worker]:
        """The registry entry and the ready worker for a request's model, loading it if needed.

        kind: what the endpoint serves ("text", "embedding", "speech", "transcription", "rerank"); a model of another
        kind is a 400 that names the endpoint it belongs to. keep_alive: the request's (Ollama's) idle time for the
        model from now on.
        """
        entry = await asyncio.to_thread(self.registry.lookup, name)  # may read the Ollama store
        if entry is None:
            entries = await asyncio.to_thread(self.registry.list)
            raise ModelNotFound(name, [e.id for e in entries if e.kind == kind])
        if entry.alias_of is not None and name not in self._aliases_told:
            self._aliases_told.add(name)
            # OpenAI's names reach whatever model is configured, which may behave unlike OpenAI's: say which, once.
            base = " (a base model: it continues text rather than follows instructions)" if (
                entry.kind == "text" and entry.source == SHIPPED_MODEL) else ""
            log.info("`%s` is an alias of `%s`%s", name, entry.alias_of, base)
        if entry.kind != kind:
            other = WORKER_KINDS[entry.kind]
            raise InvalidRequest(f"The model `{name}` is {other.label} model (use {other.endpoint}).", param="model",
                                 code="model_not_supported")
        try:
            parse_keep_alive(keep_alive)
        except ValueError as error:
            raise InvalidRequest(str(error), param="keep_alive", code="invalid_value") from error
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            worker = self._workers.get(entry.key)
            if worker is None or worker.state == "stopped":
                if worker is not None:
                    self._workers.pop(entry.key)
                await self._make_room()
                worker = self._start(entry)
            self._lease(entry.key)
            self._set_keep_alive(entry, keep_alive)
        worker.last_used = time.monotonic()
        self._start_reaper()
        try:
            await worker.wait_ready()
        except Exception as error:
            # The worker logged the failure with its details; those may hold file-system paths, not for clients.
            raise ModelUnavailable(load_failure(name, error)) from error
        return entry, worker

    # -- unloading idle models ---------------------------------------------------------------
    def _start_reaper(self) -> None:
        # The first request starts it; it runs outside that request, so its log lines do not carry the request's id.
        if self._reaper is None or self._reaper.done():
            self._reaper = asyncio.get_running_loop().create_task(self._reap_forever(), name="hearth-idle-unload",
                                                                  context=outside_requests())

    def _next_look_s(self) -> float:
        """Half the shortest keep_alive of a loaded model (so it unloads at most 50% late), within bounds."""
        finite = [s for s in self._keep_alive.values() if s is not None]
        return min(REAP_INTERVAL_S, max(0.05, min(finite) / 2)) if finite else REAP_INTERVAL_S

    async def _reap_forever(self) -> None:
        while True:
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), timeout=self._next_look_s())
            except TimeoutError:
                pass
            try:
                await self.unload_idle()
            except Exception:  # noqa: BLE001 - keep reaping; a failed stop is logged, not fatal
                log.exception("unloading idle models failed")

    async def unload_idle(self) -> list[str]:
        """Unload every on-demand model idle for longer than its keep_alive; their names."""
        assert self._lock is not None
        unloaded = []
        async with self._lock:
            now = time.monotonic()
            for key, worker in list(self._workers.items()):
                seconds = self._keep_alive.get(key)
                if seconds is not None and self._unloadable(key, worker) and now - worker.last_used >= seconds:
                    unloaded.append(worker.name)
                    await self._unload(key, "idle")
        return unloaded

    async def shutdown(self) -> None:
        """Stop every worker: waiting jobs fail with a 503, running ones stop at their model's next step, and each
        thread gets at most STOP_JOIN_S to end (a daemon thread still inside a step does not hold up the exit)."""
        if self._reaper is not None:
            self._reaper.cancel()
        workers, self._workers = list(self._workers.values()), {}
        await asyncio.gather(*(asyncio.to_thread(w.stop, STOP_JOIN_S) for w in workers))
