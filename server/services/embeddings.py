"""Embeddings (/v1/embeddings): inputs to token ids, checks that name their parameter, the model's worker,
then the vectors on the wire (Matryoshka truncation where the model supports it)."""

from __future__ import annotations

import numpy as np

from config.settings import Settings
from server.errors import ContextLengthExceeded, InvalidRequest
from server.model_manager import ModelManager
from server.protocols import EmbeddingModel
from server.schemas.embeddings import Embedding, EmbeddingRequest, EmbeddingResponse, EmbeddingUsage


def _param(index: int, count: int) -> str:
    return "input" if count == 1 else f"input[{index}]"


def tokenize(model: EmbeddingModel, inputs: list[str | list[int]], truncate: bool,
             max_total: int | None = None) -> list[list[int]]:
    """Token ids of every input; 400s name the input that is too long or holds a bad token id, or where the
    inputs together pass max_total tokens (limits.max_embedding_tokens: tokenising stops there)."""
    max_tokens, vocab = model.max_tokens, model.vocab_size
    out = []
    total = 0
    for i, item in enumerate(inputs):
        if isinstance(item, str):
            ids = model.tokenize(item, truncate=truncate)
        else:
            bad = next((t for t in item if not 0 <= t < vocab), None)
            if bad is not None:
                raise InvalidRequest(f"token id {bad} is outside this model's vocabulary [0, {vocab}).",
                                     param=_param(i, len(inputs)))
            ids = list(item[:max_tokens]) if truncate else list(item)
        if len(ids) > max_tokens:
            raise ContextLengthExceeded(
                f"This model's maximum context length is {max_tokens} tokens, however you requested {len(ids)} "
                f"tokens in {_param(i, len(inputs))}. Please reduce the length of the input, or send "
                f"\"truncate\": true to cut it to {max_tokens} tokens.", param=_param(i, len(inputs)))
        total += len(ids)
        if max_total is not None and total > max_total:
            raise InvalidRequest(
                f"The inputs hold more than this server's limit of {max_total} tokens per request (passed at "
                f"{_param(i, len(inputs))}; setting limits.max_embedding_tokens, HEARTH_MAX_EMBEDDING_TOKENS). "
                "Send the inputs in several requests.", param="input")
        out.append(ids)
    return out


def shorten(vectors: np.ndarray, dimensions: int) -> np.ndarray:
    """Matryoshka: the first `dimensions` values of each vector, L2-normalised again."""
    head = vectors[:, :dimensions].astype(np.float64)
    norms = np.maximum(np.linalg.norm(head, axis=1, keepdims=True), 1e-12)
    return (head / norms).astype(np.float32)


class EmbeddingService:
    """Turns embedding requests into work for the model's worker and its vectors into OpenAI responses."""

    def __init__(self, manager: ModelManager, settings: Settings) -> None:
        self.manager = manager
        self.settings = settings

    async def create(self, request: EmbeddingRequest) -> EmbeddingResponse:
        entry, worker = await self.manager.worker_for(request.model, kind="embedding", keep_alive=request.keep_alive)
        model = worker.model
        dimensions = request.dimensions or model.dimensions
        if dimensions != model.dimensions:
            if not model.matryoshka:
                raise InvalidRequest(f"The model `{entry.id}` does not support the dimensions parameter: it was not "
                                     f"trained for shorter embeddings (it gives {model.dimensions}).",
                                     param="dimensions")
            if dimensions > model.dimensions:
                raise InvalidRequest(f"dimensions is {dimensions}; the model `{entry.id}` gives at most "
                                     f"{model.dimensions}.", param="dimensions")
        ids = await self.manager.preparation.run(tokenize, model, request.inputs(), request.truncate,
                                                 self.settings.limits.max_embedding_tokens)
        vectors = await worker.embed(ids, self.settings.limits.retry_after_s)
        if dimensions != model.dimensions:
            vectors = shorten(vectors, dimensions)
        tokens = sum(len(i) for i in ids)
        return EmbeddingResponse(
            data=[Embedding.of(v, i, request.encoding_format) for i, v in enumerate(vectors)],
            model=entry.id, usage=EmbeddingUsage(prompt_tokens=tokens, total_tokens=tokens),
        )
