"""Soak: concurrent clients mix every endpoint, with cancellations, against `python -m server` for a bounded time;
no request is lost, none fails, and the server's memory is flat after warm-up.

By default (CI) every family runs on its fake (tests/server/all_fakes.py) so the server's own code is what soaks:
queues, batches, streams, cancellation, middleware, metrics, logs. HEARTH_SOAK_REAL=1 serves the real default
models on the real adapter (lavapipe here) and also watches wgpu's buffer memory (or a comma list of the
families to serve for real: chat, embeddings, speech, transcription). Sizes:
HEARTH_SOAK_SECONDS (default 40), HEARTH_SOAK_CLIENTS (default 8), after one request of each kind has loaded
every model. The figures are printed (pytest -s).
"""

from __future__ import annotations

import io
import os
import random
import threading
import time
import wave
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.server.all_fakes import fake_config_toml
from tests.server.live_server import SubprocessServer

# Families served by their real models: "1" for all four, or a comma list of chat, embeddings, speech,
# transcription (Kokoro takes minutes a sentence on lavapipe, so a long CPU run leaves speech on its fake).
_REAL = os.environ.get("HEARTH_SOAK_REAL", "")
REAL_FAMILIES = {"chat", "embeddings", "speech", "transcription"} if _REAL == "1" else set(filter(None,
                                                                                                _REAL.split(",")))
REAL = bool(REAL_FAMILIES)
SECONDS = float(os.environ.get("HEARTH_SOAK_SECONDS", "40"))
CLIENTS = int(os.environ.get("HEARTH_SOAK_CLIENTS", "8"))
WARM_UP_FRACTION = 0.25  # memory is compared from the end of the first quarter of the run to its end
# Allowed RSS growth after warm-up. CPython's allocator keeps freed arenas and glibc's malloc keeps per-thread
# heaps, so a flat server still moves by a few MB; a leak of one request's job, stream or response (tens of KB) on
# every one of the thousands of requests here exceeds this.
RSS_TOLERANCE = 24 << 20
GPU_TOLERANCE = 8 << 20  # wgpu buffers are pooled: after warm-up, allocation should not grow at all beyond noise


def wav(seconds: float, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(rate)
        out.writeframes((np.sin(np.arange(int(seconds * rate)) * 0.05) * 8000).astype(np.int16).tobytes())
    return buffer.getvalue()


@dataclass
class Tally:
    """What the clients saw, shared between their threads."""

    sent: Counter[str] = field(default_factory=Counter)
    completed: Counter[str] = field(default_factory=Counter)
    cancelled: Counter[str] = field(default_factory=Counter)
    failures: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, counter: Counter[str], kind: str) -> None:
        with self.lock:
            counter[kind] += 1


CHAT_MODEL = "gemma-3-270m"
MAX_TOKENS = 8 if "chat" in REAL_FAMILIES else 40
UPLOAD = wav(1.0)
Op = Callable[[httpx.Client, random.Random], bool]  # True when it ran to its end, False when it cancelled


def chat(client: httpx.Client, rng: random.Random) -> bool:
    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": f"Say something {rng.random()}"}],
            "max_tokens": MAX_TOKENS, "temperature": rng.choice([0, 0.8])}
    reply = client.post("/v1/chat/completions", json=body)
    reply.raise_for_status()
    assert reply.json()["choices"][0]["finish_reason"] in ("stop", "length")
    return True


