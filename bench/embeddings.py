"""Embedding throughput: Hearth against sentence-transformers on the same model files and machine.

Measures texts/s at batch 1 (--single-texts texts embedded one call each) and at batch 32 (--batches
calls of 32 texts each) for each engine, from text to normalised vectors (tokenisation included, as
sentence-transformers' encode includes it). The texts are fixed English sentences of 8 to 40 words.
One untimed warm-up per engine and batch size (shader compilation, allocations), then --reps timed
runs; the table shows medians and Hearth's ratio to sentence-transformers. sentence-transformers runs
on CUDA when PyTorch sees a GPU, else on the CPU with all cores.

    .venv/bin/python bench/embeddings.py [--model all-minilm-l6-v2] [--reps 3] [--json out.json]

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
import datetime
import importlib.util
import json
import platform
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script from anywhere

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
        from models.embedding_model import load_embedding_model

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
    texts_per_s: dict[int, list[float]] = field(default_factory=dict)  # batch size -> per repetition

    def median(self, batch: int) -> float:
        return statistics.median(self.texts_per_s[batch])


def measure(engine: Engine, workloads: dict[int, list[list[str]]], reps: int) -> tuple[Result, np.ndarray]:
    """texts/s per batch size; also the vectors of the first workload's texts, for the cosine check."""
    result = Result(engine.name, engine.detail)
    first = None
    for batch, calls in workloads.items():
        engine.embed(calls[0])  # warm-up: compiles this batch size's programs
        for _ in range(reps):
            started = time.perf_counter()
            vectors = [engine.embed(texts) for texts in calls]
            elapsed = time.perf_counter() - started
            result.texts_per_s.setdefault(batch, []).append(sum(len(t) for t in calls) / elapsed)
        if first is None:
            first = np.concatenate(vectors)
        print(f"  {engine.name}: batch {batch}: {result.median(batch):.1f} texts/s", file=sys.stderr)
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
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="PyTorch CPU threads (default: all cores)")
    parser.add_argument("--json", default=None, help="write the results here ('-' for stdout)")
    args = parser.parse_args()
    engines = args.engines.split(",")
    label = args.model
    if args.random_weights is not None:
        args.model = str(random_model(args.random_weights))
        label = "all-MiniLM-L6-v2 shapes, random weights"

    texts = bench_texts(max(args.single_texts, 32 * args.batches))
    workloads = {1: [[t] for t in texts[:args.single_texts]],
                 32: [texts[i * 32:(i + 1) * 32] for i in range(args.batches)]}
    results, vectors = [], []
    from models.embedding_model import resolve_embedding_path

    path = resolve_embedding_path(args.model)
    if "hearth" in engines:
        result, v = measure(HearthEngine(args.model), workloads, args.reps)
        results.append(result)
        vectors.append(v)
    if "sentence-transformers" in engines:
        try:
            engine: Engine = SentenceTransformersEngine(path, args.threads)
        except ImportError:
            print("sentence-transformers is not installed (the `bench` extra installs it): skipped", file=sys.stderr)
        else:
            result, v = measure(engine, workloads, args.reps)
            results.append(result)
            vectors.append(v)

    print(f"\nEmbeddings, {label}: texts/s (medians of {args.reps}; {platform.machine()}, "
          f"{platform.python_version()})")
    for r in results:
        print(f"  {r.engine}: {r.detail}")
    names = [r.engine for r in results]
    ratio = len(results) == 2
    print("| batch | " + " | ".join(names) + (" | hearth/sentence-transformers |" if ratio else " |"))
    print("|---" * (len(names) + 1 + ratio) + "|")
    for batch in workloads:
        cells = [f"{r.median(batch):.1f}" for r in results]
        if ratio:
            cells.append(f"{results[0].median(batch) / results[1].median(batch):.3f}")
        print(f"| {batch} | " + " | ".join(cells) + " |")
    cosine = None
    if len(vectors) == 2:
        a, b = (v.astype(np.float64) for v in vectors)
        cosine = float(((a * b).sum(1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)).min())
        print(f"lowest cosine between the engines' vectors: {cosine:.6f}")
    if args.json:
        payload = json.dumps({"model": label, "path": args.model, "random_weights": args.random_weights is not None,
                              "single_texts": args.single_texts, "batches_of_32": args.batches, "reps": args.reps,
                              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                              "machine": f"{platform.machine()}, Python {platform.python_version()}",
                              "min_cosine": cosine, "results": [asdict(r) for r in results]}, indent=1)
        if args.json == "-":
            print(payload)
        else:
            Path(args.json).write_text(payload + "\n")


if __name__ == "__main__":
    main()
