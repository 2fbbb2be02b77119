"""Prefix caching on the shipped Gemma 3 270M: a prompt whose leading pages are cached gives the tokens and logits
of one prefilled whole, a chat's next turn reuses its earlier turn's generated pages, and every page comes back.

Pages of 16 positions keep the prompts short on a software adapter. Exactness: the cached keys and values were
computed in other prompt chunks than a whole prefill computes them in (the chunk's rows start elsewhere), which on a
GPU may run other kernel variants and sum products in another order: logits agree to float noise (tolerance 2e-3,
about the f16 cache's rounding, tests/models/test_gemma3_parity.py), and greedy tokens are identical.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from models.text.batch import BatchGenerator, EndEvent, TokenEvent
from models.text.engine import Engine, TextModel, load_text_model
from models.text.images import ImageSpan, pixel_digest
from models.text.prefix_cache import cached_prefix
from models.text.sampler import SamplingParams
from tests.fake_image_encoder import FakeImageEncoder
from tests.models.test_family_parity import FAMILIES_DIR
from tests.models.test_gemma4_synthetic import small_e2b  # noqa: F401 - the fixture

pytestmark = pytest.mark.heavy
GREEDY = SamplingParams(temperature=0.0)
PAGE = 16
SYSTEM = ("You are a careful assistant. Answer briefly, cite the facts you use, and say so when you do not know. "
          "Questions follow.")


@pytest.fixture(scope="module")
def model() -> Iterator[TextModel]:
    yield load_text_model("gemma-3-270m", max_batch=4)


def small_engine(model: TextModel) -> Engine:
    return Engine(model, "f16", pool_tokens=24 * PAGE, page_tokens=PAGE, n_ctx=8 * PAGE)


def run(generator: BatchGenerator, prompts: dict[str, list[int]], max_tokens: int) -> dict[str, list[int]]:
    """Admit the prompts together (beside any admitted already) and run them all to the end; each one's tokens."""
    for key, prompt in prompts.items():
        generator.add(key, prompt, GREEDY, max_tokens, stop_ids=frozenset())
    got: dict[str, list[int]] = {key: [] for key in prompts}
    while generator.busy:
        for event in generator.step():
            if isinstance(event, TokenEvent):
                got.setdefault(event.key, []).append(event.token.id)
            else:
                assert isinstance(event, EndEvent) and event.reason == "length", event
    return got


def test_cached_prefix_gives_the_logits_of_a_whole_prefill(model: TextModel) -> None:
    engine = small_engine(model)
    prompt = model.tokenizer.encode(SYSTEM + " What is the capital of France?")
    assert len(prompt) > 2 * PAGE
    first = engine.new_session()
    try:
        whole = first.prefill(prompt)
        first.publish(prompt)
        second = engine.new_session()
        try:
            cached = second.take_cached_prefix(prompt)
            assert cached == (len(prompt) - 1) // PAGE * PAGE
            assert engine.pool._pages[second.slot][:cached // PAGE] == engine.pool._pages[first.slot][:cached // PAGE]
            reused = second.prefill(prompt[cached:])
        finally:
            second.close()
    finally:
        first.close()
    np.testing.assert_allclose(reused, whole, atol=2e-3, rtol=0)
    assert int(reused.argmax()) == int(whole.argmax())


def test_batches_with_and_without_the_cache_give_the_same_tokens(model: TextModel) -> None:
    """Three questions behind one system prompt, twice (the second time all three find it cached), and a chat's
    next turn (its prompt: the first turn's prompt and answer, then more): the tokens of a cache-less engine."""
    questions = [" What is the capital of France?", " Name a prime number.", " Who wrote Hamlet?"]
    prompts = {str(i): model.tokenizer.encode(SYSTEM + q) for i, q in enumerate(questions)}
    plain = small_engine(model)
    plain.pool.prefix_caching = False
    want = run(BatchGenerator(model, steps_per_submit=4, prefill_chunk=PAGE, engine=plain), prompts, 8)
    assert plain.pool.free_tokens == plain.pool.n_pages * PAGE

    engine = small_engine(model)
    generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=PAGE, engine=engine)
    assert run(generator, {"0": prompts["0"]}, 8) == {"0": want["0"]}
    assert generator.cached_tokens == 0
    assert run(generator, prompts, 8) == want
    system_pages = len(model.tokenizer.encode(SYSTEM)) // PAGE
    assert generator.cached_tokens >= 3 * system_pages * PAGE

    turn = prompts["0"] + want["0"] + model.tokenizer.encode(" And of Spain?", add_bos=False)
    before = generator.cached_tokens
    plain_turn = run(BatchGenerator(model, steps_per_submit=4, prefill_chunk=PAGE, engine=plain), {"t": turn}, 8)
    assert run(generator, {"t": turn}, 8) == plain_turn
    assert generator.cached_tokens - before == (len(prompts["0"]) + len(want["0"]) - 1) // PAGE * PAGE
    pool = engine.pool
    assert pool.free_slots == pool.n_slots and pool.free_tokens == pool.n_pages * PAGE and pool.cached_pages > 0


