"""A chat worker's encoded images and clips (server/media_rows.py): rows cached by digest, least recently used out
past the budget; and the worker reusing an image a later request sends again."""

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
    the batch size of every call."""

    def __init__(self) -> None:
        self.batches: list[int] = []

    def encode(self, pixels: np.ndarray) -> np.ndarray:
        self.batches.append(len(pixels))
        means = pixels.reshape(len(pixels), -1).mean(axis=1)
        return np.repeat(means[:, None, None], ROWS, 1).repeat(WIDTH, 2) + np.arange(ROWS)[None, :, None]


def image(seed: float, side: int = 8) -> PromptImage:
    pixels = np.full((3, side, side), seed, np.float32)
    return PromptImage(0, pixels, pixel_digest(pixels))


def expected(item: PromptImage) -> np.ndarray:
    return RecordingEncoder().encode(item.pixels[None])[0]


def test_images_of_one_size_share_a_call_and_are_cached() -> None:
    encoder = RecordingEncoder()
    media = MediaRows(encoder, None)
    items = [image(1), image(2, side=16), image(3)]
    rows = media.rows(items)
    assert sorted(encoder.batches) == [1, 2]
    for item, got in zip(items, rows, strict=True):
        np.testing.assert_array_equal(got, expected(item))
    again = media.rows([items[2], items[1]])
    assert sorted(encoder.batches) == [1, 2]
    np.testing.assert_array_equal(again[0], expected(items[2]))


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


def test_an_image_sent_again_is_not_encoded_again() -> None:
    """A multi-turn chat resends its image: the second request's rows come from the worker's cache."""
    greedy = SamplingParams(temperature=0.0)
    rows = 4  # tests/server/fake_model.py's image encoder: 4 rows an image, 16 wide
    pixels = np.random.default_rng(0).uniform(-1, 1, (3, 8, 8)).astype(np.float32)

    def image_job(start: int) -> Job:
        ids = [1, *([5] * (start - 1)), *([7] * rows), 9, 10]
        return Job([ChoiceSpec(0, ids, greedy, 2, images=(PromptImage(start, pixels, pixel_digest(pixels)),))])

    async def main() -> None:
        worker = ChatWorker("fake", "fake-source", fake_loader(), max_queue=8, projector="mmproj.gguf")
        worker.start()
        await worker.wait_ready()
        encoder = worker.model.image_encoder
        calls = encoder.calls  # the warm-up's
        for start in (1, 6):  # the image, then the same image further into a longer prompt
            reply = "".join([e.text async for e in worker.submit(image_job(start), 1).events()
                             if isinstance(e, TextDelta)])
            assert reply
        assert encoder.calls - calls == 1
        first, second = worker.model.images_seen[-2:]
        assert first[0][2] == second[0][2] and (first[0][0], second[0][0]) == (1, 6)
        worker.stop()

    asyncio.run(main())
