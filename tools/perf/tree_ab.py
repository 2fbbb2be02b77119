"""Hearth alone, from a given source tree: exact (or int8) prefill and decode tok/s of one GGUF, as bench/gpu.py
measures them, for A/B runs of two trees on one GPU machine in one call.

    mkdir -p /tmp/base && git archive HEAD gpu models bench | tar -x -C /tmp/base
    python tools/perf/tree_ab.py /tmp/base model.gguf --batches 1,8 --label before
    python tools/perf/tree_ab.py . model.gguf --batches 1,8 --label after
    python tools/perf/tree_ab.py . model.gguf --prefill 5 --set gpu.ops.matmul.ROW_PAIRS=False

Run the trees interleaved (before, after, before, after): a GPU's clocks and neighbours drift between processes.
--set MODULE.NAME=EXPR replaces a module attribute before the model loads (EXPR evaluated in the module's
namespace, so a rule can be swapped for a lambda over the module's own names). Each line printed starts with AB.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys
from collections.abc import Callable


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", help="the source tree to import gpu/, models/ and bench/ from")
    parser.add_argument("gguf")
    parser.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=EXPR")
    parser.add_argument("--prefill", type=int, default=0, help="timed 512-token prompts (after --warmup untimed)")
    parser.add_argument("--int8", action="store_true", help="the model's int8_activations on")
    parser.add_argument("--batches", default="", help="decode streams, e.g. 1,8 (1: tg128 from a 1-token prompt)")
    parser.add_argument("--reps", type=int, default=5, help="timed decode runs a figure (median, min-max)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs before each figure's timed ones")
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    sys.path.insert(0, args.tree)
    for setting in args.set:
        name, expr = setting.split("=", 1)
        module_name, attr = name.rsplit(".", 1)
        module = importlib.import_module(module_name)
        setattr(module, attr, eval(expr, vars(module)))  # the benchmark's own command line

    from bench.gpu import BATCH_PROMPT, NEW, PROMPT, HearthBench
    from bench.text import prompt_ids

    def spread(rates: list[float]) -> str:
        return f"{statistics.median(rates):.1f} ({min(rates):.1f}-{max(rates):.1f})"

    batches = [int(b) for b in args.batches.split(",") if b]
    hearth = HearthBench(args.gguf, max(batches + [1]), int8_activations=args.int8)
    ids = prompt_ids(lambda text: hearth.model.tokenizer.encode(text, add_bos=True), PROMPT)
    figures = []
    if args.prefill:
        for _ in range(args.warmup):  # clocks up, programs built
            hearth.prefill_s(ids)
        figures.append("prefill " + spread([PROMPT / hearth.prefill_s(ids) for _ in range(args.prefill)]))
    for b in batches:
        run: Callable[[], float] = ((lambda: NEW / hearth.decode_s(ids[:1], NEW)) if b == 1 else
                                    (lambda b=b: b * NEW / hearth.batched_decode_s(ids[:BATCH_PROMPT], b, NEW)))
        for _ in range(args.warmup):
            run()
        figures.append(f"x{b} " + spread([run() for _ in range(args.reps)]))
    print(f"AB {args.label or args.tree} {args.set} {args.gguf}: " + ", ".join(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
