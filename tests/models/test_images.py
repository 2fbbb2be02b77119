"""Images in prompts (models/text/images.py): rows whose input embeddings come from an image encoder, attending to
each other both ways, through Session.prefill and the continuous-batching generator, on the tiny Gemma fixture
(tests/golden/families/gemma.f32.gguf: D 128, 4 heads of 32 over 2 kv heads, f32 weights) with a fake encoder.

References: a prompt whose images are one row each, with the token embeddings as rows, is the same prompt as text
(the same f32 products: the tokens' rows are only scaled, by sqrt(D), one f32 multiply either way); and a float64
numpy forward of the fixture's network with Gemma 3's mask (causal, or within the same image).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from gguf import GGUFReader

from models.text.batch import BatchGenerator, EndEvent, TokenEvent
from models.text.engine import TextModel, load_text_model
from models.text.images import (
    GEMMA3_MARKERS,
    GEMMA4_AUDIO_MARKERS,
    GEMMA4_MARKERS,
    ImageMarkers,
    ImageSpan,
    check_spans,
    chunk_end,
    expand_images,
    soft_token_runs,
)
from models.text.sampler import SamplingParams
from tests.fake_image_encoder import FakeImageEncoder

FIXTURE = Path(__file__).parents[1] / "golden" / "families" / "gemma.f32.gguf"
GREEDY = SamplingParams(temperature=0.0)
# GPU f32 (f32 KV cache) against numpy float64 over 2 layers of width 128: at most 1.4e-6 of the logits' range
# measured; 2e-5 leaves room, and the causal mask (the wrong one for images) misses by 6e-3 to 7e-2 of it.
REL_TOL = 2e-5


@pytest.fixture(scope="module")
def model() -> Iterator[TextModel]:
    m = load_text_model(str(FIXTURE), max_batch=4, context_length=256, kv_dtype="f32")  # f32: exact references
    m.attach_image_encoder(FakeImageEncoder(m.embedding_size, tokens_per_image=5, scale=4.0))
    yield m


def _prompt(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(3, 400, n)]


def _images(model: TextModel, starts: list[int], seed: int = 1) -> list[ImageSpan]:
    encoder = model.image_encoder
    assert encoder is not None
    pixels = np.random.default_rng(seed).uniform(-1, 1, (len(starts), 3, 8, 8)).astype(np.float32)
    rows = encoder.encode(pixels)
    return [ImageSpan(s, rows[i]) for i, s in enumerate(starts)]


class Reference:
    """The fixture's network in float64 numpy (models/gemma/gemma1.py's diagram), with an attention mask of
    Gemma 3's kind: a row sees the rows before it, and every row of its own image."""

    def __init__(self, path: Path, model: TextModel) -> None:
        self.c = model.arch.config  # type: ignore[attr-defined]
        reader = GGUFReader(path)
        self.w = {t.name: np.asarray(t.data, np.float64) for t in reader.tensors}

    def _rope(self, x: np.ndarray, positions: np.ndarray) -> np.ndarray:  # x: [T, heads, Dh], NeoX halves
        d = x.shape[-1]
        inv = self.c.rope_base_full ** (-np.arange(0, d, 2) / d)
        angle = positions[:, None] * inv[None, :]
        cos, sin = np.cos(angle)[:, None, :], np.sin(angle)[:, None, :]
        a, b = x[..., :d // 2], x[..., d // 2:]
        return np.concatenate([a * cos - b * sin, b * cos + a * sin], -1)

    def _norm(self, x: np.ndarray, name: str) -> np.ndarray:
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.c.eps) * self.w[name]

    def logits(self, ids: list[int], images: list[ImageSpan], bidirectional: bool = True) -> np.ndarray:
        """The logits after the prompt's last row."""
        c, w, n = self.c, self.w, len(ids)
        x = w["token_embd.weight"][ids] * c.embed_scale  # x: [T, D]
        image_of = np.full(n, -1)
        for i, span in enumerate(images):
            x[span.start:span.end] = span.embeddings
            image_of[span.start:span.end] = i
        pos = np.arange(n)
        visible = pos[None, :] <= pos[:, None]
        if bidirectional:
            visible |= (image_of[:, None] == image_of[None, :]) & (image_of[:, None] >= 0)
        heads, dh = c.n_heads, c.head_dims[0]
        for i in range(c.n_layers):
            h = self._norm(x, f"blk.{i}.attn_norm.weight")
            q = self._rope((h @ w[f"blk.{i}.attn_q.weight"].T).reshape(n, heads, dh), pos)
            k = self._rope((h @ w[f"blk.{i}.attn_k.weight"].T).reshape(n, c.kv_heads[i], dh), pos)
            v = (h @ w[f"blk.{i}.attn_v.weight"].T).reshape(n, c.kv_heads[i], dh)
            group = heads // c.kv_heads[i]
            k, v = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
            s = np.einsum("qhd,khd->hqk", q, k) * c.query_scale
            s = np.where(visible[None], s, -np.inf)
            p = np.exp(s - s.max(-1, keepdims=True))
            p /= p.sum(-1, keepdims=True)
            a = np.einsum("hqk,khd->qhd", p, v).reshape(n, heads * dh)
            x = x + a @ w[f"blk.{i}.attn_output.weight"].T
            h = self._norm(x, f"blk.{i}.ffn_norm.weight")
            g = h @ w[f"blk.{i}.ffn_gate.weight"].T
            gelu = 0.5 * g * (1 + np.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g ** 3)))
            x = x + (gelu * (h @ w[f"blk.{i}.ffn_up.weight"].T)) @ w[f"blk.{i}.ffn_down.weight"].T
        return self._norm(x[-1:], "output_norm.weight")[0] @ w["token_embd.weight"].T


