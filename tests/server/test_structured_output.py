"""Structured outputs on the real model: response_format json_object / json_schema, the json_schema and grammar
extensions, through the official openai SDK against the session's server (tests/server/conftest.py).

The shipped model is Gemma 3 270M *base*: it was never taught JSON or chat, which makes it the hardest case for
the guarantee; every reply must still parse and validate, however it samples. Hostile schemas must get a 400
naming the parameter (or be enforced), never a 5xx, and leave the server serving.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel, Field

from tests.server.live_server import SubprocessServer

MODEL = "gemma-3-270m"
MESSAGES = [{"role": "user", "content": "Write an order for two blue widgets as JSON."}]


class Color(str, Enum):
    red = "red"
    green = "green"
    blue = "blue"


# Bounded lengths keep each reply to a few dozen tokens: a decode step of the 270M takes a good part of a second
# on lavapipe, and a base model left free writes strings and lists as long as max_tokens lets it.
Name = Field(max_length=12)


class Item(BaseModel):
    name: str = Name
    quantity: int = Field(ge=1, le=99)
    color: Color


class Customer(BaseModel):
    name: str = Name
    vip: bool


class Order(BaseModel):
    id: int = Field(ge=0, le=9999)
    customer: Customer
    items: list[Item] = Field(min_length=1, max_length=2)
    note: str | None = Field(None, max_length=12)


@pytest.mark.heavy
@pytest.mark.parametrize(("sampling", "n"), [
    ({"temperature": 1.0}, 8), pytest.param({"temperature": 0.8, "top_p": 0.9}, 4, marks=pytest.mark.slow)],
                         ids=["gpu-draw", "cpu-sampler"])
def test_sdk_parse_gives_a_valid_object_for_every_seed(real_client: openai.OpenAI, sampling: dict[str, Any],
                                                       n: int) -> None:
    """n seeds per sampler (choice i samples with seed + i; top_p goes through the CPU sampler), nested models, an
    enum, a list, an optional field: every choice ends by itself and parses into the model."""
    completion = real_client.chat.completions.parse(model=MODEL, messages=MESSAGES, response_format=Order,  # type: ignore[arg-type]
                                                    n=n, seed=11, max_tokens=200, **sampling)
    assert len(completion.choices) == n
    for choice in completion.choices:
        assert choice.finish_reason == "stop", choice
        assert isinstance(choice.message.parsed, Order), choice.message.content


def test_truncated_json_says_length(real_client: openai.OpenAI) -> None:
    completion = real_client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=4, temperature=0,  # type: ignore[arg-type]
        response_format={"type": "json_schema", "json_schema": {"name": "order", "schema": Order.model_json_schema()}})
    assert completion.choices[0].finish_reason == "length"
    assert completion.choices[0].message.content.startswith("{")  # type: ignore[union-attr]


def test_json_object_whole_and_streamed(real_client: openai.OpenAI) -> None:
    """Any JSON object: free enough that the base model may not close it within max_tokens; whatever it writes
    is an object (whole when it stops, a prefix of one when cut), the same streamed."""
    whole = real_client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=40,  # type: ignore[arg-type]
                                                response_format={"type": "json_object"})
    content = whole.choices[0].message.content or ""
    if whole.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(content), dict)
    else:
        assert content.startswith("{")
    stream = real_client.chat.completions.create(model=MODEL, messages=MESSAGES, temperature=0, max_tokens=40,  # type: ignore[arg-type]
                                                 response_format={"type": "json_object"}, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    assert text == whole.choices[0].message.content


def test_completions_json_schema_and_grammars(real_client: openai.OpenAI) -> None:
    """The extensions on /v1/completions: json_schema, a Lark grammar and a GBNF grammar."""
    schema = {"type": "object", "properties": {"capital": {"type": "string", "maxLength": 20}},
              "required": ["capital"], "additionalProperties": False}
    reply = real_client.completions.create(model=MODEL, prompt="The capital of France as JSON:", max_tokens=60,
                                           temperature=0, extra_body={"json_schema": schema})
    assert set(json.loads(reply.choices[0].text)) == {"capital"}
    lark = real_client.completions.create(model=MODEL, prompt="Is Paris in France? Answer:", max_tokens=5, n=4,
                                          seed=1, extra_body={"grammar": 'start: " yes" | " no"'})
    assert {c.text for c in lark.choices} <= {" yes", " no"} and all(c.finish_reason == "stop" for c in lark.choices)
    gbnf = real_client.completions.create(model=MODEL, prompt="Three digits:", max_tokens=8, seed=2,
                                          extra_body={"grammar": 'root ::= " " [0-9] [0-9] [0-9]'})
    assert len(gbnf.choices[0].text) == 4 and gbnf.choices[0].text[1:].isdigit()


def _deep(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}, "required": ["a"]}
    return schema


HOSTILE: list[tuple[str, dict[str, Any]]] = [
    ("unsupported keyword", {"json_schema": {"type": "array", "uniqueItems": True}}),
    ("unknown format", {"json_schema": {"type": "string", "format": "no-such-format"}}),
    ("bad type", {"json_schema": {"type": "frobnicate"}}),
    ("huge enum", {"json_schema": {"enum": [f"value-{i:06d}" for i in range(60_000)]}}),
    ("deep nesting", {"json_schema": _deep(300)}),
    ("recursive", {"json_schema": {"$defs": {"n": {"type": "object", "properties": {
        "children": {"type": "array", "items": {"$ref": "#/$defs/n"}, "maxItems": 2}}, "required": ["children"]}},
        "$ref": "#/$defs/n"}}),
    ("dangling ref", {"json_schema": {"$ref": "#/$defs/missing"}}),
    ("two constraints", {"json_schema": {"type": "object"}, "grammar": 'start: "x"'}),
    ("bad lark", {"grammar": "start: undefined_rule"}),
    ("bad gbnf", {"grammar": "root ::= [unterminated"}),
]


@pytest.mark.parametrize(("case", "extra"), HOSTILE, ids=[case for case, _ in HOSTILE])
def test_hostile_schemas_are_refused_or_enforced(real_api: SubprocessServer, case: str, extra: dict[str, Any]) -> None:
    body = {"model": MODEL, "messages": MESSAGES, "max_tokens": 12, "temperature": 0, **extra}
    reply = httpx.post(f"{real_api.url}/v1/chat/completions", json=body, timeout=600)
    assert reply.status_code in (200, 400), reply.text
    if reply.status_code == 400:
        error = reply.json()["error"]
        assert error["type"] == "invalid_request_error" and error["param"] in ("json_schema", "grammar"), error
    else:  # enforced: what came out is a prefix of a valid reply (max_tokens may cut it)
        assert reply.json()["choices"][0]["finish_reason"] in ("stop", "length")
    assert httpx.get(f"{real_api.url}/ready", timeout=30).status_code == 200


def test_response_format_schema_errors_name_the_schema(real_client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        real_client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=4,  # type: ignore[arg-type]
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": {"not": {}}}})
    error = raised.value.body
    assert error["param"] == "response_format.json_schema.schema" and "not" in error["message"], error  # type: ignore[index]
