"""POST /v1/completions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from server.dependencies import get_completion_service, require_api_key
from server.schemas.common import ErrorResponse
from server.schemas.completions import Completion, CompletionRequest
from server.services.completions import CompletionService
from server.sse import sse_response

router = APIRouter(prefix="/v1", tags=["completions"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})


@router.post("/completions", response_model=Completion)
async def create_completion(
    body: CompletionRequest, request: Request, service: Annotated[CompletionService, Depends(get_completion_service)]
) -> Completion | StreamingResponse:
    """A prompt completion; with `stream`, Server-Sent Events of text_completion objects."""
    result = await service.create(body, request)
    if isinstance(result, Completion):
        return result
    return sse_response(request, result)
