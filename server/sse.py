"""The one Server-Sent Events helper every streaming endpoint uses.

Events are `data: <json>\\n\\n`, as OpenAI sends them. An error after the stream has started becomes an
`{"error": ...}` event, and the stream always ends with `data: [DONE]` unless the client has gone. The Responses
API's events are named by their type (`event: response.created`) and end without [DONE] (named_sse_response).
The client is checked before every chunk: once it has disconnected, the source is closed, which cancels its
generation and frees the worker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from server.errors import error_body

log = logging.getLogger("hearth.server")

DONE = b"data: [DONE]\n\n"
# Proxies (nginx) buffer responses unless told not to; a stream that arrives all at once is no stream.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_event(payload: dict[str, Any], name: str | None = None) -> bytes:
    """One `data:` event (compact JSON on one line, non-ASCII kept), after an `event:` line when named."""
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


async def _events(request: Request, source: AsyncIterator[dict[str, Any]], named: bool = False) -> AsyncIterator[bytes]:
    try:
        async for payload in source:
            if await request.is_disconnected():
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
