"""The Responses API (POST /v1/responses, GET and DELETE /v1/responses/{id}) through the official openai SDK.

Most tests run on the fake model (tests/server/fake_model.py: it says SCRIPT, one byte a token), so the chat
path's own prompt token count tells whether items, instructions and previous responses reached the template as
the same chat messages would. Tool calls and text.format run on a fake whose script is a call (or JSON) and whose
tokenizer marks its special pieces, so the grammar of constrained decoding can be built for it. The last tests
use the shipped Gemma 3 270M (the session's real server), a few tokens each.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from pydantic import BaseModel

from models.text.chat_template import GEMMA4_TEMPLATE
from server.text_stream import GEMMA4_CHANNEL
from tests.server import fake_model
from tests.server.all_fakes import fake_app
from tests.server.fake_model import BYTE0, SCRIPT, FakeTokenizer, fake_loader
from tests.server.live_server import ThreadServer

MODEL = "gemma-3-270m"
CALL_SCRIPT = '{"name": "get_weather", "parameters": {"city": "Paris"}}'
WEATHER = {"type": "function", "name": "get_weather", "description": "The weather in a city now.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"],
                          "additionalProperties": False}, "strict": True}


def sdk(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=60)


def chat_prompt_tokens(client: openai.OpenAI, messages: list[dict[str, Any]], **extra: Any) -> int:
    """What the chat path counts for these messages: a Responses request that means them must count the same."""
    reply = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=1, **extra)  # type: ignore
    assert reply.usage is not None
    return reply.usage.prompt_tokens


def sse(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(event name, data) pairs of a Server-Sent Events body; every data line must follow its event line."""
    events, name = [], None
    for line in response.iter_lines():
        if line.startswith("event: "):
            name = line[7:]
        elif line.startswith("data: "):
            assert name is not None, line
            events.append((name, json.loads(line[6:])))
            name = None
    return events


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    with ThreadServer(fake_app(**{"limits.responses_store_size": 3})) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ThreadServer) -> openai.OpenAI:
    return sdk(server)


# -- text and items ------------------------------------------------------------------------------------------------

def test_text_input_and_instructions(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Hi", instructions="Be brief.", max_output_tokens=5,
                                       temperature=0, metadata={"k": "v"}, user="tester")
    assert response.id.startswith("resp_") and response.object == "response"
    assert response.output_text == SCRIPT[:5]
    assert response.status == "incomplete" and response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    [message] = response.output
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.content[0].type == "output_text" and message.content[0].annotations == []
    assert (response.instructions, response.max_output_tokens, response.temperature) == ("Be brief.", 5, 0)
    assert (response.metadata, response.user, response.tool_choice, response.tools) == ({"k": "v"}, "tester",
                                                                                          "auto", [])
    usage = response.usage
    assert usage is not None and usage.output_tokens == 5
    assert usage.total_tokens == usage.input_tokens + 5 and usage.input_tokens_details.cached_tokens == 0
    assert usage.input_tokens == chat_prompt_tokens(client, [{"role": "system", "content": "Be brief."},
                                                             {"role": "user", "content": "Hi"}])


def test_fields_agents_send_are_accepted(client: openai.OpenAI) -> None:
    response = client.responses.create(model=MODEL, input="Hi", max_output_tokens=2, prompt_cache_key="session-1",
                                       stream_options={"include_obfuscation": False})
    assert response.output_text == SCRIPT[:2]


def test_item_input_every_role_and_part(client: openai.OpenAI) -> None:
    items = [
        {"role": "developer", "content": "Answer in one word."},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "What is "},
                                                         {"type": "input_text", "text": "2+2?"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Four.",
                                                              "annotations": []}]},
        {"role": "user", "content": "And 3+3?"},
    ]
    response = client.responses.create(model=MODEL, input=items, max_output_tokens=2)  # type: ignore[arg-type]
    assert response.output_text == SCRIPT[:2]
    assert response.usage is not None and response.usage.input_tokens == chat_prompt_tokens(client, [
        {"role": "developer", "content": "Answer in one word."}, {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "Four."}, {"role": "user", "content": "And 3+3?"}])


