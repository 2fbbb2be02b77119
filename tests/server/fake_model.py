"""A tiny stand-in for TextModel that follows server/protocols.py's ChatModel, for fast worker tests.

Its tokenizer has five special pieces and one token per byte; its "network" puts a large logit on the
next character of SCRIPT, so greedy output is SCRIPT repeated, and each step can be slowed down to
exercise queueing and cancellation. It counts open sessions, so tests can see KV caches being released,
and batch rounds (`steps`, with an optional `on_step` hook), so tests can count rounds rather than seconds.
Given `turns`, it sits on a fake device of that adapter (model.executor.device.turns, as real models do).
Given an image encoder (tests/fake_image_encoder.py), it takes images as Gemma 3 does: its vocabulary has Gemma 3's
three image pieces (after the bytes) and its generator records the images each sequence got (`images_seen`).
"""

from __future__ import annotations

import codecs
import re
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpu.errors import GPUFailure
from gpu.turns import Turns
from models.text.batch import EndEvent, Event, TokenEvent
from models.text.chat_template import GEMMA4_TEMPLATE
from models.text.engine import ContextLengthExceeded
from models.text.images import GEMMA3_MARKERS, GEMMA4_AUDIO_MARKERS, ImageSpan, check_spans
from models.text.sampler import Sampler, SamplingParams
from tests.fake_image_encoder import FakeImageEncoder

SPECIALS = ["<pad>", "<bos>", "<eos>", "<start_of_turn>", "<end_of_turn>"]
BYTE0 = len(SPECIALS)
IMAGE_PIECES = [GEMMA3_MARKERS.start, GEMMA3_MARKERS.soft, GEMMA3_MARKERS.end]  # ids BYTE0 + 256 + k
AUDIO_PIECES = [GEMMA4_AUDIO_MARKERS.start, GEMMA4_AUDIO_MARKERS.soft, GEMMA4_AUDIO_MARKERS.end]  # after those
IMAGE0 = BYTE0 + 256
SCRIPT = "Hello world. "
_SPECIAL_RE = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS + IMAGE_PIECES + AUDIO_PIECES) + ")")


class FakeAudioEncoder:
    """An audio tower of the AudioEncoder protocol: a soft token per started 0.25 s, rows of the clip's mean."""

    sample_rate = 16000
    max_samples = 30 * 16000
    embedding_size = 16

    def features(self, samples: np.ndarray) -> np.ndarray:
        return np.asarray(samples, np.float32).reshape(-1, 1)

    def soft_tokens(self, samples: int) -> int:
        return -(-samples // 4000)

    def encode(self, features: np.ndarray) -> np.ndarray:
        return np.full((self.soft_tokens(len(features)), self.embedding_size), features.mean(), np.float32)


class FakeDecoder:
    def __init__(self) -> None:
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def push(self, token_id: int) -> str:
        return self._utf8.decode(bytes([token_id - BYTE0])) if BYTE0 <= token_id < IMAGE0 else ""

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)


class FakeTokenizer:
    bos_id = 1
    eos_id = 2
    eos_ids = frozenset({2, 4})
    vocab_size = BYTE0 + 256
    chat_template: str | None = None

    def __init__(self, images: bool = False, audio: bool = False) -> None:
        self.images = images or audio  # whether Gemma 3's image pieces are in the vocabulary
        self.audio = audio  # and Gemma 4's audio pieces, with Gemma 4's turn format
        if self.images:
            self.vocab_size = IMAGE0 + len(IMAGE_PIECES) + (len(AUDIO_PIECES) if audio else 0)
        if audio:
            self.chat_template = GEMMA4_TEMPLATE

    def encode(self, text: str, add_bos: bool = True) -> list[int]:
        ids = [self.bos_id] if add_bos else []
        for part in _SPECIAL_RE.split(text):
            if part in SPECIALS:
                ids.append(SPECIALS.index(part))
            elif part in IMAGE_PIECES and self.images:
                ids.append(IMAGE0 + IMAGE_PIECES.index(part))
            elif part in AUDIO_PIECES and self.audio:
                ids.append(IMAGE0 + len(IMAGE_PIECES) + AUDIO_PIECES.index(part))
            else:
                ids.extend(BYTE0 + b for b in part.encode("utf-8"))
        return ids

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        return bytes(i - BYTE0 for i in ids if BYTE0 <= i < IMAGE0).decode("utf-8", "replace")

    def stream_decoder(self) -> FakeDecoder:
        return FakeDecoder()

    def id_to_piece(self, token_id: int) -> str:
        if token_id >= IMAGE0:
            return (IMAGE_PIECES + AUDIO_PIECES)[token_id - IMAGE0]
        return SPECIALS[token_id] if token_id < BYTE0 else f"<0x{token_id - BYTE0:02X}>"

    def id_to_bytes(self, token_id: int) -> bytes:
        if token_id >= IMAGE0:
            return (IMAGE_PIECES + AUDIO_PIECES)[token_id - IMAGE0].encode()
        return SPECIALS[token_id].encode() if token_id < BYTE0 else bytes([token_id - BYTE0])


