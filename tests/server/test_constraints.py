"""server/services/constraints.py: which grammar a request's parameters ask for, and the thinking channel left free.

Checked token by token with llguidance on Gemma 4's fixture vocabulary (its thinking markers are tokens there):
with thinking on, anything may be thought and the answer must still be the schema's JSON.
"""

from __future__ import annotations

import pytest

from models.text.grammar import GrammarError, grammar_vocabulary
from server.errors import InvalidRequest
from server.schemas.common import ResponseFormat
from server.services.constraints import json_answer, output_grammar, with_thoughts
from server.text_stream import THINK_TAGS
from tests.models.test_tool_calls import gemma4_tokenizer, walk, walk_spec

SCHEMA = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"], "additionalProperties": False}


@pytest.fixture(scope="module")
def gemma4():
    tokenizer = gemma4_tokenizer()
    return tokenizer, grammar_vocabulary(tokenizer)


def test_thinking_is_free_and_the_answer_constrained(gemma4) -> None:
    tokenizer, vocabulary = gemma4
    thinking = json_answer(SCHEMA, thinks=True)
    assert walk(tokenizer, vocabulary, thinking, '<|channel>thought\nnot {json} at all<channel|>{"a": 1}') == \
        "accepted"
    assert walk(tokenizer, vocabulary, thinking, '{"a": 2}') == "accepted"  # thinking stays optional
    assert walk(tokenizer, vocabulary, thinking, "<|channel>thought\nhm<channel|>not json").startswith("refused")
    plain = json_answer(SCHEMA, thinks=False)
    assert walk(tokenizer, vocabulary, plain, "<|channel>thought\nhm<channel|>").startswith("refused")
    assert walk(tokenizer, vocabulary, plain, '{"a": 3, "b": 4}').startswith("refused")


def test_with_thoughts_keeps_the_grammar_after_the_channel(gemma4) -> None:
    tokenizer, vocabulary = gemma4
    grammar = with_thoughts('start: "yes" | "no"')
    assert walk(tokenizer, vocabulary, grammar, "<|channel>thought\nmaybe<channel|>yes") == "accepted"
    assert walk(tokenizer, vocabulary, grammar, "maybe").startswith("refused")
    with pytest.raises(GrammarError):
        with_thoughts("answer: /x/")


def test_with_thoughts_in_think_tags(gemma4) -> None:
    """Qwen 3's <think> tags are text in the grammar (not control pieces): free thoughts inside, the answer after."""
    tokenizer, vocabulary = gemma4
    grammar = with_thoughts('start: "yes" | "no"', THINK_TAGS)
    assert walk(tokenizer, vocabulary, grammar, "<think>\nmaybe\n</think>yes") == "accepted"
    assert walk(tokenizer, vocabulary, grammar, "no") == "accepted"
    assert walk(tokenizer, vocabulary, grammar, "maybe").startswith("refused")


@pytest.mark.parametrize("source", ['start: "yes" | "no"', 'root ::= "yes" | "no"'], ids=["lark", "gbnf"])
def test_the_grammar_extension_leaves_the_thinking_channel_free(gemma4, source: str) -> None:
    tokenizer, vocabulary = gemma4
    thinking = output_grammar(None, None, source, thinks=True).source
    assert walk_spec(tokenizer, vocabulary, thinking, "<|channel>thought\nmaybe<channel|>no") == "accepted"
    assert walk_spec(tokenizer, vocabulary, thinking, "yes") == "accepted"
    assert walk_spec(tokenizer, vocabulary, thinking, "<|channel>thought\nhm<channel|>perhaps").startswith("refused")
    plain = output_grammar(None, None, source, thinks=False).source
    assert walk_spec(tokenizer, vocabulary, plain, "<|channel>thought\nmaybe<channel|>no").startswith("refused")


def test_one_constraint_per_request() -> None:
    assert output_grammar(None, None, None, thinks=False) is None
    assert output_grammar(ResponseFormat(type="text"), None, None, thinks=False) is None
    assert output_grammar(ResponseFormat(type="json_object"), None, None, thinks=False).param == "response_format"
    assert output_grammar(None, None, 'root ::= "a"', thinks=False).param == "grammar"
    with pytest.raises(InvalidRequest) as raised:
        output_grammar(ResponseFormat(type="json_object"), SCHEMA, None, thinks=False)
    assert raised.value.param == "json_schema"
    with pytest.raises(InvalidRequest) as raised:
        output_grammar(None, None, "root ::= [unterminated", thinks=False)
    assert raised.value.param == "grammar"
