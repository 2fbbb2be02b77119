"""The common part of the tool-call formats: the public types, ToolCallFormat (grammar from tools, parsing
through a format's reader), the markers and function checks, the Lark helpers the formats build grammars with,
and the streaming parser that turns a reply into content and tool-call deltas."""

from __future__ import annotations

import json
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from models.text.grammar import GrammarError

# -- public types ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ParsedCall:
    """One tool call of a reply: the function's name and its arguments as a JSON text."""

    name: str
    arguments: str


@dataclass(frozen=True)
class ContentDelta:
    """Reply text outside tool calls."""

    text: str


@dataclass(frozen=True)
class ToolCallDelta:
    """A piece of tool call `index` (0, 1, ... in the reply): `name` on the call's first delta only (the server
    gives the call its id there), then pieces of its arguments' JSON text."""

    index: int
    name: str | None = None
    arguments: str = ""


Delta = ContentDelta | ToolCallDelta


@dataclass(frozen=True)
class Marker:
    """A piece of a format's syntax (`<|tool_call>`), with its id where the vocabulary has it as one piece. A control
    piece is `special`: a grammar names it as a token (`<[id]>`) and text cannot hold it; any other is text (a
    user-defined piece, which llguidance then forces as its one token, or plain text)."""

    text: str
    token: int | None = None
    special: bool = False

    @property
    def lark(self) -> str:
        """The marker in a Lark grammar."""
        return f"<[{self.token}]>" if self.special else _lit(self.text)


class TokenizerLike(Protocol):
    def encode(self, text: str, add_bos: bool = True) -> list[int]: ...

    def id_to_piece(self, token_id: int) -> str: ...

    def is_special(self, token_id: int) -> bool: ...


class ToolCallFormat(ABC):
    """How a model family writes tool calls: the grammar that constrains them, the parser that reads them."""

    name: str
    # pieces that begin the tool's answer, where the vocabulary has them: generation should stop on their ids
    stop_markers: tuple[Marker, ...] = ()

    def grammar(self, tools: Sequence[Mapping[str, Any]], choice: str = "auto", parallel: bool = True) -> str:
        """A Lark grammar of a reply under `tool_choice`: "auto" (free text, a call once opened must be valid),
        "required" (at least one call and nothing else) or a function's name (exactly one call of it); at most one
        call unless `parallel`. Arguments match each function's `parameters`. Compile it for the model with
        compile_grammar(vocabulary, lark(source)), which also refuses JSON-schema keywords llguidance cannot
        enforce; GrammarError here for a choice or a schema that cannot be ("none" needs no grammar)."""
        functions = _functions(tools)
        if choice == "none":
            raise GrammarError('tool_choice "none" needs no grammar: offer no tools')
        if choice not in ("auto", "required"):
            functions = [f for f in functions if f["name"] == choice]
            if not functions:
                raise GrammarError(f"tool_choice names {choice!r}, which is not among the tools")
            parallel = False
        rules = _Rules()
        calls = [self._call(rules, f) for f in functions]
        rules.add("call", " | ".join(calls))
        return self._start(rules, choice == "auto", parallel).source()

    def parse(self, text: str, tools: Sequence[Mapping[str, Any]] = ()) -> tuple[str | None, list[ParsedCall]]:
        """The reply's content (None when empty) and tool calls; the same as streaming it in any pieces."""
        stream = self.stream(tools)
        return _assemble([*stream.push(text), *stream.flush()])

    def stream(self, tools: Sequence[Mapping[str, Any]] = ()) -> ToolCallStream:
        """A parser for one reply's text as it is generated; tools: the ones offered, for a format whose values
        are typed by their schemas (qwen3_coder)."""
        return ToolCallStream(self, tools)

    @abstractmethod
    def render_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """One call as the model writes it (arguments as a JSON text or a mapping)."""

    def render_calls(self, calls: Sequence[tuple[str, str | Mapping[str, Any]]]) -> str:
        """Several calls as the model writes them in one reply."""
        return self._separator.join(self.render_call(name, args) for name, args in calls)

    def prompt(self, tools: Sequence[Mapping[str, Any]]) -> str:
        """The functions and the syntax of a call, for a template with no place for tools (Google's documented
        function-calling prompt for Gemma, with this format's call as the example)."""
        example = self.render_call("NAME", {"ARGUMENT": "VALUE"})
        functions = json.dumps([t.get("function", t) for t in tools], indent=2, ensure_ascii=False)
        return ("You have access to functions. If you decide to invoke any of the function(s), you MUST put it in "
                f"the format of\n{example}\n(NAME a function's name, then its arguments by name)\n\nYou SHOULD NOT "
                f"include any other text in the response if you call a function\n{functions}")

    def render_result(self, content: str) -> str:
        """A tool's result given back in a user turn (Gemma's documented ```tool_output block)."""
        return f"```tool_output\n{content.strip()}\n```"

    def new_call_id(self) -> str:
        """An id for a call the model made, in the form the family's template accepts back."""
        return f"call_{secrets.token_hex(12)}"

    @property
    def control_markers(self) -> tuple[Marker, ...]:
        """The control pieces of the format that its parser reads: a decoder that drops control pieces must print
        these (Mistral's `[TOOL_CALLS]`)."""
        return tuple(m for m in self._markers() if m is not None and m.special and m.token is not None)

    def _markers(self) -> tuple[Marker | None, ...]:
        return (self._opener,)

    # what subclasses fill in
    _separator = ""  # between parallel calls
    _opener: Marker | None = None  # the piece that starts calls anywhere in a reply (None: only at its start)
    _prefix_text = ""  # an optional piece before calls that only start a reply

    @abstractmethod
    def _call(self, rules: _Rules, function: Mapping[str, Any]) -> str:
        """Add the rules of one call of `function` after the opener; return the rule's name."""

    @abstractmethod
    def _start(self, rules: _Rules, auto: bool, parallel: bool) -> _Rules:
        """Add the start rule over the "call" rule."""

    @abstractmethod
    def _reader(self) -> _Reader:
        """A reader for the calls that follow an opener (or start the reply)."""

    def _reader_for(self, tools: Sequence[Mapping[str, Any]]) -> _Reader:
        """_reader, for a format that reads values by the offered tools' schemas."""
        return self._reader()


