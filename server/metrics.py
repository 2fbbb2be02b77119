"""Prometheus metrics: one registry per app, filled by the request middleware and by a few calls from services.

What is measured where:
- every HTTP request (route template, method, status, latency): server/middleware.py's RequestContext, so a
  new router is counted without doing anything;
- chat and completions (tokens, time to first token, tokens/s): `meter_job`, called once where services
  submit a job (server/services/generation.py), on the worker thread as the events are made, from the times
  the worker had each choice's tokens (ChoiceDone), not from when text was emitted;
- speech and transcription: `meter_audio` around a worker job, or `observe_audio("generated" | "transcribed",
  model, seconds)`, from their services;
- queue depth, running requests, state, loads and unloads per model (and per replica of a model on several
  adapters: hearth_replica_*), GPU memory held by wgpu buffers and
  textures, and the process's memory and CPU: read when /metrics is scraped.

Code that runs inside a request reaches the app's Metrics through a context variable the middleware sets
(`Metrics.current()`), so services need no new parameter; outside a request the calls do nothing.
"""

from __future__ import annotations

import contextvars
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Literal, TypeVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, ProcessCollector, disable_created_metrics
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from server.jobs import ChoiceDone, Job, JobEvent, _JobDone, _JobFailed
from server.protocols import Worker
from server.replicas import ReplicaSet

if TYPE_CHECKING:
    from server.model_manager import ModelManager

# Latency from 5 ms (health checks) to 10 minutes (long generations on a CPU Vulkan).
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60)
RATE_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)

# `*_created` series (when each counter was made) double the output and tell nothing a scrape's time does not.
disable_created_metrics()
T = TypeVar("T")
M = TypeVar("M")  # a worker job's model
_current: contextvars.ContextVar[Metrics | None] = contextvars.ContextVar("hearth_metrics", default=None)


def gpu_memory_bytes() -> int:
    """Bytes held by this process's wgpu buffers and textures (all devices), as wgpu-py counts them.

    wgpu has no query for a device's memory in use; wgpu-py tracks the size of every buffer and texture it
    creates and releases, which is what Hearth allocates (weights, KV pages, activations, staging).
    """
    try:
        import wgpu

        counts = wgpu.diagnostics.object_counts.get_dict()
    except Exception:  # noqa: BLE001 - no wgpu (a test app) or a diagnostics change: report nothing held
        return 0
    return int(sum(v.get("resource_mem", 0) for k, v in counts.items() if k in ("Buffer", "Texture")))


def _replica_metrics(workers: dict[str, Worker]) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
    """The replicas of models on several adapters (server/replicas.py), labelled by replica and adapter."""
    labels = ["model", "replica", "adapter"]
    up = GaugeMetricFamily("hearth_replica_up", "1 while the replica serves, 0 once it failed or lost its device",
                           labels=labels)
    queued = GaugeMetricFamily("hearth_replica_queue_depth", "Requests waiting for the replica", labels=labels)
    running = GaugeMetricFamily("hearth_replica_running_requests", "Requests in the replica's batch", labels=labels)
    given = CounterMetricFamily("hearth_replica_requests", "Requests routed to the replica", labels=labels)
    for name, worker in workers.items():
        if isinstance(worker, ReplicaSet):
            for r in worker.status():
                key = [name, str(r.replica), r.adapter]
                up.add_metric(key, 1 if r.state == "ready" else 0)
                queued.add_metric(key, r.queued)
                running.add_metric(key, r.running)
                given.add_metric(key, r.requests)
    yield from (up, queued, running, given)


class _ModelCollector(Collector):
    """Per-model gauges and lifecycle counts read from the model manager at scrape time (no bookkeeping on the
    request path)."""

    def __init__(self, manager: Callable[[], ModelManager | None]) -> None:
        self._manager = manager

    def collect(self) -> Iterator[GaugeMetricFamily]:
        queued = GaugeMetricFamily("hearth_model_queue_depth", "Requests waiting for the model's worker",
                                   labels=["model"])
        running = GaugeMetricFamily("hearth_model_running_requests", "Requests the model's worker is serving",
                                    labels=["model"])
        state = GaugeMetricFamily("hearth_model_state", "1 for the state each loaded model's worker is in",
                                  labels=["model", "kind", "state"])
        idle = GaugeMetricFamily("hearth_model_idle_seconds", "Seconds since the model last served a request",
                                 labels=["model"])
        manager = self._manager()
        workers = manager.workers() if manager is not None else {}  # None before the lifespan has built it
        now = time.monotonic()
        for name, worker in workers.items():
            queued.add_metric([name], worker.queued)
            running.add_metric([name], worker.running)
            state.add_metric([name, worker.kind, worker.state], 1)
            idle.add_metric([name], max(0.0, now - worker.last_used) if worker.idle else 0.0)
        yield from (queued, running, state, idle)
        yield from _replica_metrics(workers)
        yield GaugeMetricFamily("hearth_models_loaded", "Model workers loaded or loading", value=len(workers))
        loads = CounterMetricFamily("hearth_model_loads", "Models started loading", labels=["model"])
        unloads = CounterMetricFamily("hearth_model_unloads", "Models unloaded: idle past keep_alive, or evicted "
                                      "to stay under max_loaded_models", labels=["model", "reason"])
        if manager is not None:
            for name, count in manager.loads.items():
                loads.add_metric([name], count)
            for (name, reason), count in manager.unloads.items():
                unloads.add_metric([name, reason], count)
        yield from (loads, unloads)
        yield GaugeMetricFamily("hearth_gpu_memory_bytes", "Bytes of wgpu buffers and textures this process holds",
                                value=gpu_memory_bytes())


