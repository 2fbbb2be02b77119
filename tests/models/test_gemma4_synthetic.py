"""scripts/make_synthetic_gguf.py --shape gemma4-e2b, the model the GPU benchmark measures: its file loads and
runs steps. Here with E2B's structure (4 sliding layers to 1 full, PLE, KV-shared double-wide tail, Q4_K_M-style
mix) at small widths and 10 layers, with a fixture's small vocabulary, so it is quick on lavapipe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.text.engine import load_text_model
from scripts import make_synthetic_gguf as synthetic
from scripts.make_gemma4_fixtures import FIXTURES, VOCAB, write_gguf
from tests.models.batch_logits import assert_agree, batched_and_alone


@pytest.fixture
def small_e2b(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An E2B-shaped file at the small widths and 10 layers of the module docstring."""
    tokenizer = write_gguf(FIXTURES["e2b"], tmp_path / "tokenizer.gguf", "q8_0", "llamacpp")
    small = dict(synthetic.GEMMA4_E2B, d=256, head_dim=128, global_head_dim=256, heads=2, ffn=256, ple=256,
                 vocab=len(VOCAB))
    monkeypatch.setattr(synthetic, "GEMMA4_E2B", small)
    path = tmp_path / "e2b.gguf"
    synthetic.gemma4_e2b_shape(tokenizer, path, seed=0, layers=10)
    return path


def test_e2b_shaped_file_loads_and_runs(small_e2b: Path) -> None:
    model = load_text_model(str(small_e2b), context_length=256, max_batch=2)
    c = model.arch.config
    assert (c.n_layers, c.n_shared_kv, c.d_ple) == (10, 5, 256)
    assert c.sliding == (True, True, True, True, False) * 2
    assert c.d_ffn == (256,) * 5 + (512,) * 5 and c.head_dims[4] == 256
    session = model.new_session()
    logits = session.prefill([2, 300, 301, 302, 303, 304, 305])
    assert logits.shape == (len(VOCAB),) and np.isfinite(logits).all()
    assert np.isfinite(session.decode(int(logits.argmax()))).all()
    session.close()


def test_e2b_int8_feed_forward_stays_near_the_exact_logits(small_e2b: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """int8_activations' decode feed-forward in Gemma 4's dense layers, on the GPU kernels (run here on lavapipe
    with the adapter taken for a GPU and the size threshold lifted, as tests/models/test_engine.py does for Gemma
    3): the residual norm writes the gate-up's input quantised, the gate-up its output, the down reads it. Fed
    the same tokens, the logits stay within 1 - cosine <= 1e-5 of the exact path's. Why that bound: in this
    random-weight model the feed-forward moves the logits little (its output is RMS-normalised before the
    residual add), so 8-bit activations moved them by 1 - cosine ~3e-7 here, while a layout bug of the kind the
    path could have (two values of each quad swapped in the quantised input) moved them by ~1e-3; the bound sits
    more than an order of magnitude from each. (The kernels' own numerics: tests/gpu/test_matmul_i8.py.)"""
    from dataclasses import replace

    from gpu.device import Device

    exact = load_text_model(str(small_e2b), context_length=256, max_batch=1)
    monkeypatch.setattr(Device, "is_software", property(lambda self: False))
    int8 = load_text_model(str(small_e2b), context_length=256, max_batch=1, int8_activations=True)
    int8.executor.tuning = replace(int8.executor.tuning, int8_matvec_min_values=0)
    prompt = [2, 300, 301, 302, 303, 304, 305]
    session, reference = int8.new_session(), exact.new_session()
    try:
        pairs = [(session.prefill(prompt), reference.prefill(prompt))]
        for _ in range(4):
            token = int(pairs[-1][1].argmax())
            pairs.append((session.decode(token), reference.decode(token)))
        labels = [d.label for d in int8.engine().program(1, 1).dispatches]
    finally:
        session.close()
        reference.close()
    assert any(label.startswith("residual_norm_q8[") for label in labels), "no residual norm quantised"
    assert any(",q8,q8_buffer]" in label for label in labels), "no gate-up read and wrote quantised activations"
    assert any(label.endswith(",row,q8_buffer]") for label in labels), "no down projection read a quantised input"
    for step, (got, want) in enumerate(pairs):
        cosine = float(got @ want / np.linalg.norm(got) / np.linalg.norm(want))
        assert 1.0 - cosine <= 1e-5, f"step {step}: cosine {cosine}"


def test_e2b_batched_kernels_agree_with_one_sequence(small_e2b: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Gemma 4's batched decode on the GPU kernels (lavapipe taken for a GPU, as above): 4 sequences as one batch
    (Q4_K matvecs on word lanes, the other matvecs' rows interleaved) against each alone, fed the same tokens:
    logits within cosine 0.99999 (f32 summed in other orders, as test_engine.py's Gemma 3 test) and the same
    greedy token at every step."""
    from gpu.device import Device

    monkeypatch.setattr(Device, "is_software", property(lambda self: False))
    model = load_text_model(str(small_e2b), context_length=256, max_batch=4)
    prompts = [[2, 300 + i, 301, 302 + 3 * i, 303, 304 + i] for i in range(4)]
    batched, alone = batched_and_alone(model, prompts, 4)
    defines = [d.defines for d in model.engine().program(4, 4).dispatches]  # the batch's decode step
    assert any(d.get("LANE_WORDS") for d in defines) and max(d.get("INTERLEAVE", 1) for d in defines) > 1, (
        "the batch did not run the batched-decode kernels")
    assert_agree(batched, alone, 0.99999)