def _single_token(tokenizer: TokenizerLike, text: str) -> int | None:
    try:
        ids = tokenizer.encode(text, add_bos=False)
    except (AttributeError, TypeError, ValueError):
        return None
    return ids[0] if len(ids) == 1 and tokenizer.id_to_piece(ids[0]) == text else None


def _marker(tokenizer: TokenizerLike | None, text: str) -> Marker:
    if tokenizer is None:
        return Marker(text)
    token = _single_token(tokenizer, text)
    # a marker piece (control, or user-defined and written <...>) is a special token to llguidance
    # (models/text/grammar.py): the grammar names it by id, and no text can spell it
    return Marker(text, token, token is not None and tokenizer.is_special(token))


_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")


def _functions(tools: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The function definitions of OpenAI `tools` entries, checked: names unique and plain, parameters objects."""
    functions, seen = [], set()
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        name = function.get("name") if isinstance(function, Mapping) else None
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise GrammarError(f"a tool's function name must be 1 to 64 of A-Z a-z 0-9 _ . -, not {name!r}")
        if name in seen:
            raise GrammarError(f"two tools are named {name!r}")
        params = function.get("parameters")
        if params is not None and not isinstance(params, Mapping):
            raise GrammarError(f"the parameters of {name!r} must be a JSON schema object")
        seen.add(name)
        functions.append(function)
    if not functions:
        raise GrammarError("no tools to call")
    return functions


def _parameters(function: Mapping[str, Any]) -> Mapping[str, Any]:
    # OpenAI: a function without parameters takes none
    params = function.get("parameters")
    return params if params else {"type": "object", "properties": {}, "additionalProperties": False}


# -- Lark helpers --------------------------------------------------------------------------------------------------

def _lit(text: str) -> str:
    """A Lark string literal."""
    return json.dumps(text, ensure_ascii=False)


def _rx(text: str) -> str:
    """Text as a regex (Rust syntax inside Lark's /.../): only metacharacters escaped, since `\\<` is an
    assertion there."""
    return re.sub(r"([\\.+*?()|\[\]{}^$#&\-~/])", r"\\\1", text)


def _without(text: str) -> str:
    """A Lark regex expression of any text that does not contain `text`."""
    return f"(/(?s:.*)/ & ~/(?s:.*){_rx(text)}(?s:.*)/)"


class _Rules:
    """Lark rules being assembled, with fresh names."""

    def __init__(self) -> None:
        self.rules: dict[str, str] = {}
        self.cache: dict[str, str] = {}  # shared rules by what they match
        self._count = 0

    def fresh(self, stem: str) -> str:
        self._count += 1
        return f"{stem}{self._count}" if stem.islower() else f"{stem}{self._count}".upper()

    def add(self, name: str, body: str) -> str:
        self.rules[name] = body
        return name

    def source(self) -> str:
        return "\n".join(f"{name}: {body}" for name, body in [("start", self.rules["start"]), *(
            (n, b) for n, b in self.rules.items() if n != "start")])


def _delimited(rules: _Rules, open_: Marker, close: Marker, min_len: int = 0, max_len: int | None = None) -> str:
    """Text between two markers that does not hold the closing one (Gemma strings, thought channels)."""
    key = f"{open_}|{close}|{min_len}|{max_len}"
    if key in rules.cache:
        return rules.cache[key]
    rules.cache[key] = name = _delimited_rule(rules, open_, close, min_len, max_len)
    return name


def _delimited_rule(rules: _Rules, open_: Marker, close: Marker, min_len: int, max_len: int | None) -> str:
    span = "" if (min_len, max_len) == (0, None) else f"{{{min_len},{'' if max_len is None else max_len}}}"
    if not open_.special and not close.special:  # one terminal, so the lexer sees where the text ends
        inner = f"(/(?s:.{span or '*'})/ & ~/(?s:.*){_rx(close.text)}(?s:.*)/)"
        return rules.add(rules.fresh("TEXT"), f"{_lit(open_.text)} {inner} {_lit(close.text)}")
    # a special token cannot be in the text: the text is one terminal between two token references
    low = max(min_len, 1)
    if max_len is not None and max_len < low:  # only the empty text
        return rules.add(rules.fresh("delim"), f"{open_.lark} {close.lark}")
    inner = rules.add(rules.fresh("TEXT"), f"/(?s:.{{{low},{'' if max_len is None else max_len}}})/")
    optional = "?" if min_len == 0 else ""
    return rules.add(rules.fresh("delim"), f"{open_.lark} {inner}{optional} {close.lark}")


def _auto_start(rules: _Rules, opener: Marker, rest: str) -> None:
    """"auto" for a format whose calls begin with an opener anywhere: text without the opener, or text up to the
    opener and then calls (llguidance's lazy pattern: the head ends at the first opener)."""
    if opener.special:
        rules.add("FREE", "/(?s:.*)/")
        rules.add("start", f"FREE ({opener.lark} {rest})?")
        return
    rules.add("FREE", _without(opener.text))
    rules.add("head[lazy]", f"FREE {_lit(opener.text)}")
    rules.add("start", f"FREE | head {rest}")


# -- streaming parser ------------------------------------------------------------------------------------------------

class _Reader(ABC):
    """Reads the calls that follow an opener, as text arrives: events ("name", text), ("args", text), ("end",)."""

    @abstractmethod
    def feed(self, text: str, final: bool) -> tuple[int, list[tuple[str, ...]], bool]:
        """(characters consumed, events, whether the calls are over); final: no more text will come."""


def _prefix_hold(text: str, marker: str) -> int:
    """How many characters at the end of text could begin `marker`."""
    for k in range(min(len(marker) - 1, len(text)), 0, -1):
        if text.endswith(marker[:k]):
            return k
    return 0


class ToolCallStream:
    """Splits a reply, as it is generated, into content and tool-call deltas. Text that may begin a call is held
    back until decided; whitespace between calls (or around them) is dropped."""

    def __init__(self, fmt: ToolCallFormat, tools: Sequence[Mapping[str, Any]] = ()) -> None:
        self._fmt = fmt
        self._tools = tools
        self._buffer = ""
        self._mode = "start" if fmt._opener is None else "content"  # start | content | text | call | after
        self._reader: _Reader | None = None
        self._index = 0
        self._named = False  # the current call's name went out
        self._calls = 0

    def push(self, text: str) -> list[Delta]:
        """Add generated text; the deltas that can go out now."""
        self._buffer += text
        return self._run(final=False)

    def flush(self) -> list[Delta]:
        """At the end of the reply: everything left (a call cut short keeps what it has, unnamed ones go)."""
        return self._run(final=True)

    def _run(self, final: bool) -> list[Delta]:
        out: list[Delta] = []
        while True:
            before = (self._mode, len(self._buffer))
            if self._mode == "call":
                self._feed_call(out, final)
            elif self._mode == "content":
                self._content(out, final)
            elif self._mode == "text":
                if self._buffer:
                    out.append(ContentDelta(self._buffer))
                self._buffer = ""
            else:  # start or after: whitespace, then a call, or content
                self._between(out, final)
            if (self._mode, len(self._buffer)) == before:
                return _merge(out)

    def _content(self, out: list[Delta], final: bool) -> None:
        opener = self._fmt._opener.text if self._fmt._opener else ""
        at = self._buffer.find(opener) if opener else -1
        if at >= 0:
            text = self._buffer[:at].rstrip()  # whitespace before a call is not content
            if text:
                out.append(ContentDelta(text))
            self._buffer = self._buffer[at + len(opener):]
            self._open()
            return
        keep = 0
        if not final:  # what may begin the opener, and whitespace before it, waits
            keep = _prefix_hold(self._buffer, opener) if opener else 0
            rest = self._buffer[:len(self._buffer) - keep]
            keep += len(rest) - len(rest.rstrip())
        elif self._calls:  # whitespace after the last call is not content
            self._buffer = self._buffer.rstrip()
        text, self._buffer = self._buffer[:len(self._buffer) - keep], self._buffer[len(self._buffer) - keep:]
        if text:
            out.append(ContentDelta(text))

    def _between(self, out: list[Delta], final: bool) -> None:
        """At the start of a reply (formats whose calls only start it) or after calls: is a call next?"""
        stripped = self._buffer.lstrip()
        if not stripped:
            if final:
                if self._mode == "start" and self._buffer:
                    out.append(ContentDelta(self._buffer))
                self._buffer = ""
            return
        if self._fmt._opener is not None:  # after calls in a marker format: back to content, minus whitespace
            self._buffer, self._mode = stripped, "content"
            return
        text, sep, prefix = stripped, self._fmt._separator.strip(), self._fmt._prefix_text
        if self._mode == "after" and sep:
            if text.startswith(sep):
                text = text[len(sep):].lstrip()
            elif sep.startswith(text) and not final:
                return
        if prefix and text.startswith(prefix):
            text = text[len(prefix):].lstrip()
        decided = _call_start(text, prefix)
        if decided is None and not final:
            return
        if decided:
            self._buffer = text
            self._open()
        else:  # content: nothing after it can be a call
            self._buffer = stripped if self._mode == "after" else self._buffer
            self._mode = "text"

    def _open(self) -> None:
        self._reader = self._fmt._reader_for(self._tools)
        self._mode = "call"
        self._named = False

    def _feed_call(self, out: list[Delta], final: bool) -> None:
        assert self._reader is not None
        used, events, done = self._reader.feed(self._buffer, final)
        self._buffer = self._buffer[used:]
        for event in events:
            if event[0] == "name":
                self._named = True
                out.append(ToolCallDelta(self._index, name=event[1]))
            elif event[0] == "args":
                out.append(ToolCallDelta(self._index, arguments=event[1]))
            elif event[0] == "end":
                if self._named:
                    self._index += 1
                    self._calls += 1
                self._named = False
        if done or final:  # a call cut short (or not a call after all) keeps what it has
            if self._named:
                self._index += 1
                self._calls += 1
            self._reader, self._mode, self._named = None, "after", False


def _call_start(text: str, prefix: str) -> bool | None:
    """Whether text (whitespace stripped) starts a JSON call object `{"name":`: True, False, or None (undecided)."""
    compact = re.sub(r"\s+", "", text[:64])
    if compact.startswith(_CALL_START):
        return True
    if _CALL_START.startswith(compact) or (prefix and prefix.startswith(text)):
        return None
    return False


_CALL_START = '{"name":'


def _merge(deltas: list[Delta]) -> list[Delta]:
    """Adjacent pieces of the same kind (and the same call) as one delta."""
    merged: list[Delta] = []
    for d in deltas:
        last = merged[-1] if merged else None
        if isinstance(d, ContentDelta) and isinstance(last, ContentDelta):
            merged[-1] = ContentDelta(last.text + d.text)
        elif (isinstance(d, ToolCallDelta) and isinstance(last, ToolCallDelta) and d.index == last.index
              and d.name is None):
            merged[-1] = ToolCallDelta(last.index, last.name, last.arguments + d.arguments)
        elif not (isinstance(d, ContentDelta) and not d.text):
            merged.append(d)
    return merged


def _assemble(deltas: Sequence[Delta]) -> tuple[str | None, list[ParsedCall]]:
    content = "".join(d.text for d in deltas if isinstance(d, ContentDelta))
    names: dict[int, str] = {}
    args: dict[int, list[str]] = {}
    for d in deltas:
        if isinstance(d, ToolCallDelta):
            if d.name is not None:
                names[d.index] = d.name
            args.setdefault(d.index, []).append(d.arguments)
    calls = [ParsedCall(names[i], "".join(args.get(i, []))) for i in sorted(names)]
    return content or None, calls
