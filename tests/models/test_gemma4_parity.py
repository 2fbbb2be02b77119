"""Gemma 4 on the GPU against transformers 5.24 (CPU, float32) on tiny random-weight fixtures.

scripts/make_gemma4_fixtures.py builds the fixtures (numpy + gguf, so the GGUFs are written here, into a
temporary directory, and checked byte for byte against the files the golden logits came from) and
tests/golden/gemma4/ holds transformers' logits on each fixture's weights as each file stores them
(dequantised), so quantised files are compared on identical weights: only arithmetic order differs.
Fixtures: "e2b" (PLE, KV sharing, double-wide MLP, sliding/full head dims, proportional RoPE, softcap) and
"moe" (attention_k_eq_v, per-layer KV heads, mixture of experts: the chosen experts only, and the dense
fallback), each F32, Q8_0 and Q4_K, in llama.cpp's layout and Ollama's.

Per prompt (5 tokens, and 40: past the 16-token window): the logits after the prompt (one prefill step)
and after each of 32 greedy tokens decoded one per step with our own argmax. Bounds (issue 8): cosine
>= 0.9999 in F32 and >= 0.995 in Q8_0 and Q4_K, greedy tokens identical in F32; with an f32 KV cache the
measured cosines are all above 0.9999999 (f32 sums in another order), so these bounds have a wide margin.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from models.formats.gguf_file import GGUFFile
from models.gemma.gemma4 import read_config
from models.text.engine import DecodeRow, TextModel, load_text_model
from models.text.images import ImageSpan
from scripts.make_gemma4_fixtures import FIXTURES, file_sha256, write_gguf
from tests.fake_image_encoder import FakeImageEncoder

GOLDEN = Path(__file__).parent.parent / "golden" / "gemma4"
MIN_COSINE = {"f32": 0.9999, "q8_0": 0.995, "q4_k": 0.995}  # the acceptance bounds


class Fixtures:
    """The fixture GGUFs, written on first use into one temporary directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.meta = json.loads((GOLDEN / "meta.json").read_text())

    def path(self, fixture: str, dtype: str, layout: str = "llamacpp") -> Path:
        path = self.root / f"gemma4_{fixture}_{dtype}_{layout}.gguf"
        if not path.exists():
            write_gguf(FIXTURES[fixture], path, dtype, layout)
            if layout == "llamacpp":  # the file the golden logits were computed on, byte for byte
                expected = self.meta["files"][f"gemma4_{fixture}_{dtype}.gguf"]
                assert file_sha256(path) == expected, f"{path.name} differs from the golden's file (numpy/gguf?)"
        return path


@pytest.fixture(scope="session")
def fixtures(tmp_path_factory: pytest.TempPathFactory) -> Fixtures:
    return Fixtures(tmp_path_factory.mktemp("gemma4"))


def cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(a64 @ b64 / np.linalg.norm(a64) / np.linalg.norm(b64))


def greedy_run(model: TextModel, ids: list[int], n: int, kv_dtype: str = "f32") -> tuple[list[int], np.ndarray]:
    """Our greedy tokens (argmax of our own logits) and the logits after the prompt and each token: [n + 1, V].
    Each step also checks that the token the GPU sampled (temperature 0, after the softcap) is that argmax."""
    session = model.new_session(kv_dtype)
    engine = session.engine
    try:
        sampled, first = engine.submit_prefill(session, ids, read_logits=True).wait()
        logits = [first[0].reshape(-1)]
        tokens = []
        for _ in range(n):
            tokens.append(int(logits[-1].argmax()))
            assert int(sampled[0][0]) == tokens[-1], "the GPU's greedy token is not the argmax of its logits"
            sampled, step = engine.submit_decode([DecodeRow(session, tokens[-1], read_logits=True)]).wait()
            logits.append(step[0].reshape(-1))
        return tokens, np.stack(logits)
    finally:
        session.close()


