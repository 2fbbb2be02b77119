"""POST /dev/captioned_speech: Kokoro-FastAPI's captioned speech, for its clients; /v1/audio/speech with
return_timestamps does the same work, and this route is that request under Kokoro-FastAPI's defaults."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import Response

from server.dependencies import require_api_key
from server.routers.audio_speech import get_speech_service, send_speech
from server.schemas.common import ErrorResponse
from server.schemas.speech import CaptionedSpeech, CaptionedSpeechRequest
from server.services.speech import SpeechService

router = APIRouter(prefix="/dev", tags=["audio"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})


@router.post("/captioned_speech", response_class=Response,
             responses={200: {"model": CaptionedSpeech,
                              "content": {"application/x-ndjson": {}, "text/event-stream": {}}}})
async def create_captioned_speech(
    body: CaptionedSpeechRequest, request: Request, service: Annotated[SpeechService, Depends(get_speech_service)]
) -> Response:
    """Speech with word timestamps: one CaptionedSpeech JSON object, or with `stream` (the default) one a line
    (NDJSON) as the audio is made."""
    return await send_speech(service, body.speech_request(), request, captioned=True)