def test_function_call_items_become_the_chat_paths_tool_messages(client: openai.OpenAI) -> None:
    items = [{"role": "user", "content": "Weather in Paris?"},
             {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Paris"}'},
             {"type": "function_call_output", "call_id": "call_1", "output": '{"temperature": 18}'}]
    response = client.responses.create(model=MODEL, input=items, max_output_tokens=2)  # type: ignore[arg-type]
    assert response.usage is not None and response.usage.input_tokens == chat_prompt_tokens(client, [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 18}'}])


# -- streaming -----------------------------------------------------------------------------------------------------

TEXT_OPENING = ["response.created", "response.in_progress", "response.output_item.added",
                "response.content_part.added"]
TEXT_CLOSING = ["response.output_text.done", "response.content_part.done", "response.output_item.done",
                "response.incomplete"]


def test_stream_event_names_order_and_sequence_numbers(server: ThreadServer) -> None:
    body = {"model": MODEL, "input": "Hi", "max_output_tokens": 4, "stream": True}
    with httpx.stream("POST", f"{server.url}/v1/responses", json=body, timeout=60) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse(response)  # no `data: [DONE]` (it is not JSON): the last event ends the stream
    names = [name for name, _ in events]
    # a delta a token, or fewer where tokens waited together (server/jobs.py merges a choice's waiting deltas)
    n_deltas = len(events) - len(TEXT_OPENING) - len(TEXT_CLOSING)
    assert names == TEXT_OPENING + ["response.output_text.delta"] * n_deltas + TEXT_CLOSING and 1 <= n_deltas <= 4
    assert all(name == data["type"] for name, data in events)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    created, final = events[0][1]["response"], events[-1][1]["response"]
    assert created["status"] == "in_progress" and created["output"] == [] and created["id"] == final["id"]
    deltas = [data["delta"] for name, data in events if name == "response.output_text.delta"]
    assert "".join(deltas) == SCRIPT[:4] == events[-4][1]["text"]
    item = events[-2][1]["item"]
    assert item["status"] == "incomplete" and item["content"][0]["text"] == SCRIPT[:4]
    assert final["status"] == "incomplete" and final["incomplete_details"] == {"reason": "max_output_tokens"}
    assert final["output"] == [item] and final["usage"]["output_tokens"] == 4


def test_sdk_stream_assembles_the_final_response_from_deltas_as_they_are_generated() -> None:
    """The model stops on its own after 6 tokens (response.completed); from its third step on it waits until the
    client has seen a delta, which a stream that only flushes at the end would never show it."""
    seen = threading.Event()
    waited: list[bool] = []

    def hold_until_seen(step: int) -> None:
        if step >= 3 and not waited:
            waited.append(seen.wait(30))

    with ThreadServer(_app_with(fake_loader(eos_after=6, on_step=hold_until_seen))) as srv:
        with sdk(srv).responses.stream(model=MODEL, input="Hi", temperature=0) as stream:
            deltas = []
            for event in stream:
                if event.type == "response.output_text.delta":
                    deltas.append(event.delta)
                    seen.set()
            final = stream.get_final_response()
    assert waited == [True]
    assert final.status == "completed" and final.output_text == "".join(deltas) == SCRIPT[:6]
    assert final.usage is not None and final.usage.output_tokens == 6


def test_failure_mid_stream_is_response_failed() -> None:
    with ThreadServer(_app_with(fake_loader(fail_after=2))) as srv:
        body = {"model": MODEL, "input": "Hi", "max_output_tokens": 8, "stream": True}
        with httpx.stream("POST", f"{srv.url}/v1/responses", json=body, timeout=60) as response:
            events = sse(response)
        assert response.status_code == 200
        name, data = events[-1]
        assert name == "response.failed" and data["response"]["status"] == "failed"
        assert data["response"]["error"]["code"] == "server_error"
        with pytest.raises(openai.InternalServerError):
            sdk(srv).responses.create(model=MODEL, input="Hi", max_output_tokens=8)


# -- conversation state --------------------------------------------------------------------------------------------

def test_previous_response_id_continues_the_conversation(client: openai.OpenAI, server: ThreadServer) -> None:
    first = client.responses.create(model=MODEL, input="Hi", instructions="Be brief.", max_output_tokens=3)
    second = client.responses.create(model=MODEL, input="More", previous_response_id=first.id, max_output_tokens=3)
    assert second.previous_response_id == first.id and second.instructions is None
    # the first turn's instructions are not carried over, as OpenAI does
    assert second.usage is not None and second.usage.input_tokens == chat_prompt_tokens(client, [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": first.output_text},
        {"role": "user", "content": "More"}])
    kept = client.responses.retrieve(second.id)
    assert kept.output_text == second.output_text and kept.id == second.id

    deleted = httpx.delete(f"{server.url}/v1/responses/{second.id}")
    assert deleted.json() == {"id": second.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(second.id)
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="x", previous_response_id=second.id, max_output_tokens=1)
    assert raised.value.body["code"] == "previous_response_not_found"  # type: ignore[index]
    assert raised.value.body["param"] == "previous_response_id"  # type: ignore[index]


def test_store_false_is_not_kept_and_the_oldest_is_dropped(client: openai.OpenAI) -> None:
    unstored = client.responses.create(model=MODEL, input="Hi", max_output_tokens=1, store=False)
    assert unstored.store is False
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(unstored.id)
    ids = [client.responses.create(model=MODEL, input="Hi", max_output_tokens=1).id for _ in range(4)]
    client.responses.retrieve(ids[1])  # used: now the most recent, so ids[2] is the oldest
    client.responses.create(model=MODEL, input="Hi", max_output_tokens=1)  # the store holds 3
    with pytest.raises(openai.BadRequestError) as raised:
        client.responses.create(model=MODEL, input="x", previous_response_id=ids[2], max_output_tokens=1)
    assert "not found" in raised.value.message and "responses_store_size" in raised.value.message
    assert client.responses.retrieve(ids[1]).id == ids[1] and client.responses.retrieve(ids[3]).id == ids[3]


def test_streamed_response_is_kept(client: openai.OpenAI) -> None:
    with client.responses.stream(model=MODEL, input="Hi", max_output_tokens=2) as stream:
        created = next(e for e in stream if e.type == "response.created").response.id
        stream.until_done()
    assert client.responses.retrieve(created).output_text == SCRIPT[:2]


# -- errors --------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "status", "param"), [
    ({"tools": [{"type": "web_search"}]}, 400, "tools[0]"),
    ({"tools": [{"type": "file_search", "vector_store_ids": ["vs"]}]}, 400, "tools[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "https://x/y.png"}]}]}, 400,
     "input"),  # the fake model takes text only
    ({"input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]}, 400,
     "input[0].content[0]"),
    ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]}, 400,
     "input[0].content[0]"),
    ({"input": [{"type": "web_search_call", "id": "ws_1", "status": "completed"}]}, 400, "input[0]"),
    ({"input": [{"type": "function_call_output", "output": "4"}]}, 400, "input[0].call_id"),
    ({"input": []}, 400, "input"),
    ({"background": True}, 400, "background"),
    ({"include": ["reasoning.encrypted_content"]}, 400, "include"),
    ({"truncation": "auto"}, 400, "truncation"),
    ({"frequency_penalty": 1}, 400, "frequency_penalty"),
    ({"tool_choice": "required"}, 400, "tool_choice"),
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, 400, "tool_choice"),
    ({"tool_choice": {"type": "web_search_preview"}}, 400, "tool_choice"),
    ({"text": {"format": {"type": "json_schema", "name": "x"}}}, 400, "text.format"),
    ({"max_output_tokens": 0}, 400, "max_output_tokens"),
    ({"max_output_tokens": 100_000}, 400, "input"),
    ({"model": "no-such-model"}, 404, "model"),
    ({"previous_response_id": "resp_unknown"}, 400, "previous_response_id"),
])
def test_errors_name_the_parameter(server: ThreadServer, extra: dict[str, Any], status: int, param: str) -> None:
    response = httpx.post(f"{server.url}/v1/responses", json={"model": MODEL, "input": "Hi", **extra}, timeout=60)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["param"] == param, error


