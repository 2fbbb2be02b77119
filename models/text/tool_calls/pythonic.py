"""LFM2's tool calls: a Python list of calls with keyword arguments between its call pieces,
`<|tool_call_start|>[get_weather(unit="celsius", days=3), ...]<|tool_call_end|>` (Liquid AI's documented format),
the grammar that keeps them valid and the reader that streams them back as JSON.

Arguments: each top-level parameter is `name=value` in the schema's order (the required ones always, the others
optionally). A boolean or null parameter is written in Python (True, False, None); every other value is JSON text
under its schema (llguidance's `%json`), which Python reads the same for strings, numbers, lists and dicts. The reader
converts each value with Python's literal rules (JSON's true/false/null inside nested values too).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any

from models.text.grammar import JSON_LAYOUT, GrammarError
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
)

_PYTHON_ONLY = {"boolean": '("True" | "False")', "null": '"None"'}


class PythonicFormat(ToolCallFormat):
    """LFM2's calls: `<|tool_call_start|>[NAME(key=value, ...), ...]<|tool_call_end|>`."""

    name = "lfm2"
    _separator = ", "

    def __init__(self, tokenizer: TokenizerLike | None = None) -> None:
        self._opener = _marker(tokenizer, "<|tool_call_start|>")
        self._close = _marker(tokenizer, "<|tool_call_end|>")

    def _markers(self) -> tuple[Marker | None, ...]:
        return (self._opener, self._close)

    def render_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        return self.render_calls([(name, arguments)])

    def render_calls(self, calls: Any) -> str:
        bodies = []
        for name, arguments in calls:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
            if not isinstance(args, Mapping):
                raise ValueError(f"the arguments of {name!r} are not a JSON object")
            bodies.append(f"{name}({', '.join(f'{k}={_python(v)}' for k, v in args.items())})")
        return f"{self._opener.text}[{', '.join(bodies)}]{self._close.text}"

    def _call(self, rules: _Rules, function: Mapping[str, Any]) -> str:
        params = _parameters(function)
        properties = params.get("properties") or {}
        if not isinstance(properties, Mapping):
            raise GrammarError(f"the properties of {function['name']!r} must be an object")
        required = set(params.get("required") or ())
        defs = {key: params[key] for key in ("$defs", "definitions") if key in params}
        # a chain of rules over the parameters in order, two per parameter: before any argument was written (no
        # comma) and after one (a comma first)
        tail = {False: _lit(""), True: _lit("")}
        for key in reversed(list(properties)):
            value = _value(properties[key], defs)
            head = {}
            for written in (False, True):
                arg = f'{_lit((", " if written else "") + key + "=")} {value} {tail[True]}'
                body = arg if key in required else f"{arg} | {tail[written]}"
                head[written] = rules.add(rules.fresh("args"), body)
            tail = head
        return rules.add(rules.fresh("call"), f'{_lit(function["name"] + "(")} {tail[False]} {_lit(")")}')

    def _start(self, rules: _Rules, auto: bool, parallel: bool) -> _Rules:
        more = f' ({_lit(", ")} call)*' if parallel else ""
        body = f'{_lit("[")} call{more} {_lit("]")} {self._close.lark}'
        if auto:
            _auto_start(rules, self._opener, body)
        else:
            rules.add("start", f"{self._opener.lark} {body}")
        return rules

    def _reader(self) -> _Reader:
        return _PythonicReader(self._close.text)


def _value(schema: Any, defs: Mapping[str, Any]) -> str:
    """A parameter's value in the grammar: Python's spelling for a plain boolean or null, else JSON under its schema."""
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(kind, str) and kind in _PYTHON_ONLY and "enum" not in schema and "const" not in schema:
        return _PYTHON_ONLY[kind]
    sub = {**(schema if isinstance(schema, Mapping) else {}), **defs, "x-guidance": JSON_LAYOUT}
    return "%json " + json.dumps(sub, ensure_ascii=False)