def assert_cached_prefill_agrees(model: TextModel, kv_dtype: str, prompt: list[int], atol: float) -> int:
    """A second session that takes the first one's published pages and prefills the rest gets the logits of the
    whole prompt's prefill; the positions it found cached."""
    engine = Engine(model, kv_dtype, pool_tokens=24 * PAGE, page_tokens=PAGE, n_ctx=8 * PAGE)
    first, second = engine.new_session(), engine.new_session()
    try:
        whole = first.prefill(prompt)
        first.publish(prompt)
        cached = second.take_cached_prefix(prompt)
        reused = second.prefill(prompt[cached:])
    finally:
        first.close()
        second.close()
    np.testing.assert_allclose(reused, whole, atol=atol * np.abs(whole).max(), rtol=0)
    return cached


@pytest.mark.skipif(not (FAMILIES_DIR / "gemma2.f32.gguf").exists(), reason="no Gemma 2 fixture")
def test_sliding_window_layers_reuse_pages_past_their_window() -> None:
    """Gemma 2's fixture slides a window of 16 positions: a sliding layer keeps every page of the sequence (the
    pool never reuses a page inside one), so four cached pages, three of them outside the last token's window,
    serve as well. f32 cache; logits within 1e-4 of their largest (sums in another order: ~1e-6 of it; a wrong
    page: of the order of it)."""
    model = load_text_model(str(FAMILIES_DIR / "gemma2.f32.gguf"), kv_dtype="f32", context_length=128, max_batch=1)
    assert model.arch.config.window == PAGE and any(model.arch.config.sliding)
    prompt = [int(t) for t in np.random.default_rng(0).integers(10, model.vocab_size, 70)]
    assert assert_cached_prefill_agrees(model, "f32", prompt, 1e-4) == 4 * PAGE


def test_kv_shared_layers_read_the_shared_pages(small_e2b: Path) -> None:  # noqa: F811 - the fixture
    """Gemma 4 E2B's shape: its last five layers read an earlier layer's cache by layer index through the same
    page table, so they see the shared pages too (the tolerance as above)."""
    model = load_text_model(str(small_e2b), context_length=256, max_batch=1)
    assert model.arch.config.n_shared_kv == 5
    prompt = [2] + [300 + i % 40 for i in range(50)]
    assert assert_cached_prefill_agrees(model, "f16", prompt, 1e-4) == 3 * PAGE


def test_images_in_a_cached_prefix_must_be_the_same_images() -> None:
    """Gemma's fixture with a stand-in image encoder (5 rows an image), pages of 16: a prompt's pages are reused only
    where the images in them have the same pixels, and a reused run never ends inside an image; the tokens are those
    of an engine without the cache. Runs: A; A again (three pages cached); A with its second image's pixels changed
    (only the page before it); A's first 40 tokens and then others (the run would end at 32, inside the image at
    30-34: it ends at 16)."""
    model = load_text_model(str(FAMILIES_DIR / "gemma.f32.gguf"), max_batch=2, context_length=128, kv_dtype="f32")
    model.attach_image_encoder(FakeImageEncoder(model.embedding_size, tokens_per_image=5, scale=4.0))
    encoder = model.image_encoder
    assert encoder is not None
    pixels = np.random.default_rng(1).uniform(-1, 1, (4, 3, 8, 8)).astype(np.float32)
    rows = encoder.encode(pixels)

    def spans(order: list[int]) -> list[ImageSpan]:
        return [ImageSpan(start, rows[i], pixel_digest(pixels[i])) for start, i in zip((3, 20, 30), order,
                                                                                       strict=True)]

    ids = [int(t) for t in np.random.default_rng(0).integers(3, 400, 60)]
    other = ids[:40] + [int(t) for t in np.random.default_rng(5).integers(3, 400, 20)]
    runs = [(ids, spans([0, 1, 2]), 0), (ids, spans([0, 1, 2]), 3 * PAGE), (ids, spans([0, 3, 2]), PAGE),
            (other, spans([0, 1, 2]), PAGE)]
    dtype = "f32"
    plain = Engine(model, dtype, pool_tokens=24 * PAGE, page_tokens=PAGE, n_ctx=8 * PAGE)
    plain.pool.prefix_caching = False
    engine = Engine(model, dtype, pool_tokens=24 * PAGE, page_tokens=PAGE, n_ctx=8 * PAGE)
    generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=PAGE, engine=engine)
    for prompt, images, cached in runs:
        alone = BatchGenerator(model, steps_per_submit=4, prefill_chunk=PAGE, engine=plain)
        alone.add("x", prompt, GREEDY, 4, stop_ids=frozenset(), images=images)
        generator.add("x", prompt, GREEDY, 4, stop_ids=frozenset(), images=images)
        assert generator.cached("x") == cached
        assert run(generator, {}, 4) == run(alone, {}, 4)


