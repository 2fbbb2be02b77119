"""One error hierarchy and the one function that turns any exception into OpenAI's error object.

Every failure leaves the server as `{"error": {"message", "type", "param", "code"}}` with the status of its
class: a client's mistake is a 4xx naming the parameter, never a 500; a GPU fault or a bug is a 500 and
is logged with its traceback. The app registers `install_handlers` so validation errors, unknown routes and
anything unexpected go through `error_body` too.
"""

from __future__ import annotations

import difflib
import logging
import re
from collections.abc import Callable, Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from gpu.errors import GPUFailure
from server.schemas.common import ErrorInfo, ErrorResponse

log = logging.getLogger("hearth.server")


class HearthError(Exception):
    """Base of the server's errors; each subclass fixes the status, the OpenAI type and a default code."""

    status = 500
    type = "server_error"
    code: str | None = None

    def __init__(self, message: str, *, param: str | None = None, code: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code or self.code
        self.headers = headers or {}


class InvalidRequest(HearthError):
    status = 400
    type = "invalid_request_error"


class ContextLengthExceeded(InvalidRequest):
    code = "context_length_exceeded"


class AuthenticationFailed(HearthError):
    status = 401
    type = "invalid_request_error"
    code = "invalid_api_key"


class NotFound(HearthError):
    status = 404
    type = "invalid_request_error"


class ModelNotFound(NotFound):
    """An unknown model name; the message suggests the closest names the server has, or lists them when few."""

    code = "model_not_found"
    LISTED = 8  # at most this many names in a message; past it only the closest are suggested
    _ECHOED = 200  # characters of the requested name repeated back (it comes from the client)

    def __init__(self, model: str, available: Sequence[str] = ()) -> None:
        shown = model if len(model) <= self._ECHOED else model[:self._ECHOED] + "..."
        message = f"The model `{shown}` does not exist or you do not have access to it."
        names = list(dict.fromkeys(available))
        close = difflib.get_close_matches(model, names, n=3) if len(model) <= self._ECHOED else []
        if close:
            message += " Did you mean " + " or ".join(f"`{name}`" for name in close) + "?"
        elif names and len(names) <= self.LISTED:
            message += " This server has " + ", ".join(f"`{name}`" for name in names) + "."
        message += " GET /v1/models lists every model this server offers."
        super().__init__(message, param="model")


class MethodNotAllowed(HearthError):
    status = 405
    type = "invalid_request_error"


class RequestTooLarge(HearthError):
    status = 413
    type = "invalid_request_error"
    code = "request_too_large"


class QueueFull(HearthError):
    """The model's queue is full: the client should come back after Retry-After seconds."""

    status = 429
    type = "rate_limit_error"
    code = "queue_full"

    def __init__(self, model: str, retry_after_s: int) -> None:
        super().__init__(f"The model `{model}` has too many requests waiting; retry after {retry_after_s} s.",
                         headers={"Retry-After": str(retry_after_s)})


class ModelUnavailable(HearthError):
    """The model failed to load or its worker has stopped: not the client's fault."""

    status = 503
    type = "server_error"
    code = "model_unavailable"


_JSON_INVALID = ("We could not parse the JSON body of your request. (HINT: This likely means you aren't using "
                 "your HTTP library correctly. The OpenAI API expects a JSON payload, but what was sent was not "
                 "valid JSON.)")
# Pydantic adds a loc entry per union member ("str", "list[ContentPart]", "function-after[...]"); they are
# not parameter names.
_UNION_TAG = re.compile(r"[^A-Za-z0-9_]|^(str|int|float|bool|list|dict|none|null)$")


def param_name(loc: tuple[Any, ...]) -> str | None:
    """`messages[0].content` from a validation error's loc ("body", "messages", 0, "content")."""
    name = ""
    for part in loc[1:] if loc and loc[0] == "body" else loc:
        if isinstance(part, int):
            name += f"[{part}]"
        elif not _UNION_TAG.search(str(part)):
            name += f".{part}" if name else str(part)
    return name or None


def _from_validation(error: RequestValidationError) -> InvalidRequest:
    errors = list(error.errors())
    if not errors:
        return InvalidRequest("Invalid request.")
    if any(e.get("type") == "json_invalid" for e in errors):
        return InvalidRequest(_JSON_INVALID)
    # With a union, pydantic reports one error per member: the deepest one is the one the client meant.
    first = max(errors, key=lambda e: len(e.get("loc", ())))
    loc = tuple(first.get("loc", ()))
    param = param_name(loc)
    kind = first.get("type", "")
    if kind == "extra_forbidden":
        return InvalidRequest(f"Unrecognized request argument supplied: {param}", param=param,
                              code="unknown_parameter")
    if kind == "missing":
        if param is None:
            return InvalidRequest("The request body must be a JSON object.")
        return InvalidRequest(f"Missing required parameter: '{param}'.", param=param, code="missing_required_parameter")
    if param is None:
        return InvalidRequest(f"Invalid request body: {first.get('msg')}. The body must be a JSON object.")
    message = str(first.get("msg", "invalid value")).removeprefix("Value error, ")
    return InvalidRequest(f"Invalid value for '{param}': {message}", param=param, code="invalid_value")


def to_hearth_error(exc: BaseException) -> HearthError:
    """The HearthError an exception stands for; anything unknown is a 500 whose details stay in the log."""
    if isinstance(exc, HearthError):
        return exc
    if isinstance(exc, RequestValidationError):
        return _from_validation(exc)
    if isinstance(exc, StarletteHTTPException):
        by_status: dict[int, type[HearthError]] = {400: InvalidRequest, 401: AuthenticationFailed, 404: NotFound,
                                                   405: MethodNotAllowed, 413: RequestTooLarge}
        cls = by_status.get(exc.status_code, InvalidRequest if exc.status_code < 500 else HearthError)
        error = cls(str(exc.detail), headers=dict(exc.headers or {}))
        error.status = exc.status_code  # keep the exact status (e.g. 415) while choosing the type by class
        return error
    if isinstance(exc, GPUFailure):
        log.error("GPU failure: %s", exc, exc_info=exc)
        return HearthError(f"The GPU failed while serving the request ({exc.stage}).", code="gpu_failure")
    log.error("unexpected error: %r", exc, exc_info=exc)
    return HearthError("The server had an error while processing your request.", code="internal_error")


ErrorShape = Callable[[HearthError], dict[str, Any]]


def openai_error(error: HearthError) -> dict[str, Any]:
    """OpenAI's error object: `{"error": {"message", "type", "param", "code"}}`."""
    body = ErrorResponse(error=ErrorInfo(message=error.message, type=error.type, param=error.param, code=error.code))
    return body.model_dump(mode="json")


# Routes that speak another API's dialect answer errors in that API's shape: (path prefix, shape), the longest
# matching prefix wins; every other path gets OpenAI's.
_SHAPES: list[tuple[str, ErrorShape]] = []


def register_error_shape(prefix: str, shape: ErrorShape) -> None:
    """Answer errors on paths under prefix (e.g. "/api/" for Ollama's API) in shape's JSON."""
    _SHAPES[:] = sorted([*(s for s in _SHAPES if s[0] != prefix), (prefix, shape)], key=lambda s: -len(s[0]))


def shape_for(path: str) -> ErrorShape:
    """The error shape of the API that path belongs to."""
    return next((shape for prefix, shape in _SHAPES if path.startswith(prefix)), openai_error)


def error_body(exc: BaseException, path: str = "") -> tuple[HearthError, dict[str, Any]]:
    """The error and its JSON body in the shape of the API at path, for responses and for error events inside a
    stream."""
    error = to_hearth_error(exc)
    return error, shape_for(path)(error)


def error_response(exc: BaseException, path: str = "") -> JSONResponse:
    """The JSON response for any exception, in the shape of the API at path."""
    error, body = error_body(exc, path)
    return JSONResponse(body, status_code=error.status, headers=error.headers)


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    return error_response(exc, request.url.path)


def install_handlers(app: FastAPI) -> None:
    """Route every exception the app can raise through error_response."""
    # Handlers for Exception itself run in Starlette's outermost middleware, which re-raises after answering
    # (uvicorn then logs it and closes the connection): right for bugs, so GPU failures get their own.
    for exc_type in (HearthError, RequestValidationError, StarletteHTTPException, GPUFailure, Exception):
        app.add_exception_handler(exc_type, _handle)
