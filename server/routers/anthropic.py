"""POST /v1/messages and /v1/messages/count_tokens: Anthropic's Messages API, errors in Anthropic's shape."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from server.dependencies import get_chat_service, require_api_key
from server.errors import register_error_shape
from server.schemas.anthropic import (
    AnthropicErrorResponse,
    CountTokensRequest,
    Message,
    MessagesRequest,
    TokenCountResponse,
)
from server.services.anthropic import AnthropicService, anthropic_error
from server.services.chat import ChatService
from server.sse import named_sse_response

register_error_shape("/v1/messages", anthropic_error)

router = APIRouter(prefix="/v1", tags=["anthropic"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": AnthropicErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})


def get_anthropic_service(chat: Annotated[ChatService, Depends(get_chat_service)]) -> AnthropicService:
    return AnthropicService(chat)


@router.post("/messages", response_model=Message)
async def create_message(
    body: MessagesRequest, request: Request, service: Annotated[AnthropicService, Depends(get_anthropic_service)]
) -> Message | StreamingResponse:
    """A message, as Anthropic's Messages API; with `stream`, its named Server-Sent Events."""
    result = await service.create(body, request)
    if isinstance(result, Message):
        return result
    events: AsyncIterator[dict[str, Any]] = result
    return named_sse_response(request, events)


@router.post("/messages/count_tokens", response_model=TokenCountResponse)
async def count_message_tokens(
    body: CountTokensRequest, service: Annotated[AnthropicService, Depends(get_anthropic_service)]
) -> TokenCountResponse:
    """The tokens the messages, system prompt and tools take, rendered as /v1/messages renders them."""
    return await service.count_tokens(body)
