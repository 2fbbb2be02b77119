"""Gemma 4's native tool calls: the format, values in Gemma's syntax (render_gemma_value), the JSON schema
translated into Lark rules for that syntax (_GemmaSchema), and the reader that streams calls back as JSON."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from models.text.grammar import GrammarError
from models.text.tool_calls.base import (
    Marker,
    TokenizerLike,
    ToolCallFormat,
    _auto_start,
    _delimited,
    _lit,
    _marker,
    _parameters,
    _prefix_hold,
    _Reader,
    _Rules,
)

QUOTE = '<|"|>'  # Gemma 4's string quote piece
_BARE_KEY = re.compile(r"[A-Za-z_$][A-Za-z0-9_$.\-]*")


class Gemma4Format(ToolCallFormat):
    """Gemma 4's native calls: `<|tool_call>call:NAME{key:value,...}<tool_call|>`, values in Gemma's syntax."""

    name = "gemma4"

    def __init__(self, tokenizer: TokenizerLike | None = None) -> None:
        self._opener = _marker(tokenizer, "<|tool_call>")
        self._close = _marker(tokenizer, "<tool_call|>")
        self._quote = _marker(tokenizer, QUOTE)
        self._thought = (_marker(tokenizer, "<|channel>"), _marker(tokenizer, "<channel|>"))
        response = _marker(tokenizer, "<|tool_response>")
        self.stop_markers = (response,) if response.token is not None else ()

    def _markers(self) -> tuple[Marker | None, ...]:
        return (self._opener, self._close, self._quote)

    def render_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        args = json.loads(arguments) if isinstance(arguments, str) else arguments
        if not isinstance(args, Mapping):
            raise ValueError(f"the arguments of {name!r} are not a JSON object")
        return f"<|tool_call>call:{name}{render_gemma_value(args)}<tool_call|>"

    def _call(self, rules: _Rules, function: Mapping[str, Any]) -> str:
        args = _GemmaSchema(rules, self._quote).root(_parameters(function))
        return rules.add(rules.fresh("call"), f'{_lit("call:" + function["name"])} {args} {self._close.lark}')

    def _start(self, rules: _Rules, auto: bool, parallel: bool) -> _Rules:
        more = f" ({self._opener.lark} call)*" if parallel else ""
        end = f" {self.stop_markers[0].lark}?" if self.stop_markers else ""
        if auto:
            _auto_start(rules, self._opener, f"call{more}{end}")
        else:
            # an optional thought channel first: Gemma 4 may think (or write an empty channel) before calling
            thought = _delimited(rules, *self._thought)
            rules.add("start", f"{thought}? {self._opener.lark} call{more}{end}")
        return rules

    def _reader(self) -> _Reader:
        return _GemmaCallReader()


def render_gemma_value(value: Any) -> str:
    """A JSON value in Gemma 4's syntax: bare keys (quoted when not plain), strings between `<|"|>`."""
    if isinstance(value, str):
        return f"{QUOTE}{value}{QUOTE}"
    if value is True or value is False or value is None:
        return json.dumps(value)
    if isinstance(value, (int, float)):
        return json.dumps(value)
    if isinstance(value, Mapping):
        items = (f"{k if _BARE_KEY.fullmatch(k) else QUOTE + k + QUOTE}:{render_gemma_value(v)}"
                 for k, v in value.items())
        return "{" + ",".join(items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(render_gemma_value(v) for v in value) + "]"
    raise ValueError(f"{type(value).__name__} is not a JSON value")


_ANNOTATIONS = frozenset({"description", "title", "default", "examples", "$schema", "$id", "$comment", "deprecated",
                          "readOnly", "writeOnly", "$defs", "definitions", "strict"})
_NUMERIC = frozenset({"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf"})
_KNOWN = _ANNOTATIONS | _NUMERIC | {"type", "properties", "required", "additionalProperties", "items", "enum",
                                     "const", "anyOf", "$ref", "nullable", "minItems", "maxItems", "minLength",
                                     "maxLength"}
_MAX_DEPTH = 48


def _count(schema: Mapping[str, Any], key: str) -> int | None:
    value = schema.get(key)
    if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < 0):
        raise GrammarError(f"{key} must be a non-negative integer, not {value!r}")
    return value


