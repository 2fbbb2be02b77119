"""Prompt attention benchmark: GPU time of attention.wgsl (the kernel prompts use today) and of
attention_prompt.wgsl (gpu/ops/attention_prompt.py) on the same inputs, for Gemma 3's head shapes.

Cases per model: a 512-token prompt at position 0; a 2048-token prompt in one step; and the last
512-token chunk of a 2048-token prompt (positions 1536-2047 with the earlier ones in the pool: what
the engine runs, since prompts go in chunks of 512). Each case on a sliding-window layer and a global
one; the KV cache in f16 (the default) on one sequence's pages. Each variant's program (its dispatches:
the combine too where keys are split) is replayed inside one compute pass with timestamp queries at the
pass's start and end; a call's time is the pass's over the replays, median of 3 passes. The outputs
of old and new kernels are compared (max abs difference) in the same run. Per model, the attention time
of a whole prefill: sliding layers x the sliding time + global layers x the global time.

    python tools/perf/attention.py                        # 270m, 1b, 4b; default variant and a small sweep
    python tools/perf/attention.py --models 270m --no-sweep --tokens 32 --ctx 64   # smoke test (lavapipe)
    python tools/perf/attention.py --full [--sweep] [--cases 1024:16:72]  # the encoders' full attention
                                                                          # (tools/perf/full_attention.py)

The sweep's rows name each variant (subgroup reduction, rows in pairs, threads, keys per chunk, splits): its
fastest is what gpu/ops/attention_prompt.py should pick on that GPU.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpu.device import default_device  # noqa: E402
from gpu.kv_cache import KVPool  # noqa: E402
from gpu.ops import transformer  # noqa: E402
from gpu.ops.attention_prompt import PromptConfig, attention_prompt, prompt_config  # noqa: E402
from gpu.profile import PassTimer  # noqa: E402
from gpu.program import Executor, Program, ProgramBuilder, StepParams  # noqa: E402

# Gemma 3 attention shapes (scripts/make_synthetic_gguf.py; HF configs): heads, kv heads, head dim,
# window, layers, and one global layer in every 6
MODELS = {
    "270m": dict(heads=4, kv=1, d=256, window=512, layers=18),
    "1b": dict(heads=4, kv=1, d=256, window=512, layers=26),
    "4b": dict(heads=8, kv=4, d=256, window=1024, layers=34),
    # the families' (decode_attention.py only: no sliding layers)
    "llama3.2-1b": dict(heads=32, kv=8, d=64, window=0, layers=16),
    "qwen3-4b": dict(heads=32, kv=8, d=128, window=0, layers=36),
    "llama3.1-8b": dict(heads=32, kv=8, d=128, window=0, layers=32),
}
SWA_PATTERN = 6
TARGET_PASS_S = 0.02  # GPU time per timed pass
ROUNDS = 3  # timed passes per variant, interleaved with the other variants'; the fastest counts
# (subgroup row sums, two rows per thread, threads, keys per chunk, splits)
SWEEP = [(True, p, t, k, s) for p in (False, True) for t in (128, 256) for k in (8, 16) for s in (1, 2, 4, 8)]
SWEEP += [(False, False, 128, 8, 4), (False, True, 128, 8, 4)]


class Timer:
    """Times programs with timestamp queries at a compute pass's start and end (wall time without them)."""

    def __init__(self, ex: Executor) -> None:
        self.pass_timer = PassTimer(ex)

    def _pass(self, program: Program, reps: int, n_tokens: int) -> float:
        """Seconds of one pass of reps replays: its GPU time, or its wall time without timestamp queries."""
        gpu, wall = self.pass_timer.time_pass(program, reps, n_tokens)
        return gpu if self.pass_timer.timestamps else wall

    def reps(self, program: Program, n_tokens: int) -> int:
        """Replays of program that make a pass of about TARGET_PASS_S (after a warm-up pass of as long)."""
        once = self._pass(program, 1, n_tokens)
        reps = max(1, min(500, math.ceil(TARGET_PASS_S / max(once, 1e-6))))
        self._pass(program, reps, n_tokens)
        return reps

    def us(self, program: Program, n_tokens: int, reps: int) -> float:
        """Microseconds per replay of program in one pass of reps replays."""
        return self._pass(program, reps, n_tokens) / reps * 1e6


