"""Prefix caching's gain: time to first token of a prompt whose long prefix (a system prompt, a few-shot header) an
earlier request had, with the KV pool's prefix cache on against off, on the same model in the same run (issue 41
aims at >= 5x for a 2,000-token prefix).

Each request is the shared --prefix-tokens tokens followed by --suffix-tokens of its own (a different question each
time), run through a BatchGenerator as the chat worker runs it, greedy, for one token; time to first token is from
add() to the step that hands out that token. With the cache on, every request after the first finds the prefix's
whole pages cached and prefills only the rest (from the prefix's last whole page on); off, it prefills all. Both
get the same --warmup untimed requests (after one with the cache on that publishes the prefix) and --reps timed
ones, alternated (each request off, then on) so that a load that changes during the benchmark falls on both; the
table shows median (min-max) and off/on as the ratio of medians (bench/timing.py), and in how many requests the
first token was the same either way (a check: only a near-tie of two logits may part them).

    .venv/bin/python bench/prefix_cache.py [--model PATH] [--prefix-tokens 2000] [--suffix-tokens 16]
        [--warmup 1] [--reps 5] [--json out.json]

This is a benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.timing import add_timing_args, cell, check_timing_args, ratio, run_info, summary, write_json  # noqa: E402

if TYPE_CHECKING:
    from models.text.batch import BatchGenerator


def first_token(generator: BatchGenerator, prompt: list[int], cache: bool) -> tuple[float, int, int]:
    """One request of one token with the prefix cache on or off: its time to first token (s), the token and the
    prompt tokens it found cached."""
    from models.text.batch import EndEvent, TokenEvent
    from models.text.sampler import SamplingParams

    generator.pool.prefix_caching = cache
    before = generator.cached_tokens
    start = time.perf_counter()
    generator.add("request", prompt, SamplingParams(temperature=0.0), 1, stop_ids=frozenset())
    ttft, token = 0.0, -1
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent) and not ttft:
                ttft, token = time.perf_counter() - start, event.token.id
            elif isinstance(event, EndEvent) and event.error is not None:
                raise RuntimeError(f"the request failed: {event.error}")
    return ttft, token, generator.cached_tokens - before


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, time both, print the table (and write JSON if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m", help="GGUF file or model name (default: the shipped "
                        "Gemma 3 270M Q4_K_M)")
    parser.add_argument("--prefix-tokens", type=int, default=2000, help="the shared prefix's length (2000)")
    parser.add_argument("--suffix-tokens", type=int, default=16, help="each request's own tokens after it (16)")
    parser.add_argument("--int8-activations", action="store_true", help="load with int8_activations")
    add_timing_args(parser, warmup=1)
    args = parser.parse_args(argv)
    check_timing_args(parser, args)
    if args.prefix_tokens < 1 or args.suffix_tokens < 1:
        parser.error("--prefix-tokens and --suffix-tokens must be at least 1")

    from gpu.device import default_device
    from models.text.batch import BatchGenerator
    from models.text.engine import load_text_model

    device = default_device()
    detail = f"{device.name} ({device.adapter_type}, {device.backend})"
    n_prompt = args.prefix_tokens + args.suffix_tokens
    model = load_text_model(args.model, device=device, max_batch=1, context_length=n_prompt + 64,
                            int8_activations=args.int8_activations)
    rng = np.random.default_rng(0)
    low = 10  # clear of the special tokens at the vocabulary's start
    prefix = [int(t) for t in rng.integers(low, model.vocab_size, args.prefix_tokens)]
    # one question per request, each asked with the cache off, then on (off publishes nothing, so on finds the
    # prefix alone cached, as a new question behind a known system prompt does)
    prompts = [prefix + [int(t) for t in rng.integers(low, model.vocab_size, args.suffix_tokens + 1)]
               for _ in range(1 + args.warmup + args.reps)]
    generator = BatchGenerator(model)
    first_token(generator, prompts.pop()[:-1], True)  # an earlier request with the prefix, untimed: it publishes it
    samples: dict[bool, list[float]] = {False: [], True: []}
    cached: list[int] = []
    agree = 0
    for i, prompt in enumerate(prompts):
        timed = i >= args.warmup
        tokens = []
        for cache in (False, True):
            ttft, token, hit = first_token(generator, prompt, cache)
            tokens.append(token)
            if timed:
                samples[cache].append(ttft)
                cached += [hit] if cache else []
            print(f"{'run' if timed else 'warm-up'} {i + 1}: cache {'on ' if cache else 'off'} "
                  f"{1e3 * ttft:,.0f} ms, {hit} tokens cached", file=sys.stderr, flush=True)
        agree += tokens[0] == tokens[1]

    print(f"model: {model.path}")
    print(f"device: {detail}")
    print(f"{args.prefix_tokens}-token shared prefix, {args.suffix_tokens} tokens of each request's own; time to "
          f"first token, median (min-max) of {args.reps} requests after {args.warmup} untimed, both alike; "
          f"{min(cached)}-{max(cached)} prompt tokens cached; the same first token either way in {agree} of "
          f"{len(prompts)} requests\n")
    off_over_on = ratio(samples[False], samples[True])
    print(f"| TTFT cache off (ms) | TTFT cache on (ms) | off/on |\n|---|---|---|\n"
          f"| {cell(samples[False], scale=1e3)} | {cell(samples[True], scale=1e3)} | {off_over_on:.1f}x |")
    write_json(args.json, {**run_info("prefix_cache", args.warmup, args.reps), "model": str(model.path),
                           "device": detail, "prefix_tokens": args.prefix_tokens, "suffix_tokens": args.suffix_tokens,
                           "ttft_off_s": summary(samples[False]), "ttft_on_s": summary(samples[True]),
                           "cached_tokens": cached, "off_over_on": off_over_on, "same_first_token": agree,
                           "requests": len(prompts)})
    return 0


if __name__ == "__main__":
    sys.exit(main())
