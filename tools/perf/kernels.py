"""Kernel benchmark: GPU time of `linear` and `linear_glu` on the layer shapes of Gemma 3 270M, 1B
and 4B, for decode (T = 1) and prefill (T = 512), with the bytes and FLOPs each call moves.

A program holds one call (its dispatches) per copy of the weight; for decode (matvec steps) the weight is copied
until the copies exceed the L2 cache (256 MiB), so that each call reads its weight from memory as
in a model. The program is replayed `reps` times inside one compute pass with timestamp queries at
the pass's start and end; a call's time is the pass's time over the calls (median of 3 passes),
barriers between dependent dispatches included, as in a model's step. The wall-clock time of the
same submissions is printed beside it as a check.

Peers, measured in the same run: the fused gate-up linear against the two linears and glu_mul
it replaces; with --torch, torch.matmul on the GPU (fp32 without TF32: CUDA cores, like these
kernels; the operands dense and random, so it moves more bytes than a quantised weight).

    python tools/perf/kernels.py                              # 270M shapes and types, T = 1 and 512
    python tools/perf/kernels.py --models 270m,1b,4b --types q4_k,q6_k,q8_0 --torch
    python tools/perf/kernels.py --sweep --json sweep.json    # matmul tiles and k splits, 270M prefill shapes
    python tools/perf/kernels.py --sweep --sweep-f16 ...      # f16 tiles too, where the adapter has shader-f16
    python tools/perf/kernels.py --sweep --models 4b --types q4_k --sweep-tiles 128x64x8x32x4,128x128x8x16x8
    python tools/perf/kernels.py --tiles sweep.json ...       # run each swept shape with its fastest tile
    python tools/perf/kernels.py --wide-sweep --models 1b,4b  # matvec_q4_k/q6_k threads per row
    python tools/perf/kernels.py --models 4b --types q4_k --tokens 1 --ops gate_up --splits 8x32,8x40,8x20p
                                                         # every GPU matvec at threads x rows (p: in pairs)
    python tools/perf/kernels.py --model s270.gguf            # end-to-end prefill tok/s of a GGUF
    python tools/perf/kernels.py --models llama3.1-8b --types q4_k --tokens 1 --int8   # int8 matvecs wherever they run
    python tools/perf/kernels.py --models 4b --types q6_k --tokens 8 --tunings ";every_row_q6_k_max_tokens=8"
                                                         # each op with the default tuning, then with one change

The sweep times many short passes with compilation between them: an idle GPU lowers its clocks
(and reads several times slower than the same shape in the kernel benchmark right after), so every
measurement follows WARM_S of untimed passes; still, compare the sweep's figures
with each other, and confirm the fastest with the kernel benchmark (--tiles).

Variants are MatmulTuning's forced choices (gpu/ops/matmul_tuning.py) on the executor while a program records.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpu.device import default_device  # noqa: E402
from gpu.ops.matmul import NormedInput, device_traits, linear, linear_glu  # noqa: E402
from gpu.ops.matmul_plan import (  # noqa: E402
    WIDE_MATVEC_KERNELS,
    LinearKernel,
    MatmulTile,
    MatvecShape,
    normed_input_fits,
    plan_linear,
    plan_matvec,
)
from gpu.ops.matmul_tuning import DEFAULT_TUNING  # noqa: E402
from gpu.ops.transformer import glu_mul  # noqa: E402
from gpu.profile import PassTimer  # noqa: E402
from gpu.program import Executor, Program, ProgramBuilder  # noqa: E402
from gpu.tensor import Tensor  # noqa: E402
from gpu.weights import QuantWeight, row_bytes, upload_weight  # noqa: E402

# Text shapes (HF configs): hidden D, feed-forward F, q and kv widths, vocabulary; Gemma 3's, then the families'
MODELS = {
    "270m": dict(d=640, f=2048, q=1024, kv=256, vocab=262144),
    "1b": dict(d=1152, f=6912, q=1024, kv=256, vocab=262144),
    "4b": dict(d=2560, f=10240, q=2048, kv=1024, vocab=262208),
    "llama3.2-1b": dict(d=2048, f=8192, q=2048, kv=512, vocab=128256),
    "qwen3-4b": dict(d=2560, f=9728, q=4096, kv=1024, vocab=151936),
    "llama3.1-8b": dict(d=4096, f=14336, q=4096, kv=1024, vocab=128256),
}
# The shipped Gemma 3 270M Q4_K_M's type per op (half its layers have Q8_0 v and Q6_K down)
MIX = {"q": Q.Q5_0, "k": Q.Q5_0, "v": Q.Q8_0, "o": Q.Q4_K, "gate_up": Q.Q5_0, "down": Q.Q6_K, "output": Q.Q8_0}
ROTATE_BYTES = 256 << 20  # decode weights are copied until they exceed this (past any L2)
TARGET_PASS_S = 0.01  # GPU time per timed pass
WARM_S = 0.2  # seconds of untimed passes before each measurement (clocks up)
# tile shapes for --sweep (BT, BR, RR, BK, TT), each with k split in 1, 2, 4 (and 8 where K >= 2048)
SWEEP_TILES = [(64, 128, 8, 32, 4), (32, 128, 8, 16, 4), (128, 64, 8, 32, 4), (64, 64, 8, 32, 4), (32, 64, 8, 16, 4),
               (16, 64, 8, 16, 4), (64, 64, 4, 32, 4), (32, 64, 4, 32, 4), (16, 64, 4, 16, 4),
               (128, 128, 8, 16, 8), (128, 128, 8, 32, 8), (64, 128, 8, 32, 8), (128, 64, 8, 16, 8),
               (64, 64, 8, 16, 8), (64, 64, 4, 16, 8)]


def ops_of(model: str, types: list[Q] | None) -> list[tuple[str, int, int, Q]]:
    """(op, K, N, type) of one layer and the output head; N of gate_up is F (the GLU's 2F rows)."""
    m = MODELS[model]
    shapes = [("q", m["d"], m["q"]), ("k", m["d"], m["kv"]), ("v", m["d"], m["kv"]), ("o", m["q"], m["d"]),
              ("gate_up", m["d"], m["f"]), ("down", m["f"], m["d"]), ("output", m["d"], m["vocab"])]
    if types is None:
        return [(op, k, n, MIX[op]) for op, k, n in shapes]
    # a type whose block does not divide K (the K-quants' 256 at 1B's D = 1152) cannot hold the weight
    return [(op, k, n, t) for op, k, n in shapes for t in types if k % GGML_QUANT_SIZES[t][0] == 0]


@contextmanager
def tuned(ex: Executor, **changes: Any) -> Iterator[None]:
    """ex's MatmulTuning with these fields changed while the block runs: programs plan with the tuning of when
    they record."""
    before = ex.tuning
    ex.tuning = dataclasses.replace(before, **changes)
    try:
        yield
    finally:
        ex.tuning = before


class Bench:
    """Builds the programs of one shape and times them with timestamp queries."""

    def __init__(self, ex: Executor, rotate_bytes: int = ROTATE_BYTES) -> None:
        self.ex = ex
        self.rotate_bytes = rotate_bytes
        self.device = ex.device
        self.rng = np.random.default_rng(0)
        self.timer = PassTimer(ex)
        self.timestamps = self.timer.timestamps
        # tuning changes per (K, y columns, GLU) shape: a sweep's fastest tile (--tiles)
        self.picks: dict[tuple[int, int, bool], dict[str, Any]] = {}

    def linear(self, b: ProgramBuilder, weight: QuantWeight, x: Any, y: Tensor, t_max: int) -> None:
        """gpu.ops.matmul.linear with the shape's picks."""
        with tuned(self.ex, **self.picks.get((weight.k, weight.n, False), {})):
            linear(b, weight, x, y, t_max)

    def linear_glu(self, b: ProgramBuilder, weight: QuantWeight, x: Any, y: Tensor, t_max: int) -> None:
        """gpu.ops.matmul.linear_glu with the shape's picks."""
        with tuned(self.ex, **self.picks.get((weight.k, weight.n // 2, True), {})):
            linear_glu(b, weight, x, y, t_max)

    def weights(self, name: str, qtype: Q, k: int, n: int, copies: int) -> list[QuantWeight]:
        """copies of one random weight (random bytes: the values do not change the time)."""
        raw = np.frombuffer(self.rng.bytes(row_bytes(qtype, k) * n), np.uint8)
        return [upload_weight(self.ex, f"{name}{c}", qtype, k, n, raw) for c in range(copies)]

    def copies(self, qtype: Q, k: int, n: int, t: int) -> int:
        if t > self.ex.tuning.matvec_max_tokens:
            return 1
        return max(1, min(512, math.ceil(self.rotate_bytes / (row_bytes(qtype, k) * n))))

    def _pass(self, program: Program, reps: int, n_tokens: int) -> tuple[float, float]:
        """(GPU seconds from timestamps, or nan, wall seconds) of one pass replaying program reps times."""
        return self.timer.time_pass(program, reps, n_tokens)

    def time(self, program: Program, calls: int, n_tokens: int) -> tuple[float, float]:
        """(GPU, wall) microseconds per call of a program holding `calls` calls, after WARM_S of passes: an
        idle GPU (pipelines compiling between shapes) lowers its clocks, and the first passes after
        one read several times slower than the same passes later."""
        gpu, wall = self._pass(program, 1, n_tokens)  # estimate
        once = gpu if gpu == gpu else wall
        reps = max(1, min(1000, math.ceil(TARGET_PASS_S / max(once, 1e-6))))
        warm_until = time.perf_counter() + WARM_S
        while time.perf_counter() < warm_until:
            self._pass(program, reps, n_tokens)
        runs = [self._pass(program, reps, n_tokens) for _ in range(3)]
        per_call = 1e6 / (reps * calls)
        return (statistics.median(r[0] for r in runs) * per_call, statistics.median(r[1] for r in runs) * per_call)

    def build(self, name: str, record: Callable[[ProgramBuilder, int], None], copies: int) -> Program:
        b = ProgramBuilder(self.ex, name)
        for c in range(copies):
            record(b, c)
        return b.build()


def glu_unfused(linear_fn: Callable) -> Callable:
    def record(b: ProgramBuilder, gate: QuantWeight, up: QuantWeight, x, y, t: int) -> None:
        g = b.activation("gate", (t, gate.n))
        u = b.activation("up", (t, gate.n))
        linear_fn(b, gate, x, g, t)
        linear_fn(b, up, x, u, t)
        glu_mul(b, g, u, y)
    return record


def with_setting(record: Callable[[ProgramBuilder, int], None], **changes: Any,
                 ) -> Callable[[ProgramBuilder, int], None]:
    """record, with MatmulTuning fields changed while it records (wide_matvec: K-quant matvecs through their own
    kernels; row_pairs: their threads taking two rows where there is no GLU)."""
    def recorded(b: ProgramBuilder, c: int) -> None:
        with tuned(b.executor, **changes):
            record(b, c)
    return recorded


def normed_input(ex: Executor, rng: np.random.Generator, t: int, k: int) -> NormedInput:
    """A NormedInput of t random rows of k values: the residual norm folded into the gate-up's prologue
    (kernels/matvec/x_normed.wgsl), as a model's decode step runs it."""
    def tensor(name: str, shape: tuple[int, ...], scale: float = 1.0) -> Tensor:
        return ex.tensor(name, shape, data=(rng.standard_normal(shape) * scale).astype(np.float32))
    return NormedInput(tensor("block_out", (t, k), 3.0), tensor("w_post", (k,)), tensor("residual", (t, k)),
                                  tensor("w_next", (k,)), ex.tensor("residual_out", (t, k)), 1e-6)


def measure_op(bench: Bench, op: str, k: int, n: int, qtype: Q, t: int, args: argparse.Namespace) -> list[dict]:
    """Rows of results for one op at one token count: each variant's time, GB/s and GFLOP/s."""
    ex = bench.ex
    rows = []
    x = ex.tensor("x", (t, k), data=bench.rng.standard_normal((t, k)).astype(np.float32))
    copies = bench.copies(qtype, k, 2 * n if op == "gate_up" else n, t)
    variants: dict[str, Callable[[ProgramBuilder, int], None]] = {}
    paired = False
    if op == "gate_up":
        fused = bench.weights("gu", qtype, k, 2 * n, copies)
        ups = bench.weights("u", qtype, k, n, copies)
        gates = bench.weights("g", qtype, k, n, copies)
        y = ex.tensor("y", (t, n))
        variants["glu fused"] = lambda b, c: bench.linear_glu(b, fused[c], x, y, t)
        unfused = glu_unfused(bench.linear)
        variants["glu unfused"] = lambda b, c: unfused(b, gates[c], ups[c], x, y, t)
        if not ex.device.is_software and normed_input_fits(k, t, ex.tuning):
            normed = normed_input(ex, bench.rng, t, k)  # the input as a model's decode step makes it
            variants["glu normed"] = lambda b, c: bench.linear_glu(b, fused[c], normed, y, t)
        n_out, flops, weight_bytes = n, 2 * t * k * 2 * n, fused[0].nbytes
    else:
        weights = bench.weights(op, qtype, k, n, copies)
        y = ex.tensor("y", (t, n))
        variants["linear"] = lambda b, c: bench.linear(b, weights[c], x, y, t)
        if op in ("q", "k", "v") and not ex.device.is_software and normed_input_fits(k, t, ex.tuning):
            normed_x = normed_input(ex, bench.rng, t, k)  # q|k|v's input as a model's decode step makes it
            variants["linear normed"] = lambda b, c: bench.linear(b, weights[c], normed_x, y, t)
        # whether the matvec takes its rows in pairs (then also timed without)
        plan = plan_linear(op, device_traits(ex.device), ex.tuning, ex.int8_matmuls, t)
        paired = (plan.kernel is LinearKernel.MATVEC
                  and plan_matvec(weights[0], n, plan.subgroups, plan.whole_rows, False, t, ex.tuning).pairs)
        n_out, flops, weight_bytes = n, 2 * t * k * n, weights[0].nbytes
    if qtype in WIDE_MATVEC_KERNELS and t <= ex.tuning.matvec_max_tokens and not args.wide_sweep:
        if paired:
            variants["linear unpaired"] = with_setting(variants["linear"], row_pairs=False)
        variants |= {f"{name} generic": with_setting(record, wide_matvec=False) for name, record in variants.items()
                     if name in ("linear", "glu fused", "glu unfused")}
    moved = weight_bytes + 4 * t * (k + n_out)
    base = None
    for name, record in variants.items():
        program = bench.build(f"{op}.{name}", record, copies)
        dispatches = len(program.dispatches) // copies
        gpu_us, wall_us = bench.time(program, copies, t)
        us = gpu_us if gpu_us == gpu_us else wall_us
        base = base or us
        row = dict(op=op, k=k, n=n, type=qtype.name, tokens=t, variant=name, dispatches=dispatches, us=gpu_us,
                   wall_us=wall_us, gb_s=moved / us * 1e-3, gflop_s=flops / us * 1e-3, vs_first=us / base)
        rows.append(row)
        print(f"{op:8s} {k:6d}x{n:<7d} {qtype.name:5s} T={t:<4d} {name:20s} {dispatches}d "
              f"{gpu_us:9.1f} us (wall {wall_us:8.1f}) {row['gb_s']:8.1f} GB/s {row['gflop_s']:9.1f} GFLOP/s"
              f"  x{row['vs_first']:.2f}", flush=True)
    if args.torch and op != "output":
        rows.append(torch_peer(op, k, 2 * n if op == "gate_up" else n, t))
    return rows


def torch_peer(op: str, k: int, n: int, t: int) -> dict:
    """torch.matmul of dense random fp32 operands (TF32 off) on the GPU, CUDA events."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(t, k, device="cuda")
    w = torch.randn(n, k, device="cuda")
    for _ in range(3):
        a @ w.T
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    reps = 200
    start.record()
    for _ in range(reps):
        a @ w.T
    end.record()
    torch.cuda.synchronize()
    us = start.elapsed_time(end) * 1e3 / reps
    print(f"{op:8s} {k:6d}x{n:<7d} fp32  T={t:<4d} {'torch fp32':20s}    {us:9.1f} us"
          f"{' ' * 16}{2 * t * k * n / us * 1e-3:22.1f} GFLOP/s", flush=True)
    return dict(op=op, k=k, n=n, type="torch-fp32", tokens=t, variant="torch", us=us)


def wide_sweep(bench: Bench, models: list[str], only: set[str], args: argparse.Namespace) -> list[dict]:
    """matvec_q4_k and matvec_q6_k (T = 1) at every threads-per-row split, on the models' shapes. Relative figures
    only: compiling between short passes keeps the GPU's clocks low (see the module docstring)."""
    rows = []
    for model in models:
        for op, k, n, qtype in ops_of(model, [Q.Q4_K, Q.Q6_K]):
            if op == "output" or (only and op not in only):
                continue
            for tpr in (4, 8, 16, 32, 64):
                print(f"TPR={tpr}: ", end="")
                with tuned(bench.ex, matvec_split=MatvecShape(tpr, 256 // tpr)):
                    rows += [row | {"tpr": tpr} for row in measure_op(bench, op, k, n, qtype, 1, args)]
    return rows


def sweep(bench: Bench, models: list[str], only: set[str], t: int, out: Path | None, types: list[Q] | None,
          tiles: list[tuple[int, ...]], splits: tuple[int, ...] = (1, 2, 4, 8), f16: bool = False) -> list[dict]:
    """Every tile of `tiles` (BT, BR, RR, BK, TT) at each k split of `splits` (8 and more only where K >= 2048) on
    the models' prefill shapes (t tokens; types as ops_of takes them, None: the 270M's), in f32, and with f16 in
    f16 too where the adapter has "shader-f16"."""
    rows = []
    f16_options = [True, False] if f16 and bench.device.has("shader-f16") else [False]
    shapes = [o for model in models for o in ops_of(model, types)]
    shapes += [("gate", k, n, qtype) for op, k, n, qtype in shapes if op == "gate_up"]  # the unfused linears
    for op, k, n, qtype in shapes:
        if op == "output" or (only and op not in only):
            continue
        x = bench.ex.tensor("x", (t, k), data=bench.rng.standard_normal((t, k)).astype(np.float32))
        glu = op == "gate_up"
        w = bench.weights(op, qtype, k, 2 * n if glu else n, 1)[0]
        y = bench.ex.tensor("y", (t, n))
        for split in splits:
            for tile in [MatmulTile(*v[:4], split, *v[4:]) for v in tiles]:
                if tile.problem(k, glu) or (split >= 8 and k < 2048):
                    continue
                for in_f16 in f16_options:
                    # the tile kernel at every step length, also at the few tokens the matvecs take by default
                    tiled = partial(linear_glu if glu else linear, weight=w, x=x, y=y, t_max=t,
                                    kernel=LinearKernel.MATMUL)
                    with tuned(bench.ex, tile=tile, f16_tile_types=frozenset({qtype} if in_f16 else ())):
                        program = bench.build(f"sweep.{op}", lambda b, c, run=tiled: run(b), 1)
                    us, _ = bench.time(program, 1, t)
                    flops = 2 * t * k * w.n
                    rows.append(dict(op=op, k=k, n=n, glu=glu, type=qtype.name, tile=list(tile), f16=in_f16, us=us))
                    print(f"sweep {op:8s} {k:5d}x{n:<6d} {qtype.name:5s} tile {'x'.join(map(str, tile)):14s} "
                          f"{'f16' if in_f16 else 'f32'} {us:8.1f} us {flops / us * 1e-3:9.1f} GFLOP/s", flush=True)
        if out:  # after each shape, so that a run cut short keeps what it measured
            out.write_text(json.dumps(rows, indent=1))
    return rows


def use_sweep_picks(bench: Bench, path: Path) -> None:
    """Make the bench's linear and linear_glu run, for each shape a sweep measured, its fastest tile (and f16 or
    f32)."""
    best: dict[tuple[int, int, bool], dict] = {}
    for row in json.loads(path.read_text()):
        key = (row["k"], row["n"], row["glu"])
        if key not in best or row["us"] < best[key]["us"]:
            best[key] = row
    bench.picks = {key: dict(tile=MatmulTile(*row["tile"]),
                             f16_tile_types=frozenset({Q[row["type"]]} if row["f16"] else ()))
                   for key, row in best.items()}
    for (k, n, glu), row in sorted(best.items()):
        print(f"# pick {k}x{n}{' glu' if glu else ''}: {'x'.join(map(str, row['tile']))} "
              f"{'f16' if row['f16'] else 'f32'} {row['us']:.1f} us", flush=True)


def with_split(ex: Executor, split: str, run: Callable[[], list[dict]]) -> list[dict]:
    """run() with every GPU matvec at one split (MatmulTuning.matvec_split), "TPRxROWS" (rows of a workgroup; a
    trailing "p": each thread on two rows, PAIRS, wherever the kernel has them and the split has fewer than 64
    threads a row at one token; Q4_K on word lanes, from q4_word_lanes_min_tokens tokens, needs TPR a multiple of
    32); its rows tagged."""
    pairs = split.endswith("p")
    tpr, rows = map(int, split.rstrip("p").split("x"))
    print(f"# split {split}: {tpr} threads a row, {rows} rows a workgroup{', rows in pairs' if pairs else ''}",
          flush=True)
    with tuned(ex, matvec_split=MatvecShape(tpr, rows), row_pairs=pairs, row_pairs_min_k=0):
        return [row | {"split": split} for row in run()]


def with_tuning(ex: Executor, spec: str, run: Callable[[], list[dict]]) -> list[dict]:
    """run() with MatmulTuning fields changed, spec "field=value,field=value" (integers, true/false, or TPRxROWS for
    matvec_split); its rows tagged."""
    changes: dict[str, Any] = {}
    for item in filter(None, spec.split(",")):
        field, value = item.split("=")
        if value.lower() in ("true", "false"):
            changes[field] = value.lower() == "true"
        elif "x" in value:
            changes[field] = MatvecShape(*map(int, value.split("x")))
        else:
            changes[field] = int(value)
    print(f"# tuning {spec or 'default'}", flush=True)
    with tuned(ex, **changes):
        return [row | {"tuning": spec} for row in run()]


def end_to_end(path: str, prompt_tokens: int) -> dict:
    """Prefill tok/s of a GGUF (median of 3 after a warm-up)."""
    from models.text.engine import load_text_model

    model = load_text_model(path, context_length=prompt_tokens + 128)
    session = model.new_session()
    ids = [int(i) for i in np.random.default_rng(0).integers(10, 200000, prompt_tokens)]
    session.prefill(ids)
    rates = []
    for _ in range(3):
        session.reset()
        start = time.perf_counter()
        session.prefill(ids)
        rates.append(prompt_tokens / (time.perf_counter() - start))
    print(f"end-to-end: prefill {prompt_tokens} tokens {statistics.median(rates):.0f} tok/s "
          f"({', '.join(f'{r:.0f}' for r in rates)})", flush=True)
    return dict(model=path, prefill_tok_s=rates)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="270m", help="comma-separated names of MODELS: 270m, 1b, 4b, ...")
    parser.add_argument("--types", default="mix", help="'mix' (the 270M Q4_K_M's types) or e.g. q4_k,q6_k")
    parser.add_argument("--tokens", default="1,512")
    parser.add_argument("--ops", default="", help="only these ops (q, k, v, o, gate_up, down, output)")
    parser.add_argument("--torch", action="store_true", help="also torch.matmul fp32 on CUDA")
    parser.add_argument("--sweep", action="store_true", help="tile shapes of the GPU matmul instead")
    parser.add_argument("--sweep-tiles", default="", help="--sweep these tiles, e.g. 64x128x8x32x4,128x128x8x16x8 "
                        "(BT x BR x RR x BK x TT) rather than SWEEP_TILES")
    parser.add_argument("--sweep-splits", default="1,2,4,8", help="--sweep these k splits")
    parser.add_argument("--sweep-f16", action="store_true", help="--sweep f16 tiles too (adapters with shader-f16)")
    parser.add_argument("--wide-sweep", action="store_true", help="matvec_q4_k/q6_k threads per row instead")
    parser.add_argument("--splits", default="", help="time the wide K-quant matvecs at each of these splits, e.g. "
                        "8x32,8x40,16x8p (threads a row x rows a workgroup; p: rows in pairs)")
    parser.add_argument("--tunings", default="", help="time every op under each of these MatmulTuning changes, "
                        "';'-separated, e.g. ';every_row_q6_k_max_tokens=8' (the default, then one change)")
    parser.add_argument("--model", help="a GGUF: end-to-end prefill tok/s instead")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--tiles", type=Path, help="a --sweep JSON: run each measured shape with its fastest tile")
    parser.add_argument("--rotate-mib", type=int, default=ROTATE_BYTES >> 20, help="decode weight copies' total")
    parser.add_argument("--int8", action="store_true", help="int8 matmuls, the int8 matvecs wherever they run")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.model and args.tiles:
        parser.error("--tiles picks tiles per shape for the kernel benchmark, not for --model")
    if args.tunings and args.splits:
        parser.error("--tunings and --splits each time every op several ways: give one of them")
    if args.model:
        rows = [end_to_end(args.model, args.prompt_tokens)]
    else:
        ex = Executor(default_device(), int8_matmuls=args.int8,
                      tuning=dataclasses.replace(DEFAULT_TUNING, int8_matvec_everywhere=args.int8))
        bench = Bench(ex, args.rotate_mib << 20)
        if args.tiles:
            use_sweep_picks(bench, args.tiles)
        print(f"# {ex.device.name} ({ex.device.adapter_type}, {ex.device.backend}); features "
              f"{sorted(ex.device.features)}; timestamps: {bench.timestamps}", flush=True)
        only = set(filter(None, args.ops.split(",")))
        splits = [split for split in args.splits.split(",") if split]
        types = None if args.types == "mix" else [Q[t.upper()] for t in args.types.split(",")]
        if args.wide_sweep:
            rows = wide_sweep(bench, args.models.split(","), only, args)
        elif args.sweep:
            tiles = ([tuple(map(int, tile.split("x"))) for tile in args.sweep_tiles.split(",")] if args.sweep_tiles
                     else SWEEP_TILES)
            rows = sweep(bench, args.models.split(","), only, int(args.tokens.split(",")[-1]), args.json, types,
                         tiles, tuple(map(int, args.sweep_splits.split(","))), args.sweep_f16)
        else:
            rows = []
            for model in args.models.split(","):
                for t in map(int, args.tokens.split(",")):
                    for op, k, n, qtype in ops_of(model, types):
                        if (op == "output" and t > 1) or (only and op not in only):
                            continue
                        measure = partial(measure_op, bench, op, k, n, qtype, t, args)
                        if args.tunings:
                            for spec in args.tunings.split(";"):
                                rows += with_tuning(ex, spec, measure)
                        elif splits:
                            for split in splits:
                                rows += with_split(ex, split, measure)
                        else:
                            rows += measure()
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
