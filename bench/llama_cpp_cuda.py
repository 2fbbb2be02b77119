"""llama.cpp's own benchmarks on the GPU machine: the peer of Hearth in bench/gpu.py.

Runs the CUDA build that bench/llama_cpp_cuda.sh makes or unpacks (llama-bench and
llama-batched-bench, every layer offloaded) on a GGUF file and returns its figures as dicts.
The numbers are llama.cpp's own timings of its own loops: no Python sits inside them. Warm-up
and repetitions follow bench/timing.py's rule (--warmup untimed, --reps timed; median (min-max)).

    bash bench/llama_cpp_cuda.sh                       # prints LLAMA_CPP_BIN=/tmp/llamacpp/bin
    python3 bench/llama_cpp_cuda.py --bin /tmp/llamacpp/bin s270.gguf s1b.gguf --batched s270.gguf

Differences from Hearth's protocol (bench/text.py, bench/gpu.py) worth keeping in mind:
llama-bench feeds random token ids (the next decode token is random, not the argmax: the
logits of each step are computed and copied to the host but never read), and times prefill
and decode as separate tests; decode starts from an empty cache unless depth is given
(depth=512 is the closest to Hearth's decode after a 512-token prompt).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.timing import add_timing_args, cell, check_timing_args, run_info, write_json  # noqa: E402

FLASH_ATTN = ("on", "off", "auto")
# resolve_fused_ops logs "<probe name> enabled" or "... not supported, set to disabled" for auto FA.
_FA_RESOLVED = re.compile(r"resolve_fused_ops: (?P<name>[^\n]*flash[^\n]*?) (?P<state>enabled|not supported)", re.I)


def _env(binary_dir: Path) -> dict[str, str]:
    """The tools find their libraries through RUNPATH $ORIGIN; LD_LIBRARY_PATH too, should a copy lose it."""
    env = dict(os.environ)
    env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (str(binary_dir), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def _run(binary_dir: str | Path, tool: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run one of the tools; a failure raises with the command and the end of what it printed."""
    binary_dir = Path(binary_dir)
    cmd = [str(binary_dir / tool), *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env(binary_dir))
    if proc.returncode != 0:
        tail = (proc.stdout + proc.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} exited with {proc.returncode}:\n{tail}")
    return proc


def run_llama_bench(binary_dir: str | Path, gguf_path: str | Path, prompt: int = 512, gen: int = 128,
                    reps: int = 5, warmup: int = 1, *, flash_attn: str = "on", depth: int = 0,
                    timeout: float = 600) -> dict[str, Any]:
    """llama-bench `-p prompt -n gen -r R -ngl 99 -fa flash_attn -o json` on one GGUF: `warmup` untimed runs and
    `reps` timed ones of each test.

    Two tests, each on its own context (batch 2048, micro-batch 512: llama-bench's defaults), each time from a
    cleared KV cache, on random token ids:
    - prefill ("pp"): `prompt` tokens evaluated as one batch (split into micro-batches of 512);
    - decode ("tg"): `gen` single-token steps, each synchronised before the next.
    llama-bench runs one untimed warm-up of its own (the whole prompt for pp, a single token for tg) and then
    R = warmup - 1 + reps timed repetitions; the first warmup - 1 of those are dropped as untimed, so that
    llama.cpp gets the same warm-up count as Hearth (warmup 0: `--no-warmup`, R = reps). Its first timed
    repetitions on a GPU run well below the steady rate (the clocks are still rising), which is why they count
    as warm-up here. The samples are llama-bench's own per-repetition `samples_ts` (tokens/s; `samples_ns` are
    the nanoseconds they come from); median, min and max are computed from the kept ones.
    With depth > 0, `depth` tokens are put in the cache before each repetition, untimed, for both tests (so
    prefill then runs at positions depth..depth+prompt). prompt 0 runs the decode test alone (the result then
    has no prefill keys).
    flash_attn: "on" / "off" / "auto". Default "on": it is what llama.cpp's default, auto, resolves to on CUDA
    for Gemma 3 (batched-bench logs "Flash Attention enabled"), so the two tools run the same attention.
    """
    if flash_attn not in FLASH_ATTN:
        raise ValueError(f"flash_attn must be one of {FLASH_ATTN}, not {flash_attn!r}")
    dropped = max(warmup - 1, 0)
    args = ["-m", str(gguf_path), "-p", str(prompt), "-n", str(gen), "-r", str(dropped + reps), "-ngl", "99",
            "-fa", flash_attn, "-o", "json"]
    if depth:
        args += ["-d", str(depth)]
    if warmup == 0:
        args.append("--no-warmup")
    proc = _run(binary_dir, "llama-bench", args, timeout)
    try:  # the JSON array is all llama-bench prints to stdout; slice to it should a warning land there too
        tests = json.loads(proc.stdout[proc.stdout.index("["):proc.stdout.rindex("]") + 1])
    except ValueError as err:
        raise RuntimeError(f"llama-bench printed no JSON ({err}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}") from err

    def kept(test: dict[str, Any]) -> dict[str, Any]:
        samples = test["samples_ts"]
        if len(samples) != dropped + reps:
            raise RuntimeError(f"llama-bench reported {len(samples)} repetitions, asked for {dropped + reps}")
        return {"samples_tok_s": samples[dropped:], "warmup_samples_tok_s": samples[:dropped],
                "all_samples_ns": test["samples_ns"]}

    tg = next(t for t in tests if t["n_gen"] == gen and t["n_prompt"] == 0)
    out: dict[str, Any] = {
        "tool": "llama-bench", "command": ["llama-bench", *args], "model": str(gguf_path), "prompt": prompt,
        "gen": gen, "warmup": warmup, "reps": reps, "depth": depth, "flash_attn": flash_attn, "decode": kept(tg),
        **{key: tg.get(key) for key in ("build_commit", "build_number", "gpu_info", "backends", "model_type",
                                         "model_size", "model_n_params", "n_batch", "n_ubatch", "type_k", "type_v")},
    }
    if prompt:  # prompt 0: the decode test alone
        out["prefill"] = kept(next(t for t in tests if t["n_prompt"] == prompt and t["n_gen"] == 0))
    return out


