"""Aggregate decode tok/s of one chat model served by 1 replica against 2 replicas (one per GPU), in one run.

Both configurations are loaded side by side in one process, as the server's model manager builds them
(server/replicas.py's ReplicaSet, one ChatWorker per adapter, jobs routed to the shortest queue); each timed run
sends `--streams` concurrent requests (distinct prompts of ~20 tokens, greedy: sampled on the GPU; a stream that
samples an end-of-sequence id ends early, and the tokens printed say so) through the same path the API's requests
take (ReplicaSet.submit and the job's events on the event loop), without HTTP. Runs alternate between the
configurations (warm-up runs first, the same number for each), so a clock or thermal drift affects both alike.

Aggregate decode tok/s of a run: the tokens sampled after each stream's first, over the time from the first stream's
first token to the last stream's last (the workers' own times); the wall time from submitting to the last event is
printed too. Every sample, their median (min-max), the ratio of medians (the acceptance figure: >= 1.8 on two GPUs)
and how the requests spread over the replicas are printed; `--json` keeps them with the run's provenance.

    python scripts/make_synthetic_gguf.py --tokenizer ggml-vocab-llama-bpe.gguf --shape llama3.2-1b /tmp/l1b.gguf
    python bench/replicas.py /tmp/l1b.gguf                      # 1 replica on GPU 0 vs replicas on GPUs 0 and 1
    python bench/replicas.py gemma-3-270m --one 0 --two 0,0 --streams 4 --tokens 8 --warmup 1 --reps 1  # a CPU
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench import timing  # noqa: E402
from config.settings import load_settings  # noqa: E402
from gpu.device import list_adapters, resolve_adapters  # noqa: E402
from models.registry import ModelEntry  # noqa: E402
from models.text.sampler import SamplingParams  # noqa: E402
from server.chat_worker import load_on_own_device  # noqa: E402
from server.jobs import ChoiceDone, ChoiceSpec, Job  # noqa: E402
from server.replicas import ReplicaSet  # noqa: E402


def build(path: str, adapters: str, max_batch: int, context: int) -> ReplicaSet:
    """A ReplicaSet of the model on these adapters ("0", "0,1"), loading (start() called)."""
    settings = load_settings(env={"HEARTH_OLLAMA": "false"}, overrides={"limits.max_batch": max_batch})
    entry = ModelEntry(id=Path(path).stem, source=path, key=path, owned_by="hearth", created=0,
                       context_length=context)
    replicas = ReplicaSet.for_entry(entry, load_on_own_device, settings, max_queue=max(64, 2 * max_batch),
                                    warm_up=True, adapters=resolve_adapters(adapters.split(",")))
    replicas.start()
    return replicas


async def run_once(replicas: ReplicaSet, streams: int, tokens: int) -> dict[str, float]:
    """One timed run: `streams` concurrent greedy generations of `tokens` tokens each."""
    tokenizer = replicas.model.tokenizer
    # Plain greedy, sampled on the GPU as the server samples it: a logit_bias (to ban end-of-sequence ids) would send
    # every step's logits to the CPU sampler instead, which halves the figure on an H200.
    sampling = SamplingParams(temperature=0.0)
    ends: list[ChoiceDone] = []

    async def stream(i: int) -> None:
        ids = tokenizer.encode(f"Request {i} of the benchmark: write a long story about the number {i}.")
        job = Job([ChoiceSpec(0, ids, sampling, tokens)])
        async for event in replicas.submit(job, 1).events():
            if isinstance(event, ChoiceDone):
                ends.append(event)

    started = time.perf_counter()
    await asyncio.gather(*(stream(i) for i in range(streams)))
    wall = time.perf_counter() - started
    firsts = [e.first_token_at for e in ends if e.first_token_at is not None]
    lasts = [e.last_token_at for e in ends if e.last_token_at is not None]
    decoded = sum(max(0, e.completion_tokens - 1) for e in ends)
    span = max(lasts) - min(firsts) if firsts and lasts else float("nan")
    return {"decode_tok_s": decoded / span if span > 0 else float("nan"), "wall_s": wall,
            "tokens": float(sum(e.completion_tokens for e in ends))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", help="a GGUF path, or 'gemma-3-270m' (the shipped model)")
    parser.add_argument("--one", default="0", help="adapters of the single-replica configuration (default 0)")
    parser.add_argument("--two", default="0,1", help="adapters of the replicated one (default 0,1; '0,0' shares one "
                        "adapter, which only checks that the script runs)")
    parser.add_argument("--streams", type=int, default=32, help="concurrent requests per run (32)")
    parser.add_argument("--tokens", type=int, default=128, help="tokens each request decodes (128)")
    parser.add_argument("--max-batch", type=int, default=32, help="sequences per replica's batch (32)")
    parser.add_argument("--context", type=int, default=512, help="context length of each sequence (512)")
    timing.add_timing_args(parser, warmup=3)
    args = parser.parse_args()
    timing.check_timing_args(parser, args)
    for adapter in list_adapters():
        print(f"adapter {adapter.index}: {adapter.name} ({adapter.adapter_type})", flush=True)
    configs = {f"1 replica ({args.one})": args.one, f"{len(args.two.split(','))} replicas ({args.two})": args.two}
    sets: dict[str, ReplicaSet] = {}
    try:
        for name, adapters in configs.items():
            started = time.perf_counter()
            sets[name] = build(args.model, adapters, args.max_batch, args.context)
            asyncio.run(sets[name].wait_ready())
            print(f"{name}: loaded and warmed up in {time.perf_counter() - started:.1f} s", flush=True)
        samples: dict[str, dict[str, list[float]]] = {name: {} for name in sets}
        for rep in range(args.warmup + args.reps):
            for name, replicas in sets.items():  # alternating, so that drift touches both alike
                result = asyncio.run(run_once(replicas, args.streams, args.tokens))
                label = "warm-up" if rep < args.warmup else f"rep {rep - args.warmup + 1}"
                print(f"  {label:8} {name}: {result['decode_tok_s']:,.1f} decode tok/s, {result['wall_s']:.2f} s "
                      f"wall, {result['tokens']:.0f} tokens", flush=True)
                if rep >= args.warmup:
                    for key, value in result.items():
                        samples[name].setdefault(key, []).append(value)
        one, two = sets
        head = ["configuration", "aggregate decode tok/s", "wall s", "requests per replica"]
        rows = [[name, timing.cell(samples[name]["decode_tok_s"]), timing.cell(samples[name]["wall_s"], 2),
                 ", ".join(f"#{r.replica} {r.requests}" for r in replicas.status())]
                for name, replicas in sets.items()]
        speedup = timing.ratio(samples[two]["decode_tok_s"], samples[one]["decode_tok_s"])
        print(f"\n{Path(args.model).name}: {args.streams} concurrent streams x {args.tokens} tokens; median (min-max) "
              f"of {args.reps} runs after {args.warmup} untimed per configuration")
        print(timing.markdown_table(head, rows))
        print(f"\n{two} over {one}: {speedup:.2f}x the aggregate decode tok/s (ratio of medians)", flush=True)
        payload: dict[str, Any] = {**timing.run_info("replicas", args.warmup, args.reps), "model": args.model,
                                   "streams": args.streams, "tokens": args.tokens, "max_batch": args.max_batch,
                                   "adapters": [a.name for a in list_adapters()], "speedup": speedup,
                                   "configurations": {name: {"adapters": configs[name],
                                                             **{k: timing.summary(v) for k, v in samples[name].items()}}
                                                      for name in sets}}
        timing.write_json(args.json, payload)
    finally:
        for replicas in sets.values():
            replicas.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
