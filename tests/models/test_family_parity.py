"""The decoder families against transformers: tiny random-weight models of each family, converted to GGUF by
llama.cpp's own convert_hf_to_gguf.py (F32 and Q8_0), with transformers' float32 logits on the same weights
(scripts/make_family_fixtures.py; files and their making in tests/golden/families/meta.json).

Per family and file: Hearth's greedy run from each prompt (a short one and one past Gemma 2's window) gives the
same 32 tokens as transformers on F32, and every step's logits have a cosine of at least 0.99999 with the reference
row. Q8_0 (and llama3_h256's Q4_K_M, made by llama.cpp's llama-quantize) is compared the same way against
transformers on the dequantised weights (the same values the GPU reads); the fixtures keep every step's top two
logits apart by more than 1e-3 of the top one, so the greedy tokens are held equal there too. Qwen3-Embedding:
last-token embeddings to a cosine of 0.99999. Chat: the family's own template rendered by Hearth gives
transformers' text, and (byte-level BPE families) Hearth's tokenizer its ids.

Tolerances: the fixtures' logits reach ~10 with f32 sums over at most 256 products; Hearth's f32 KV cache
(kv_dtype f32, as the reference keeps its keys in f32) and kernels differ from PyTorch's CPU sums by rounding
only, a cosine deficit of ~1e-7; 0.99999 is the issue's bar and leaves two orders of magnitude.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from models.text.engine import TextModel, load_text_model
from models.text.tokenizer import Tokenizer

FAMILIES_DIR = Path(__file__).resolve().parent.parent / "golden" / "families"
META = json.loads((FAMILIES_DIR / "meta.json").read_text())["families"] if (FAMILIES_DIR / "meta.json").exists() else {}
CHAT = sorted(name for name in META if name != "qwen3_embedding")
DTYPES = ("f32", "q8_0")
MIN_COSINE = 0.99999
# Per family: the golden prefix of what Hearth computes on the file (llama.cpp's reading of it, where transformers'
# config says more than the file: Gemma 2's query scale) and the context it runs with (Phi-3's long RoPE factors
# are llama.cpp's pick for a context past the original one).
GOLDEN_PREFIX = {"gemma2": "headdim_scale/"}
CONTEXT = {"phi3": 256}
SYSTEM, USER = "You are a terse assistant.", "What is the capital of France?"  # the recorded conversation

pytestmark = pytest.mark.skipif(not META, reason="tests/golden/families is missing")


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    return float(a64 @ b64 / (np.linalg.norm(a64) * np.linalg.norm(b64)))


def _golden(family: str) -> dict[str, np.ndarray]:
    with np.load(FAMILIES_DIR / f"{family}.npz") as data:
        return {key: data[key] for key in data.files}


def _file(family: str, dtype: str, golden: dict[str, np.ndarray]) -> Path:
    path = FAMILIES_DIR / f"{family}.{dtype}.gguf"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == str(golden[f"{dtype}/sha256"]), "fixture file changed"
    return path


@pytest.mark.parametrize("family,dtype", [(f, d) for f in CHAT for d in META[f].get("dtypes", DTYPES)])
def test_greedy_tokens_and_logits(family: str, dtype: str) -> None:
    golden = _golden(family)
    model = load_text_model(str(_file(family, dtype, golden)), kv_dtype="f32", context_length=CONTEXT.get(family, 128))
    _check_greedy_tokens_and_logits(model, family, dtype, golden)


@pytest.mark.parametrize("family,dtype", [("llama3_h256", "q4_k_m"), ("qwen2", "f32"), ("phi3", "f32"),
                                          ("lfm2_h256", "q4_k_m")])
def test_gpu_kernels_on_prenormed_inputs(family: str, dtype: str) -> None:
    """The decode path of models too wide for their matvecs to normalise their own input: each block's output
    matvec adds its rows to the residual and writes the next norm's input with partial sums of squares
    (matvec/store_residual.wgsl), which the q|k|v, gate-up and recurrent in-projections read (x_prenormed). Run
    here on lavapipe by making the device claim not to be a CPU, the tuning's prenormed inputs on and the widest
    folded norm lowered to none so that these small files take that path: Q4_K_M (the wide Q4_K and Q6_K kernels,
    a stacked q|k|v), biases (Qwen 2's three q, k, v products), fused q|k|v and gate-up (Phi-3), and a hybrid's conv
    layers (LFM2). The greedy tokens and logits as the reference's, at the parity test's cosine."""
    from dataclasses import replace

    from gpu.device import Device

    golden = _golden(family)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Device, "is_software", property(lambda self: False))
        model = load_text_model(str(_file(family, dtype, golden)), kv_dtype="f32",
                                context_length=CONTEXT.get(family, 128), max_batch=1)
        model.executor.tuning = replace(model.executor.tuning, normed_input_max_width=0, prenormed_inputs=True)
        _check_greedy_tokens_and_logits(model, family, dtype, golden)
        dispatches = model.engine().program(1, 1).dispatches
    stores = [d.defines.get("STORE") for d in dispatches]
    sources = [d.defines.get("X_SOURCE") for d in dispatches]
    assert "residual" in stores and "prenormed" in sources, "the decode step read no prenormed input"


def _check_greedy_tokens_and_logits(model: TextModel, family: str, dtype: str, golden: dict[str, np.ndarray],
                                    ) -> None:
    """Each recorded prompt's greedy tokens and every step's logits, as the reference's."""
    prefix = f"{dtype}/{GOLDEN_PREFIX.get(family, '')}"
    n_prompts = len([k for k in golden if k.startswith(f"{dtype}/prompt_")])
    assert n_prompts == 2
    for i in range(n_prompts):
        prompt = [int(t) for t in golden[f"{dtype}/prompt_{i}"]]
        want_logits, want_tokens = golden[f"{prefix}logits_{i}"], [int(t) for t in golden[f"{prefix}greedy_{i}"]]
        session = model.new_session()
        logits = np.asarray(session.prefill(prompt))
        tokens = []
        for step in range(len(want_tokens)):
            cosine = _cosine(logits, want_logits[step])
            assert cosine >= MIN_COSINE, f"prompt {i}, step {step}: cosine {cosine:.7f}"
            tokens.append(int(logits.argmax()))
            if tokens[-1] != want_tokens[step]:
                break
            logits = np.asarray(session.decode(tokens[-1]))
        assert tokens == want_tokens, f"prompt {i}: greedy tokens part at step {len(tokens) - 1}"


@pytest.mark.parametrize("family", CHAT)
def test_prompts_prefilled_together_match_the_reference(family: str) -> None:
    """The batch generator sends the last chunks of prompts that arrive together in one program
    (Engine.submit_last_chunks): both recorded prompts prefilled that way give each its reference logits for the
    first step, to the same cosine. Hybrids are skipped: their recurrent layers take a prompt at a time, and the
    generator never packs them."""
    from models.text.step_io import ChunkRow

    dtype = META[family].get("dtypes", DTYPES)[0]
    golden = _golden(family)
    model = load_text_model(str(_file(family, dtype, golden)), kv_dtype="f32", context_length=CONTEXT.get(family, 128))
    engine = model.engine()
    if getattr(engine.pool, "recurrent", None) is not None:
        pytest.skip("recurrent layers: prompts are prefilled one at a time")
    prefix = f"{dtype}/{GOLDEN_PREFIX.get(family, '')}"
    prompts = [[int(t) for t in golden[f"{dtype}/prompt_{i}"]] for i in range(2)]
    sessions = [model.new_session() for _ in prompts]
    try:
        _, logits = engine.submit_last_chunks([ChunkRow(s, p, read_logits=True)
                                               for s, p in zip(sessions, prompts, strict=True)]).wait()
    finally:
        for session in sessions:
            session.close()
    for i in range(2):
        cosine = _cosine(logits[i].reshape(-1), golden[f"{prefix}logits_{i}"][0])
        assert cosine >= MIN_COSINE, f"prompt {i}: cosine {cosine:.7f}"


@pytest.mark.parametrize("family", CHAT)
def test_chat_template_and_tokenizer_give_the_reference_ids(family: str) -> None:
    """The family's template (from the GGUF) rendered by Hearth equals transformers' apply_chat_template for each
    recorded conversation: a system turn (where the template takes one) and a user turn, with the generation prompt
    and the variant's arguments (Qwen 3's enable_thinking); tokenized by Hearth, it gives transformers' ids on the
    byte-level BPE families. The SentencePiece ones (Mistral, Phi-3, Gemma) part from transformers on purpose:
    llama.cpp puts a space before the text that follows each special piece, Hearth does as llama.cpp does, and
    tests/models/test_tokenizer*.py hold that to llama.cpp's own ids."""
    from server.chat_worker import chat_template_of

    golden = _golden(family)
    dtype = META[family].get("dtypes", DTYPES)[0]
    tokenizer = Tokenizer.from_gguf(FAMILIES_DIR / f"{family}.{dtype}.gguf")
    template = chat_template_of(tokenizer)
    assert not template.builtin
    for variant, kwargs in META[family]["chat_kwargs"].items():
        messages = [{"role": "user", "content": USER}]
        if variant != "user_only":
            messages.insert(0, {"role": "system", "content": SYSTEM})
        text = template.render(messages, add_generation_prompt=True, **kwargs)
        assert text == str(golden[f"chat/{variant}/text"]), variant
        if tokenizer.model == "gpt2":
            add_bos = not (template.bos_token and text.startswith(template.bos_token))
            assert tokenizer.encode(text, add_bos=add_bos) == [int(t) for t in golden[f"chat/{variant}/ids"]], variant


@pytest.mark.skipif("qwen3_embedding" not in META, reason="no Qwen3-Embedding fixture")
@pytest.mark.parametrize("dtype", DTYPES)
def test_qwen3_embedding(dtype: str) -> None:
    from models.embeddings.engine import load_embedding_model

    golden = _golden("qwen3_embedding")
    model = load_embedding_model(str(_file("qwen3_embedding", dtype, golden)))
    n = len([k for k in golden if k.startswith(f"{dtype}/ids_")])
    assert n >= 2
    ids = [[int(t) for t in golden[f"{dtype}/ids_{i}"]] for i in range(n)]
    texts = [str(t) for t in golden["texts"]]
    assert [model.tokenize(t) for t in texts] == ids  # Hearth's tokenizer appends the end-of-text piece too
    got = model.embed(ids)
    for i in range(n):
        cosine = _cosine(got[i], golden[f"{dtype}/embedding_{i}"])
        assert cosine >= MIN_COSINE, f"text {i}: cosine {cosine:.7f}"
