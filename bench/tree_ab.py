"""Hearth alone, from a given source tree: exact (or int8) prefill and decode tok/s of one GGUF, as bench/gpu.py
measures them, for A/B runs of two trees on one GPU machine in one call.

    mkdir -p /tmp/base && git archive HEAD gpu models bench | tar -x -C /tmp/base
    python bench/tree_ab.py /tmp/base model.gguf --batches 1,8 --label before
    python bench/tree_ab.py . model.gguf --batches 1,8 --label after
    python bench/tree_ab.py . model.gguf --prefill 5 --set gpu.ops.matmul.ROW_PAIRS=False

Run the trees interleaved (before, after, before, after): a GPU's clocks and neighbours drift between processes.
--set MODULE.NAME=EXPR replaces a module attribute before the model loads (EXPR evaluated in the module's
namespace, so a rule can be swapped for a lambda over the module's own names). Each line printed starts with AB.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", help="the source tree to import gpu/, models/ and bench/ from")
    parser.add_argument("gguf")
    parser.add_argument("--set", action="append", default=[], metavar="MODULE.NAME=EXPR")
    parser.add_argument("--prefill", type=int, default=0, help="timed 512-token prompts (after 20 untimed)")
    parser.add_argument("--int8", action="store_true", help="the model's int8_activations on")
    parser.add_argument("--batches", default="", help="decode streams, e.g. 1,8 (1: tg128 from a 1-token prompt)")
    parser.add_argument("--reps", type=int, default=3, help="decode runs a figure (median)")
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    sys.path.insert(0, args.tree)
    for setting in args.set:
        name, expr = setting.split("=", 1)
        module_name, attr = name.rsplit(".", 1)
        module = importlib.import_module(module_name)
        setattr(module, attr, eval(expr, vars(module)))  # the benchmark's own command line

    from bench.gpu import BATCH_PROMPT, NEW, PROMPT, HearthBench, median_of
    from bench.text import prompt_ids

    batches = [int(b) for b in args.batches.split(",") if b]
    hearth = HearthBench(args.gguf, max(batches + [1]), int8_activations=args.int8)
    ids = prompt_ids(lambda text: hearth.model.tokenizer.encode(text, add_bos=True), PROMPT)
    figures = []
    if args.prefill:
        for _ in range(20):  # clocks up, programs built (see bench/gpu.py)
            hearth.prefill_s(ids)
        rates = [PROMPT / hearth.prefill_s(ids) for _ in range(args.prefill)]
        figures.append(f"prefill {statistics.median(rates):.0f} ({min(rates):.0f}-{max(rates):.0f})")
    for b in batches:
        if b == 1:
            rate = NEW / median_of(args.reps, lambda: hearth.decode_s(ids[:1], NEW))
        else:
            rate = b * NEW / median_of(args.reps, lambda b=b: hearth.batched_decode_s(ids[:BATCH_PROMPT], b, NEW))
        figures.append(f"x{b} {rate:.1f}")
    print(f"AB {args.label or args.tree} {args.set} {args.gguf}: " + ", ".join(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
