"""Anthropic's Messages API (/v1/messages, /v1/messages/count_tokens) through the official anthropic client.

Most tests run on the fake model (it says "Hello world. " over and over, one token per byte, so token counts are
exact); a scripted fake replies with a tool call for the tool tests; the last tests run the official client
against the real Gemma 3 270M server (`real_api`), a few tokens each.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import numpy as np
import pytest

from config.settings import load_settings
from server.app import create_app
from tests.server.all_fakes import fake_app
from tests.server.fake_model import (
    BYTE0,
    SCRIPT,
    FakeDecoder,
    FakeGenerator,
    FakeModel,
    FakeSession,
    FakeTokenizer,
)
from tests.server.live_server import ThreadServer
from tests.server.test_app import wait_until

MODEL = "gemma-3-270m"
HI = [{"role": "user", "content": "hi"}]
WEATHER = {"name": "get_weather", "description": "The weather in a city now.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}
CALL = '{"name": "get_weather", "parameters": {"city": "Paris"}}'  # Gemma 3's prompt format for a call


def _serve(app: Any) -> ThreadServer:
    server = ThreadServer(app).__enter__()
    assert wait_until(lambda: httpx.get(f"{server.url}/ready").status_code == 200)
    return server


def _serve_model(cls: type[FakeModel], env: dict[str, str] | None = None, **kwargs: Any) -> ThreadServer:
    """The production app on a fake model of class cls (made with kwargs), in uvicorn."""
    settings = load_settings(env={"HEARTH_OLLAMA": "false", **(env or {})})
    return _serve(create_app(settings, loader=_loader(cls, **kwargs), warm_up=False))


def _client(server: Any, key: str = "unused") -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=server.url, api_key=key, max_retries=0, timeout=600)


@pytest.fixture(scope="module")
def fake() -> Iterator[ThreadServer]:
    server = _serve(fake_app())
    yield server
    server.__exit__()


@pytest.fixture(scope="module")
def client(fake: ThreadServer) -> anthropic.Anthropic:
    return _client(fake)


def _events(server: ThreadServer, body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The (event name, payload) pairs of a raw stream."""
    with httpx.stream("POST", f"{server.url}/v1/messages", json={**body, "stream": True}, timeout=60) as response:
        assert response.status_code == 200 and response.headers["content-type"].startswith("text/event-stream")
        text = response.read().decode()
    events = []
    for block in text.strip().split("\n\n"):
        name, data = block.split("\n")
        assert name.startswith("event: ") and data.startswith("data: "), block
        events.append((name.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return events


# -- text ------------------------------------------------------------------------------------------------------------

def test_a_message_in_anthropics_shape(client: anthropic.Anthropic) -> None:
    message = client.messages.create(model=MODEL, max_tokens=5, messages=HI)  # type: ignore[arg-type]
    assert message.type == "message" and message.role == "assistant" and message.id.startswith("msg_")
    assert message.model == MODEL
    assert [(block.type, block.text) for block in message.content] == [("text", SCRIPT[:5])]  # type: ignore[union-attr]
    assert (message.stop_reason, message.stop_sequence) == ("max_tokens", None)
    assert message.usage.output_tokens == 5
    assert message.usage.input_tokens == client.messages.count_tokens(model=MODEL, messages=HI).input_tokens  # type: ignore[arg-type]


def test_the_system_prompt_and_every_turn_reach_the_prompt(client: anthropic.Anthropic) -> None:
    """The fake tokenizer has one token per byte: a longer system prompt or turn is exactly that many tokens more."""
    def count(**body: Any) -> int:
        return client.messages.count_tokens(model=MODEL, **body).input_tokens

    assert count(system="abc", messages=HI) - count(system="a", messages=HI) == 2
    blocks = [{"type": "text", "text": "ab"}, {"type": "text", "text": "cd"}]
    assert count(system=blocks, messages=HI) == count(system="ab\n\ncd", messages=HI)
    history = [*HI, {"role": "assistant", "content": [{"type": "text", "text": "yes"}]},
               {"role": "user", "content": "and?"}]
    longer = [*HI, {"role": "assistant", "content": "yes sir"}, {"role": "user", "content": "and?"}]
    assert count(messages=longer) - count(messages=history) == len(" sir")
    reply = client.messages.create(model=MODEL, max_tokens=3, system="be brief", messages=history)  # type: ignore[arg-type]
    assert reply.content[0].text == SCRIPT[:3]  # type: ignore[union-attr]


def test_consecutive_user_turns_are_merged_as_anthropic_does(client: anthropic.Anthropic) -> None:
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": [{"type": "text", "text": "b"}]}]
    reply = client.messages.create(model=MODEL, max_tokens=2, messages=two)  # type: ignore[arg-type]
    assert reply.content[0].text == SCRIPT[:2]  # type: ignore[union-attr]


@pytest.mark.parametrize("stops", [["wor"], ["zzz", "wor"], ["o w", "wor"]])
def test_the_stop_sequence_that_matched_is_named(client: anthropic.Anthropic, stops: list[str]) -> None:
    """SCRIPT is "Hello world. ": the first stop in the text ends it, and the reply names that one."""
    first = min((SCRIPT.find(stop), stop) for stop in stops if stop in SCRIPT)
    message = client.messages.create(model=MODEL, max_tokens=30, messages=HI, stop_sequences=stops)  # type: ignore[arg-type]
    assert message.content[0].text == SCRIPT[:first[0]]  # type: ignore[union-attr]
    assert (message.stop_reason, message.stop_sequence) == ("stop_sequence", first[1])


def test_a_reply_that_ends_by_itself_is_end_turn() -> None:
    server = _serve_model(FakeModel, eos_after=4)
    try:
        message = _client(server).messages.create(model=MODEL, max_tokens=30, messages=HI)  # type: ignore[arg-type]
        assert (message.content[0].text, message.stop_reason, message.stop_sequence) == (  # type: ignore[union-attr]
            SCRIPT[:4], "end_turn", None)
    finally:
        server.__exit__()


def test_sampling_and_ignored_fields_are_accepted(client: anthropic.Anthropic) -> None:
    """temperature, top_p and top_k (older API versions' fields: the current client sends them as extra_body)."""
    message = client.messages.create(model=MODEL, max_tokens=3, messages=HI, metadata={"user_id": "u-1"},  # type: ignore[arg-type]
                                     thinking={"type": "disabled"}, cache_control={"type": "ephemeral"},
                                     service_tier="auto", extra_body={"temperature": 0, "top_p": 0.5, "top_k": 4})
    assert message.content[0].text == SCRIPT[:3]  # type: ignore[union-attr]


# -- streaming -------------------------------------------------------------------------------------------------------

def test_stream_events_come_in_anthropics_order(fake: ThreadServer) -> None:
    events = _events(fake, {"model": MODEL, "max_tokens": 10, "messages": HI, "stop_sequences": ["lo"]})
    names = [name for name, _ in events]
    # a delta a token, or fewer where tokens waited together (server/jobs.py merges a choice's waiting deltas)
    n_deltas = names.count("content_block_delta")
    assert names == ["message_start", "ping", "content_block_start", *["content_block_delta"] * n_deltas,
                     "content_block_stop", "message_delta", "message_stop"] and 1 <= n_deltas <= 3
    assert all(payload["type"] == name for name, payload in events)
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None and start["usage"]["input_tokens"] > 0
    assert events[2][1] == {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}
    assert "".join(payload["delta"]["text"] for name, payload in events if name == "content_block_delta") == "Hel"
    assert events[-2][1]["delta"] == {"stop_reason": "stop_sequence", "stop_sequence": "lo"}
    assert events[-2][1]["usage"]["output_tokens"] == 5  # the stop's tokens were generated, and count


def test_the_clients_stream_helper_assembles_the_message(client: anthropic.Anthropic) -> None:
    whole = client.messages.create(model=MODEL, max_tokens=6, messages=HI)  # type: ignore[arg-type]
    with client.messages.stream(model=MODEL, max_tokens=6, messages=HI) as stream:  # type: ignore[arg-type]
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == final.content[0].text == whole.content[0].text  # type: ignore[union-attr]
    assert (final.stop_reason, final.usage.input_tokens, final.usage.output_tokens) == (
        "max_tokens", whole.usage.input_tokens, 6)


def test_an_error_after_the_stream_starts_is_an_error_event() -> None:
    server = _serve_model(FakeModel, fail_after=2)
    try:
        events = _events(server, {"model": MODEL, "max_tokens": 10, "messages": HI})
        assert events[0][0] == "message_start" and events[-1][0] == "error"
        assert events[-1][1]["type"] == "error" and events[-1][1]["error"]["type"] == "api_error"
        with pytest.raises(anthropic.APIStatusError):
            with _client(server).messages.stream(model=MODEL, max_tokens=10, messages=HI) as stream:  # type: ignore[arg-type]
                stream.get_final_message()
    finally:
        server.__exit__()


# -- tools -----------------------------------------------------------------------------------------------------------

class _ToolTokenizer(FakeTokenizer):
    def is_special(self, token_id: int) -> bool:  # what constrained decoding's vocabulary needs
        return token_id < BYTE0


class _ScriptedSession(FakeSession):
    """Says the model's script once (its tokens), then ends."""

    def _logits(self) -> Any:
        super()._logits()
        script: list[int] = self.model.script_ids  # type: ignore[attr-defined]
        logits = np.zeros(self.model.vocab_size, dtype=np.float32)
        logits[script[self._generated] if self._generated < len(script) else FakeTokenizer.eos_id] = 20.0
        return logits


class _ScriptedGenerator(FakeGenerator):
    """FakeGenerator over scripted sessions; the constraint is not applied (the script is a valid reply)."""

    def add(self, key: Any, prompt_ids: list[int], sampling: Any, max_tokens: int, logprobs: bool = False,
            stop_ids: frozenset[int] | None = None, constraint: Any = None) -> None:
        super().add(key, prompt_ids, sampling, max_tokens, logprobs, stop_ids)
        self._seqs[key]["session"].close()
        self._seqs[key]["session"] = _ScriptedSession(self.model)


class _ToolModel(FakeModel):
    """A model whose reply is a call of get_weather in Gemma 3's format."""

    script = CALL
    tokenizer_class: type[FakeTokenizer] = _ToolTokenizer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.tokenizer = self.tokenizer_class()
        self.vocab_size = self.tokenizer.vocab_size
        self.script_ids = self.tokenizer.encode(self.script, add_bos=False)

    def generator(self) -> FakeGenerator:
        return _ScriptedGenerator(self)


_THINK = ["<think>", "</think>"]  # two more pieces after the fake's bytes


class _ThinkDecoder(FakeDecoder):
    def push(self, token_id: int) -> str:
        if token_id >= BYTE0 + 256:
            return self.flush() + _THINK[token_id - BYTE0 - 256]
        return super().push(token_id)


class _ThinkTokenizer(_ToolTokenizer):
    """The fake's tokenizer with <think> and </think> as single pieces, as Qwen 3's vocabulary has them."""

    vocab_size = BYTE0 + 256 + len(_THINK)

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = [self.bos_id] if add_bos else []
        for part in re.split("(</?think>)", text):
            ids += [BYTE0 + 256 + _THINK.index(part)] if part in _THINK else super().encode(part, add_bos=False)
        return ids

    def stream_decoder(self) -> FakeDecoder:
        return _ThinkDecoder()

    def id_to_piece(self, token_id: int) -> str:
        return _THINK[token_id - BYTE0 - 256] if token_id >= BYTE0 + 256 else super().id_to_piece(token_id)

    def id_to_bytes(self, token_id: int) -> bytes:
        return self.id_to_piece(token_id).encode() if token_id >= BYTE0 + 256 else super().id_to_bytes(token_id)


class _ThinkingModel(_ToolModel):
    """A model that thinks between <think> tags, then answers."""

    script = "<think>Paris is in France.</think>It is sunny."
    tokenizer_class = _ThinkTokenizer


def _loader(cls: type[FakeModel], **kwargs: Any) -> Any:
    def load(source: str, *, progress: Any = None, **_: Any) -> FakeModel:
        return cls(source, **kwargs)
    return load


@pytest.fixture(scope="module")
def tool_server() -> Iterator[ThreadServer]:
    server = _serve_model(_ToolModel, context_length=4096)
    yield server
    server.__exit__()


@pytest.mark.parametrize("tool_choice", [None, {"type": "auto"}, {"type": "any"},
                                         {"type": "tool", "name": "get_weather", "disable_parallel_tool_use": True}])
def test_a_tool_call_is_a_tool_use_block(tool_server: ThreadServer, tool_choice: dict[str, Any] | None) -> None:
    extra = {"tool_choice": tool_choice} if tool_choice else {}
    message = _client(tool_server).messages.create(model=MODEL, max_tokens=80, messages=HI, tools=[WEATHER], **extra)  # type: ignore[arg-type]
    assert message.stop_reason == "tool_use" and len(message.content) == 1
    call = message.content[0]
    assert call.type == "tool_use" and call.id.startswith("toolu_")
    assert (call.name, call.input) == ("get_weather", {"city": "Paris"})


def test_a_streamed_tool_call_assembles_in_the_client(tool_server: ThreadServer) -> None:
    events = _events(tool_server, {"model": MODEL, "max_tokens": 80, "messages": HI, "tools": [WEATHER]})
    starts = [payload["content_block"] for name, payload in events if name == "content_block_start"]
    assert [block["type"] for block in starts] == ["tool_use"] and starts[0]["input"] == {}
    deltas = [payload["delta"] for name, payload in events if name == "content_block_delta"]
    assert {delta["type"] for delta in deltas} == {"input_json_delta"}
    assert json.loads("".join(delta["partial_json"] for delta in deltas)) == {"city": "Paris"}
    with _client(tool_server).messages.stream(model=MODEL, max_tokens=80, messages=HI, tools=[WEATHER]) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.stop_reason == "tool_use"
    assert [(b.type, b.name, b.input) for b in final.content] == [("tool_use", "get_weather", {"city": "Paris"})]  # type: ignore[union-attr]


def test_output_config_format_is_accepted(tool_server: ThreadServer) -> None:
    message = _client(tool_server).messages.create(  # type: ignore[call-overload]
        model=MODEL, max_tokens=80, messages=HI, output_config={"format": {"type": "json_schema",
                                                                         "schema": {"type": "object"}}})
    assert json.loads(message.content[0].text) == json.loads(CALL)


def test_a_tool_result_goes_back_into_the_prompt(tool_server: ThreadServer) -> None:
    client = _client(tool_server)
    call = client.messages.create(model=MODEL, max_tokens=80, messages=HI, tools=[WEATHER]).content[0]  # type: ignore[arg-type]

    def history(result: Any) -> list[dict[str, Any]]:
        return [*HI, {"role": "assistant", "content": [call.model_dump(exclude_none=True)]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id, "content": result}]}]

    def count(messages: list[dict[str, Any]]) -> int:
        return client.messages.count_tokens(model=MODEL, messages=messages, tools=[WEATHER]).input_tokens  # type: ignore[arg-type]

    assert count(history("18 degrees and sunny")) - count(history("18 degrees")) == len(" and sunny")
    assert count(history([{"type": "text", "text": "18 degrees"}])) == count(history("18 degrees"))
    reply = client.messages.create(model=MODEL, max_tokens=5, messages=history("18 degrees"), tools=[WEATHER],  # type: ignore[arg-type]
                                   tool_choice={"type": "none"})
    assert [(block.type, block.text) for block in reply.content] == [("text", CALL[:5])]  # type: ignore[union-attr]
    assert reply.stop_reason == "max_tokens"