def test_unknown_id_is_404(server: ThreadServer) -> None:
    for method in ("GET", "DELETE"):
        response = httpx.request(method, f"{server.url}/v1/responses/resp_unknown")
        assert response.status_code == 404 and "resp_unknown" in response.json()["error"]["message"]


# -- tools and structured output (a fake whose script is a call) -----------------------------------------------------

class GrammarTokenizer(FakeTokenizer):
    """The fake's tokenizer with its marker pieces known as special, which the grammar's vocabulary needs."""

    def is_special(self, token_id: int) -> bool:
        return token_id < BYTE0


def _app_with(loader: Any, grammar: bool = False) -> Any:
    """The production app on a fake from loader; grammar: one that follows constrained decoding."""

    def load(source: str, **kwargs: Any) -> Any:
        model = loader(source, **kwargs)
        if grammar:
            model.tokenizer = GrammarTokenizer()
        return model

    from server.app import create_app
    from tests.server.all_fakes import fake_settings

    return create_app(fake_settings(), loader=load, warm_up=False)


@pytest.fixture()
def caller(monkeypatch: pytest.MonkeyPatch) -> Iterator[openai.OpenAI]:
    monkeypatch.setattr(fake_model, "SCRIPT", CALL_SCRIPT)
    with ThreadServer(_app_with(fake_loader(context_length=4096), grammar=True)) as srv:
        yield sdk(srv)


