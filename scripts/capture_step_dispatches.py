"""Record the dispatches of text models' step programs, as (kernel, defines, workgroup grid) per dispatch.

    python scripts/capture_step_dispatches.py tests/golden/step_dispatches.json

The models are small synthetic GGUFs written on the fly: a Gemma 3 of seven layers (sliding and global, Q4_K_M's
type mix), the Gemma 4 fixtures of scripts/make_gemma4_fixtures.py (e2b: per-layer embeddings, KV sharing,
double-wide MLP; moe: experts, attention_k_eq_v), Q4_K, and a Gemma 3 and a Gemma 4 E2B-shaped model with
feed-forwards wide enough for int8 decode activations. Each records prefill chunks and decode steps (STEPS), on
the adapter as it is (lavapipe in CI: software kernels) and with the adapter described as a GPU (the fused, folded
and int8 paths), with and without int8 activations. Only the recording runs: dispatches are noted
as they are added and no pipeline is compiled, so the adapter need not run the GPU kernels.

The golden (tests/models/test_step_dispatches.py compares against it) keeps, per program, the number of
dispatches, the kernels it uses and a digest of the full (kernel, defines, grid) lines in order, to stay small;
--lines writes the lines themselves, to diff two trees' captures where the digests differ.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu.device import Device, choose_adapter, default_device
from gpu.program import Executor, ProgramBuilder
from models.formats.gguf_file import GGUFFile
from models.gemma.gemma3 import Gemma3
from models.gemma.gemma4 import Gemma4
from models.text.step_io import StepIO
from scripts import make_synthetic_gguf as synthetic
from scripts.make_gemma4_fixtures import FIXTURES, VOCAB, write_gguf

# (t_max, r_max): prompt chunks of 64 and 512 tokens, decode steps of 1, 8 (matvecs) and 32 rows (matmuls)
STEPS = ((64, 1), (512, 1), (1, 1), (8, 8), (32, 32))
SLOTS = 36
MODES = ("software", "gpu", "gpu_int8")
N_CTX = 256
GPU_SMS = 132  # an H200's, for the planners that size grids by streaming multiprocessors
GEMMA3_TINY = {"d": 256, "layers": 7, "heads": 2, "kv": 1, "ffn": 512, "vocab": len(VOCAB), "window": 32, "scale": 1.0}
# Feed-forwards large enough for int8 decode activations (gpu/ops/matmul.py's quantised_input_pays)
GEMMA3_WIDE = {"d": 1024, "layers": 2, "heads": 4, "kv": 1, "ffn": 4096, "vocab": len(VOCAB), "window": 32,
               "scale": 8.0}
GEMMA4_WIDE = {"d": 1024, "layers": 6, "heads": 2, "kv": 1, "head_dim": 256, "global_head_dim": 512, "ffn": 2048,
               "ple": 256, "shared": 20, "pattern": 5, "window": 32, "vocab": len(VOCAB)}


def write_models(folder: Path) -> dict[str, tuple[type, Path]]:
    """The synthetic model files, by name, with the family class that runs each."""
    tokenizer = write_gguf(FIXTURES["e2b"], folder / "tokenizer.gguf", "q8_0", "llamacpp")
    models: dict[str, tuple[type, Path]] = {}
    for name, shape in (("gemma3", GEMMA3_TINY), ("gemma3_wide", GEMMA3_WIDE)):
        synthetic.SHAPES[name] = shape
        try:
            synthetic.gemma3_shape(tokenizer, name, folder / f"{name}.gguf", seed=0)
        finally:
            del synthetic.SHAPES[name]
        models[name] = (Gemma3, folder / f"{name}.gguf")
    for name in ("e2b", "moe"):
        models[f"gemma4_{name}"] = (Gemma4, write_gguf(FIXTURES[name], folder / f"{name}.gguf", "q4_k", "llamacpp"))
    # the experts' fallback where their tensors exceed a binding: every expert on every token, weighted
    models["gemma4_moe_dense"] = (type("DenseExperts", (Gemma4,), {"sparse_moe": False}), models["gemma4_moe"][1])
    e2b_shape = synthetic.GEMMA4_E2B
    synthetic.GEMMA4_E2B = GEMMA4_WIDE
    try:
        synthetic.gemma4_e2b_shape(tokenizer, folder / "gemma4_wide.gguf", seed=0, layers=GEMMA4_WIDE["layers"])
    finally:
        synthetic.GEMMA4_E2B = e2b_shape
    models["gemma4_e2b_wide"] = (Gemma4, folder / "gemma4_wide.gguf")
    return models


@contextmanager
def recording(calls: list[tuple[str, dict[str, Any], tuple[int, ...]]]) -> Iterator[None]:
    """ProgramBuilder notes its dispatches in calls and builds nothing (no pipeline, no bind group)."""
    dispatch, build = ProgramBuilder.dispatch, ProgramBuilder.build

    def note(self: ProgramBuilder, kernel: str, constants: dict[str, Any], tensors: Any, workgroups: Any) -> None:
        calls.append((kernel, dict(constants), tuple(int(g) for g in workgroups)))

    ProgramBuilder.dispatch = note  # type: ignore[method-assign]
    ProgramBuilder.build = lambda self: None  # type: ignore[method-assign, assignment, return-value]
    try:
        yield
    finally:
        ProgramBuilder.dispatch, ProgramBuilder.build = dispatch, build  # type: ignore[method-assign]


def line(kernel: str, constants: dict[str, Any], grid: tuple[int, ...]) -> str:
    defines = ",".join(f"{k}={v!r}" for k, v in sorted(constants.items()))
    return f"{kernel} {defines} {'x'.join(str(g) for g in grid)}"


def gpu_device() -> Device:
    """A device of its own on the default adapter, described as a GPU: programs take the paths a GPU takes
    (recording only; the process-wide device stays as it is)."""
    device = Device(choose_adapter(os.environ.get("HEARTH_ADAPTER")))
    device.adapter_type = "DiscreteGPU"
    device.sms = GPU_SMS
    return device


def capture(models: dict[str, tuple[type, Path]]) -> dict[str, list[str]]:
    """Every (model, mode, step)'s dispatch lines."""
    out: dict[str, list[str]] = {}
    gpu = gpu_device()
    for mode in MODES:
        device = default_device() if mode == "software" else gpu
        for name, (family, path) in models.items():
            executor = Executor(device, int8_matmuls=mode == "gpu_int8")
            arch = family(executor, GGUFFile(path), N_CTX)
            pool = arch.new_pool("f16", N_CTX, 4 * N_CTX, SLOTS, 16)
            io = StepIO(executor, "io", max(t for t, _ in STEPS), max(r for _, r in STEPS), SLOTS,
                        arch.config.vocab_size)
            for t_max, r_max in STEPS:
                calls: list[tuple[str, dict[str, Any], tuple[int, ...]]] = []
                with recording(calls):
                    arch.build_step(pool, io, t_max, r_max)
                out[f"{name}/{mode}/t{t_max}r{r_max}"] = [line(*c) for c in calls]
    return out


def summary(lines: list[str]) -> dict[str, Any]:
    return {"dispatches": len(lines), "kernels": " ".join(sorted({entry.split(" ", 1)[0] for entry in lines})),
            "sha256": hashlib.sha256("\n".join(lines).encode()).hexdigest()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out", type=Path, help="the golden JSON to write")
    parser.add_argument("--lines", type=Path, help="also write every dispatch line here (to diff by hand)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        programs = capture(write_models(Path(folder)))
    args.out.write_text(json.dumps({key: summary(lines) for key, lines in programs.items()}, indent=1) + "\n")
    if args.lines:
        args.lines.write_text("\n".join(f"{key}: {entry}" for key, lines in programs.items() for entry in lines))


if __name__ == "__main__":
    main()
