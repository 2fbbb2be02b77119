"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, in the order of its API reference.

Requests reject unknown fields, as Anthropic's API does ("Extra inputs are not permitted"). Content blocks are
told apart by `type`; image and document blocks are refused by name, since a text model cannot read them.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from server.schemas.common import KeepAlive, OpenAIRequest, TokenCount


def _type_tag(value: Any) -> str:
    """`type=text` for a text block: the tag holds a character no parameter name does, so that errors name
    `messages[0].content[0]` rather than the union member."""
    return f"type={value.get('type') if isinstance(value, dict) else getattr(value, 'type', None)}"


def by_type(message: str) -> Discriminator:
    """Chooses a union's member by its `type` field, with message when none has it. (A callable rather than
    pydantic's field discriminator, which the requests' before-validator on every field rules out.)"""
    return Discriminator(_type_tag, custom_error_type="invalid_type", custom_error_message=message)


CacheControl = Annotated[dict[str, Any] | None, Field(None, description="accepted and ignored: nothing is cached")]


class TextBlockParam(OpenAIRequest):
    type: Literal["text"]
    text: str
    cache_control: CacheControl
    citations: list[dict[str, Any]] | None = Field(None, description="accepted and ignored")


class ToolUseBlockParam(OpenAIRequest):
    """A tool call the assistant made in an earlier turn."""

    type: Literal["tool_use"]
    id: str
    name: str
    input: dict[str, Any]
    cache_control: CacheControl
    caller: dict[str, Any] | None = Field(None, description="accepted and ignored")
    toolset_name: str | None = Field(None, description="accepted and ignored")


class ToolResultBlockParam(OpenAIRequest):
    """What a tool answered, sent back in a user turn."""

    type: Literal["tool_result"]
    tool_use_id: str
    content: str | list[TextBlockParam] | None = None
    is_error: bool | None = None
    cache_control: CacheControl
    toolset_name: str | None = Field(None, description="accepted and ignored")

    def text(self) -> str:
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "".join(block.text for block in self.content)


class ThinkingBlockParam(OpenAIRequest):
    """An earlier turn's thoughts; dropped from the prompt, as Anthropic drops earlier turns' thinking."""

    type: Literal["thinking"]
    thinking: str
    signature: str | None = None


class RedactedThinkingBlockParam(OpenAIRequest):
    type: Literal["redacted_thinking"]
    data: str


class UnreadableBlockParam(OpenAIRequest):
    """A document block: named in a 400, since no model here reads documents."""

    model_config = ConfigDict(extra="allow")

    type: Literal["document"]

    @model_validator(mode="after")
    def _refuse(self) -> UnreadableBlockParam:
        raise ValueError(f"{self.type}s are not supported by this model; send text blocks")


class ImageSource(OpenAIRequest):
    """An image block's image: base64 data with its media type, or a URL (fetched where the server allows it)."""

    type: Literal["base64", "url"]
    media_type: str | None = None
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _complete(self) -> ImageSource:
        if self.type == "base64" and not self.data:
            raise ValueError("a base64 image source needs data")
        if self.type == "url" and not self.url:
            raise ValueError("a url image source needs url")
        return self

    def data_url(self) -> str:
        """The image as the chat path's image_url: a data: URL, or the URL itself."""
        if self.type == "url":
            return str(self.url)
        return f"data:{self.media_type or 'image/*'};base64,{self.data}"


class ImageBlockParam(OpenAIRequest):
    """An image in a user message, for models that read images (input_modalities in /v1/models)."""

    type: Literal["image"]
    source: ImageSource
    cache_control: CacheControl


ContentBlockParam = Annotated[
    Annotated[TextBlockParam, Tag("type=text")] | Annotated[ToolUseBlockParam, Tag("type=tool_use")]
    | Annotated[ToolResultBlockParam, Tag("type=tool_result")] | Annotated[ThinkingBlockParam, Tag("type=thinking")]
    | Annotated[RedactedThinkingBlockParam, Tag("type=redacted_thinking")]
    | Annotated[ImageBlockParam, Tag("type=image")] | Annotated[UnreadableBlockParam, Tag("type=document")],
    by_type("a content block's type is one of text, image, tool_use, tool_result, thinking, redacted_thinking "
            "(document is not supported by this model)")]
_ASSISTANT_ONLY = {"tool_use", "thinking", "redacted_thinking"}
_USER_ONLY = {"tool_result", "image"}


class MessageParam(OpenAIRequest):
    role: Literal["user", "assistant"]
    content: str | list[ContentBlockParam]

    @field_validator("content", mode="after")
    @classmethod
    def _blocks_of_the_role(cls, value: str | list[Any], info: ValidationInfo) -> str | list[Any]:
        role = info.data.get("role")
        misplaced = _USER_ONLY if role == "assistant" else _ASSISTANT_ONLY
        for block in value if isinstance(value, list) else []:
            if block.type in misplaced:
                raise ValueError(f"{block.type} blocks cannot be in a {role} message")
        return value


