"""Constrained decoding's cost: decode tok/s of greedy streams held to a JSON schema against the same streams free,
on the same model and prompt, at 1 and 8 streams (issue 38 aims at constrained >= 0.9x free).

Each measurement runs --streams sequences of one prompt through one BatchGenerator (as the chat worker does), greedy,
each for exactly --tokens tokens: the free run ignores end-of-sequence (stop_ids=frozenset()), the constrained run
follows a schema of an array of catalogue records with at least --tokens / 16 items (a record takes some 30
tokens), which cannot be complete before --tokens tokens (--schema: the records' title any string, or one of at
most 24 characters, the costly case for the grammar library). Decode tok/s counts the tokens that arrive after every
stream has its first token (the prompt's prefill and the first token are not decode) over the time from then to the
last token, all streams together. The mask cost is the host time spent in TokenConstraint.fill_mask and advance
(each stream's constraint wrapped in a timer) per constrained token; its share is that time at the run's token
rate, the part of the decode wall time the host spends in the grammar. Checked and refused are the shares of
constrained tokens drawn unmasked and checked by the grammar, and refused by it (models/text/batch.py's check
first; --check-first). Both runs get the same --warmup untimed runs and --reps timed ones, alternated (free,
constrained, free, ...) so that a load that changes during the benchmark falls on both; the table shows median
(min-max) and constrained/free as the ratio of medians (bench/timing.py).

The constrained runs jump forward (models/text/batch.py: the tokens the grammar forces, a record's keys and
punctuation, go in as one prompt chunk). --stepped adds a third run of every measurement, constrained with
jump-forward off (a step a token), alternated with the others, and the table gains its tok/s, jump/stepped (ratio of
medians) and both runs' rounds per token (BatchGenerator.step() calls during decode per token of a stream).

    .venv/bin/python bench/constrained.py [--model PATH] [--schema records|bounded] [--streams 1,8] [--tokens N]
        [--stepped] [--check-first auto|always|never] [--warmup 1] [--reps 5] [--json out.json]

--tokens defaults to 128 on a GPU and 32 on a software adapter (lavapipe decodes a few tokens a second). This is a
benchmark, not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.timing import add_timing_args, cell, check_timing_args, ratio, run_info, summary, write_json  # noqa: E402

if TYPE_CHECKING:
    from gpu.device import Device
    from models.text.engine import TextModel
    from models.text.grammar import GrammarVocabulary, TokenConstraint

PROMPT = "The library's catalogue, as a JSON array of records:\n"


def book(title: dict[str, Any]) -> dict[str, Any]:
    """A catalogue record whose title is held to `title` (a string schema)."""
    return {
        "type": "object",
        "properties": {
            "id": {"type": "integer", "minimum": 0, "maximum": 9999},
            "title": title,
            "year": {"type": "integer", "minimum": 1450, "maximum": 2030},
            "available": {"type": "boolean"},
            "genre": {"enum": ["fiction", "history", "science", "poetry"]},
        },
        "required": ["id", "title", "year", "available", "genre"],
        "additionalProperties": False,
    }


# --schema: the records' title as pydantic's `str` gives it, or `constr(max_length=24)`. llguidance's mask costs
# tens of microseconds in most states, but milliseconds inside a string whose remaining length is below the
# vocabulary's longest pieces (48 bytes in Gemma 3's): every token must then be checked for its length.
ITEMS = {"records": book({"type": "string"}), "bounded": book({"type": "string", "maxLength": 24})}
MIN_ITEM_TOKENS = 16  # fewer than the tokens of the shortest record (32 with its separator): see schema()


def schema(name: str, tokens: int) -> dict[str, Any]:
    """An array of ITEMS[name] records too long to be complete before `tokens` tokens: every run generates all."""
    return {"type": "array", "items": ITEMS[name], "minItems": tokens // MIN_ITEM_TOKENS + 1}


class TimedConstraint:
    """A TokenConstraint that adds up the host time of the calls the batch generator makes on it each step."""

    def __init__(self, inner: TokenConstraint) -> None:
        self.inner = inner
        self.vocabulary = inner.vocabulary
        self.fill_s = 0.0
        self.advance_s = 0.0
        self.tokens = 0

    def fill_mask(self, out: np.ndarray) -> None:
        """TokenConstraint.fill_mask, timed."""
        start = time.perf_counter()
        try:
            self.inner.fill_mask(out)
        finally:
            self.fill_s += time.perf_counter() - start

    def forced_tokens(self, limit: int) -> list[int]:
        """TokenConstraint.forced_tokens (jump-forward), timed with advance."""
        start = time.perf_counter()
        try:
            return self.inner.forced_tokens(limit)
        finally:
            self.advance_s += time.perf_counter() - start

    def allows(self, token: int) -> bool:
        """TokenConstraint.allows (a token drawn unmasked checked), timed with advance."""
        start = time.perf_counter()
        try:
            return self.inner.allows(token)
        finally:
            self.advance_s += time.perf_counter() - start

    def advance(self, token: int) -> None:
        """TokenConstraint.advance, timed."""
        start = time.perf_counter()
        try:
            self.inner.advance(token)
        finally:
            self.advance_s += time.perf_counter() - start
            self.tokens += 1

    @property
    def finished(self) -> bool:
        return self.inner.finished

    @property
    def accepting(self) -> bool:
        return self.inner.accepting


@dataclass
class Run:
    """One run of all streams: decode tok/s, the first stream's tokens and, constrained, the grammar's host time per
    token."""

    tok_s: float
    tokens: list[int]
    rounds_per_token: float  # step() calls during decode per token of a stream
    fill_us: float = 0.0  # per constrained token
    advance_us: float = 0.0  # with the jump-forward's look-ups of forced tokens
    checked: float = 0.0  # the share of constrained tokens drawn unmasked and checked by the grammar (check-first)
    refused: float = 0.0  # the share refused by it (each drawn again under the mask)


def run_once(model: TextModel, vocabulary: GrammarVocabulary, prompt: list[int], streams: int, tokens: int,
             grammar: str | None, jump_forward: bool = True, check_first: bool | None = None) -> Run:
    """All streams from the prompt to `tokens` tokens each (under grammar unless it is None); raises if a stream
    ends otherwise (an error, a grammar complete early) or a stream is preempted (the pool is sized to avoid it).
    jump_forward: whether the grammar's forced tokens go in as one chunk (off: a step a token); check_first: the
    BatchGenerator's (None: where masks take long)."""
    import models.text.batch as batch_module

    # The batch fills its constrained rows' masks together (models.text.grammar.fill_masks, on llguidance's threads):
    # that wall time is shared out over the rows.
    fill_masks = batch_module.fill_masks

    def timed_fill_masks(constraints: list[Any], out: np.ndarray) -> None:
        start = time.perf_counter()
        try:
            fill_masks([c.inner if isinstance(c, TimedConstraint) else c for c in constraints], out)
        finally:
            share = (time.perf_counter() - start) / max(len(constraints), 1)
            for c in constraints:
                if isinstance(c, TimedConstraint):
                    c.fill_s += share

    batch_module.fill_masks = timed_fill_masks
    try:
        return _run_once(model, vocabulary, prompt, streams, tokens, grammar, jump_forward, check_first)
    finally:
        batch_module.fill_masks = fill_masks


