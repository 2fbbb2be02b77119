"""ASGI middleware: a limit on request body size (413), checked on Content-Length and on the bytes read."""

from __future__ import annotations

from collections.abc import Mapping

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import RequestTooLarge, error_response


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
            await error_response(self._error(limit))(scope, receive, send)
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
                    await error_response(self._error(limit))(scope, receive, send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except RequestTooLarge:
            if not started:
                started = True
                await error_response(self._error(limit))(scope, receive, send)