def make_case(ex: Executor, rng: np.random.Generator, m: dict, start: int, n: int, page_tokens: int = 128):
    """A pool holding one sequence's keys at positions [0, start + n) (f16) and the step's q and row table."""
    width = m["kv"] * m["d"]
    ctx = start + n
    pool = KVPool(ex, "bench", [width], ctx, ctx, 1, "f16", page_tokens=page_tokens)
    slot = pool.open_slot()
    pool.reserve(slot, ctx)
    rows_total = pool.n_pages * page_tokens
    for cache in (pool.keys[0], pool.values[0]):
        ex.write(cache, rng.standard_normal((rows_total, width)).astype(np.float16).view(np.uint32))
    rows = np.zeros((n, 4), np.uint32)
    rows[:, 0] = np.arange(start, start + n)
    rows[:, 1] = slot
    q = ex.tensor("q", (n, m["heads"] * m["d"]),
                  data=rng.standard_normal((n, m["heads"] * m["d"])).astype(np.float32))
    return pool, ex.tensor("rows", rows.shape, "u32", data=rows), q


def run_case(ex: Executor, timer: Timer, model: str, m: dict, start: int, n: int, window: int, sweep: bool,
             rng: np.random.Generator) -> list[dict]:
    """Time the old kernel, the new default and the sweep's variants on one case."""
    pool, rows, q = make_case(ex, rng, m, start, n)
    out = ex.tensor("out", (n, m["heads"] * m["d"]))
    kw = dict(heads=m["heads"], kv_heads=m["kv"], head_dim=m["d"], window=window, scale=1 / math.sqrt(m["d"]))
    default = prompt_config(ex.device, head_dim=m["d"], kv_f16=True, t_max=n, heads=m["heads"], kv_heads=m["kv"])
    variants: dict[str, PromptConfig | None] = {"old attention.wgsl": None, "new default": default}
    if sweep:
        for subgroups, pairs, threads, keys, splits in SWEEP:
            if subgroups and not ex.device.has("subgroup"):
                continue
            try:
                config = prompt_config(ex.device, head_dim=m["d"], kv_f16=True, t_max=n, heads=m["heads"],
                                       kv_heads=m["kv"], threads=threads, keys=keys, splits=splits,
                                       subgroups=subgroups, pairs=pairs)
            except ValueError as e:  # subgroups too small for the row, or keys past workgroup memory
                print(f"skipped: {e}")
                continue
            name = f"new {config.reduce[:2]}{' pairs' if pairs else ''} wg{threads} kc{config.keys} s{splits}"
            variants[name] = config
    # every program built (compiled) and checked first, then timed in interleaved rounds: compiling between
    # timings lets the GPU's clocks drop, which made the same variant read up to 2x apart in one run
    programs, diffs, reference = {}, {}, None
    for name, config in variants.items():
        b = ProgramBuilder(ex, name)
        if config is None:
            transformer.attention(b, q, pool, 0, rows, out, **kw)
        else:
            attention_prompt(b, q, pool, 0, rows, out, config=config, **kw)
        programs[name] = b.build()
        got, = ex.run(programs[name], StepParams(n), read=[out])
        reference = got if reference is None else reference
        diffs[name] = float(np.abs(got - reference).max())
    reps = {name: timer.reps(program, n) for name, program in programs.items()}  # also warms the GPU up
    times = {name: [] for name in programs}
    for _ in range(ROUNDS):
        for name, program in programs.items():
            times[name].append(timer.us(program, n, reps[name]))
    results = []
    kind = f"window {window}" if window else "global"
    for name, config in variants.items():
        us, diff, program = min(times[name]), diffs[name], programs[name]
        base = results[0]["us"] if results else us
        results.append(dict(model=model, start=start, tokens=n, window=window, variant=name,
                            config=None if config is None else config.__dict__, us=us, speedup=base / us,
                            max_diff=diff, dispatches=len(program.dispatches)))
        print(f"{model:5s} pos {start:5d} +{n:<5d} {kind:12s} {name:32s} {us:10.1f} us  x{base / us:6.2f}"
              f"  max|diff| {diff:.2e}", flush=True)
    return results


