"""Hearth alone, from a given source tree: exact (or int8) prefill and decode tok/s of one GGUF, for A/B runs of two
trees (or two tunings) on one GPU machine in one call. The harness is this checkout's bench/gpu.py and
bench/timing.py, whichever tree it imports the model from.

    git worktree add /tmp/base 1e2d9c3      # the tree before the redesign
    python tools/perf/tree_ab.py /tmp/base model.gguf --prefill 5 --batches 1,8 --label before
    python tools/perf/tree_ab.py . model.gguf --prefill 5 --batches 1,8 --label after
    python tools/perf/tree_ab.py . model.gguf --prefill 5 --tune row_pairs=False --tune "tile=MatmulTile(64, 64, 8, 8)"

Run the trees interleaved (before, after, before, after): a GPU's clocks and neighbours drift between processes.
Every figure is --warmup untimed runs, then --reps timed ones: median (min-max). Prefill: one 512-token prompt.
Decode: 128 steps of each of --batches streams (1: after a prompt of --depth tokens, one by default; more: after
128-token prompts), 8 steps a submission, the next recorded while the GPU runs one, as the engine's GPU sampling
runs them.
--tune FIELD=EXPR replaces a field of the loaded model's MatmulTuning (gpu/ops/matmul_tuning.py) before any program
is built; EXPR is evaluated with the names of gpu.ops.matmul_tuning and gpu.ops.matmul_plan in scope. Trees from
before the tuning object have none to tune. Each line printed starts with AB.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import sys
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])
# Where a tree keeps its text engine, tried in turn, so that trees of both layouts import: models/ in sub-folders
# per family with the shared engine in models/text/, and the flat models/ of the trees before it.
ENGINE_MODULES = ("models.text.engine", "models.text_model")


def engine_names(*names: str) -> list[Any]:
    """The named objects from the first of ENGINE_MODULES that the tree has."""
    for module_name in ENGINE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as e:
            if e.name is None or not (module_name + ".").startswith(e.name + "."):  # one the engine imports
                raise
            continue
        return [getattr(module, name) for name in names]
    raise SystemExit(f"tree_ab: the tree has none of {', '.join(ENGINE_MODULES)}")


def check_tree(tree: Path) -> None:
    """Fail where a module of gpu/ or models/ came from elsewhere than the tree."""
    for name, module in list(sys.modules.items()):
        file = getattr(module, "__file__", None)
        if name.split(".")[0] in ("gpu", "models") and file and not Path(file).resolve().is_relative_to(tree):
            raise SystemExit(f"tree_ab: {name} was imported from {file}, outside {tree}")


def parse_tunes(tunes: list[str], tree: str) -> dict[str, Any]:
    """{field: value} of --tune FIELD=EXPR settings, checked against the tree's MatmulTuning."""
    if not tunes:
        return {}
    try:
        tuning_module = importlib.import_module("gpu.ops.matmul_tuning")
        plan_module = importlib.import_module("gpu.ops.matmul_plan")
    except ModuleNotFoundError as e:
        if e.name != "gpu.ops.matmul_tuning":
            raise
        raise SystemExit(f"tree_ab: --tune needs a tree with gpu/ops/matmul_tuning.py; {tree} has no tuning object "
                         f"(run it without --tune)") from None
    names = vars(plan_module) | vars(tuning_module)
    fields = {f.name for f in dataclasses.fields(tuning_module.MatmulTuning)}
    changes = {}
    for setting in tunes:
        name, sep, expr = setting.partition("=")
        name = name.strip()
        if not sep or name not in fields:
            raise SystemExit(f"tree_ab: --tune {setting!r}: not FIELD=EXPR with a field of MatmulTuning "
                             f"({', '.join(sorted(fields))})")
        changes[name] = eval(expr, dict(names))  # the benchmark's own command line
    return changes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", help="the source tree to import gpu/ and models/ from")
    parser.add_argument("gguf")
    parser.add_argument("--tune", action="append", default=[], metavar="FIELD=EXPR",
                        help="a MatmulTuning field's value (repeatable)")
    parser.add_argument("--prefill", type=int, default=0, help="timed 512-token prompts (after --warmup untimed)")
    parser.add_argument("--int8", action="store_true", help="the model's int8_activations on")
    parser.add_argument("--batches", default="", help="decode streams, e.g. 1,8 (1: after a --depth-token prompt)")
    parser.add_argument("--depth", type=int, default=1,
                        help="one stream's prompt tokens, at most bench/gpu.py's 512 (its 'after 512 tokens' cell)")
    parser.add_argument("--reps", type=int, default=5, help="timed decode runs a figure (median, min-max)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs before each figure's timed ones")
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    # the harness and the prompt come from this checkout, the same for every tree measured; then the tree alone
    sys.path.insert(0, ROOT)
    from bench.gpu import BATCH_PROMPT, NEW, PROMPT, HearthBench
    if not 1 <= args.depth <= PROMPT:
        parser.error(f"--depth must be 1 to {PROMPT}, not {args.depth}")
    from bench.text import prompt_ids
    from bench.timing import cell, timed
    sys.path[:] = [p for p in sys.path if p != ROOT]
    tree = Path(args.tree).resolve()
    sys.path.insert(0, str(tree))
    # An editable install's finder serves its own checkout's modules where the tree lacks them (a base tree lacks
    # the newer modules): without it a module the tree lacks is missing, not taken from another tree.
    sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, "__module__", "").startswith("__editable__")]

    changes = parse_tunes(args.tune, args.tree)
    load_text_model, decode_row = engine_names("load_text_model", "DecodeRow")
    batches = [int(b) for b in args.batches.split(",") if b]
    model = load_text_model(args.gguf, context_length=2048, max_batch=max(batches + [1]),
                            pool_tokens=2048 + max(batches + [1]) * 5 * 128, int8_activations=args.int8)
    if changes:  # the programs are built at their first step, with the executor's tuning of then
        model.executor.tuning = dataclasses.replace(model.executor.tuning, **changes)
    check_tree(tree)
    hearth = HearthBench(model, decode_row)
    ids = prompt_ids(lambda text: model.tokenizer.encode(text, add_bos=True), PROMPT)
    figures = []
    if args.prefill:
        figures.append("prefill " + cell(timed(lambda: PROMPT / hearth.prefill_s(ids), args.warmup, args.prefill)))
    for b in batches:
        prompt = ids[:args.depth] if b == 1 else ids[:BATCH_PROMPT]
        rates = timed(lambda b=b, prompt=prompt: b * NEW / hearth.batched_decode_s(prompt, b, NEW),
                      args.warmup, args.reps)
        figures.append(f"x{b}{f' after {args.depth}' if b == 1 and args.depth > 1 else ''} {cell(rates)}")
    print(f"AB {args.label or args.tree} {args.tune} {args.gguf}: " + ", ".join(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
