"""Incremental detokenisation with stop strings: text goes out as soon as it cannot be part of a stop string.

Stop strings are matched on the decoded text, so they match across token boundaries. Text that could be
the start of a stop string is held back until the next tokens decide it; a stop string itself is never
emitted. Each token is also tracked by the span of text it produced, so per-token data (logprobs) goes
out with the text it belongs to, and tokens that lie wholly inside a stop string are dropped with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Generic, Protocol, TypeVar

T = TypeVar("T")


class StreamDecoder(Protocol):
    """The tokenizer's incremental decoder: text complete so far, never a split UTF-8 sequence."""

    def push(self, token_id: int) -> str: ...

    def flush(self) -> str: ...


@dataclass
class Piece(Generic[T]):
    """Text ready to send and the tokens whose text it completes."""

    text: str = ""
    tokens: list[T] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.text or self.tokens)


def held_back(text: str, stops: Sequence[str]) -> int:
    """How many characters at the end of text could begin a stop string (0 when none can)."""
    longest = 0
    for stop in stops:
        for k in range(min(len(stop) - 1, len(text)), longest, -1):
            if text.endswith(stop[:k]):
                longest = k
                break
    return longest


class TextStream(Generic[T]):
    """Turns sampled tokens into text deltas, stopping at the first stop string."""

    def __init__(self, decoder: StreamDecoder, stops: Sequence[str] = ()) -> None:
        self._decoder = decoder
        self._stops = [s for s in stops if s]
        self._text = ""  # all decoded text so far (the stop string included, once found)
        self._sent = 0  # characters of _text already emitted
        self._pending: list[tuple[int, int, T]] = []  # (start, end) of each token's text, not yet emitted
        self.stopped = False  # a stop string was found; nothing more will be emitted
        self.matched: str | None = None  # the stop string found (Anthropic's replies name it)

    def push(self, token_id: int, info: T | None = None) -> Piece[T]:
        """Add a sampled token; the text (and tokens) that can go out now."""
        if self.stopped:
            return Piece()
        start = len(self._text)
        self._text += self._decoder.push(token_id)
        self._pending.append((start, len(self._text), info))  # type: ignore[arg-type]
        return self._advance(final=False)

    def flush(self) -> Piece[T]:
        """At the end of generation: the rest of the text (anything held back was not a stop string)."""
        if self.stopped:
            return Piece()
        self._text += self._decoder.flush()
        return self._advance(final=True)

    def _advance(self, final: bool) -> Piece[T]:
        # A stop string can only start in the unsent text: sent text never ends with a stop's prefix.
        window_start = max(0, self._sent - max((len(s) for s in self._stops), default=0))
        found = [(i, s) for s in self._stops if (i := self._text.find(s, window_start)) >= 0]
        cut, matched = min(found, key=lambda f: f[0], default=(-1, None))
        if cut >= 0:
            self.stopped = True
            self.matched = matched
            end = cut
        else:
            end = len(self._text) if final else len(self._text) - held_back(self._text[self._sent:], self._stops)
        piece: Piece[T] = Piece(text=self._text[self._sent:end])
        self._sent = max(self._sent, end)
        if self.stopped:  # tokens that began before the cut go out; those inside the stop string do not
            piece.tokens = [info for start, _, info in self._pending if start < end]
            self._pending = []
        elif final:
            piece.tokens = [info for _, _, info in self._pending]
            self._pending = []
        else:  # a token goes out once all of its text has
            piece.tokens = [info for _, stop, info in self._pending if stop <= end]
            self._pending = [entry for entry in self._pending if entry[1] > end]
        return piece

    @property
    def text(self) -> str:
        """Everything emitted so far."""
        return self._text[:self._sent]


@dataclass(frozen=True)
class ThinkingMarkers:
    """The pieces around a thinking model's thoughts."""

    open: str
    close: str
    named: bool  # a channel name line follows the opener (Gemma 4's "thought\n"), dropped with the markers
    special: bool  # control pieces (a grammar names them as tokens) rather than text the vocabulary holds whole


GEMMA4_CHANNEL = ThinkingMarkers("<|channel>", "<channel|>", named=True, special=True)
THINK_TAGS = ThinkingMarkers("<think>", "</think>", named=False, special=False)  # Qwen 3, SmolLM3, R1 distills
THINKING_MARKERS = (GEMMA4_CHANNEL, THINK_TAGS)
THINK_OPEN, THINK_CLOSE = GEMMA4_CHANNEL.open, GEMMA4_CHANNEL.close


class ReasoningSplitter:
    """Splits generated text into reasoning and content at a thinking model's markers, as other
    OpenAI-compatible servers return it (`reasoning_content` beside `content`): Gemma 4 writes its thoughts
    as `<|channel>thought\n...<channel|>` before the answer, Qwen 3 as `<think>...</think>`; the markers (and a
    channel's name) are dropped. Text that may be the start of a marker is held back until the next text decides
    it."""

    def __init__(self, markers: ThinkingMarkers = GEMMA4_CHANNEL) -> None:
        self._open, self._close, self._named = markers.open, markers.close, markers.named
        self._buffer = ""
        self._thinking = False
        self._name_pending = False  # just inside the channel: its name line is not yet dropped

    def push(self, text: str, final: bool = False) -> tuple[str, str]:
        """Add text; the (reasoning, content) that can go out now (final: everything left)."""
        self._buffer += text
        reasoning, content = [], []
        while True:
            if self._thinking and self._name_pending:
                newline = self._buffer.find("\n")
                if newline < 0 and not final and self._close not in self._buffer:
                    break  # the channel's name line is not complete yet
                if 0 <= newline and " " not in self._buffer[:newline] and self._close not in self._buffer[:newline]:
                    self._buffer = self._buffer[newline + 1:]
                self._name_pending = False
            tag = self._close if self._thinking else self._open
            out = reasoning if self._thinking else content
            at = self._buffer.find(tag)
            if at >= 0:
                out.append(self._buffer[:at])
                self._buffer = self._buffer[at + len(tag):]
                self._thinking = not self._thinking
                self._name_pending = self._thinking and self._named
                continue
            keep = 0 if final else held_back(self._buffer, [tag])
            out.append(self._buffer[:len(self._buffer) - keep])
            self._buffer = self._buffer[len(self._buffer) - keep:]
            break
        return "".join(reasoning), "".join(content)

    def flush(self) -> tuple[str, str]:
        """At the end of generation: whatever was held back."""
        return self.push("", final=True)


def split_reasoning(text: str, markers: ThinkingMarkers = GEMMA4_CHANNEL) -> tuple[str | None, str]:
    """(reasoning or None, content) of a whole generated text (see ReasoningSplitter)."""
    splitter = ReasoningSplitter(markers)
    reasoning, content = splitter.push(text, final=True)
    return (reasoning or None) if markers.open in text else None, content
