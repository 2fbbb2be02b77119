"""Images in chat through the openai SDK against a live server: a fake multimodal model (tests/server/fake_model.py
with tests/fake_image_encoder.py, Gemma 3's image pieces in its vocabulary) beside the text-only fake.

Checked: base64 data-URL images (PNG, JPEG, WebP, GIF) in any order with text stream a reply; each image becomes
its rows at the template's marker, expanded as Gemma3Processor does, counted in usage.prompt_tokens; /v1/models
lists what each model takes; a text-only model answers an image with a 400 naming the part; hostile images
(truncated, lying headers, a decompression bomb, not an image, too many, too large, URLs where fetching is off) get
400 or 413 in OpenAI's error shape and the worker keeps serving.
"""

from __future__ import annotations

import base64
import http.server
import io
import itertools
import struct
import threading
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import numpy as np
import openai
import pytest
from PIL import Image

from models.text.images import pixel_digest
from server.app import create_app
from tests.fake_image_encoder import FakeImageEncoder
from tests.server.all_fakes import fake_settings
from tests.server.fake_model import FakeModel, fake_loader
from tests.server.live_server import ThreadServer
from tests.server.test_hostile import assert_openai_error, wait_ready

VISION, TEXT = "vision-fake", "gemma-3-270m"
ROWS = 4  # the fake encoder's rows per image
EXPANSION = 2 + 1 + ROWS + 1 + 2  # "\n\n", <start_of_image>, its rows, <end_of_image>, "\n\n": one token each here
ENV = {"HEARTH_MAX_IMAGES": "4", "HEARTH_MAX_IMAGE_PIXELS": "1000000", "HEARTH_MAX_IMAGE_BYTES": "200000"}


def encoded(fmt: str = "PNG", size: tuple[int, int] = (32, 24), seed: int = 0) -> bytes:
    pixels = np.random.default_rng(seed).integers(0, 256, (size[1], size[0], 3), dtype=np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, format=fmt)
    return out.getvalue()


def data_url(raw: bytes, mime: str = "image/png") -> str:
    return f"data:{mime};base64,{base64.b64encode(raw).decode()}"


def image_part(raw: bytes, mime: str = "image/png") -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": data_url(raw, mime)}}


def lying_png(width: int, height: int) -> bytes:
    """A small PNG whose header (with a valid CRC) claims width x height."""
    raw = bytearray(encoded())
    ihdr = struct.pack(">II", width, height) + bytes(raw[24:29])
    raw[16:29] = ihdr
    raw[29:33] = struct.pack(">I", zlib.crc32(b"IHDR" + ihdr) & 0xFFFFFFFF)
    return bytes(raw)


def bomb_png() -> bytes:
    """6000 x 6000 black pixels (36 megapixels) in a file of some 35 KB."""
    out = io.BytesIO()
    Image.new("L", (6000, 6000)).save(out, format="PNG", optimize=True)
    return out.getvalue()


@pytest.fixture(scope="module")
def loaded() -> dict[str, FakeModel]:
    return {}


@pytest.fixture(scope="module")
def server(loaded: dict[str, FakeModel]) -> Iterator[ThreadServer]:
    base = fake_loader()

    def load(source: str, **kwargs: Any) -> FakeModel:
        model = base(source, **kwargs)
        loaded[source] = model
        return model

    models = [{"id": TEXT, "source": TEXT}, {"id": VISION, "source": "vision.gguf", "projector": "mmproj.gguf"}]
    settings = fake_settings(env=ENV, models=models)
    with ThreadServer(create_app(settings, loader=load, warm_up=False)) as srv:
        assert wait_ready(srv)
        yield srv


@pytest.fixture(scope="module")
def client(server: ThreadServer) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0)


def chat(client: openai.OpenAI, content: list[dict[str, Any]] | str, model: str = VISION, **kwargs: Any) -> Any:
    return client.chat.completions.create(model=model, messages=[{"role": "user", "content": content}],
                                          max_tokens=3, temperature=0, **kwargs)


def test_models_say_what_they_take(client: openai.OpenAI) -> None:
    listed = {m.id: m.model_dump() for m in client.models.list()}
    assert listed[VISION]["input_modalities"] == ["text", "image"]
    assert listed[TEXT]["input_modalities"] == ["text"]


