"""Ollama's native API over Hearth's services: each request is translated into the internal chat, completion or
embeddings request, run by that service (no second generation path), and its result translated back.

Durations are measured here and reported in nanoseconds as Ollama does: `load_duration` is the wait for the
model's worker (loading it if needed), `prompt_eval_duration` runs from the job's submission to its first
sampled token and `eval_duration` from the first to the last, both from the worker's own token times
(ChoiceDone), read through `generation.job_observers`.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from fastapi import Request
from pydantic import BaseModel, ValidationError

from config.settings import Settings, parse_keep_alive
from models.registry import ModelEntry
from server import __version__
from server.errors import InvalidRequest, ModelNotFound, NotFound, param_name
from server.jobs import ChoiceDone, Job
from server.model_manager import ModelManager
from server.schemas.chat import ChatCompletion, ChatCompletionRequest
from server.schemas.completions import Completion, CompletionRequest
from server.schemas.embeddings import EmbeddingRequest
from server.schemas.ollama import (
    ChatRequest,
    ChatResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbedRequest,
    EmbedResponse,
    GenerateRequest,
    GenerateResponse,
    ListModel,
    ListResponse,
    Message,
    ProcessModel,
    ProcessResponse,
    ReplyMessage,
    ReplyToolCall,
    ShowRequest,
    ShowResponse,
    ToolCallFunction,
    VersionResponse,
)
from server.services import generation as gen
from server.services.chat import ChatService, thinking_markers
from server.services.completions import CompletionService
from server.services.embeddings import EmbeddingService
from server.services.ollama_models import ModelFacts, capabilities, model_facts

log = logging.getLogger("hearth.server")
R = TypeVar("R", bound=BaseModel)

IMAGES_IN_RAW = "raw mode does not accept images: send them without raw (the chat template places them)"
# Ollama's sampling defaults (api.DefaultOptions), applied where a request's options leave a parameter out.
DEFAULT_SAMPLING = {"temperature": 0.8, "top_k": 40, "top_p": 0.9}
# Options by the JSON type Ollama's Options.FromMap requires; any other option is ignored, as Ollama does.
_INT_OPTIONS = frozenset({"num_keep", "seed", "num_predict", "top_k", "repeat_last_n", "num_ctx", "num_batch",
                          "num_gpu", "main_gpu", "num_thread", "draft_num_predict", "mirostat"})
_FLOAT_OPTIONS = frozenset({"top_p", "min_p", "typical_p", "temperature", "repeat_penalty", "presence_penalty",
                            "frequency_penalty", "tfs_z", "mirostat_tau", "mirostat_eta"})
_BOOL_OPTIONS = frozenset({"numa", "low_vram", "use_mmap", "use_mlock", "penalize_newline", "vocab_only",
                           "logits_all", "embedding_only", "f16_kv"})
# Internal parameters named back as the Ollama options they came from, in 400s.
_OPTION_OF = {"temperature": "options.temperature", "top_p": "options.top_p", "top_k": "options.top_k",
              "min_p": "options.min_p", "seed": "options.seed", "stop": "options.stop",
              "max_completion_tokens": "options.num_predict", "max_tokens": "options.num_predict",
              "repetition_penalty": "options.repeat_penalty", "presence_penalty": "options.presence_penalty",
              "frequency_penalty": "options.frequency_penalty", "json_schema": "format", "response_format": "format",
              "reasoning_effort": "think", "input": "input"}
_ECHOED = 200  # characters of a requested model name repeated back in an error, as ModelNotFound
_FOREVER = timedelta(microseconds=(2**63 - 1) // 1000)  # Go's longest time.Duration: Ollama's "never expires"


def rfc3339(seconds: float | None = None) -> str:
    """A UTC time as Ollama writes it (`2024-07-22T20:33:28.123648Z`); now when seconds is None."""
    moment = datetime.now(UTC) if seconds is None else datetime.fromtimestamp(seconds, UTC)
    return moment.isoformat().replace("+00:00", "Z")


def not_found(name: str) -> NotFound:
    """Ollama's 404 for a model name, cut short past _ECHOED characters (the name comes from the client)."""
    shown = name if len(name) <= _ECHOED else name[:_ECHOED] + "..."
    return NotFound(f"model '{shown}' not found")