def summary(results: list[dict]) -> list[str]:
    """Per model and prompt case: a prefill's attention time (all layers), old vs the new default and best."""
    lines = []
    for model, m in MODELS.items():
        n_global = m["layers"] // SWA_PATTERN
        n_sliding = m["layers"] - n_global
        for start, n in sorted({(r["start"], r["tokens"]) for r in results if r["model"] == model}):
            def layer_us(variant_filter, window):
                rs = [r for r in results if r["model"] == model and r["start"] == start and r["tokens"] == n
                      and r["window"] == window and variant_filter(r["variant"])]
                return min(r["us"] for r in rs) if rs else float("nan")
            per = {}
            for label, pick in (("old", lambda v: v.startswith("old")), ("new", lambda v: v == "new default"),
                                ("best", lambda v: v.startswith("new"))):
                per[label] = (n_sliding * layer_us(pick, m["window"]) + n_global * layer_us(pick, 0)) / 1000
            lines.append(f"{model:5s} pos {start:5d} +{n:<5d} attention per prefill step ({n_sliding} sliding + "
                         f"{n_global} global layers): old {per['old']:8.2f} ms, new {per['new']:7.2f} ms "
                         f"(x{per['old'] / per['new']:.1f}), best variant {per['best']:7.2f} ms")
    return lines


def main() -> None:
    if sys.argv[1:2] == ["--full"]:  # full (unmasked) attention has a tool of its own; its arguments follow
        from tools.perf import full_attention
        full_attention.main()
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="270m,1b,4b")
    parser.add_argument("--tokens", type=int, default=512, help="tokens of a prompt chunk")
    parser.add_argument("--ctx", type=int, default=2048, help="the long prompt's length")
    parser.add_argument("--no-sweep", action="store_true", help="only the old kernel and the new default")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args()
    ex = Executor(default_device())
    timer = Timer(ex)
    print(f"device: {ex.device.name} ({ex.device.backend}); features {sorted(ex.device.features)}; "
          f"adapter {dict(ex.device.adapter.info)}; default variant at 512 tokens of 270m: "
          f"{prompt_config(ex.device, head_dim=256, kv_f16=True, t_max=512, heads=4, kv_heads=1)}", flush=True)
    rng = np.random.default_rng(0)
    results = []
    cases = [(0, args.tokens), (0, args.ctx), (args.ctx - args.tokens, args.tokens)]
    done: dict[tuple, str] = {}  # attention shape -> the model already timed with it
    for model in args.models.split(","):
        m = MODELS[model]
        shape = (m["heads"], m["kv"], m["d"], m["window"])
        if shape in done:  # 1B's attention has 270M's shape: same kernels, same times
            results += [dict(r, model=model) for r in results if r["model"] == done[shape]]
            print(f"{model}: attention shape of {done[shape]}, its times reused", flush=True)
            continue
        done[shape] = model
        for start, n in cases:
            windows = [m["window"], 0] if start + n > m["window"] else [0]  # a window past the keys is global
            for window in windows:
                results += run_case(ex, timer, model, m, start, n, window, not args.no_sweep, rng)
                if args.json:  # partial results survive a run cut short
                    args.json.write_text(json.dumps(dict(device=ex.device.name, results=results), indent=1))
    # cases whose keys all fit the window ran once, as global: count them for the sliding layers too
    for r in list(results):
        m = MODELS[r["model"]]
        if r["window"] == 0 and r["start"] + r["tokens"] <= m["window"]:
            results.append(dict(r, window=m["window"]))
    lines = summary(results)
    print("\n".join(lines))
    if args.json:
        args.json.write_text(json.dumps(dict(device=ex.device.name, results=results, summary=lines), indent=1))


if __name__ == "__main__":
    main()
