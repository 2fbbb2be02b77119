"""Ollama's native API (/api/...): requests and responses with Ollama's field names (its api/types.go).

Requests ignore fields they do not know, as Ollama's JSON decoding does (clients send fields of newer Ollama
versions); strings must still be text. Durations in responses are nanoseconds; times are RFC 3339 strings.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from server.schemas.common import KeepAlive, OpenAIRequest, TopLogprobs

# "json", or a JSON schema the reply must match; "" is Ollama's "no format".
Format = Literal["", "json"] | dict[str, Any] | None
# A boolean, or a level (any level turns thinking on).
Think = bool | Literal["low", "medium", "high", "max"] | None
Options = dict[str, Any] | None


class OllamaRequest(OpenAIRequest):
    """Base of Ollama's request bodies: unknown fields are ignored, as Ollama does."""

    model_config = ConfigDict(extra="ignore")


class ToolCallFunction(OllamaRequest):
    index: int | None = None
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict, description="an object, not a JSON string")


class ToolCall(OllamaRequest):
    id: str | None = None
    function: ToolCallFunction


class Message(OllamaRequest):
    """A chat message; `images` (base64) go to models that read images (input_modalities in /v1/models)."""

    role: Literal["system", "user", "assistant", "tool"]
    content: str = ""
    thinking: str | None = Field(None, description="an earlier reply's thinking: not sent back to the model")
    images: list[str] | None = None
    tool_calls: list[ToolCall] | None = None
    tool_name: str | None = None
    tool_call_id: str | None = None

    @field_validator("role", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.lower() if isinstance(value, str) else value


class ToolFunction(OllamaRequest):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None


class Tool(OllamaRequest):
    type: Literal["function"] = "function"
    function: ToolFunction


class ChatRequest(OllamaRequest):
    """POST /api/chat. Empty messages load the model (with keep_alive 0: unload it)."""

    model: str = Field("", description="required: Ollama's 400 `model is required` when left out")
    messages: list[Message] = Field(default_factory=list)
    tools: list[Tool] | None = Field(None, max_length=128)
    format: Format = None
    options: Options = Field(None, description="Modelfile parameters: temperature, top_p, top_k, min_p, seed, "
                             "num_predict, stop, repeat_penalty, presence_penalty, frequency_penalty; others ignored")
    stream: bool | None = Field(True, description="NDJSON lines unless false")
    keep_alive: KeepAlive = None
    think: Think = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None


class GenerateRequest(OllamaRequest):
    """POST /api/generate. An empty prompt loads the model (with keep_alive 0: unload it)."""

    model: str = Field("", description="required: Ollama's 400 `model is required` when left out")
    prompt: str = ""
    suffix: str = Field("", description="not supported: no fill-in-the-middle")
    system: str = ""
    template: str = Field("", description="not supported: the model's own chat template is used")
    context: list[int] | None = Field(None, description="not supported (deprecated by Ollama)")
    stream: bool | None = True
    raw: bool | None = Field(False, description="the prompt as it is, without the chat template")
    format: Format = None
    keep_alive: KeepAlive = None
    images: list[str] | None = None
    options: Options = None
    think: Think = None
    logprobs: bool | None = None
    top_logprobs: TopLogprobs | None = None


class EmbedRequest(OllamaRequest):
    """POST /api/embed."""

    model: str = Field("", description="required: Ollama's 400 `model is required` when left out")
    input: str | list[str] = Field(description="text or a list of texts")
    truncate: bool | None = Field(True, description="cut inputs to the model's limit (Ollama's default), else a 400")
    dimensions: int | None = Field(None, ge=1)
    keep_alive: KeepAlive = None
    options: Options = None


class EmbeddingsRequest(OllamaRequest):
    """POST /api/embeddings (Ollama's older endpoint)."""

    model: str = Field("", description="required: Ollama's 400 `model is required` when left out")
    prompt: str = ""
    keep_alive: KeepAlive = None
    options: Options = None


class ShowRequest(OllamaRequest):
    """POST /api/show; `name` is Ollama's older spelling of `model`."""

    model: str = ""
    name: str = ""
    verbose: bool | None = False


# -- responses -----------------------------------------------------------------------------------------------
class Metrics(BaseModel):
    """The last object's statistics; durations in nanoseconds."""

    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None
    prompt_eval_duration: int | None = None
    eval_count: int | None = None
    eval_duration: int | None = None


class TokenLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class Logprob(TokenLogprob):
    top_logprobs: list[TokenLogprob] | None = None


class ReplyToolCall(BaseModel):
    id: str | None = None
    function: ToolCallFunction


class ReplyMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str = ""
    thinking: str | None = None
    tool_calls: list[ReplyToolCall] | None = None


class _ChatFields(BaseModel):
    model: str
    created_at: str
    message: ReplyMessage
    done: bool
    done_reason: str | None = None
    logprobs: list[Logprob] | None = None


class ChatResponse(Metrics, _ChatFields):
    """One line of /api/chat's stream, or the whole reply; the statistics come last, as Ollama orders them."""


class _GenerateFields(BaseModel):
    model: str
    created_at: str
    response: str
    thinking: str | None = None
    done: bool
    done_reason: str | None = None
    logprobs: list[Logprob] | None = None


class GenerateResponse(Metrics, _GenerateFields):
    """One line of /api/generate's stream, or the whole reply; the statistics come last."""


class EmbedResponse(BaseModel):
    model: str
    embeddings: list[list[float]]
    total_duration: int | None = None
    load_duration: int | None = None
    prompt_eval_count: int | None = None


class EmbeddingsResponse(BaseModel):
    embedding: list[float]


class ModelDetails(BaseModel):
    parent_model: str = ""
    format: str = "gguf"
    family: str = ""
    families: list[str] | None = None
    parameter_size: str = ""
    quantization_level: str = ""


class ListModel(BaseModel):
    name: str
    model: str
    modified_at: str
    size: int
    digest: str
    details: ModelDetails


class ListResponse(BaseModel):
    models: list[ListModel]


class ShowResponse(BaseModel):
    modelfile: str
    parameters: str
    template: str
    details: ModelDetails
    model_info: dict[str, Any]
    capabilities: list[str]
    modified_at: str


class ProcessModel(BaseModel):
    name: str
    model: str
    size: int
    digest: str
    details: ModelDetails
    expires_at: str
    size_vram: int
    context_length: int | None = None


class ProcessResponse(BaseModel):
    models: list[ProcessModel]


class VersionResponse(BaseModel):
    version: str
