"""Anthropic's Messages API on the chat path: a request becomes a ChatCompletionRequest for ChatService, and its
completion (or chunk stream) becomes a Message (or Anthropic's named stream events).

Nothing here generates: the chat service renders the prompt, offers the tools, constrains the calls, splits a
thinking model's thoughts and reports which stop sequence ended the reply; this module only changes the dialect.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from server.errors import HearthError, InvalidRequest, to_hearth_error
from server.schemas.anthropic import (
    AnthropicErrorInfo,
    AnthropicErrorResponse,
    AnthropicUsage,
    ContentBlock,
    CountTokensRequest,
    ImageBlockParam,
    Message,
    MessageParam,
    MessagesRequest,
    StopReason,
    TextBlock,
    ThinkingAdaptive,
    ThinkingBlock,
    ThinkingEnabled,
    TokenCountResponse,
    ToolChoiceAny,
    ToolChoiceAuto,
    ToolChoiceNone,
    ToolChoiceTool,
    ToolResultBlockParam,
    ToolUseBlock,
)
from server.schemas.chat import ChatCompletion, ChatCompletionRequest
from server.services.chat import ChatService

# Anthropic's error types by status; other 4xx are invalid requests, other 5xx API errors.
_ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error", 500: "api_error",
                503: "overloaded_error", 529: "overloaded_error"}


def anthropic_error(error: HearthError) -> dict[str, Any]:
    """Anthropic's error body: `{"type": "error", "error": {"type", "message"}}`."""
    kind = _ERROR_TYPES.get(error.status, "invalid_request_error" if error.status < 500 else "api_error")
    return AnthropicErrorResponse(error=AnthropicErrorInfo(type=kind, message=error.message)).model_dump()


def new_message_id() -> str:
    return f"msg_{secrets.token_hex(12)}"


def tool_use_id(call_id: str) -> str:
    """Anthropic's `toolu_` id for the chat path's call id."""
    return "toolu_" + call_id.removeprefix("call-")


class AnthropicService:
    """Messages and token counts through ChatService."""

    def __init__(self, chat: ChatService) -> None:
        self.chat = chat

    async def count_tokens(self, body: CountTokensRequest) -> TokenCountResponse:
        """The prompt's tokens as /v1/messages would render it (system, messages and tools)."""
        return TokenCountResponse(input_tokens=await self.chat.prompt_tokens(chat_request(body)))

    async def create(self, body: MessagesRequest, http: Request) -> Message | AsyncIterator[dict[str, Any]]:
        """The whole message, or (with stream) Anthropic's stream events for named_sse_response."""
        request = chat_request(body)
        if not body.stream:
            completion = await self.chat.create(request, http)
            assert isinstance(completion, ChatCompletion)
            return message_from(completion)
        input_tokens = await self.chat.prompt_tokens(request)  # message_start reports it before any token
        chunks = await self.chat.create(request, http)
        assert not isinstance(chunks, ChatCompletion)
        return _events(chunks, request.model, input_tokens)


# -- requests -------------------------------------------------------------------------------------------------------

