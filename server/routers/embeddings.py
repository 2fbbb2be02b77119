"""POST /v1/embeddings."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from server.dependencies import get_manager, get_settings, require_api_key
from server.schemas.common import ErrorResponse
from server.schemas.embeddings import EmbeddingRequest, EmbeddingResponse
from server.services.embeddings import EmbeddingService
from server.services.generation import until_disconnected

router = APIRouter(prefix="/v1", tags=["embeddings"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})


def get_embedding_service(request: Request) -> EmbeddingService:
    return EmbeddingService(get_manager(request), get_settings(request))


@router.post("/embeddings", response_model=EmbeddingResponse)
async def create_embeddings(
    body: EmbeddingRequest, request: Request, service: Annotated[EmbeddingService, Depends(get_embedding_service)]
) -> EmbeddingResponse:
    """Embeddings of text or token ids; concurrent requests to one model share GPU passes."""
    # A client that leaves while its request waits for the worker takes it out of the queue.
    return await until_disconnected(request, service.create(body))
