"""POST /v1/audio/speech and GET /v1/audio/voices."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import Response, StreamingResponse

from server.dependencies import get_manager, get_settings, require_api_key
from server.schemas.common import ErrorResponse
from server.schemas.speech import SpeechRequest, VoiceList
from server.services.generation import until_disconnected
from server.services.speech import SpeechService
from server.sse import sse_response

router = APIRouter(prefix="/v1", tags=["audio"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})
# Proxies (nginx) buffer responses unless told not to; audio that arrives all at once is no stream.
_STREAM_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


def get_speech_service(request: Request) -> SpeechService:
    return SpeechService(get_manager(request), get_settings(request))


@router.post("/audio/speech", response_class=Response,
             responses={200: {"content": {"audio/mpeg": {}, "audio/wav": {}, "audio/flac": {}, "audio/opus": {},
                                          "audio/aac": {}, "audio/pcm": {}, "text/event-stream": {},
                                          "application/json": {}, "application/x-ndjson": {}}}})
async def create_speech(
    body: SpeechRequest, request: Request, service: Annotated[SpeechService, Depends(get_speech_service)]
) -> Response:
    """Speech from text: one audio file, or with `stream_format` chunked audio or SSE events as it is made; with
    `return_timestamps`, the audio in JSON with each word's start and end."""
    return await send_speech(service, body, request)


async def send_speech(service: SpeechService, body: SpeechRequest, request: Request, *,
                      captioned: bool = False) -> Response:
    """The response for a speech request, whole or streamed as its result says."""
    # A client that leaves before the audio is ready cancels its synthesis, queued or mid-chunk.
    result = await until_disconnected(request, service.create(body, request, captioned=captioned))
    if result.events is not None:
        return sse_response(request, result.events)
    if result.stream is not None:
        return StreamingResponse(result.stream, media_type=result.media_type, headers=_STREAM_HEADERS)
    return Response(result.body or b"", media_type=result.media_type)


@router.get("/audio/voices", response_model=VoiceList)
async def list_voices(
    service: Annotated[SpeechService, Depends(get_speech_service)],
    model: Annotated[str | None, Query(description="a speech model or alias; default: the default one")] = None,
) -> VoiceList:
    """The voices a speech model offers (its own and settings.speech_voices), and where OpenAI's names lead."""
    return await service.voices(model)