def chat_request(body: CountTokensRequest) -> ChatCompletionRequest:
    """The chat request a Messages request stands for (a count_tokens body: the same without generation)."""
    fields: dict[str, Any] = {"model": body.model, "messages": chat_messages(body.system_text(), body.messages)}
    if body.tools:
        fields["tools"] = [{"type": "function", "function": {"name": tool.name, "description": tool.description,
                                                             "parameters": tool.input_schema}} for tool in body.tools]
        choice = body.tool_choice
        if isinstance(choice, ToolChoiceTool):
            fields["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        elif choice is not None:
            fields["tool_choice"] = {ToolChoiceAuto: "auto", ToolChoiceAny: "required", ToolChoiceNone: "none"}[
                type(choice)]
        if isinstance(choice, ToolChoiceAuto | ToolChoiceAny | ToolChoiceTool) and choice.disable_parallel_tool_use:
            fields["parallel_tool_calls"] = False
    if isinstance(body.thinking, ThinkingEnabled | ThinkingAdaptive):
        fields["reasoning_effort"] = "medium"  # any effort turns the template's thinking on; there is no budget
    if body.output_config is not None and body.output_config.format is not None:
        fields["json_schema"] = body.output_config.format.schema_
    if isinstance(body, MessagesRequest):
        if isinstance(body.thinking, ThinkingEnabled) and body.thinking.budget_tokens >= body.max_tokens:
            raise InvalidRequest("thinking.budget_tokens must be less than max_tokens.",
                                 param="thinking.budget_tokens")
        fields.update(max_tokens=body.max_tokens, stop=body.stop_sequences, stream=body.stream,
                      stream_options={"include_usage": True} if body.stream else None, keep_alive=body.keep_alive)
        fields.update({name: value for name, value in (("temperature", body.temperature), ("top_p", body.top_p),
                                                       ("top_k", body.top_k)) if value is not None})
        if body.metadata is not None and body.metadata.user_id:
            fields["user"] = body.metadata.user_id
    try:
        return ChatCompletionRequest.model_validate(fields)
    except ValidationError as error:  # a combination the chat path refuses: the client's 400, naming the field
        raise to_hearth_error(RequestValidationError(error.errors())) from error


def chat_messages(system: str | None, messages: list[MessageParam]) -> list[dict[str, Any]]:
    """The conversation in the chat path's roles: tool results become `tool` messages, tool_use blocks the
    assistant's tool_calls, earlier thoughts are dropped; consecutive turns of one role are merged, as Anthropic
    does (chat templates want roles to alternate)."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []

    def add(role: str, text: str | list[dict[str, Any]], calls: list[dict[str, Any]] | None = None) -> None:
        last = out[-1] if out else None
        if last is not None and last["role"] == role and role in ("user", "assistant") and not last.get("tool_calls"):
            if isinstance(last["content"], str) and isinstance(text, str):
                last["content"] = "\n\n".join(part for part in (last["content"], text) if part)
            else:  # images among them: the parts one after the other
                last["content"] = _parts(last["content"]) + _parts(text)
            if calls:
                last["tool_calls"] = calls
            return
        message: dict[str, Any] = {"role": role, "content": text}
        if calls:
            message["tool_calls"] = calls
        out.append(message)

    for message in messages:
        if isinstance(message.content, str):
            add(message.role, message.content)
            continue
        if message.role == "assistant":
            text = "".join(block.text for block in message.content if block.type == "text")
            calls = [{"id": block.id, "type": "function",
                      "function": {"name": block.name, "arguments": json.dumps(block.input, ensure_ascii=False)}}
                     for block in message.content if block.type == "tool_use"]
            add("assistant", text, calls)
            continue
        pending: list[dict[str, Any]] = []  # the user's text and image parts since the last tool result
        for block in message.content:
            if isinstance(block, ToolResultBlockParam):
                if pending:
                    add("user", _content(pending))
                    pending = []
                result = ("Error: " if block.is_error else "") + block.text()
                out.append({"role": "tool", "tool_call_id": block.tool_use_id, "content": result})
            elif isinstance(block, ImageBlockParam):
                pending.append({"type": "image_url", "image_url": {"url": block.source.data_url()}})
            elif block.type == "text":
                pending.append({"type": "text", "text": block.text})  # type: ignore[union-attr]
        if pending or not message.content:
            add("user", _content(pending))
    return out


def _content(parts: list[dict[str, Any]]) -> str | list[dict[str, Any]]:
    """A user turn's content: its text joined, or where it holds images, the parts (chat's image_url parts)."""
    if any(part["type"] == "image_url" for part in parts):
        return parts
    return "".join(part["text"] for part in parts)


def _parts(content: str | list[dict[str, Any]]) -> list[dict[str, Any]]:
    return content if isinstance(content, list) else [{"type": "text", "text": content}] if content else []


# -- responses ------------------------------------------------------------------------------------------------------

def stop_reason(finish_reason: str | None, matched: str | None) -> tuple[StopReason, str | None]:
    """Anthropic's stop_reason and stop_sequence for a chat choice's finish_reason and matched stop string."""
    if finish_reason == "tool_calls":
        return "tool_use", None
    if finish_reason == "length":
        return "max_tokens", None
    if matched is not None:
        return "stop_sequence", matched
    return "end_turn", None


def message_from(completion: ChatCompletion) -> Message:
    """A chat completion's one choice as a Message: thoughts, then text, then tool calls."""
    choice = completion.choices[0]
    reply = choice.message
    content: list[ContentBlock] = []
    if reply.reasoning_content:
        content.append(ThinkingBlock(thinking=reply.reasoning_content))
    if reply.content:
        content.append(TextBlock(text=reply.content))
    for call in reply.tool_calls or []:
        content.append(ToolUseBlock(id=tool_use_id(call.id), name=call.function.name,
                                    input=_tool_input(call.function.arguments)))
    reason, sequence = stop_reason(choice.finish_reason, choice.stop_reason)
    return Message(id=new_message_id(), model=completion.model, content=content, stop_reason=reason,
                   stop_sequence=sequence, usage=AnthropicUsage(input_tokens=completion.usage.prompt_tokens,
                                                                output_tokens=completion.usage.completion_tokens))


