"""Hearth alone, from a given source tree: exact (or int8) prefill and decode tok/s of one GGUF, for A/B runs of two
trees (or two tunings) on one GPU machine in one call. The harness is this file's, whichever tree it imports.

    git worktree add /tmp/base before-redesign
    python tools/perf/tree_ab.py /tmp/base model.gguf --prefill 5 --batches 1,8 --label before
    python tools/perf/tree_ab.py . model.gguf --prefill 5 --batches 1,8 --label after
    python tools/perf/tree_ab.py . model.gguf --prefill 5 --tune row_pairs=False --tune "tile=MatmulTile(64, 64, 8, 8)"

Run the trees interleaved (before, after, before, after): a GPU's clocks and neighbours drift between processes.
Every figure is --warmup untimed runs, then --reps timed ones: median (min-max). Prefill: one 512-token prompt.
Decode: 128 steps of each of --batches streams (1: after a one-token prompt; more: after 128-token prompts), 8 steps
a submission, the next recorded while the GPU runs one, as the engine's GPU sampling runs them.
--tune FIELD=EXPR replaces a field of the loaded model's MatmulTuning (gpu/ops/matmul_tuning.py) before any program
is built; EXPR is evaluated with the names of gpu.ops.matmul_tuning and gpu.ops.matmul_plan in scope. Trees from
before the tuning object have none to tune. Each line printed starts with AB.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parents[2])
# Where a tree keeps its text engine, tried in turn, so that trees of both layouts import: models/ in sub-folders
# per family with the shared engine in models/text/, and the flat models/ of the trees before it.
ENGINE_MODULES = ("models.text.engine", "models.text_model")
PROMPT, NEW, BATCH_PROMPT = 512, 128, 128  # bench/gpu.py's prompt, decode steps and batched prompts, in tokens
STEPS_PER_SUBMIT = 8


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


def spread(rates: list[float]) -> str:
    return f"{statistics.median(rates):.1f} ({min(rates):.1f}-{max(rates):.1f})"


def timed(run: Callable[[], float], warmup: int, reps: int) -> str:
    """run()'s rate: warmup untimed runs, then reps timed ones."""
    for _ in range(warmup):  # clocks up, programs built
        run()
    return spread([run() for _ in range(reps)])


class Harness:
    """One model's prefill and decode runs, through the engine's submissions (the same calls in every tree)."""

    def __init__(self, model: Any, decode_row: type) -> None:
        self.model, self.decode_row = model, decode_row
        self.engine = model.engine()

    def prefill_s(self, ids: list[int]) -> float:
        session = self.model.new_session()
        try:
            started = time.perf_counter()
            self.engine.submit_prefill(session, ids).wait()  # the sampled token comes back: the step has run
            return time.perf_counter() - started
        finally:
            session.close()

    def decode_s(self, ids: list[int], streams: int, n: int) -> float:
        """Seconds for n greedy decode steps of `streams` sequences together, after their prompts' prefills and
        one step (which builds the program)."""
        sessions = [self.model.new_session() for _ in range(streams)]
        try:
            for session in sessions:
                self.engine.submit_prefill(session, ids)
            rows = [self.decode_row(session) for session in sessions]
            self.engine.submit_decode(rows, 1).wait()
            started = time.perf_counter()
            left, pending = n, None
            while left > 0 or pending is not None:
                following = None
                if left > 0:  # recorded and submitted while the GPU runs `pending`
                    k = min(STEPS_PER_SUBMIT, left)
                    following = self.engine.submit_decode(rows, k)
                    left -= k
                if pending is not None:
                    pending.wait()
                pending = following
            return time.perf_counter() - started
        finally:
            for session in sessions:
                session.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree", help="the source tree to import gpu/ and models/ from")
    parser.add_argument("gguf")
    parser.add_argument("--tune", action="append", default=[], metavar="FIELD=EXPR",
                        help="a MatmulTuning field's value (repeatable)")
    parser.add_argument("--prefill", type=int, default=0, help="timed 512-token prompts (after --warmup untimed)")
    parser.add_argument("--int8", action="store_true", help="the model's int8_activations on")
    parser.add_argument("--batches", default="", help="decode streams, e.g. 1,8 (1: from a 1-token prompt)")
    parser.add_argument("--reps", type=int, default=5, help="timed decode runs a figure (median, min-max)")
    parser.add_argument("--warmup", type=int, default=10, help="untimed runs before each figure's timed ones")
    parser.add_argument("--label", default="")
    args = parser.parse_args()

    # the prompt's text comes from this file's tree, the same for every tree measured; then the tree alone
    sys.path.insert(0, ROOT)
    from bench.text import prompt_ids
    sys.path.remove(ROOT)
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
    hearth = Harness(model, decode_row)
    ids = prompt_ids(lambda text: model.tokenizer.encode(text, add_bos=True), PROMPT)
    figures = []
    if args.prefill:
        figures.append("prefill " + timed(lambda: PROMPT / hearth.prefill_s(ids), args.warmup, args.prefill))
    for b in batches:
        prompt = ids[:1] if b == 1 else ids[:BATCH_PROMPT]
        figures.append(f"x{b} " + timed(lambda b=b, prompt=prompt: b * NEW / hearth.decode_s(prompt, b, NEW),
                                        args.warmup, args.reps))
    print(f"AB {args.label or args.tree} {args.tune} {args.gguf}: " + ", ".join(figures), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
