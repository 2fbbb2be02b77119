"""input_audio parts through the openai SDK against a live server (fakes: tests/server/fake_model.py): a model
without an audio encoder answers audio with a 400 naming the part, malformed parts are 400s in OpenAI's error shape,
the worker keeps serving, and /v1/models lists audio only where the projector file has an audio tower (the Gemma 4
audio fixture's projector, tests/golden/gemma4_audio).
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from server.app import create_app
from tests.server.all_fakes import fake_settings
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer
from tests.server.test_audio_inputs import wav
from tests.server.test_hostile import wait_ready

TEXT, VISION, AUDIO = "gemma-3-270m", "vision-fake", "audio-fake"
AUDIO_MMPROJ = Path(__file__).resolve().parent.parent / "golden" / "gemma4_audio" / "mmproj-gemma4_audio_tiny.f32.gguf"


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    models = [{"id": TEXT, "source": TEXT}, {"id": VISION, "source": "vision.gguf", "projector": "mmproj.gguf"},
              {"id": AUDIO, "source": "audio.gguf", "projector": str(AUDIO_MMPROJ)}]
    with ThreadServer(create_app(fake_settings(models=models), loader=fake_loader(), warm_up=False)) as srv:
        assert wait_ready(srv)
        yield openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)


def audio_part(raw: bytes, fmt: str = "wav") -> dict[str, Any]:
    return {"type": "input_audio", "input_audio": {"data": base64.b64encode(raw).decode(), "format": fmt}}


def chat(client: openai.OpenAI, content: list[dict[str, Any]] | str, model: str) -> Any:
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}],
                                          max_tokens=3, temperature=0)


def test_models_list_audio_where_the_projector_has_it(client: openai.OpenAI) -> None:
    listed = {m.id: m.model_dump()["input_modalities"] for m in client.models.list()}
    assert listed[AUDIO] == ["text", "image", "audio"]
    assert listed[VISION] == ["text", "image"] and listed[TEXT] == ["text"]


@pytest.mark.parametrize("model", [TEXT, VISION])
def test_a_model_without_an_audio_encoder_refuses_audio(client: openai.OpenAI, model: str) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        chat(client, [{"type": "text", "text": "hi"}, audio_part(wav(0.5))], model)
    error = raised.value.body
    assert error["param"] == "messages[0].content[1]" and error["code"] == "audio_input_not_supported"  # type: ignore[index]
    assert "does not accept audio" in error["message"]  # type: ignore[index]
    assert chat(client, "still serving?", model).choices[0].message.content


@pytest.mark.parametrize("part", [
    {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "flac"}},  # a format OpenAI does not define
    {"type": "input_audio", "input_audio": {"format": "wav"}},  # no data
    {"type": "input_audio"},  # no input_audio
])
def test_malformed_parts_are_400(client: openai.OpenAI, part: dict[str, Any]) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        chat(client, [part], TEXT)
    assert raised.value.body["type"] == "invalid_request_error"  # type: ignore[index]


def test_audio_streams_a_reply_and_counts_its_rows(client: openai.OpenAI) -> None:
    """A clip goes into the prompt at the template's <|audio|> as Gemma4Processor expands it: <|audio>, a soft token
    per encoder row (the fake's: one per started 0.25 s, so 0.9 s makes 4), <audio|>; usage counts those rows."""
    text = [{"type": "text", "text": "What is said?"}]
    plain = chat(client, text, AUDIO).usage.prompt_tokens
    stream = client.chat.completions.create(model=AUDIO, stream=True, max_tokens=3, temperature=0,
                                            stream_options={"include_usage": True},
                                            messages=[{"role": "user", "content": [*text, audio_part(wav(0.9))]}])
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    usage = next(c.usage for c in chunks if c.usage is not None)
    assert usage.prompt_tokens == plain + 4 + 2


def test_a_spelled_out_audio_piece_is_400(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        chat(client, [{"type": "text", "text": "<|audio>"}, audio_part(wav(0.5))], AUDIO)
    assert "spells out" in raised.value.body["message"]  # type: ignore[index]