def chat_stream(client: httpx.Client, rng: random.Random, cancel_after: int | None = None) -> bool:
    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Tell me a story"}],
            "max_tokens": MAX_TOKENS, "stream": True, "n": rng.choice([1, 2])}
    with client.stream("POST", "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        lines = [line for line in _events(response.iter_lines(), cancel_after)]
    if cancel_after is not None and len(lines) >= cancel_after:
        return False  # the client left midway: the server must cancel the generation and forget it
    assert lines[-1] == "data: [DONE]" and sum('"finish_reason":"' in line for line in lines) == body["n"], lines[-3:]
    return True


def _events(lines: Iterator[str], cancel_after: int | None) -> Iterator[str]:
    for count, line in enumerate((line for line in lines if line.startswith("data: ")), 1):
        yield line
        if cancel_after is not None and count >= cancel_after:
            return


def chat_cancelled(client: httpx.Client, rng: random.Random) -> bool:
    return chat_stream(client, rng, cancel_after=rng.randint(1, 4))


def chat_timeout(client: httpx.Client, rng: random.Random) -> bool:
    """A non-streamed request whose client gives up: the server sees the disconnect and cancels."""
    body = {"model": CHAT_MODEL, "messages": [{"role": "user", "content": "Long answer please"}],
            "max_tokens": MAX_TOKENS * 4}
    try:
        patience = 0.5 if "chat" in REAL_FAMILIES else 0.05
        client.post("/v1/chat/completions", json=body, timeout=patience).raise_for_status()
    except httpx.TimeoutException:
        return False
    return True


def completion(client: httpx.Client, rng: random.Random) -> bool:
    reply = client.post("/v1/completions", json={"model": CHAT_MODEL, "prompt": ["a", "bc"], "max_tokens": 4})
    reply.raise_for_status()
    return len(reply.json()["choices"]) == 2


def embeddings(client: httpx.Client, rng: random.Random) -> bool:
    inputs = [f"sentence {rng.randint(0, 10**6)}" for _ in range(rng.randint(1, 16))]
    reply = client.post("/v1/embeddings", json={"model": "text-embedding-3-small", "input": inputs})
    reply.raise_for_status()
    return len(reply.json()["data"]) == len(inputs)


def speech(client: httpx.Client, rng: random.Random) -> bool:
    body = {"model": "tts-1", "input": "Hello there. How are you today?", "voice": "alloy",
            "response_format": rng.choice(["wav", "pcm", "mp3"])}
    reply = client.post("/v1/audio/speech", json=body)
    reply.raise_for_status()
    return len(reply.content) > 1000


def speech_cancelled(client: httpx.Client, rng: random.Random) -> bool:
    body = {"model": "tts-1", "input": "One sentence. Another sentence. And a third one, to stream.",
            "voice": "alloy", "response_format": "pcm", "stream_format": "audio"}
    with client.stream("POST", "/v1/audio/speech", json=body) as response:
        response.raise_for_status()
        next(response.iter_bytes())
    return False


def transcription(client: httpx.Client, rng: random.Random) -> bool:
    reply = client.post("/v1/audio/transcriptions", files={"file": ("a.wav", UPLOAD, "audio/wav")},
                        data={"model": "whisper-1", "response_format": rng.choice(["json", "text", "verbose_json"])})
    reply.raise_for_status()
    return True


def models(client: httpx.Client, rng: random.Random) -> bool:
    client.get("/v1/models").raise_for_status()
    return True


# Weights: mostly chat (the busiest path), every other endpoint often enough to soak too.
OPS: dict[str, tuple[Op, int]] = {
    "chat": (chat, 4), "chat_stream": (chat_stream, 4), "chat_cancelled": (chat_cancelled, 3),
    "chat_timeout": (chat_timeout, 1), "completion": (completion, 2), "embeddings": (embeddings, 3),
    "speech": (speech, 2), "speech_cancelled": (speech_cancelled, 1), "transcription": (transcription, 2),
    "models": (models, 1),
}


def client_loop(url: str, seed: int, deadline: float, tally: Tally) -> None:
    rng = random.Random(seed)
    names, weights = list(OPS), [weight for _, weight in OPS.values()]
    with httpx.Client(base_url=url, timeout=600 if REAL else 60) as client:
        while time.monotonic() < deadline:
            kind = rng.choices(names, weights)[0]
            tally.add(tally.sent, kind)
            try:
                finished = OPS[kind][0](client, rng)
            except Exception as error:  # noqa: BLE001 - every failure is counted and reported, none stops the run
                with tally.lock:
                    tally.failures.append(f"{kind}: {type(error).__name__}: {error}"[:300])
                continue
            tally.add(tally.completed if finished else tally.cancelled, kind)


def scrape(url: str) -> dict[str, float]:
    text = httpx.get(f"{url}/metrics", timeout=30).text
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SubprocessServer]:
    folder = tmp_path_factory.mktemp("soak")
    # keep_alive 1h: every model stays loaded through the run (a real model loading for minutes in the warm-up would
    # otherwise outlive the 5 minute default of the others), so memory is compared with all of them in.
    env = {"HEARTH_OLLAMA": "false", "HEARTH_LOG_LEVEL": "warning", "HEARTH_KEEP_ALIVE": "1h"}
    config = folder / "hearth.toml"
    config.write_text(fake_config_toml(exclude=REAL_FAMILIES))
    env |= {"HEARTH_CONFIG": str(config)}
    if "chat" not in REAL_FAMILIES:
        env |= {"HEARTH_MODEL_LOADER": "tests.server.all_fakes:load_soak_chat"}
    if REAL:
        env |= {"HEARTH_REQUEST_TIMEOUT": "0"}  # a real model's first load takes minutes on a shared lavapipe
    srv = SubprocessServer(folder / "server.log", env=env).start(ready_timeout=900)
    yield srv
    srv.stop()