def test_tool_call_then_its_output(caller: openai.OpenAI) -> None:
    ask = {"model": MODEL, "tools": [WEATHER], "tool_choice": "required", "parallel_tool_calls": False,
           "max_output_tokens": 80, "temperature": 0}
    response = caller.responses.create(input="Weather in Paris?", **ask)  # type: ignore[call-overload]
    assert response.status == "completed"
    [call] = response.output
    assert call.type == "function_call" and call.name == "get_weather" and call.id.startswith("fc_")
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id and call.status == "completed"
    assert response.tools[0].name == "get_weather" and response.tool_choice == "required"
    assert response.parallel_tool_calls is False

    answer = caller.responses.create(model=MODEL, previous_response_id=response.id, max_output_tokens=2,
                                     tools=[WEATHER], tool_choice="none",  # type: ignore[list-item]
                                     input=[{"type": "function_call_output", "call_id": call.call_id,
                                             "output": '{"temperature": 18}'}])
    assert answer.output[0].type == "message" and answer.output_text == CALL_SCRIPT[:2]
    assert answer.usage is not None and answer.usage.input_tokens == chat_prompt_tokens(caller, [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": call.call_id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}]},
        {"role": "tool", "tool_call_id": call.call_id, "content": '{"temperature": 18}'}],
        tools=[{"type": "function", "function": {k: v for k, v in WEATHER.items() if k != "type"}}],
        tool_choice="none")


def test_streamed_tool_call(caller: openai.OpenAI) -> None:
    with caller.responses.stream(model=MODEL, input="Weather?", tools=[WEATHER],  # type: ignore[list-item]
                                 tool_choice={"type": "function", "name": "get_weather"},
                                 parallel_tool_calls=False, max_output_tokens=80) as stream:
        events = list(stream)
        final = stream.get_final_response()
    names = [e.type for e in events]
    assert names[:3] == ["response.created", "response.in_progress", "response.output_item.added"]
    assert names[-3:] == ["response.function_call_arguments.done", "response.output_item.done", "response.completed"]
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    [call] = final.output
    assert call.type == "function_call" and call.arguments == arguments and json.loads(arguments) == {"city": "Paris"}


class Call(BaseModel):
    name: str
    parameters: dict[str, str]


def test_text_format_json_schema(caller: openai.OpenAI) -> None:
    parsed = caller.responses.parse(model=MODEL, input="As JSON", text_format=Call, max_output_tokens=80)
    assert parsed.status == "completed" and parsed.output_parsed == Call(name="get_weather",
                                                                         parameters={"city": "Paris"})
    assert parsed.text is not None and parsed.text.format is not None and parsed.text.format.type == "json_schema"
    plain = caller.responses.create(model=MODEL, input="JSON", text={"format": {"type": "json_object"}},
                                    max_output_tokens=80)
    assert json.loads(plain.output_text) == json.loads(CALL_SCRIPT)
    with pytest.raises(openai.BadRequestError) as raised:
        caller.responses.create(model=MODEL, input="x", text={"format": {"type": "json_object"}},
                                tools=[WEATHER], max_output_tokens=8)  # type: ignore[list-item]
    assert raised.value.body["param"] == "text.format"  # type: ignore[index]


