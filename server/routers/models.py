"""GET /v1/models and /v1/models/{model}."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from server.dependencies import get_model_service, require_api_key
from server.schemas.common import ErrorResponse
from server.schemas.models import Model, ModelList
from server.services.models import ModelService

router = APIRouter(prefix="/v1", tags=["models"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (401, 404)})


@router.get("/models", response_model=ModelList)
async def list_models(service: Annotated[ModelService, Depends(get_model_service)]) -> ModelList:
    """Configured models, OpenAI-style aliases and the chat models in the local Ollama store."""
    return await service.list()


# `:path` because Ollama names may hold slashes (`user/model:tag`).
@router.get("/models/{model:path}", response_model=Model)
async def retrieve_model(model: str, service: Annotated[ModelService, Depends(get_model_service)]) -> Model:
    """One model by name (an alias or an Ollama name such as `gemma3:270m` too)."""
    return await service.get(model)
