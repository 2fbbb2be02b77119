"""Moonshine on /v1/audio/transcriptions beside Whisper: a live server loading tests/golden/moonshine (the tiny
random-weight fixture of scripts/make_moonshine_fixtures.py) through the transcription group's real loader, asked
through the openai SDK in every response_format and streaming; the transcript is transformers' greedy tokens on the
same clip, decoded. What Moonshine lacks (word timing, beam search, languages other than English) is a 400 naming the
model and the parameter.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from tokenizers import Tokenizer

from config.settings import load_settings
from server.app import create_app
from tests.audio.test_subtitles import parse_srt, parse_vtt
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "moonshine"
MODEL = "moonshine-fixture"


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    settings = load_settings(env={}, overrides={"transcription.models": [
        {"id": "whisper-tiny.en", "source": "whisper-tiny.en", "preload": False},
        {"id": MODEL, "source": str(GOLDEN), "preload": False}]})
    with ThreadServer(create_app(settings, loader=fake_loader(), warm_up=False)) as srv:
        yield srv


@pytest.fixture(scope="module")
def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def clip() -> bytes:
    return (GOLDEN / "clip.wav").read_bytes()


@pytest.fixture(scope="module")
def text() -> str:
    tokens = np.load(GOLDEN / "golden.npz")["tokens"].tolist()
    return Tokenizer.from_file(str(GOLDEN / "tokenizer.json")).decode(tokens, skip_special_tokens=True).strip()


def post(server: ThreadServer, clip: bytes, **fields: object) -> httpx.Response:
    return httpx.post(f"{server.url}/v1/audio/transcriptions", data={"model": MODEL, **fields},
                      files={"file": ("clip.wav", clip)}, timeout=120)


def test_every_format(client: openai.OpenAI, clip: bytes, text: str) -> None:
    create = client.audio.transcriptions.create
    result = create(model=MODEL, file=("clip.wav", clip))
    assert result.text == text and result.usage is not None and result.usage.seconds == 2
    assert create(model=MODEL, file=("clip.wav", clip), response_format="text").strip() == text
    for fmt, parse in (("srt", parse_srt), ("vtt", parse_vtt)):
        assert parse(create(model=MODEL, file=("clip.wav", clip), response_format=fmt)) == [(0.0, 2.0, text)], fmt
    verbose = create(model=MODEL, file=("clip.wav", clip), response_format="verbose_json", language="en")
    assert verbose.language == "english" and verbose.duration == 2.0 and verbose.text == text
    tokens = np.load(GOLDEN / "golden.npz")["tokens"].tolist()
    assert verbose.segments and [s.tokens for s in verbose.segments] == [tokens]
    assert (verbose.segments[0].start, verbose.segments[0].end) == (0.0, 2.0)


def test_stream(client: openai.OpenAI, clip: bytes, text: str) -> None:
    events = list(client.audio.transcriptions.create(model=MODEL, file=("clip.wav", clip), stream=True))
    assert [e.type for e in events] == ["transcript.text.delta", "transcript.text.done"]
    assert events[0].delta == events[1].text == text


@pytest.mark.parametrize(("fields", "param"), [
    ({"response_format": "verbose_json", "timestamp_granularities[]": "word"}, "timestamp_granularities[]"),
    ({"beam_size": "2"}, "beam_size"),
    ({"language": "de"}, "language")])
def test_refusals_name_the_model(server: ThreadServer, clip: bytes, fields: dict, param: str) -> None:
    response = post(server, clip, **fields)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == param and MODEL in error["message"], error


def test_translation_needs_whisper(server: ThreadServer, clip: bytes) -> None:
    response = httpx.post(f"{server.url}/v1/audio/translations", data={"model": MODEL},
                          files={"file": ("clip.wav", clip)}, timeout=120)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["param"] == "model" and MODEL in error["message"], error
