"""Chat completions: messages through the model's chat template, then generation, whole or streamed."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from fastapi import Request

from config.settings import Settings
from models.audio_encoder import AudioEncoder
from models.text import grammar
from models.text.chat_template import ChatTemplateError
from models.text.grammar import GrammarError
from models.text.images import ImageMarkers, pixel_digest
from models.text.tool_calls import ContentDelta, ToolCallFormat, format_for
from models.vision import ImageEncoder
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
    DeltaFunctionCall,
    DeltaMessage,
    DeltaToolCall,
    ToolCall,
    ToolCallFunction,
)
from server.schemas.common import Usage
from server.services import audio_inputs, images
from server.services import generation as gen
from server.services.constraints import OutputGrammar, build_constraint, output_grammar, with_thoughts
from server.services.images import PromptImage
from server.text_stream import THINKING_MARKERS, ReasoningSplitter, ThinkingMarkers, split_reasoning

log = logging.getLogger("hearth.server")


class ChatService:
    """Turns chat requests into jobs for the model's worker and its events into OpenAI responses."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    def _prompt(self, worker: ChatHandler, request: ChatCompletionRequest, tool_format: ToolCallFormat | None = None,
                ) -> tuple[list[int], list[PromptImage | audio_inputs.PromptAudio]]:
        """The prompt's token ids (an image's or clip's rows counted as its soft tokens) and its images and audio
        clips in prompt order, decoded and preprocessed (server/services/images.py, audio_inputs.py). tool_format:
        the model's (_tool_format), where the caller has it."""
        template = worker.chat_template
        assert template is not None
        clips = audio_parts(request)
        audio_encoder, audio_markers = _audio_input(worker, request.model, clips)
        heard = audio_inputs.prepare(clips, audio_encoder, self.settings.limits) if clips and audio_encoder else []
        parts = image_parts(request)
        encoder, markers = _image_input(worker, request.model, parts)
        prepared = images.prepare(parts, encoder, self.settings.limits) if parts and encoder else []
        # tool_choice "none": the tools are not offered at all, so the model cannot call one
        offered = request.tools if request.tool_mode != "none" else None
        tools = [tool.model_dump(exclude_none=True) for tool in offered or []]
        try:
            text = template.render([m.for_template() for m in request.messages], tools=tools or None,
                                   tool_syntax=tool_format or _tool_format(worker),
                                   enable_thinking=request.enable_thinking)
        except ChatTemplateError as error:
            raise InvalidRequest(str(error), param="messages") from error
        # A template that writes the BOS token itself must not get a second one from the tokenizer.
        add_bos = not (template.bos_token and text.startswith(template.bos_token))
        if not heard:
            if not prepared:
                return worker.model.tokenizer.encode(text, add_bos=add_bos), []
            assert encoder is not None and markers is not None
            return images.prompt_with_images(text, prepared, markers, encoder, worker.model.tokenizer, add_bos)
        assert audio_markers is not None
        kinds = [(audio_markers, [clip.soft_tokens for clip in heard])]
        if prepared:
            assert encoder is not None and markers is not None
            kinds.append((markers, [encoder.soft_tokens(pixels) for pixels, _ in prepared]))
        ids, starts = images.expand_prompt(text, kinds, worker.model.tokenizer, add_bos)
        media: list[PromptImage | audio_inputs.PromptAudio] = [
            audio_inputs.PromptAudio(start, clip.features, pixel_digest(clip.features))
            for start, clip in zip(starts[0], heard, strict=True)]
        if prepared:
            media += [PromptImage(start, pixels, digest)
                      for start, (pixels, digest) in zip(starts[1], prepared, strict=True)]
        return ids, sorted(media, key=lambda m: m.start)

    async def prompt_tokens(self, request: ChatCompletionRequest) -> int:
        """How many tokens the request's messages and tools take once rendered, as create would send them."""
        _, worker = await self.manager.worker_for(request.model, keep_alive=request.keep_alive)
        ids, _ = await self.manager.preparation.run(self._prompt, worker, request)
        return len(ids)

    async def create(self, request: ChatCompletionRequest, http: Request) -> ChatCompletion | AsyncIterator[dict]:
        """The whole completion, or (with stream) an iterator of chunk payloads for the SSE helper."""
        gen.check_choices(1, request.n or 1, self.settings)
        entry, worker = await self.manager.worker_for(request.model, keep_alive=request.keep_alive)
        model = worker.model
        gen.check_limits(request, self.settings, model.vocab_size)
        model_format = _tool_format(worker)  # calls in the messages are rendered in it even without tools
        prompt_ids, prompt_images = await self.manager.preparation.run(self._prompt, worker, request, model_format)
        thinking = thinking_markers(model.tokenizer)
        tool_format = model_format if request.tool_mode != "none" else None
        tools = [tool.model_dump(exclude_none=True) for tool in request.tools or []] if tool_format else []
        wanted = output_grammar(request.response_format, request.json_schema, request.grammar,
                                thinks=thinking is not None and request.enable_thinking,
                                markers=thinking or THINKING_MARKERS[0])
        if tool_format is not None:
            if wanted is not None:
                raise InvalidRequest(f"{wanted.param} and tools both constrain the reply; send tool_choice \"none\" "
                                     "or leave one of them out.", param=wanted.param)
            wanted = _tool_grammar(tool_format, request, tools, thinking if request.enable_thinking else None)
        constraint = None if wanted is None else await self.manager.preparation.run(
            build_constraint, model.tokenizer, wanted)
        max_tokens = gen.budget(len(prompt_ids), request.max_new_tokens, model.context_length, self.settings,
                                "messages")
        n = request.n or 1
        job = gen.make_job(request, [prompt_ids], [max_tokens], n, request.alternatives(), constraint, prompt_images)
        if tool_format is not None:  # pieces that begin the tool's answer end the reply (they are not sent)
            markers = tool_format.stop_markers
            job.stop_ids = frozenset(m.token for m in markers if m.token is not None)
            job.stop = (*job.stop, *(m.text for m in markers if m.token is None))
            job.shown_ids = frozenset(m.token for m in tool_format.control_markers if m.token is not None)
        if request.user:
            log.info("chat request for %s from user %r", entry.id, request.user)
        handle = gen.submit(worker, job, self.settings)
        if request.stream:
            include_usage = bool(request.stream_options and request.stream_options.include_usage)
            return self._stream(handle, entry.id, n, len(prompt_ids), include_usage, request.logprobs or False,
                                thinking, tool_format, tools, stops=request.stop)
        results = await gen.until_disconnected(http, gen.collect(handle, n))
        choices = []
        for i, r in enumerate(results):
            reasoning, content = split_reasoning(r.text, thinking) if thinking else (None, r.text)
            calls: list[ToolCall] = []
            if tool_format is not None:
                text, parsed = tool_format.parse(content, tools)
                content = text or ""
                calls = [ToolCall(id=tool_format.new_call_id(),
                                  function=ToolCallFunction(name=c.name, arguments=c.arguments)) for c in parsed]
            message = ChatCompletionMessage(content=content or (None if calls else ""), reasoning_content=reasoning,
                                            tool_calls=calls or None)
            choices.append(ChatCompletionChoice(
                index=i, message=message, finish_reason=_finish_reason(r.finish_reason, bool(calls)),  # type: ignore[arg-type]
                logprobs=ChoiceLogprobs(content=gen.chat_logprobs(r.tokens)) if request.logprobs else None,
                stop_reason=r.stop_sequence if r.stop_sequence in request.stop else None,
            ))
        completion_tokens = sum(r.completion_tokens for r in results)
        return ChatCompletion(
            id=gen.new_id("chatcmpl"), created=gen.now(), model=entry.id, choices=choices,
            system_fingerprint=gen.SYSTEM_FINGERPRINT,
            usage=gen.usage(len(prompt_ids), completion_tokens,
                            gen.cached_tokens({i: r.cached_tokens for i, r in enumerate(results)}, len(results))),
        )

    async def _stream(self, handle: gen.JobHandle, model: str, n: int, prompt_tokens: int, include_usage: bool,
                      logprobs: bool, thinking: ThinkingMarkers | None = None,
                      tool_format: ToolCallFormat | None = None, tools: Sequence[Mapping[str, Any]] = (),
                      stops: list[str] | None = None,
                      ) -> AsyncIterator[dict[str, Any]]:
        """Chunks as OpenAI sends them: the role first, content (and reasoning, and tool-call) deltas, a finish
        chunk per choice, then usage."""
        chunk_id, created = gen.new_id("chatcmpl"), gen.now()
        exclude = None if include_usage else {"usage"}

        def chunk(choices: list[ChunkChoice], usage: Usage | None = None) -> dict[str, Any]:
            payload = ChatCompletionChunk(id=chunk_id, created=created, model=model, choices=choices, usage=usage,
                                          system_fingerprint=gen.SYSTEM_FINGERPRINT)
            return payload.model_dump(mode="json", exclude=exclude)

        completion_tokens = 0
        cached: dict[int, int] = {}
        streams = [_ChoiceStream(thinking, tool_format, tools) for _ in range(n)]
        async with handle:
            for i in range(n):
                yield chunk([ChunkChoice(index=i, delta=DeltaMessage(role="assistant", content=""))])
            async for event in handle.events():
                if isinstance(event, TextDelta):
                    lp = ChoiceLogprobs(content=gen.chat_logprobs(event.tokens)) if logprobs else None
                    deltas = streams[event.index].push(event.text)
                    if lp is not None and not deltas:  # text held back (a marker's first part): its logprobs go now
                        deltas = [DeltaMessage()]
                    for k, delta in enumerate(deltas):
                        yield chunk([ChunkChoice(index=event.index, delta=delta, logprobs=lp if k == 0 else None)])
                elif isinstance(event, ChoiceDone):
                    stream = streams[event.index]
                    for delta in stream.flush():
                        yield chunk([ChunkChoice(index=event.index, delta=delta)])
                    completion_tokens += event.completion_tokens
                    cached[event.index] = event.cached_tokens
                    reason = _finish_reason(event.finish_reason, stream.called)
                    stop_reason = event.stop_sequence if event.stop_sequence in (stops or []) else None
                    yield chunk([ChunkChoice(index=event.index, delta=DeltaMessage(), finish_reason=reason,  # type: ignore[arg-type]
                                             stop_reason=stop_reason)])
        if include_usage:
            yield chunk([], gen.usage(prompt_tokens, completion_tokens, gen.cached_tokens(cached, n)))


