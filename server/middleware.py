"""ASGI middleware, outermost first: request ids, metrics and access log; CORS; API keys; a timeout on the whole
response (streams included); the request body size limit; lenient content types and HEAD. `install_middleware` adds
them to an app in that order.

They are plain ASGI classes (not BaseHTTPMiddleware) so streamed responses pass through untouched, and they
key on paths, never on routers: a new endpoint is counted, authenticated and limited without any change here.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import time
from collections.abc import Mapping

from fastapi import FastAPI
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from config.settings import Settings
from server.errors import AuthenticationFailed, HearthError, RequestTooLarge, error_body, error_response
from server.metrics import Metrics
from server.request_context import begin_request, end_request, request_id_from, reset_request_id, set_request_id
from server.sse import DONE, sse_event

access_log = logging.getLogger("hearth.access")
# Paths that never need an API key: liveness and readiness probes (Docker's HEALTHCHECK, Kubernetes), and the
# API's own description, and the playground page with its assets (its API calls carry the key the user gives).
# /metrics joins them unless settings.metrics_need_key.
OPEN_PATHS = frozenset({"/", "/health", "/ready", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json",
                        "/playground", "/playground/"})
OPEN_PREFIXES = ("/playground/",)
PROBE_PATHS = frozenset({"/health", "/ready", "/metrics"})
# The multipart upload routes, whose bodies may be up to limits.max_upload_bytes.
UPLOAD_PATHS = ("/v1/audio/transcriptions", "/v1/audio/translations")


class RequestTimeout(HearthError):
    """The request (its stream included) took longer than limits.request_timeout_s; the work was cancelled."""

    status = 504
    type = "server_error"
    code = "timeout"


class BodySizeLimit:
    """Refuse bodies over max_bytes with 413 before the app parses them.

    A declared Content-Length over the limit is refused without reading. A body sent without one (chunked)
    is counted as it arrives; past the limit the app's own reply is replaced by the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int, path_limits: Mapping[str, int] | None = None) -> None:
        """path_limits: other limits by exact path (the audio upload routes take files up to 25 MiB)."""
        self.app = app
        self.max_bytes = max_bytes
        self.path_limits = dict(path_limits or {})

    def _error(self, limit: int) -> RequestTooLarge:
        return RequestTooLarge(f"The request body is larger than the limit of {limit} bytes.")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit = self.path_limits.get(scope.get("path", ""), self.max_bytes)
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await error_response(self._error(limit), scope.get("path", ""))(scope, receive, send)
            return

        received = 0
        overflow = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, overflow
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    overflow = True
                    raise self._error(limit)
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if overflow:
                if not started:  # whatever the app made of the exception, the client gets the 413
                    started = True
                    await error_response(self._error(limit), scope.get("path", ""))(scope, receive, send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except RequestTooLarge:
            if not started:
                started = True
                await error_response(self._error(limit), scope.get("path", ""))(scope, receive, send)


class RequestContext:
    """Give each request an id (X-Request-Id in and out), count it in the metrics and write its access line.

    The id and the app's metrics are context variables for the request's lifetime, so log lines and metric
    calls made anywhere while serving it find them. An exception that no handler inside took (a bug) is
    answered here, with the 500 error object and the id, and logged with the id: left to Starlette's outermost
    handler, it would be answered and logged outside this class, without either.
    """

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics
        self._templates: list[tuple[re.Pattern[str], str]] | None = None  # the app's paths, read on first need

    def _route(self, scope: Scope) -> str:
        """The route's template (`/v1/models/{model}`), so labels stay few whatever paths clients send."""
        matched = scope.get("route")
        route = getattr(matched, "path_format", None) or getattr(matched, "path", None)  # `{model}`, not `:path`
        if route:
            return route
        # Answered before routing (401, 413, 504): the template of the app's path it would have reached.
        if self._templates is None:
            paths = getattr(scope.get("app"), "openapi", dict)().get("paths", {})
            self._templates = [(re.compile("^" + re.sub(r"\\{[^}]+\\}", ".+", re.escape(p)) + "$"), p) for p in paths]
        path = scope.get("path", "")
        return next((template for pattern, template in self._templates if pattern.match(path)), "unmatched")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        request_id = request_id_from(headers.get(b"x-request-id", b"").decode("latin-1"))
        scope.setdefault("state", {})["request_id"] = request_id
        id_token, metrics_token, end_token = set_request_id(request_id), self.metrics.activate(), begin_request()
        status = 500  # what the client gets if the app fails before answering (Starlette's error handler)
        started = time.perf_counter()
        response_started = False

        async def send_with_id(message: Message) -> None:
            nonlocal status, response_started
            if message["type"] == "http.response.start":
                status, response_started = message["status"], True
                message["headers"] = [*message.get("headers", []), (b"x-request-id", request_id.encode())]
            await send(message)

        self.metrics.in_flight.inc()
        try:
            try:
                await self.app(scope, receive, send_with_id)
            except Exception as error:
                if response_started:  # too late for an error object: the server drops the connection
                    raise
                # logs it, with its traceback
                await error_response(error, scope.get("path", ""))(scope, receive, send_with_id)
        finally:
            self.metrics.in_flight.dec()
            elapsed = time.perf_counter() - started
            method = scope.get("method", "")
            self.metrics.observe_request(self._route(scope), method, status, elapsed)
            path = scope.get("path", "")
            # Probes answer every few seconds (Docker, Kubernetes, Prometheus): their successes only at debug level.
            level = logging.DEBUG if path in PROBE_PATHS and status < 400 else logging.INFO
            access_log.log(level, "%s %s %d %.3fs", method, path, status, elapsed,
                           extra={"method": method, "path": path, "status": status, "duration_s": round(elapsed, 4)})
            end_request(end_token)  # e.g. the model manager's lease on the request's model
            self.metrics.deactivate(metrics_token)
            reset_request_id(id_token)


def presented_key(headers: dict[bytes, bytes]) -> str:
    """The credentials a request carries, as `Bearer <key>`: its Authorization header, else Anthropic's
    `x-api-key` header (what the anthropic client sends)."""
    authorization = headers.get(b"authorization", b"").decode("latin-1")
    if authorization:
        return authorization
    api_key = headers.get(b"x-api-key", b"").decode("latin-1")
    return f"Bearer {api_key}" if api_key else ""


def api_key_matches(keys: tuple[str, ...], authorization: str) -> bool:
    """Whether `Authorization: Bearer <key>` names one of keys (each compared in constant time)."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer":
        return False
    given = token.strip().encode("utf-8", "surrogateescape")
    matched = False
    for key in keys:  # no early exit: the time taken does not tell which key came close
        matched |= secrets.compare_digest(given, key.encode())
    return matched


class ApiKeyAuth:
    """With API keys set, every path but the open ones needs `Authorization: Bearer <key>`; else 401 as OpenAI."""

    def __init__(self, app: ASGIApp, keys: tuple[str, ...], open_paths: frozenset[str] = OPEN_PATHS) -> None:
        self.app = app
        self.keys = keys
        self.open_paths = open_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if scope["type"] != "http" or not self.keys or path in self.open_paths or path.startswith(OPEN_PREFIXES):
            await self.app(scope, receive, send)
            return
        authorization = presented_key(dict(scope.get("headers") or []))
        if not authorization:
            error = AuthenticationFailed("You didn't provide an API key. You need to provide your API key in an "
                                         "Authorization header using Bearer auth (i.e. Authorization: Bearer "
                                         "YOUR_KEY).")
        elif not api_key_matches(self.keys, authorization):
            error = AuthenticationFailed("Incorrect API key provided. Send one of this server's keys as "
                                         "`Authorization: Bearer <key>`.")
        else:
            await self.app(scope, receive, send)
            return
        await error_response(error, scope.get("path", ""))(scope, receive, send)


class TimeoutUntilResponse:
    """Bound a request to `seconds` from its arrival, streams included, cancelling its work when they pass.

    A response that has not started by then is a 504. A stream that has started ends there: Server-Sent Events
    with an error event in the stream's own format (`data: {"error": ...}`, then `data: [DONE]`; a stream of named
    events an `event: error` in its API's error shape), any other body (raw audio) by simply ending. Cancelling
    the request's task cancels its job in the model's worker, as a client that goes away does.
    """

    def __init__(self, app: ASGIApp, seconds: float) -> None:
        self.app = app
        self.seconds = seconds

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.seconds:
            await self.app(scope, receive, send)
            return
        started = asyncio.Event()
        event_stream = False  # the response is text/event-stream
        named_events = False  # ... of named events (`event: <type>`, no [DONE]: Responses, Anthropic Messages)
        first_body = True
        finished = False  # the response's last body message went out

        async def send_marking_start(message: Message) -> None:
            nonlocal event_stream, named_events, first_body, finished
            if message["type"] == "http.response.start":
                content_type = dict(message.get("headers") or []).get(b"content-type", b"")
                event_stream = content_type.startswith(b"text/event-stream")
                started.set()
            elif message["type"] == "http.response.body":
                body = message.get("body", b"")
                if first_body and body:
                    named_events, first_body = body.startswith(b"event:"), False
                if not message.get("more_body", False):
                    finished = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, send_marking_start))
        timed_out = False
        try:
            done, _ = await asyncio.wait({task}, timeout=self.seconds)
            timed_out = not done
        finally:
            if not task.done():  # past the limit, or this request itself was cancelled (shutdown)
                task.cancel()
        if not timed_out:
            await task  # finished within the limit, or failed: its exception goes on
            return
        try:
            await task
        except (asyncio.CancelledError, Exception):  # noqa: BLE001 - whatever it raised on its way out: the timeout
            pass
        message = (f"The request took longer than this server's limit of {self.seconds:g} s (request_timeout_s) "
                   "and was cancelled.")
        if not started.is_set():
            await error_response(RequestTimeout(message), scope.get("path", ""))(scope, receive, send)
        elif not finished:
            # The headers are sent: a stream ends with an error event in its format, other bodies just end.
            body = error_body(RequestTimeout(message), scope.get("path", ""))[1]
            if named_events:
                tail = sse_event(body, "error")
            else:
                tail = sse_event(body) + DONE if event_stream else b""
            await send({"type": "http.response.body", "body": tail, "more_body": False})


class LenientRequests:
    """Accept what clients commonly send that the app's routes would otherwise refuse.

    - A body on a JSON route is read as JSON whatever its Content-Type says, or without one: `curl -d` sends
      x-www-form-urlencoded and some clients send text/plain or nothing, and OpenAI's API reads them as JSON
      too (FastAPI would hand the route raw bytes, which then fail validation as "not a JSON object"). A body
      that is not JSON then gets the JSON parse error, which says what is wrong. The multipart upload routes
      keep theirs.
    - HEAD is answered as GET without the body (probes and `curl -I` use it; FastAPI's routes list GET only).
    """

    def __init__(self, app: ASGIApp, multipart_paths: tuple[str, ...] = UPLOAD_PATHS) -> None:
        self.app = app
        self.multipart_paths = frozenset(multipart_paths)

    @staticmethod
    def _is_json(content_type: bytes) -> bool:
        media = content_type.split(b";", 1)[0].strip().lower()
        return media == b"application/json" or media.endswith(b"+json")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope.get("method", "")
        if method == "HEAD":
            await self._head(scope, receive, send)
            return
        if method in ("POST", "PUT", "PATCH") and scope.get("path", "") not in self.multipart_paths:
            headers = list(scope.get("headers") or [])
            content_type = next((value for name, value in headers if name == b"content-type"), None)
            if content_type is None or not self._is_json(content_type):
                headers = [(n, v) for n, v in headers if n != b"content-type"] + [(b"content-type",
                                                                                   b"application/json")]
                scope = {**scope, "headers": headers}
        await self.app(scope, receive, send)

    async def _head(self, scope: Scope, receive: Receive, send: Send) -> None:
        async def headers_only(message: Message) -> None:
            if message["type"] == "http.response.body":
                if message.get("more_body", False):
                    return  # the rest of the body is dropped; its end goes out once
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, headers_only)


def install_middleware(app: FastAPI, settings: Settings, metrics: Metrics) -> None:
    """Add the middleware in order; the last added runs first, so RequestContext sees every answer."""
    limits = settings.limits
    app.add_middleware(LenientRequests)
    app.add_middleware(BodySizeLimit, max_bytes=limits.max_body_bytes,
                       path_limits={path: limits.max_upload_bytes for path in UPLOAD_PATHS})
    app.add_middleware(TimeoutUntilResponse, seconds=limits.request_timeout_s)
    open_paths = OPEN_PATHS if settings.metrics_need_key else OPEN_PATHS | {"/metrics"}
    app.add_middleware(ApiKeyAuth, keys=settings.api_keys(), open_paths=open_paths)
    if settings.cors_origins:
        # Outside the key check: browsers send preflight OPTIONS requests without credentials.
        app.add_middleware(CORSMiddleware, allow_origins=list(settings.cors_origins), allow_methods=["*"],
                           allow_headers=["*"], expose_headers=["X-Request-Id", "Retry-After"],
                           allow_credentials="*" not in settings.cors_origins)
    app.add_middleware(RequestContext, metrics=metrics)
