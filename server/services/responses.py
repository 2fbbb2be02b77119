"""The Responses API on the chat path: a request's items become a ChatCompletionRequest for ChatService, and its
completion (or chunk stream) comes back as a response object (or the Responses API's named events).

Conversation state for previous_response_id lives in a ResponseStore: each kept response holds the whole
conversation up to its own output, so the next request only sends what is new. The store is in memory and
bounded by a count (least recently used dropped first), so an id can be forgotten: that is a 400 saying so.
"""

from __future__ import annotations

import logging
import secrets
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from fastapi import Request
from pydantic import TypeAdapter, ValidationError

from server.errors import HearthError, InvalidRequest, NotFound, param_name, to_hearth_error
from server.schemas.chat import ChatCompletion, ChatCompletionRequest
from server.schemas.common import PromptTokensDetails
from server.schemas.responses import (
    DeletedResponse,
    FunctionCallItem,
    FunctionCallOutputItem,
    FunctionChoice,
    IncompleteDetails,
    InputItem,
    InputTokensDetails,
    MessageItem,
    OutputFunctionCall,
    OutputItem,
    OutputMessage,
    OutputReasoning,
    OutputSummary,
    OutputText,
    ReasoningItem,
    Response,
    ResponseError,
    ResponseRequest,
    ResponseUsage,
)
from server.services import generation as gen
from server.services.chat import ChatService

log = logging.getLogger("hearth.server")

Item = MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem
_AS_INPUT: TypeAdapter[Item] = TypeAdapter(InputItem)
# The chat request's parameters by their Responses API names, for errors the chat path raises.
_PARAM_NAMES = {"messages": "input", "response_format.json_schema": "text.format", "response_format": "text.format",
                "max_completion_tokens": "max_output_tokens", "reasoning_effort": "reasoning.effort"}


def new_id(prefix: str) -> str:
    """OpenAI's style of id: `resp_...`, `msg_...`, `fc_...`, `rs_...`."""
    return f"{prefix}_{secrets.token_hex(24)}"


@dataclass(frozen=True)
class StoredResponse:
    """A kept response and its conversation: every item up to and including its output, as input items."""

    response: Response
    conversation: tuple[Item, ...]


