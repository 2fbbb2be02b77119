"""Tool calls: how each model family writes them, the grammar that keeps them valid, and the parser that reads
them back as OpenAI tool calls, whole or streamed.

    fmt = format_for(tokenizer, "gemma4", template_source)
    grammar = fmt.grammar(tools, "required", parallel=True)   # Lark for models.text.grammar.lark
    content, calls = fmt.parse(text, tools)                   # calls: [ParsedCall(name, arguments JSON)]
    stream = fmt.stream(tools); stream.push(piece) -> [Delta]; stream.flush() -> [Delta]

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
- lfm2 (Pythonic): `<|tool_call_start|>[NAME(key=value, ...), ...]<|tool_call_end|>` (tool_calls/pythonic.py).
- qwen3_coder (Qwen3-Coder's XML, which Qwen3.5's template asks for; tool_calls/xml_calls.py):
  `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>\\n</function>\\n</tool_call>`, a string
  value as raw text, any other as JSON, typed by the parameter's schema (so its parser takes the tools:
  parse(text, tools), stream(tools)); parallel blocks one per line. Found by its template (`<function=` and
  `<parameter=`) ahead of DETECT's pieces, its `<tool_call>` being the qwen format's too.

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

from collections.abc import Callable
from functools import partial

from models.text.tool_calls.base import (
    ContentDelta,
    Delta,
    Marker,
    ParsedCall,
    TokenizerLike,
    ToolCallDelta,
    ToolCallFormat,
    ToolCallStream,
    _single_token,
)
from models.text.tool_calls.gemma4 import QUOTE, Gemma4Format, render_gemma_value
from models.text.tool_calls.json_calls import JsonCallFormat
from models.text.tool_calls.pythonic import PythonicFormat
from models.text.tool_calls.xml_calls import XmlCallFormat

__all__ = [
    "DETECT", "FORMATS", "QUOTE", "ContentDelta", "Delta", "Gemma4Format", "JsonCallFormat", "Marker",
    "ParsedCall", "PythonicFormat", "TokenizerLike", "ToolCallDelta", "ToolCallFormat", "ToolCallStream", "format_for",
    "XmlCallFormat", "render_gemma_value",
]

# -- the format table ----------------------------------------------------------------------------------------------

def format_for(tokenizer: TokenizerLike | None, architecture: str = "", template_source: str | None = None,
               ) -> ToolCallFormat:
    """The tool-call format of a model: qwen3_coder where its template writes `<function=` and `<parameter=` (or it
    is a Qwen3.5); else by the first of DETECT's pieces its vocabulary has as one token (gemma4 for `<|tool_call>`,
    qwen for `<tool_call>`, mistral for `[TOOL_CALLS]`, llama3 for `<|python_tag|>` or Llama 3's header pieces),
    then by its template (a Hermes-style one that writes `<tool_call>`) or architecture (gemma4, qwen*); else Gemma
    3's prompt format."""
    source = template_source or ""
    if ("<function=" in source and "<parameter=" in source) or (not source and architecture == "qwen35"):
        return FORMATS["qwen3_coder"](tokenizer)
    for piece, name in DETECT:
        if tokenizer is not None and _single_token(tokenizer, piece) is not None:
            return FORMATS[name](tokenizer)
    if architecture == "gemma4":
        return FORMATS["gemma4"](tokenizer)
    if "<tool_call>" in source or architecture.startswith("qwen"):
        return FORMATS["qwen"](tokenizer)
    return FORMATS["gemma3"](tokenizer)


# -- the table: formats by name, and the pieces that tell them apart (other families add theirs here) -----------------

FORMATS: dict[str, Callable[[TokenizerLike | None], ToolCallFormat]] = {
    "gemma4": Gemma4Format,
    "gemma3": partial(JsonCallFormat, "gemma3"),
    "qwen": partial(JsonCallFormat, "qwen"),
    "llama3": partial(JsonCallFormat, "llama3"),
    "mistral": partial(JsonCallFormat, "mistral"),
    "lfm2": PythonicFormat,
    "qwen3_coder": XmlCallFormat,
}
DETECT: list[tuple[str, str]] = [  # (a piece the vocabulary has as one token, the format), first match wins
    ("<|tool_call>", "gemma4"), ("<tool_call>", "qwen"), ("[TOOL_CALLS]", "mistral"), ("<|python_tag|>", "llama3"),
    ("<|start_header_id|>", "llama3"), ("<|tool_call_start|>", "lfm2"),
]