def test_one_row_images_of_token_embeddings_are_the_text_prompt(model: TextModel) -> None:
    """Rows given as images (unscaled) equal to the scaled token embeddings give the text prompt's logits."""
    ids = _prompt(20)
    table = np.asarray(next(t.data for t in GGUFReader(FIXTURE).tensors if t.name == "token_embd.weight"))
    scale = np.float32(model.arch.config.embed_scale)  # type: ignore[attr-defined]
    images = [ImageSpan(p, (table[[ids[p]]].astype(np.float32) * scale).astype(np.float32)) for p in (0, 7, 8, 19)]
    session = model.new_session()
    try:
        want = session.prefill(ids)
        session.reset()
        got = session.prefill(ids, images)
    finally:
        session.close()
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("starts", [[6], [6, 14], [0, 15]])
def test_image_rows_see_their_whole_image(model: TextModel, starts: list[int]) -> None:
    """Logits after a prompt with images match the numpy network under Gemma 3's mask (an image's rows see each
    other), and not the causal one; images at the start and at the end of the prompt too."""
    ids = _prompt(20)
    images = _images(model, starts)
    ref = Reference(FIXTURE, model)
    want, causal = ref.logits(ids, images), ref.logits(ids, images, bidirectional=False)
    session = model.new_session()
    try:
        got = session.prefill(ids, images)
    finally:
        session.close()
    scale = np.abs(want).max()
    assert np.abs(got - want).max() < REL_TOL * scale
    assert np.abs(causal - want).max() > 100 * REL_TOL * scale  # the test tells the masks apart


def test_chunks_keep_an_image_whole() -> None:
    spans = [ImageSpan(6, np.zeros((5, 4), np.float32)), ImageSpan(11, np.zeros((3, 4), np.float32))]
    check_spans(spans, 20, 4)
    assert chunk_end(spans, 0, 20, 8) == 6  # before the image it would cut
    assert chunk_end(spans, 6, 20, 3) == 11  # an image longer than the chunk goes whole
    assert chunk_end(spans, 6, 20, 7) == 11  # the second image starts the next chunk
    assert chunk_end(spans, 6, 20, 8) == 14  # both fit
    assert chunk_end(spans, 14, 20, 8) == 20
    for bad in ([ImageSpan(18, np.zeros((5, 4), np.float32))], [spans[0], ImageSpan(8, np.zeros((1, 4), np.float32))],
                [ImageSpan(0, np.zeros((2, 3), np.float32))], [ImageSpan(0, np.zeros((2, 4)))]):
        with pytest.raises(ValueError):
            check_spans(bad, 20, 4)