class FakeSession:
    def __init__(self, model: FakeModel) -> None:
        self.model = model
        self.n_past = 0
        self._generated = 0
        with model.lock:
            model.open_sessions += 1

    def _logits(self) -> np.ndarray:
        time.sleep(self.model.step_s)
        logits = np.zeros(self.model.vocab_size, dtype=np.float32)
        if self.model.eos_after is not None and self._generated >= self.model.eos_after:
            logits[2] = 20.0
        else:
            logits[BYTE0 + ord(SCRIPT[self._generated % len(SCRIPT)])] = 20.0
        return logits

    def prefill(self, ids: list[int]) -> np.ndarray:
        assert ids and self.n_past + len(ids) <= self.model.context_length
        self.n_past += len(ids)
        return self._logits()

    def decode(self, token: int) -> np.ndarray:
        self.n_past += 1
        self._generated += 1
        if self.model.fail_after is not None and self._generated >= self.model.fail_after:
            raise GPUFailure("submitting commands", "decode", RuntimeError("device lost"))
        return self._logits()

    def reset(self) -> None:
        self.n_past = self._generated = 0

    def close(self) -> None:
        with self.model.lock:
            self.model.open_sessions -= 1


class FakeGenerator:
    """The BatchGenerator protocol (models/text/batch.py) over fake sessions: each round gives every
    running sequence one token, sampled on the CPU; at most model.max_batch run together."""

    def __init__(self, model: FakeModel) -> None:
        self.model = model
        self._seqs: dict[Any, dict[str, Any]] = {}

    @property
    def busy(self) -> bool:
        return bool(self._seqs)

    def can_admit(self, prompt: Sequence[int], max_tokens: int, n_sequences: int = 1) -> bool:
        return len(self._seqs) + n_sequences <= self.model.max_batch

    def add(self, key: Any, prompt_ids: list[int], sampling: SamplingParams, max_tokens: int,
            logprobs: bool = False, stop_ids: frozenset[int] | None = None, constraint: Any = None,
            images: Sequence[ImageSpan] = ()) -> None:
        """constraint: a grammar the sequence follows, as models/text/batch.py does: tokens it refuses are masked
        out before sampling, and its end ends the sequence (the fake's tokenizer needs is_special to build one).
        images: checked as models/text/batch.py checks them, and recorded in model.images_seen."""
        if len(prompt_ids) + max_tokens - 1 > self.model.context_length:
            raise ContextLengthExceeded(f"{len(prompt_ids)} + {max_tokens} tokens exceed the context")
        if images:
            check_spans(images, len(prompt_ids), self.model.embedding_size)
            with self.model.lock:
                self.model.images_seen.append([(span.start, len(span.embeddings), span.digest) for span in images])
        self._seqs[key] = {"session": FakeSession(self.model), "prompt": list(prompt_ids), "sampler": Sampler(sampling),
                           "history": list(prompt_ids), "max": max_tokens, "produced": 0, "last": None,
                           "stops": self.model.tokenizer.eos_ids if stop_ids is None else stop_ids,
                           "constraint": constraint}

    def cached(self, key: Any) -> int:
        return 0  # the fake has no KV cache to reuse

    def cancel(self, key: Any) -> None:
        seq = self._seqs.pop(key, None)
        if seq is not None:
            seq["session"].close()

    def step(self) -> list[Event]:
        self.model.steps += 1
        if self.model.on_step is not None:
            self.model.on_step(self.model.steps)
        events: list[Event] = []
        for key, seq in list(self._seqs.items()):
            session = seq["session"]
            try:
                if seq["max"] <= 0:
                    raise StopIteration("length")
                logits = session.prefill(seq["prompt"]) if seq["last"] is None else session.decode(seq["last"])
                constraint = seq["constraint"]
                if constraint is not None:
                    mask = np.empty(constraint.vocabulary.mask_words, np.uint32)
                    constraint.fill_mask(mask)
                    allowed = np.unpackbits(mask.view(np.uint8), bitorder="little")[:len(logits)].astype(bool)
                    logits = np.where(allowed, logits, -np.inf).astype(np.float32)
                token = seq["sampler"].sample(logits, seq["history"])
                if token.id in seq["stops"]:
                    raise StopIteration("stop")
                events.append(TokenEvent(key, token))
                seq["produced"] += 1
                seq["last"] = token.id
                seq["history"].append(token.id)
                if constraint is not None:
                    constraint.advance(token.id)
                    if constraint.finished:
                        raise StopIteration("stop")
                if seq["produced"] >= seq["max"]:
                    raise StopIteration("length")
            except StopIteration as end:
                events.append(EndEvent(key, str(end)))
                self.cancel(key)
            except Exception as error:  # noqa: BLE001 - as BatchGenerator: the sequence ends with its error
                events.append(EndEvent(key, "error", error))
                self.cancel(key)
        return events