class Metrics:
    """The app's metrics and the calls that record them."""

    def __init__(self, manager: Callable[[], ModelManager | None] = lambda: None) -> None:
        """manager: gives the app's ModelManager (None before the lifespan has made it); read when scraped."""
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("hearth_http_requests", "HTTP requests answered", ["route", "method", "status"],
                                registry=r)
        self.latency = Histogram("hearth_http_request_duration_seconds", "Time from request to the response's end "
                                 "(a stream's last event)", ["route", "method"], buckets=LATENCY_BUCKETS, registry=r)
        self.in_flight = Gauge("hearth_http_requests_in_flight", "Requests being served", registry=r)
        self.prompt_tokens = Counter("hearth_prompt_tokens", "Prompt tokens of chat and completion choices",
                                     ["model"], registry=r)
        self.cached_prompt_tokens = Counter("hearth_prompt_tokens_cached", "Prompt tokens of chat and completion "
                                            "choices served from the prefix cache (not prefilled)", ["model"],
                                            registry=r)
        self.generated_tokens = Counter("hearth_generated_tokens", "Tokens generated", ["model"], registry=r)
        self.ttft = Histogram("hearth_time_to_first_token_seconds", "From queueing a generation to the first token "
                              "the model sampled for it (the end of a choice's prefill)", ["model"],
                              buckets=TTFT_BUCKETS, registry=r)
        self.tokens_per_second = Histogram("hearth_generation_tokens_per_second", "A choice's decoding rate: its "
                                           "tokens after the first over the time from its first to its last, as "
                                           "the model made them", ["model"], buckets=RATE_BUCKETS, registry=r)
        self.generations = Counter("hearth_generations", "Generation jobs by how they ended", ["model", "outcome"],
                                   registry=r)
        self.audio_seconds = Counter("hearth_audio_seconds", "Seconds of audio generated (speech) or transcribed",
                                     ["model", "direction"], registry=r)
        r.register(_ModelCollector(manager))
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_cpu_seconds_total, open fds

    # -- reaching the app's metrics from request code ------------------------------------------
    @staticmethod
    def current() -> Metrics | None:
        """The metrics of the app serving the current request (None outside one)."""
        return _current.get()

    def activate(self) -> contextvars.Token[Metrics | None]:
        """Make these the current metrics for the running request (the middleware calls this)."""
        return _current.set(self)

    @staticmethod
    def deactivate(token: contextvars.Token[Metrics | None]) -> None:
        _current.reset(token)

    # -- recording -------------------------------------------------------------------------------
    def observe_request(self, route: str, method: str, status: int, seconds: float) -> None:
        self.requests.labels(route, method, str(status)).inc()
        self.latency.labels(route, method).observe(seconds)


def observe_audio(direction: Literal["generated", "transcribed"], model: str, seconds: float) -> None:
    """Count seconds of audio made by /v1/audio/speech ("generated") or heard by transcriptions ("transcribed")."""
    metrics = Metrics.current()
    if metrics is not None and seconds > 0:
        metrics.audio_seconds.labels(model, direction).inc(seconds)


def meter_audio(job: Callable[[M], Iterator[T]], direction: Literal["generated", "transcribed"], model: str,
                seconds_of: Callable[[T], float]) -> Callable[[M], Iterator[T]]:
    """A worker job (fn(model) -> iterator, as ThreadWorker.stream runs) that counts the audio seconds of each item
    it yields. Call it inside the request (the metrics are found there); the counting runs on the worker thread."""
    metrics = Metrics.current()
    if metrics is None:
        return job
    counter = metrics.audio_seconds.labels(model, direction)

    def metered(loaded: M) -> Iterator[T]:
        items = job(loaded)
        try:
            for item in items:
                counter.inc(max(0.0, seconds_of(item)))
                yield item
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()  # a client that left stops the inner job now, as it would unmetered

    return metered


def meter_job(job: Job, model: str) -> None:
    """Record a generation job's tokens, time to first token and decoding rate as its events are emitted.

    Wraps the job's `emit`, which the worker thread calls for each event. The times are the worker's: when each
    choice's first and last tokens were sampled (ChoiceDone carries them), so neither the rounds a token waits in
    before the host reads it nor text held back by a stop string count. Time to first token is the job's (its
    earliest choice's), observed when the job ends; the rate is each choice's, over the tokens after its first
    (a choice of one token has none).
    """
    metrics = Metrics.current()
    if metrics is None:
        return
    queued = time.perf_counter()
    first: float | None = None
    emit = job.emit

    def metered_emit(event: JobEvent) -> None:
        nonlocal first
        try:
            if isinstance(event, ChoiceDone):
                metrics.prompt_tokens.labels(model).inc(event.prompt_tokens)
                metrics.cached_prompt_tokens.labels(model).inc(event.cached_tokens)
                metrics.generated_tokens.labels(model).inc(event.completion_tokens)
                if event.first_token_at is not None:
                    first = event.first_token_at if first is None else min(first, event.first_token_at)
                if (event.completion_tokens > 1 and event.first_token_at is not None
                        and event.last_token_at is not None and event.last_token_at > event.first_token_at):
                    rate = (event.completion_tokens - 1) / (event.last_token_at - event.first_token_at)
                    metrics.tokens_per_second.labels(model).observe(rate)
            elif isinstance(event, _JobDone | _JobFailed):
                outcome = "completed" if isinstance(event, _JobDone) else "failed"
                if job.cancelled.is_set() and isinstance(event, _JobDone):
                    outcome = "cancelled"
                metrics.generations.labels(model, outcome).inc()
                if first is not None:
                    metrics.ttft.labels(model).observe(max(0.0, first - queued))
        finally:
            emit(event)

    job.emit = metered_emit  # type: ignore[method-assign]
