"""The JSON call formats (gemma3, qwen, llama3, mistral): calls as `{"name": ..., ARGS_KEY: {...}}` objects,
their grammar with llguidance's `%json` arguments, and the reader that streams them."""

from __future__ import annotations

import json
import secrets
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from models.text.grammar import JSON_LAYOUT
from models.text.tool_calls.base import (
    Marker,
    TokenizerLike,
    ToolCallFormat,
    _auto_start,
    _lit,
    _marker,
    _parameters,
    _Reader,
    _Rules,
    _rx,
)


@dataclass(frozen=True)
class _JsonSpec:
    args_key: str  # "arguments" or "parameters"
    opener: str | None  # the piece that starts calls (None: calls only start a reply)
    before: str  # text between the opener and a call's object (qwen: "\n")
    after: str  # text after a call's object (qwen: "\n</tool_call>")
    separator: str  # between parallel calls
    prefix: str | None = None  # an optional piece before the calls (llama3's <|python_tag|>)
    listed: bool = False  # calls are a JSON list after the opener (mistral)


_JSON_SPECS = {
    "gemma3": _JsonSpec("parameters", None, "", "", "\n"),
    "qwen": _JsonSpec("arguments", "<tool_call>", "\n", "\n</tool_call>", "\n"),
    "llama3": _JsonSpec("parameters", None, "", "", "; ", prefix="<|python_tag|>"),
    "mistral": _JsonSpec("arguments", "[TOOL_CALLS]", "", "", ", ", listed=True),
}


