"""Whisper's network on the executor against float32 references (tests/golden/whisper, scripts/make_whisper_golden.py).

- tiny.en (the shipped CTranslate2 model): encoder output and first decoder logits against transformers'
  WhisperForConditionalGeneration built from the same float16 weights upcast to float32. Both compute in f32 from
  identical weights, so the differences are f32 summation order over 4 layers (attention over 1500 rows, 1536-wide
  MLPs): measured max |diff| about 1e-3 on encoder values of magnitude up to ~40 and on logits of magnitude ~20,
  so the bounds are atol 2e-2 on the encoder and 2e-2 on logits (a wrong weight or layout gives errors of order 1),
  and the top-5 logits must rank the same.
- the tiny random multilingual checkpoint (Hugging Face safetensors, f32): encoder output, <|startoftranscript|>
  logits (the language detection input) and an 8-token greedy continuation of <|sot|><|fr|><|translate|>.
- the CTranslate2 reader and the checkpoint's shapes, special tokens and language list.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from models.formats.ct2_file import read_ct2_model_bin
from models.whisper.weights import load_checkpoint, shipped_model_dir

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "whisper"
TINY_ML = GOLDEN / "tiny_multilingual"


@pytest.fixture(scope="module")
def tiny_en():
    from models.whisper.model import load_whisper

    return load_whisper("whisper-tiny.en")


@pytest.fixture(scope="module")
def tiny_en_window(tiny_en):
    """tiny.en with the reference window encoded once (the tests below only decode: the encoder state stays)."""
    tiny_en.net.encode(np.load(GOLDEN / "reference_tiny_en.npz")["window"].astype(np.float32))
    return tiny_en


@pytest.fixture(scope="module")
def tiny_ml():
    from models.whisper.model import load_whisper

    return load_whisper(str(TINY_ML))


def test_ct2_reader_and_checkpoint() -> None:
    variables = read_ct2_model_bin(shipped_model_dir() / "model.bin")
    assert variables["decoder/embeddings/weight"].shape == (51864, 384)
    assert variables["decoder/embeddings/weight"].dtype == np.float16
    assert variables["decoder/projection/weight"] is variables["decoder/embeddings/weight"]  # an alias
    ckpt = load_checkpoint(shipped_model_dir())
    c = ckpt.config
    assert (c.n_mels, c.d_model, c.n_audio_layers, c.n_text_layers, c.n_audio_heads, c.vocab_size) == \
        (80, 384, 4, 4, 6, 51864)
    tok = ckpt.tokenizer
    assert not tok.multilingual and tok.languages == ("en",)
    assert (tok.sot, tok.eot, tok.no_timestamps, tok.timestamp_begin) == (50257, 50256, 50362, 50363)
    assert ckpt.alignment_heads[0] == (1, 0)


def test_hf_checkpoint_is_multilingual() -> None:
    ckpt = load_checkpoint(TINY_ML)
    tok = ckpt.tokenizer
    assert tok.multilingual and len(tok.languages) == 99 and tok.languages[:3] == ("af", "am", "ar")
    assert tok.sot_sequence("fr", "translate") == [257, 258 + tok.languages.index("fr"), 357]
    assert ckpt.alignment_heads == ((1, 0), (1, 2))
    assert ckpt.config.d_model == 16 and ckpt.config.n_text_layers == 2


def test_tiny_en_encoder_and_logits_match_transformers(tiny_en_window) -> None:
    ref = np.load(GOLDEN / "reference_tiny_en.npz")
    net = tiny_en_window.net
    enc = net.encoder_output()
    np.testing.assert_allclose(enc[::10], ref["encoder_rows"], atol=2e-2, rtol=0)
    tok = net.tokenizer
    logits0 = net.decode([tok.sot], [0], [0], [0])[0]
    np.testing.assert_allclose(logits0, ref["logits0"], atol=2e-2, rtol=0)
    prompt = ref["prompt1"].tolist()
    n = len(prompt)
    logits1 = net.decode(prompt, range(n), [0] * n, [n - 1])[0]
    np.testing.assert_allclose(logits1, ref["logits1"], atol=2e-2, rtol=0)
    for ours, theirs in ((logits0, ref["logits0"]), (logits1, ref["logits1"])):
        assert list(np.argsort(-ours)[:5]) == list(np.argsort(-theirs)[:5])


def test_tiny_multilingual_matches_transformers(tiny_ml) -> None:
    """f32 weights, d_model 16: differences are f32 rounding only (atol 1e-4 on values of order 1-10)."""
    ref = np.load(GOLDEN / "tiny_multilingual.npz")
    window = (np.random.default_rng(1).standard_normal((80, 3000)) * 0.5).astype(np.float32)  # as the script
    net = tiny_ml.net
    net.encode(window)
    np.testing.assert_allclose(net.encoder_output()[::5], ref["encoder"], atol=1e-4, rtol=1e-4)
    logits = net.decode([257], [0], [0], [0])[0]
    np.testing.assert_allclose(logits, ref["logits_sot"], atol=1e-4, rtol=1e-4)
    ids = ref["prompt"].tolist()
    for _ in range(8):
        n = len(ids)
        ids.append(int(np.argmax(net.decode(ids, range(n), [0] * n, [n - 1])[0])))
    assert ids == ref["greedy"].tolist()


def test_language_detection_matches_transformers(tiny_ml) -> None:
    from models.whisper.decode import _language_probs

    ref = np.load(GOLDEN / "tiny_multilingual.npz")
    net = tiny_ml.net
    window = (np.random.default_rng(1).standard_normal((80, 3000)) * 0.5).astype(np.float32)
    net.encode(window)
    probs = _language_probs(net)
    tok = net.tokenizer
    scores = ref["logits_sot"][[tok.language_ids[c] for c in tok.languages]].astype(np.float64)
    expected = np.exp(scores - scores.max())
    expected /= expected.sum()
    assert probs[0][0] == tok.languages[int(np.argmax(expected))]
    assert probs[0][1] == pytest.approx(expected.max(), abs=1e-4)


def test_decoder_slots_and_incremental_steps_agree(tiny_en_window) -> None:
    """Decoding a prompt at once, token by token, or in another cache slot gives the same logits (f32 order: 1e-3)."""
    net = tiny_en_window.net
    ref = np.load(GOLDEN / "reference_tiny_en.npz")
    prompt = ref["prompt1"].tolist()
    n = len(prompt)
    whole = net.decode(prompt, range(n), [0] * n, [n - 1])[0]
    net.decode(prompt[:-1], range(n - 1), [3] * (n - 1), [n - 2])
    last = net.decode(prompt[-1:], [n - 1], [3], [0])[0]
    np.testing.assert_allclose(last, whole, atol=1e-3, rtol=0)
    net.reorder_slots([3, 3], n)  # slots 0 and 1 take slot 3's cache
    again = net.decode([prompt[-1]] * 2, [n - 1] * 2, [0, 1], [0, 1])
    np.testing.assert_allclose(again, np.stack([whole, whole]), atol=1e-3, rtol=0)


HISTORIES = ([50363], [50363, 1375], [50363, 1375, 50400], [50363, 1375, 50400, 50400], [50363, 1375, 4952])


def test_logit_summary_replays_the_rules(tiny_en_window) -> None:
    """A greedy step from logit_group_summary's twelve numbers picks the token and log-probability that the full
    logits row gives through _Rules.apply and a log-softmax (f32 sums on the GPU vs float64 here: 1e-4), after
    histories ending in a first timestamp, text, a closing timestamp, a timestamp pair and more text."""
    from models.whisper.decode import _choose, _log_softmax, _rules

    net = tiny_en_window.net
    rules = _rules(net)
    allowed = np.ones(rules.vocab, bool)
    allowed[rules.suppress] = False
    allowed[rules.no_timestamps] = False
    net.set_summary_mask(allowed)
    for history in HISTORIES:
        prompt = [net.tokenizer.sot] + history
        n = len(prompt)
        logits = net.decode(prompt, range(n), [0] * n, [n - 1])[0]
        stamps = [t for t in history if t >= rules.timestamp_begin]
        stats = net.decode_summary(prompt[-1], n - 1, 0, stamps[-1], rules.vocab - 1)
        logprobs = _log_softmax(rules.apply(logits, history))
        token, logprob = _choose(stats, history, rules)
        assert token == int(np.argmax(logprobs)), history
        assert logprob == pytest.approx(float(logprobs[token]), abs=1e-4), history


def test_encoder_in_steps_waited_or_not_gives_the_same_output(tiny_en, monkeypatch) -> None:
    """The encoder's steps either wait for each other (a CPU adapter, or another model waiting for the adapter) or
    run back to back while the next is recorded (a GPU nobody else waits for): the same dispatches on the same
    buffers, so the output is identical."""
    window = np.load(GOLDEN / "reference_tiny_en.npz")["window"].astype(np.float32)
    device = tiny_en.net.executor.device
    outputs = []
    for pauses in (True, False):
        monkeypatch.setattr(device, "pauses_between_steps", lambda pauses=pauses: pauses)
        tiny_en.net.encode(window)
        outputs.append(tiny_en.net.encoder_output())
    np.testing.assert_array_equal(outputs[0], outputs[1])
