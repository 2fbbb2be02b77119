"""POST /v1/audio/transcriptions and POST /v1/audio/translations (multipart uploads; server/middleware.py gives
these paths the upload body limit, limits.max_upload_bytes)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Form, Request, Response
from fastapi.responses import StreamingResponse

from server.dependencies import get_manager, get_settings, require_api_key
from server.schemas.common import ErrorResponse
from server.schemas.transcription import Transcription, TranscriptionForm, TranscriptionVerbose, TranslationForm
from server.services.generation import until_disconnected
from server.services.transcription import TranscriptionService
from server.sse import sse_response

router = APIRouter(prefix="/v1/audio", tags=["audio"], dependencies=[Depends(require_api_key)],
                   responses={code: {"model": ErrorResponse} for code in (400, 401, 404, 413, 429, 500, 503)})
_FORMATS = {200: {"model": Transcription | TranscriptionVerbose,
                  "content": {"text/plain": {}, "text/vtt": {}, "text/event-stream": {}}}}


def get_transcription_service(request: Request) -> TranscriptionService:
    return TranscriptionService(get_manager(request), get_settings(request))


@router.post("/transcriptions", responses=_FORMATS, response_model=None)
async def create_transcription(
    form: Annotated[TranscriptionForm, Form(media_type="multipart/form-data")], request: Request,
    service: Annotated[TranscriptionService, Depends(get_transcription_service)],
) -> Response | StreamingResponse:
    """Speech to text in its language: json, text, srt, verbose_json or vtt; with `stream`, Server-Sent Events of
    transcript.text.delta (a segment's text each) and transcript.text.done."""
    # Until the answer (or the stream's first event) is ready, a client that leaves cancels the work, queued or
    # running; a stream's own events check for it after that (server/sse.py).
    result = await until_disconnected(request, service.create(form, task="transcribe"))
    if isinstance(result, Response):
        return result
    return sse_response(request, result)


@router.post("/translations", responses=_FORMATS, response_model=None)
async def create_translation(
    form: Annotated[TranslationForm, Form(media_type="multipart/form-data")], request: Request,
    service: Annotated[TranscriptionService, Depends(get_transcription_service)],
) -> Response:
    """Speech in any language the (multilingual) model knows, to English text."""
    result = await until_disconnected(request, service.create(form, task="translate"))
    assert isinstance(result, Response)  # translations do not stream
    return result
