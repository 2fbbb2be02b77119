"""Moonshine (models/moonshine/) against transformers float32 on tests/golden/moonshine
(scripts/make_moonshine_fixtures.py: a tiny random-weight MoonshineForConditionalGeneration on the real tokenizer
trimmed to 512 pieces, and 2 s of beckett.wav from useful-moonshine-onnx).

Tolerances: the encoder output (82 rows of 32) must reach cosine 0.9999 (the issue's bar; f32 kernels against torch's
f32 give 0.99999994, max diff about 1e-5 on values of order 1); the first decoder step's logits agree within 1e-4
(f32 sums of a 32-wide model); the greedy tokens must be identical (the fixture's seed was kept for decided margins).
"""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import pytest

from gpu.device import Device
from gpu.program import Executor
from models.moonshine.checkpoint import load_checkpoint, neox_order, rope_table
from models.moonshine.model import MoonshineModel, TranscribeOptions, UnknownLanguage
from models.moonshine.net import MoonshineNet, frames
from models.moonshine.windows import MIN_SAMPLES, windows

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "moonshine"


def clip() -> np.ndarray:
    with wave.open(str(GOLDEN / "clip.wav")) as w:
        return np.frombuffer(w.readframes(w.getnframes()), np.int16).astype(np.float32) / 32768.0


@pytest.fixture(scope="module")
def model(device: Device) -> MoonshineModel:
    net = MoonshineNet(Executor(device), load_checkpoint(GOLDEN), 16000 * 4)
    return MoonshineModel("moonshine-fixture", net)


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN / "golden.npz"))


def test_encoder_matches_transformers(model: MoonshineModel, golden: dict[str, np.ndarray]) -> None:
    n = model.net.encode(clip())
    got, want = model.net.encoder_output(), golden["encoder"]
    assert got.shape == want.shape == (n, 32)
    cosine = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
    assert cosine >= 0.9999, cosine
    np.testing.assert_allclose(model.net.decode(1, 0), golden["logits0"], rtol=0, atol=1e-4)


def test_greedy_tokens_match_transformers(model: MoonshineModel, golden: dict[str, np.ndarray]) -> None:
    segments = list(model.transcribe(clip(), TranscribeOptions(language="en", temperature=0.0)))
    assert len(segments) == 1
    assert segments[0].tokens == golden["tokens"].tolist()
    assert segments[0].text == " " + model.net.tokenizer.decode(golden["tokens"].tolist()).strip()
    assert (segments[0].start, segments[0].end) == (0.0, 2.0)


def test_long_audio_is_cut_in_windows_at_quiet_frames(model: MoonshineModel) -> None:
    rng = np.random.default_rng(0)
    audio = rng.standard_normal(16000 * 9).astype(np.float32)
    audio[int(16000 * 3.5):int(16000 * 3.6)] = 0  # the quietest stretch inside the first window's search
    bounds = windows(audio, 16000 * 4, 16000 * 2, 16000)
    assert bounds[0] == (0, int(16000 * 3.5))
    assert all(b - a <= 16000 * 4 for a, b in bounds) and bounds[-1][1] == audio.size
    assert all(bounds[i][1] == bounds[i + 1][0] for i in range(len(bounds) - 1))
    assert bounds[-1][1] - bounds[-1][0] >= 16000
    # A long clip transcribes window by window, the segments in order and inside the audio.
    segments = list(model.transcribe(np.tile(clip(), 3), TranscribeOptions(temperature=0.0)))
    assert segments and all(0 <= s.start < s.end <= 6.0 for s in segments)
    assert [s.start for s in segments] == sorted(s.start for s in segments)


def test_refusals_and_shortest_audio(model: MoonshineModel) -> None:
    with pytest.raises(UnknownLanguage):
        model.transcribe(clip(), TranscribeOptions(language="de"))
    with pytest.raises(ValueError, match="word_timestamps"):
        model.transcribe(clip(), TranscribeOptions(word_timestamps=True))
    assert frames(MIN_SAMPLES)[2] == 1 and frames(MIN_SAMPLES - 1)[2] == 0
    list(model.transcribe(clip()[:100], TranscribeOptions(temperature=0.0)))  # padded up to one encoder row


def test_rotary_layout() -> None:
    """The NeoX order moves interleaved pair i (2i, 2i + 1) to (i, i + D/2); unrotated dims get identity pairs."""
    order = neox_order(16, 7)
    assert order.tolist() == [0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15]
    assert neox_order(8, 3).tolist() == [0, 2, 4, 6, 1, 3, 5, 7]
    table = rope_table(16, 0.9, 10000.0, 3).reshape(3, 8, 2)
    assert np.all(table[:, 7] == [1.0, 0.0]) and not np.allclose(table[1, :7], [1.0, 0.0])


def test_sampling_follows_the_seed(model: MoonshineModel) -> None:
    def run(seed: int) -> list[list[int]]:
        options = TranscribeOptions(temperature=(1.0,), seed=seed)
        return [s.tokens for s in model.transcribe(clip(), options)]

    assert run(3) == run(3)
    assert any(run(seed) != run(3) for seed in (4, 5, 6))


def test_unsupported_configs_are_refused() -> None:
    import json

    from models.formats.safetensors_dir import ModelDirError
    from models.moonshine.checkpoint import MoonshineConfig

    base = json.loads((GOLDEN / "config.json").read_text())
    assert MoonshineConfig.from_json(base).rotary_factor == 0.9
    for change in ({"attention_bias": True}, {"decoder_num_key_value_heads": 1}, {"model_type": "whisper"},
                   {"decoder_hidden_act": "gelu"}):
        with pytest.raises(ModelDirError):
            MoonshineConfig.from_json(base | change)
