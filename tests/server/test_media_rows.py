"""A chat worker's encoded images and clips (server/media_rows.py): images of one size from waiting requests encoded
in one call, rows cached by digest (least recently used out past the budget), another request's image never failing
this one's; and the worker batching a burst of image requests into one encoder call."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from models.text.images import pixel_digest
from models.text.sampler import SamplingParams
from server.chat_worker import ChatWorker
from server.jobs import ChoiceSpec, Job, TextDelta
from server.media_rows import MediaRows
from server.services.audio_inputs import PromptAudio
from server.services.images import PromptImage
from tests.server.fake_model import fake_loader

ROWS, WIDTH = 3, 4


class RecordingEncoder:
    """Rows that depend on each image alone (so a batch's rows equal one-at-a-time rows), any pixel size; records
    the batch size of every call; fails a call that holds an image whose pixels are NaN."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        self.batches.append(len(pixels))
        if np.isnan(pixels).any():
            raise RuntimeError("the encoder failed")
        means = pixels.reshape(len(pixels), -1).mean(axis=1)
        return np.repeat(means[:, None, None], ROWS, 1).repeat(WIDTH, 2) + np.arange(ROWS)[None, :, None]


def image(seed: float, side: int = 8) -> PromptImage:
    pixels = np.full((3, side, side), seed, np.float32)
    return PromptImage(0, pixels, pixel_digest(pixels))


def expected(item: PromptImage) -> np.ndarray:
    return RecordingEncoder().encode(item.pixels[None])[0]


def test_waiting_images_of_the_same_size_join_the_call_and_are_cached() -> None:
    encoder = RecordingEncoder()
    media = MediaRows(encoder, None)
    own = [image(1), image(2)]
    waiting = [image(3), image(4, side=16), image(5), image(1)]  # a larger one; one that is among own
    rows = media.rows(own, waiting)
    assert encoder.batches == [4]  # own two, and the two waiting of their size
    for item, got in zip(own, rows, strict=True):
        np.testing.assert_array_equal(got, expected(item))
    later = media.rows([waiting[2], waiting[0]])  # their turn: from the cache
    assert encoder.batches == [4]
    np.testing.assert_array_equal(later[0], expected(waiting[2]))
    media.rows([waiting[1]])  # the larger one was not encoded ahead
    assert encoder.batches == [4, 1]


def test_calls_take_at_most_images_per_call() -> None:
    encoder = RecordingEncoder()
    media = MediaRows(encoder, None, images_per_call=2)
    media.rows([image(1), image(2), image(3)], [image(4), image(5)])
    assert encoder.batches == [2, 2]  # own three in two calls, the second topped up with one waiting image
    media.rows([image(4), image(5)])
    assert encoder.batches == [2, 2, 1]


def test_the_same_image_twice_is_encoded_once() -> None:
    encoder = RecordingEncoder()
    rows = MediaRows(encoder, None).rows([image(1), image(1)])
    assert encoder.batches == [1]
    np.testing.assert_array_equal(rows[0], rows[1])


def test_least_recently_used_rows_leave_past_the_budget() -> None:
    encoder = RecordingEncoder()
    one = ROWS * WIDTH * 4  # bytes of one image's rows
    media = MediaRows(encoder, None, cache_bytes=2 * one)
    a, b, c = image(1), image(2), image(3)
    media.rows([a])
    media.rows([b])
    media.rows([a])  # a used last: b goes first
    media.rows([c])
    assert encoder.batches == [1, 1, 1]
    media.rows([a])
    assert encoder.batches == [1, 1, 1]
    media.rows([b])
    assert encoder.batches == [1, 1, 1, 1]


def test_a_failing_waiting_image_never_fails_this_request() -> None:
    encoder = RecordingEncoder()
    media = MediaRows(encoder, None)
    broken = image(float("nan"))
    rows = media.rows([image(1)], [broken])
    assert encoder.batches == [2, 1]  # together, then this request's alone
    np.testing.assert_array_equal(rows[0], expected(image(1)))
    with pytest.raises(RuntimeError, match="encoder failed"):
        media.rows([broken])


def test_clips_are_cached_and_a_model_without_the_encoder_says_so() -> None:
    class Clips:
        calls = 0

        def encode(self, features: np.ndarray) -> np.ndarray:
            self.calls += 1
            return np.full((2, WIDTH), features.mean(), np.float32)

    clips = Clips()
    media = MediaRows(None, clips)
    features = np.ones((10, 5), np.float32)
    clip = PromptAudio(0, features, pixel_digest(features))
    media.rows([clip])
    media.rows([clip])
    assert clips.calls == 1
    with pytest.raises(ValueError, match="no image encoder"):
        media.rows([image(1)])
    with pytest.raises(ValueError, match="no audio encoder"):
        MediaRows(RecordingEncoder(), None).rows([clip])


def test_a_burst_of_image_requests_is_encoded_in_one_call() -> None:
    """One place in the batch, held by a text request: three image requests queue behind it; the first admitted
    has its image encoded with the other two, whose turns then encode nothing."""
    greedy = SamplingParams(temperature=0.0)
    rows = 4  # tests/server/fake_model.py's image encoder: 4 rows an image, 16 wide

    def image_job(seed: int) -> Job:
        pixels = np.random.default_rng(seed).uniform(-1, 1, (3, 8, 8)).astype(np.float32)
        ids = [1, *([7] * rows), 9, 10]
        return Job([ChoiceSpec(0, ids, greedy, 2, images=(PromptImage(1, pixels, pixel_digest(pixels)),))])

    async def main() -> None:
        worker = ChatWorker("fake", "fake-source", fake_loader(step_s=0.05, max_batch=1), max_queue=8,
                            projector="mmproj.gguf")
        worker.start()
        await worker.wait_ready()
        encoder = worker.model.image_encoder
        calls, images = encoder.calls, encoder.encoded  # the warm-up's
        text = worker.submit(Job([ChoiceSpec(0, [1, 5, 6], greedy, 6)]), 1)
        handles = [worker.submit(image_job(seed), 1) for seed in range(3)]

        async def drain(handle: object) -> str:
            return "".join([e.text async for e in handle.events() if isinstance(e, TextDelta)])  # type: ignore

        replies = await asyncio.gather(drain(text), *(drain(h) for h in handles))
        assert all(replies)
        assert (encoder.calls - calls, encoder.encoded - images) == (1, 3)
        seen = worker.model.images_seen[-3:]
        assert len({digest for spans in seen for _, _, digest in spans}) == 3
        worker.stop()

    asyncio.run(main())
