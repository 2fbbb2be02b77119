"""The one Server-Sent Events helper every streaming endpoint uses.

Events are `data: <json>\\n\\n`, as OpenAI sends them. An error after the stream has started becomes an
`{"error": ...}` event, and the stream always ends with `data: [DONE]` unless the client has gone. The Responses
API's events are named by their type (`event: response.created`) and end without [DONE] (named_sse_response).
The client is checked before a chunk (at most every DISCONNECT_CHECK_S, ClientCheck): once it has disconnected, the
source is closed, which cancels its generation and frees the worker.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from server.errors import error_body

log = logging.getLogger("hearth.server")

DONE = b"data: [DONE]\n\n"
DISCONNECT_CHECK_S = 0.1  # the most often a streaming response asks whether its client has gone
# Proxies (nginx) buffer responses unless told not to; a stream that arrives all at once is no stream.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class ClientCheck:
    """Whether a streaming request's client has gone, asked before every chunk and answered from a check at most every
    DISCONNECT_CHECK_S: starlette's check (a cancel scope and a receive each time) took more of the event loop than
    the chunk it guarded at 32 streams. A stream still ends as soon as its client goes: under uvicorn (ASGI 2.3)
    starlette's StreamingResponse listens for the disconnect beside the stream and cancels it."""

    def __init__(self, request: Request) -> None:
        self.request = request
        self._next_check = 0.0

    async def gone(self) -> bool:
        now = time.monotonic()
        if now < self._next_check:
            return False
        self._next_check = now + DISCONNECT_CHECK_S
        return await self.request.is_disconnected()


def sse_event(payload: dict[str, Any], name: str | None = None) -> bytes:
    """One `data:` event (compact JSON on one line, non-ASCII kept), after an `event:` line when named."""
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def _events(request: Request, source: AsyncIterator[dict[str, Any]], named: bool = False) -> AsyncIterator[bytes]:
    client = ClientCheck(request)
    try:
        async for payload in source:
            if await client.gone():
                log.info("client disconnected from %s; cancelling its generation", request.url.path)
                return
            yield sse_event(payload, payload.get("type") if named else None)
    except Exception as exc:  # noqa: BLE001 - the headers are sent: the error can only travel as an event
        _, body = error_body(exc, request.url.path)
        yield sse_event(body, "error" if named else None)
    finally:
        # Closing the source runs its cleanup now (cancel the job, release the worker), not at GC time.
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
    if not named:
        yield DONE


def sse_response(request: Request, source: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """A streaming response of source's payloads as SSE events, ending with [DONE]."""
    return StreamingResponse(_events(request, source), media_type="text/event-stream", headers=SSE_HEADERS)


def named_sse_response(request: Request, source: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """A stream of events named by their payload's `type`, as the Responses and Anthropic Messages APIs send them:
    no [DONE], the last event (response.completed, message_stop, ...) says the stream is over; an error is an
    `error` event in the path's error shape."""
    return StreamingResponse(_events(request, source, named=True), media_type="text/event-stream",
                             headers=SSE_HEADERS)
