"""The one Server-Sent Events helper every streaming endpoint uses.

Events are `data: <json>\\n\\n`, as OpenAI sends them. An error after the stream has started becomes an
`{"error": ...}` event, and the stream always ends with `data: [DONE]` unless the client has gone. The
client is checked before every chunk: once it has disconnected, the source is closed, which cancels its
generation and frees the worker.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import StreamingResponse

from server.errors import error_body

log = logging.getLogger("hearth.server")

DONE = b"data: [DONE]\n\n"
# Proxies (nginx) buffer responses unless told not to; a stream that arrives all at once is no stream.
SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def sse_event(payload: dict[str, Any]) -> bytes:
    """One `data:` event (compact JSON on one line, non-ASCII kept)."""
    return b"data: " + json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


def typed_sse_event(payload: dict[str, Any]) -> bytes:
    """One event named by its payload's `type` (`event: message_start`), as Anthropic's API sends them."""
    return f"event: {payload['type']}\n".encode() + sse_event(payload)


async def _events(request: Request, source: AsyncIterator[dict[str, Any]],
                  frame: Callable[[dict[str, Any]], bytes] = sse_event, end: bytes = DONE) -> AsyncIterator[bytes]:
    try:
        async for payload in source:
            if await request.is_disconnected():
                log.info("client disconnected from %s; cancelling its generation", request.url.path)
                return
            yield frame(payload)
    except Exception as exc:  # noqa: BLE001 - the headers are sent: the error can only travel as an event
        _, body = error_body(exc, request.url.path)
        yield frame(body)
    finally:
        # Closing the source runs its cleanup now (cancel the job, release the worker), not at GC time.
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()
    if end:
        yield end


def sse_response(request: Request, source: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """A streaming response of source's payloads as SSE events, ending with [DONE]."""
    return StreamingResponse(_events(request, source), media_type="text/event-stream", headers=SSE_HEADERS)


def typed_sse_response(request: Request, source: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """A streaming response of source's payloads as events named by their `type` (an error too: its body's type
    is "error"), with no [DONE]: Anthropic's streams end with their own message_stop event."""
    return StreamingResponse(_events(request, source, typed_sse_event, b""), media_type="text/event-stream",
                             headers=SSE_HEADERS)
