"""llama.cpp's own benchmarks on the GPU machine: the peer of Hearth in bench/gpu.py.

Runs the CUDA build that bench/llama_cpp_cuda.sh makes or unpacks (llama-bench and
llama-batched-bench, every layer offloaded) on a GGUF file and returns its figures as dicts.
The numbers are llama.cpp's own timings of its own loops: no Python sits inside them.

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
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

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
                    reps: int = 3, *, flash_attn: str = "on", depth: int = 0,
                    timeout: float = 600) -> dict[str, Any]:
    """llama-bench `-p prompt -n gen -r reps -ngl 99 -fa flash_attn -o json` on one GGUF.

    Two tests, each on its own context (batch 2048, micro-batch 512: llama-bench's defaults),
    run once untimed (llama-bench's warm-up), then `reps` timed times, each time from a
    cleared KV cache, on random token ids:
    - prefill ("pp"): `prompt` tokens evaluated as one batch (split into micro-batches of
      512); prefill_tok_s = prompt / seconds from the first call to the finished batch;
    - decode ("tg"): `gen` single-token steps, each synchronised before the next;
      decode_tok_s = gen / seconds for all of them.
    With depth > 0, `depth` tokens are put in the cache before each timed run, untimed, for
    both tests (so prefill then runs at positions depth..depth+prompt). prompt 0 runs the decode
    test alone (the result then has no prefill_* keys).
    Each *_tok_s is the mean over the reps of per-rep tokens/s; *_tok_s_std is their sample
    standard deviation (llama-bench's avg_ts and stddev_ts); *_samples_tok_s are the reps and
    *_tok_s_median their median. On a GPU the first timed prefill rep runs well below the
    others (H200, 270M: 38k then 69k, 71k tok/s): its one warm-up does not warm everything the
    prefill uses, so with few reps the median is the steadier figure, or raise reps.
    flash_attn: "on" / "off" / "auto". Default "on": it is what llama.cpp's default, auto,
    resolves to on CUDA for Gemma 3 (batched-bench logs "Flash Attention enabled"), and it was
    the faster on an H200 (2026-11-26, synthetic 270M / 1B, tg128: 1008 / 530 tok/s on against
    983 / 519 off; pp512 medians 69k / 36k on against 64k / 33k off).
    """
    if flash_attn not in FLASH_ATTN:
        raise ValueError(f"flash_attn must be one of {FLASH_ATTN}, not {flash_attn!r}")
    args = ["-m", str(gguf_path), "-p", str(prompt), "-n", str(gen), "-r", str(reps), "-ngl", "99",
            "-fa", flash_attn, "-o", "json"]
    if depth:
        args += ["-d", str(depth)]
    proc = _run(binary_dir, "llama-bench", args, timeout)
    try:  # the JSON array is all llama-bench prints to stdout; slice to it should a warning land there too
        tests = json.loads(proc.stdout[proc.stdout.index("["):proc.stdout.rindex("]") + 1])
    except ValueError as err:
        raise RuntimeError(f"llama-bench printed no JSON ({err}):\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}") from err
    tg = next(t for t in tests if t["n_gen"] == gen and t["n_prompt"] == 0)
    out = {
        "tool": "llama-bench", "model": str(gguf_path), "prompt": prompt, "gen": gen, "reps": reps, "depth": depth,
        "flash_attn": flash_attn,
        "decode_tok_s": tg["avg_ts"], "decode_tok_s_std": tg["stddev_ts"], "decode_samples_tok_s": tg["samples_ts"],
        "decode_tok_s_median": statistics.median(tg["samples_ts"]),
        **{key: tg.get(key) for key in ("build_commit", "build_number", "gpu_info", "backends", "model_type",
                                         "model_size", "model_n_params", "n_batch", "n_ubatch", "type_k", "type_v")},
    }
    if prompt:  # prompt 0: the decode test alone
        pp = next(t for t in tests if t["n_prompt"] == prompt and t["n_gen"] == 0)
        out.update({"prefill_tok_s": pp["avg_ts"], "prefill_tok_s_std": pp["stddev_ts"],
                    "prefill_samples_tok_s": pp["samples_ts"], "prefill_tok_s_median": statistics.median(pp["samples_ts"])})
    return out


def run_llama_batched_bench(binary_dir: str | Path, gguf_path: str | Path, parallel: tuple[int, ...] = (1, 8, 32),
                            prompt: int = 128, gen: int = 128, *, flash_attn: str = "on",
                            timeout: float = 600) -> dict[str, Any]:
    """llama-batched-bench `-npp prompt -ntg gen -npl <parallel> -ngl 99 --output-format jsonl` on one GGUF.

    For each B in `parallel`, B independent sequences (prompts not shared, each its own
    `prompt` random tokens) are prefilled in batches of up to 2048 tokens, then decoded
    together: `gen` steps, each one batch of B tokens (one per sequence) evaluated at once.
    The context is B_max * (prompt + gen) cells, so every B fits (the tool silently skips a B
    that does not). One pass per B, after one small warm-up decode; no repetitions.
    Returned per B (keys are B):
    - decode_tok_s[B]: aggregate decode throughput, B * gen / seconds of all gen steps
      (batched-bench's S_TG); per-sequence speed is this / B;
    - prefill_tok_s[B]: B * prompt / seconds of the prefill (S_PP);
    - total_tok_s[B]: all prompt and generated tokens / total seconds (S);
    - runs[B]: the tool's whole JSON line (t_pp, t_tg, n_kv, ...).
    flash_attn as in run_llama_bench; with "auto", flash_attn_resolved is what llama.cpp
    decided and logged ("enabled" or "not supported"), else None.
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
        "tool": "llama-batched-bench", "model": str(gguf_path), "prompt": prompt, "gen": gen, "n_ctx": n_ctx,
        "flash_attn": flash_attn,
        "flash_attn_resolved": None if resolved is None else resolved.group("state"),
        "decode_tok_s": {b: runs[b]["speed_tg"] for b in parallel},
        "prefill_tok_s": {b: runs[b]["speed_pp"] for b in parallel},
        "total_tok_s": {b: runs[b]["speed"] for b in parallel},
        "runs": {b: runs[b] for b in parallel},
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="GGUF files for llama-bench")
    parser.add_argument("--bin", type=Path, default=Path("/tmp/llamacpp/bin"), help="from bench/llama_cpp_cuda.sh")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--prompt", type=int, default=512, help="llama-bench -p")
    parser.add_argument("--gen", type=int, default=128, help="llama-bench -n")
    parser.add_argument("--fa", default="on", help="llama-bench flash-attention modes, comma list of on,off,auto")
    parser.add_argument("--depths", default="0", help="llama-bench -d values, comma list (0: tg from an empty cache)")
    parser.add_argument("--batched", type=Path, action="append", default=[], help="GGUF for llama-batched-bench")
    parser.add_argument("--batched-fa", default="auto", help="flash-attention mode of llama-batched-bench")
    parser.add_argument("--parallel", default="1,8,32")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    modes = args.fa.split(",")
    depths = [int(d) for d in args.depths.split(",")]
    parallel = tuple(int(b) for b in args.parallel.split(","))
    results: dict[str, list[dict[str, Any]]] = {"llama_bench": [], "batched_bench": []}

    def save() -> None:  # after every result, so that a run cut short by a time limit keeps what it measured
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))

    def batched() -> None:
        for model in args.batched:
            try:
                r = run_llama_batched_bench(args.bin, model, parallel, flash_attn=args.batched_fa)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                print(f"batched-bench {model.name} failed: {err}", flush=True)
                continue
            results["batched_bench"].append(r)
            save()
            cells = "  ".join(f"B={b}: {r['decode_tok_s'][b]:.0f}" for b in parallel)
            print(f"batched-bench {model.name} fa={r['flash_attn']} (auto resolved to: {r['flash_attn_resolved']}), "
                  f"{r['prompt']}-token prompts, {r['gen']} steps; aggregate decode tok/s {cells}", flush=True)

    print(f"{'model':<24}{'fa':>5}{'depth':>6}{'pp tok/s mean ± std':>22}{'median':>8}"
          f"{'tg tok/s mean ± std':>22}{'median':>8}", flush=True)
    # The most wanted figures first (the first mode, then batched-bench), should a time limit cut the rest.
    for i, fa in enumerate(modes):
        for depth in depths:
            for model in args.models:
                try:
                    r = run_llama_bench(args.bin, model, args.prompt, args.gen, args.reps, flash_attn=fa, depth=depth)
                except (RuntimeError, subprocess.TimeoutExpired) as err:
                    print(f"{model.name:<24}{fa:>5}{depth:>6}  failed: {err}", flush=True)
                    continue
                results["llama_bench"].append(r)
                save()
                print(f"{model.name:<24}{fa:>5}{depth:>6}{r['prefill_tok_s']:>14.0f} ± {r['prefill_tok_s_std']:<5.0f}"
                      f"{r['prefill_tok_s_median']:>8.0f}{r['decode_tok_s']:>14.1f} ± {r['decode_tok_s_std']:<5.1f}"
                      f"{r['decode_tok_s_median']:>8.1f}", flush=True)
            if i == 0 and depth == depths[0]:
                batched()
    if results["llama_bench"]:
        first = results["llama_bench"][0]
        print(f"llama.cpp {first['build_commit']} (build {first['build_number']}), {first['gpu_info']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
