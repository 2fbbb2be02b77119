"""GET /v1/models and /v1/models/{id}."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel


class Model(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str
    # Hearth's extension: the model an alias (OpenAI's `gpt-4o-mini`, say) reaches; None for a model itself.
    alias_of: str | None = None
    # Hearth's extension: what a chat model's prompts may hold ("text", and "image" where it has an image encoder);
    # None for other kinds of model
    input_modalities: list[str] | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[Model]
