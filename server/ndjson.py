"""The newline-delimited JSON stream helper for Ollama's API (`application/x-ndjson`), beside server/sse.py.

Each payload is one line of compact JSON. An error after the stream has started becomes a last line
`{"error": "..."}` in the shape of the API at the request's path, as Ollama sends it. The client is checked
before a line (server/sse.py's ClientCheck): once it has disconnected, the source is closed, which cancels its
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
from server.sse import ClientCheck

log = logging.getLogger("hearth.server")

NDJSON_MEDIA_TYPE = "application/x-ndjson"
# Proxies (nginx) buffer responses unless told not to; a stream that arrives all at once is no stream.
NDJSON_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def ndjson_line(payload: dict[str, Any]) -> bytes:
    """One line of compact JSON (non-ASCII kept) ending in a newline."""
    return json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode() + b"\n"


async def _lines(request: Request, source: AsyncIterator[dict[str, Any]]) -> AsyncIterator[bytes]:
    client = ClientCheck(request)
    try:
        async for payload in source:
            if await client.gone():
                log.info("client disconnected from %s; cancelling its generation", request.url.path)
                return
            yield ndjson_line(payload)
    except Exception as exc:  # noqa: BLE001 - the headers are sent: the error can only travel as a line
        _, body = error_body(exc, request.url.path)
        yield ndjson_line(body)
    finally:
        # Closing the source runs its cleanup now (cancel the job, release the worker), not at GC time.
        aclose = getattr(source, "aclose", None)
        if aclose is not None:
            await aclose()


def ndjson_response(request: Request, source: AsyncIterator[dict[str, Any]]) -> StreamingResponse:
    """A streaming response of source's payloads, one JSON object per line."""
    return StreamingResponse(_lines(request, source), media_type=NDJSON_MEDIA_TYPE, headers=NDJSON_HEADERS)
