"""End to end through the server: N streams at once on /v1/completions, against Hearth's server and its peers.

Each request streams a completion of --max-tokens tokens (`ignore_eos`, so every engine generates them all; vLLM and
llama-server take the same field) after a prompt of --prompt-tokens random token ids (seeded, and different for
every request, so no engine's prefix cache serves one request from another's); greedy. A round sends --streams
requests at once; each engine gets the same --warmup untimed rounds and then --reps timed ones at each stream count,
the engines' rounds alternated so that a load that changes meanwhile falls on all. Per round:

- aggregate tok/s: all streams' tokens over the round's time (the first request sent to the last stream ended);
- per-stream tok/s: a stream's tokens after its first over the time from its first to its last (median of streams);
- TTFT p50 and p90 over the round's streams (request sent to the first text);
- inter-token gaps: the times between a stream's text chunks, p50 and p90 of all streams', and the share under 1 ms
  (tokens that arrive in bursts: several steps per submission, or chunks written together).

The table shows each as median (min-max) over the rounds (bench/timing.py), and a peer's aggregate and TTFT as
ratios against the first engine. Hearth's server is started here (`python -m server`, the settings given with
--env, from /ready on) unless only --url targets are named; a target is any OpenAI-compatible server, e.g.
llama-server built by bench/llama_cpp_cuda.sh:

    .venv/bin/python bench/serve.py [--model PATH] [--streams 1,4,32] [--prompt-tokens 128] [--max-tokens 128]
        [--hearth] [--url llama-server=http://127.0.0.1:8080 ...] [--env HEARTH_STEPS_PER_SUBMIT=1 ...]
        [--warmup 1] [--reps 5] [--json out.json]

This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.timing import (  # noqa: E402
    ROOT,
    add_timing_args,
    cell,
    check_timing_args,
    markdown_table,
    ratio,
    run_info,
    summary,
    write_json,
)

TOKEN_IDS = (1000, 30000)  # prompt ids are drawn from here: ordinary tokens in any vocabulary of 32k or more
READY_TIMEOUT_S = 1800.0  # a model's load and compile on a software adapter with the CPU shared takes minutes


@dataclass
class Stream:
    """One request's timeline (perf_counter seconds)."""

    sent: float
    chunks: list[float] = field(default_factory=list)  # arrival of each chunk that carried text
    tokens: int = 0  # completion tokens (the usage the server reports, else the text chunks)


@dataclass
class Round:
    """One round of N streams sent together."""

    streams: list[Stream]
    ended: float

    @property
    def tokens(self) -> int:
        return sum(s.tokens for s in self.streams)

    def aggregate(self) -> float:
        return self.tokens / (self.ended - min(s.sent for s in self.streams))

    def per_stream(self) -> float:
        rates = [(s.tokens - 1) / (s.chunks[-1] - s.chunks[0]) for s in self.streams
                 if len(s.chunks) > 1 and s.chunks[-1] > s.chunks[0]]
        return statistics.median(rates) if rates else float("nan")

    def ttfts(self) -> list[float]:
        return [s.chunks[0] - s.sent for s in self.streams if s.chunks]

    def gaps(self) -> np.ndarray:
        return np.concatenate([np.diff(s.chunks) for s in self.streams] or [np.zeros(0)])


def metrics(round_: Round) -> dict[str, float]:
    """A round's figures (module docstring), in seconds and tokens a second."""
    ttft, gaps = np.array(round_.ttfts()), round_.gaps()
    return {
        "aggregate_tok_s": round_.aggregate(),
        "per_stream_tok_s": round_.per_stream(),
        "ttft_p50_s": float(np.percentile(ttft, 50)), "ttft_p90_s": float(np.percentile(ttft, 90)),
        "gap_p50_s": float(np.percentile(gaps, 50)) if gaps.size else float("nan"),
        "gap_p90_s": float(np.percentile(gaps, 90)) if gaps.size else float("nan"),
        "gaps_under_1ms": float(np.mean(gaps < 1e-3)) if gaps.size else float("nan"),
    }


