"""POST /v1/completions (legacy prompt completion): the request and the response, which streams as itself."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from server.schemas.common import (
    Bias,
    ChoiceCount,
    FinishReason,
    GrammarField,
    IgnoreEos,
    JsonSchemaField,
    KeepAlive,
    MinP,
    Penalty,
    RepetitionPenalty,
    ResponseFormat,
    SamplingRequest,
    Seed,
    StreamOptions,
    Temperature,
    TokenCount,
    TopK,
    TopLogprobs,
    TopP,
    Usage,
)

Prompt = str | list[str] | list[int] | list[list[int]]


class CompletionRequest(SamplingRequest):
    """The request body, in the order of OpenAI's API reference; Hearth's extensions come last."""

    model: str
    prompt: Prompt = Field(description="text, token ids, or a list of either (one set of choices per prompt)")
    best_of: int | None = Field(None, ge=1, description="only best_of equal to n (no reranking)")
    echo: bool | None = False
    frequency_penalty: Penalty | None = 0.0
    logit_bias: dict[str, Bias] | None = None
    logprobs: TopLogprobs | None = Field(None, description="alternatives per token; 0 gives the sampled only")
    max_tokens: TokenCount | None = Field(16, description="OpenAI's default for completions is 16")
    n: ChoiceCount | None = Field(1, validate_default=True)
    presence_penalty: Penalty | None = 0.0
    seed: Seed | None = Field(None, description="same seed and request, same output; choice i uses seed + i")
    stop: str | list[str] | None = Field(None, validate_default=True, description="up to 4 strings; never sent")
    stream: bool | None = False
    stream_options: StreamOptions | None = None
    suffix: str | None = Field(None, description="not supported: Gemma 3 has no fill-in-the-middle tokens")
    temperature: Temperature | None = 1.0
    top_p: TopP | None = 1.0
    user: str | None = None
    # Hearth's extensions.
    top_k: TopK = 0
    min_p: MinP = 0.0
    repetition_penalty: RepetitionPenalty = 1.0
    ignore_eos: IgnoreEos = False
    keep_alive: KeepAlive = None
    response_format: ResponseFormat | None = Field(None, description="as chat's: json_object and json_schema are "
                                                   "enforced by constrained decoding (vLLM's extension)")
    json_schema: JsonSchemaField = None
    grammar: GrammarField = None

    @field_validator("prompt", mode="after")
    @classmethod
    def _not_empty(cls, value: Prompt) -> Prompt:
        if isinstance(value, list) and (not value or any(isinstance(p, list) and not p for p in value)):
            raise ValueError("prompt must not be empty")
        return value

    @field_validator("n", mode="after")
    @classmethod
    def _best_of(cls, value: int | None, info: ValidationInfo) -> int | None:
        best_of = info.data.get("best_of")
        if best_of is not None and best_of != (value or 1):
            raise ValueError("best_of must equal n: Hearth does not rerank choices")
        return value

    @field_validator("logprobs", mode="after")
    @classmethod
    def _no_echo_logprobs(cls, value: int | None, info: ValidationInfo) -> int | None:
        if value is not None and info.data.get("echo"):
            raise ValueError("logprobs with echo (logprobs of the prompt) is not supported")
        return value

    @field_validator("stream_options", mode="after")
    @classmethod
    def _needs_stream(cls, value: StreamOptions | None, info: ValidationInfo) -> StreamOptions | None:
        if value is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed when stream is true")
        return value

    @field_validator("suffix", mode="after")
    @classmethod
    def _no_suffix(cls, value: str | None) -> str | None:
        if value:
            raise ValueError("suffix is not supported by this model")
        return value

    alternatives_param: ClassVar[str] = "logprobs"

    def alternatives(self) -> int | None:
        return self.logprobs

    def prompts(self) -> list[str | list[int]]:
        """The prompts, each text or token ids."""
        prompt = self.prompt
        if isinstance(prompt, str):
            return [prompt]
        if prompt and all(isinstance(p, int) for p in prompt):
            return [list(prompt)]  # type: ignore[arg-type]
        return list(prompt)  # type: ignore[arg-type]


class CompletionLogprobs(BaseModel):
    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(BaseModel):
    text: str
    index: int
    logprobs: CompletionLogprobs | None = None
    finish_reason: FinishReason | None = None


class Completion(BaseModel):
    """A whole response, or one chunk of a stream (then finish_reason is null until the choice ends)."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None