class JsonCallFormat(ToolCallFormat):
    """Formats whose calls are JSON objects `{"name": ..., ARGS_KEY: {...}}` (gemma3, qwen, llama3, mistral)."""

    def __init__(self, name: str, tokenizer: TokenizerLike | None = None) -> None:
        self.name = name
        self.spec = _JSON_SPECS[name]
        self._opener = _marker(tokenizer, self.spec.opener) if self.spec.opener else None
        self._close = _marker(tokenizer, "</tool_call>") if name == "qwen" else None
        self._prefix = _marker(tokenizer, self.spec.prefix) if self.spec.prefix else None
        self._separator = "" if self.spec.listed else self.spec.separator
        self._prefix_text = self.spec.prefix or ""

    def render_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        return self.render_calls([(name, arguments)])

    def _markers(self) -> tuple[Marker | None, ...]:
        return (self._opener, self._close, self._prefix)

    def new_call_id(self) -> str:
        if self.name == "mistral":  # Mistral's templates refuse any id but nine letters or digits
            return "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(9))
        return super().new_call_id()

    def render_calls(self, calls: Sequence[tuple[str, str | Mapping[str, Any]]]) -> str:
        spec = self.spec
        bodies = [self._body(name, args) for name, args in calls]
        if spec.listed:
            return f"{spec.opener}[{spec.separator.join(bodies)}]"
        return spec.separator.join(f"{spec.opener or ''}{spec.before}{body}{spec.after}" for body in bodies)

    def _body(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
        return f'{{"name": {json.dumps(name, ensure_ascii=False)}, "{self.spec.args_key}": {args}}}'

    def _call(self, rules: _Rules, function: Mapping[str, Any]) -> str:
        params = {**_parameters(function), "x-guidance": JSON_LAYOUT}
        head = f'{{"name": {json.dumps(function["name"])}, "{self.spec.args_key}": '
        parts = [_lit(head), "%json " + json.dumps(params, ensure_ascii=False), _lit("}")]
        if self.spec.before:
            parts.insert(0, _lit(self.spec.before))
        if self._close is not None:  # qwen: "\n" then the closing piece
            parts += [_lit(self.spec.after[:-len(self._close.text)]), self._close.lark]
        return rules.add(rules.fresh("call"), " ".join(parts))

    def _start(self, rules: _Rules, auto: bool, parallel: bool) -> _Rules:
        spec = self.spec
        sep = f" ({_lit(spec.separator)} call)*" if parallel else ""
        if spec.listed:  # mistral: the opener, then a list of calls
            assert self._opener is not None
            body = f'"[" call{sep} "]"'
            if auto:
                _auto_start(rules, self._opener, body)
            else:
                rules.add("start", f"{self._opener.lark} {body}")
            return rules
        if self._opener is not None:  # qwen: each call has its opener
            more = f" ({_lit(spec.separator)} {self._opener.lark} call)*" if parallel else ""
            if auto:
                _auto_start(rules, self._opener, f"call{more}")
            else:
                rules.add("start", f"{self._opener.lark} call{more}")
            return rules
        prefix = f"{self._prefix.lark}? " if self._prefix is not None else ""
        calls = f"{prefix}call{sep}"
        if not auto:
            rules.add("start", calls)
            return rules
        # calls only start a reply: text may not begin with "{" (nor with a textual prefix piece)
        text = r"/\s*([^\s{](?s:.*))?/"
        if self._prefix is not None and not self._prefix.special:
            text = f"({text} & ~/\\s*{_rx(self._prefix.text)}(?s:.*)/)"
        rules.add("TEXT", text)
        rules.add("start", f"TEXT | {calls}")
        return rules

    def _reader(self) -> _Reader:
        return _JsonCallsReader(self.spec)


class _JsonCallsReader(_Reader):
    """Calls written as JSON objects (after the opener, or at the start of the reply): the name goes out once
    read, the arguments' JSON text as it arrives (held until the name is known)."""

    def __init__(self, spec: _JsonSpec) -> None:
        self.spec = spec
        self.state = "list" if spec.listed else "object"  # list | object | key | colon | value | after
        self.key = ""
        self.value = ""  # the raw text of the value being read
        self.started = False  # the value's first character was read
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.name: str | None = None
        self.args: list[str] = []  # argument text not yet sent (read before the name)
        self.args_sent = False

    def feed(self, text: str, final: bool) -> tuple[int, list[tuple[str, ...]], bool]:
        events: list[tuple[str, ...]] = []
        i = 0
        while i < len(text):
            if self.state == "value":
                i = self._value(text, i, events)
                continue
            if self.state == "after":  # the wrapper's closing text, or a list's separator
                used, done = self._after(text[i:], final)
                if used < 0:
                    break
                i += used
                if done:
                    return i, events, True
                continue
            c = text[i]
            if c.isspace():
                i += 1
                continue
            if self.state == "list" and c == "[":
                self.state = "object"
            elif self.state == "object" and c == "{":
                self.state, self.name, self.args, self.args_sent = "key", None, [], False
            elif self.state == "key" and c == "}":
                self._end(events)
            elif self.state == "key" and c == ",":
                pass
            elif self.state == "key" and c == '"':
                end = _json_string_end(text, i)
                if end < 0:
                    break  # the key is not complete yet
                self.key, self.state, i = json.loads(text[i:end]), "colon", end
                continue
            elif self.state == "colon" and c == ":":
                self.state, self.value, self.started, self.depth = "value", "", False, 0
            else:  # not the JSON of a call: the calls end here
                return i, self._cut(events), True
            i += 1
        if final and self.state != "after":
            return len(text), self._cut(events), True
        return i, events, final

    def _value(self, text: str, i: int, events: list[tuple[str, ...]]) -> int:
        """Read the value's characters from text[i]; return where reading stopped."""
        start, done = i, False
        while i < len(text) and not done:
            c = text[i]
            if not self.started:
                if c.isspace():
                    start = i = i + 1
                    continue
                self.started = True
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif c == "\\":
                    self.escaped = True
                elif c == '"':
                    self.in_string = False
                    done = self.depth == 0
            elif c == '"':
                self.in_string = True
            elif c in "{[":
                self.depth += 1
            elif c in "}]" and self.depth > 0:
                self.depth -= 1
                done = self.depth == 0
            elif self.depth == 0 and (c in ",}]" or c.isspace()):  # the end of a bare value (not read)
                done = True
                break
            i += 1
        piece = text[start:i]
        self.value += piece
        if self.key in ("arguments", "parameters") and piece:
            self.args.append(piece)
            if self.name is not None:
                self._send_args(events)
        if done:
            self._value_done(events)
        return i

    def _value_done(self, events: list[tuple[str, ...]]) -> None:
        if self.key == "name" and self.name is None:
            try:
                name = json.loads(self.value)
            except ValueError:
                name = None
            if isinstance(name, str):
                self.name = name
                events.append(("name", name))
                self._send_args(events)
        self.state, self.key = "key", ""

    def _send_args(self, events: list[tuple[str, ...]]) -> None:
        if self.args:
            events.append(("args", "".join(self.args)))
            self.args, self.args_sent = [], True

    def _end(self, events: list[tuple[str, ...]]) -> None:
        """The call's object closed."""
        if self.name is not None and not self.args_sent:
            self.args = self.args or ["{}"]  # a call without arguments takes none
            self._send_args(events)
        events.append(("end",))
        self.state = "after"

    def _cut(self, events: list[tuple[str, ...]]) -> list[tuple[str, ...]]:
        """The text stopped inside a call (cut short, or not JSON): a named call keeps what it has."""
        if self.name is not None and self.state not in ("after", "object", "list"):
            self._send_args(events)
            events.append(("end",))
        return events

    def _after(self, text: str, final: bool) -> tuple[int, bool]:
        """After an object: (characters used, calls over); -1 used when undecided."""
        stripped = text.lstrip()
        skipped = len(text) - len(stripped)
        if self.spec.listed:
            if stripped.startswith(","):
                self.state = "object"
                return skipped + 1, False
            if stripped.startswith("]"):
                return skipped + 1, True
            return (skipped, True) if stripped or final else (-1, False)
        closing = self.spec.after.strip()
        if closing and stripped.startswith(closing):
            return skipped + len(closing), True
        if closing and closing.startswith(stripped):  # the closing piece's start: wait, or at the end take it
            return (len(text), True) if final else (-1, False)
        return 0, True


def _json_string_end(text: str, i: int) -> int:
    """The index after the JSON string starting at text[i] (a quote), or -1 when it is not complete."""
    j = i + 1
    while j < len(text):
        if text[j] == "\\":
            j += 2
        elif text[j] == '"':
            return j + 1
        else:
            j += 1
    return -1
