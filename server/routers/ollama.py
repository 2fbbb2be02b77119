"""Ollama's native API: /api/chat, /api/generate, /api/embed, /api/embeddings, /api/tags, /api/show, /api/ps and
/api/version, answering errors as Ollama does (`{"error": "<message>"}`) and streaming NDJSON by default."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse

from server.dependencies import get_manager, get_settings, require_api_key
from server.errors import HearthError, register_error_shape
from server.model_manager import ModelManager
from server.ndjson import ndjson_response
from server.schemas.ollama import (
    ChatRequest,
    ChatResponse,
    EmbeddingsRequest,
    EmbeddingsResponse,
    EmbedRequest,
    EmbedResponse,
    GenerateRequest,
    GenerateResponse,
    ListResponse,
    ProcessResponse,
    ShowRequest,
    ShowResponse,
    VersionResponse,
)
from server.services.ollama import OllamaService


def ollama_error(error: HearthError) -> dict[str, Any]:
    """Ollama's error body: the message alone."""
    return {"error": error.message}


register_error_shape("/api/", ollama_error)


def get_ollama_service(request: Request) -> OllamaService:
    manager: ModelManager = get_manager(request)
    return OllamaService(manager, get_settings(request))


Service = Annotated[OllamaService, Depends(get_ollama_service)]
router = APIRouter(prefix="/api", tags=["ollama"], dependencies=[Depends(require_api_key)],
                   responses={code: {"description": 'Ollama\'s error: {"error": "<message>"}'}
                              for code in (400, 401, 404, 413, 429, 500, 503)})


@router.post("/chat", response_model=ChatResponse, response_model_exclude_none=True)
async def chat(body: ChatRequest, request: Request, service: Service) -> ChatResponse | StreamingResponse:
    """The next chat message; NDJSON lines unless `stream` is false. Empty messages load the model."""
    result = await service.chat(body, request)
    return result if isinstance(result, ChatResponse) else ndjson_response(request, result)


@router.post("/generate", response_model=GenerateResponse, response_model_exclude_none=True)
async def generate(body: GenerateRequest, request: Request, service: Service) -> GenerateResponse | StreamingResponse:
    """A reply to a prompt (a user turn through the chat template; `raw`: the prompt as it is); NDJSON lines unless
    `stream` is false. An empty prompt loads the model."""
    result = await service.generate(body, request)
    return result if isinstance(result, GenerateResponse) else ndjson_response(request, result)


@router.post("/embed", response_model=EmbedResponse, response_model_exclude_none=True)
async def embed(body: EmbedRequest, service: Service) -> EmbedResponse:
    """Embeddings of a text or a list of texts."""
    return await service.embed(body)


@router.post("/embeddings", response_model=EmbeddingsResponse)
async def embeddings(body: EmbeddingsRequest, service: Service) -> EmbeddingsResponse:
    """One text's embedding (Ollama's older endpoint)."""
    return await service.embeddings(body)


@router.get("/tags", response_model=ListResponse, response_model_exclude_none=True)
async def tags(service: Service) -> ListResponse:
    """The chat and embedding models this server offers."""
    return await service.tags()


@router.post("/show", response_model=ShowResponse, response_model_exclude_none=True)
async def show(body: ShowRequest, service: Service) -> ShowResponse:
    """A model's details, template and metadata."""
    return await service.show(body)


@router.get("/ps", response_model=ProcessResponse, response_model_exclude_none=True)
async def ps(service: Service) -> ProcessResponse:
    """The models loaded now and when each unloads."""
    return await service.ps()


@router.get("/version", response_model=VersionResponse)
async def version() -> VersionResponse:
    """Hearth's version."""
    return OllamaService.version()