def image_parts(request: ChatCompletionRequest) -> list[images.ImagePart]:
    """The request's image_url parts in prompt order, each named by where it sits (for errors)."""
    return [images.ImagePart(part.image_url.url, f"messages[{i}].content[{j}].image_url")
            for i, message in enumerate(request.messages) if isinstance(message.content, list)
            for j, part in enumerate(message.content) if part.type == "image_url" and part.image_url is not None]


def audio_parts(request: ChatCompletionRequest) -> list[audio_inputs.AudioPart]:
    """The request's input_audio parts in prompt order, each named by where it sits (for errors)."""
    return [audio_inputs.AudioPart(part.input_audio.data, part.input_audio.format,
                                   f"messages[{i}].content[{j}].input_audio")
            for i, message in enumerate(request.messages) if isinstance(message.content, list)
            for j, part in enumerate(message.content) if part.type == "input_audio" and part.input_audio is not None]


def _audio_input(worker: ChatHandler, name: str, parts: list[audio_inputs.AudioPart],
                 ) -> tuple[AudioEncoder | None, ImageMarkers | None]:
    """The model's audio encoder and markers; a 400 naming the first clip where audio is sent to a model that
    cannot take it: one without an audio encoder (models/audio_encoder/), or whose prompts have no place for its soft
    tokens (audio_markers unset)."""
    model = worker.model
    encoder, markers = getattr(model, "audio_encoder", None), getattr(model, "audio_markers", None)
    if not parts:
        return encoder, markers
    param = parts[0].param.removesuffix(".input_audio")
    if encoder is None:
        raise InvalidRequest(f"The model {name!r} does not accept audio: it has no audio encoder. Send text parts, "
                             "or use a model whose input_modalities (GET /v1/models) include \"audio\".",
                             param=param, code="audio_input_not_supported")
    if markers is None:
        raise InvalidRequest(f"The model {name!r} has an audio encoder, but its prompts cannot hold audio.",
                             param=param, code="audio_input_not_supported")
    return encoder, markers