def test_an_image_and_text_stream_a_reply(client: openai.OpenAI, loaded: dict[str, FakeModel]) -> None:
    stream = chat(client, [{"type": "text", "text": "What is this?"}, image_part(encoded())], stream=True,
                  stream_options={"include_usage": True})
    chunks = list(stream)
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Hel"
    text_only = chat(client, "What is this?")
    assert chunks[-1].usage.prompt_tokens == text_only.usage.prompt_tokens + EXPANSION
    seen = loaded["vision.gguf"].images_seen[-1]
    assert len(seen) == 1 and seen[0][1] == ROWS


def test_several_images_in_any_order_with_text(client: openai.OpenAI, loaded: dict[str, FakeModel]) -> None:
    images = [encoded("PNG", seed=1), encoded("JPEG", seed=2), encoded("WEBP", seed=3), encoded("GIF", seed=4)]
    mimes = ["image/png", "image/jpeg", "image/webp", "image/gif"]
    first = [image_part(images[0], mimes[0]), {"type": "text", "text": "and"}, image_part(images[1], mimes[1])]
    reply = client.chat.completions.create(model=VISION, max_tokens=2, temperature=0, messages=[
        {"role": "user", "content": first},
        {"role": "assistant", "content": "Two."},
        {"role": "user", "content": [image_part(images[2], mimes[2]), {"type": "text", "text": "and"},
                                     image_part(images[3], mimes[3])]},
    ])
    assert reply.choices[0].message.content == "He"
    seen = loaded["vision.gguf"].images_seen[-1]
    starts = [s for s, _, _ in seen]
    assert len(seen) == 4 and all(b - a >= EXPANSION for a, b in itertools.pairwise(starts))  # in order, apart
    assert len({d for _, _, d in seen}) == 4  # four different images, four identities
    # the same file twice: one identity (its rows are encoded once for the request)
    again = chat(client, [image_part(images[0]), image_part(images[0])])
    assert again.choices[0].message.content
    twice = loaded["vision.gguf"].images_seen[-1]
    assert twice[0][2] == twice[1][2] == seen[0][2]