def _run_once(model: TextModel, vocabulary: GrammarVocabulary, prompt: list[int], streams: int, tokens: int,
              grammar: str | None, jump_forward: bool, check_first: bool | None) -> Run:
    from models.text.batch import BatchGenerator, EndEvent, TokenEvent
    from models.text.grammar import TokenConstraint
    from models.text.sampler import SamplingParams

    generator = BatchGenerator(model, jump_forward=jump_forward, check_first=check_first)
    timers = []
    for key in range(streams):
        constraint = None
        if grammar is not None:
            constraint = TimedConstraint(TokenConstraint(vocabulary, grammar))
            timers.append(constraint)
        generator.add(key, prompt, SamplingParams(temperature=0.0), tokens, stop_ids=frozenset(),
                      constraint=constraint)  # type: ignore[arg-type]  # a TokenConstraint with timers
    # Decode is timed from the end of the step that gave the last stream its first token to the end of the step that
    # gave the last token, and counts the tokens of the steps between.
    started: set[int] = set()
    start = end = 0.0
    decoded = produced = rounds = 0
    first_stream: list[int] = []
    while generator.busy:
        events = generator.step()
        now = time.perf_counter()
        timing = bool(start)
        rounds += timing
        for event in events:
            if isinstance(event, TokenEvent):
                produced += 1
                decoded += timing
                started.add(event.key)
                if event.key == 0:
                    first_stream.append(event.token.id)
            elif isinstance(event, EndEvent) and event.reason != "length":
                raise RuntimeError(f"stream {event.key} ended {event.reason!r} before {tokens} tokens: {event.error}")
        if any(isinstance(event, TokenEvent) for event in events):
            end = now
        if not start and len(started) == streams:
            start = now
    if generator.preemptions:
        raise RuntimeError(f"{generator.preemptions} preemptions: the KV pool is too small for {streams} streams")
    if produced != streams * tokens or not decoded:
        raise RuntimeError(f"{produced} tokens from {streams} streams of {tokens}: nothing to time")
    run = Run(decoded / (end - start), first_stream, rounds * streams / decoded)
    if timers:
        n = sum(t.tokens for t in timers)
        run.fill_us = 1e6 * sum(t.fill_s for t in timers) / n
        run.advance_us = 1e6 * sum(t.advance_s for t in timers) / n
        run.checked, run.refused = generator.checked_tokens / n, generator.refused_tokens / n
    return run