def _ns(seconds: float) -> int:
    return max(0, int(seconds * 1e9))


# -- requests in --------------------------------------------------------------------------------------------------
def parse_options(options: dict[str, Any] | None) -> dict[str, Any]:
    """The options Hearth reads, type-checked as Ollama checks them (a 400 naming the option); others dropped."""
    parsed: dict[str, Any] = {}
    for key, value in (options or {}).items():
        if value is None:
            continue
        number = isinstance(value, int | float) and not isinstance(value, bool)
        if key in _INT_OPTIONS:
            if not number or not math.isfinite(value):
                raise InvalidRequest(f'option "{key}" must be of type integer', param=f"options.{key}")
            parsed[key] = int(value)
        elif key in _FLOAT_OPTIONS:
            if not number or not math.isfinite(value):
                raise InvalidRequest(f'option "{key}" must be of type float32', param=f"options.{key}")
            parsed[key] = float(value)
        elif key in _BOOL_OPTIONS:
            if not isinstance(value, bool):
                raise InvalidRequest(f'option "{key}" must be of type boolean', param=f"options.{key}")
        elif key == "stop":
            if not isinstance(value, list) or not all(isinstance(s, str) for s in value):
                raise InvalidRequest('option "stop" must be of an array of strings', param="options.stop")
            parsed[key] = value
    return parsed


def _clamp(value: float, low: float, high: float) -> float:
    return min(max(value, low), high)


def sampling_fields(options: dict[str, Any] | None, max_tokens_field: str) -> dict[str, Any]:
    """An internal request's sampling fields from Ollama's options, with Ollama's defaults for what is left out.

    Values Ollama accepts but OpenAI's ranges do not are brought into range (a temperature of 5 samples as 2);
    num_predict of 0 or less (-1 never stops, -2 fills the context) runs to the context's end; num_ctx is the
    model's own and is not changed per request.
    """
    o = {**DEFAULT_SAMPLING, **parse_options(options)}
    top_p = o["top_p"]
    fields: dict[str, Any] = {
        "temperature": _clamp(o["temperature"], 0.0, 2.0),
        "top_p": top_p if 0.0 < top_p <= 1.0 else 1.0,
        "top_k": max(o["top_k"], 0),
        "min_p": _clamp(o.get("min_p", 0.0), 0.0, 1.0),
        "presence_penalty": _clamp(o.get("presence_penalty", 0.0), -2.0, 2.0),
        "frequency_penalty": _clamp(o.get("frequency_penalty", 0.0), -2.0, 2.0),
        "repetition_penalty": _clamp(o.get("repeat_penalty", 1.0), 1e-3, 2.0) if o.get("repeat_penalty", 1.0) > 0
        else 1.0,
        "stop": o.get("stop"),
        max_tokens_field: o["num_predict"] if o.get("num_predict", 0) > 0 else None,
    }
    seed = o.get("seed", -1)
    if seed != -1:  # -1 is Ollama's "random"
        fields["seed"] = seed
    return fields


def format_fields(value: str | dict[str, Any] | None) -> dict[str, Any]:
    """Ollama's `format` as the internal request's constraint: "json" is one JSON object, a dict its schema."""
    if value == "json":
        return {"response_format": {"type": "json_object"}}
    if isinstance(value, dict):
        return {"json_schema": value}
    return {}


def reasoning_effort(think: bool | str | None) -> str | None:
    """`think` as the chat request's switch: true is a medium effort, false none, unset the server's default."""
    if think is None:
        return None
    if isinstance(think, bool):
        return "medium" if think else "none"
    return "high" if think == "max" else think


def chat_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """Ollama's messages as OpenAI's: tool calls' arguments as JSON strings, a tool's name on its result."""
    out = []
    for message in messages:
        converted: dict[str, Any] = {"role": message.role, "content": with_images(message.content, message.images)}
        if message.tool_calls:
            converted["tool_calls"] = [
                {"id": call.id or gen.new_id("call"), "type": "function",
                 "function": {"name": call.function.name, "arguments": json.dumps(call.function.arguments)}}
                for call in message.tool_calls]
        if message.role == "tool":
            if message.tool_name:
                converted["name"] = message.tool_name
            if message.tool_call_id:
                converted["tool_call_id"] = message.tool_call_id
        out.append(converted)
    return out