async def one_stream(client: httpx.AsyncClient, url: str, model: str, prompt: list[int], max_tokens: int) -> Stream:
    """Send one streamed completion and time its chunks."""
    body = {"model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0.0, "stream": True,
            "ignore_eos": True, "stream_options": {"include_usage": True}}
    stream = Stream(time.perf_counter())
    usage = None
    async with client.stream("POST", f"{url}/v1/completions", json=body) as response:
        if response.status_code != 200:
            raise RuntimeError(f"{url}: HTTP {response.status_code}: {(await response.aread()).decode()[:500]}")
        async for line in response.aiter_lines():
            now = time.perf_counter()
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                raise RuntimeError(f"{url}: the stream failed: {chunk['error']}")
            if any(choice.get("text") for choice in chunk.get("choices") or []):
                stream.chunks.append(now)
            usage = chunk.get("usage") or usage
    stream.tokens = int(usage["completion_tokens"]) if usage else len(stream.chunks)
    if stream.tokens != max_tokens:
        print(f"warning: {url} gave {stream.tokens} tokens of {max_tokens}", file=sys.stderr)
    return stream


async def one_round(url: str, model: str, prompts: list[list[int]], max_tokens: int) -> Round:
    """All prompts' streams at once."""
    limits = httpx.Limits(max_connections=len(prompts), max_keepalive_connections=0)
    async with httpx.AsyncClient(timeout=httpx.Timeout(None), limits=limits) as client:
        streams = await asyncio.gather(*(one_stream(client, url, model, p, max_tokens) for p in prompts))
    return Round(list(streams), time.perf_counter())