def _tool_input(arguments: str) -> dict[str, Any]:
    """A call's arguments as tool_use input (constrained decoding makes them a JSON object; a reply cut short by
    max_tokens may hold a partial one, which becomes {})."""
    try:
        value = json.loads(arguments)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


class _Blocks:
    """The content blocks of a streamed message: a block starts when the kind of delta changes (thoughts, text, a
    new tool call) and the previous one stops."""

    def __init__(self) -> None:
        self.index = -1
        self.kind: str | None = None

    def _switch(self, kind: str, block: dict[str, Any]) -> list[dict[str, Any]]:
        events = self.stop()
        self.index += 1
        self.kind = kind
        return [*events, {"type": "content_block_start", "index": self.index, "content_block": block}]

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self.index, "delta": delta}

    def thinking(self, text: str) -> list[dict[str, Any]]:
        start = self._switch("thinking", {"type": "thinking", "thinking": "", "signature": ""}) \
            if self.kind != "thinking" else []
        return [*start, self._delta({"type": "thinking_delta", "thinking": text})]

    def text(self, text: str) -> list[dict[str, Any]]:
        start = self._switch("text", {"type": "text", "text": ""}) if self.kind != "text" else []
        return [*start, self._delta({"type": "text_delta", "text": text})]

    def tool_call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        function = call.get("function") or {}
        events = []
        if call.get("id") is not None:  # a call's first delta: a new tool_use block
            events = self._switch("tool_use", {"type": "tool_use", "id": tool_use_id(call["id"]),
                                               "name": function.get("name", ""), "input": {}})
        if function.get("arguments") and self.kind == "tool_use":
            events.append(self._delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
        return events

    def stop(self) -> list[dict[str, Any]]:
        if self.kind is None:
            return []
        self.kind = None
        return [{"type": "content_block_stop", "index": self.index}]


async def _events(chunks: AsyncIterator[dict[str, Any]], model: str, input_tokens: int,
                  ) -> AsyncIterator[dict[str, Any]]:
    """Anthropic's stream events from the chat path's chunks: message_start and a ping, then each block's start,
    deltas and stop, then message_delta (stop_reason, usage) and message_stop. Closing this closes the chunks,
    which cancels the generation."""
    yield {"type": "message_start", "message": {
        "id": new_message_id(), "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}
    yield {"type": "ping"}
    blocks = _Blocks()
    reason: StopReason = "end_turn"
    sequence: str | None = None
    output_tokens = 0
    async with aclosing(chunks):  # type: ignore[type-var]
        async for chunk in chunks:
            if chunk.get("usage"):
                output_tokens = chunk["usage"]["completion_tokens"]
            for choice in chunk["choices"]:
                delta = choice["delta"]
                if delta.get("reasoning_content"):
                    for event in blocks.thinking(delta["reasoning_content"]):
                        yield event
                if delta.get("content"):
                    for event in blocks.text(delta["content"]):
                        yield event
                for call in delta.get("tool_calls") or []:
                    for event in blocks.tool_call(call):
                        yield event
                if choice.get("finish_reason"):
                    reason, sequence = stop_reason(choice["finish_reason"], choice.get("stop_reason"))
    for event in blocks.stop():
        yield event
    yield {"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": sequence},
           "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}}
    yield {"type": "message_stop"}
