"""models/kokoro/voices.py: voice specs (ids, blends, weights, OpenAI's names), a voice's language and gender, and
voicepack files and folders. The endpoint's use of them is tested in tests/server/test_speech.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.kokoro.voices import (
    OPENAI_VOICES,
    VoiceError,
    gender,
    openai_aliases,
    read_voicepacks,
    resolve_voice,
    voice_language,
)


@pytest.fixture
def voices() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {v: rng.standard_normal((510, 256)).astype(np.float32) for v in ("af_bella", "af_sky", "bm_fable", "jf_x")}


def test_ids_blends_and_weights(voices: dict[str, np.ndarray]) -> None:
    one = resolve_voice("af_bella", voices)
    assert one.ids == ("af_bella",) and one.language.code == "a"
    np.testing.assert_array_equal(one.pack, voices["af_bella"])
    even = resolve_voice("af_bella+af_sky", voices)
    np.testing.assert_allclose(even.pack, (voices["af_bella"] + voices["af_sky"]) / 2, rtol=1e-6, atol=1e-6)
    weighted = resolve_voice("bm_fable(2)+af_sky(1)", voices)
    assert weighted.ids == ("bm_fable", "af_sky") and weighted.language.code == "b"  # the first part's language
    np.testing.assert_allclose(weighted.pack, voices["bm_fable"] * (2 / 3) + voices["af_sky"] / 3, rtol=1e-6,
                               atol=1e-6)


def test_openai_names_reach_similar_voices(voices: dict[str, np.ndarray]) -> None:
    assert resolve_voice("fable", voices).ids == ("bm_fable",)  # first of its preference list
    assert resolve_voice("shimmer", voices).ids == ("af_sky",)
    assert resolve_voice("echo", voices).ids == ("bm_fable",)  # no preferred voice: the first of its gender
    aliases = openai_aliases(voices)
    assert set(aliases) == set(OPENAI_VOICES) and set(aliases.values()) <= set(voices)


@pytest.mark.parametrize("spec", ["nobody", "af_bella+nobody", "af_bella(0)", "af_bella(x"])
def test_bad_specs(voices: dict[str, np.ndarray], spec: str) -> None:
    with pytest.raises(VoiceError):
        resolve_voice(spec, voices)


def test_language_and_gender_from_the_id() -> None:
    assert (gender("af_bella"), gender("jm_kumo"), gender("custom")) == ("female", "male", "unknown")
    assert voice_language("jf_alpha").code == "j"
    assert voice_language("custom").code == "a"  # a voicepack without Kokoro's naming reads English


def test_voicepack_files_and_folders(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    np.savez(tmp_path / "voices-v1.0.bin", af_heart=rng.normal(size=(510, 1, 256)).astype(np.float32))
    (tmp_path / "voices-v1.0.bin.npz").rename(tmp_path / "voices-v1.0.bin")
    (tmp_path / "notes.txt").write_text("not a voicepack")
    voices = read_voicepacks([str(tmp_path)])
    assert list(voices) == ["af_heart"] and voices["af_heart"].shape == (510, 256)
    with pytest.raises(FileNotFoundError):
        read_voicepacks([str(tmp_path / "missing.bin")])
