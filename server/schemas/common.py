"""Wire types shared by the endpoints: the request base, errors, usage, stream options, sampling fields."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationInfo,
    field_validator,
)

from config.settings import parse_keep_alive
from models.text.sampler import SamplingParams

# Reusable constrained types: OpenAI's ranges, so a value OpenAI rejects is rejected here too.
Temperature = Annotated[float, Field(ge=0.0, le=2.0, description="0 is greedy")]
TopP = Annotated[float, Field(gt=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
Seed = Annotated[int, Field(ge=-(2**63), lt=2**64)]
TopLogprobs = Annotated[int, Field(ge=0, le=20)]
ChoiceCount = Annotated[int, Field(ge=1, le=128)]
TokenCount = Annotated[int, Field(ge=1)]
Bias = Annotated[float, Field(ge=-100.0, le=100.0)]


def _keep_alive(value: str | float | None) -> str | float | None:
    parse_keep_alive(value)  # a ValueError becomes a 400 naming keep_alive
    return value


# Ollama's keep_alive, a Hearth extension of every model endpoint: how long the model stays loaded once idle.
KeepAlive = Annotated[StrictStr | StrictInt | StrictFloat | None, AfterValidator(_keep_alive),  # not true/false
                      Field(description="how long the model stays loaded once idle, as Ollama: '5m', '1h', seconds, "
                            "0 to unload after this request, -1 for ever; unset: the model's or the server's setting")]


_SURROGATE = re.compile("[\ud800-\udfff]")


def unpaired_surrogate_at(value: Any, where: str = "") -> str | None:
    """Where a JSON value holds a string with an unpaired UTF-16 surrogate (`"\\ud800"` is valid JSON but not
    text: it cannot be encoded to UTF-8, so no tokenizer can take it); None when there is none."""
    if isinstance(value, str):
        return where if _SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        if isinstance(key, str) and _SURROGATE.search(key):
            return where or "a key"
        found = unpaired_surrogate_at(item, f"{where}[{key}]" if isinstance(key, int) else
                                      f"{where}.{key}" if where else str(key))
        if found is not None:
            return found
    return None


class OpenAIRequest(BaseModel):
    """Base of every request body: an unknown field is a 400 naming it, as OpenAI does; so is a string that is
    not text (an unpaired surrogate), which would otherwise fail deep inside a tokenizer."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _text_only(cls, value: Any, info: ValidationInfo) -> Any:
        where = unpaired_surrogate_at(value, info.field_name or "")
        if where is not None:
            raise ValueError(f"{where} holds an unpaired UTF-16 surrogate (a \\ud800-\\udfff escape without its pair), "
                             "which is not valid text")
        return value


class StreamOptions(OpenAIRequest):
    include_usage: bool = Field(False, description="send a last chunk with usage and no choices")


# Hearth's extensions to OpenAI's sampling parameters (llama.cpp and vLLM offer the same), declared last in
# each request so the OpenAI fields keep OpenAI's order.
TopK = Annotated[int, Field(ge=-1, description="keep the k most likely tokens; 0 or -1 turns it off")]
MinP = Annotated[float, Field(ge=0.0, le=1.0, description="drop tokens below min_p times the top probability")]
RepetitionPenalty = Annotated[float, Field(gt=0.0, le=2.0, description="scale down logits of seen tokens; 1 is off")]
IgnoreEos = Annotated[bool, Field(description="go on past the model's end-of-sequence tokens, to max_tokens (stop "
                                  "strings still end a choice): load generators get the token counts they ask for")]


