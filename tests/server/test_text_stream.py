"""Stop strings across token boundaries, held-back text and per-token data (server/text_stream.py)."""

from __future__ import annotations

import codecs

import pytest

from server.text_stream import TextStream, held_back


class PieceDecoder:
    """Decodes token i to pieces[i] (as UTF-8 bytes, so a piece may be half a character)."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        self.utf8 = codecs.getincrementaldecoder("utf-8")()

    def push(self, token_id: int) -> str:
        return self.utf8.decode(self.pieces[token_id])

    def flush(self) -> str:
        return self.utf8.decode(b"", final=True)


def run(pieces: list[str | bytes], stops: list[str]) -> tuple[list[str], list[int], bool]:
    raw = [p.encode() if isinstance(p, str) else p for p in pieces]
    stream: TextStream[int] = TextStream(PieceDecoder(raw), stops)
    texts, tokens = [], []
    for i in range(len(raw)):
        piece = stream.push(i, i)
        texts.append(piece.text)
        tokens += piece.tokens
        if stream.stopped:
            break
    else:
        piece = stream.flush()
        texts.append(piece.text)
        tokens += piece.tokens
    assert stream.text == "".join(texts)
    return texts, tokens, stream.stopped


def test_no_stops_passes_text_through() -> None:
    texts, tokens, stopped = run(["Hel", "lo", " world"], [])
    assert texts == ["Hel", "lo", " world", ""] and tokens == [0, 1, 2] and not stopped


def test_stop_across_tokens_is_never_emitted() -> None:
    texts, tokens, stopped = run(["Hel", "lo", " wo", "rld"], ["o w"])
    assert "".join(texts) == "Hell" and stopped
    assert texts[1] == "l"  # "o" is held back: it could begin "o w"
    assert tokens == [0, 1]  # token 2 (" wo") lies inside the stop string


def test_held_back_text_is_released_when_it_is_not_a_stop() -> None:
    texts, _, stopped = run(["a\n", "b", "\n"], ["\n\n"])
    assert texts == ["a", "\nb", "", "\n"] and not stopped


def test_earliest_of_several_stops_wins() -> None:
    texts, _, _ = run(["x END y STOP"], ["STOP", "END"])
    assert "".join(texts) == "x "


def test_stop_at_the_very_start_gives_nothing() -> None:
    texts, tokens, stopped = run(["##", "rest"], ["##"])
    assert "".join(texts) == "" and tokens == [] and stopped


def test_split_utf8_is_never_sent_in_halves() -> None:
    snowman = "☃".encode()
    texts, tokens, _ = run([b"a", snowman[:2], snowman[2:], b"b"], [])
    assert texts == ["a", "", "☃", "b", ""] and tokens == [0, 1, 2, 3]


def test_stop_made_of_multibyte_characters() -> None:
    snowman = "☃".encode()
    texts, _, stopped = run([b"hi ", snowman[:1], snowman[1:], b"!"], ["☃!"])
    assert "".join(texts) == "hi " and stopped


@pytest.mark.parametrize(("text", "stops", "expected"), [
    ("hello wo", ["world"], 2), ("hello", ["world"], 0), ("abc", ["c", "bcd"], 2), ("", ["x"], 0),
    ("aaa", ["aaab"], 3),
])
def test_held_back(text: str, stops: list[str], expected: int) -> None:
    assert held_back(text, stops) == expected