def _python(value: Any) -> str:
    """A JSON value as a Python literal (dict keys and strings in double quotes)."""
    if value is True or value is False or value is None:
        return repr(value)
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_python(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_python(v) for v in value) + "]"
    return json.dumps(value, ensure_ascii=False)


def _json_value(text: str) -> str:
    """A written value as JSON text: Python's literal, or JSON's; as written where neither reads it."""
    try:
        return json.dumps(ast.literal_eval(text), ensure_ascii=False)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        pass
    try:
        return json.dumps(json.loads(text), ensure_ascii=False)
    except ValueError:
        return text


class _PythonicReader(_Reader):
    """`[NAME(key=value, ...), ...]` then the closing piece: the name goes out once read, each argument as its value
    ends (`{"key": value` pieces, `}` at the call's end)."""

    def __init__(self, close: str) -> None:
        self.close = close
        self.state = "list"  # list | name | key | value | after | close
        self.token = ""  # the name, key or value being read
        self.depth = 0
        self.quote = ""  # the open string's quote character
        self.escaped = False
        self.named = False
        self.args = 0  # arguments sent in this call

    def feed(self, text: str, final: bool) -> tuple[int, list[tuple[str, ...]], bool]:
        events: list[tuple[str, ...]] = []
        i = 0
        while i < len(text):
            c = text[i]
            if self.state == "value":
                if self._value_char(c, events):
                    continue  # c ends the value and is read again as what follows it
                i += 1
                continue
            if self.state == "close":
                rest = text[i:].lstrip()
                if rest.startswith(self.close):
                    return len(text) - len(rest) + len(self.close), events, True
                if rest and not self.close.startswith(rest):
                    return i, events, True
                if final:
                    return len(text), events, True
                return i, events, False  # the closing piece may still come
            if c.isspace() and self.state != "name":
                i += 1
                continue
            if self.state == "list":
                if c != "[":
                    return i, events, True
                self.state = "name"
            elif self.state == "name":
                if c == "(":
                    events.append(("name", self.token.strip()))
                    self.named, self.token, self.args, self.state = True, "", 0, "key"
                elif c.isalnum() or c in "_.-" or (c.isspace() and not self.token):
                    self.token += c.strip()
                else:
                    return i, events, True
            elif self.state == "key":
                if c == ")":
                    self._end(events)
                elif c == "," and not self.token:
                    pass
                elif c == "=":
                    events.append(("args", ("{" if not self.args else ", ") + json.dumps(self.token.strip()) + ": "))
                    self.args += 1
                    self.token, self.state = "", "value"
                else:
                    self.token += c
            elif self.state == "after":
                if c == ",":
                    self.state = "name"
                elif c == "]":
                    self.state = "close"
                else:
                    return i, events, True
            i += 1
        if final:  # cut short inside a call: it keeps what it has (its arguments' JSON unclosed)
            if self.state == "value" and self.token.strip():
                events.append(("args", _json_value(self.token.strip())))
            if self.named and self.state in ("key", "value"):
                events.append(("end",))
            return len(text), events, True
        return i, events, False

    def _value_char(self, c: str, events: list[tuple[str, ...]]) -> bool:
        """Read one character of a value; True when c ends the value (the value is sent, c is not consumed)."""
        if self.quote:
            if self.escaped:
                self.escaped = False
            elif c == "\\":
                self.escaped = True
            elif c == self.quote:
                self.quote = ""
        elif c in "\"'":
            self.quote = c
        elif c in "[{(":
            self.depth += 1
        elif c in "]})" and self.depth > 0:
            self.depth -= 1
        elif c in ",)" and self.depth == 0:
            events.append(("args", _json_value(self.token.strip())))
            self.token, self.state = "", "key"
            return True
        self.token += c
        return False

    def _end(self, events: list[tuple[str, ...]]) -> None:
        events.append(("args", "}" if self.args else "{}"))
        events.append(("end",))
        self.named, self.state, self.token = False, "after", ""
