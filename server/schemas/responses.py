"""POST /v1/responses (OpenAI's Responses API): the request with its input items, the response object and its
output items, in OpenAI's field order.

What a text model cannot do is refused by name, never dropped: built-in tools (web_search, file_search, ...),
image, audio and file inputs, items other than messages, function calls, their outputs and reasoning, and
`background`. The stream events are built in server/services/responses.py from the same output item models.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    Discriminator,
    Field,
    Tag,
    ValidationInfo,
    field_validator,
    model_validator,
)

from server.schemas.common import (
    JsonSchemaSpec,
    KeepAlive,
    MinP,
    OpenAIRequest,
    RepetitionPenalty,
    ResponseFormat,
    Seed,
    Temperature,
    TokenCount,
    TopK,
    TopP,
)

# -- input items ---------------------------------------------------------------------------------------------------

_TEXT_PARTS = ("input_text", "output_text", "refusal")


def _message_part(value: Any) -> Any:
    """A message's parts may be images too; other kinds (input_file, input_audio) are named in a 400."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return value if kind == "input_image" else _text_part_only(value)


def _text_part_only(value: Any) -> Any:
    """Content parts other than text (input_image, input_file, input_audio) are named in a 400."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if isinstance(kind, str) and kind not in _TEXT_PARTS:
        raise ValueError(f"content parts of type {kind!r} are not supported: this server's models read text "
                         "(input_text, output_text) only")
    return value


class InputText(OpenAIRequest):
    type: Literal["input_text"]
    text: str


class OutputTextPart(OpenAIRequest):
    """An assistant's earlier text, as the previous response's output gives it back."""

    type: Literal["output_text"]
    text: str
    annotations: list[dict[str, Any]] | None = None
    logprobs: list[dict[str, Any]] | None = None


class RefusalPart(OpenAIRequest):
    type: Literal["refusal"]
    refusal: str


class InputImage(OpenAIRequest):
    """An image in a message, for models that read images: image_url a base64 data: URL (or http(s) where the
    server fetches them); file_id is not supported (Hearth keeps no files)."""

    type: Literal["input_image"]
    image_url: str | None = None
    file_id: str | None = None
    detail: Literal["auto", "low", "high"] | None = None

    @model_validator(mode="after")
    def _has_url(self) -> InputImage:
        if self.file_id is not None:
            raise ValueError("file_id is not supported: send the image as image_url (a base64 data: URL)")
        if not self.image_url:
            raise ValueError("an input_image part needs image_url")
        return self


def _part_type(value: Any) -> str:
    """The union member a part is validated as (tags with a space: errors name the parameter, not the tag)."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return f"{kind} part"


ContentPart = Annotated[
    Annotated[InputText, Tag("input_text part")] | Annotated[OutputTextPart, Tag("output_text part")]
    | Annotated[RefusalPart, Tag("refusal part")], Discriminator(_part_type), BeforeValidator(_text_part_only)]
# a message's parts: text, or images (the model decides whether it reads them)
MessagePart = Annotated[
    Annotated[InputText, Tag("input_text part")] | Annotated[OutputTextPart, Tag("output_text part")]
    | Annotated[RefusalPart, Tag("refusal part")] | Annotated[InputImage, Tag("input_image part")],
    Discriminator(_part_type), BeforeValidator(_message_part)]


class MessageItem(OpenAIRequest):
    """A message of the conversation; `type` may be left out, as OpenAI's easy input messages do."""

    type: Literal["message"] = "message"
    role: Literal["user", "assistant", "system", "developer"]
    content: str | list[MessagePart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None
    phase: Literal["commentary", "final_answer"] | None = None

    def text(self) -> str:
        """The content as one string (text parts joined; a refusal is the assistant's text)."""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.refusal if isinstance(part, RefusalPart) else getattr(part, "text", "")
                       for part in self.content)

    def chat_content(self) -> str | list[dict[str, Any]]:
        """The content as a chat message's: its text, or (with images) text and image_url parts in order."""
        if isinstance(self.content, str) or not any(isinstance(p, InputImage) for p in self.content):
            return self.text()
        return [{"type": "image_url", "image_url": {"url": part.image_url}} if isinstance(part, InputImage)
                else {"type": "text", "text": part.refusal if isinstance(part, RefusalPart) else part.text}
                for part in self.content]


