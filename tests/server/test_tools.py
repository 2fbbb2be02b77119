"""Tool calling on the real model through the official openai SDK: tool_choice required / named / none / auto,
parallel_tool_calls, the tool's result sent back for a reply (an agent loop), streamed and not.

The shipped Gemma 3 270M is a base model with no tool tokens: its format is Google's documented prompt format for
Gemma 3 (models/text/tool_calls/), and only constrained decoding makes its calls valid, which is what these
tests check: names among the tools, arguments that parse and match the function's parameters.
"""

from __future__ import annotations

import json
from typing import Any

import openai
import pytest

MODEL = "gemma-3-270m"
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "unit": {"enum": ["celsius", "fahrenheit"]}},
        "required": ["city", "unit"], "additionalProperties": False}}}
TIME = {"type": "function", "function": {
    "name": "get_time", "description": "The time in a time zone.",
    "parameters": {"type": "object", "properties": {"zone": {"type": "string", "maxLength": 12}},
                   "required": ["zone"], "additionalProperties": False}}}
TOOLS = [WEATHER, TIME]
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


def _check_call(call: Any) -> dict[str, Any]:
    """A call names a tool and its arguments match that tool's parameters."""
    assert call.type == "function" and call.id
    arguments = json.loads(call.function.arguments)
    if call.function.name == "get_weather":
        assert set(arguments) == {"city", "unit"} and arguments["unit"] in ("celsius", "fahrenheit")
        assert isinstance(arguments["city"], str) and len(arguments["city"]) <= 20
    else:
        assert call.function.name == "get_time" and set(arguments) == {"zone"}
    return arguments


def test_required_gives_valid_calls_then_the_result_gets_a_reply(real_client: openai.OpenAI) -> None:
    first = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
                                                temperature=0, max_tokens=120)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls" and choice.message.tool_calls, choice
    for call in choice.message.tool_calls:
        _check_call(call)
    # the agent loop: the assistant's calls and the tool's results go back; the model answers (no tools forced)
    history = [*ASK, choice.message.model_dump(exclude_none=True)]
    history += [{"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temperature": 18})}
                for call in choice.message.tool_calls]
    second = real_client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, tool_choice="none",  # type: ignore[arg-type]
                                                 temperature=0, max_tokens=12)
    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].finish_reason in ("stop", "length")


def test_named_function_and_no_parallel_calls(real_client: openai.OpenAI) -> None:
    named = real_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, temperature=0.9, seed=5, n=3, max_tokens=120,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    for choice in named.choices:
        assert [c.function.name for c in choice.message.tool_calls or []] == ["get_time"], choice
        _check_call(choice.message.tool_calls[0])  # type: ignore[index]
    single = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
                                                 parallel_tool_calls=False, temperature=1.0, seed=7, n=3,
                                                 max_tokens=120)
    for choice in single.choices:
        assert len(choice.message.tool_calls or []) == 1, choice


def test_streamed_calls_assemble_in_the_sdk(real_client: openai.OpenAI) -> None:
    """The SDK's stream helper assembles tool calls from the deltas (index, id and name first, then arguments)."""
    whole = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
                                                temperature=0, max_tokens=120)
    with real_client.chat.completions.stream(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
                                             temperature=0, max_tokens=120) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    streamed = final.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in streamed] == [
        (c.function.name, c.function.arguments) for c in whole.choices[0].message.tool_calls or []]
    assert final.choices[0].finish_reason == "tool_calls"


def test_auto_and_none(real_client: openai.OpenAI) -> None:
    """auto: text or valid calls, whichever the model writes; none: no calls at all."""
    auto = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, temperature=1.0, seed=3,  # type: ignore[arg-type]
                                               n=4, max_tokens=40)
    for choice in auto.choices:
        for call in choice.message.tool_calls or []:
            _check_call(call)
        assert (choice.finish_reason == "tool_calls") == bool(choice.message.tool_calls) or \
            choice.finish_reason == "length"
    none = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none",  # type: ignore[arg-type]
                                               temperature=0, max_tokens=8)
    assert none.choices[0].message.tool_calls is None


@pytest.mark.parametrize(("extra", "param"), [
    ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "tool_choice"),
    ({"tools": None, "tool_choice": "required"}, "tool_choice"),
    ({"response_format": {"type": "json_object"}}, "response_format"),
    ({"tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {
        "x": {"type": "string", "pattern": "(a"}}}}}]}, "tools"),
])
def test_tool_errors_are_400_naming_the_parameter(real_client: openai.OpenAI, extra: dict[str, Any],
                                                  param: str) -> None:
    body = {"model": MODEL, "messages": ASK, "tools": TOOLS, "tool_choice": "required", "max_tokens": 8, **extra}
    body = {k: v for k, v in body.items() if v is not None}
    with pytest.raises(openai.BadRequestError) as raised:
        real_client.post("/chat/completions", body=body, cast_to=object)
    assert raised.value.body["param"] == param, raised.value.body  # type: ignore[index]
