"""POST /v1/chat/completions."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from server.dependencies import get_chat_service, require_api_key
from server.schemas.chat import ChatCompletion, ChatCompletionRequest
from server.schemas.common import ErrorResponse
from server.services.chat import ChatService
from server.sse import sse_response

router = APIRouter(prefix="/v1", tags=["chat"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})


@router.post("/chat/completions", response_model=ChatCompletion)
async def create_chat_completion(
    body: ChatCompletionRequest, request: Request, service: Annotated[ChatService, Depends(get_chat_service)]
) -> ChatCompletion | StreamingResponse:
    """A chat completion; with `stream`, Server-Sent Events of chat.completion.chunk objects."""
    result = await service.create(body, request)
    if isinstance(result, ChatCompletion):
        return result
    return sse_response(request, result)