class ResponseStore:
    """The responses previous_response_id can name: in memory, at most `size`, least recently used dropped first."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[str, StoredResponse] = OrderedDict()

    def get(self, response_id: str) -> StoredResponse | None:
        stored = self._entries.get(response_id)
        if stored is not None:
            self._entries.move_to_end(response_id)
        return stored

    def put(self, stored: StoredResponse) -> None:
        if self.size <= 0:
            return
        self._entries[stored.response.id] = stored
        self._entries.move_to_end(stored.response.id)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)

    def pop(self, response_id: str) -> StoredResponse | None:
        return self._entries.pop(response_id, None)


_WHY_NOT_KEPT = ("This server keeps the most recent responses in memory only (setting limits.responses_store_size): "
                 "it was never stored (store: false), has been dropped for newer ones, or the server has restarted "
                 "since.")


def _not_kept(response_id: str, param: str | None) -> HearthError:
    """previous_response_id naming a response not kept is a 400 (OpenAI's code); GET or DELETE of one, a 404."""
    if param is None:
        return NotFound(f"Response with id '{response_id}' not found. {_WHY_NOT_KEPT}")
    return InvalidRequest(f"Previous response with id '{response_id}' not found. {_WHY_NOT_KEPT}", param=param,
                          code="previous_response_not_found")


class ResponsesService:
    """Translates Responses API requests for ChatService and its answers back; keeps responses in the store."""

    def __init__(self, chat: ChatService, store: ResponseStore) -> None:
        self.chat = chat
        self.store = store

    def retrieve(self, response_id: str) -> Response:
        stored = self.store.get(response_id)
        if stored is None:
            raise _not_kept(response_id, None)
        return stored.response

    def delete(self, response_id: str) -> DeletedResponse:
        if self.store.pop(response_id) is None:
            raise _not_kept(response_id, None)
        return DeletedResponse(id=response_id)

    async def create(self, request: ResponseRequest, http: Request) -> Response | AsyncIterator[dict[str, Any]]:
        """The whole response, or (with stream) its events for the SSE helper."""
        history: tuple[Item, ...] = ()
        if request.previous_response_id is not None:
            previous = self.store.get(request.previous_response_id)
            if previous is None:
                raise _not_kept(request.previous_response_id, "previous_response_id")
            history = previous.conversation
        conversation = (*history, *request.items())
        chat_request = _chat_request(request, conversation)
        try:
            result = await self.chat.create(chat_request, http)
        except HearthError as error:
            error.param = _responses_param(error.param)
            raise
        template = _echo(request)
        if isinstance(result, ChatCompletion):
            response = _response(template, result)
            self._keep(request, response, conversation)
            return response
        return self._events(request, template, conversation, result)

    def _keep(self, request: ResponseRequest, response: Response, conversation: Sequence[Item]) -> None:
        if request.store is False:
            return
        outputs = [_AS_INPUT.validate_python(item.model_dump(mode="json")) for item in response.output]
        self.store.put(StoredResponse(response, (*conversation, *outputs)))

    async def _events(self, request: ResponseRequest, template: Response, conversation: Sequence[Item],
                      chunks: AsyncIterator[dict[str, Any]]) -> AsyncIterator[dict[str, Any]]:
        stream = _EventStream(template)
        try:
            first = await anext(chunks, None)
            stream.response.model = first["model"] if first else template.model
            yield stream.event("response.created", response=stream.snapshot())
            yield stream.event("response.in_progress", response=stream.snapshot())
            pending = [first] if first else []
            while True:
                chunk = pending.pop() if pending else await anext(chunks, None)
                if chunk is None:
                    break
                for event in stream.push(chunk):
                    yield event
            for event in stream.finish():
                yield event
        except Exception as exc:  # noqa: BLE001 - the stream has started: the failure travels as response.failed
            yield stream.failed(to_hearth_error(exc))
            return
        finally:
            await chunks.aclose()
        self._keep(request, stream.response, conversation)


# -- the request, translated -----------------------------------------------------------------------------------------

def _chat_request(request: ResponseRequest, conversation: Sequence[Item]) -> ChatCompletionRequest:
    """The ChatCompletionRequest that generates this response; instructions go first as a system message."""
    messages = ([{"role": "system", "content": request.instructions}] if request.instructions is not None else [])
    messages += _chat_messages(conversation)
    if not messages:
        raise InvalidRequest("input holds no message to answer.", param="input")
    effort = request.reasoning.effort if request.reasoning is not None else None
    body: dict[str, Any] = {
        "model": request.model, "messages": messages, "max_completion_tokens": request.max_output_tokens,
        "parallel_tool_calls": request.parallel_tool_calls, "reasoning_effort": "high" if effort == "xhigh" else effort,
        "seed": request.seed, "stream": request.stream, "temperature": request.temperature, "top_p": request.top_p,
        "user": request.user or request.safety_identifier, "top_k": request.top_k, "min_p": request.min_p,
        "repetition_penalty": request.repetition_penalty, "keep_alive": request.keep_alive,
    }
    if request.stream:
        body["stream_options"] = {"include_usage": True}  # response.completed carries the usage
    if request.tools:
        body["tools"] = [{"type": "function", "function": tool.model_dump(exclude={"type"}, exclude_none=True)}
                         for tool in request.tools]
    if isinstance(request.tool_choice, FunctionChoice):
        body["tool_choice"] = {"type": "function", "function": {"name": request.tool_choice.name}}
    elif request.tool_choice is not None and (request.tools or request.tool_choice != "auto"):
        body["tool_choice"] = request.tool_choice
    if request.text is not None and request.text.format is not None:
        body["response_format"] = request.text.format.response_format().model_dump(by_alias=True, exclude_none=True)
    try:
        return ChatCompletionRequest.model_validate({k: v for k, v in body.items() if v is not None})
    except ValidationError as error:  # what the chat path refuses that this schema let through
        first = error.errors()[0]
        param = _responses_param(param_name(tuple(first.get("loc", ()))))
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise InvalidRequest(f"Invalid value for '{param}': {message}", param=param, code="invalid_value") from error


def _chat_messages(items: Sequence[Item]) -> list[dict[str, Any]]:
    """Chat messages of the conversation: function calls join the assistant message before them (or make one),
    their outputs become tool messages, earlier reasoning is left out as chat templates leave it out."""
    messages: list[dict[str, Any]] = []
    for item in items:
        if isinstance(item, MessageItem):
            messages.append({"role": item.role, "content": item.chat_content()})
        elif isinstance(item, FunctionCallItem):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif isinstance(item, FunctionCallOutputItem):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.text()})
    return messages


def _responses_param(param: str | None) -> str | None:
    """A chat request's parameter by its Responses API name (`messages[2]` is in `input`)."""
    if param is None:
        return None
    for chat_name, name in _PARAM_NAMES.items():
        if param == chat_name or param.startswith((chat_name + ".", chat_name + "[")):
            return "input" if chat_name == "messages" else name + param[len(chat_name):]
    return param


