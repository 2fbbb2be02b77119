"""A prompt with an image on the tiny Gemma 3 multimodal fixture (tests/golden/vision/: text GGUF and F32 projector
made by scripts/make_vision_fixtures.py) against transformers' golden: the chat path's prompt ids, and the greedy 32
tokens after it, with the image encoded by Hearth's encoder (models/vision/gemma3.py) from the photo file.

The golden's greedy run comes from a full forward per step with token_type_ids (transformers' bidirectional mask
over the image's 16 rows); its smallest top-2 margin is 0.02. Every step's logits must have a cosine of at least
0.99999 with transformers' (the issue's bar, as tests/models/test_family_parity.py): measured, the deficit is below
f32's resolution and the largest difference 1.1e-3 on logits up to 3.6 (f32 KV cache; the image's rows differ from
transformers' by up to 2.4e-6). The image's rows attending causally instead miss by a deficit of 1.7e-3 after the
prompt, so the bar tells the masks apart; the tokens must be identical.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from config.settings import Limits
from models.text.chat_template import ChatTemplate
from models.text.engine import TextModel, load_text_model
from models.text.images import ImageSpan
from server.services.images import ImagePart, prepare, prompt_with_images

VISION_DIR = Path(__file__).resolve().parent.parent / "golden" / "vision"
MODEL, PROJECTOR = VISION_DIR / "gemma3_tiny.f32.gguf", VISION_DIR / "mmproj-gemma3_tiny.f32.gguf"
PROMPT = "Describe this image in one sentence."
MIN_COSINE = 0.99999


@pytest.fixture(scope="module")
def model() -> Iterator[TextModel]:
    yield load_text_model(str(MODEL), kv_dtype="f32", context_length=256, projector=PROJECTOR)


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(VISION_DIR / "golden.npz") as data:
        return {key: data[key] for key in data.files if key.startswith("prompt/")}


def _prompt(model: TextModel, golden: dict[str, np.ndarray]) -> tuple[list[int], list[ImageSpan]]:
    """The chat path's prompt (server/services/images.py) for one user turn: the text, then the photo."""
    assert model.image_encoder is not None and model.image_markers is not None
    template = ChatTemplate(model.tokenizer.chat_template)
    text = template.render([{"role": "user", "content": [{"type": "text", "text": PROMPT}, {"type": "image"}]}])
    assert text == str(golden["prompt/text"])
    raw = (VISION_DIR / "photos" / str(golden["prompt/image"])).read_bytes()
    url = "data:image/jpeg;base64," + base64.b64encode(raw).decode()
    prepared = prepare([ImagePart(url, "image")], model.image_encoder, Limits())
    add_bos = not text.startswith(template.bos_token)
    ids, images = prompt_with_images(text, prepared, model.image_markers, model.image_encoder, model.tokenizer,
                                     add_bos)
    rows = model.image_encoder.encode(np.stack([i.pixels for i in images]))
    return ids, [ImageSpan(i.start, rows[k], i.digest) for k, i in enumerate(images)]


def test_prompt_ids_are_the_reference_processors(model: TextModel, golden: dict[str, np.ndarray]) -> None:
    ids, images = _prompt(model, golden)
    assert ids == golden["prompt/ids"].tolist()
    assert [(s.start, s.end) for s in images] == [(int(np.argmax(golden["prompt/token_type_ids"])),
                                                   int(np.argmax(golden["prompt/token_type_ids"])) + 16)]
    assert Image.open(VISION_DIR / "photos" / str(golden["prompt/image"])).format == "JPEG"


def test_greedy_32_tokens_equal_transformers(model: TextModel, golden: dict[str, np.ndarray]) -> None:
    ids, images = _prompt(model, golden)
    session = model.new_session()
    tokens = []
    try:
        logits = session.prefill(ids, images)
        for k in range(32):
            want = golden["prompt/logits"][k]
            cosine = float(logits @ want / np.linalg.norm(logits) / np.linalg.norm(want))
            assert cosine >= MIN_COSINE, f"step {k}: cosine {cosine:.7f}"
            tokens.append(int(np.argmax(logits)))
            logits = session.decode(tokens[-1])
    finally:
        session.close()
    assert tokens == golden["prompt/greedy"].tolist()