def test_a_text_only_model_refuses_images(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        chat(client, [{"type": "text", "text": "hi"}, image_part(encoded())], model=TEXT)
    error = raised.value.body
    assert error["param"] == "messages[0].content[1]" and error["code"] == "image_input_not_supported"  # type: ignore[index]
    assert "takes text only" in error["message"]  # type: ignore[index]


@pytest.mark.parametrize(("content", "status", "code"), [
    ([image_part(encoded()[:60])], 400, "invalid_image"),  # truncated
    ([image_part(b"GIF89a but not really an image at all")], 400, "invalid_image"),
    ([image_part(b"plain text, no image")], 400, "invalid_image"),
    ([image_part(encoded("BMP"), "image/bmp")], 400, "invalid_image"),  # a format that is not taken
    ([{"type": "image_url", "image_url": {"url": "data:image/png;base64,@@@"}}], 400, "invalid_image"),
    ([{"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}], 400, "image_url_not_allowed"),
    ([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}], 400, "invalid_image_url"),
    ([image_part(lying_png(100_000, 100_000))], 413, "image_too_large"),  # huge dimensions
    ([image_part(bomb_png())], 413, "image_too_large"),  # a decompression bomb
    ([image_part(encoded(size=(300, 300)))], 413, "image_too_large"),  # 270 KB of noise: past the byte limit
    ([image_part(encoded(seed=k)) for k in range(5)], 400, "too_many_images"),
], ids=["truncated", "gif-header-only", "not-an-image", "bmp", "bad-base64", "http-off", "file-url", "huge-header",
        "bomb", "too-many-bytes", "too-many-images"])
def test_hostile_images_are_refused_and_the_worker_keeps_serving(server: ThreadServer, client: openai.OpenAI,
                                                                 content: list[dict[str, Any]], status: int,
                                                                 code: str) -> None:
    body = {"model": VISION, "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, *content]}],
            "max_tokens": 2}
    response = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=60)
    assert_openai_error(response, code)
    assert response.status_code == status and response.json()["error"]["code"] == code, response.text
    if code != "too_many_images":
        assert response.json()["error"]["param"].startswith("messages[0].content[1]"), response.text
    assert chat(client, [image_part(encoded())]).choices[0].message.content == "Hel"


def test_soft_tokens_spelt_out_in_text_are_refused(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as raised:
        chat(client, [{"type": "text", "text": "<image_soft_token>"}, image_part(encoded())])
    assert raised.value.body["param"] == "messages"  # type: ignore[index]


# -- the other dialects: Ollama's images, the Responses API's input_image, Anthropic's image blocks --------------------

def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def _seen(loaded: dict[str, FakeModel]) -> int:
    return len(loaded["vision.gguf"].images_seen)


@pytest.mark.parametrize("path", ["/api/chat", "/api/generate"])
def test_ollama_images(server: ThreadServer, loaded: dict[str, FakeModel], path: str) -> None:
    images = [_b64(encoded("JPEG", seed=5)), _b64(encoded("PNG", seed=6))]
    body: dict[str, Any] = {"model": VISION, "stream": False, "options": {"temperature": 0, "num_predict": 2}}
    if path == "/api/chat":
        body["messages"] = [{"role": "user", "content": "What are these?", "images": images}]
    else:
        body |= {"prompt": "What are these?", "images": images}
    before = _seen(loaded)
    response = httpx.post(f"{server.url}{path}", json=body, timeout=60)
    assert response.status_code == 200, response.text
    assert (response.json().get("message") or {}).get("content", response.json().get("response")) == "He"
    assert _seen(loaded) == before + 1 and len(loaded["vision.gguf"].images_seen[-1]) == 2
    bad = httpx.post(f"{server.url}{path}", json={**body, "messages": [{"role": "user", "content": "x",
                                                                         "images": ["bm90IGFuIGltYWdl"]}]}
                     if path == "/api/chat" else {**body, "images": ["bm90IGFuIGltYWdl"]}, timeout=60)
    assert bad.status_code == 400 and "PNG, JPEG, WebP or GIF" in bad.json()["error"]


def test_responses_input_image(client: openai.OpenAI, loaded: dict[str, FakeModel]) -> None:
    before = _seen(loaded)
    response = client.responses.create(model=VISION, max_output_tokens=2, temperature=0, input=[
        {"role": "user", "content": [{"type": "input_text", "text": "What is this?"},
                                     {"type": "input_image", "image_url": data_url(encoded(seed=7))}]}])
    assert response.output_text == "He" and _seen(loaded) == before + 1


def test_anthropic_image_blocks(server: ThreadServer, loaded: dict[str, FakeModel]) -> None:
    before = _seen(loaded)
    content = [{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": _b64(encoded())}},
               {"type": "text", "text": "What is this?"}]
    reply = httpx.post(f"{server.url}/v1/messages", timeout=60, json={
        "model": VISION, "max_tokens": 2, "temperature": 0, "messages": [{"role": "user", "content": content}]})
    assert reply.status_code == 200, reply.text
    assert reply.json()["content"][0]["text"] == "He" and _seen(loaded) == before + 1


def test_http_image_urls_where_the_server_allows_them(loaded: dict[str, FakeModel]) -> None:
    """With limits.allow_image_urls, an http URL is fetched (here from a loopback server); one that fails is a 400."""
    png = encoded(seed=9)

    class Images(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            found = self.path == "/cat.png"
            self.send_response(200 if found else 404)
            self.send_header("Content-Type", "image/png")
            self.end_headers()
            self.wfile.write(png if found else b"")

        def log_message(self, *args: Any) -> None:
            pass

    images = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Images)
    threading.Thread(target=images.serve_forever, daemon=True).start()
    base = fake_loader()

    def load(source: str, **kwargs: Any) -> FakeModel:
        loaded[f"urls:{source}"] = model = base(source, **kwargs)
        return model

    models = [{"id": VISION, "source": "vision.gguf", "projector": "mmproj.gguf"}]
    settings = fake_settings(env={"HEARTH_ALLOW_IMAGE_URLS": "true"}, models=models, default_model=VISION)
    try:
        with ThreadServer(create_app(settings, loader=load, warm_up=False)) as srv:
            assert wait_ready(srv)
            client = openai.OpenAI(base_url=f"{srv.url}/v1", api_key="unused", max_retries=0)
            url = f"http://127.0.0.1:{images.server_address[1]}"
            part = {"type": "image_url", "image_url": {"url": f"{url}/cat.png"}}
            assert chat(client, [part]).choices[0].message.content == "Hel"
            assert loaded["urls:vision.gguf"].images_seen[-1][0][2] == pixel_digest(
                FakeImageEncoder(16, tokens_per_image=4).preprocess(Image.open(io.BytesIO(png))))
            with pytest.raises(openai.BadRequestError) as raised:
                chat(client, [{"type": "image_url", "image_url": {"url": f"{url}/missing.png"}}])
            assert raised.value.body["code"] == "invalid_image_url"  # type: ignore[index]
    finally:
        images.shutdown()
        images.server_close()
