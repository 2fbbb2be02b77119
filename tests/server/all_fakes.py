"""An app with every endpoint family on a fake model (chat, embeddings, speech, transcription): the whole server
code, in seconds. The hostile-input and soak tests run against it.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from config.settings import Settings, load_settings
from models.whisper.decode import Segment, TranscribeOptions
from server.app import create_app
from tests.server.fake_embedding import FakeEmbeddingModel
from tests.server.fake_kokoro import FakeKokoro, SpeechOutput
from tests.server.fake_model import fake_loader
from tests.server.fake_whisper import FakeWhisper

FAKE_LOADERS = {
    "embeddings.loader": "tests.server.fake_embedding:load",
    "speech.loader": "tests.server.fake_kokoro:load",
    "transcription.loader": "tests.server.fake_whisper:load_fake_whisper",
    "rerank.loader": "tests.server.fake_rerank:load",
}


def fake_settings(env: dict[str, str] | None = None, **overrides: Any) -> Settings:
    """Settings whose families all load fakes; the Ollama store is off unless env turns it on."""
    return load_settings(path=None, env={"HEARTH_OLLAMA": "false", **(env or {})},
                         overrides={**FAKE_LOADERS, **overrides})


def fake_app(env: dict[str, str] | None = None, step_s: float = 0.0, **overrides: Any) -> Any:
    """The production app on fakes (warm-up skipped: the fakes have nothing to compile)."""
    return create_app(fake_settings(env, **overrides), loader=fake_loader(step_s=step_s), warm_up=False)


def load_soak_chat(source: str, *, progress: Any = None, **_: Any) -> Any:
    """`HEARTH_MODEL_LOADER` for the soak's server process: the fake chat model at 5 ms a token, 8 in a batch, so
    streams last long enough to be cancelled midway."""
    from tests.server.fake_model import FakeModel

    if progress is not None:
        progress(1, 1)
    return FakeModel(source, step_s=0.005, context_length=512, max_batch=8)


def fake_config_toml(exclude: set[str] | frozenset[str] = frozenset(), loaders: dict[str, str] | None = None) -> str:
    """A HEARTH_CONFIG file putting the embeddings, speech and transcription families on fakes, but those in
    exclude (for a server started as `python -m server`, where overrides cannot be passed); `loaders` (keys as in
    FAKE_LOADERS, e.g. SOAK_LOADERS) picks other fakes."""
    chosen = loaders or FAKE_LOADERS
    tables = [key.split(".")[0] for key in FAKE_LOADERS]
    return "".join(f'[{table}]\nloader = "{chosen[table + ".loader"]}"\n\n' for table in tables
                   if table not in exclude)


# -- the soak's fakes: slow enough that clients can leave in the middle of their work ------------------------------
class SoakWhisper(FakeWhisper):
    """FakeWhisper at 50 ms per second of sound heard, so a long clip keeps the worker busy for seconds (a client
    that leaves is seen leaving a running job, and the jobs behind it queued). It refuses audio whose samples are
    not finite or whose square overflows float32, as the real model's log-mel features turn them into NaN and Inf:
    the server must refuse or clean such audio before a model sees it."""

    def transcribe(self, audio: np.ndarray, options: TranscribeOptions, *args: Any, **kwargs: Any) -> Iterator[Segment]:
        with np.errstate(over="ignore"):
            if not np.isfinite(np.square(audio, dtype=np.float32)).all():
                raise ValueError("audio with non-finite samples or samples whose power overflows float32 reached "
                                 "the model")
        return super().transcribe(audio, options, *args, **kwargs)


class SoakKokoro(FakeKokoro):
    """FakeKokoro taking 1 ms per phoneme id, as synthesis time grows with the chunk on the real model."""

    PHONEME_S = 0.001

    def synthesize(self, phoneme_ids: list[int], style: np.ndarray, speed: float = 1.0, seed: int | None = 0,
                   **kwargs: Any) -> SpeechOutput:
        time.sleep(len(phoneme_ids) * self.PHONEME_S)
        return super().synthesize(phoneme_ids, style, speed, seed, **kwargs)


class SoakEmbedding(FakeEmbeddingModel):
    """FakeEmbeddingModel taking 10 us per token, so a request of 2,048 long inputs lasts about a second."""

    TOKEN_S = 1e-5

    def embed(self, batch: Sequence[Sequence[int]], *args: Any, **kwargs: Any) -> np.ndarray:
        time.sleep(sum(len(ids) for ids in batch) * self.TOKEN_S)
        return super().embed(batch, *args, **kwargs)


def load_soak_whisper(source: str, *, progress: Any = None, **_: Any) -> SoakWhisper:
    if progress is not None:
        progress(1, 1)
    return SoakWhisper(name=source, step_s=0.05)


def load_soak_kokoro(source: str, *, progress: Any = None, **_: Any) -> SoakKokoro:
    return SoakKokoro()


def load_soak_embedding(source: str, *, progress: Any = None, **_: Any) -> SoakEmbedding:
    if progress is not None:
        progress(1, 1)
    return SoakEmbedding()


SOAK_LOADERS = {
    "embeddings.loader": "tests.server.all_fakes:load_soak_embedding",
    "speech.loader": "tests.server.all_fakes:load_soak_kokoro",
    "transcription.loader": "tests.server.all_fakes:load_soak_whisper",
    "rerank.loader": "tests.server.fake_rerank:load",
}