class ToolParam(OpenAIRequest):
    """A client tool: its name, what it does and the JSON schema of its input (enforced on the calls)."""

    name: str = Field(min_length=1, max_length=128, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    input_schema: dict[str, Any]
    type: Literal["custom"] | None = None
    cache_control: CacheControl
    strict: bool | None = Field(None, description="input_schema is enforced on the calls whatever this says")
    eager_input_streaming: bool | None = Field(None, description="accepted and ignored: input always streams")
    input_examples: list[dict[str, Any]] | None = Field(None, description="accepted and ignored")

    @field_validator("input_schema", mode="after")
    @classmethod
    def _an_object(cls, value: dict[str, Any]) -> dict[str, Any]:
        if value.get("type") != "object":
            raise ValueError('input_schema must be a JSON schema of type "object"')
        return value


class ToolChoiceAuto(OpenAIRequest):
    type: Literal["auto"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceAny(OpenAIRequest):
    type: Literal["any"]
    disable_parallel_tool_use: bool | None = None


class ToolChoiceTool(OpenAIRequest):
    type: Literal["tool"]
    name: str
    disable_parallel_tool_use: bool | None = None


class ToolChoiceNone(OpenAIRequest):
    type: Literal["none"]


ToolChoiceParam = Annotated[
    Annotated[ToolChoiceAuto, Tag("type=auto")] | Annotated[ToolChoiceAny, Tag("type=any")]
    | Annotated[ToolChoiceTool, Tag("type=tool")] | Annotated[ToolChoiceNone, Tag("type=none")],
    by_type("tool_choice's type is one of auto, any, tool, none")]


ThinkingDisplay = Annotated[Literal["summarized", "omitted"] | None, Field(None, description="accepted and ignored: "
                                                                          "thoughts are returned whole")]


class ThinkingEnabled(OpenAIRequest):
    type: Literal["enabled"]
    budget_tokens: int = Field(ge=1024, description="checked as Anthropic does; thoughts are not cut at the budget")
    display: ThinkingDisplay


class ThinkingAdaptive(OpenAIRequest):
    """The model decides whether to think: a thinking model's template is asked for thinking."""

    type: Literal["adaptive"]
    display: ThinkingDisplay


class ThinkingDisabled(OpenAIRequest):
    type: Literal["disabled"]


ThinkingParam = Annotated[
    Annotated[ThinkingEnabled, Tag("type=enabled")] | Annotated[ThinkingAdaptive, Tag("type=adaptive")]
    | Annotated[ThinkingDisabled, Tag("type=disabled")], by_type("thinking's type is enabled, adaptive or disabled")]


class JsonOutputFormat(OpenAIRequest):
    type: Literal["json_schema"]
    schema_: dict[str, Any] = Field(alias="schema")

    model_config = ConfigDict(extra="forbid", populate_by_name=True)


class OutputConfig(OpenAIRequest):
    effort: Literal["low", "medium", "high", "xhigh", "max"] | None = Field(None, description="accepted and ignored")
    format: JsonOutputFormat | None = Field(None, description="the reply is JSON matching the schema (enforced by "
                                            "constrained decoding)")


class Metadata(OpenAIRequest):
    user_id: str | None = Field(None, max_length=256, description="logged with the request")


class CountTokensRequest(OpenAIRequest):
    """What /v1/messages/count_tokens reads: the parts of a message request that make its prompt."""

    messages: list[MessageParam] = Field(min_length=1)
    model: str
    cache_control: CacheControl
    output_config: OutputConfig | None = None
    speed: Literal["standard", "fast"] | None = Field(None, description="accepted and ignored")
    system: str | list[TextBlockParam] | None = None
    thinking: ThinkingParam | None = None
    tools: list[ToolParam] | None = Field(None, max_length=128)
    tool_choice: ToolChoiceParam | None = None

    @field_validator("tool_choice", mode="after")
    @classmethod
    def _names_a_tool(cls, value: Any, info: ValidationInfo) -> Any:
        tools = info.data.get("tools") or []
        if isinstance(value, ToolChoiceTool) and value.name not in {tool.name for tool in tools}:
            raise ValueError(f"tool_choice names {value.name!r}, which is not among `tools`")
        if isinstance(value, ToolChoiceAny) and not tools:
            raise ValueError("tool_choice any needs `tools`")
        return value

    def system_text(self) -> str | None:
        if self.system is None or isinstance(self.system, str):
            return self.system or None
        return "\n\n".join(block.text for block in self.system) or None


class MessagesRequest(CountTokensRequest):
    """The body of POST /v1/messages; Hearth's extensions come last."""

    max_tokens: TokenCount
    inference_geo: str | None = Field(None, description="accepted and ignored")
    metadata: Metadata | None = None
    service_tier: Literal["auto", "standard_only"] | None = Field(None, description="accepted and ignored")
    stop_sequences: list[str] | None = Field(None, description="the reply's stop_sequence names the one matched")
    stream: bool | None = False
    # Sampling fields that Anthropic's older API versions take (its current client no longer sends them).
    temperature: float | None = Field(None, ge=0.0, le=1.0, description="Anthropic's range; default 1")
    top_k: int | None = Field(None, ge=0, description="0 or absent: off")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    # Hearth's extension.
    keep_alive: KeepAlive = None


# -- responses ------------------------------------------------------------------------------------------------------

class TextBlock(BaseModel):
    type: Literal["text"] = "text"
    text: str


class ThinkingBlock(BaseModel):
    """A thinking model's thoughts; the signature is empty (nothing signs them)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    signature: str = ""


class ToolUseBlock(BaseModel):
    type: Literal["tool_use"] = "tool_use"
    id: str
    name: str
    input: dict[str, Any]


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock
StopReason = Literal["end_turn", "max_tokens", "stop_sequence", "tool_use"]


class AnthropicUsage(BaseModel):
    input_tokens: int
    output_tokens: int


class Message(BaseModel):
    id: str
    type: Literal["message"] = "message"
    role: Literal["assistant"] = "assistant"
    model: str
    content: list[ContentBlock]
    stop_reason: StopReason | None
    stop_sequence: str | None = None
    usage: AnthropicUsage


class TokenCountResponse(BaseModel):
    input_tokens: int


class AnthropicErrorInfo(BaseModel):
    type: str
    message: str


class AnthropicErrorResponse(BaseModel):
    """Anthropic's error body, under every /v1/messages path."""

    type: Literal["error"] = "error"
    error: AnthropicErrorInfo