class FunctionCallItem(OpenAIRequest):
    """A call the model made earlier, sent back so that its output can follow."""

    type: Literal["function_call"]
    call_id: str = Field(min_length=1)
    name: str
    arguments: str
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


class FunctionCallOutputItem(OpenAIRequest):
    """The result of a function call, for the model to answer from."""

    type: Literal["function_call_output"]
    call_id: str = Field(min_length=1)
    output: str | list[ContentPart]
    id: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None

    def text(self) -> str:
        if isinstance(self.output, str):
            return self.output
        return "".join(getattr(part, "text", "") for part in self.output)


class SummaryText(OpenAIRequest):
    type: Literal["summary_text"]
    text: str


class ReasoningText(OpenAIRequest):
    type: Literal["reasoning_text"]
    text: str


class ReasoningItem(OpenAIRequest):
    """Earlier thoughts sent back; chat templates leave past thinking out, and so does Hearth."""

    type: Literal["reasoning"]
    id: str | None = None
    summary: list[SummaryText] = []
    content: list[ReasoningText] | None = None
    encrypted_content: str | None = None
    status: Literal["in_progress", "completed", "incomplete"] | None = None


_ITEM_TYPES = ("message", "function_call", "function_call_output", "reasoning")


def _item_type(value: Any) -> str:
    """The union member an item is validated as (tags with a space: errors name the parameter, not the tag)."""
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None)
    return f"{kind} item"


def _known_item(value: Any) -> Any:
    kind = value.get("type", "message") if isinstance(value, dict) else getattr(value, "type", None)
    if isinstance(kind, str) and kind not in _ITEM_TYPES:
        raise ValueError(f"input items of type {kind!r} are not supported: send messages, function_call, "
                         "function_call_output and reasoning items")
    return value


InputItem = Annotated[
    Annotated[MessageItem, Tag("message item")] | Annotated[FunctionCallItem, Tag("function_call item")]
    | Annotated[FunctionCallOutputItem, Tag("function_call_output item")]
    | Annotated[ReasoningItem, Tag("reasoning item")],
    Discriminator(_item_type), BeforeValidator(_known_item)]


# -- tools, text format, reasoning ---------------------------------------------------------------------------------

def _function_tool_only(value: Any) -> Any:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if isinstance(kind, str) and kind != "function":
        raise ValueError(f"tools of type {kind!r} are not supported: this server offers function tools only "
                         "(no built-in web_search, file_search, code_interpreter, ...)")
    return value


class FunctionTool(OpenAIRequest):
    """A function the model may call, flat as the Responses API defines it (not nested under `function`)."""

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class FunctionChoice(OpenAIRequest):
    """tool_choice naming the one function the model must call."""

    type: Literal["function"]
    name: str


def _function_choice_only(value: Any) -> Any:
    if isinstance(value, dict) and value.get("type") != "function":
        raise ValueError(f"tool_choice of type {value.get('type')!r} is not supported: send none, auto, required "
                         "or {\"type\": \"function\", \"name\": ...}")
    return value


ToolChoice = Annotated[Literal["none", "auto", "required"] | FunctionChoice, BeforeValidator(_function_choice_only)]


