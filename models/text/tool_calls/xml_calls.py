"""Qwen3-Coder's tool calls, which Qwen3.5's template asks for: each call in its own block,

    <tool_call>
    <function=NAME>
    <parameter=KEY>
    VALUE
    </parameter>
    </function>
    </tool_call>

parallel calls one block per line, as the template writes them back. A value is raw text between the newline after
`<parameter=KEY>` and the one before `</parameter>` (llama.cpp's qwen3-coder parser and vLLM's qwen3_coder parser
read it so): a string as it is (it may span lines, and cannot hold `</parameter>`), any other type as JSON.

Which one a value is comes from the parameter's schema, so the reader takes the tools (stream(tools)): a property
whose only type is string keeps its text, one without string among its types is read as JSON, one that allows both
(or says nothing) is JSON where the text reads as a value of a non-string type it allows, else the text. A string
parameter's text streams as it comes (a JSON string in pieces); other values go out whole. The grammar
writes parameters in the schema's order, the required ones always: a string one as text (its enum or const values as
alternatives, min/maxLength as the text's length), any other as llguidance's `%json` of its schema.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from models.text.grammar import JSON_LAYOUT, GrammarError
from models.text.tool_calls.base import (
    Marker,
    TokenizerLike,
    ToolCallFormat,
    _auto_start,
    _functions,
    _lit,
    _marker,
    _parameters,
    _prefix_hold,
    _Reader,
    _Rules,
    _rx,
)

_OPEN_FUNCTION, _OPEN_PARAMETER = "<function=", "<parameter="
_CLOSE_FUNCTION, _CLOSE_PARAMETER = "</function>", "</parameter>"
_JSON_TYPES = {dict: "object", list: "array", bool: "boolean", int: "integer", float: "number", type(None): "null"}
_ANNOTATIONS = {"description", "title", "default", "examples", "$comment", "deprecated", "readOnly", "writeOnly"}
_STRING_KEYWORDS = {"type", "enum", "const", "minLength", "maxLength", *_ANNOTATIONS}
_ANY = frozenset({"string", "object", "array", "boolean", "integer", "number", "null"})


class XmlCallFormat(ToolCallFormat):
    """Qwen3-Coder's (and Qwen3.5's) calls: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>
    \\n</function>\\n</tool_call>`."""

    name = "qwen3_coder"
    _separator = "\n"

    def __init__(self, tokenizer: TokenizerLike | None = None) -> None:
        self._opener = _marker(tokenizer, "<tool_call>")
        self._close = _marker(tokenizer, "</tool_call>")

    def _markers(self) -> tuple[Marker | None, ...]:
        return (self._opener, self._close)

    def render_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        if not isinstance(args, Mapping):
            raise ValueError(f"the arguments of {name!r} are not a JSON object")
        params = "".join(f"{_OPEN_PARAMETER}{key}>\n{_text(value)}\n{_CLOSE_PARAMETER}\n"
                         for key, value in args.items())
        return f"{self._opener.text}\n{_OPEN_FUNCTION}{name}>\n{params}{_CLOSE_FUNCTION}\n{self._close.text}"

    def _call(self, rules: _Rules, function: Mapping[str, Any]) -> str:
        params = _parameters(function)
        properties = params.get("properties") or {}
        if not isinstance(properties, Mapping):
            raise GrammarError(f"the properties of {function['name']!r} must be an object")
        required = set(params.get("required") or ())
        defs = {key: params[key] for key in ("$defs", "definitions") if key in params}
        tail = _lit("")
        for key in reversed(list(properties)):  # a chain over the parameters in the schema's order
            if not key or any(c in key for c in "<>\n"):
                raise GrammarError(f"{function['name']}: a parameter's name cannot hold <, > or a newline ({key!r})")
            value = _value(rules, properties[key], defs, f"{function['name']}.{key}")
            arg = f"{_lit(f'{_OPEN_PARAMETER}{key}>{chr(10)}')} {value} {tail}"
            tail = rules.add(rules.fresh("args"), arg if key in required else f"{arg} | {tail}")
        head = _lit(f"\n{_OPEN_FUNCTION}{function['name']}>\n")
        return rules.add(rules.fresh("call"), f"{head} {tail} {_lit(_CLOSE_FUNCTION + chr(10))} {self._close.lark}")

    def _start(self, rules: _Rules, auto: bool, parallel: bool) -> _Rules:
        more = f" ({_lit(self._separator)} {self._opener.lark} call)*" if parallel else ""
        if auto:
            _auto_start(rules, self._opener, f"call{more}")
        else:
            rules.add("start", f"{self._opener.lark} call{more}")
        return rules

    def _reader(self) -> _Reader:
        return _XmlReader(self._close.text, {})

    def _reader_for(self, tools: Sequence[Mapping[str, Any]]) -> _Reader:
        return _XmlReader(self._close.text, _schemas(tools))


def _text(value: Any) -> str:
    """A value as the template writes it: a string as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _resolve(schema: Any, defs: Mapping[str, Any]) -> Mapping[str, Any]:
    """A schema with a local `$ref` (to #/$defs/NAME or #/definitions/NAME) followed."""
    seen = 0
    while isinstance(schema, Mapping) and isinstance(schema.get("$ref"), str) and seen < 32:
        _, _, path = schema["$ref"].partition("#/")
        section, _, name = path.partition("/")
        schema, seen = (defs.get(section) or {}).get(name, {}), seen + 1
    return schema if isinstance(schema, Mapping) else {}


def _types(schema: Any, defs: Mapping[str, Any]) -> frozenset[str]:
    """The JSON types a schema allows (all of them where it does not say)."""
    schema = _resolve(schema, defs)
    if "const" in schema or "enum" in schema:
        values = [schema["const"]] if "const" in schema else list(schema.get("enum") or [])
        return frozenset(_type_of(v) for v in values)
    kind = schema.get("type")
    if isinstance(kind, str):
        return frozenset({kind, "integer"} if kind == "number" else {kind})
    if isinstance(kind, list):
        return frozenset(t for k in kind if isinstance(k, str) for t in ({k, "integer"} if k == "number" else {k}))
    branches = schema.get("anyOf") or schema.get("oneOf")
    if isinstance(branches, list) and branches:
        return frozenset().union(*(_types(b, defs) for b in branches))
    return _ANY


def _escaped(text: str) -> str:
    """Text as the inside of a JSON string (pieces of one string escape alike)."""
    return json.dumps(text, ensure_ascii=False)[1:-1]


def _type_of(value: Any) -> str:
    return "string" if isinstance(value, str) else _JSON_TYPES.get(type(value), "object")


def _value(rules: _Rules, schema: Any, defs: Mapping[str, Any], where: str) -> str:
    """A parameter's value and its closing `\\n</parameter>\\n` in the grammar."""
    close = _lit(f"\n{_CLOSE_PARAMETER}\n")
    types = _types(schema, defs)
    resolved = _resolve(schema, defs)
    if "string" not in types:
        sub = {**(schema if isinstance(schema, Mapping) else {}), **defs, "x-guidance": JSON_LAYOUT}
        return f"%json {json.dumps(sub, ensure_ascii=False)} {close}"
    values = [resolved["const"]] if "const" in resolved else resolved.get("enum")
    if isinstance(values, list):  # the values as the template writes them
        return f"({' | '.join(dict.fromkeys(_lit(_text(v)) for v in values))}) {close}"
    if types == {"string"}:
        unknown = sorted(set(resolved) - _STRING_KEYWORDS)
        if unknown:
            raise GrammarError(f"{where}: a string parameter's {', '.join(unknown)} cannot be enforced")
        low, high = resolved.get("minLength", 0), resolved.get("maxLength")
        span = f"{{{low},{'' if high is None else high}}}"
    else:  # a string or another type: any text (the reader takes a value of another type it allows)
        unknown = sorted(_constraints(resolved, defs))
        if unknown:
            raise GrammarError(f"{where}: the {', '.join(unknown)} of a parameter that takes a string or another "
                               "type cannot be enforced")
        span = "*"
    key = f"xml-text{span}"
    if key not in rules.cache:
        text = f"(/(?s:.{span})/ & ~/(?s:.*){_rx(_CLOSE_PARAMETER)}(?s:.*)/)"
        rules.cache[key] = rules.add(rules.fresh("TEXT"), f"{text} {close}")
    return rules.cache[key]


def _constraints(schema: Mapping[str, Any], defs: Mapping[str, Any]) -> set[str]:
    """The keywords of a schema (and its anyOf/oneOf branches) beyond its types and annotations."""
    found = set(schema) - _ANNOTATIONS - {"type", "anyOf", "oneOf"}
    for branch in schema.get("anyOf") or schema.get("oneOf") or ():
        found |= _constraints(_resolve(branch, defs), defs)
    return found


def _schemas(tools: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Mapping[str, Any], Mapping[str, Any]]]:
    """Each function's properties and $defs, by name."""
    out = {}
    for function in _functions(tools) if tools else []:
        params = _parameters(function)
        properties = params.get("properties")
        defs = {key: params[key] for key in ("$defs", "definitions") if key in params}
        out[function["name"]] = (properties if isinstance(properties, Mapping) else {}, defs)
    return out


def _convert(text: str, schema: Any, defs: Mapping[str, Any]) -> Any:
    """A written value as JSON data under its schema (module docstring)."""
    types = _types(schema, defs)
    if types == {"string"}:
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    kind = _type_of(value)
    if kind == "string" or kind not in types:  # JSON of a type the parameter does not take: its text, if it may
        return text if "string" in types else value
    return value


class _XmlReader(_Reader):
    """`<function=NAME>`, its parameters, `</function>`, then the closing piece: the name goes out once read, each
    argument as its value ends (`{"key": value` pieces, `}` at the function's end), a string parameter's text as it
    comes (`{"key": "`, then its text, escaped, in pieces)."""

    def __init__(self, close: str, schemas: Mapping[str, tuple[Mapping[str, Any], Mapping[str, Any]]]) -> None:
        self.close = close
        self.schemas = schemas
        self.state = "function"  # function | parameters | value | close
        self.name: str | None = None
        self.key = ""
        self.args = 0  # arguments sent in this call
        self.quoted = False  # the value being read is a string parameter's text, sent as it comes
        self.began = False  # its first character (a newline that is not part of it) was looked at

    def feed(self, text: str, final: bool) -> tuple[int, list[tuple[str, ...]], bool]:
        events: list[tuple[str, ...]] = []
        i = 0
        while True:
            rest = text[i:]
            if self.state == "value" and self.quoted:
                if not self.began and (rest or final):
                    self.began = True
                    i += rest.startswith("\n")
                    continue
                used, closed = self._text(rest, final, events)
                if closed:
                    i, self.state = i + used, "parameters"
                    continue
                return self._cut(len(text), events) if final else (i + used, events, False)
            if self.state == "value":
                at = rest.find(_CLOSE_PARAMETER)
                if at < 0:
                    if final:
                        self._argument(rest, events)
                        return self._cut(len(text), events)
                    return i, events, False
                self._argument(rest[:at], events)
                i, self.state = i + at + len(_CLOSE_PARAMETER), "parameters"
                continue
            stripped = rest.lstrip()
            i += len(rest) - len(stripped)
            if self.state == "close":
                if stripped.startswith(self.close):
                    return i + len(self.close), events, True
                if stripped and not self.close.startswith(stripped) or final:
                    return i, events, True
                return i, events, False
            options = [_OPEN_FUNCTION] if self.state == "function" else [_OPEN_PARAMETER, _CLOSE_FUNCTION]
            opened = next((o for o in options if stripped.startswith(o)), None)
            if opened is None:
                if not final and any(o.startswith(stripped) for o in options):
                    return i, events, False  # the tag's start: wait for the rest
                return self._cut(i, events)
            if opened == _CLOSE_FUNCTION:
                events += [("args", "}" if self.args else "{}"), ("end",)]
                i, self.state, self.name = i + len(opened), "close", None
                continue
            end = stripped.find(">")
            if end < 0:
                if final or "\n" in stripped or "<" in stripped[1:]:
                    return self._cut(i, events)
                return i, events, False
            label = stripped[len(opened):end].strip()
            if opened == _OPEN_FUNCTION:
                self.name, self.args, self.state = label, 0, "parameters"
                events.append(("name", label))
            else:
                self.key, self.state = label, "value"
                properties, defs = self.schemas.get(self.name or "", ({}, {}))
                self.quoted, self.began = label in properties and _types(properties[label], defs) == {"string"}, False
                if self.quoted:
                    events.append(("args", self._key() + '"'))
            i += end + 1

    def _argument(self, raw: str, events: list[tuple[str, ...]]) -> None:
        """One parameter's value read: its JSON goes out."""
        raw = raw.removeprefix("\n").removesuffix("\n")
        properties, defs = self.schemas.get(self.name or "", ({}, {}))
        value = _convert(raw, properties.get(self.key, {}), defs)
        events.append(("args", self._key() + json.dumps(value, ensure_ascii=False)))
        self.state = "parameters"

    def _key(self) -> str:
        """The JSON before an argument's value: `{"key": ` or `, "key": `."""
        self.args += 1
        return f"{'{' if self.args == 1 else ', '}{json.dumps(self.key, ensure_ascii=False)}: "

    def _text(self, rest: str, final: bool, events: list[tuple[str, ...]]) -> tuple[int, bool]:
        """A string parameter's text from rest (its leading newline gone): (characters used, whether
        `</parameter>` closed it). What may begin `</parameter>`, and a newline that may be the one before it,
        wait; at the end of the reply the text is closed as it is."""
        at = rest.find(_CLOSE_PARAMETER)
        if at >= 0 or final:
            piece = rest[:at] if at >= 0 else rest
            events.append(("args", _escaped(piece.removesuffix("\n")) + '"'))
            return (at + len(_CLOSE_PARAMETER), True) if at >= 0 else (len(rest), False)
        safe = rest[:len(rest) - _prefix_hold(rest, _CLOSE_PARAMETER)]
        safe = safe.removesuffix("\n")
        if safe:
            events.append(("args", _escaped(safe)))
        return len(safe), False

    def _cut(self, used: int, events: list[tuple[str, ...]]) -> tuple[int, list[tuple[str, ...]], bool]:
        """The text stopped inside a call (cut short, or not a call): a named call keeps what it has."""
        if self.name is not None:
            events.append(("end",))
            self.name = None
        return used, events, True
