"""Embedding throughput: Hearth against sentence-transformers on the same model files and machine.

Measures texts/s at batch 1 (--single-texts texts embedded one call each) and at batch 32 (--batches
calls of 32 texts each) for each engine, from text to normalised vectors (tokenisation included, as
sentence-transformers' encode includes it). The texts are fixed English sentences of 8 to 40 words.
A run embeds all of a batch size's texts; each engine runs it --warmup times untimed (shader compilation,
allocations), then --reps times timed (bench/timing.py); the table shows median (min-max) per engine and
Hearth/sentence-transformers as the ratio of medians. sentence-transformers runs on CUDA when PyTorch
sees a GPU, else on the CPU with all cores.

    .venv/bin/python bench/embeddings.py [--model all-minilm-l6-v2] [--warmup 1] [--reps 5] [--json out.json]

On the GPU machine, where the shipped 90 MB model.safetensors cannot travel, --random-weights DIR runs a
random-weight model of the same shapes instead (sentence-transformers there on PyTorch CUDA): DIR holds
the shipped model's small files (scripts/make_random_minilm.py --files-only, here) and gets random
weights from transformers on first use. Both engines load that one file, so the cosine check holds.

`make bench` runs this after bench/text.py (the `bench` extra installs sentence-transformers). A
benchmark, not a test: nothing here asserts a speed; the cosine between the engines' vectors is shown
as a check that both ran the same model.
"""

from __future__ import annotations

import argparse
import importlib.util
import platform
import random
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

from bench.timing import (add_timing_args, cell, check_timing_args, markdown_table, ratio, run_info,  # noqa: E402
                          summary, write_json)

_WORDS = ("the a river town market winter light garden doctor teacher city music water stone book friend "
          "network model system energy slowly quickly often never always under over between across builds "
          "carries reads writes opens finds remembers explains travels begins finishes answers").split()


def bench_texts(n: int, seed: int = 0) -> list[str]:
    """n fixed sentences of 8 to 40 words."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        words = [rng.choice(_WORDS) for _ in range(rng.randint(8, 40))]
        out.append(" ".join(words).capitalize() + ".")
    return out


class Engine(Protocol):
    name: str
    detail: str

    def embed(self, texts: list[str]) -> np.ndarray: ...


class HearthEngine:
    """Hearth through the model API: tokenize, then one embed call per batch."""

    name = "hearth"

    def __init__(self, model: str) -> None:
        from gpu.device import default_device
        from models.embeddings.engine import load_embedding_model

        device = default_device()
        self.detail = f"{device.name} ({device.adapter_type}, {device.backend})"
        self.model = load_embedding_model(model, device=device)
        self.path = self.model.path

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.model.embed([self.model.tokenize(t, truncate=True) for t in texts])


class SentenceTransformersEngine:
    """sentence-transformers on the same directory (CUDA when available)."""

    name = "sentence-transformers"

    def __init__(self, path: Path, threads: int | None) -> None:
        import sentence_transformers
        import torch

        if threads:
            torch.set_num_threads(threads)
        device = "cuda" if torch.cuda.is_available() else "cpu"
        self.model = sentence_transformers.SentenceTransformer(str(path), device=device)
        where = torch.cuda.get_device_name() if device == "cuda" else f"CPU, {torch.get_num_threads()} threads"
        self.detail = f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}, {where}"

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.model.encode(texts, batch_size=len(texts), convert_to_numpy=True)


@dataclass
class Result:
    engine: str
    detail: str
    texts_per_s: dict[int, list[float]] = field(default_factory=dict)  # batch size -> per timed repetition

    def record(self) -> dict[str, object]:
        """What --json keeps of it: every sample per batch size with its median, min and max."""
        return {"engine": self.engine, "detail": self.detail,
                "texts_per_s": {batch: summary(s) for batch, s in self.texts_per_s.items()}}


def measure(engine: Engine, workloads: dict[int, list[list[str]]], warmup: int,
            reps: int) -> tuple[Result, np.ndarray]:
    """texts/s per batch size; also the vectors of the first workload's texts, for the cosine check."""
    result = Result(engine.name, engine.detail)
    first = None
    for batch, calls in workloads.items():
        vectors: list[np.ndarray] = []
        for rep in range(warmup + reps):  # the untimed runs first: they compile this batch size's programs
            started = time.perf_counter()
            vectors = [engine.embed(texts) for texts in calls]
            elapsed = time.perf_counter() - started
            if rep >= warmup:
                result.texts_per_s.setdefault(batch, []).append(sum(len(t) for t in calls) / elapsed)
        if first is None:
            first = np.concatenate(vectors)
        print(f"  {engine.name}: batch {batch}: {cell(result.texts_per_s[batch])} texts/s", file=sys.stderr)
    assert first is not None
    return result, first


