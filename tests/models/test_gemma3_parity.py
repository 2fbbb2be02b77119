"""Gemma 3 270M Q4_K_M on the GPU against transformers (CPU, float32) on the same GGUF.

The golden files come from scripts/make_parity_golden.py (transformers dequantises the
file, so both sides use identical weights; only arithmetic order and the KV cache's
precision differ). Per prompt (ten, two past the 512-token sliding window):

- prefill: logits at the prompt's last position (many tokens per step);
- decode: the reference's 64 greedy tokens fed one per step (teacher forcing), checking
  our argmax at every step and the logits after the 64th (one token per step): with the f32
  cache a short prompt and one past the window each decode alone, with the default f16 cache
  three (two short, one past the window) and all ten decode together, one batch a step, as
  concurrent requests do in the server. The f32 and ten-prompt runs are marked slow: hundreds
  of steps at most of a second each on lavapipe.

Bounds, from the issue: with an f32 KV cache, cosine >= 0.99999 and max |diff| <= 0.02
(f32 arithmetic in another order: the residual differences are ~1e-4 relative); with the
default f16 cache cosine >= 0.9999 (f16 rounds k and v to 11 significant bits). A greedy
step may pick another token only where the reference's top two are within 0.02.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from models.text.engine import DecodeRow, TextModel, load_text_model

GOLDEN = Path(__file__).parent.parent / "golden"
NEAR_TIE = 0.02  # top-two margin below which the exact reference itself is at the f32 noise level
pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def model() -> TextModel:
    return load_text_model("gemma-3-270m", context_length=2048)


@pytest.fixture(scope="module")
def golden() -> tuple[list[dict], dict[str, np.ndarray]]:
    prompts = json.loads((GOLDEN / "gemma3_270m_prompts.json").read_text())
    prompts = prompts["prompts"] if isinstance(prompts, dict) else prompts
    reference = dict(np.load(GOLDEN / "gemma3_270m_transformers.npz"))
    return prompts, reference


@pytest.fixture(scope="module")
def llamacpp() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN / "gemma3_270m_llamacpp.npz"))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(a64 @ b64 / np.linalg.norm(a64) / np.linalg.norm(b64))


def run_teacher_forced(model: TextModel, prompts: list[list[int]], forced: list[np.ndarray], kv_dtype: str,
                       together: bool) -> list[tuple[np.ndarray, list[int], np.ndarray]]:
    """Per prompt: prefill logits, our argmax at each forced step, and the logits after the last forced token.
    together: the prompts' forced tokens go in one decode batch a step (the server's continuous batching), else
    each prompt decodes alone."""
    engine = model.engine(kv_dtype)
    sessions = [engine.new_session() for _ in prompts]
    try:
        prefills = [session.prefill(ids) for session, ids in zip(sessions, prompts, strict=True)]
        choices = [[int(logits.argmax())] for logits in prefills]
        last = list(prefills)
        batches = [list(range(len(prompts)))] if together else [[i] for i in range(len(prompts))]
        for batch in batches:
            for step in range(len(forced[batch[0]])):
                rows = [DecodeRow(sessions[i], int(forced[i][step]), read_logits=True) for i in batch]
                _, logits = engine.submit_decode(rows).wait()
                for row, i in enumerate(batch):
                    last[i] = logits[row].reshape(-1)
                    choices[i].append(int(last[i].argmax()))
        return [(prefill, steps[:-1], logits) for prefill, steps, logits in zip(prefills, choices, last, strict=True)]
    finally:
        for session in sessions:
            session.close()


# (cache type, prompts, decoded together): the f32 cache's exact bound on a short prompt and one past the 512-token
# window, each alone; the default f16 cache on three prompts (two short, one past the window) and on all ten as one
# batch. The runs of all ten and of the f32 cache take most of a second a step on lavapipe over hundreds of steps.
F32_ALONE = ("f32", (0, 8), False)
F16_THREE = ("f16", (0, 1, 8), True)
F16_ALL = ("f16", tuple(range(10)), True)
_runs: dict[tuple, dict[int, tuple]] = {}


def ours(model: TextModel, golden, run: tuple[str, tuple[int, ...], bool]) -> dict[int, tuple]:
    """Our results by prompt index for one run (cache type, prompts, together), computed once for the tests that
    read them."""
    if run not in _runs:
        prompts, ref = golden
        kv_dtype, chosen, together = run
        forced = [ref[f"greedy_{i}"] for i in chosen]
        results = run_teacher_forced(model, [prompts[i]["ids"] for i in chosen], forced, kv_dtype, together)
        _runs[run] = dict(zip(chosen, results, strict=True))
    return _runs[run]


@pytest.mark.parametrize("run,min_cosine,max_abs", [pytest.param(F32_ALONE, 0.99999, 0.02, marks=pytest.mark.slow),
                                                    (F16_THREE, 0.9999, None),
                                                    pytest.param(F16_ALL, 0.9999, None, marks=pytest.mark.slow)],
                         ids=["f32-alone", "f16-three", "f16-all"])
def test_parity_with_transformers(model: TextModel, golden, run: tuple[str, tuple[int, ...], bool],
                                  min_cosine: float, max_abs: float | None) -> None:
    prompts, ref = golden
    kv_dtype = run[0]
    assert len(prompts) >= 8
    assert sum(len(p["ids"]) > 512 for p in prompts) >= 2 and any(len(prompts[i]["ids"]) > 512 for i in run[1])
    report = []
    for i, (prefill, choices, decoded) in ours(model, golden, run).items():
        prompt = prompts[i]
        for name, mine, theirs in (("prefill", prefill, ref[f"prefill_logits_{i}"]),
                                   ("decode", decoded, ref[f"decode_logits_{i}"])):
            cos, diff = cosine(mine, theirs), float(np.abs(mine - theirs).max())
            report.append(f"{kv_dtype} prompt {i} ({len(prompt['ids'])} tokens) {name}: cosine {cos:.7f}, "
                          f"max |diff| {diff:.4f}")
            assert cos >= min_cosine, report[-1]
            if max_abs is not None:
                assert diff <= max_abs, report[-1]
        margins = ref[f"margins_{i}"]
        for step, (mine_token, their_token) in enumerate(zip(choices, ref[f"greedy_{i}"])):
            if mine_token != their_token:
                report.append(f"{kv_dtype} prompt {i} step {step}: {mine_token} vs {their_token}, "
                              f"margin {margins[step]:.4f}")
                assert margins[step] < NEAR_TIE, report[-1]
    print("\n".join(report))


def test_report_against_llamacpp(model: TextModel, golden, llamacpp) -> None:
    """The peer people run: reported, not held to the exact bounds. llama.cpp quantises
    activations to 8 bits inside its matmuls, so against the exact reference its logits move
    by up to ~1.7 (cosine 0.9965-0.9999 on these prompts); a cosine under 0.99 would mean a
    real fault on one side. Greedy agreement: test_parity_with_transformers shows our greedy
    tokens are transformers' (but at near-ties), so the split from llama.cpp is printed from
    the golden files."""
    prompts, ref = golden
    lines = []
    for i, (prefill, _, _) in ours(model, golden, F16_THREE).items():
        prompt = prompts[i]
        theirs = llamacpp[f"prefill_logits_{i}"]
        split = next((k for k, (a, b) in enumerate(zip(ref[f"greedy_{i}"], llamacpp[f"greedy_{i}"])) if a != b), None)
        lines.append(f"prompt {i} ({len(prompt['ids'])} tokens): vs llama.cpp prefill cosine "
                     f"{cosine(prefill, theirs):.6f}, max |diff| {np.abs(prefill - theirs).max():.3f}; "
                     f"greedy splits from llama.cpp at step {split}")
        assert cosine(prefill, theirs) >= 0.99, lines[-1]
    print("\n".join(lines))


def test_weight_memory_within_budget(model: TextModel) -> None:
    """GPU memory held for weights <= 1.1x the GGUF's tensor bytes (they stay quantised)."""
    from models.formats.gguf_file import GGUFFile

    tensor_bytes = GGUFFile(model.path).tensor_bytes
    assert model.arch.weight_bytes <= 1.1 * tensor_bytes