def _echo(request: ResponseRequest) -> Response:
    """A response in progress, holding the request's parameters as OpenAI echoes them."""
    text_format = request.text.format if request.text is not None and request.text.format is not None else None
    reasoning = request.reasoning
    return Response(
        id=new_id("resp"), created_at=gen.now(), status="in_progress", instructions=request.instructions,
        max_output_tokens=request.max_output_tokens, model=request.model,
        parallel_tool_calls=request.parallel_tool_calls is not False,
        previous_response_id=request.previous_response_id,
        reasoning={"effort": reasoning.effort if reasoning else None,
                   "summary": (reasoning.summary or reasoning.generate_summary) if reasoning else None},
        store=request.store is not False, temperature=request.temperature,
        text={"format": text_format.model_dump(by_alias=True, exclude_none=True) if text_format else {"type": "text"},
              "verbosity": "medium"},
        tool_choice=(request.tool_choice.model_dump() if isinstance(request.tool_choice, FunctionChoice)
                     else request.tool_choice or "auto"),
        tools=[tool.model_dump() for tool in request.tools or []], top_p=request.top_p, user=request.user,
        metadata=request.metadata or {},
    )


# -- the answer, translated ------------------------------------------------------------------------------------------

def _cached(details: PromptTokensDetails | None) -> int:
    return details.cached_tokens if details is not None else 0


def _usage(prompt_tokens: int, completion_tokens: int, cached_tokens: int = 0) -> ResponseUsage:
    return ResponseUsage(input_tokens=prompt_tokens, output_tokens=completion_tokens,
                         total_tokens=prompt_tokens + completion_tokens,
                         input_tokens_details=InputTokensDetails(cached_tokens=cached_tokens))


def _finished(response: Response, incomplete: bool) -> None:
    response.status = "incomplete" if incomplete else "completed"
    response.incomplete_details = IncompleteDetails(reason="max_output_tokens") if incomplete else None


def _response(template: Response, completion: ChatCompletion) -> Response:
    """The response object of a whole chat completion: reasoning, then the message, then function calls."""
    choice = completion.choices[0]
    message = choice.message
    incomplete = choice.finish_reason == "length"
    output: list[OutputItem] = []
    if message.reasoning_content:
        output.append(OutputReasoning(id=new_id("rs"), summary=[OutputSummary(text=message.reasoning_content)]))
    calls = message.tool_calls or []
    if message.content or not calls:
        output.append(OutputMessage(id=new_id("msg"), status="incomplete" if incomplete and not calls else "completed",
                                    content=[OutputText(text=message.content or "")]))
    output += [OutputFunctionCall(id=new_id("fc"), status="completed", arguments=call.function.arguments,
                                  call_id=call.id, name=call.function.name) for call in calls]
    response = template.model_copy(update={"model": completion.model, "output": output,
                                           "usage": _usage(completion.usage.prompt_tokens,
                                                           completion.usage.completion_tokens,
                                                           _cached(completion.usage.prompt_tokens_details))})
    _finished(response, incomplete)
    return response


@dataclass
class _OpenItem:
    """The output item being streamed: its index, kind and what has been said in it so far."""

    index: int
    item: OutputItem
    text: str = ""
    tool_index: int | None = None  # a function call's index among the chat stream's tool calls


