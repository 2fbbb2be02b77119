"""Rerank (/v1/rerank, /rerank, /v2/rerank): each (query, document) pair to token ids and types, all of a request's
pairs to the cross-encoder's worker as one batch, then the scores sorted on the wire.

relevance_score = sigmoid(logit), as sentence-transformers' CrossEncoder (its default activation for one label)
and vLLM return it; llama.cpp's server sends the logit itself. The order is the same either way.
"""

from __future__ import annotations

import math
import uuid

import numpy as np

from config.settings import Settings
from server.errors import ContextLengthExceeded, InvalidRequest
from server.model_manager import ModelManager
from server.protocols import RerankModel
from server.schemas.rerank import (
    BilledUnits,
    RerankMeta,
    RerankRequest,
    RerankResponse,
    RerankResult,
    RerankResultDocument,
    RerankUsage,
)

DOCUMENTS_PER_SEARCH_UNIT = 100  # Cohere bills one search unit per query and up to 100 documents


def _longest_first(ids: list[int], types: list[int], max_tokens: int) -> tuple[list[int], list[int]]:
    """Cut a `[CLS] a [SEP] b [SEP]` pair to max_tokens by taking one token at a time from the end of the longer
    segment (the second on a tie): longest-first, for pairs whose document max_tokens_per_doc has already cut."""
    first = [i for i, t in enumerate(types) if t == 0][1:-1]  # a's rows, without [CLS] and its [SEP]
    second = [i for i, t in enumerate(types) if t == 1][:-1]  # b's rows, without the last [SEP]
    drop = set()
    while len(ids) - len(drop) > max_tokens and (first or second):
        side = first if len(first) > len(second) else second
        drop.add(side.pop())
    return [x for i, x in enumerate(ids) if i not in drop], [x for i, x in enumerate(types) if i not in drop]


def tokenize_pairs(model: RerankModel, query: str, documents: list[str], truncate: bool,
                   max_tokens_per_doc: int | None) -> list[tuple[list[int], list[int]]]:
    """(ids, token types) of `[CLS] query [SEP] document [SEP]` per document; 400s name the document whose pair is
    too long when truncate is off."""
    max_tokens = model.max_tokens
    pairs = []
    for i, document in enumerate(documents):
        if max_tokens_per_doc is None:
            ids, types = model.tokenize_pair(query, document, truncate=truncate)
        else:
            ids, types = model.tokenize_pair(query, document)
            doc_rows = [r for r, t in enumerate(types) if t == 1][:-1]
            cut = set(doc_rows[max_tokens_per_doc:])
            ids = [x for r, x in enumerate(ids) if r not in cut]
            types = [x for r, x in enumerate(types) if r not in cut]
            if truncate and len(ids) > max_tokens:
                ids, types = _longest_first(ids, types, max_tokens)
        if len(ids) > max_tokens:
            raise ContextLengthExceeded(
                f"This model's maximum context length is {max_tokens} tokens, however the query and documents[{i}] "
                f"together hold {len(ids)} tokens. Shorten them, send max_tokens_per_doc, or leave \"truncate\" "
                "at true to cut the pair.", param=f"documents[{i}]")
        pairs.append((ids, types))
    return pairs


def relevance(logits: np.ndarray) -> np.ndarray:
    """float64 sigmoid of one-label logits: CrossEncoder's default activation."""
    x = np.asarray(logits, np.float64)
    return 1.0 / (1.0 + np.exp(-x))


class RerankService:
    """Turns rerank requests into pairs for the cross-encoder's worker and its scores into ranked results."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    async def create(self, request: RerankRequest) -> RerankResponse:
        texts = request.texts()
        limit = self.settings.limits.max_rerank_documents
        if len(texts) > limit:
            raise InvalidRequest(f"documents holds {len(texts)} documents; this server ranks at most {limit} per "
                                 "request (setting limits.max_rerank_documents, HEARTH_MAX_RERANK_DOCUMENTS).",
                                 param="documents")
        entry, worker = await self.manager.worker_for(request.model, kind="rerank", keep_alive=request.keep_alive)
        pairs = await self.manager.preparation.run(tokenize_pairs, worker.model, request.query, texts,
                                                   request.truncate, request.max_tokens_per_doc)
        scores = relevance(await worker.score(pairs, self.settings.limits.retry_after_s))
        order = sorted(range(len(texts)), key=lambda i: (-scores[i], i))
        if request.top_n:
            order = order[:request.top_n]
        results = [RerankResult(index=i, relevance_score=float(scores[i]),
                                document=RerankResultDocument(text=texts[i]) if request.return_documents else None)
                   for i in order]
        tokens = sum(len(ids) for ids, _ in pairs)
        return RerankResponse(
            id=f"rerank-{uuid.uuid4().hex}", model=entry.id, results=results,
            usage=RerankUsage(prompt_tokens=tokens, total_tokens=tokens),
            meta=RerankMeta(billed_units=BilledUnits(search_units=math.ceil(len(texts) / DOCUMENTS_PER_SEARCH_UNIT))))