class _GemmaSchema:
    """A JSON schema translated into Lark rules for values in Gemma 4's syntax."""

    def __init__(self, rules: _Rules, quote: Marker) -> None:
        self.rules = rules
        self.quote = quote
        self._root: Mapping[str, Any] = {}
        self._refs: dict[str, str] = {}

    def root(self, schema: Mapping[str, Any]) -> str:
        self._root = schema
        return self.value(schema, 0)

    def value(self, schema: Any, depth: int) -> str:
        if depth > _MAX_DEPTH:
            raise GrammarError(f"the schema nests deeper than {_MAX_DEPTH} levels")
        if schema is True or schema == {}:
            return self._any()
        if not isinstance(schema, Mapping):
            raise GrammarError(f"a schema must be an object or true, not {schema!r}")
        unknown = sorted(set(schema) - _KNOWN)
        if unknown:
            raise GrammarError(f"the schema keyword {unknown[0]!r} cannot be enforced in Gemma 4's call syntax")
        if "$ref" in schema:
            return self._ref(schema["$ref"], depth)
        if "const" in schema:
            return self._const(schema["const"])
        if "enum" in schema:
            values = schema["enum"]
            if not isinstance(values, list) or not values:
                raise GrammarError("enum must be a non-empty list")
            return "(" + " | ".join(self._const(v) for v in values) + ")"
        if "anyOf" in schema:
            options = schema["anyOf"]
            if not isinstance(options, list) or not options:
                raise GrammarError("anyOf must be a non-empty list")
            if set(schema) - _ANNOTATIONS - {"anyOf"}:
                raise GrammarError("anyOf beside other constraints cannot be enforced in Gemma 4's call syntax")
            return "(" + " | ".join(self.value(o, depth + 1) for o in options) + ")"
        kinds = schema.get("type")
        if kinds is None:
            kinds = "object" if {"properties", "required", "additionalProperties"} & set(schema) else (
                "array" if "items" in schema else None)
            if kinds is None:
                return self._any()
        kinds = [kinds] if isinstance(kinds, str) else kinds
        if not isinstance(kinds, list) or not kinds or not all(isinstance(k, str) for k in kinds):
            raise GrammarError(f"type must be a type name or a non-empty list of them, not {kinds!r}")
        kinds = list(kinds)
        if schema.get("nullable") is True and "null" not in kinds:
            kinds.append("null")
        options = [self._typed(kind, schema, depth) for kind in kinds]
        return options[0] if len(options) == 1 else "(" + " | ".join(options) + ")"

    def _typed(self, kind: str, schema: Mapping[str, Any], depth: int) -> str:
        if kind == "string":
            return _delimited(self.rules, self.quote, self.quote, _count(schema, "minLength") or 0,
                              _count(schema, "maxLength"))
        if kind in ("integer", "number"):
            bounds = {k: schema[k] for k in _NUMERIC if k in schema}
            if bounds:  # Gemma writes numbers as JSON does: llguidance's JSON number grammar enforces the bounds
                return self.rules.add(self.rules.fresh("num"), "%json " + json.dumps({"type": kind, **bounds}))
            return self._terminal("INT" if kind == "integer" else "NUM")
        if kind == "boolean":
            return '("true" | "false")'
        if kind == "null":
            return '"null"'
        if kind == "object":
            return self._object(schema, depth)
        if kind == "array":
            return self._array(schema, depth)
        raise GrammarError(f"unknown schema type {kind!r}")

    def _object(self, schema: Mapping[str, Any], depth: int) -> str:
        props = schema.get("properties", {})
        if not isinstance(props, Mapping):
            raise GrammarError("properties must be an object")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(k, str) for k in required):
            raise GrammarError("required must be a list of property names")
        extra = schema.get("additionalProperties", True)
        keys = list(props)
        for name in required:
            if name not in props:
                if extra is False:
                    raise GrammarError(f"the required property {name!r} is not allowed by additionalProperties")
                keys.append(name)
        members = [(f"{self._key(k)} {self.value(props.get(k, extra), depth + 1)}", k in required) for k in keys]
        tail = head = ""  # after the last member: extra members if allowed
        if extra is not False:
            kv = self.rules.add(self.rules.fresh("kv"), f'{self._terminal("KEY")} ":" {self.value(extra, depth + 1)}')
            tail = self.rules.add(self.rules.fresh("tail"), f'("," {kv})*')
            head = self.rules.add(self.rules.fresh("head"), f'({kv} {tail})?')
        # head: the members from here on when none was written yet; tail: the same after one (a comma first)
        for member, needed in reversed(members):
            if needed:
                new_tail, new_head = f'"," {member} {tail}', f"{member} {tail}"
            else:
                new_tail = f'("," {member})? {tail}'
                new_head = f"({member} {tail} | {head})" if head else f"({member} {tail})?"
            tail = self.rules.add(self.rules.fresh("tail"), new_tail.strip())
            head = self.rules.add(self.rules.fresh("head"), new_head.strip())
        return self.rules.add(self.rules.fresh("obj"), " ".join(p for p in ('"{"', head, '"}"') if p))

    def _array(self, schema: Mapping[str, Any], depth: int) -> str:
        item = self.value(schema.get("items", True), depth + 1)
        low, high = _count(schema, "minItems") or 0, _count(schema, "maxItems")
        if high is not None and high < low:
            raise GrammarError(f"maxItems {high} is below minItems {low}")
        if high == 0:
            return '"[" "]"'
        rest = f'("," {item})' + ("*" if (low <= 1 and high is None) else
                                  f"{{{max(low - 1, 0)},{'' if high is None else high - 1}}}")
        body = f"{item} {rest}"
        return self.rules.add(self.rules.fresh("arr"), f'"[" ({body})? "]"' if low == 0 else f'"[" {body} "]"')

    def _key(self, key: str) -> str:
        if _BARE_KEY.fullmatch(key):
            return _lit(key + ":")
        if not self.quote.special:
            return _lit(f"{QUOTE}{key}{QUOTE}:")
        return f"{self.quote.lark} {_lit(key)} {self.quote.lark} \":\""

    def _const(self, value: Any) -> str:
        if isinstance(value, str):
            if not self.quote.special:
                return _lit(f"{QUOTE}{value}{QUOTE}")
            return f"{self.quote.lark} {_lit(value)} {self.quote.lark}" if value else f"{self.quote.lark} " * 2
        if isinstance(value, Mapping):
            members = [f"{self._key(k)} {self._const(v)}" for k, v in value.items()]
            return '"{" ' + ' "," '.join(members) + ' "}"'
        if isinstance(value, list):
            return '"[" ' + ' "," '.join(self._const(v) for v in value) + ' "]"'
        return _lit(render_gemma_value(value))

    def _ref(self, ref: Any, depth: int) -> str:
        if not isinstance(ref, str) or not ref.startswith("#"):
            raise GrammarError(f"only local $refs (#/...) can be enforced, not {ref!r}")
        if ref not in self._refs:
            target: Any = self._root
            for part in filter(None, ref[1:].split("/")):
                part = part.replace("~1", "/").replace("~0", "~")
                if not isinstance(target, Mapping) or part not in target:
                    raise GrammarError(f"the $ref {ref!r} points at nothing")
                target = target[part]
            self._refs[ref] = name = self.rules.fresh("ref")  # named before its body: recursive schemas work
            self.rules.add(name, self.value(target, depth + 1))
        return self._refs[ref]

    def _terminal(self, kind: str) -> str:
        """Shared rules for plain numbers, keys and any value."""
        if kind not in self.rules.rules:
            if kind == "INT":
                self.rules.add("INT", r"/-?(0|[1-9][0-9]*)/")
            elif kind == "NUM":
                self.rules.add("NUM", r"/-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/")
            elif kind == "KEY":
                self.rules.add("KEY", f"/{_BARE_KEY.pattern}/")
        return kind

    def _any(self) -> str:
        if "anyval" not in self.rules.rules:
            self.rules.add("anyval", "")  # reserved first: its body refers to it
            text = _delimited(self.rules, self.quote, self.quote)
            key, num = self._terminal("KEY"), self._terminal("NUM")
            self.rules.add("anykv", f'{key} ":" anyval')
            self.rules.add("anyval", f'{text} | {num} | "true" | "false" | "null" | "{{" (anykv ("," anykv)*)? "}}"'
                                     f' | "[" (anyval ("," anyval)*)? "]"')
        return "anyval"


