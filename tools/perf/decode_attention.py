"""Decode attention benchmark: GPU time of one decode row's attention (kernels/attention.wgsl with the
q/k norm, RoPE and KV append of its "raw" prologue) and of its combine (attention_combine.wgsl), per layer,
for Gemma 3's head shapes (and Llama's and Qwen 3's) at several cache lengths and splits of the keys.

Each variant's program holds the op on 8 layers of one pool (one sequence, f16 cache) and is replayed
inside one compute pass with timestamp queries at the pass's start and end (tools/perf/attention.py's Timer);
the figure is the pass's time over the replays and layers, fastest of 3 passes, barriers between
dependent dispatches included as in a model's step. "attention alone" leaves out the combine dispatch,
"combine alone" the attention one (the combine then reads a scratch of zeros: every part weighs the same,
so it reads them all). The first line is the floor: one small elementwise dispatch, timed the same way.

    python tools/perf/decode_attention.py                       # 270m and 4b heads, 64 / 512 / 2048 keys
    python tools/perf/decode_attention.py --positions 64 --splits 4,32 --min-part-keys 16,32
    python tools/perf/decode_attention.py --reduce subgroup,workgroup     # the kernel's two reduction variants
    python tools/perf/decode_attention.py --models llama3.1-8b,qwen3-4b --positions 128,640   # the families' heads
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from gpu.device import default_device  # noqa: E402
from gpu.kv_cache import KVPool, rope_table  # noqa: E402
from gpu.ops import transformer as ops  # noqa: E402
from gpu.ops.transformer import RawQKV  # noqa: E402
from gpu.program import Executor, ProgramBuilder  # noqa: E402
from tools.perf.attention import MODELS, Timer  # noqa: E402

LAYERS = 8  # layers of the pool each program walks (one op per layer)


class Skipping(ProgramBuilder):
    """A builder that leaves out the dispatches of one kernel (to time the others alone)."""

    def __init__(self, executor: Executor, name: str, skip: str | None) -> None:
        super().__init__(executor, name)
        self.skip = skip

    def dispatch(self, kernel: str, *args, **kwargs) -> None:  # type: ignore[override]
        if kernel != self.skip:
            super().dispatch(kernel, *args, **kwargs)


def decode_case(ex: Executor, rng: np.random.Generator, m: dict, position: int) -> tuple[KVPool, object, RawQKV]:
    """A pool of LAYERS layers holding one sequence's keys [0, position), its row table for the token at
    `position`, and the q|k|v projection of that token as RawQKV."""
    width = m["kv"] * m["d"]
    ctx = position + 1
    pool = KVPool(ex, "bench", [width] * LAYERS, ctx, ctx, 1, "f16", page_tokens=128)
    slot = pool.open_slot()
    pool.reserve(slot, ctx)
    for layer in range(LAYERS):
        for cache in (pool.keys[layer], pool.values[layer]):
            ex.write(cache, rng.standard_normal((pool.n_pages * 128, width)).astype(np.float16).view(np.uint32))
    rows = ex.tensor("rows", (1, 4), "u32", data=np.array([[position, slot, 1, 0]], np.uint32))
    q_width = m["heads"] * m["d"]
    qkv = ex.tensor("qkv", (1, q_width + 2 * width),
                    data=rng.standard_normal((1, q_width + 2 * width)).astype(np.float32))
    q_w, k_w = (ex.tensor(name, (m["d"],), data=rng.uniform(0.5, 1.5, m["d"]).astype(np.float32))
                for name in ("q_w", "k_w"))
    table = ex.tensor("rope", (ctx, m["d"]), data=rope_table(m["d"], ctx, 10000.0))
    return pool, rows, RawQKV((qkv, 0), (qkv, q_width), (qkv, q_width + width), q_w, k_w, table, 1e-6)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="270m,4b")
    parser.add_argument("--positions", default="64,512,2048", help="cache lengths (the row's position)")
    parser.add_argument("--splits", default="4,32", help="parts of a row's keys")
    parser.add_argument("--min-part-keys", default=str(ops.ATTENTION_MIN_PART_KEYS))
    parser.add_argument("--reduce", default="default", help="'default', 'subgroup', 'workgroup' or a list")
    args = parser.parse_args()
    ex = Executor(default_device())
    timer = Timer(ex)
    rng = np.random.default_rng(0)

    def per_layer_us(record, skip: str | None = None, ops_per_program: int = LAYERS) -> float:
        b = Skipping(ex, "decode_attention", skip)
        for layer in range(ops_per_program):
            record(b, layer)
        program = b.build()
        reps = timer.reps(program, 1)
        return min(timer.us(program, 1, reps) for _ in range(3)) / ops_per_program

    x, y, total = (ex.tensor(name, (1, 256)) for name in ("x", "y", "total"))
    print(f"{ex.device.name}; floor: one 256-value add, {per_layer_us(lambda b, _: ops.add(b, x, y, total)):.2f} us")
    for model in args.models.split(","):
        m = MODELS[model]
        for position in (int(p) for p in args.positions.split(",")):
            pool, rows, raw = decode_case(ex, rng, m, position)
            out = ex.tensor("out", (1, m["heads"] * m["d"]))
            cells = []
            for reduce in args.reduce.split(","):
                subgroups = None if reduce == "default" else reduce == "subgroup"
                for min_keys in (int(k) for k in args.min_part_keys.split(",")):
                    ops.ATTENTION_MIN_PART_KEYS = min_keys
                    for splits in (int(s) for s in args.splits.split(",")):
                        def record(b: ProgramBuilder, layer: int, splits: int = splits) -> None:
                            ops.attention(b, raw, pool, layer, rows, out, heads=m["heads"], kv_heads=m["kv"],
                                          head_dim=m["d"], window=0, scale=m["d"] ** -0.5, splits=splits,
                                          subgroups=subgroups)
                        both = per_layer_us(record)
                        alone = per_layer_us(record, "attention_combine") if splits > 1 else both
                        combine = per_layer_us(record, "attention") if splits > 1 else 0.0
                        cells.append(f"{reduce}, {splits} parts (>= {min_keys} keys): {both:.1f} us "
                                     f"(attention alone {alone:.1f}, combine alone {combine:.1f})")
            print(f"{model} heads, {position} keys: " + "; ".join(cells), flush=True)


if __name__ == "__main__":
    main()
