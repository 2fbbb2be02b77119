"""Gemma 4 image and audio prompts end to end against transformers 5.24 (CPU, float32): a tiny random-weight
Gemma4ForConditionalGeneration (E2B's features shrunk, with a vision and an audio tower) converted by llama.cpp's
convert_hf_to_gguf.py to a text GGUF and a projector GGUF, and transformers' generate() on a real photo and a real
speech clip (scripts/make_gemma4_e2e_fixtures.py; tests/golden/gemma4_e2e/meta.json).

Hearth runs the request as the server does: the model loaded with its projector by load_text_model, the chat
request (an image_url data: URL of the photo's file, an input_audio part of the WAV) through ChatService's prompt
(the template, Hearth's own image and audio preprocessing, the soft-token expansion), then the chat worker's
_image_spans (server/media_rows.py: the towers), and the decoder with those rows spliced in: a session's prefill
and decode (logits read back), and the worker's batch generator (both prompts in one batch, sampled on the GPU).

Bounds, with what lavapipe measures:
- the image's pixels equal the processor's exactly (its patch rows as uint8; they are u8 / 255), the clip's log-mel
  frames to 2e-4 (tests/audio/test_features.py's bound), and the prompt ids equal transformers' (306 with 260
  image soft tokens; 89 with 50 audio ones);
- the projected rows: cosine >= 0.9999 per row with get_image_features / get_audio_features (issue 42's bar for the
  towers; measured 1 - 8e-12 and 1 - 1e-12, max |diff| 5e-6 on values up to 3.2);
- the last position's logits, and those after each greedy token: 1 - cosine <= 1e-5. Both sides compute in
  float32 (f32 weights, f32 KV cache) on the same weights, so they differ only by summation order (measured 8.5e-12
  and 6.7e-13 after the prompt, 1.4e-9 at worst over the steps after), while a wrong row or mask moves them by far
  more (tests/models/test_gemma4_multimodal_parity.py's ablations);
- the 32 greedy tokens identical: the golden's smallest top-2 gap on the way is 0.037 (audio; 0.15 image), against
  logits that differ by at most 4.4e-5 after the prompt.
"""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from config.settings import Settings
from models.text.batch import TokenEvent
from models.text.engine import TextModel, load_text_model
from models.text.images import ImageSpan
from models.text.sampler import SamplingParams
from server.chat_worker import ChatWorker, chat_template_of
from server.media_rows import MediaRows
from server.schemas.chat import ChatCompletionRequest
from server.services.audio_inputs import PromptAudio
from server.services.chat import ChatService
from server.services.images import PromptImage
from tests.audio.test_features import GEMMA4_TOL
from tests.models.test_gemma4_vision import hf_patches

GOLDEN = Path(__file__).resolve().parent.parent / "golden" / "gemma4_e2e"
META = json.loads((GOLDEN / "meta.json").read_text())
PHOTOS = GOLDEN.parent / "vision" / "photos"
NAME = "gemma4_e2e_tiny"
PROMPTS = {"image": "Describe this image in one sentence.", "audio": "Transcribe this audio clip."}
MIN_ROW_COSINE = 0.9999
MAX_ONE_MINUS_COS = 1e-5


@pytest.fixture(scope="module")
def golden() -> dict[str, np.ndarray]:
    with np.load(GOLDEN / "golden.npz") as f:
        return dict(f)


@pytest.fixture(scope="module")
def model() -> Iterator[TextModel]:
    for name in (f"{NAME}.f32.gguf", f"mmproj-{NAME}.f32.gguf", "clip.wav", "golden.npz"):
        assert hashlib.sha256((GOLDEN / name).read_bytes()).hexdigest() == META["sha256"][name], name
    yield load_text_model(str(GOLDEN / f"{NAME}.f32.gguf"), kv_dtype="f32", context_length=512, max_batch=2,
                          projector=GOLDEN / f"mmproj-{NAME}.f32.gguf")


