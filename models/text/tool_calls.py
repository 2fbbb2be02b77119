"""Tool calls: how each model family writes them, the grammar that keeps them valid, and the parser that reads
them back as OpenAI tool calls, whole or streamed.

    fmt = format_for(tokenizer, "gemma4", template_source)
    grammar = fmt.grammar(tools, "required", parallel=True)   # Lark for models.text.grammar.lark
    content, calls = fmt.parse(text)                          # calls: [ParsedCall(name, arguments JSON)]
    stream = fmt.stream(); stream.push(piece) -> [Delta]; stream.flush() -> [Delta]

The formats (FORMATS, told apart by DETECT):
- gemma4: Gemma 4's own tokens, `<|tool_call>call:NAME{key:<|"|>text<|"|>,n:3,xs:[1,2]}<tool_call|>`, arguments
  in Gemma's syntax (bare keys, strings between `<|"|>` quote pieces, no escapes); parallel calls follow each
  other. After its calls the model writes `<|tool_response>` (where the tool's answer goes): the grammar allows
  it as the last piece and the server should stop there (stop_markers).
- gemma3: Google's documented prompt format for Gemma 3 (no tool tokens): the reply is
  `{"name": NAME, "parameters": {...}}`, parallel calls one object per line, and only at the start of a reply.
- qwen (Hermes style): `<tool_call>\\n{"name": NAME, "arguments": {...}}\\n</tool_call>`, parallel blocks one per line.
- llama3: `{"name": NAME, "parameters": {...}}`, optionally after `<|python_tag|>`; parallel calls joined by "; ".
- mistral: `[TOOL_CALLS][{"name": NAME, "arguments": {...}}, ...]`.

Grammars: "required" is one or more calls and nothing else, a function's name is exactly one call of it, "auto"
is free text in which the call opener (its token or text) starts a call that must then be valid: llguidance's
lazy pattern, the free text being unable to hold the opener. JSON arguments are llguidance's `%json` of the
function's `parameters`; Gemma 4's are translated here from the JSON-schema subset (object, properties, required,
additionalProperties, string with min/maxLength, number and integer with bounds, boolean, null, enum, const,
array items with min/maxItems, anyOf, $ref/$defs); anything else is a GrammarError naming it. Object properties
come in the schema's order, as llguidance's JSON does.

Decoding: the parser reads text in which the format's markers are visible. Gemma 4's loader makes `<|tool_call>`,
`<tool_call|>` and `<|"|>` (and the channel markers) user-defined pieces in every file, which the default decoder
(skip_special=True) prints. `<|tool_response>` ends generation in llama.cpp but not among Hearth's end ids: stop
on stop_markers' ids. A format whose opener is a control piece (`Marker.special`: Mistral's `[TOOL_CALLS]`) needs
a decoder with skip_special=False. Give the parser the answer only: thinking channels are split off before it
(server.text_stream.ReasoningSplitter).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
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


# -- the format table ----------------------------------------------------------------------------------------------

def format_for(tokenizer: TokenizerLike | None, architecture: str = "", template_source: str | None = None,
               ) -> ToolCallFormat:
    """The tool-call format of a model: by the first of DETECT's pieces its vocabulary has as one token (gemma4 for
    `<|tool_call>`, qwen for `<tool_call>`, mistral for `[TOOL_CALLS]`, llama3 for `<|python_tag|>` or Llama 3's
    header pieces), then by its template (a Hermes-style one that writes `<tool_call>`) or architecture (gemma4,
    qwen*); else Gemma 3's prompt format."""
    for piece, name in DETECT:
        if tokenizer is not None and _single_token(tokenizer, piece) is not None:
            return FORMATS[name](tokenizer)
    if architecture == "gemma4":
        return FORMATS["gemma4"](tokenizer)
    if "<tool_call>" in (template_source or "") or architecture.startswith("qwen"):
        return FORMATS["qwen"](tokenizer)
    return FORMATS["gemma3"](tokenizer)


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

    def parse(self, text: str) -> tuple[str | None, list[ParsedCall]]:
        """The reply's content (None when empty) and tool calls; the same as streaming it in any pieces."""
        stream = self.stream()
        return _assemble([*stream.push(text), *stream.flush()])

    def stream(self) -> ToolCallStream:
        """A parser for one reply's text as it is generated."""
        return ToolCallStream(self)

    @abstractmethod
    def render_call(self, name: str, arguments: str | Mapping[str, Any]) -> str:
        """One call as the model writes it (arguments as a JSON text or a mapping)."""

    def render_calls(self, calls: Sequence[tuple[str, str | Mapping[str, Any]]]) -> str:
        """Several calls as the model writes them in one reply."""
        return self._separator.join(self.render_call(name, args) for name, args in calls)

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


# -- JSON formats ----------------------------------------------------------------------------------------------------

_JSON_LAYOUT = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


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
        params = {**_parameters(function), "x-guidance": _JSON_LAYOUT}
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


# -- Gemma 4 ---------------------------------------------------------------------------------------------------------

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


# -- the table: formats by name, and the pieces that tell them apart (other families add theirs here) -----------------

FORMATS: dict[str, Callable[[TokenizerLike | None], ToolCallFormat]] = {
    "gemma4": Gemma4Format,
    "gemma3": partial(JsonCallFormat, "gemma3"),
    "qwen": partial(JsonCallFormat, "qwen"),
    "llama3": partial(JsonCallFormat, "llama3"),
    "mistral": partial(JsonCallFormat, "mistral"),
}
DETECT: list[tuple[str, str]] = [  # (a piece the vocabulary has as one token, the format), first match wins
    ("<|tool_call>", "gemma4"), ("<tool_call>", "qwen"), ("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3"),
    ("<|start_header_id|>", "llama3"),
]


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

    def __init__(self, fmt: ToolCallFormat) -> None:
        self._fmt = fmt
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
        self._reader = self._fmt._reader()
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