def random_model(out: Path) -> Path:
    """out with random weights of the shipped model's shapes (scripts/make_random_minilm.py), made if missing."""
    script = Path(__file__).resolve().parents[1] / "scripts" / "make_random_minilm.py"
    spec = importlib.util.spec_from_file_location("make_random_minilm", script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.ensure_random_model(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="all-minilm-l6-v2", help="embedding model name or directory")
    parser.add_argument("--random-weights", type=Path, default=None, metavar="DIR",
                        help="instead of --model: a random-weight all-MiniLM-L6-v2 in DIR (made if missing)")
    parser.add_argument("--engines", default="hearth,sentence-transformers")
    parser.add_argument("--single-texts", type=int, default=16, help="texts embedded one per call (batch 1)")
    parser.add_argument("--batches", type=int, default=2, help="calls of 32 texts (batch 32)")
    parser.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads (default: all cores)")
    add_timing_args(parser, warmup=1)
    args = parser.parse_args()
    check_timing_args(parser, args)
    engines = args.engines.split(",")
    label = args.model
    if args.random_weights is not None:
        args.model = str(random_model(args.random_weights))
        label = "all-MiniLM-L6-v2 shapes, random weights"

    texts = bench_texts(max(args.single_texts, 32 * args.batches))
    workloads = {1: [[t] for t in texts[:args.single_texts]],
                 32: [texts[i * 32:(i + 1) * 32] for i in range(args.batches)]}
    results, vectors = [], []
    from models.embeddings.engine import resolve_embedding_path

    path = resolve_embedding_path(args.model)
    if "hearth" in engines:
        result, v = measure(HearthEngine(args.model), workloads, args.warmup, args.reps)
        results.append(result)
        vectors.append(v)
    if "sentence-transformers" in engines:
        try:
            engine: Engine = SentenceTransformersEngine(path, args.threads)
        except ImportError:
            print("sentence-transformers is not installed (the `bench` extra installs it): skipped", file=sys.stderr)
        else:
            result, v = measure(engine, workloads, args.warmup, args.reps)
            results.append(result)
            vectors.append(v)

    print(f"\nEmbeddings, {label}: texts/s, median (min-max) of {args.reps} runs after {args.warmup} untimed, "
          f"every engine ({platform.machine()}, Python {platform.python_version()})")
    for r in results:
        print(f"  {r.engine}: {r.detail}")
    pair = len(results) == 2
    ratios = {batch: ratio(results[0].texts_per_s[batch], results[1].texts_per_s[batch]) if pair else None
              for batch in workloads}
    rows = [[str(batch), *(cell(r.texts_per_s[batch]) for r in results),
             *([f"{ratios[batch]:.3f}"] if pair else [])] for batch in workloads]
    head = ["batch", *(r.engine for r in results)] + ([f"{results[0].engine}/{results[1].engine}"] if pair else [])
    print(markdown_table(head, rows))
    cosine = None
    if len(vectors) == 2:
        a, b = (v.astype(np.float64) for v in vectors)
        cosine = float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())
        print(f"lowest cosine between the engines' vectors: {cosine:.6f}")
    write_json(args.json, {**run_info("embeddings", args.warmup, args.reps), "model": label, "path": args.model,
                           "random_weights": args.random_weights is not None, "single_texts": args.single_texts,
                           "batches_of_32": args.batches, "min_cosine": cosine,
                           "results": [r.record() for r in results],
                           "ratio_of_medians": ratios if pair else None})


if __name__ == "__main__":
    main()