def request(kind: str) -> ChatCompletionRequest:
    """One user turn as a client sends it: the text, then the photo's file or the WAV clip."""
    if kind == "image":
        url = "data:image/jpeg;base64," + base64.b64encode((PHOTOS / META["photo"]).read_bytes()).decode()
        media = {"type": "image_url", "image_url": {"url": url}}
    else:
        data = base64.b64encode((GOLDEN / "clip.wav").read_bytes()).decode()
        media = {"type": "input_audio", "input_audio": {"data": data, "format": "wav"}}
    return ChatCompletionRequest(model=NAME, messages=[{"role": "user", "content": [
        {"type": "text", "text": PROMPTS[kind]}, media]}])


def prompt(model: TextModel, kind: str) -> tuple[list[int], list[PromptImage | PromptAudio], list[ImageSpan]]:
    """The prompt ids, preprocessed inputs and spans as the server makes them: ChatService's prompt, then the chat
    worker's spans."""
    worker = SimpleNamespace(model=model, chat_template=chat_template_of(model.tokenizer))
    ids, media = ChatService(None, Settings())._prompt(worker, request(kind))  # type: ignore[arg-type]
    rows = SimpleNamespace(_media=MediaRows(model.image_encoder, model.audio_encoder))
    spans = ChatWorker._image_spans(rows, SimpleNamespace(images=media))  # type: ignore[arg-type]
    return ids, media, spans


def row_cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)


@pytest.mark.parametrize("kind", ["image", "audio"])
def test_prompt_and_greedy_tokens_match_transformers(model: TextModel, golden: dict[str, np.ndarray],
                                                     kind: str) -> None:
    ids, media, spans = prompt(model, kind)
    assert ids == golden[f"{kind}/ids"].tolist()
    if kind == "image":  # the processor's pixels exactly (its patch rows, as uint8: they are u8 / 255)
        pixels = media[0].pixels  # type: ignore[union-attr]
        patches = np.clip(np.rint(hf_patches(pixels, 16) * 255), 0, 255).astype(np.uint8)
        assert hashlib.sha256(patches.tobytes()).hexdigest() == META["image_pixels_sha256"]
    else:  # the feature extractor's log-mel frames, to tests/audio/test_features.py's bound
        features = media[0].features  # type: ignore[union-attr]
        np.testing.assert_allclose(features, golden["audio/features_in"], rtol=0, atol=GEMMA4_TOL)
    assert len(spans) == 1 and spans[0].audio == (kind == "audio")
    soft = golden[f"{kind}/features"]
    assert spans[0].start == ids.index(int(model.tokenizer.encode(f"<|{kind}|>", add_bos=False)[0]))
    assert spans[0].embeddings.shape == soft.shape == (META["soft_tokens"][kind], model.embedding_size)
    assert row_cosines(spans[0].embeddings, soft).min() >= MIN_ROW_COSINE

    session = model.new_session()
    tokens = []
    try:
        logits = session.prefill(ids, spans)
        for k in range(len(golden[f"{kind}/greedy"])):  # row 0: the last position's; then after each token
            want, got = golden[f"{kind}/logits"][k].astype(np.float64), logits.astype(np.float64)
            one_minus_cos = 1 - got @ want / np.linalg.norm(got) / np.linalg.norm(want)
            assert one_minus_cos <= MAX_ONE_MINUS_COS, f"step {k}: 1 - cosine {one_minus_cos:.3g}"
            tokens.append(int(np.argmax(logits)))
            logits = session.decode(tokens[-1])
    finally:
        session.close()
    assert tokens == golden[f"{kind}/greedy"].tolist()


def test_batch_generator_samples_the_same_tokens(model: TextModel, golden: dict[str, np.ndarray]) -> None:
    """The chat worker's generator (model.generator(): both prompts in one batch, tokens sampled on the GPU at
    temperature 0) gives transformers' greedy tokens too."""
    generator = model.generator()
    got: dict[str, list[int]] = {}
    for kind in ("image", "audio"):
        ids, _, spans = prompt(model, kind)
        generator.add(kind, ids, SamplingParams(temperature=0.0), len(golden[f"{kind}/greedy"]),
                      stop_ids=frozenset(), images=spans)
        got[kind] = []
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent):
                got[str(event.key)].append(event.token.id)
    assert got == {kind: golden[f"{kind}/greedy"].tolist() for kind in got}
