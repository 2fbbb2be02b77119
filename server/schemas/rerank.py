"""POST /v1/rerank (also /rerank, /v2/rerank): the request and the response as Cohere and Jina define them and
llama.cpp and vLLM accept them.

Differences a client may notice: `return_documents` is false unless sent (Cohere v2's default; Jina and vLLM
default to true); `relevance_score` is the cross-encoder's logit through a sigmoid, as sentence-transformers'
CrossEncoder and vLLM give it for one-label models (llama.cpp's server returns the raw logit).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, Field, field_validator

from server.schemas.common import KeepAlive, OpenAIRequest


class RerankDocument(OpenAIRequest):
    """A document as an object (Cohere v1, Jina): only its text is read."""

    text: str


class RerankRequest(OpenAIRequest):
    """The request body; Hearth's extensions come last."""

    model: str
    query: str = Field(min_length=1)
    documents: list[str | RerankDocument] = Field(description="strings, or objects with `text`; the server's "
                                                  "limits.max_rerank_documents at most")
    top_n: Annotated[int, Field(ge=0)] | None = Field(
        None, description="return the best top_n results; unset or 0: all of them")
    return_documents: bool = Field(False, description="echo each result's document as `document: {text}`")
    max_tokens_per_doc: Annotated[int, Field(ge=1)] | None = Field(
        None, description="cut each document to this many tokens before scoring (Cohere v2)")
    # Hearth's extensions.
    truncate: bool = Field(True, description="cut a pair longer than the model's limit (the longer of query and "
                           "document first, as CrossEncoder does); false: such a pair is a 400")
    keep_alive: KeepAlive = None

    @field_validator("documents", mode="after")
    @classmethod
    def _not_empty(cls, value: list[str | RerankDocument]) -> list[str | RerankDocument]:
        if not value:
            raise ValueError("documents must not be empty")
        return value

    def texts(self) -> list[str]:
        """The documents' texts, in order."""
        return [d if isinstance(d, str) else d.text for d in self.documents]


class RerankResultDocument(BaseModel):
    text: str


class RerankResult(BaseModel):
    index: int  # of the document in the request
    relevance_score: float
    document: RerankResultDocument | None = None  # only with return_documents


class RerankUsage(BaseModel):
    prompt_tokens: int  # llama.cpp's field; the same as total_tokens
    total_tokens: int  # every pair's tokens, special tokens included


class ApiVersion(BaseModel):
    version: str = "2"


class BilledUnits(BaseModel):
    search_units: int  # Cohere's unit: one per query and up to 100 documents


class RerankMeta(BaseModel):
    api_version: ApiVersion = ApiVersion()
    billed_units: BilledUnits


class RerankResponse(BaseModel):
    id: str
    model: str
    results: list[RerankResult]  # by relevance_score, highest first
    usage: RerankUsage
    meta: RerankMeta
