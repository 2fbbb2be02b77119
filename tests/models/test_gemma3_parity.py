"""Gemma 3 270M Q4_K_M on the GPU against transformers (CPU, float32) on the same GGUF.

The golden files come from scripts/make_parity_golden.py (transformers dequantises the
file, so both sides use identical weights; only arithmetic order and the KV cache's
precision differ). Per prompt (ten, two past the 512-token sliding window):

- prefill: logits at the prompt's last position (many tokens per step);
- decode: the reference's 64 greedy tokens fed one per step (teacher forcing), checking
  our argmax at every step and the logits after the 64th (one token per step): with the f32
  cache a short prompt and one past the window each decode alone, with the default f16 cache
  the ten decode together, one batch a step, as concurrent requests do in the server. (Every
  prompt alone as well would add ~500 one-token steps, most of a second each on lavapipe.)

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


ALONE = (0, 8)  # the prompts decoded alone with the f32 cache: a short one and one past the 512-token window
_runs: dict[str, dict[int, tuple]] = {}


def ours(model: TextModel, golden, kv_dtype: str) -> dict[int, tuple]:
    """Our results by prompt index for one cache type, computed once for the tests that read them: with the f32
    cache the ALONE prompts each decode alone, with the f16 cache (the default) all of them decode as one batch."""
    if kv_dtype not in _runs:
        prompts, ref = golden
        chosen = list(ALONE) if kv_dtype == "f32" else list(range(len(prompts)))
        forced = [ref[f"greedy_{i}"] for i in chosen]
        results = run_teacher_forced(model, [prompts[i]["ids"] for i in chosen], forced, kv_dtype,
                                     together=kv_dtype == "f16")
        _runs[kv_dtype] = dict(zip(chosen, results, strict=True))
    return _runs[kv_dtype]


@pytest.mark.parametrize("kv_dtype,min_cosine,max_abs", [pytest.param("f32", 0.99999, 0.02, marks=pytest.mark.slow),
                                                        ("f16", 0.9999, None)])
def test_parity_with_transformers(model: TextModel, golden, kv_dtype: str, min_cosine: float,
                                  max_abs: float | None) -> None:
    prompts, ref = golden
    assert len(prompts) >= 8
    assert sum(len(p["ids"]) > 512 for p in prompts) >= 2 and len(prompts[ALONE[1]]["ids"]) > 512
    report = []
    for i, (prefill, choices, decoded) in ours(model, golden, kv_dtype).items():
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
    for i, (prefill, _, _) in ours(model, golden, "f16").items():
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
