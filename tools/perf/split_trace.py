"""Host timeline of constrained decoding's split steps: where the host's time goes, a token at a time, when one
stream is held to a JSON schema (bench/constrained.py's streams, through the same batch generator).

The batch generator's, engine's and grammar's calls are wrapped with timers for one constrained run after two
untimed ones; the report gives each call's time per decoded token on each thread (the main thread, the recorder
thread that ends wgpu's encodings, the masking thread), then the nested calls of a few steps from the run's middle.
A step whose main thread waits in PendingResult.wait is waiting for the GPU; one that waits in
_masks_beside_recording, for the masks.

    python tools/perf/split_trace.py --model /tmp/s270m.gguf --schema bounded
    python tools/perf/split_trace.py --overlap --tokens 24      # lavapipe: overlapped rounds as on a GPU

Times include the timers' own cost (a few microseconds a call). Nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import functools
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import gpu.program as program_module  # noqa: E402
import models.text.batch as batch_module  # noqa: E402
import models.text.engine as engine_module  # noqa: E402
import models.text.grammar as grammar_module  # noqa: E402
from bench import constrained  # noqa: E402

Event = tuple[str, str, float, float]  # (call, thread, start, end)

TRACED: list[tuple[Any, tuple[str, ...]]] = [
    (batch_module.BatchGenerator, ("step", "_sample_split", "_handle_round", "_submit_logits", "_record_logits_ahead",
                                   "_masks_beside_recording", "_fill_masks", "_submit_round", "_jump", "_make_room",
                                   "_record_logits", "_refused")),
    (engine_module.Engine, ("record_logits",)),
    (engine_module.RecordedLogits, ("submit", "finish")),
    (engine_module.LogitsStep, ("record_sample", "sample")),
    (program_module.PendingResult, ("wait",)),
    (program_module.Submission, ("submit", "finish")),
    (grammar_module.TokenConstraint, ("advance", "allows", "forced_tokens")),
    (grammar_module, ("fill_masks",)),
]


class Tracer:
    """Timers around functions, recording while `on`."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.on = False

    def wrap(self, owner: Any, name: str) -> None:
        inner: Callable[..., Any] = getattr(owner, name)
        label = f"{getattr(owner, '__name__', type(owner).__name__)}.{name}"

        @functools.wraps(inner)
        def timed(*args: Any, **kwargs: Any) -> Any:
            if not self.on:
                return inner(*args, **kwargs)
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.events.append((label, threading.current_thread().name, start, time.perf_counter()))

        setattr(owner, name, timed)

    def per_token(self, tokens: int) -> str:
        """Each call's total time per token, by thread, longest first."""
        totals: dict[str, tuple[int, float]] = {}
        for label, thread, start, end in self.events:
            key = label if thread == "MainThread" else f"{label} [{thread.rsplit('_', 1)[0]}]"
            calls, seconds = totals.get(key, (0, 0.0))
            totals[key] = (calls + 1, seconds + end - start)
        lines = [f"{'call [thread]':64s} {'calls':>6s} {'us/token':>9s} {'us/call':>8s}"]
        for key, (calls, seconds) in sorted(totals.items(), key=lambda item: -item[1][1]):
            lines.append(f"{key:64s} {calls:6d} {1e6 * seconds / tokens:9.0f} {1e6 * seconds / calls:8.0f}")
        return "\n".join(lines)

    def timeline(self, steps: int) -> str:
        """The calls during `steps` steps from the run's middle: start (us from the first), duration, nesting."""
        main_steps = [e for e in self.events if e[0].endswith(".step") and e[1] == "MainThread"]
        middle = main_steps[len(main_steps) // 2:][:steps]
        if not middle:
            return "(no steps traced)"
        first, last = middle[0][2], middle[-1][3]
        shown = sorted((e for e in self.events if first <= e[2] <= last), key=lambda e: e[2])
        lines = [f"{'start us':>9s} {'us':>7s} call"]
        for label, thread, start, end in shown:
            depth = sum(1 for _, t, s, e in self.events if t == thread and s < start and e > end)
            where = "" if thread == "MainThread" else f" [{thread}]"
            lines.append(f"{1e6 * (start - first):9.0f} {1e6 * (end - start):7.0f} {'  ' * depth}{label}{where}")
        return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m", help="GGUF file or model name (default: the shipped "
                        "Gemma 3 270M Q4_K_M)")
    parser.add_argument("--schema", choices=sorted(constrained.ITEMS), default="bounded")
    parser.add_argument("--tokens", type=int, default=128, help="tokens of the stream (128)")
    parser.add_argument("--steps", type=int, default=4, help="steps shown in the timeline (4; 0: none)")
    parser.add_argument("--overlap", action="store_true", help="overlap rounds as on a GPU where the adapter is "
                        "software (lavapipe runs them one at a time by default)")
    args = parser.parse_args(argv)

    from models.text.grammar import compile_grammar, grammar_vocabulary, json_schema

    tracer = Tracer()
    for owner, names in TRACED:
        for name in names:
            tracer.wrap(owner, name)
    batch_module.fill_masks = grammar_module.fill_masks  # the batch's own reference to it, now timed
    if args.overlap:
        plain_init = batch_module.BatchGenerator.__init__

        def overlapped_init(self: batch_module.BatchGenerator, *a: Any, **kw: Any) -> None:
            plain_init(self, *a, **{**kw, "overlap_rounds": True})

        batch_module.BatchGenerator.__init__ = overlapped_init  # type: ignore[method-assign]

    model = constrained.load_model(args.model, 1, args.tokens)
    tracer.wrap(type(model.executor.device), "read_staging")
    prompt = model.tokenizer.encode(constrained.PROMPT)
    vocabulary = grammar_vocabulary(model.tokenizer)
    grammar = compile_grammar(vocabulary, json_schema(constrained.schema(args.schema, args.tokens)))
    for _ in range(2):
        constrained.run_once(model, vocabulary, prompt, 1, args.tokens, grammar)
    free = constrained.run_once(model, vocabulary, prompt, 1, args.tokens, None)
    tracer.on = True
    run = constrained.run_once(model, vocabulary, prompt, 1, args.tokens, grammar)
    tracer.on = False

    print(f"{model.path}, {args.schema} schema, one stream of {args.tokens} tokens: free {free.tok_s:.0f} tok/s, "
          f"constrained {run.tok_s:.0f} (mask {run.fill_us:.0f} us a token, {run.rounds_per_token:.2f} rounds a "
          f"token)\n")
    print(tracer.per_token(args.tokens))
    if args.steps:
        print(f"\n{args.steps} steps from the run's middle:")
        print(tracer.timeline(args.steps))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