@dataclass(frozen=True)
class FakeDevice:
    turns: Turns


@dataclass(frozen=True)
class FakeExecutor:
    device: FakeDevice


class FakeModel:
    """A model that says SCRIPT over and over, step_s seconds a token."""

    def __init__(self, name: str = "fake", step_s: float = 0.0, context_length: int = 256,
                 eos_after: int | None = None, fail_after: int | None = None, max_batch: int = 4,
                 turns: Turns | None = None, on_step: Callable[[int], None] | None = None,
                 image_encoder: Any = None, audio_encoder: Any = None,
                 on_warm_up: Callable[[], None] | None = None) -> None:
        self.name = name
        self.tokenizer = FakeTokenizer(images=image_encoder is not None, audio=audio_encoder is not None)
        self.context_length = context_length
        self.vocab_size = self.tokenizer.vocab_size
        self.embedding_size = 16
        self.image_encoder = image_encoder  # tests/fake_image_encoder.py's, for a model that takes images
        self.image_markers = GEMMA3_MARKERS if image_encoder is not None else None
        self.audio_encoder = audio_encoder  # FakeAudioEncoder, for a model that takes audio (Gemma 4's markers)
        self.audio_markers = GEMMA4_AUDIO_MARKERS if audio_encoder is not None else None
        self.images_seen: list[list[tuple[int, int, str]]] = []  # per sequence with images: (start, rows, digest)
        self.step_s = step_s
        self.eos_after = eos_after
        self.fail_after = fail_after  # decode raises a GPUFailure at this many generated tokens
        self.max_batch = max_batch
        self.open_sessions = 0
        self.lock = threading.Lock()
        self.steps = 0  # batch rounds run so far
        self.on_step = on_step  # called on the worker thread with the round's number, before it runs
        self.on_warm_up = on_warm_up  # called on the worker thread by warm_up
        self.warm_ups = 0  # warm_up calls so far
        if turns is not None:
            self.executor = FakeExecutor(FakeDevice(turns))

    def new_session(self) -> FakeSession:
        return FakeSession(self)

    def warm_up(self, run: bool | None = None) -> int:
        """As TextModel.warm_up: the worker calls it before it is ready (with compile_ahead); nothing to compile."""
        self.warm_ups += 1
        if self.on_warm_up is not None:
            self.on_warm_up()
        return 0

    def generator(self) -> FakeGenerator:
        return FakeGenerator(self)


def fake_loader(step_s: float = 0.0, fail: bool = False, **model_kwargs: Any) -> Callable[..., FakeModel]:
    """A loader with the signature of load_text_model, reporting progress over four steps. A model whose settings
    name a projector gets the fake image encoder (tests/fake_image_encoder.py, 16 wide, 4 rows an image)."""

    def load(source: str, *, progress: Callable[[int, int], None] | None = None, projector: str | None = None,
             **_: Any) -> FakeModel:
        for done in range(1, 5):
            if progress is not None:
                progress(done, 4)
        if fail:
            raise RuntimeError(f"cannot load {source}")
        kwargs = dict(model_kwargs)
        if projector is not None:
            kwargs.setdefault("image_encoder", FakeImageEncoder(16, tokens_per_image=4))
            if "audio" in source:
                kwargs.setdefault("audio_encoder", FakeAudioEncoder())
        return FakeModel(source, step_s=step_s, **kwargs)

    return load


def load_fake_model(source: str, *, progress: Callable[[int, int], None] | None = None, **kwargs: Any) -> FakeModel:
    """`HEARTH_MODEL_LOADER=tests.server.fake_model:load_fake_model` serves the fake from `python -m server`."""
    return fake_loader()(source, progress=progress, **kwargs)


def load_slow_fake_model(source: str, *, progress: Callable[[int, int], None] | None = None,
                         **kwargs: Any) -> FakeModel:
    """As load_fake_model, 20 ms a token: long enough that concurrent requests overlap (tests/server/test_ray_serve.py
    serves it from Ray Serve replicas through HEARTH_MODEL_LOADER)."""
    return fake_loader(step_s=0.02)(source, progress=progress, **kwargs)