def _json_text(text: str) -> str:
    """Text as the inside of a JSON string; DEL escaped too, as strict JSON grammars (llguidance's) want."""
    return json.dumps(text, ensure_ascii=False)[1:-1].replace("\x7f", "\\u007f")


_JSON_NUMBER = re.compile(r"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?")
_BARE_WORDS = {"true": "true", "false": "false", "null": "null", "True": "true", "False": "false", "None": "null"}


class _GemmaCallReader(_Reader):
    """Gemma 4 calls after `<|tool_call>`: `call:NAME{...}<tool_call|>`, the arguments translated to JSON as they
    arrive (strings streamed, bare words once whole), then an optional `<|tool_response>` is swallowed."""

    def __init__(self) -> None:
        self.state = "call"  # call | name | args | close | response
        self.name = ""
        self.stack: list[list[str]] = []  # per open container: [kind "obj" | "arr", expecting]
        self.in_string = False
        self.key: str | None = None  # an object key read, waiting for its colon
        self.word = ""  # a bare word being read

    def feed(self, text: str, final: bool) -> tuple[int, list[tuple[str, ...]], bool]:
        events: list[tuple[str, ...]] = []
        i = 0
        while i < len(text) or (final and self.state in ("args",) and self.word):
            if self.state == "call":
                rest = text[i:].lstrip()
                i = len(text) - len(rest)
                if rest.startswith("call:"):
                    self.state, i = "name", i + len("call:")
                elif not ("call:".startswith(rest) and not final):
                    return i, events, True  # not a call
                else:
                    break
            elif self.state == "name":
                brace = text.find("{", i)
                if brace < 0:
                    self.name += text[i:]
                    i = len(text)
                    break
                self.name = (self.name + text[i:brace]).strip()
                events.append(("name", self.name))
                self.state, i = "args", brace
            elif self.state == "args":
                out: list[str] = []
                i = self._args(text, i, final, out)
                if out:
                    events.append(("args", "".join(out)))
                if self.state == "args":
                    break
            else:  # close, then response: the closing piece and what the model writes before the tool's answer
                marker = "<tool_call|>" if self.state == "close" else "<|tool_response>"
                rest = text[i:].lstrip()
                skipped = len(text) - i - len(rest)
                if rest.startswith(marker):
                    i += skipped + len(marker)
                    if self.state == "response":
                        return i, events, True
                    self.state = "response"
                    events.append(("end",))
                elif marker.startswith(rest) and not final:
                    break
                else:
                    if self.state == "close":
                        events.append(("end",))
                    return i, events, True
        if final:
            if self.state in ("args", "close"):
                events.append(("end",))
            return len(text), events, True
        return i, events, False

    def _args(self, text: str, i: int, final: bool, out: list[str]) -> int:
        """Translate Gemma's syntax from text[i] into JSON (appended to out); return where it stopped."""
        while i < len(text) or (final and self.word):
            if self.in_string:
                end = text.find(QUOTE, i)
                stop = end if end >= 0 else len(text) - (0 if final else _prefix_hold(text[i:], QUOTE))
                out.append(_json_text(text[i:stop]))
                if end < 0:
                    return stop
                out.append('"')
                self.in_string, i = False, end + len(QUOTE)
                self._value_written()
                continue
            top = self.stack[-1] if self.stack else None
            if self.word or (i < len(text) and text[i] not in ",:{}[]" and not text[i].isspace()
                             and not QUOTE.startswith(text[i:i + len(QUOTE)])):
                j = i
                while j < len(text) and text[j] not in ",:{}[]" and not text[j].isspace() \
                        and not text.startswith(QUOTE, j):
                    j += 1
                self.word += text[i:j]
                if j == len(text) and not final:
                    return j
                word, self.word, i = self.word, "", j
                if top is not None and top[1] == "key":
                    self.key, top[1] = word, "colon"
                else:
                    out.append(_BARE_WORDS.get(word) or (word if _JSON_NUMBER.fullmatch(word) else json.dumps(word)))
                    self._value_written()
                continue
            if i >= len(text):
                return i
            c = text[i]
            if c.isspace():
                i += 1
            elif text.startswith(QUOTE, i):
                if top is not None and top[1] == "key":  # a quoted key: read it whole
                    end = text.find(QUOTE, i + len(QUOTE))
                    if end < 0:
                        return i if not final else len(text)
                    self.key, top[1] = text[i + len(QUOTE):end], "colon"
                    i = end + len(QUOTE)
                else:
                    out.append('"')
                    self.in_string, i = True, i + len(QUOTE)
            elif QUOTE.startswith(text[i:]) and not final:
                return i  # perhaps the start of a quote
            elif c == ":" and top is not None and top[1] == "colon":
                out.append(json.dumps(self.key, ensure_ascii=False) + ": ")
                top[1], i = "value", i + 1
            elif c in "{[":
                self._key_without_value(top, out)
                out.append(c)
                self.stack.append(["obj", "key"] if c == "{" else ["arr", "value"])
                i += 1
            elif c in "}]":
                self._key_without_value(top, out)
                out.append(c)
                self.stack.pop() if self.stack else None
                i += 1
                if not self.stack:
                    self.state = "close"
                    return i
                self._value_written()
            elif c == ",":
                self._key_without_value(top, out)
                out.append(", ")
                if top is not None:
                    top[1] = "key" if top[0] == "obj" else "value"
                i += 1
            else:  # a colon out of place
                i += 1
        return i

    def _value_written(self) -> None:
        if self.stack:
            self.stack[-1][1] = "next"

    def _key_without_value(self, top: list[str] | None, out: list[str]) -> None:
        """A key that got no colon and value (not Gemma's syntax): it becomes a null member."""
        if top is not None and top[1] == "colon":
            out.append(json.dumps(self.key, ensure_ascii=False) + ": null")
            top[1] = "next"