@dataclass
class _EventStream:
    """Chat chunks to the Responses API's events, numbered in order: each output item is opened (added), filled
    (deltas) and closed (done) before the next one opens, as OpenAI streams them."""

    response: Response
    sequence: int = 0
    current: _OpenItem | None = None
    finish_reason: str | None = None
    usage: ResponseUsage = field(default_factory=lambda: _usage(0, 0))

    def event(self, kind: str, **fields: Any) -> dict[str, Any]:
        payload = {"type": kind, "sequence_number": self.sequence, **fields}
        self.sequence += 1
        return payload

    def snapshot(self) -> dict[str, Any]:
        return self.response.model_dump(mode="json")

    def push(self, chunk: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if chunk.get("usage"):
            usage = chunk["usage"]
            self.usage = _usage(usage["prompt_tokens"], usage["completion_tokens"],
                                (usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            if delta.get("reasoning_content"):
                events += self._reasoning(delta["reasoning_content"])
            if delta.get("content"):
                events += self._text(delta["content"])
            for call in delta.get("tool_calls") or []:
                events += self._call(call)
            if choice.get("finish_reason"):
                self.finish_reason = choice["finish_reason"]
        return events

    def _open(self, item: OutputItem, tool_index: int | None = None) -> list[dict[str, Any]]:
        events = self._close()
        self.current = _OpenItem(len(self.response.output), item, tool_index=tool_index)
        self.response.output.append(item)
        events.append(self.event("response.output_item.added", output_index=self.current.index,
                                 item=item.model_dump(mode="json")))
        return events

    def _reasoning(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self.current is None or not isinstance(self.current.item, OutputReasoning):
            events = self._open(OutputReasoning(id=new_id("rs"), summary=[], status="in_progress"))
            events.append(self.event("response.reasoning_summary_part.added", item_id=self.current.item.id,
                                     output_index=self.current.index, summary_index=0,
                                     part=OutputSummary(text="").model_dump()))
        assert self.current is not None
        self.current.text += text
        return [*events, self.event("response.reasoning_summary_text.delta", item_id=self.current.item.id,
                                    output_index=self.current.index, summary_index=0, delta=text)]

    def _text(self, text: str) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        if self.current is None or not isinstance(self.current.item, OutputMessage):
            events = self._open_message()
        assert self.current is not None
        self.current.text += text
        return [*events, self.event("response.output_text.delta", item_id=self.current.item.id,
                                    output_index=self.current.index, content_index=0, delta=text, logprobs=[])]

    def _open_message(self) -> list[dict[str, Any]]:
        events = self._open(OutputMessage(id=new_id("msg"), status="in_progress", content=[]))
        assert self.current is not None
        return [*events, self.event("response.content_part.added", item_id=self.current.item.id,
                                    output_index=self.current.index, content_index=0,
                                    part=OutputText(text="").model_dump())]

    def _call(self, call: dict[str, Any]) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        function = call.get("function") or {}
        if call.get("id") is not None:  # a call's first delta: its id and name
            events = self._open(OutputFunctionCall(id=new_id("fc"), status="in_progress", arguments="",
                                                   call_id=call["id"], name=function.get("name", "")),
                                tool_index=call.get("index"))
        current = self.current
        if current is None or not isinstance(current.item, OutputFunctionCall) or not function.get("arguments"):
            return events
        current.text += function["arguments"]
        return [*events, self.event("response.function_call_arguments.delta", item_id=current.item.id,
                                    output_index=current.index, delta=function["arguments"])]

    def _close(self, status: str = "completed") -> list[dict[str, Any]]:
        """The done events of the open item, which is then final in the response's output."""
        current, self.current = self.current, None
        if current is None:
            return []
        where = {"item_id": current.item.id, "output_index": current.index}
        events: list[dict[str, Any]] = []
        item: OutputItem
        if isinstance(current.item, OutputReasoning):
            summary = OutputSummary(text=current.text)
            events += [self.event("response.reasoning_summary_text.done", **where, summary_index=0, text=current.text),
                       self.event("response.reasoning_summary_part.done", **where, summary_index=0,
                                  part=summary.model_dump())]
            item = OutputReasoning(id=current.item.id, summary=[summary], status="completed")
        elif isinstance(current.item, OutputMessage):
            part = OutputText(text=current.text)
            events += [self.event("response.output_text.done", **where, content_index=0, text=current.text,
                                  logprobs=[]),
                       self.event("response.content_part.done", **where, content_index=0, part=part.model_dump())]
            item = OutputMessage(id=current.item.id, status=status, content=[part])  # type: ignore[arg-type]
        else:
            events.append(self.event("response.function_call_arguments.done", **where, arguments=current.text))
            item = current.item.model_copy(update={"arguments": current.text, "status": status})
        self.response.output[current.index] = item
        events.append(self.event("response.output_item.done", output_index=current.index,
                                 item=item.model_dump(mode="json")))
        return events

    def finish(self) -> list[dict[str, Any]]:
        """The last item's done events and response.completed (response.incomplete when max_output_tokens cut it)."""
        incomplete = self.finish_reason == "length"
        # nothing said: an empty message, as the whole response has
        events = self._open_message() if not self.response.output else []
        events += self._close("incomplete" if incomplete else "completed")
        self.response.usage = self.usage
        _finished(self.response, incomplete)
        return [*events, self.event("response.incomplete" if incomplete else "response.completed",
                                    response=self.snapshot())]

    def failed(self, error: HearthError) -> dict[str, Any]:
        """response.failed: the generation broke after the stream began (a GPU fault, a worker gone)."""
        code = "server_error" if error.status >= 500 else "rate_limit_exceeded" if error.status == 429 else (
            error.code or error.type)
        self.response.status = "failed"
        self.response.error = ResponseError(code=code, message=error.message)
        self.response.usage = self.usage
        return self.event("response.failed", response=self.snapshot())
