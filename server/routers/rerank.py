"""POST /v1/rerank, /rerank and /v2/rerank: one handler under the paths Cohere, Jina, llama.cpp and vLLM clients
call."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request

from server.dependencies import get_manager, get_settings, require_api_key
from server.schemas.common import ErrorResponse
from server.schemas.rerank import RerankRequest, RerankResponse
from server.services.generation import until_disconnected
from server.services.rerank import RerankService

router = APIRouter(tags=["rerank"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})


def get_rerank_service(request: Request) -> RerankService:
    return RerankService(get_manager(request), get_settings(request))


async def create_rerank(
    body: RerankRequest, request: Request, service: Annotated[RerankService, Depends(get_rerank_service)]
) -> RerankResponse:
    """Documents ranked by a cross-encoder's relevance to the query, highest first."""
    # A client that leaves while its request waits for the worker takes it out of the queue.
    return await until_disconnected(request, service.create(body))


for _path, _name in (("/v1/rerank", "rerank"), ("/rerank", "rerank_unversioned"), ("/v2/rerank", "rerank_v2")):
    # `document` appears only with return_documents, as Cohere sends it.
    router.add_api_route(_path, create_rerank, methods=["POST"], response_model=RerankResponse,
                         response_model_exclude_none=True, name=_name, operation_id=_name)