def _image_input(worker: ChatHandler, name: str, parts: list[images.ImagePart],
                 ) -> tuple[ImageEncoder | None, ImageMarkers | None]:
    """The model's image encoder and markers; a 400 naming the first image where images are sent to a model that
    cannot take them."""
    model = worker.model
    encoder, markers = getattr(model, "image_encoder", None), getattr(model, "image_markers", None)
    if parts and (encoder is None or markers is None):
        raise InvalidRequest(f"The model {name!r} takes text only: it does not accept images. Send text parts, or "
                             "use a model whose input_modalities (GET /v1/models) include \"image\".",
                             param=parts[0].param.removesuffix(".image_url"), code="image_input_not_supported")
    return encoder, markers


class _ChoiceStream:
    """One streamed choice's text turned into deltas: reasoning split off (a thinking model), then tool calls
    parsed out of the answer (when tools are offered), each call's id, type and name in its first delta."""

    def __init__(self, markers: ThinkingMarkers | None, tool_format: ToolCallFormat | None,
                 tools: Sequence[Mapping[str, Any]] = ()) -> None:
        self._splitter = ReasoningSplitter(markers) if markers is not None else None
        self._format = tool_format
        self._calls = tool_format.stream(tools) if tool_format is not None else None
        self.called = False  # a tool call began

    def push(self, text: str, final: bool = False) -> list[DeltaMessage]:
        reasoning, content = self._splitter.push(text, final) if self._splitter is not None else ("", text)
        out = [DeltaMessage(reasoning_content=reasoning)] if reasoning else []
        if self._calls is None:
            if content:
                out.append(DeltaMessage(content=content))
            return out
        pieces = self._calls.push(content) if content else []
        if final:
            pieces += self._calls.flush()
        for piece in pieces:
            if isinstance(piece, ContentDelta):
                if piece.text:
                    out.append(DeltaMessage(content=piece.text))
                continue
            first = piece.name is not None
            self.called = self.called or first
            call_id = self._format.new_call_id() if first and self._format is not None else None
            out.append(DeltaMessage(tool_calls=[DeltaToolCall(
                index=piece.index, id=call_id, type="function" if first else None,
                function=DeltaFunctionCall(name=piece.name, arguments=piece.arguments if piece.arguments or first
                                           else None))]))
        return out

    def flush(self) -> list[DeltaMessage]:
        return self.push("", final=True)


