"""Tool calling on the real model through the official openai SDK: tool_choice required / named / none / auto,
parallel_tool_calls, the tool's result sent back for a reply (an agent loop), streamed and not.

The shipped Gemma 3 270M is a base model with no tool tokens: its format is Google's documented prompt format for
Gemma 3 (models/text/tool_calls/), and only constrained decoding makes its calls valid, which is what these tests
check: names among the tools, arguments that parse and match the function's parameters. Replies are kept to one
call where the test allows (parallel_tool_calls false: the grammar ends after it), since a decode step takes a good
part of a second on lavapipe.
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


@pytest.fixture(scope="module")
def required_call(real_client: openai.OpenAI) -> Any:
    """One greedy reply under tool_choice required, one call (parallel_tool_calls false)."""
    return real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
                                               parallel_tool_calls=False, temperature=0, max_tokens=80)


def test_required_gives_a_valid_call_then_the_result_gets_a_reply(real_client: openai.OpenAI,
                                                                  required_call: Any) -> None:
    choice = required_call.choices[0]
    assert choice.finish_reason == "tool_calls" and len(choice.message.tool_calls or []) == 1, choice
    assert choice.message.content is None
    _check_call(choice.message.tool_calls[0])
    # the agent loop: the assistant's call and the tool's result go back, and the model answers
    history = [*ASK, choice.message.model_dump(exclude_none=True),
               {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id,
                "content": json.dumps({"temperature": 18})}]
    second = real_client.chat.completions.create(model=MODEL, messages=history, tools=TOOLS, tool_choice="none",  # type: ignore[arg-type]
                                                 temperature=0, max_tokens=6)
    assert second.choices[0].message.tool_calls is None
    assert second.choices[0].finish_reason in ("stop", "length")


def test_streamed_calls_assemble_in_the_sdk(real_client: openai.OpenAI, required_call: Any) -> None:
    """The SDK's stream helper assembles tool calls from the deltas (index, id and name first, then arguments)."""
    with real_client.chat.completions.stream(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
                                             parallel_tool_calls=False, temperature=0, max_tokens=80) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    streamed = final.choices[0].message.tool_calls or []
    assert [(c.function.name, c.function.arguments) for c in streamed] == [
        (c.function.name, c.function.arguments) for c in required_call.choices[0].message.tool_calls or []]
    assert final.choices[0].finish_reason == "tool_calls"


@pytest.mark.slow
def test_named_function_and_parallel_calls(real_client: openai.OpenAI) -> None:
    named = real_client.chat.completions.create(
        model=MODEL, messages=ASK, tools=TOOLS, temperature=0.9, seed=5, n=3, max_tokens=60,  # type: ignore[arg-type]
        tool_choice={"type": "function", "function": {"name": "get_time"}})
    for choice in named.choices:  # exactly one call of the named function, then the reply ends
        assert choice.finish_reason == "tool_calls", choice
        assert [c.function.name for c in choice.message.tool_calls or []] == ["get_time"], choice
        _check_call(choice.message.tool_calls[0])  # type: ignore[index]
    parallel = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="required",  # type: ignore[arg-type]
                                                   temperature=1.0, seed=7, n=2, max_tokens=50)
    for choice in parallel.choices:  # one call or more; every whole one is valid (one cut by max_tokens is not)
        calls = choice.message.tool_calls or []
        assert choice.finish_reason in ("tool_calls", "length") and calls, choice
        for call in calls if choice.finish_reason == "tool_calls" else calls[:-1]:
            _check_call(call)


def test_auto_and_none(real_client: openai.OpenAI) -> None:
    """auto: text or valid calls, whichever the model writes; none: no calls at all."""
    auto = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, temperature=1.0, seed=3,  # type: ignore[arg-type]
                                               n=2, max_tokens=24)
    for choice in auto.choices:
        calls = choice.message.tool_calls or []
        for call in calls if choice.finish_reason == "tool_calls" else calls[:-1]:
            _check_call(call)
        assert choice.finish_reason in ("stop", "length", "tool_calls")
    none = real_client.chat.completions.create(model=MODEL, messages=ASK, tools=TOOLS, tool_choice="none",  # type: ignore[arg-type]
                                               temperature=0, max_tokens=4)
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
