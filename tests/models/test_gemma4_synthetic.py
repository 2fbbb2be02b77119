"""scripts/make_synthetic_gguf.py --shape gemma4-e2b, the model the GPU benchmark measures: its file loads and
runs steps. Here with E2B's structure (4 sliding layers to 1 full, PLE, KV-shared double-wide tail, Q4_K_M-style
mix) at small widths and 10 layers, with a fixture's small vocabulary, so it is quick on lavapipe."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.text_model import load_text_model
from scripts import make_synthetic_gguf as synthetic
from scripts.make_gemma4_fixtures import FIXTURES, VOCAB, write_gguf


def test_e2b_shaped_file_loads_and_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tokenizer = write_gguf(FIXTURES["e2b"], tmp_path / "tokenizer.gguf", "q8_0", "llamacpp")
    small = dict(synthetic.GEMMA4_E2B, d=256, head_dim=128, global_head_dim=256, heads=2, ffn=256, ple=256,
                 vocab=len(VOCAB))
    monkeypatch.setattr(synthetic, "GEMMA4_E2B", small)
    path = tmp_path / "e2b.gguf"
    synthetic.gemma4_e2b_shape(tokenizer, path, seed=0, layers=10)
    model = load_text_model(str(path), context_length=256, max_batch=2)
    c = model.arch.config
    assert (c.n_layers, c.n_shared_kv, c.d_ple) == (10, 5, 256)
    assert c.sliding == (True, True, True, True, False) * 2
    assert c.d_ffn == (256,) * 5 + (512,) * 5 and c.head_dims[4] == 256
    session = model.new_session()
    logits = session.prefill([2, 300, 301, 302, 303, 304, 305])
    assert logits.shape == (len(VOCAB),) and np.isfinite(logits).all()
    assert np.isfinite(session.decode(int(logits.argmax()))).all()
    session.close()
