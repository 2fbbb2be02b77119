"""Word timing for captioned speech: which phonemes of a chunk each written word became, and from the model's
predicted durations (frames per phoneme) when each word starts and ends in the audio.

espeak-ng phonemises a whole sentence, and its output does not keep one group per word: it runs short words
together ("in the" -> "ɪnðə", "out of" -> "ˌWɾəv") and can split one ("p m"). So the words are aligned to the
sentence's space-separated phoneme groups by length: each word is also phonemised alone (only to measure it), and
a dynamic programme pairs runs of words with runs of groups so that the lengths agree best; words that share one
group divide it in proportion to their lengths. The audio is made from the sentence's own phonemes, unchanged.

Words are those the user wrote: the English normaliser reports where each of its words came from
(normalize.TrackedText), so "$5.20" -> "five dollars and twenty cents" is one caption word "$5.20" spanning all of
those phonemes. Punctuation is no word; the pauses it makes fall between words.
"""

from __future__ import annotations

import bisect
import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from models.kokoro.normalize import TrackedText

# Marks at a word's edges that are not said: a caption shows "there", not "there,".
_EDGE_MARKS = ".,;:!?\"'()[]{}…—–-“”‘’«»¡¿"
# Symbols of Kokoro's vocabulary that are punctuation (pauses), not sounds of a word.
PHONEME_MARKS = frozenset(";:,.!?—…\"()“”")
_MAX_WORDS_IN_GROUP = 4  # words espeak runs together into one group, at most
_MAX_GROUPS_OF_WORD = 3  # groups espeak makes of one word, at most
_BAND = 16  # how far the pairing may stray from the diagonal, in groups
_UNEVEN_PAIRING = 0.5  # cost of pairing several words with one group (or the reverse), against a phoneme's mismatch


@dataclass(frozen=True)
class WordSpan:
    """A written word and the phonemes it became: [start, end) indices into a chunk's phonemes (= its ids)."""

    text: str
    start: int
    end: int


@dataclass(frozen=True)
class WordTime:
    """A written word and when it is said, in seconds from the start of the response's audio."""

    word: str
    start_time: float
    end_time: float


@dataclass(frozen=True)
class SaidWord:
    """One word as the G2P reads it ("five"), and the index of the caption word it belongs to ("$5.20")."""

    said: str
    caption: int


def caption_words(tracked: TrackedText, original: str) -> tuple[list[str], list[SaidWord]]:
    """The caption words of `original` (its whitespace-separated tokens, edge punctuation removed, merged where
    the normaliser made one reading of several tokens) and the words the reader says, each tied to its caption.

    tracked: `original` after normalisation (or unchanged), remembering each character's origin."""
    tokens = [(m.start(), m.end()) for m in re.finditer(r"\S+", original)]
    starts, ends = [s for s, _ in tokens], [e for _, e in tokens]
    said: list[tuple[str, int, int]] = []  # (word, first token, last token)
    for match in re.finditer(r"\S+", tracked.text):
        word = match.group().strip(_EDGE_MARKS)
        if not any(ch.isalnum() for ch in word):
            continue
        offset = match.start() + match.group().index(word)
        origins = tracked.origin[offset:offset + len(word)]
        first, last = min(o[0] for o in origins), max(o[1] for o in origins)
        # Tokens that the span [first, last) overlaps; an insertion (first == last) belongs to the token after it.
        lo = max(0, bisect.bisect_right(ends, first))
        hi = max(lo, bisect.bisect_left(starts, max(last, first + 1)) - 1)
        said.append((word, min(lo, len(tokens) - 1), min(hi, len(tokens) - 1)))
    # Said words whose tokens overlap form one caption (a normaliser match spanning tokens: "3:05 pm").
    groups: list[list[int]] = []  # [first token, last token] per caption
    owner: list[int] = []
    for _, first, last in said:
        if groups and first <= groups[-1][1]:
            groups[-1][1] = max(groups[-1][1], last)
        else:
            groups.append([first, last])
        owner.append(len(groups) - 1)
    captions = []
    for first, last in groups:
        text = original[tokens[first][0]:tokens[last][1]]
        captions.append(text.strip(_EDGE_MARKS) or text)
    return captions, [SaidWord(word, caption) for (word, _, _), caption in zip(said, owner)]


def phoneme_groups(ps: str) -> list[tuple[int, int]]:
    """[start, end) of each space-separated group of `ps` without its edge punctuation; groups of only
    punctuation are left out."""
    groups = []
    for match in re.finditer(r"\S+", ps):
        start, end = match.start(), match.end()
        while start < end and ps[start] in PHONEME_MARKS:
            start += 1
        while end > start and ps[end - 1] in PHONEME_MARKS:
            end -= 1
        if end > start:
            groups.append((start, end))
    return groups