CASES = [(f, d, "llamacpp") for f in FIXTURES for d in MIN_COSINE] + [("e2b", "q4_k", "ollama"),
                                                                     ("moe", "q8_0", "ollama")]


@pytest.mark.parametrize(("fixture", "dtype", "layout"), CASES, ids=["-".join(c) for c in CASES])
def test_logits_and_greedy_match_transformers(fixtures: Fixtures, fixture: str, dtype: str, layout: str) -> None:
    model = load_text_model(str(fixtures.path(fixture, dtype, layout)), context_length=256, max_batch=2)
    reference = np.load(GOLDEN / f"{fixture}_{dtype}.npz")
    for i in range(len(FIXTURES[fixture].prompts)):
        ref_logits, ref_greedy = reference[f"logits_{i}"], reference[f"greedy_{i}"]
        tokens, logits = greedy_run(model, reference[f"prompt_{i}"].tolist(), len(ref_greedy))
        if dtype == "f32":
            assert tokens == ref_greedy.tolist(), f"prompt {i}: greedy tokens differ"
        # compare logits while the runs agree (a quantised run may part where the reference's top two tie)
        agree = next((k for k, (a, b) in enumerate(zip(tokens, ref_greedy, strict=True)) if a != b), len(tokens))
        cosines = [cosine(logits[k], ref_logits[k]) for k in range(agree + 1)]
        assert min(cosines) >= MIN_COSINE[dtype], f"prompt {i}: cosine {min(cosines):.6f} at step {np.argmin(cosines)}"


