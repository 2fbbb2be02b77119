"""POST /v1/embeddings: the request and the response, in the order of OpenAI's API reference."""

from __future__ import annotations

import base64
from typing import Annotated, Literal

import numpy as np
from pydantic import BaseModel, Field, field_validator

from server.schemas.common import KeepAlive, OpenAIRequest

EmbeddingInput = str | list[str] | list[int] | list[list[int]]
MAX_INPUTS = 2048  # OpenAI's limit of inputs per request
Dimensions = Annotated[int, Field(ge=1, description="Matryoshka truncation, where the model was trained for it")]


class EmbeddingRequest(OpenAIRequest):
    """The request body; Hearth's extension comes last."""

    input: EmbeddingInput = Field(description="text, token ids, or a list of either (at most 2048 inputs)")
    model: str
    dimensions: Dimensions | None = None
    encoding_format: Literal["float", "base64"] = Field(
        "float", description="base64: the little-endian float32 bytes (the openai SDK asks for this by default)")
    user: str | None = None
    # Hearth's extension.
    truncate: bool = Field(False, description="cut inputs longer than the model's limit instead of a 400")
    keep_alive: KeepAlive = None

    @field_validator("input", mode="after")
    @classmethod
    def _not_empty(cls, value: EmbeddingInput) -> EmbeddingInput:
        items = [value] if isinstance(value, str) else value
        if not items:
            raise ValueError("input must not be empty")
        if len(items) > MAX_INPUTS and not all(isinstance(i, int) for i in items):
            raise ValueError(f"input has {len(items)} items; at most {MAX_INPUTS} are allowed")
        if any(isinstance(i, (str, list)) and not i for i in items):
            raise ValueError("input must not contain empty strings or empty token lists")
        return value

    def inputs(self) -> list[str | list[int]]:
        """The inputs, each text or token ids."""
        value = self.input
        if isinstance(value, str):
            return [value]
        if all(isinstance(i, int) for i in value):
            return [list(value)]  # type: ignore[arg-type]
        return list(value)  # type: ignore[arg-type]


class Embedding(BaseModel):
    object: Literal["embedding"] = "embedding"
    embedding: list[float] | str
    index: int

    @classmethod
    def of(cls, vector: np.ndarray, index: int, encoding_format: str) -> Embedding:
        """The wire form of one float32 vector: a list of floats, or base64 of its little-endian bytes."""
        if encoding_format == "base64":
            return cls(embedding=base64.b64encode(vector.astype("<f4").tobytes()).decode("ascii"), index=index)
        return cls(embedding=vector.astype(np.float32).tolist(), index=index)


class EmbeddingUsage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: EmbeddingUsage
