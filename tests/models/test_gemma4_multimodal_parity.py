"""Gemma 4 prompts with image and audio rows against transformers 5.24 (CPU, float32), masks included.

scripts/make_gemma4_multimodal_fixtures.py wrote tests/golden/gemma4_mm: for the "e2b" fixture (image rows causal)
and the "moe" one (use_bidirectional_attention "vision": an image's rows see each other both ways on sliding
layers, causally on full ones; audio causal), each with one image, one audio clip, both, or one image of 24 rows
(wider than the 16-token window), transformers' logits after the prompt and its 32 greedy tokens. On "wide" the
window still bounds an image row's earliest key (transformers ANDs it over causal OR block): letting the image's rows
see the whole image instead moves transformers' own logits by 1 - cosine 0.22, so the bound tells the two apart.
Here the same GGUF (rebuilt, checked byte for byte) runs with those rows as ImageSpans. Bound: 1 - cosine <= 1e-5
on the last position's logits: both sides compute in float32 with an f32 KV cache, so only summation order differs
(the text-only Gemma 4 parity measures cosines above 0.9999999), while a wrong mask on a single span moves them far
past it (the ablations below).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from models.text.engine import DecodeRow, TextModel, load_text_model
from models.text.images import ImageSpan, rows_in
from scripts.make_gemma4_fixtures import FIXTURES, file_sha256, write_gguf

GOLDEN = Path(__file__).parent.parent / "golden" / "gemma4_mm"
PROMPTS = ("image", "audio", "both", "wide")
MAX_ONE_MINUS_COS = 1e-5


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN / "golden.npz") as f:
        return dict(f)


@pytest.fixture(scope="module", params=["e2b", "moe"])
def model(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TextModel]:
    kind = request.param
    path = write_gguf(FIXTURES[kind], tmp_path_factory.mktemp("gemma4_mm") / f"gemma4_{kind}_f32.gguf", "f32",
                      "llamacpp")
    meta = json.loads((GOLDEN / "meta.json").read_text())
    assert file_sha256(path) == meta["files"][path.name], f"{path.name} differs from the golden's file"
    m = load_text_model(str(path), context_length=128, max_batch=1, kv_dtype="f32")
    m.kind = kind  # type: ignore[attr-defined]
    yield m


def spans_of(golden: dict[str, np.ndarray], key: str) -> list[ImageSpan]:
    spans, at = [], 0
    rows = golden[f"{key}/embeddings"]
    for start, n, audio in golden[f"{key}/spans"]:
        spans.append(ImageSpan(int(start), np.ascontiguousarray(rows[at:at + n]), audio=bool(audio)))
        at += n
    return spans


def run(model: TextModel, ids: list[int], spans: list[ImageSpan], n: int) -> tuple[np.ndarray, list[int]]:
    """The logits after the prompt (one prefill chunk) and n greedy tokens (the GPU's, temperature 0)."""
    session = model.new_session("f32")
    engine = session.engine
    try:
        sampled, first = engine.submit_prefill(session, ids, read_logits=True,
                                               images=rows_in(spans, 0, len(ids))).wait()
        tokens = [int(sampled[0][0])]
        while len(tokens) < n:
            sampled, _ = engine.submit_decode([DecodeRow(session, tokens[-1])]).wait()
            tokens.append(int(sampled[0][0]))
        return first[0].reshape(-1), tokens
    finally:
        session.close()


def one_minus_cos(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return 1.0 - float(a64 @ b64 / np.linalg.norm(a64) / np.linalg.norm(b64))


@pytest.mark.parametrize("name", PROMPTS)
def test_logits_and_greedy_tokens_match_transformers(model: TextModel, golden: dict[str, np.ndarray],
                                                     name: str) -> None:
    key = f"{model.kind}/{name}"  # type: ignore[attr-defined]
    ids = [int(i) for i in golden[f"{key}/ids"]]
    logits, tokens = run(model, ids, spans_of(golden, key), len(golden[f"{key}/greedy"]))
    assert one_minus_cos(logits, golden[f"{key}/logits"]) <= MAX_ONE_MINUS_COS
    assert tokens == golden[f"{key}/greedy"].tolist()


@pytest.mark.parametrize("name,flip", [("image", "causal image"), ("audio", "both-ways audio")])
def test_the_wrong_mask_moves_the_logits(model: TextModel, golden: dict[str, np.ndarray], name: str,
                                         flip: str) -> None:
    """Ablation on the model whose image rows see each other both ways: an image made causal (marked as audio),
    or an audio clip let see its later rows (marked as an image), leaves the logits clearly off transformers'."""
    if model.kind != "moe":  # type: ignore[attr-defined]
        pytest.skip("the e2b kind keeps every span causal")
    key = f"moe/{name}"
    ids = [int(i) for i in golden[f"{key}/ids"]]
    spans = [replace(s, audio=not s.audio) for s in spans_of(golden, key)]
    logits, _ = run(model, ids, spans, 1)
    assert one_minus_cos(logits, golden[f"{key}/logits"]) > 100 * MAX_ONE_MINUS_COS, flip


def test_images_both_ways_on_full_layers_too_move_the_logits(tmp_path: Path, golden: dict[str, np.ndarray],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Ablation: Gemma 3's rule (an image both ways on every layer) on the moe kind, whose full layers transformers
    keeps causal, leaves the image prompt's logits clearly off."""
    path = write_gguf(FIXTURES["moe"], tmp_path / "gemma4_moe_f32.gguf", "f32", "llamacpp")
    model = load_text_model(str(path), context_length=128, max_batch=1, kv_dtype="f32")
    arch = model.arch
    arch.config = replace(arch.config, images_both_ways_sliding_only=False)  # type: ignore[attr-defined]
    monkeypatch.setattr(TextModel, "images_both_ways", property(lambda self: True))
    key = "moe/image"
    logits, _ = run(model, [int(i) for i in golden[f"{key}/ids"]], spans_of(golden, key), 1)
    assert one_minus_cos(logits, golden[f"{key}/logits"]) > 100 * MAX_ONE_MINUS_COS