class SamplingRequest(OpenAIRequest):
    """Validators and the conversion to SamplingParams shared by chat and completions requests.

    Subclasses declare temperature, top_p, presence/frequency penalties, logit_bias, seed, stop,
    top_k, min_p and repetition_penalty.
    """

    if TYPE_CHECKING:  # declared by the subclasses, in OpenAI's order
        temperature: float | None
        top_p: float | None
        presence_penalty: float | None
        frequency_penalty: float | None
        logit_bias: dict[str, float] | None
        seed: int | None
        top_k: int
        min_p: float
        repetition_penalty: float

    alternatives_param: ClassVar[str] = "top_logprobs"

    def alternatives(self) -> int | None:
        """Alternatives to report per token (0: the sampled token's logprob only); None: no logprobs."""
        raise NotImplementedError

    @field_validator("stop", mode="after", check_fields=False)
    @classmethod
    def _stop_list(cls, value: str | list[str] | None) -> list[str]:
        """A string or list of strings; empty strings cannot match anything useful and are dropped."""
        if value is None:
            return []
        values = [value] if isinstance(value, str) else value
        return [v for v in values if v]

    @field_validator("logit_bias", mode="after", check_fields=False)
    @classmethod
    def _bias_keys(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for key in value or {}:
            if not key.strip().lstrip("-").isdigit():
                raise ValueError(f"logit_bias keys must be token ids, got {key!r}")
        return value

    def sampling_params(self, choice: int = 0, top_logprobs: int = 0) -> SamplingParams:
        """The sampler's parameters for one choice; with a seed, choice i samples with seed + i."""
        return SamplingParams(
            temperature=self.temperature if self.temperature is not None else 1.0,
            top_k=max(self.top_k, 0),
            top_p=self.top_p if self.top_p is not None else 1.0,
            min_p=self.min_p,
            repetition_penalty=self.repetition_penalty,
            presence_penalty=self.presence_penalty or 0.0,
            frequency_penalty=self.frequency_penalty or 0.0,
            logit_bias=tuple(sorted((int(k), float(v)) for k, v in (self.logit_bias or {}).items())),
            # The sampler seeds a 64-bit generator: fold negative and shifted seeds into its range.
            seed=None if self.seed is None else (self.seed + choice) % 2**64,
            top_logprobs=top_logprobs,
        )


class ErrorInfo(BaseModel):
    """OpenAI's error object."""

    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo


class PromptTokensDetails(BaseModel):
    cached_tokens: int = Field(0, description="prompt tokens whose KV cache an earlier request left (prefix caching): "
                               "not prefilled again")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(BaseModel):
    """One sampled token of chat `logprobs.content`."""

    token: str
    logprob: float
    bytes: list[int] | None = None
    top_logprobs: list[TopLogprob] = []


def dump(model: BaseModel, **kwargs: Any) -> dict[str, Any]:
    """The JSON-ready dict of a response model (None fields kept, as OpenAI sends them)."""
    return model.model_dump(mode="json", **kwargs)


FinishReason = Literal["stop", "length", "tool_calls"]


class JsonSchemaSpec(OpenAIRequest):
    """response_format's json_schema: the schema the reply must match (always enforced, strict or not)."""

    name: str = Field(max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="absent: any JSON value")
    strict: bool | None = Field(None, description="Hearth enforces the schema whatever this says")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class ResponseFormat(OpenAIRequest):
    """The reply's form: plain text, one JSON object, or JSON matching a schema (by constrained decoding)."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaSpec | None = Field(None, validate_default=True)

    @field_validator("json_schema", mode="after")
    @classmethod
    def _schema_for_json_schema(cls, value: JsonSchemaSpec | None, info: ValidationInfo) -> JsonSchemaSpec | None:
        if info.data.get("type") == "json_schema" and value is None:
            raise ValueError("response_format of type json_schema needs `json_schema` (its name and schema)")
        if info.data.get("type") != "json_schema" and value is not None:
            raise ValueError(f"json_schema goes with response_format type json_schema, not {info.data.get('type')}")
        return value


# Hearth's extensions for constrained output (llama.cpp's and vLLM's names), on chat and completions alike.
GrammarField = Annotated[str | None, Field(
    None, max_length=100_000, description="Hearth extension: the reply follows this grammar (llguidance's Lark "
    "dialect, or llama.cpp's GBNF when it holds `::=`)")]
JsonSchemaField = Annotated[dict[str, Any] | None, Field(
    None, description="Hearth extension: the reply is JSON matching this schema (as response_format json_schema)")]