def with_images(text: str, images: list[str] | None) -> str | list[dict[str, Any]]:
    """A message's content as OpenAI's: the text, or (with Ollama's base64 images) the images, then the text, as
    image_url parts (a model that cannot read images answers with a 400 naming the model)."""
    if not images:
        return text
    parts: list[dict[str, Any]] = [{"type": "image_url", "image_url": {"url": f"data:image/*;base64,{image}"}}
                                   for image in images]
    return parts + ([{"type": "text", "text": text}] if text else [])


def internal_request(cls: type[R], fields: dict[str, Any]) -> R:
    """The internal request, its validation errors as 400s naming the Ollama field they came from."""
    try:
        return cls.model_validate(fields)
    except ValidationError as error:
        first = max(error.errors(), key=lambda e: len(e.get("loc", ())))
        param = param_name(tuple(first.get("loc", ())))
        param = _OPTION_OF.get(param or "", param)
        message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
        raise InvalidRequest(f"invalid {param}: {message}" if param else message, param=param) from error


def arguments_object(arguments: str) -> dict[str, Any]:
    """A tool call's arguments as the object Ollama sends (constrained decoding makes them parse)."""
    try:
        value = json.loads(arguments) if arguments else {}
    except ValueError:
        log.warning("a tool call's arguments are not JSON: %.200r", arguments)
        return {}
    return value if isinstance(value, dict) else {"value": value}