@pytest.mark.heavy
def test_soak_mixed_endpoints_with_cancellations(server: SubprocessServer) -> None:
    url = server.url
    # Warm-up: each operation once, so every model is loaded (on demand) and compiled before the clock starts.
    with httpx.Client(base_url=url, timeout=1800) as client:
        for op, _ in OPS.values():
            op(client, random.Random(0))
    tally = Tally()
    start = time.monotonic()
    deadline = start + SECONDS
    threads = [threading.Thread(target=client_loop, args=(url, seed, deadline, tally)) for seed in range(CLIENTS)]
    for thread in threads:
        thread.start()
    samples: list[tuple[float, int, float]] = []  # (seconds, RSS bytes, wgpu bytes)
    while any(thread.is_alive() for thread in threads):
        samples.append((time.monotonic() - start, server.rss_bytes(), scrape(url).get("hearth_gpu_memory_bytes", 0)))
        time.sleep(1.0)
    for thread in threads:
        thread.join()
    # Nothing left behind: every model's queue and batch empty again.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        states = httpx.get(f"{url}/health").json()["models"].values()
        if all(s["queued"] == 0 and s["running"] == 0 for s in states):
            break
        time.sleep(0.2)
    end_rss, end_gpu = server.rss_bytes(), scrape(url).get("hearth_gpu_memory_bytes", 0)
    warm = [s for s in samples if s[0] >= SECONDS * WARM_UP_FRACTION]
    warm_rss, warm_gpu = warm[0][1], warm[0][2]
    peak_rss = max(s[1] for s in warm)
    sent, done, cancelled = sum(tally.sent.values()), sum(tally.completed.values()), sum(tally.cancelled.values())
    real = ", ".join(sorted(REAL_FAMILIES)) or "none"
    print(f"\nsoak (real models: {real}; the rest on fakes): {SECONDS:.0f} s, {CLIENTS} clients, {sent} requests "
          f"({sent / SECONDS:.1f}/s): {done} completed, {cancelled} cancelled by the client, "
          f"{len(tally.failures)} errors")
    print("  by kind: " + ", ".join(f"{kind} {tally.sent[kind]}" for kind in OPS))
    print(f"  RSS: {samples[0][1] / 2**20:.1f} MiB at start, {warm_rss / 2**20:.1f} MiB after warm-up, "
          f"{end_rss / 2**20:.1f} MiB at the end (peak {peak_rss / 2**20:.1f} MiB)")
    print(f"  wgpu memory: {warm_gpu / 2**20:.1f} MiB after warm-up, {end_gpu / 2**20:.1f} MiB at the end")
    for failure in tally.failures[:10]:
        print("  error:", failure)
    assert tally.failures == []
    assert sent == done + cancelled  # no request lost: each one answered in full or left by its client
    assert all(tally.completed[kind] > 0 for kind, (_, weight) in OPS.items() if weight > 1 and "cancel" not in kind)
    assert all(s["queued"] == 0 and s["running"] == 0 for s in states), states
    assert end_rss - warm_rss < RSS_TOLERANCE, (warm_rss, end_rss)
    assert end_gpu - warm_gpu < GPU_TOLERANCE, (warm_gpu, end_gpu)
    log = Path(server.log_path).read_text(errors="replace")
    assert "Traceback" not in log, log[-3000:]