def test_no_image_input_without_markers(model: TextModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """An encoder alone (a projector beside a model whose family has no image markers) does not make the model
    list images among its inputs."""
    monkeypatch.setattr(TextModel, "image_markers", property(lambda self: GEMMA3_MARKERS))
    assert model.input_modalities == ("text", "image")
    monkeypatch.setattr(TextModel, "image_markers", property(lambda self: None))
    assert model.input_modalities == ("text",)


def test_images_of_different_soft_token_counts() -> None:
    """Each image's marker expands to its own count of soft tokens (Gemma 4's vary with the image's size), and the
    tokenised runs are found image by image; counts that do not match the ids are an error."""
    m = GEMMA3_MARKERS
    text = f"a{m.start}b{m.start}c"
    assert expand_images(text, m, [2, 3]) == f"a{m.expansion(2)}b{m.expansion(3)}c"
    with pytest.raises(ValueError, match="2 placeholders"):
        expand_images(text, m, [2])
    with pytest.raises(ValueError, match="spells out"):
        expand_images(text + m.soft, m, [2, 3])
    assert m.expansion(2) == f"\n\n{m.start}{m.soft * 2}{m.end}\n\n"  # Gemma3Processor's full_image_sequence
    ids = [1, 9, 7, 7, 8, 5, 9, 7, 7, 7, 8]
    assert soft_token_runs(ids, 7, [2, 3]) == [2, 7]
    for bad in ([3, 2], [2], [2, 3, 1]):
        with pytest.raises(ValueError, match="runs"):
            soft_token_runs(ids, 7, bad)


@pytest.mark.parametrize("markers", [GEMMA4_MARKERS, GEMMA4_AUDIO_MARKERS], ids=["image", "audio"])
def test_gemma4_placeholders(markers: ImageMarkers) -> None:
    """Gemma 4's template writes the soft token itself once per image (or clip); Gemma4Processor's
    replace_image_token (replace_audio_token) makes it begin + n soft tokens + end, nothing around, and its rows
    attend causally (use_bidirectional_attention unset on the small models; audio never)."""
    m = markers
    assert m.placeholder == m.soft and not m.bidirectional
    text = f"<|turn>user\n{m.soft}x{m.soft}<turn|>"
    want = f"<|turn>user\n{m.start}{m.soft * 3}{m.end}x{m.start}{m.soft}{m.end}<turn|>"
    assert expand_images(text, m, [3, 1]) == want
    with pytest.raises(ValueError, match="2 placeholders"):
        expand_images(text, m, [3])
    for forged in (m.start, m.end):
        with pytest.raises(ValueError, match="spells out"):
            expand_images(text + forged, m, [3, 1])


def _greedy_alone(model: TextModel, ids: list[int], images: list[ImageSpan], n: int) -> list[int]:
    session = model.new_session()
    try:
        logits, tokens = session.prefill(ids, images), []
        for _ in range(n):
            tokens.append(int(np.argmax(logits)))
            logits = session.decode(tokens[-1])
    finally:
        session.close()
    return tokens


def _run(generator: BatchGenerator) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent):
                out.setdefault(str(event.key), []).append(event.token.id)
            elif isinstance(event, EndEvent) and event.error is not None:
                raise event.error
    return out


def test_image_and_text_requests_in_one_batch_equal_each_alone(model: TextModel) -> None:
    """Continuous batching with an image prompt (prefilled in chunks of 8 whose edges move around its images), a
    text prompt and a second image prompt: each sequence's greedy tokens are its own alone."""
    image_ids, text_ids, other_ids = _prompt(24, 0), _prompt(11, 1), _prompt(9, 2)
    images, other = _images(model, [3, 13], seed=1), _images(model, [2], seed=2)
    want = {"image": _greedy_alone(model, image_ids, images, 8), "text": _greedy_alone(model, text_ids, [], 8),
            "other": _greedy_alone(model, other_ids, other, 8)}
    generator = BatchGenerator(model, prefill_chunk=8)
    generator.add("image", image_ids, GREEDY, 8, stop_ids=frozenset(), images=images)
    generator.add("text", text_ids, GREEDY, 8, stop_ids=frozenset())
    generator.add("other", other_ids, GREEDY, 8, stop_ids=frozenset(), images=other)
    assert _run(generator) == want