@dataclass
class Result:
    """Every timed run at one stream count."""

    streams: int
    free: list[Run] = field(default_factory=list)
    constrained: list[Run] = field(default_factory=list)
    stepped: list[Run] = field(default_factory=list)  # constrained, jump-forward off (--stepped)

    def series(self) -> dict[str, list[float]]:
        """Samples per measurement (one per timed run)."""
        c = self.constrained
        return {
            "free_tok_s": [r.tok_s for r in self.free],
            "constrained_tok_s": [r.tok_s for r in c],
            "mask_us_per_token": [r.fill_us + r.advance_us for r in c],
            "fill_mask_us_per_token": [r.fill_us for r in c],
            "advance_us_per_token": [r.advance_us for r in c],
            # the share of decode wall time the host spends in the grammar: seconds per token times tokens per second
            "mask_share": [(r.fill_us + r.advance_us) * 1e-6 * r.tok_s for r in c],
            "checked_share": [r.checked for r in c],
            "refused_share": [r.refused for r in c],
            "free_rounds_per_token": [r.rounds_per_token for r in self.free],
            "constrained_rounds_per_token": [r.rounds_per_token for r in c],
            **({"stepped_tok_s": [r.tok_s for r in self.stepped],
                "stepped_rounds_per_token": [r.rounds_per_token for r in self.stepped],
                "stepped_mask_us_per_token": [r.fill_us + r.advance_us for r in self.stepped]} if self.stepped else {}),
        }

    def record(self, decode: Callable[[list[int]], str]) -> dict[str, Any]:
        """What --json keeps: every sample with median, min and max, the ratio of medians, and the first stream's
        last constrained reply (what the grammar let the model write)."""
        series = self.series()
        stepped = {"jump_over_stepped": ratio(series["constrained_tok_s"], series["stepped_tok_s"]),
                   "stepped_reply_same": self.stepped[-1].tokens == self.constrained[-1].tokens} if self.stepped else {}
        return {**{name: summary(samples) for name, samples in series.items()},
                "constrained_over_free": ratio(series["constrained_tok_s"], series["free_tok_s"]), **stepped,
                "constrained_reply": decode(self.constrained[-1].tokens)}


def measure(model: TextModel, vocabulary: GrammarVocabulary, prompt: list[int], streams: int, tokens: int,
            grammar: str, warmup: int, reps: int, stepped: bool = False, check_first: bool | None = None) -> Result:
    """warmup untimed runs of each (free, constrained, and with stepped constrained with jump-forward off), then reps
    timed runs of each, alternated; check_first: the constrained runs' (run_once)."""
    result = Result(streams)
    for rep in range(warmup):
        print(f"{streams} streams: warm-up {rep + 1}/{warmup}", file=sys.stderr, flush=True)
        run_once(model, vocabulary, prompt, streams, tokens, None)
        run_once(model, vocabulary, prompt, streams, tokens, grammar, check_first=check_first)
        if stepped:
            run_once(model, vocabulary, prompt, streams, tokens, grammar, False, check_first)
    for rep in range(reps):
        result.free.append(run_once(model, vocabulary, prompt, streams, tokens, None))
        result.constrained.append(run_once(model, vocabulary, prompt, streams, tokens, grammar,
                                           check_first=check_first))
        free, constrained = result.free[-1], result.constrained[-1]
        line = (f"{streams} streams: run {rep + 1}/{reps}: free {free.tok_s:.1f} tok/s, constrained "
                f"{constrained.tok_s:.1f} tok/s ({constrained.rounds_per_token:.2f} rounds/token), mask "
                f"{constrained.fill_us + constrained.advance_us:.0f} us/token")
        if stepped:
            result.stepped.append(run_once(model, vocabulary, prompt, streams, tokens, grammar, False, check_first))
            line += (f", stepped {result.stepped[-1].tok_s:.1f} tok/s ({result.stepped[-1].rounds_per_token:.2f} "
                     "rounds/token)")
        print(line, file=sys.stderr, flush=True)
    return result