class TextFormat(OpenAIRequest):
    """text.format: plain text, one JSON object, or JSON matching a schema (enforced by constrained decoding)."""

    type: Literal["text", "json_object", "json_schema"]
    name: str | None = Field(None, max_length=64, pattern=r"^[a-zA-Z0-9_-]+$")
    description: str | None = None
    schema_: dict[str, Any] | None = Field(None, alias="schema")
    strict: bool | None = Field(None, description="Hearth enforces the schema whatever this says")

    model_config = OpenAIRequest.model_config | {"populate_by_name": True}

    @model_validator(mode="after")
    def _schema_for_json_schema(self) -> TextFormat:
        if self.type == "json_schema" and (self.name is None or self.schema_ is None):
            raise ValueError("text.format of type json_schema needs `name` and `schema`")
        if self.type != "json_schema" and any(v is not None for v in (self.name, self.schema_, self.description)):
            raise ValueError(f"name, schema and description go with text.format type json_schema, not {self.type}")
        return self

    def response_format(self) -> ResponseFormat:
        """The chat path's response_format for this format."""
        if self.type != "json_schema":
            return ResponseFormat(type=self.type)
        assert self.name is not None
        return ResponseFormat(type="json_schema", json_schema=JsonSchemaSpec(
            name=self.name, description=self.description, schema=self.schema_, strict=self.strict))


class TextConfig(OpenAIRequest):
    format: TextFormat | None = None
    verbosity: Literal["medium"] | None = Field(None, description="only the default: the length of a reply is the "
                                                "model's own")


class ReasoningConfig(OpenAIRequest):
    effort: Literal["none", "minimal", "low", "medium", "high", "xhigh"] | None = Field(
        None, description="any but none turns a thinking model's thinking on")
    summary: Literal["auto", "concise", "detailed"] | None = Field(
        None, description="the reasoning item's summary is the model's whole thought, whatever this says")
    generate_summary: Literal["auto", "concise", "detailed"] | None = Field(None, description="deprecated: summary")


def _false_only(name: str) -> Any:
    def check(value: bool | None) -> bool | None:
        if value:
            raise ValueError(f"{name} is not supported by this server; leave it out or send false")
        return value

    return BeforeValidator(check)


def _empty_only(value: Any) -> Any:
    if value:
        raise ValueError(f"nothing can be included on this server (asked for {value!r})")
    return value


# -- the request ---------------------------------------------------------------------------------------------------

class ResponseRequest(OpenAIRequest):
    """The request body, in the order of OpenAI's API reference; Hearth's extensions come last."""

    background: Annotated[bool | None, _false_only("background")] = None
    include: Annotated[list[str] | None, BeforeValidator(_empty_only)] = None
    input: str | list[InputItem] = Field(description="a user message as a string, or the conversation's items")
    instructions: str | None = Field(None, description="a system message put first (not carried over by "
                                     "previous_response_id)")
    max_output_tokens: TokenCount | None = None
    metadata: dict[str, str] | None = Field(None, max_length=16, description="echoed in the response")
    model: str
    parallel_tool_calls: bool | None = Field(None, description="false: at most one call (enforced); default true")
    previous_response_id: str | None = Field(None, description="continue after a response this server keeps")
    prompt_cache_key: str | None = Field(None, max_length=1024, description="accepted and ignored (agents such as "
                                         "Codex send it)")
    reasoning: ReasoningConfig | None = None
    safety_identifier: str | None = Field(None, max_length=128, description="accepted and logged, as user")
    service_tier: str | None = Field(None, description="accepted and ignored")
    store: bool | None = Field(True, description="keep the response for previous_response_id and GET "
                               "(in memory, the most recent limits.responses_store_size)")
    stream: bool | None = False
    stream_options: dict[str, bool] | None = Field(None, description="accepted and ignored (include_obfuscation: "
                                                   "no padding is added)")
    temperature: Temperature | None = 1.0
    text: TextConfig | None = None
    tools: list[Annotated[FunctionTool, BeforeValidator(_function_tool_only)]] | None = Field(None, max_length=128)
    tool_choice: ToolChoice | None = None
    top_logprobs: Annotated[int | None, Field(ge=0, le=0, description="only 0: no logprobs here")] = None
    top_p: TopP | None = 1.0
    truncation: Literal["disabled"] | None = Field(None, description="only disabled: a conversation longer than "
                                                   "the context is a 400")
    user: str | None = None
    # Hearth's extensions, as on chat completions.
    seed: Seed | None = None
    top_k: TopK = 0
    min_p: MinP = 0.0
    repetition_penalty: RepetitionPenalty = 1.0
    keep_alive: KeepAlive = None

    @field_validator("input", mode="after")
    @classmethod
    def _some_input(cls, value: str | list[Any]) -> str | list[Any]:
        if isinstance(value, list) and not value:
            raise ValueError("input needs at least one item")
        return value

    @field_validator("tool_choice", mode="after")
    @classmethod
    def _choice_names_a_tool(cls, value: Any, info: ValidationInfo) -> Any:
        tools = info.data.get("tools") or []
        if value not in (None, "none", "auto") and not tools:
            raise ValueError("tool_choice needs `tools`")
        if isinstance(value, FunctionChoice) and value.name not in {t.name for t in tools}:
            raise ValueError(f"tool_choice names {value.name!r}, which is not among `tools`")
        return value

    def items(self) -> list[MessageItem | FunctionCallItem | FunctionCallOutputItem | ReasoningItem]:
        """The input as items (a string is one user message)."""
        if isinstance(self.input, str):
            return [MessageItem(role="user", content=self.input)]
        return list(self.input)