def chat_logprobs(entries: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
    """Chat's `logprobs.content` entries already have Ollama's Logprob fields."""
    if entries is None:
        return None
    return [{"token": e["token"], "logprob": e["logprob"], "bytes": e.get("bytes"),
             "top_logprobs": e.get("top_logprobs") or None} for e in entries]


def completion_logprobs(lp: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The legacy completions logprobs object as Ollama's per-token list."""
    if lp is None:
        return None
    tops = lp.get("top_logprobs") or [None] * len(lp["tokens"])
    return [{"token": token, "logprob": logprob,
             "top_logprobs": [{"token": t, "logprob": v} for t, v in top.items()] if top else None}
            for token, logprob, top in zip(lp["tokens"], lp["token_logprobs"], tops, strict=False)]


# -- timing -------------------------------------------------------------------------------------------------------
@dataclass
class Timings:
    """A request's clock: its start, the wait for its model, and the worker's token times for its job."""

    started: float = field(default_factory=time.perf_counter)
    load_s: float = 0.0
    submitted: float | None = None
    first_token: float | None = None
    last_token: float | None = None

    def observe(self, job: Job) -> None:
        """generation.job_observers' callback: note the submission, then each choice's token times."""
        self.submitted = time.perf_counter()
        emit = job.emit

        def timed(event: Any) -> None:
            if isinstance(event, ChoiceDone) and event.first_token_at is not None:
                self.first_token = min(self.first_token or event.first_token_at, event.first_token_at)
                last = event.last_token_at or event.first_token_at
                self.last_token = max(self.last_token or last, last)
            emit(event)

        job.emit = timed  # type: ignore[method-assign]

    @contextmanager
    def watching(self) -> Iterator[None]:
        """Observe the jobs submitted inside the block."""
        token = gen.job_observers.set((*gen.job_observers.get(), self.observe))
        try:
            yield
        finally:
            gen.job_observers.reset(token)

    def metrics(self, prompt_tokens: int, eval_tokens: int) -> dict[str, int]:
        first = self.first_token if self.first_token is not None else time.perf_counter()
        prompt_s = first - self.submitted if self.submitted is not None else 0.0
        eval_s = (self.last_token - self.first_token) if self.first_token is not None and self.last_token else 0.0
        return {"total_duration": _ns(time.perf_counter() - self.started), "load_duration": _ns(self.load_s),
                "prompt_eval_count": prompt_tokens, "prompt_eval_duration": _ns(prompt_s),
                "eval_count": eval_tokens, "eval_duration": _ns(eval_s)}


# -- the service --------------------------------------------------------------------------------------------------
class OllamaService:
    """Answers Ollama's API through the chat, completion and embeddings services and the model manager."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    async def _entry(self, name: str) -> ModelEntry:
        if not name:
            raise InvalidRequest("model is required", param="model")
        entry = await asyncio.to_thread(self.manager.registry.lookup, name)
        if entry is None:
            raise not_found(name)
        return entry

    async def _worker(self, name: str, kind: str, keep_alive: str | float | None, action: str,
                      timings: Timings) -> Any:
        """The model's ready worker, its wait measured as load_duration; Ollama's messages for a wrong kind."""
        entry = await self._entry(name)
        if entry.kind != kind:
            raise InvalidRequest(f'"{name}" does not support {action}', param="model")
        started = time.perf_counter()
        try:
            _, worker = await self.manager.worker_for(name, kind=kind, keep_alive=keep_alive)  # type: ignore[call-overload]
        except ModelNotFound as error:  # removed from the store since the lookup
            raise not_found(name) from error
        timings.load_s = time.perf_counter() - started
        return worker

    async def _load_or_unload(self, name: str, kind: str, keep_alive: str | float | None, action: str,
                              timings: Timings) -> str:
        """Ollama's empty request: load the model ("load"), or with keep_alive 0 let it go ("unload")."""
        try:
            seconds = parse_keep_alive(keep_alive)
        except ValueError as error:
            raise InvalidRequest(str(error), param="keep_alive") from error
        if seconds == 0:
            entry = await self._entry(name)
            loaded = {e.key for n in self.manager.workers()
                      if (e := await asyncio.to_thread(self.manager.registry.lookup, n)) is not None}
            if entry.key in loaded:  # keep_alive 0 unloads it once this request ends
                await self._worker(name, kind, keep_alive, action, timings)
            return "unload"
        await self._worker(name, kind, keep_alive, action, timings)
        return "load"

    def _check_think(self, name: str, worker: Any, think: bool | str | None) -> None:
        if think not in (None, False) and thinking_markers(worker.model.tokenizer) is None:
            raise InvalidRequest(f'"{name}" does not support thinking', param="think")

    # -- /api/chat ------------------------------------------------------------------------------------------------
    async def chat(self, body: ChatRequest, http: Request) -> ChatResponse | AsyncIterator[dict[str, Any]]:
        timings = Timings()
        messages = chat_messages(body.messages)
        if not body.messages:
            reason = await self._load_or_unload(body.model, "text", body.keep_alive, "chat", timings)
            return ChatResponse(model=body.model, created_at=rfc3339(), message=ReplyMessage(), done=True,
                                done_reason=reason)
        worker = await self._worker(body.model, "text", body.keep_alive, "chat", timings)
        self._check_think(body.model, worker, body.think)
        stream = body.stream is not False
        request = internal_request(ChatCompletionRequest, {
            "model": body.model, "messages": messages, "stream": stream,
            "stream_options": {"include_usage": True} if stream else None,
            "tools": [tool.model_dump(exclude_none=True) for tool in body.tools] if body.tools else None,
            "reasoning_effort": reasoning_effort(body.think), "keep_alive": body.keep_alive,
            "logprobs": bool(body.logprobs), "top_logprobs": body.top_logprobs if body.logprobs else None,
            **sampling_fields(body.options, "max_completion_tokens"), **format_fields(body.format)})
        with timings.watching():
            result = await ChatService(self.manager, self.settings).create(request, http)
        if isinstance(result, ChatCompletion):
            return self._chat_reply(body.model, result, timings)
        return self._chat_stream(body.model, result, timings)

    @staticmethod
    def _chat_reply(name: str, completion: ChatCompletion, timings: Timings) -> ChatResponse:
        choice = completion.choices[0]
        calls = [ReplyToolCall(id=call.id, function=ToolCallFunction(
            index=i, name=call.function.name, arguments=arguments_object(call.function.arguments)))
            for i, call in enumerate(choice.message.tool_calls or [])]
        message = ReplyMessage(content=choice.message.content or "", thinking=choice.message.reasoning_content or None,
                               tool_calls=calls or None)
        logprobs = chat_logprobs([e.model_dump(mode="json") for e in choice.logprobs.content or []]
                                 if choice.logprobs is not None else None)
        usage = completion.usage
        return ChatResponse(model=name, created_at=rfc3339(), message=message, done=True,
                            done_reason="length" if choice.finish_reason == "length" else "stop", logprobs=logprobs,
                            **timings.metrics(usage.prompt_tokens, usage.completion_tokens))

    @staticmethod
    async def _chat_stream(name: str, chunks: AsyncIterator[dict[str, Any]],
                           timings: Timings) -> AsyncIterator[dict[str, Any]]:
        """Ollama's chat lines from the chat service's chunks: text and thinking as they come, each tool call
        whole (its arguments an object) once its arguments are complete, then the done line."""
        calls: dict[int, dict[str, str]] = {}
        reason, usage = "stop", {"prompt_tokens": 0, "completion_tokens": 0}
        try:
            async for chunk in chunks:
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices", []):
                    delta = choice.get("delta") or {}
                    for piece in delta.get("tool_calls") or []:
                        call = calls.setdefault(piece["index"], {"id": "", "name": "", "arguments": ""})
                        call["id"] = piece.get("id") or call["id"]
                        call["name"] = piece["function"].get("name") or call["name"]
                        call["arguments"] += piece["function"].get("arguments") or ""
                    content, thinking = delta.get("content") or "", delta.get("reasoning_content")
                    logprobs = chat_logprobs((choice.get("logprobs") or {}).get("content"))
                    if content or thinking or logprobs:
                        message = ReplyMessage(content=content, thinking=thinking)
                        yield _line(ChatResponse(model=name, created_at=rfc3339(), message=message, done=False,
                                                 logprobs=logprobs))
                    if choice.get("finish_reason") == "length":
                        reason = "length"
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        if calls:
            tool_calls = [ReplyToolCall(id=c["id"] or None, function=ToolCallFunction(
                index=i, name=c["name"], arguments=arguments_object(c["arguments"])))
                for i, c in sorted(calls.items())]
            yield _line(ChatResponse(model=name, created_at=rfc3339(), message=ReplyMessage(tool_calls=tool_calls),
                                     done=False))
        yield _line(ChatResponse(model=name, created_at=rfc3339(), message=ReplyMessage(), done=True,
                                 done_reason=reason,
                                 **timings.metrics(usage["prompt_tokens"], usage["completion_tokens"])))

    # -- /api/generate --------------------------------------------------------------------------------------------
    async def generate(self, body: GenerateRequest, http: Request) -> GenerateResponse | AsyncIterator[dict[str, Any]]:
        timings = Timings()
        if body.images and body.raw:
            raise InvalidRequest(IMAGES_IN_RAW, param="images")
        if body.raw and (body.template or body.system or body.context):
            raise InvalidRequest("raw mode does not support template, system, or context", param="raw")
        if body.template:
            raise InvalidRequest("template is not supported: Hearth renders the model's own chat template (send "
                                 "raw: true with a prompt templated by hand)", param="template")
        if body.context:
            raise InvalidRequest("context is not supported: send the conversation to /api/chat", param="context")
        if body.suffix:
            raise InvalidRequest(f'"{body.model}" does not support insert', param="suffix")
        if not body.prompt:
            reason = await self._load_or_unload(body.model, "text", body.keep_alive, "generate", timings)
            return GenerateResponse(model=body.model, created_at=rfc3339(), response="", done=True,
                                    done_reason=reason)
        worker = await self._worker(body.model, "text", body.keep_alive, "generate", timings)
        stream = body.stream is not False
        common = {"model": body.model, "stream": stream, "keep_alive": body.keep_alive,
                  "stream_options": {"include_usage": True} if stream else None, **format_fields(body.format)}
        if body.raw:
            request: BaseModel = internal_request(CompletionRequest, {
                **common, "prompt": body.prompt, "logprobs": body.top_logprobs or 0 if body.logprobs else None,
                **sampling_fields(body.options, "max_tokens")})
            service: Any = CompletionService(self.manager, self.settings)
        else:
            self._check_think(body.model, worker, body.think)
            messages = ([{"role": "system", "content": body.system}] if body.system else []) + [
                {"role": "user", "content": with_images(body.prompt, body.images)}]
            request = internal_request(ChatCompletionRequest, {
                **common, "messages": messages, "reasoning_effort": reasoning_effort(body.think),
                "logprobs": bool(body.logprobs), "top_logprobs": body.top_logprobs if body.logprobs else None,
                **sampling_fields(body.options, "max_completion_tokens")})
            service = ChatService(self.manager, self.settings)
        with timings.watching():
            result = await service.create(request, http)
        if isinstance(result, ChatCompletion | Completion):
            return self._generate_reply(body.model, result, timings)
        return self._generate_stream(body.model, result, timings)

    @staticmethod
    def _generate_reply(name: str, result: ChatCompletion | Completion, timings: Timings) -> GenerateResponse:
        choice = result.choices[0]
        if isinstance(result, ChatCompletion):
            text, thinking = result.choices[0].message.content or "", result.choices[0].message.reasoning_content
            lp = result.choices[0].logprobs
            logprobs = chat_logprobs([e.model_dump(mode="json") for e in lp.content or []] if lp else None)
        else:
            text, thinking = result.choices[0].text, None
            lp_raw = result.choices[0].logprobs
            logprobs = completion_logprobs(lp_raw.model_dump(mode="json") if lp_raw is not None else None)
        usage = result.usage
        assert usage is not None
        return GenerateResponse(model=name, created_at=rfc3339(), response=text, thinking=thinking or None, done=True,
                                done_reason="length" if choice.finish_reason == "length" else "stop",
                                logprobs=logprobs, **timings.metrics(usage.prompt_tokens, usage.completion_tokens))

    @staticmethod
    async def _generate_stream(name: str, chunks: AsyncIterator[dict[str, Any]],
                               timings: Timings) -> AsyncIterator[dict[str, Any]]:
        """Ollama's generate lines from the chat or completion service's chunks, then the done line."""
        reason, usage = "stop", {"prompt_tokens": 0, "completion_tokens": 0}
        try:
            async for chunk in chunks:
                usage = chunk.get("usage") or usage
                for choice in chunk.get("choices", []):
                    if "delta" in choice:  # a chat chunk
                        delta = choice["delta"]
                        text, thinking = delta.get("content") or "", delta.get("reasoning_content")
                        logprobs = chat_logprobs((choice.get("logprobs") or {}).get("content"))
                    else:
                        text, thinking = choice.get("text") or "", None
                        logprobs = completion_logprobs(choice.get("logprobs"))
                    if text or thinking or logprobs:
                        yield _line(GenerateResponse(model=name, created_at=rfc3339(), response=text,
                                                     thinking=thinking, done=False, logprobs=logprobs))
                    if choice.get("finish_reason") == "length":
                        reason = "length"
        finally:
            await chunks.aclose()  # type: ignore[attr-defined]
        yield _line(GenerateResponse(model=name, created_at=rfc3339(), response="", done=True, done_reason=reason,
                                     **timings.metrics(usage["prompt_tokens"], usage["completion_tokens"])))

    # -- /api/embed, /api/embeddings ------------------------------------------------------------------------------
    async def embed(self, body: EmbedRequest) -> EmbedResponse:
        timings = Timings()
        parse_options(body.options)
        await self._worker(body.model, "embedding", body.keep_alive, "embeddings", timings)
        inputs = ([body.input] if body.input else []) if isinstance(body.input, str) else list(body.input)
        if not inputs:  # Ollama's empty input loads the model and embeds nothing
            return EmbedResponse(model=body.model, embeddings=[])
        request = internal_request(EmbeddingRequest, {
            "model": body.model, "input": inputs, "truncate": body.truncate is not False,
            "dimensions": body.dimensions, "keep_alive": body.keep_alive})
        result = await EmbeddingService(self.manager, self.settings).create(request)
        return EmbedResponse(model=body.model, embeddings=[list(d.embedding) for d in result.data],  # type: ignore[arg-type]
                             total_duration=_ns(time.perf_counter() - timings.started),
                             load_duration=_ns(timings.load_s), prompt_eval_count=result.usage.prompt_tokens)

    async def embeddings(self, body: EmbeddingsRequest) -> EmbeddingsResponse:
        parse_options(body.options)
        await self._worker(body.model, "embedding", body.keep_alive, "embeddings", Timings())
        if not body.prompt:
            return EmbeddingsResponse(embedding=[])
        request = internal_request(EmbeddingRequest, {"model": body.model, "input": body.prompt,
                                                      "keep_alive": body.keep_alive})
        result = await EmbeddingService(self.manager, self.settings).create(request)
        return EmbeddingsResponse(embedding=list(result.data[0].embedding))  # type: ignore[arg-type]

    # -- /api/tags, /api/show, /api/ps, /api/version --------------------------------------------------------------
    async def tags(self) -> ListResponse:
        """The chat and embedding models (configured ones and the Ollama store's), aliases left out."""
        entries = await asyncio.to_thread(self.manager.registry.list)
        models, seen = [], set()
        for entry in entries:
            if entry.alias_of is not None or entry.kind not in ("text", "embedding") or entry.id in seen:
                continue
            seen.add(entry.id)
            facts = await asyncio.to_thread(model_facts, entry)
            models.append(ListModel(name=entry.id, model=entry.id, modified_at=rfc3339(facts.modified),
                                    size=facts.size, digest=facts.digest, details=facts.details))
        return ListResponse(models=models)

    async def show(self, body: ShowRequest) -> ShowResponse:
        name = body.model or body.name
        entry = await self._entry(name)
        facts = await asyncio.to_thread(model_facts, entry)
        template = facts.template
        loaded = self._loaded_worker(entry)
        if template is None and entry.kind == "text":
            if loaded is not None and getattr(loaded, "chat_template", None) is not None:
                template = loaded.chat_template.source
            else:
                from models.text.chat_template import GEMMA_TEMPLATE

                template = GEMMA_TEMPLATE
        info = dict(facts.model_info)
        arch = str(info.get("general.architecture") or facts.details.family or "")
        info.setdefault("general.architecture", arch)
        context = getattr(getattr(loaded, "model", None), "context_length", None) or entry.context_length
        if context and arch:
            info.setdefault(f"{arch}.context_length", context)
        thinks = loaded is not None and entry.kind == "text" and thinking_markers(loaded.model.tokenizer) is not None
        source = facts.path or entry.source
        modelfile = f"# Modelfile generated by Hearth\n# FROM {name}\n\nFROM {source}\n"
        if template:
            modelfile += f'TEMPLATE """{template}"""\n'
        return ShowResponse(modelfile=modelfile, parameters="", template=template or "", details=facts.details,
                            model_info=info, capabilities=capabilities(entry, thinks),
                            modified_at=rfc3339(facts.modified))

    def _loaded_worker(self, entry: ModelEntry) -> Any:
        """The ready worker holding the entry's model, if one is loaded (looked up by key: names may differ)."""
        for name, worker in self.manager.workers().items():
            other = self.manager.registry.lookup(name) if name != entry.id else entry
            if other is not None and other.key == entry.key and worker.state == "ready":
                return worker
        return None

    async def ps(self) -> ProcessResponse:
        """The loaded chat and embedding models, longest to stay first; size is the model file's bytes."""
        models = []
        now_wall, now = datetime.now(UTC), time.monotonic()
        for name, worker in self.manager.workers().items():
            if worker.state != "ready" or worker.kind not in ("text", "embedding"):
                continue
            entry = await asyncio.to_thread(self.manager.registry.lookup, name)
            facts = await asyncio.to_thread(model_facts, entry) if entry is not None else ModelFacts()
            keep = self.manager.keep_alive_of(worker)
            expires = _FOREVER if keep is None else timedelta(seconds=max(0.0, worker.last_used + keep - now))
            context = getattr(worker.model, "context_length", None) or getattr(worker.model, "max_tokens", None)
            models.append(ProcessModel(name=name, model=name, size=facts.size, digest=facts.digest,
                                       details=facts.details, expires_at=(now_wall + expires).isoformat()
                                       .replace("+00:00", "Z"), size_vram=facts.size, context_length=context))
        models.sort(key=lambda m: m.expires_at, reverse=True)
        return ProcessResponse(models=models)

    @staticmethod
    def version() -> VersionResponse:
        return VersionResponse(version=__version__)


def _line(response: BaseModel) -> dict[str, Any]:
    """A stream line: fields Ollama leaves out when empty are left out."""
    return response.model_dump(mode="json", exclude_none=True)