def run_llama_batched_bench(binary_dir: str | Path, gguf_path: str | Path, parallel: tuple[int, ...] = (1, 8, 32),
                            prompt: int = 128, gen: int = 128, *, flash_attn: str = "on",
                            timeout: float = 600) -> dict[str, Any]:
    """One invocation of llama-batched-bench `-npp prompt -ntg gen -npl <parallel> -ngl 99 --output-format jsonl`.

    For each B in `parallel`, B independent sequences (prompts not shared, each its own `prompt` random tokens)
    are prefilled in batches of up to 2048 tokens, then decoded together: `gen` steps, each one batch of B tokens
    (one per sequence) evaluated at once. The context is B_max * (prompt + gen) cells, so every B fits (the tool
    silently skips a B that does not). One pass per B, after one small warm-up decode of the tool's own.
    Returned per B (keys are B):
    - decode_tok_s[B]: aggregate decode throughput, B * gen / seconds of all gen steps (batched-bench's S_TG);
      per-sequence speed is this / B;
    - prefill_tok_s[B]: B * prompt / seconds of the prefill (S_PP);
    - total_tok_s[B]: all prompt and generated tokens / total seconds (S);
    - runs[B]: the tool's whole JSON line (t_pp, t_tg, n_kv, ...).
    flash_attn as in run_llama_bench; with "auto", flash_attn_resolved is what llama.cpp decided and logged
    ("enabled" or "not supported"), else None.
    """
    if flash_attn not in FLASH_ATTN:
        raise ValueError(f"flash_attn must be one of {FLASH_ATTN}, not {flash_attn!r}")
    n_ctx = max(parallel) * (prompt + gen)
    args = ["-m", str(gguf_path), "-c", str(n_ctx), "-npp", str(prompt), "-ntg", str(gen),
            "-npl", ",".join(map(str, parallel)), "-ngl", "99", "-fa", flash_attn, "--output-format", "jsonl",
            "-lv", "4"]  # verbosity 4: llama.cpp's info lines (auto FA's resolution) on stderr, no debug
    proc = _run(binary_dir, "llama-batched-bench", args, timeout)
    out = proc.stdout + "\n" + proc.stderr  # JSON lines go through llama.cpp's log (stdout now): read both
    runs = {}
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{") and '"speed_tg"' in line:
            run = json.loads(line)
            runs[int(run["pl"])] = run
    missing = [b for b in parallel if b not in runs]
    if missing:
        raise RuntimeError(f"llama-batched-bench reported no result for B={missing}:\n{out[-3000:]}")
    resolved = _FA_RESOLVED.search(proc.stderr)
    return {
        "tool": "llama-batched-bench", "command": ["llama-batched-bench", *args], "model": str(gguf_path),
        "prompt": prompt, "gen": gen, "n_ctx": n_ctx, "flash_attn": flash_attn,
        "flash_attn_resolved": None if resolved is None else resolved.group("state"),
        "decode_tok_s": {b: runs[b]["speed_tg"] for b in parallel},
        "prefill_tok_s": {b: runs[b]["speed_pp"] for b in parallel},
        "total_tok_s": {b: runs[b]["speed"] for b in parallel},
        "runs": {b: runs[b] for b in parallel},
    }


def repeat_llama_batched_bench(binary_dir: str | Path, gguf_path: str | Path, parallel: tuple[int, ...],
                               prompt: int = 128, gen: int = 128, warmup: int = 1, reps: int = 5, *,
                               flash_attn: str = "on", timeout: float = 600) -> dict[str, Any]:
    """llama-batched-bench run `warmup` times untimed, then `reps` times, each invocation parsed.

    The tool makes one pass per B and has no repetitions of its own, so each invocation is one sample;
    decode_samples_tok_s[B] and prefill_samples_tok_s[B] hold one figure per timed invocation, and
    invocations the timed ones' whole results.
    """
    for _ in range(warmup):
        run_llama_batched_bench(binary_dir, gguf_path, parallel, prompt, gen, flash_attn=flash_attn, timeout=timeout)
    runs = [run_llama_batched_bench(binary_dir, gguf_path, parallel, prompt, gen, flash_attn=flash_attn,
                                    timeout=timeout) for _ in range(reps)]
    return {
        "tool": "llama-batched-bench", "command": runs[0]["command"], "warmup": warmup, "reps": reps,
        "flash_attn_resolved": runs[0]["flash_attn_resolved"],
        "decode_samples_tok_s": {b: [r["decode_tok_s"][b] for r in runs] for b in parallel},
        "prefill_samples_tok_s": {b: [r["prefill_tok_s"][b] for r in runs] for b in parallel},
        "invocations": runs,
    }


def main() -> int:
    """llama.cpp alone: llama-bench on each model, llama-batched-bench on those given with --batched."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="GGUF files for llama-bench")
    parser.add_argument("--bin", type=Path, default=Path("/tmp/llamacpp/bin"), help="from bench/llama_cpp_cuda.sh")
    parser.add_argument("--prompt", type=int, default=512, help="llama-bench -p")
    parser.add_argument("--gen", type=int, default=128, help="llama-bench -n")
    parser.add_argument("--fa", default="on", help="llama-bench flash-attention modes, comma list of on,off,auto")
    parser.add_argument("--depths", default="0", help="llama-bench -d values, comma list (0: tg from an empty cache)")
    parser.add_argument("--batched", type=Path, action="append", default=[], help="GGUF for llama-batched-bench")
    parser.add_argument("--batched-fa", default="auto", help="flash-attention mode of llama-batched-bench")
    parser.add_argument("--parallel", default="1,8,32")
    add_timing_args(parser, warmup=10)
    args = parser.parse_args()
    check_timing_args(parser, args)
    modes = args.fa.split(",")
    depths = [int(d) for d in args.depths.split(",")]
    parallel = tuple(int(b) for b in args.parallel.split(","))
    results: dict[str, Any] = {**run_info("llama.cpp", args.warmup, args.reps), "llama_bench": [],
                               "batched_bench": []}

    def save() -> None:  # after every result, so that a run cut short by a time limit keeps what it measured
        if args.json:
            write_json(args.json, results)

    def batched() -> None:
        for model in args.batched:
            try:
                r = repeat_llama_batched_bench(args.bin, model, parallel, warmup=args.warmup, reps=args.reps,
                                               flash_attn=args.batched_fa)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                print(f"batched-bench {model.name} failed: {err}", flush=True)
                continue
            results["batched_bench"].append({"model": str(model), **r})
            save()
            cells = "  ".join(f"B={b}: {cell(r['decode_samples_tok_s'][b], 0)}" for b in parallel)
            print(f"batched-bench {model.name} fa={args.batched_fa} (resolved: {r['flash_attn_resolved']}); "
                  f"aggregate decode tok/s {cells}", flush=True)

    print(f"{'model':<24}{'fa':>5}{'depth':>6}   pp tok/s median (min-max)   tg tok/s median (min-max)", flush=True)
    # The most wanted figures first (the first mode, then batched-bench), should a time limit cut the rest.
    for i, fa in enumerate(modes):
        for depth in depths:
            for model in args.models:
                try:
                    r = run_llama_bench(args.bin, model, args.prompt, args.gen, args.reps, args.warmup,
                                        flash_attn=fa, depth=depth)
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    print(f"{model.name:<24}{fa:>5}{depth:>6}  failed: {err}", flush=True)
                    continue
                results["llama_bench"].append(r)
                save()
                pp = cell(r["prefill"]["samples_tok_s"], 0) if "prefill" in r else "-"
                print(f"{model.name:<24}{fa:>5}{depth:>6}   {pp:<28}{cell(r['decode']['samples_tok_s'])}", flush=True)
            if i == 0 and depth == depths[0]:
                batched()
    if results["llama_bench"]:
        first = results["llama_bench"][0]
        print(f"llama.cpp {first['build_commit']} (build {first['build_number']}), {first['gpu_info']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