# -- thinking ------------------------------------------------------------------------------------------------------

def test_thoughts_are_thinking_blocks() -> None:
    server = _serve_model(_ThinkingModel, context_length=4096)
    try:
        client = _client(server)
        thinking = {"type": "enabled", "budget_tokens": 1024}
        message = client.messages.create(model=MODEL, max_tokens=2000, messages=HI, thinking=thinking)  # type: ignore[arg-type]
        assert [block.model_dump(exclude_none=True) for block in message.content] == [
            {"type": "thinking", "thinking": "Paris is in France.", "signature": ""},
            {"type": "text", "text": "It is sunny."}]
        assert message.stop_reason == "end_turn"
        events = _events(server, {"model": MODEL, "max_tokens": 2000, "messages": HI, "thinking": thinking})
        starts = [payload["content_block"]["type"] for name, payload in events if name == "content_block_start"]
        assert starts == ["thinking", "text"]
        deltas = {payload["delta"]["type"] for name, payload in events if name == "content_block_delta"}
        assert deltas == {"thinking_delta", "text_delta"}
        with client.messages.stream(model=MODEL, max_tokens=2000, messages=HI, thinking=thinking) as stream:  # type: ignore[arg-type]
            final = stream.get_final_message()
        assert [block.to_dict() for block in final.content] == [block.to_dict() for block in message.content]
    finally:
        server.__exit__()


