"""Chat completions: messages through the model's chat template, then generation, whole or streamed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from config.settings import Settings
from models.text.chat_template import ChatTemplateError
from server.errors import InvalidRequest
from server.jobs import ChoiceDone, TextDelta
from server.model_manager import ModelManager
from server.protocols import ChatHandler, TextTokenizer
from server.schemas.chat import (
    ChatCompletion,
    ChatCompletionChoice,
    ChatCompletionChunk,
    ChatCompletionMessage,
    ChatCompletionRequest,
    ChoiceLogprobs,
    ChunkChoice,
    DeltaMessage,
)
from server.schemas.common import Usage
from server.services import generation as gen
from server.services.constraints import build_constraint, output_grammar
from server.text_stream import THINK_OPEN, ReasoningSplitter, split_reasoning

log = logging.getLogger("hearth.server")


class ChatService:
    """Turns chat requests into jobs for the model's worker and its events into OpenAI responses."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    def _prompt_ids(self, worker: ChatHandler, request: ChatCompletionRequest) -> list[int]:
        template = worker.chat_template
        assert template is not None
        tools = [tool.model_dump(exclude_none=True) for tool in request.tools or []]
        try:
            text = template.render([m.for_template() for m in request.messages], tools=tools or None,
                                   enable_thinking=request.enable_thinking)
        except ChatTemplateError as error:
            raise InvalidRequest(str(error), param="messages") from error
        # A template that writes the BOS token itself must not get a second one from the tokenizer.
        add_bos = not (template.bos_token and text.startswith(template.bos_token))
        return worker.model.tokenizer.encode(text, add_bos=add_bos)

    async def create(self, request: ChatCompletionRequest, http: Request) -> ChatCompletion | AsyncIterator[dict]:
        """The whole completion, or (with stream) an iterator of chunk payloads for the SSE helper."""
        gen.check_choices(1, request.n or 1, self.settings)
        entry, worker = await self.manager.worker_for(request.model, keep_alive=request.keep_alive)
        model = worker.model
        gen.check_limits(request, self.settings, model.vocab_size)
        prompt_ids = await self.manager.preparation.run(self._prompt_ids, worker, request)
        thinks = _has_thinking_channel(model.tokenizer)
        wanted = output_grammar(request.response_format, request.json_schema, request.grammar,
                                thinks=thinks and request.enable_thinking)
        constraint = None if wanted is None else await self.manager.preparation.run(
            build_constraint, model.tokenizer, wanted)
        max_tokens = gen.budget(len(prompt_ids), request.max_new_tokens, model.context_length, self.settings,
                                "messages")
        n = request.n or 1
        job = gen.make_job(request, [prompt_ids], [max_tokens], n, request.alternatives(), constraint)
        if request.user:
            log.info("chat request for %s from user %r", entry.id, request.user)
        handle = gen.submit(worker, job, self.settings)
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return self._stream(handle, entry.id, n, len(prompt_ids), include_usage, request.logprobs or False,
                                thinks)
        results = await gen.until_disconnected(http, gen.collect(handle, n))
        choices = []
        for i, r in enumerate(results):
            reasoning, content = split_reasoning(r.text) if thinks else (None, r.text)
            choices.append(ChatCompletionChoice(
                index=i, message=ChatCompletionMessage(content=content, reasoning_content=reasoning),
                finish_reason=r.finish_reason,  # type: ignore[arg-type]
                logprobs=ChoiceLogprobs(content=gen.chat_logprobs(r.tokens)) if request.logprobs else None,
            ))
        completion_tokens = sum(r.completion_tokens for r in results)
        return ChatCompletion(
            id=gen.new_id("chatcmpl"), created=gen.now(), model=entry.id, choices=choices,
            system_fingerprint=gen.SYSTEM_FINGERPRINT,
            usage=Usage(prompt_tokens=len(prompt_ids), completion_tokens=completion_tokens,
                        total_tokens=len(prompt_ids) + completion_tokens),
        )

    async def _stream(self, handle: gen.JobHandle, model: str, n: int, prompt_tokens: int, include_usage: bool,
                      logprobs: bool, thinks: bool = False) -> AsyncIterator[dict[str, Any]]:
        """Chunks as OpenAI sends them: the role first, content deltas, a finish chunk per choice, then usage."""
        chunk_id, created = gen.new_id("chatcmpl"), gen.now()
        exclude = None if include_usage else {"usage"}

        def chunk(choices: list[ChunkChoice], usage: Usage | None = None) -> dict[str, Any]:
            payload = ChatCompletionChunk(id=chunk_id, created=created, model=model, choices=choices, usage=usage,
                                          system_fingerprint=gen.SYSTEM_FINGERPRINT)
            return payload.model_dump(mode="json", exclude=exclude)

        completion_tokens = 0
        splitters = [ReasoningSplitter() for _ in range(n)] if thinks else None
        async with handle:
            for i in range(n):
                yield chunk([ChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))])
            async for event in handle.events():
                if isinstance(event, TextDelta):
                    lp = ChoiceLogprobs(content=gen.chat_logprobs(event.tokens)) if logprobs else None
                    if splitters is None:
                        yield chunk([ChunkChoice(index=event.index, delta=DeltaMessage(content=event.text),
                                                 logprobs=lp)])
                        continue
                    reasoning, content = splitters[event.index].push(event.text)
                    if reasoning or content or lp:  # text held back (a marker's first part) waits for the next
                        delta = DeltaMessage(content=content or None, reasoning_content=reasoning or None)
                        yield chunk([ChunkChoice(index=event.index, delta=delta, logprobs=lp)])
                elif isinstance(event, ChoiceDone):
                    if splitters:
                        reasoning, content = splitters[event.index].flush()
                        if reasoning or content:
                            delta = DeltaMessage(content=content or None, reasoning_content=reasoning or None)
                            yield chunk([ChunkChoice(index=event.index, delta=delta)])
                    completion_tokens += event.completion_tokens
                    yield chunk([ChunkChoice(index=event.index, delta=DeltaMessage(),
                                             finish_reason=event.finish_reason)])  # type: ignore[arg-type]
        if include_usage:
            yield chunk([], Usage(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
                                  total_tokens=prompt_tokens + completion_tokens))


def _has_thinking_channel(tokenizer: TextTokenizer) -> bool:
    """Whether the model's vocabulary has a thinking channel marker (Gemma 4): its replies are split into
    reasoning_content and content."""
    try:
        ids = tokenizer.encode(THINK_OPEN, add_bos=False)
    except (AttributeError, TypeError, ValueError):
        return False
    return len(ids) == 1 and tokenizer.id_to_piece(ids[0]) == THINK_OPEN
