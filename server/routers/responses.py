"""POST /v1/responses (OpenAI's Responses API on the chat path), and GET and DELETE of the responses kept for
previous_response_id."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from server.dependencies import get_chat_service, get_settings, require_api_key
from server.schemas.common import ErrorResponse
from server.schemas.responses import DeletedResponse, Response, ResponseRequest
from server.services.chat import ChatService
from server.services.responses import ResponsesService, ResponseStore
from server.sse import named_sse_response

router = APIRouter(prefix="/v1", tags=["responses"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})


def get_responses_service(request: Request, chat: Annotated[ChatService, Depends(get_chat_service)],
                          ) -> ResponsesService:
    """The service over the app's one response store, made on first use with the app's settings."""
    state = request.app.state
    store = getattr(state, "responses_store", None)
    if store is None:
        store = state.responses_store = ResponseStore(get_settings(request).limits.responses_store_size)
    return ResponsesService(chat, store)


Service = Annotated[ResponsesService, Depends(get_responses_service)]


@router.post("/responses", response_model=Response)
async def create_response(body: ResponseRequest, request: Request, service: Service) -> Response | StreamingResponse:
    """A model response; with `stream`, Server-Sent Events named by type (response.created, ...,
    response.completed)."""
    result = await service.create(body, request)
    if isinstance(result, Response):
        return result
    return named_sse_response(request, result)


@router.get("/responses/{response_id}", response_model=Response)
async def retrieve_response(response_id: str, service: Service) -> Response:
    """A response this server keeps (store not false, not yet dropped for newer ones)."""
    return service.retrieve(response_id)


@router.delete("/responses/{response_id}", response_model=DeletedResponse)
async def delete_response(response_id: str, service: Service) -> DeletedResponse:
    """Forget a kept response: previous_response_id can no longer name it."""
    return service.delete(response_id)
