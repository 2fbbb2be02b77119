"""Prompt completion (/v1/completions): the shipped Gemma 3 270M is a base model, so this is its natural API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request

from config.settings import Settings
from server.jobs import ChoiceDone, TextDelta, TokenInfo
from server.model_manager import ModelManager
from server.protocols import ChatHandler
from server.schemas.common import Usage
from server.schemas.completions import Completion, CompletionChoice, CompletionLogprobs, CompletionRequest
from server.services import generation as gen
from server.services.constraints import build_constraint, output_grammar


def completion_logprobs(tokens: list[TokenInfo], offset: int) -> CompletionLogprobs:
    """The legacy logprobs object; text_offset counts characters from the start of the choice's text."""
    offsets = []
    for token in tokens:
        offsets.append(offset)
        offset += len(token.text)
    return CompletionLogprobs(
        tokens=[t.text for t in tokens],
        token_logprobs=[t.logprob for t in tokens],
        top_logprobs=[{text: lp for text, _, lp in t.top} for t in tokens],
        text_offset=offsets,
    )


class CompletionService:
    """Turns completion requests into jobs for the model's worker and its events into OpenAI responses."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    @staticmethod
    def _encode(worker: ChatHandler, prompts: list[str | list[int]]) -> list[list[int]]:
        tokenizer = worker.model.tokenizer
        encoded = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, str):
                encoded.append(tokenizer.encode(prompt, add_bos=True))
            else:
                gen.check_token_ids(prompt, worker.model.vocab_size, "prompt" if len(prompts) == 1 else f"prompt[{i}]")
                encoded.append(list(prompt))
        return encoded

    @staticmethod
    def _prompt_text(worker: ChatHandler, prompt: str | list[int]) -> str:
        return prompt if isinstance(prompt, str) else worker.model.tokenizer.decode(prompt)

    async def create(self, request: CompletionRequest, http: Request) -> Completion | AsyncIterator[dict]:
        """The whole completion, or (with stream) an iterator of chunk payloads for the SSE helper."""
        prompts = request.prompts()
        gen.check_choices(len(prompts), request.n or 1, self.settings)
        entry, worker = await self.manager.worker_for(request.model, keep_alive=request.keep_alive)
        model = worker.model
        gen.check_limits(request, self.settings, model.vocab_size)
        prompt_ids = await self.manager.preparation.run(self._encode, worker, prompts)
        wanted = output_grammar(request.response_format, request.json_schema, request.grammar, thinks=False)
        constraint = None if wanted is None else await self.manager.preparation.run(
            build_constraint, model.tokenizer, wanted)
        budgets = [gen.budget(len(ids), request.max_tokens, model.context_length, self.settings, "prompt")
                   for ids in prompt_ids]
        n = request.n or 1
        job = gen.make_job(request, prompt_ids, budgets, n, request.alternatives(), constraint)
        echoes = [self._prompt_text(worker, p) if request.echo else "" for p in prompts]
        prompt_tokens = sum(len(ids) for ids in prompt_ids)
        handle = gen.submit(worker, job, self.settings)
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return self._stream(handle, entry.id, n, echoes, prompt_tokens, include_usage, request.logprobs)
        results = await gen.until_disconnected(http, gen.collect(handle, len(job.choices)))
        choices = []
        for i, result in enumerate(results):
            echo = echoes[i // n]
            logprobs = completion_logprobs(result.tokens, len(echo)) if request.logprobs is not None else None
            choices.append(CompletionChoice(text=echo + result.text, index=i, logprobs=logprobs,
                                            finish_reason=result.finish_reason))  # type: ignore[arg-type]
        completion_tokens = sum(r.completion_tokens for r in results)
        return Completion(
            id=gen.new_id("cmpl"), created=gen.now(), model=entry.id, choices=choices,
            system_fingerprint=gen.SYSTEM_FINGERPRINT,
            usage=gen.usage(prompt_tokens, completion_tokens,
                            gen.cached_tokens({i: r.cached_tokens for i, r in enumerate(results)}, n)),
        )

    async def _stream(self, handle: gen.JobHandle, model: str, n: int, echoes: list[str], prompt_tokens: int,
                      include_usage: bool, logprobs: int | None) -> AsyncIterator[dict[str, Any]]:
        """Chunks as OpenAI sends them: text deltas per choice, a finish chunk per choice, then usage."""
        chunk_id, created = gen.new_id("cmpl"), gen.now()
        exclude = None if include_usage else {"usage"}
        offsets = [len(echoes[i // n]) for i in range(n * len(echoes))]

        def chunk(choices: list[CompletionChoice], usage: Usage | None = None) -> dict[str, Any]:
            payload = Completion(id=chunk_id, created=created, model=model, choices=choices, usage=usage,
                                 system_fingerprint=gen.SYSTEM_FINGERPRINT)
            return payload.model_dump(mode="json", exclude=exclude)

        completion_tokens = 0
        cached: dict[int, int] = {}
        async with handle:
            for i, echo in enumerate(echoes[p] for p in range(len(echoes)) for _ in range(n)):
                if echo:
                    yield chunk([CompletionChoice(text=echo, index=i)])
            async for event in handle.events():
                if isinstance(event, TextDelta):
                    lp = completion_logprobs(event.tokens, offsets[event.index]) if logprobs is not None else None
                    offsets[event.index] += len(event.text)
                    yield chunk([CompletionChoice(text=event.text, index=event.index, logprobs=lp)])
                elif isinstance(event, ChoiceDone):
                    completion_tokens += event.completion_tokens
                    cached[event.index] = event.cached_tokens
                    yield chunk([CompletionChoice(text="", index=event.index,
                                                  finish_reason=event.finish_reason)])  # type: ignore[arg-type]
        if include_usage:
            yield chunk([], gen.usage(prompt_tokens, completion_tokens, gen.cached_tokens(cached, n)))