def _proportional(start: int, end: int, lengths: Sequence[int]) -> list[tuple[int, int]]:
    """[start, end) cut into len(lengths) consecutive spans in proportion to lengths (each non-empty if it can)."""
    weights = np.maximum(np.asarray(lengths, np.float64), 1.0)
    cuts = np.round(start + np.cumsum(weights) / weights.sum() * (end - start)).astype(int)
    spans, left = [], start
    for i, cut in enumerate(cuts):
        remaining = len(lengths) - i - 1
        cut = int(min(max(cut, left + 1), end - remaining)) if end - left > remaining else int(max(cut, left))
        spans.append((left, min(cut, end)))
        left = min(cut, end)
    spans[-1] = (spans[-1][0], end)
    return spans


def align(word_lengths: Sequence[int], groups: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """Phoneme span of each word: runs of words paired with runs of groups (one side of each pair a single
    item) so that the phoneme counts agree best; several words in one group share it in proportion.

    The pairing stays within _BAND groups of the diagonal (words and groups advance together, but for the runs),
    so a long sentence costs time in proportion to its length."""
    n, m = len(word_lengths), len(groups)
    if n == 0:
        return []
    if m == 0:
        return [(0, 0)] * n
    words_sum = [0, *itertools.accumulate(word_lengths)]
    groups_sum = [0, *itertools.accumulate(e - s for s, e in groups)]
    moves = [(k, 1) for k in range(1, _MAX_WORDS_IN_GROUP + 1)] + [(1, k) for k in range(2, _MAX_GROUPS_OF_WORD + 1)]
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    step: dict[tuple[int, int], tuple[int, int]] = {}
    cost[0][0] = 0.0
    for i in range(n + 1):
        centre, row = i * m // n, cost[i]
        for j in range(max(0, centre - _BAND), min(m, centre + _BAND) + 1):
            here = row[j]
            if here == inf:
                continue
            for di, dj in moves:
                a, b = i + di, j + dj
                if a > n or b > m:
                    continue
                total = (here + abs(words_sum[a] - words_sum[i] - groups_sum[b] + groups_sum[j])
                         + _UNEVEN_PAIRING * (di + dj - 2))
                if total < cost[a][b]:
                    cost[a][b] = total
                    step[(a, b)] = (di, dj)
    if cost[n][m] == inf:  # more words or groups than runs can pair: share the whole span in proportion
        return _proportional(groups[0][0], groups[-1][1], word_lengths)
    spans: list[tuple[int, int]] = []
    i, j = n, m
    while i or j:
        di, dj = step[(i, j)]
        first, last = groups[j - dj], groups[j - 1]
        spans[:0] = _proportional(first[0], last[1], word_lengths[i - di:i]) if di > 1 else [(first[0], last[1])]
        i, j = i - di, j - dj
    return spans


def sentence_words(sentence: str, tracked: TrackedText, ps: str,
                   phonemes_alone: Callable[[list[str]], list[str]]) -> list[WordSpan]:
    """The caption words of one sentence with their spans in its phonemes `ps` (as synthesised).

    tracked: the sentence as normalised for G2P; phonemes_alone: each said word's phonemes when said alone."""
    captions, said = caption_words(tracked, sentence)
    if not said:
        return []
    lengths = [sum(1 for p in ps_alone if not p.isspace() and p not in PHONEME_MARKS)
               for ps_alone in phonemes_alone([w.said for w in said])]
    spans = align(lengths, phoneme_groups(ps))
    words: list[WordSpan] = []
    for index, text in enumerate(captions):
        mine = [span for span, word in zip(spans, said) if word.caption == index and span[1] > span[0]]
        if mine:
            words.append(WordSpan(text, min(s for s, _ in mine), max(e for _, e in mine)))
    return words


def whole_sentence(sentence: str, ps: str) -> list[WordSpan]:
    """One caption for a sentence whose words cannot be told apart (no spaces: Japanese, Chinese)."""
    groups = phoneme_groups(ps)
    return [WordSpan(sentence.strip(), groups[0][0], groups[-1][1])] if groups and sentence.strip() else []


def word_times(words: Sequence[WordSpan], durations: np.ndarray, audio_seconds: float,
               offset: float = 0.0) -> list[WordTime]:
    """When each word of a chunk is said: durations are the model's frames per id, with the wrapping pads first and
    last (so phoneme p is durations[p + 1]), already divided by the speed; the chunk's audio lasts audio_seconds
    and starts `offset` seconds into the response. Frames are converted by the chunk's own audio length, so the
    last frame ends where the audio does."""
    durations = np.asarray(durations, np.float64).reshape(-1)
    frames = np.concatenate([[0.0], np.cumsum(durations)])  # frames[k]: frames before id k (ids with the pads)
    total = frames[-1]
    per_frame = audio_seconds / total if total > 0 else 0.0
    last = len(durations) - 1
    times = []
    for word in words:
        start = frames[min(word.start + 1, last)] * per_frame
        end = frames[min(word.end + 1, last)] * per_frame
        times.append(WordTime(word.text, round(offset + start, 3), round(offset + end, 3)))
    return times
