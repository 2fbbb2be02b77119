"""Full (unmasked) self-attention benchmark: GPU time of the scores path (attention_full_scores + softmax_rows +
attention_full_values, gpu/ops/full_attention.py's full_attention_scores) and of the one-pass
attention_full_flash.wgsl (its default flash_plan, and with --sweep other row blocks, key chunks and prefetching)
on the same fused q|k|v rows, for the encoders' shapes: Gemma 3's vision tower (4096 rows, 16 heads of 72, 27
layers) and Whisper's audio encoder (1500 rows, heads of 64: 6 for tiny, 8 for base, 20 for large, 32 layers for
large).

Each variant's program is replayed inside one compute pass with timestamp queries at the pass's start and end;
a call's time is the fastest of ROUNDS passes, the variants' passes interleaved. Outputs are compared with the
scores path's (max abs difference) in the same run.

    python tools/perf/full_attention.py                      # the encoders' shapes (H200)
    python tools/perf/full_attention.py --sweep              # and the flash plans that fit the device
    python tools/perf/full_attention.py --cases 1024:16:72   # lavapipe: a moderate size
    python tools/perf/attention.py --full ...                # the same, from the prompt attention tool
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpu.device import default_device
from gpu.ops.full_attention import (
    FLASH_ROWS,
    FlashPlan,
    attention_full_flash,
    flash_plan,
    flash_storage_bytes,
    full_attention_scores,
)
from gpu.profile import PassTimer
from gpu.program import Executor, Program, ProgramBuilder, StepParams

# (rows, heads, head dim, layers, what)
CASES = [
    (4096, 16, 72, 27, "Gemma 3 vision tower, 896x896 image"),
    (1500, 6, 64, 4, "Whisper tiny encoder"),
    (1500, 8, 64, 6, "Whisper base encoder"),
    (1500, 20, 64, 32, "Whisper large encoder"),
]
TARGET_PASS_S = 0.05  # GPU time per timed pass
ROUNDS = 3  # timed passes per variant, interleaved; the fastest counts
SWEEP_KEYS = (16, 32, 48, 64)


def pass_seconds(timer: PassTimer, program: Program, reps: int, n: int) -> float:
    """Seconds of one pass of reps replays: GPU time, or wall time without timestamp queries."""
    gpu, wall = timer.time_pass(program, reps, n)
    return gpu if timer.timestamps else wall


def sweep_plans(ex: Executor, n: int, d: int) -> list[FlashPlan]:
    """The flash plans of SWEEP_KEYS keys a chunk and FLASH_ROWS rows that fit the device, with and without
    prefetching where it applies."""
    plans = []
    for rows in FLASH_ROWS:
        for keys in SWEEP_KEYS:
            threads = rows // 4 * d // 4
            storage = flash_storage_bytes(rows, keys, d)
            if keys <= -(-n // 4) * 4 and storage <= ex.device.limits.workgroup_storage_bytes \
                    and threads <= ex.device.limits.max_invocations:
                plans.append(FlashPlan(rows, keys, threads, storage))
                if keys <= rows:
                    plans.append(FlashPlan(rows, keys, threads, storage, prefetch=True))
    return plans


def run_case(ex: Executor, timer: PassTimer, n: int, heads: int, d: int, sweep: bool,
             rng: np.random.Generator) -> dict[str, float]:
    """Milliseconds per call of the scores path and of each flash variant on one shape; prints a line for each."""
    qkv_data = rng.standard_normal((n, 3 * heads * d)).astype(np.float32)
    qkv = ex.tensor("qkv", qkv_data.shape, data=qkv_data)
    out = ex.tensor("out", (n, heads * d))
    scale = d ** -0.5
    default = flash_plan(n, heads, d, ex.device.limits)
    variants: dict[str, FlashPlan | None] = {"scores path": None}
    if default is not None:
        variants[f"flash default br{default.rows} kc{default.keys}{' pf' if default.prefetch else ''}"] = default
    if sweep:
        for plan in sweep_plans(ex, n, d):
            if plan != default:
                variants[f"flash br{plan.rows} kc{plan.keys} wg{plan.threads}{' pf' if plan.prefetch else ''}"] = plan
    programs, diffs, reference = {}, {}, None
    for name, plan in variants.items():
        b = ProgramBuilder(ex, name)
        if plan is None:
            full_attention_scores(b, qkv, out, n, heads, d, scale)
        else:
            attention_full_flash(b, qkv, out, n, heads, d, scale, plan)
        programs[name] = b.build()
        got, = ex.run(programs[name], StepParams(n), read=[out])
        reference = got if reference is None else reference
        diffs[name] = float(np.abs(got - reference).max())
    reps = {}
    for name, program in programs.items():  # also warms the GPU up
        once = pass_seconds(timer, program, 1, n)
        reps[name] = max(1, min(200, math.ceil(TARGET_PASS_S / max(once, 1e-6))))
    times: dict[str, list[float]] = {name: [] for name in programs}
    for _ in range(ROUNDS):
        for name, program in programs.items():
            times[name].append(pass_seconds(timer, program, reps[name], n) / reps[name] * 1e3)
    result = {name: min(ts) for name, ts in times.items()}
    base = result["scores path"]
    for name, ms in result.items():
        print(f"n {n:5d} heads {heads:3d} D {d:4d}  {name:32s} {ms:9.3f} ms  x{base / ms:6.2f}  "
              f"max|diff| {diffs[name]:.2e}", flush=True)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", help="rows:heads:dim,... instead of the encoders' shapes")
    parser.add_argument("--sweep", action="store_true", help="also the flash plans that fit the device")
    args = parser.parse_args(sys.argv[2:] if sys.argv[1:2] == ["--full"] else None)
    ex = Executor(default_device())
    timer = PassTimer(ex)
    print(f"device: {ex.device.name} ({ex.device.backend}); workgroup storage "
          f"{ex.device.limits.workgroup_storage_bytes} B, {ex.device.limits.max_invocations} invocations; "
          f"{'timestamp queries' if timer.timestamps else 'wall time (no timestamp queries)'}", flush=True)
    if args.cases:
        cases = [(*map(int, c.split(":")), 1, "") for c in args.cases.split(",")]
    else:
        cases = CASES
    rng = np.random.default_rng(0)
    lines = []
    for n, heads, d, layers, what in cases:
        result = run_case(ex, timer, n, heads, d, args.sweep, rng)
        old = result["scores path"]
        flash = {k: v for k, v in result.items() if k.startswith("flash")}
        if flash:
            default = next(v for k, v in flash.items() if k.startswith("flash default"))
            best_name = min(flash, key=flash.get)
            lines.append(f"n {n} heads {heads} D {d}{' (' + what + ')' if what else ''}: {layers} layer(s) "
                         f"scores path {old * layers:.2f} ms, flash {default * layers:.2f} ms "
                         f"(x{old / default:.2f}); best: {best_name} {flash[best_name] * layers:.2f} ms")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