def table(results: list[Result]) -> str:
    """One line per stream count: median (min-max) of each measurement and constrained/free (ratio of medians)."""
    stepped = any(r.stepped for r in results)
    head = ["streams", "free tok/s", "constrained tok/s", "constrained/free", "mask us/token", "mask share %",
            "checked %", "refused %"]
    head += ["stepped tok/s", "jump/stepped", "rounds/token jump", "rounds/token stepped"] if stepped else []
    rows = [head]
    for r in results:
        s = r.series()
        rows.append([str(r.streams), cell(s["free_tok_s"]), cell(s["constrained_tok_s"]),
                     f"{ratio(s['constrained_tok_s'], s['free_tok_s']):.2f}", cell(s["mask_us_per_token"]),
                     cell(s["mask_share"], 1, 100.0), cell(s["checked_share"], 1, 100.0),
                     cell(s["refused_share"], 1, 100.0)])
        if stepped:
            rows[-1] += [cell(s["stepped_tok_s"]), f"{ratio(s['constrained_tok_s'], s['stepped_tok_s']):.2f}",
                         cell(s["constrained_rounds_per_token"], 2), cell(s["stepped_rounds_per_token"], 2)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    return "\n".join("  ".join(value.rjust(width) for value, width in zip(row, widths, strict=True)) for row in rows)


def load_model(name: str, streams: int, tokens: int, device: Device | None = None) -> TextModel:
    """The model with a KV pool of room for `streams` streams' prompts and `tokens` tokens each, and a submission of
    steps beyond: no stream is ever preempted."""
    from gpu.kv_cache import PAGE_TOKENS
    from models.text.engine import load_text_model

    context = tokens + 64 + 2 * PAGE_TOKENS
    return load_text_model(name, device=device, max_batch=streams, context_length=context,
                           pool_tokens=streams * context)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run every stream count, print the table (and write JSON if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", default="gemma-3-270m", help="GGUF file or model name (default: the shipped "
                        "Gemma 3 270M Q4_K_M)")
    parser.add_argument("--schema", choices=sorted(ITEMS), default="records",
                        help="the records' title: any string (records) or at most 24 characters (bounded)")
    parser.add_argument("--streams", default="1,8", help="comma-separated stream counts (1,8)")
    parser.add_argument("--tokens", type=int, help="tokens per stream (default: 128 on a GPU, 32 on a software "
                        "adapter)")
    parser.add_argument("--stepped", action="store_true", help="also time the constrained runs with jump-forward "
                        "off (a step a token) and compare")
    parser.add_argument("--check-first", choices=("auto", "always", "never"), default="auto",
                        help="whether constrained steps draw unmasked and have the grammar check the token: where "
                        "masks take long (auto, the server's way), always, or never (a mask every step)")
    add_timing_args(parser, warmup=1)
    args = parser.parse_args(argv)
    check_timing_args(parser, args)
    try:
        streams = sorted({int(s) for s in args.streams.split(",") if s.strip()})
    except ValueError:
        parser.error(f"--streams takes comma-separated integers, not {args.streams!r}")
    if not streams or streams[0] < 1:
        parser.error("--streams needs counts of at least 1")
    if args.tokens is not None and args.tokens < 2:
        parser.error("--tokens must be at least 2 (the first token is not decode)")

    from gpu.device import default_device
    from models.text.grammar import compile_grammar, grammar_vocabulary, json_schema

    device = default_device()
    tokens = args.tokens or (32 if device.is_software else 128)
    detail = f"{device.name} ({device.adapter_type}, {device.backend})"
    model = load_model(args.model, max(streams), tokens, device)
    prompt = model.tokenizer.encode(PROMPT)
    vocabulary = grammar_vocabulary(model.tokenizer)
    the_schema = schema(args.schema, tokens)
    grammar = compile_grammar(vocabulary, json_schema(the_schema))
    check_first = {"auto": None, "always": True, "never": False}[args.check_first]
    results = [measure(model, vocabulary, prompt, n, tokens, grammar, args.warmup, args.reps, args.stepped,
                       check_first) for n in streams]

    print(f"model: {model.path}")
    print(f"device: {detail}")
    print(f"schema: {args.schema}; {tokens} greedy tokens per stream after a {len(prompt)}-token prompt; decode tok/s "
          f"of all streams together; median (min-max) of {args.reps} runs after {args.warmup} untimed, both alike\n")
    print(table(results))
    reply = model.tokenizer.decode(results[-1].constrained[-1].tokens)
    print(f"\nfirst stream's constrained reply: {reply[:160]!r}{' ...' if len(reply) > 160 else ''}")
    write_json(args.json, {**run_info("constrained", args.warmup, args.reps), "model": str(model.path),
                           "device": detail, "prompt_tokens": len(prompt), "tokens": tokens,
                           "schema_name": args.schema, "schema": the_schema, "stepped": args.stepped,
                           "check_first": args.check_first,
                           "results": {str(r.streams): r.record(model.tokenizer.decode) for r in results}})
    return 0


if __name__ == "__main__":
    sys.exit(main())
