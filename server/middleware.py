"""ASGI middleware: a limit on request body size (413), checked on Content-Length and on the bytes read."""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from server.errors import RequestTooLarge, error_response


class BodySizeLimit:
    """Refuse bodies over max_bytes with 413 before the app parses them.

    A declared Content-Length over the limit is refused without reading. A body sent without one (chunked)
    is counted as it arrives; past the limit the app's own reply is replaced by the 413.
    """

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    def _error(self) -> RequestTooLarge:
        return RequestTooLarge(f"The request body is larger than the limit of {self.max_bytes} bytes.")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await error_response(self._error())(scope, receive, send)
            return

        received = 0
        overflow = False
        started = False

        async def limited_receive() -> Message:
            nonlocal received, overflow
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    overflow = True
                    raise self._error()
            return message

        async def guarded_send(message: Message) -> None:
            nonlocal started
            if overflow:
                if not started:  # whatever the app made of the exception, the client gets the 413
                    started = True
                    await error_response(self._error())(scope, receive, send)
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        try:
            await self.app(scope, limited_receive, guarded_send)
        except RequestTooLarge:
            if not started:
                started = True
                await error_response(self._error())(scope, receive, send)