# -- the response --------------------------------------------------------------------------------------------------

class OutputText(BaseModel):
    type: Literal["output_text"] = "output_text"
    text: str
    annotations: list[Any] = []
    logprobs: list[Any] = []


class OutputMessage(BaseModel):
    id: str
    type: Literal["message"] = "message"
    status: Literal["in_progress", "completed", "incomplete"]
    content: list[OutputText]
    role: Literal["assistant"] = "assistant"


class OutputFunctionCall(BaseModel):
    id: str
    type: Literal["function_call"] = "function_call"
    status: Literal["in_progress", "completed", "incomplete"]
    arguments: str
    call_id: str
    name: str


class OutputSummary(BaseModel):
    type: Literal["summary_text"] = "summary_text"
    text: str


class OutputReasoning(BaseModel):
    id: str
    type: Literal["reasoning"] = "reasoning"
    summary: list[OutputSummary]
    status: Literal["in_progress", "completed", "incomplete"] | None = None


OutputItem = OutputMessage | OutputFunctionCall | OutputReasoning


class InputTokensDetails(BaseModel):
    cached_tokens: int = 0


class OutputTokensDetails(BaseModel):
    reasoning_tokens: int = Field(0, description="not counted apart from output_tokens")


class ResponseUsage(BaseModel):
    input_tokens: int
    input_tokens_details: InputTokensDetails = InputTokensDetails()
    output_tokens: int
    output_tokens_details: OutputTokensDetails = OutputTokensDetails()
    total_tokens: int


class ResponseError(BaseModel):
    code: str
    message: str


class IncompleteDetails(BaseModel):
    reason: Literal["max_output_tokens"]


class Response(BaseModel):
    """The response object; the request's parameters are echoed as OpenAI does (the SDK's type needs them)."""

    id: str
    object: Literal["response"] = "response"
    created_at: int
    status: Literal["completed", "incomplete", "failed", "in_progress"]
    background: bool = False
    error: ResponseError | None = None
    incomplete_details: IncompleteDetails | None = None
    instructions: str | None = None
    max_output_tokens: int | None = None
    max_tool_calls: int | None = None
    model: str
    output: list[OutputItem] = []
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    reasoning: dict[str, Any] = {"effort": None, "summary": None}
    service_tier: str = "default"
    store: bool = True
    temperature: float | None = 1.0
    text: dict[str, Any] = {"format": {"type": "text"}, "verbosity": "medium"}
    tool_choice: str | dict[str, Any] = "auto"
    tools: list[dict[str, Any]] = []
    top_logprobs: int = 0
    top_p: float | None = 1.0
    truncation: Literal["disabled"] = "disabled"
    usage: ResponseUsage | None = None
    user: str | None = None
    metadata: dict[str, str] = {}


class DeletedResponse(BaseModel):
    id: str
    object: Literal["response.deleted"] = "response.deleted"
    deleted: bool = True