# -- reasoning (a fake that thinks as Gemma 4 does) --------------------------------------------------------------------

THINKING_SCRIPT = "<|channel>thought\nLet me see.<channel|>Hi there. "


@pytest.fixture()
def thinker(monkeypatch: pytest.MonkeyPatch) -> Iterator[openai.OpenAI]:
    from server.services import chat

    monkeypatch.setattr(fake_model, "SCRIPT", THINKING_SCRIPT)
    monkeypatch.setattr(fake_model.FakeTokenizer, "chat_template", GEMMA4_TEMPLATE)
    monkeypatch.setattr(chat, "thinking_markers", lambda tokenizer: GEMMA4_CHANNEL)  # its byte vocabulary has none
    with ThreadServer(_app_with(fake_loader())) as srv:
        yield sdk(srv)


def test_reasoning_item_whole_and_streamed(thinker: openai.OpenAI) -> None:
    ask = {"model": MODEL, "input": "Hi", "max_output_tokens": len(THINKING_SCRIPT), "temperature": 0}
    response = thinker.responses.create(**ask, reasoning={"effort": "high"})  # type: ignore[call-overload]
    reasoning, message = response.output
    assert reasoning.type == "reasoning" and reasoning.id.startswith("rs_")
    assert [s.text for s in reasoning.summary] == ["Let me see."] and response.output_text == "Hi there. "
    assert response.reasoning is not None and response.reasoning.effort == "high"
    plain = thinker.responses.create(**ask)  # type: ignore[call-overload]
    # effort turns the template's thinking on: Gemma 4's system turn holding <|think|>
    assert response.usage.input_tokens - plain.usage.input_tokens == len("<|turn>system\n<|think|>\n<turn|>\n")  # type: ignore[union-attr]

    with thinker.responses.stream(**ask) as stream:  # type: ignore[call-overload]
        events = list(stream)
    names = [e.type for e in events]
    assert names[2:5] == ["response.output_item.added", "response.reasoning_summary_part.added",
                          "response.reasoning_summary_text.delta"]
    assert "".join(e.delta for e in events if e.type == "response.reasoning_summary_text.delta") == "Let me see."
    assert "".join(e.delta for e in events if e.type == "response.output_text.delta") == "Hi there. "
    final = events[-1].response  # type: ignore[union-attr]
    assert [item.type for item in final.output] == ["reasoning", "message"]


# -- the shipped Gemma 3 270M ----------------------------------------------------------------------------------------

def test_real_model_create_matches_chat(real_client: openai.OpenAI) -> None:
    """The same greedy tokens as the chat path for the same conversation."""
    response = real_client.responses.create(model=MODEL, input="The capital of France is", instructions="Be brief.",
                                            max_output_tokens=3, temperature=0)
    chat = real_client.chat.completions.create(model=MODEL, max_tokens=3, temperature=0, messages=[
        {"role": "system", "content": "Be brief."}, {"role": "user", "content": "The capital of France is"}])
    assert response.output_text == chat.choices[0].message.content and response.output_text
    assert response.usage is not None and chat.usage is not None
    assert (response.usage.input_tokens, response.usage.output_tokens) == (chat.usage.prompt_tokens, 3)
    assert response.status == "incomplete"


def test_real_model_stream_assembles(real_client: openai.OpenAI) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"],
              "additionalProperties": False}
    text = {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}
    with real_client.responses.stream(model=MODEL, input="Is the sky blue?", text=text,  # type: ignore[arg-type]
                                      max_output_tokens=20, temperature=0) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert final.status == "completed" and len(deltas) > 1
    assert final.output_text == "".join(deltas) and isinstance(json.loads(final.output_text)["ok"], bool)