def test_dense_experts_match_transformers(fixtures: Fixtures, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback for expert tensors too big for one binding: every expert runs, weighted by the router."""
    from models.gemma.gemma4 import Gemma4

    monkeypatch.setattr(Gemma4, "sparse_moe", False)
    model = load_text_model(str(fixtures.path("moe", "q8_0")), context_length=256, max_batch=1)
    assert not any(layer.moe.sparse for layer in model.arch.layers)
    reference = np.load(GOLDEN / "moe_q8_0.npz")
    tokens, logits = greedy_run(model, reference["prompt_1"].tolist(), 8)
    assert tokens == reference["greedy_1"][:8].tolist()
    assert min(cosine(logits[k], reference["logits_1"][k]) for k in range(9)) >= MIN_COSINE["q8_0"]


def test_batched_decode_matches_single(fixtures: Fixtures) -> None:
    """Two sequences decoding in one batched step (the server's path) give the logits each gets alone."""
    model = load_text_model(str(fixtures.path("e2b", "f32")), context_length=256, max_batch=2)
    reference = np.load(GOLDEN / "e2b_f32.npz")
    sessions = [model.new_session("f32") for _ in range(2)]
    try:
        for i, s in enumerate(sessions):
            s.prefill(reference[f"prompt_{i}"].tolist())
        for step in range(3):
            rows = [DecodeRow(s, int(reference[f"greedy_{i}"][step]), read_logits=True) for i, s in enumerate(sessions)]
            _, logits = model.engine("f32").submit_decode(rows).wait()
            for i in range(2):
                assert cosine(logits[i].reshape(-1), reference[f"logits_{i}"][step + 1]) >= 0.9999
    finally:
        for s in sessions:
            s.close()


@pytest.mark.parametrize("fixture", list(FIXTURES))
def test_prompts_prefilled_together_match_transformers(fixtures: Fixtures, fixture: str) -> None:
    """Both prompts' last chunks in one program (Engine.submit_last_chunks, as the batch generator sends prompts that
    arrive together): the logits after each are its reference's, the KV-shared layers run for each prompt's last
    row (e2b) and the experts for every row (moe)."""
    from models.text.step_io import ChunkRow

    model = load_text_model(str(fixtures.path(fixture, "f32")), context_length=256, max_batch=2)
    reference = np.load(GOLDEN / f"{fixture}_f32.npz")
    sessions = [model.new_session("f32") for _ in range(2)]
    try:
        rows = [ChunkRow(s, reference[f"prompt_{i}"].tolist(), read_logits=True) for i, s in enumerate(sessions)]
        _, logits = model.engine("f32").submit_last_chunks(rows).wait()
    finally:
        for s in sessions:
            s.close()
    for i in range(2):
        assert cosine(logits[i].reshape(-1), reference[f"logits_{i}"][0]) >= MIN_COSINE["f32"], f"prompt {i}"


def test_f16_cache(fixtures: Fixtures) -> None:
    """The default f16 KV cache rounds k and v to 11 bits: still within the F32 bound."""
    model = load_text_model(str(fixtures.path("moe", "f32")), context_length=256, max_batch=1)
    reference = np.load(GOLDEN / "moe_f32.npz")
    _, logits = greedy_run(model, reference["prompt_1"].tolist(), 8, kv_dtype="f16")
    assert min(cosine(logits[k], reference["logits_1"][k]) for k in range(9)) >= 0.9999


@pytest.mark.parametrize("fixture", sorted(FIXTURES))
def test_both_layouts_read_the_same(fixtures: Fixtures, fixture: str) -> None:
    """llama.cpp's and Ollama's files give one config (per-layer arrays or scalars) and one tokenizer."""
    from models.gemma.gemma4 import Gemma4

    files = [GGUFFile(fixtures.path(fixture, "q8_0", layout)) for layout in ("llamacpp", "ollama")]
    configs = [read_config(f) for f in files]
    assert configs[0] == configs[1]
    c = configs[0]
    fx = FIXTURES[fixture]
    assert c.head_dims == tuple(fx.head_dim_of(i) for i in range(fx.n_layers))
    assert c.kv_heads == tuple(fx.kv_heads_of(i) for i in range(fx.n_layers))
    assert c.d_ffn == tuple(fx.ffn_of(i) for i in range(fx.n_layers))
    tokenizers = [Gemma4.load_tokenizer(f.reader) for f in files]
    assert tokenizers[1].model == "gemma4"
    text = "<|turn>user\nthe cat sat<turn|>\n"
    assert tokenizers[0].encode(text) == tokenizers[1].encode(text)
    assert tokenizers[0].encode(text)[:2] == [2, 5]  # BOS, then <|turn> as one special piece


def test_soft_token_rows_take_the_pad_rows_per_layer_embedding(fixtures: Fixtures) -> None:
    """transformers' Gemma4Model gives an image's or audio clip's rows the pad token's per-layer embedding (their
    ids become pad_token_id before get_per_layer_inputs) and, on E2B-style models, causal attention. So rows given
    as soft tokens whose embeddings are the pad's scaled token embedding reproduce, exactly, the text prompt with pad
    ids there, whatever id the prompt holds at those rows."""
    path = fixtures.path("e2b", "f32")
    model = load_text_model(str(path), context_length=256, max_batch=1, kv_dtype="f32")
    model.attach_image_encoder(FakeImageEncoder(model.embedding_size))
    assert model.image_markers is not None and not model.image_markers.bidirectional
    pad = 0
    table = np.asarray(next(t.data for t in GGUFReader(path).tensors if t.name == "token_embd.weight"))
    row = (table[pad] * np.float32(model.arch.config.embed_scale)).astype(np.float32)  # type: ignore[attr-defined]
    ids = [int(t) for t in np.random.default_rng(5).integers(10, len(table), 24)]
    spans = [(3, 4), (15, 6)]
    as_pad, as_soft = list(ids), list(ids)
    for start, n in spans:
        as_pad[start:start + n] = [pad] * n
        as_soft[start:start + n] = [7] * n  # any id: the soft-token rows must not look it up
    images = [ImageSpan(start, np.tile(row, (n, 1))) for start, n in spans]
    session = model.new_session()
    try:
        want = session.prefill(as_pad)
        session.reset()
        got = session.prefill(as_soft, images)
    finally:
        session.close()
    np.testing.assert_array_equal(got, want)