def _finish_reason(reason: str, called: bool) -> str:
    """OpenAI's finish_reason: "tool_calls" when a reply that ended by itself holds tool calls."""
    return "tool_calls" if called and reason == "stop" else reason


def _tool_format(worker: ChatHandler) -> ToolCallFormat:
    """How the worker's model writes tool calls (models/text/tool_calls/)."""
    model = worker.model
    template = worker.chat_template
    source = template.source if template is not None and not template.builtin else None
    return format_for(model.tokenizer, getattr(getattr(model, "arch", None), "architecture", ""), source)


def _tool_grammar(tool_format: ToolCallFormat, request: ChatCompletionRequest, tools: Sequence[Mapping[str, Any]],
                  markers: ThinkingMarkers | None) -> OutputGrammar:
    """The grammar of a reply under tool_choice, the calls' arguments held to their functions' schemas (tools: the
    request's, as dicts); markers: a thinking model's, where it may think first."""
    try:
        source = tool_format.grammar(tools, request.tool_mode, parallel=request.parallel_tool_calls is not False)
    except GrammarError as error:
        raise InvalidRequest(f"tools cannot be enforced: {error}", param="tools") from error
    return OutputGrammar(grammar.lark(with_thoughts(source, markers) if markers else source), "tools")


def thinking_markers(tokenizer: TextTokenizer) -> ThinkingMarkers | None:
    """The thinking markers the model's vocabulary holds as single pieces (Gemma 4's channel, <think> tags), if
    any: its replies are split into reasoning_content and content."""
    for markers in THINKING_MARKERS:
        try:
            ids = tokenizer.encode(markers.open, add_bos=False)
        except (AttributeError, TypeError, ValueError):
            return None
        if len(ids) == 1 and tokenizer.id_to_piece(ids[0]) == markers.open:
            return markers
    return None
