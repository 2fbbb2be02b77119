"""POST /v1/chat/completions: the request, the response and the stream chunks, in OpenAI's field order."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_serializer, model_validator

from server.schemas.common import (
    Bias,
    ChoiceCount,
    FinishReason,
    GrammarField,
    IgnoreEos,
    JsonSchemaField,
    KeepAlive,
    MinP,
    OpenAIRequest,
    Penalty,
    RepetitionPenalty,
    ResponseFormat,
    SamplingRequest,
    Seed,
    StreamOptions,
    Temperature,
    TokenCount,
    TokenLogprob,
    TopK,
    TopLogprobs,
    TopP,
    Usage,
)

Role = Literal["system", "developer", "user", "assistant", "tool"]


class ImageURL(OpenAIRequest):
    """An image_url part's image: a data: URL (base64 PNG, JPEG, WebP or GIF) or, where the server allows it, an
    http(s) URL. detail is accepted and has no effect (the model's encoder takes one size)."""

    url: str = Field(min_length=1)
    detail: Literal["auto", "low", "high"] | None = None


class InputAudio(OpenAIRequest):
    """An input_audio part's clip: base64 of a WAV or MP3 file, and which of the two it is."""

    data: str = Field(min_length=1)
    format: Literal["wav", "mp3"]


class ContentPart(OpenAIRequest):
    """One part of a message's content: text, an image or an audio clip (for models that take them: /v1/models
    lists their input_modalities; a model that does not answers with a 400)."""

    model_config = ConfigDict(extra="allow")  # file, ... are named in the error below

    type: str
    text: str | None = None
    image_url: ImageURL | None = None
    input_audio: InputAudio | None = None

    @field_validator("type")
    @classmethod
    def _known_type(cls, value: str) -> str:
        if value not in ("text", "image_url", "input_audio"):
            raise ValueError(f"content parts of type {value!r} are not supported; send text, image_url or "
                             "input_audio parts")
        return value

    @model_validator(mode="after")
    def _has_its_field(self) -> ContentPart:
        if self.type == "text" and self.text is None:
            raise ValueError("a text part needs `text`")
        if self.type == "image_url" and self.image_url is None:
            raise ValueError("an image_url part needs `image_url` with its `url`")
        if self.type == "input_audio" and self.input_audio is None:
            raise ValueError("an input_audio part needs `input_audio` with its `data` and `format`")
        return self


class ToolCallFunction(OpenAIRequest):
    name: str
    arguments: str


class ToolCall(OpenAIRequest):
    id: str
    type: Literal["function"] = "function"
    function: ToolCallFunction


class ChatMessage(OpenAIRequest):
    """A message of any role; assistant messages may carry tool calls instead of content."""

    role: Role
    content: str | list[ContentPart] | None = Field(None, validate_default=True)
    name: str | None = None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None

    @field_validator("content", mode="after")
    @classmethod
    def _content_needed(cls, value: str | list[ContentPart] | None, info: ValidationInfo) -> Any:
        if value is None and info.data.get("role") != "assistant":
            raise ValueError(f"a {info.data.get('role')} message needs content")
        return value

    def text(self) -> str:
        """The content as one string (text parts joined), empty for an assistant's content-less tool call."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text or "" for part in self.content)

    def image_urls(self) -> list[str]:
        """The URLs of its image parts, in order."""
        if not isinstance(self.content, list):
            return []
        return [part.image_url.url for part in self.content if part.image_url is not None and part.type == "image_url"]

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates expect it: string content (a list of text, {"type": "image"} and
        {"type": "audio"} items, as transformers' processors pass them, where it has images or audio), tool fields
        only when present."""
        content: str | list[dict[str, Any]] = self.text()
        if isinstance(self.content, list) and any(part.type != "text" for part in self.content):
            media = {"image_url": "image", "input_audio": "audio"}
            content = [{"type": "text", "text": part.text or ""} if part.type == "text" else {"type": media[part.type]}
                       for part in self.content]
        message: dict[str, Any] = {"role": self.role, "content": content}
        if self.name is not None:
            message["name"] = self.name
        if self.tool_calls:
            message["tool_calls"] = [call.model_dump() for call in self.tool_calls]
        if self.tool_call_id is not None:
            message["tool_call_id"] = self.tool_call_id
        return message


class FunctionDefinition(OpenAIRequest):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class Tool(OpenAIRequest):
    type: Literal["function"] = "function"
    function: FunctionDefinition


class NamedFunction(OpenAIRequest):
    name: str


class NamedToolChoice(OpenAIRequest):
    """tool_choice naming the one function the model must call."""

    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["none", "auto", "required"] | NamedToolChoice


class ChatCompletionRequest(SamplingRequest):
    """The request body, in the order of OpenAI's API reference; Hearth's extensions come last."""

    messages: list[ChatMessage] = Field(min_length=1)
    model: str
    frequency_penalty: Penalty | None = 0.0
    logit_bias: dict[str, Bias] | None = None
    logprobs: bool | None = False
    max_completion_tokens: TokenCount | None = None
    max_tokens: TokenCount | None = Field(None, description="deprecated by OpenAI for max_completion_tokens")
    metadata: dict[str, str] | None = Field(None, description="accepted and ignored")
    n: ChoiceCount | None = Field(1, description="choices are generated one after another")
    parallel_tool_calls: bool | None = Field(None, description="false: at most one call (enforced); default true")
    presence_penalty: Penalty | None = 0.0
    reasoning_effort: Literal["none", "minimal", "low", "medium", "high"] | None = Field(
        None, description="any but none turns a thinking model's thinking on (its template's enable_thinking)")
    response_format: ResponseFormat | None = Field(None, description="json_object and json_schema are enforced "
                                                   "by constrained decoding")
    seed: Seed | None = Field(None, description="same seed and request, same output; choice i uses seed + i")
    service_tier: str | None = Field(None, description="accepted and ignored")
    stop: str | list[str] | None = Field(None, validate_default=True, description="up to 4 strings; never sent")
    store: bool | None = Field(None, description="accepted and ignored: nothing is stored")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    temperature: Temperature | None = 1.0
    # tools before tool_choice (OpenAI lists them the other way round): tool_choice's check reads the tools
    tools: list[Tool] | None = Field(None, max_length=128, description="functions the model may call; their "
                                     "parameters schemas are enforced on the calls")
    tool_choice: ToolChoice | None = Field(None, description="auto (the default with tools), none, required or a "
                                           "named function: enforced by constrained decoding")
    top_logprobs: TopLogprobs | None = None
    top_p: TopP | None = 1.0
    user: str | None = None
    # Hearth's extensions.
    top_k: TopK = 0
    min_p: MinP = 0.0
    repetition_penalty: RepetitionPenalty = 1.0
    ignore_eos: IgnoreEos = False
    keep_alive: KeepAlive = None
    json_schema: JsonSchemaField = None
    grammar: GrammarField = None

    @field_validator("top_logprobs", mode="after")
    @classmethod
    def _needs_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value and not info.data.get("logprobs"):
            raise ValueError("top_logprobs needs logprobs set to true")
        return value

    @field_validator("stream_options", mode="after")
    @classmethod
    def _needs_stream(cls, value: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        if value is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed when stream is true")
        return value

    def alternatives(self) -> int | None:
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def max_new_tokens(self) -> int | None:
        """The client's limit on generated tokens (max_completion_tokens wins over the older max_tokens)."""
        return self.max_completion_tokens or self.max_tokens

    @field_validator("tool_choice", mode="after")
    @classmethod
    def _choice_names_a_tool(cls, value: ToolChoice | None, info: ValidationInfo) -> ToolChoice | None:
        tools = info.data.get("tools") or []
        if value not in (None, "none") and not tools:
            raise ValueError("tool_choice needs `tools`")
        if isinstance(value, NamedToolChoice) and value.function.name not in {t.function.name for t in tools}:
            raise ValueError(f"tool_choice names {value.function.name!r}, which is not among `tools`")
        return value

    @property
    def tool_mode(self) -> str:
        """"none", "auto", "required" or the name of the function the model must call."""
        if not self.tools or self.tool_choice == "none":
            return "none"
        if isinstance(self.tool_choice, NamedToolChoice):
            return self.tool_choice.function.name
        return self.tool_choice or "auto"

    @property
    def enable_thinking(self) -> bool:
        """Whether the chat template is asked for thinking (Gemma 4's <|think|>)."""
        return self.reasoning_effort not in (None, "none")


class ChatCompletionMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None
    refusal: str | None = None
    tool_calls: list[ToolCall] | None = None
    # Hearth extension, as other OpenAI-compatible servers: a thinking model's reasoning, apart from its answer
    reasoning_content: str | None = None


class ChoiceLogprobs(BaseModel):
    content: list[TokenLogprob] | None
    refusal: list[TokenLogprob] | None = None


class ChatCompletionChoice(BaseModel):
    index: int
    message: ChatCompletionMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason
    # Hearth extension, as vLLM's: the stop string (of the request's `stop`) that ended the choice, if one did
    stop_reason: str | None = None


class ChatCompletion(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatCompletionChoice]
    usage: Usage
    system_fingerprint: str | None = None


class DeltaFunctionCall(BaseModel):
    name: str | None = None
    arguments: str | None = None

    @model_serializer(mode="plain")
    def _without_nones(self) -> dict[str, Any]:
        return {k: v for k, v in (("name", self.name), ("arguments", self.arguments)) if v is not None}


class DeltaToolCall(BaseModel):
    """A piece of a streamed tool call: index, id, type and name in its first delta, arguments in pieces after."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: DeltaFunctionCall

    @model_serializer(mode="wrap")
    def _without_nones(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class DeltaMessage(BaseModel):
    """What a chunk adds to a choice; fields that are None are left out, as OpenAI does."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    reasoning_content: str | None = None  # Hearth extension: a thinking model's reasoning
    tool_calls: list[DeltaToolCall] | None = None

    @model_serializer(mode="wrap")
    def _without_nones(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class ChunkChoice(BaseModel):
    index: int
    delta: DeltaMessage
    logprobs: ChoiceLogprobs | None = None
    finish_reason: FinishReason | None = None
    stop_reason: str | None = None  # Hearth extension, as vLLM's: the stop string that ended the choice


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChunkChoice]
    usage: Usage | None = None
