"""What a request asks its reply to follow (response_format, the json_schema and grammar extensions), as the
grammar of constrained decoding (models/text/grammar.py), checked before the request is queued.

A grammar runs on the preparation threads (compiling one can take milliseconds; indexing a model's vocabulary
the first time, a second or two), and one that cannot be enforced is the client's 400 naming its parameter,
never a reply that only looks constrained.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from models.text import grammar
from models.text.grammar import GrammarError, TokenConstraint
from server.errors import InvalidRequest
from server.protocols import TextTokenizer
from server.schemas.common import ResponseFormat
from server.text_stream import GEMMA4_CHANNEL, ThinkingMarkers


@dataclass(frozen=True)
class OutputGrammar:
    """A grammar source in llguidance's terms and the request parameter it came from (for errors)."""

    source: str
    param: str


def thought_rule(markers: ThinkingMarkers) -> str:
    """The Lark rules of the thoughts: free text between the markers. Control-piece markers are named as tokens,
    which free text cannot hold; text markers end the thoughts lazily (llguidance's stop), as a greedy text
    lexeme would run on over the closing tag."""
    if markers.special:
        return f"thought: {markers.open} /(.|\\n)*/ {markers.close}\n"
    return f'thought: "{markers.open}" thought_text\nthought_text[stop="{markers.close}"]: /(.|\\n)*/\n'


def json_answer(schema: Mapping[str, Any], thinks: bool, markers: ThinkingMarkers = GEMMA4_CHANNEL) -> str:
    """The Lark grammar of a reply that is JSON matching schema; a model that thinks first may think freely in
    its thinking channel before the answer (the constraint holds for the answer, not the thoughts)."""
    source = "start: answer\nanswer: " + grammar.lark_json(schema) + "\n"
    return with_thoughts(source, markers) if thinks else source


def with_thoughts(source: str, markers: ThinkingMarkers = GEMMA4_CHANNEL) -> str:
    """A Lark grammar (its rule `start`) preceded by an optional thinking channel of free text."""
    options = re.match(r"\s*%llguidance\s*\{[^\n]*\}\s*\n", source)  # a directive that must stay first
    head, body = (source[:options.end()], source[options.end():]) if options else ("", source)
    renamed = re.sub(r"^start(\s*):", r"answer_start\1:", body, count=1, flags=re.M)
    if renamed == body:
        raise GrammarError("the grammar has no `start` rule")
    return head + "start: thought? answer_start\n" + thought_rule(markers) + renamed


def output_grammar(response_format: ResponseFormat | None, json_schema: dict[str, Any] | None, source: str | None,
                   thinks: bool, markers: ThinkingMarkers = GEMMA4_CHANNEL) -> OutputGrammar | None:
    """The grammar a reply must follow, from at most one of response_format (json_object, json_schema), the
    json_schema extension and the grammar extension; None for free text."""
    asked = [name for name, value in (("response_format", response_format if response_format is not None
                                       and response_format.type != "text" else None),
                                      ("json_schema", json_schema), ("grammar", source)) if value is not None]
    if len(asked) > 1:
        raise InvalidRequest(f"{' and '.join(asked)} both constrain the reply; send one of them.", param=asked[1])
    if response_format is not None and response_format.type == "json_object":
        return OutputGrammar(grammar.lark(json_answer({"type": "object"}, thinks, markers)), "response_format")
    if response_format is not None and response_format.type == "json_schema":
        assert response_format.json_schema is not None
        schema = response_format.json_schema.schema_
        return OutputGrammar(grammar.lark(json_answer(schema if schema is not None else {}, thinks, markers)),
                             "response_format.json_schema.schema")
    if json_schema is not None:
        return OutputGrammar(grammar.lark(json_answer(json_schema, thinks, markers)), "json_schema")
    if source is not None:
        try:
            lark_source = grammar.gbnf_to_lark(source) if "::=" in source else source
            compiled = grammar.lark(with_thoughts(lark_source, markers) if thinks else lark_source)
        except GrammarError as error:
            raise InvalidRequest(str(error), param="grammar") from error
        return OutputGrammar(compiled, "grammar")
    return None


def build_constraint(tokenizer: TextTokenizer, wanted: OutputGrammar) -> TokenConstraint:
    """The grammar compiled against the model's vocabulary, ready for a sequence (copy() it per choice)."""
    try:
        vocabulary = grammar.grammar_vocabulary(tokenizer)  # type: ignore[arg-type]
        return TokenConstraint(vocabulary, grammar.compile_grammar(vocabulary, wanted.source))
    except GrammarError as error:
        raise InvalidRequest(f"{wanted.param} cannot be enforced: {error}", param=wanted.param) from error