# -- errors ----------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("body", "param"), [
    ({"messages": [{"role": "user", "content": [{"type": "image", "source": {"type": "base64", "data": "x"}}]}]},
     "takes text only: it does not accept images"),  # the fake model reads text only
    ({"messages": [{"role": "assistant", "content": [{"type": "image", "source": {"type": "base64", "data": "x"}}]}]},
     "image blocks cannot be in a assistant message"),
    ({"messages": [{"role": "user", "content": [{"type": "document", "source": {}}]}]}, "not supported"),
    ({"messages": HI, "frequency_penalty": 1}, "frequency_penalty"),
    ({"messages": [{"role": "user", "content": [{"type": "tool_use", "id": "x", "name": "f", "input": {}}]}]},
     "tool_use blocks cannot be in a user message"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages[0].role"),
    ({"messages": HI, "tools": [WEATHER], "tool_choice": {"type": "tool", "name": "nope"}}, "tool_choice"),
    ({"messages": HI, "thinking": {"type": "enabled", "budget_tokens": 2048}}, "budget_tokens"),
    ({"messages": HI, "temperature": 1.5}, "temperature"),
    ({"messages": [{"role": "user", "content": [{"type": "text"}]}]}, "messages[0].content[0].text"),
])
def test_bad_requests_are_anthropics_invalid_request_error(client: anthropic.Anthropic, body: dict[str, Any],
                                                           param: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as raised:
        client.messages.create(model=MODEL, max_tokens=8, messages=HI, extra_body=body)  # type: ignore[arg-type]
    error = raised.value.body
    assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"  # type: ignore[index]
    assert param in error["error"]["message"], error  # type: ignore[index]


def test_max_tokens_is_required(fake: ThreadServer) -> None:
    reply = httpx.post(f"{fake.url}/v1/messages", json={"model": MODEL, "messages": HI})
    assert reply.status_code == 400
    assert reply.json()["error"] == {"type": "invalid_request_error",
                                     "message": "Missing required parameter: 'max_tokens'."}


def test_an_unknown_model_is_not_found_error(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as raised:
        client.messages.create(model="claude-nope", max_tokens=8, messages=HI)  # type: ignore[arg-type]
    assert raised.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        client.messages.count_tokens(model="claude-nope", messages=HI)  # type: ignore[arg-type]


def test_a_wrong_key_is_authentication_error() -> None:
    server = _serve_model(FakeModel, env={"HEARTH_API_KEY": "k"})
    try:
        with pytest.raises(anthropic.AuthenticationError) as raised:
            _client(server, key="wrong").messages.create(model=MODEL, max_tokens=2, messages=HI)  # type: ignore[arg-type]
        assert raised.value.body["error"]["type"] == "authentication_error"  # type: ignore[index]
        reply = _client(server, key="k").messages.create(model=MODEL, max_tokens=2, messages=HI)  # type: ignore[arg-type]
        assert reply.content[0].text == SCRIPT[:2]  # type: ignore[union-attr]
    finally:
        server.__exit__()


def test_other_paths_keep_their_shapes(fake: ThreadServer) -> None:
    missing = httpx.post(f"{fake.url}/v1/messages/nothing", json={})
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    chat = httpx.post(f"{fake.url}/v1/chat/completions", json={"model": "nope", "messages": HI})
    assert chat.status_code == 404 and chat.json()["error"]["code"] == "model_not_found"


def test_openai_chat_reports_the_matched_stop_as_vllm_does(fake: ThreadServer) -> None:
    reply = httpx.post(f"{fake.url}/v1/chat/completions", json={"model": MODEL, "messages": HI, "stop": ["wor"]})
    choice = reply.json()["choices"][0]
    assert (choice["message"]["content"], choice["finish_reason"], choice["stop_reason"]) == ("Hello ", "stop", "wor")


# -- the real model --------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def real(real_api: Any) -> anthropic.Anthropic:
    return _client(real_api)


def test_real_model_create_stream_and_count(real: anthropic.Anthropic) -> None:
    question = [{"role": "user", "content": "Name a colour."}]
    greedy = {"temperature": 0}  # an older API version's field: the current client sends it as extra_body
    message = real.messages.create(model=MODEL, max_tokens=3, messages=question, extra_body=greedy)  # type: ignore[arg-type]
    assert message.content and message.content[0].type == "text" and message.content[0].text
    assert message.stop_reason in ("max_tokens", "end_turn") and 1 <= message.usage.output_tokens <= 3
    counted = real.messages.count_tokens(model=MODEL, messages=question)  # type: ignore[arg-type]
    assert counted.input_tokens == message.usage.input_tokens
    with real.messages.stream(model=MODEL, max_tokens=3, messages=question, extra_body=greedy) as stream:  # type: ignore[arg-type]
        final = stream.get_final_message()
    assert final.content[0].text == message.content[0].text  # type: ignore[union-attr]
    assert (final.stop_reason, final.usage.input_tokens) == (message.stop_reason, message.usage.input_tokens)