def model_id(url: str) -> str:
    """The first model the server lists (what requests name)."""
    return httpx.get(f"{url}/v1/models", timeout=60).json()["data"][0]["id"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class HearthServer:
    """`python -m server` on a free loopback port with the model and settings given, until stopped."""

    def __init__(self, model: str, env: dict[str, str], log_path: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self.env = {"HEARTH_HOST": "127.0.0.1", "HEARTH_PORT": str(self.port), "HEARTH_OLLAMA": "false", **env}
        if model != "gemma-3-270m":
            self.env["HEARTH_MODELS"] = f"{Path(model).stem}={model}"
        self._log = log_path.open("w")
        started = time.perf_counter()
        self.process = subprocess.Popen([sys.executable, "-m", "server"], cwd=ROOT, env={**os.environ, **self.env},
                                        stdout=self._log, stderr=subprocess.STDOUT)
        while True:  # /ready answers 200 once the model is loaded (and its pipelines compiled)
            if self.process.poll() is not None:
                raise RuntimeError(f"Hearth's server exited ({self.process.returncode}); see {log_path}")
            if time.perf_counter() - started > READY_TIMEOUT_S:
                self.stop()
                raise RuntimeError(f"Hearth's server was not ready within {READY_TIMEOUT_S:.0f} s; see {log_path}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.5)
        self.ready_s = time.perf_counter() - started

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
        self._log.close()


def parse_targets(items: list[str]) -> list[tuple[str, str]]:
    """NAME=URL (or a bare URL, named by its host and port) as (name, url without a trailing slash)."""
    targets = []
    for item in items:
        name, sep, url = item.partition("=")
        if not sep or "://" in name:
            name, url = item.split("://", 1)[-1].rstrip("/"), item
        targets.append((name, url.rstrip("/")))
    return targets


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the rounds, print the table (and write JSON if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m", help="the GGUF file Hearth's server loads (default: the "
                        "shipped Gemma 3 270M Q4_K_M); a --url target serves its own")
    parser.add_argument("--streams", default="1,4,32", help="stream counts, comma-separated (1,4,32)")
    parser.add_argument("--prompt-tokens", type=int, default=128, help="prompt length in tokens (128)")
    parser.add_argument("--max-tokens", type=int, default=128, help="tokens each stream generates (128)")
    parser.add_argument("--hearth", action="store_true", help="start Hearth's server too when --url is given")
    parser.add_argument("--url", action="append", default=[], metavar="[NAME=]URL",
                        help="an OpenAI-compatible server to load (repeatable), e.g. llama-server=http://127.0.0.1:8080")
    parser.add_argument("--env", action="append", default=[], metavar="KEY=VALUE",
                        help="a setting of Hearth's server (repeatable), e.g. HEARTH_STEPS_PER_SUBMIT=1")
    parser.add_argument("--server-log", type=Path, help="Hearth's server log (default: a temporary file)")
    parser.add_argument("--seed", type=int, default=0, help="of the prompts' token ids (0)")
    add_timing_args(parser, warmup=1)
    args = parser.parse_args(argv)
    check_timing_args(parser, args)
    try:
        counts = [int(n) for n in args.streams.split(",") if n.strip()]
    except ValueError:
        parser.error("--streams takes stream counts such as 1,4,32")
    if not counts or min(counts) < 1 or args.prompt_tokens < 1 or args.max_tokens < 2:
        parser.error("--streams must be at least 1, --prompt-tokens at least 1 and --max-tokens at least 2")
    env = dict(item.split("=", 1) for item in args.env if "=" in item)

    targets = parse_targets(args.url)
    hearth = None
    if args.hearth or not targets:
        log_path = args.server_log or Path(tempfile.mkdtemp(prefix="hearth-serve-")) / "server.log"
        print(f"starting Hearth's server ({args.model}; log {log_path})", file=sys.stderr, flush=True)
        hearth = HearthServer(args.model, env, log_path)
        print(f"ready in {hearth.ready_s:.1f} s", file=sys.stderr, flush=True)
        targets.insert(0, ("hearth", hearth.url))
    try:
        results = run(targets, counts, args)
    finally:
        if hearth is not None:
            hearth.stop()

    print(f"{args.prompt_tokens} prompt tokens, {args.max_tokens} generated (ignore_eos), greedy, streaming "
          f"/v1/completions; median (min-max) of {args.reps} rounds after {args.warmup} untimed, every engine alike\n")
    head = ["engine", "streams", "aggregate tok/s", "per-stream tok/s", "TTFT p50 (ms)", "TTFT p90 (ms)",
            "gap p50 (ms)", "gap p90 (ms)", "gaps < 1 ms", "aggregate vs first", "TTFT p90 first/this"]
    rows = []
    first = targets[0][0]
    for n in counts:
        for name, _ in targets:
            m = results[name][str(n)]["timed"]
            base = results[first][str(n)]["timed"]
            agg, ttft = ratio(m["aggregate_tok_s"], base["aggregate_tok_s"]), ratio(base["ttft_p90_s"],
                                                                                     m["ttft_p90_s"])
            rows.append([name, str(n), cell(m["aggregate_tok_s"]), cell(m["per_stream_tok_s"]),
                         cell(m["ttft_p50_s"], scale=1e3), cell(m["ttft_p90_s"], scale=1e3),
                         cell(m["gap_p50_s"], scale=1e3), cell(m["gap_p90_s"], scale=1e3),
                         cell(m["gaps_under_1ms"], 2, scale=100.0) + " %",
                         "-" if name == first else f"{agg:.2f}x", "-" if name == first else f"{ttft:.2f}x"])
    print(markdown_table(head, rows))
    payload = {**run_info("serve", args.warmup, args.reps), "prompt_tokens": args.prompt_tokens,
               "max_tokens": args.max_tokens, "streams": counts, "seed": args.seed,
               "engines": {name: {"url": url} for name, url in targets},
               "results": {name: {n: {"timed": {k: summary(v) for k, v in r["timed"].items()},
                                      "warmup": r["warmup"]} for n, r in per.items()} for name, per in results.items()}}
    if hearth is not None:
        payload["engines"]["hearth"].update({"model": args.model, "env": hearth.env, "ready_s": hearth.ready_s})
    write_json(args.json, payload)
    return 0


def run(targets: list[tuple[str, str]], counts: list[int], args: argparse.Namespace) -> dict[str, Any]:
    """Every engine's warm-up and timed rounds at each stream count, the engines alternated round by round; per
    engine and count: each figure's per-round values (timed) and the warm-up rounds' figures."""
    rng = np.random.default_rng(args.seed)
    models = {name: model_id(url) for name, url in targets}
    results: dict[str, dict[str, Any]] = {name: {} for name, _ in targets}
    for n in counts:
        for name, _ in targets:
            results[name][str(n)] = {"timed": {}, "warmup": []}
        for i in range(args.warmup + args.reps):
            timed = i >= args.warmup
            prompts = [[int(t) for t in rng.integers(*TOKEN_IDS, args.prompt_tokens)] for _ in range(n)]
            for name, url in targets:  # the same prompts for every engine
                round_ = asyncio.run(one_round(url, models[name], prompts, args.max_tokens))
                figures = metrics(round_)
                slot = results[name][str(n)]
                if timed:
                    for key, value in figures.items():
                        slot["timed"].setdefault(key, []).append(value)
                else:
                    slot["warmup"].append(figures)
                print(f"{name} {n} streams {'round' if timed else 'warm-up'} {i + 1}: "
                      f"{figures['aggregate_tok_s']:,.1f} tok/s aggregate, TTFT p90 "
                      f"{1e3 * figures['ttft_p90_s']:,.0f} ms, {100 * figures['gaps_under_1ms']:.0f} % gaps < 1 ms",
                      file=sys.stderr, flush=True)
    return results


if __name__ == "__main__":
    sys.exit(main())