def test_admission_counts_the_pages_a_running_sequence_shares_once(model: TextModel) -> None:
    """A prompt whose leading pages a running sequence holds needs only its other pages to be admitted: with the
    rest of the pool taken but for what the second prompt needs beyond the shared system prompt, it is admitted,
    and the same pool without the prefix cache would refuse it (it counted every prompt page before)."""
    engine = Engine(model, "f16", pool_tokens=16 * PAGE, page_tokens=PAGE, n_ctx=16 * PAGE)  # a slot may fill it
    pool = engine.pool
    generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=PAGE, engine=engine)
    first = model.tokenizer.encode(SYSTEM + " What is the capital of France?")
    second = model.tokenizer.encode(SYSTEM + " Which river runs through Paris?")
    generator.add("first", first, GREEDY, 8, stop_ids=frozenset())
    while generator._sequences["first"].prefilling:
        generator.step()
    shared = pool.held(cached_prefix(pool, second))
    assert shared >= 1
    blocker = pool.open_slot()  # takes free pages until the second prompt just fits
    try:
        taken = pool.free_tokens // PAGE
        pool.reserve(blocker, taken * PAGE)
        while taken and not generator.can_admit(second, 8):
            taken -= 1
            pool.release_pages(blocker)
            pool.reserve(blocker, taken * PAGE)
        assert taken and generator.can_admit(second, 8)
        pool.prefix_caching = False
        assert not generator.can_admit(second, 8)
        pool.prefix_caching = True
    finally:
        pool.close_slot(blocker)
    while generator.busy:
        generator.step()
    assert pool.free_slots == pool.n_slots and pool.free_tokens == pool.n_pages * PAGE


def test_a_short_pool_runs_many_prompts_with_a_shared_header_and_every_page_comes_back() -> None:
    """Gemma's fixture in a pool of ten 16-position pages, which the sequences outgrow: twelve prompts behind one
    header, four at once and then the others as the batch admits them, sequences preempted, cached pages reclaimed
    for running ones, preempted ones resuming from their own pages where still cached; every sequence gets the tokens
    of a cache-less engine's run, and at the end every page is free or cached and no slot holds any."""
    model = load_text_model(str(FAMILIES_DIR / "gemma.f32.gguf"), max_batch=4, context_length=128, kv_dtype="f32")
    rng = np.random.default_rng(3)
    header = [int(t) for t in rng.integers(3, 400, 2 * PAGE + 3)]
    prompts = {str(i): header + [int(t) for t in rng.integers(3, 400, int(rng.integers(1, 12)))] for i in range(12)}

    def run_waves(cache: bool) -> tuple[dict[str, list[int]], BatchGenerator]:
        engine = Engine(model, "f32", pool_tokens=10 * PAGE, page_tokens=PAGE, n_ctx=6 * PAGE)
        engine.pool.prefix_caching = cache
        generator = BatchGenerator(model, steps_per_submit=4, prefill_chunk=PAGE, engine=engine)
        waiting = list(prompts.items())
        got: dict[str, list[int]] = {}
        while waiting or generator.busy:
            # the first four come in together, more than the pool holds as they grow: the newest are preempted
            while waiting and (len(waiting) > 8 or generator.can_admit(waiting[0][1], 24)
                               or not generator.busy):
                key, prompt = waiting.pop(0)
                generator.add(key, prompt, GREEDY, 24, stop_ids=frozenset())
            for event in generator.step():
                if isinstance(event, TokenEvent):
                    got.setdefault(event.key, []).append(event.token.id)
                else:
                    assert isinstance(event, EndEvent) and event.reason == "length", event
        return got, generator

    want, _ = run_waves(False)
    got, generator = run_waves(True)
    assert got == want
    assert generator.cached_tokens >= 2 * PAGE * 6 and generator.preemptions > 0
    assert generator.resumed_tokens >= PAGE  # a preempted sequence came back to pages of its own still cached
    pool = generator.pool
    assert pool.free_slots == pool.n_slots and pool.free_tokens == pool.n_pages * PAGE
    assert not any(pool._refs) and pool.cached_pages > 0


@pytest.mark.skipif(not (FAMILIES_DIR / "lfm2.f32.gguf").exists(), reason="no LFM2 fixture")
def test_a_hybrid_prefills_its_prompts_whole() -> None:
    """LFM2's recurrent state after a prefix is not kept: its pool does not cache prefixes."""
    hybrid = load_text_model(str(FAMILIES_DIR / "lfm2.f32.gguf"), kv_dtype="f32", context_length=128, max_batch=1)
    pool = hybrid.engine().pool
    assert pool.recurrent is not None and not pool.prefix_caching
