"""The openai SDK sends a chat with a base64 image to the tiny Gemma 3 multimodal fixture (tests/golden/vision/:
text GGUF and F32 projector) through a live server: the reply, whole and streamed, is transformers' greedy run on
the same prompt (tests/models/test_vision_chat.py checks the tokens and logits), and usage counts the image's rows.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest

from models.formats.gguf_file import GGUFFile
from models.text.tokenizer import Tokenizer
from server.app import create_app
from tests.server.all_fakes import fake_settings
from tests.server.live_server import ThreadServer
from tests.server.test_hostile import wait_ready

VISION_DIR = Path(__file__).resolve().parent.parent / "golden" / "vision"
MODEL, PROJECTOR = VISION_DIR / "gemma3_tiny.f32.gguf", VISION_DIR / "mmproj-gemma3_tiny.f32.gguf"
NAME = "gemma3-tiny-vision"


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(VISION_DIR / "golden.npz") as data:
        return {key: data[key] for key in data.files if key.startswith("prompt/")}


@pytest.fixture(scope="module")
def client() -> Iterator[openai.OpenAI]:
    models = [{"id": NAME, "source": str(MODEL), "projector": str(PROJECTOR), "kv_dtype": "f32",
               "context_length": 256}]
    settings = fake_settings(models=models, default_model=NAME)
    with ThreadServer(create_app(settings, warm_up=False)) as srv:
        assert wait_ready(srv)
        yield openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)


def test_a_base64_image_chat_gives_transformers_greedy_reply(client: openai.OpenAI,
                                                            golden: dict[str, np.ndarray]) -> None:
    photo = base64.b64encode((VISION_DIR / "photos" / str(golden["prompt/image"])).read_bytes()).decode()
    content = [{"type": "text", "text": "Describe this image in one sentence."},
               {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64," + photo}}]
    ask = {"model": NAME, "messages": [{"role": "user", "content": content}], "max_tokens": 32, "temperature": 0}
    want = Tokenizer.from_gguf(GGUFFile(MODEL).reader).decode(golden["prompt/greedy"].tolist())
    whole = client.chat.completions.create(**ask)  # type: ignore[call-overload]
    assert whole.choices[0].message.content == want and whole.choices[0].finish_reason == "length"
    assert whole.usage.prompt_tokens == len(golden["prompt/ids"]) and whole.usage.completion_tokens == 32
    chunks = list(client.chat.completions.create(**ask, stream=True))  # type: ignore[call-overload]
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == want
    listed = {m.id: m.model_dump() for m in client.models.list()}
    assert listed[NAME]["input_modalities"] == ["text", "image"]
