"""FastAPI dependencies: the state built in the app's lifespan, and the API key check."""

from __future__ import annotations

from fastapi import Request

from config.settings import Settings
from server.errors import AuthenticationFailed
from server.middleware import api_key_matches, presented_key
from server.model_manager import ModelManager
from server.services.chat import ChatService
from server.services.completions import CompletionService
from server.services.models import ModelService


def get_settings(request: Request) -> Settings:
    return request.app.state.settings


def get_manager(request: Request) -> ModelManager:
    return request.app.state.manager


def get_chat_service(request: Request) -> ChatService:
    return ChatService(get_manager(request), get_settings(request))


def get_completion_service(request: Request) -> CompletionService:
    return CompletionService(get_manager(request), get_settings(request))


def get_model_service(request: Request) -> ModelService:
    return ModelService(get_manager(request).registry)


def require_api_key(request: Request) -> None:
    """With API keys configured, /v1 needs `Authorization: Bearer <key>` or `x-api-key: <key>` (compared in
    constant time).

    server/middleware.py's ApiKeyAuth already checks every request; this keeps routers safe on their own.
    """
    keys = get_settings(request).api_keys()
    if keys and not api_key_matches(keys, presented_key(dict(request.headers.raw))):
        raise AuthenticationFailed("Incorrect API key provided. Send it as `Authorization: Bearer <key>`.")
