"""The serving layer's own cost: Hearth's real server, chat worker and batch generator over an engine that runs
nothing, so that every second of CPU they take is the host's, measurable on any machine.

The engine samples token ids at random from a real vocabulary (the detokenising costs what it costs on a real
model) and emulates a GPU: a submission of n steps finishes --step-ms x n after the GPU's earlier work (queued
behind it, as on a device), and waiting for it sleeps with the GIL free, as a wait on the device does. --c-calls
makes each step also call a C function that many times (each call drops and retakes the GIL, as wgpu-native's
dispatch encoding through cffi does, about three calls a dispatch). Load it with bench/serve.py and read the threads'
CPU time from /proc, or sample it with py-spy:

    python tools/perf/serve_host.py --port 8099 --step-ms 2.27 --c-calls 400 &
    python bench/serve.py --url hearth=http://127.0.0.1:8099 --streams 32 --max-tokens 1024

At --step-ms 2.27 (the 270M's step at 32 streams on the H200) the engine's ceiling is 32 / 2.27 ms = 14.1k tok/s;
how close the streams' summed rates come to it is what the serving layer leaves of the engine. Nothing here asserts a
speed.
"""

from __future__ import annotations

import argparse
import ctypes
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from config.settings import load_settings  # noqa: E402
from models.text.batch import BatchGenerator  # noqa: E402
from models.text.tokenizer import Tokenizer  # noqa: E402


class EmulatedGPU:
    """Submissions that take step_s a step, one after another; each C call of `encode` drops the GIL."""

    def __init__(self, step_s: float, c_calls: int) -> None:
        self.step_s, self.c_calls = step_s, c_calls
        self.free_at = 0.0  # when the work queued so far is done
        self._c_call = ctypes.CDLL(None).getpid  # ctypes drops the GIL around a foreign call, as cffi does

    def submit(self, n_steps: int) -> float:
        """Encode n_steps steps, queue them; when they will be done."""
        for _ in range(n_steps * self.c_calls):
            self._c_call()
        self.free_at = max(self.free_at, time.perf_counter()) + self.step_s * n_steps
        return self.free_at


class Pending:
    """A submission's sampled tokens [n_steps, n_rows], ready once the emulated GPU has run it."""

    def __init__(self, gpu: EmulatedGPU, rng: np.random.Generator, vocab: int, n_steps: int, n_rows: int) -> None:
        self.done_at = gpu.submit(n_steps)
        self.tokens = rng.integers(1000, vocab, (n_steps, n_rows))
        self.candidates: dict[int, object] = {}

    def wait(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        time.sleep(max(0.0, self.done_at - time.perf_counter()))
        return self.tokens, {}


class Pool:
    """KV pages enough for anything; no prefix cache."""

    page_tokens = 128
    n_ctx = 4096
    n_pages = 4096
    prefix_caching = False

    def __init__(self, n_slots: int) -> None:
        self.n_slots, self.open = n_slots, 0

    @property
    def free_slots(self) -> int:
        return self.n_slots - self.open

    @property
    def free_tokens(self) -> int:
        return self.n_pages * self.page_tokens

    def pages_for(self, n_positions: int) -> int:
        return -(-n_positions // self.page_tokens)

    def pages_needed(self, slot: int, n_positions: int) -> int:
        return 0

    def held(self, pages: Sequence[int]) -> int:
        return 0

    def forget_prefixes(self) -> None:
        pass

    def lookup(self, keys: Sequence[bytes]) -> list[int]:
        return []


class Session:
    def __init__(self, pool: Pool) -> None:
        self.pool, self.n_past, self.slot = pool, 0, pool.open
        pool.open += 1

    def _check_ids(self, ids: Sequence[int]) -> None:
        pass

    def _reserve(self, n_positions: int) -> None:
        pass

    def take_cached_prefix(self, ids: Sequence[int], images: object = ()) -> int:
        return 0

    def publish(self, ids: Sequence[int], images: object = ()) -> None:
        pass

    def close(self) -> None:
        self.pool.open -= 1


class Engine:
    """The engine calls a batch generator makes for prompts and GPU-sampled decode steps."""

    def __init__(self, gpu: EmulatedGPU, vocab: int, max_batch: int) -> None:
        self.gpu, self.vocab = gpu, vocab
        self.pool = Pool(max_batch + 8)
        self.rng = np.random.default_rng(0)

    def new_session(self) -> Session:
        return Session(self.pool)

    def submit_prefill(self, session: Session, ids: Sequence[int], *args: Any, **kwargs: Any) -> Pending:
        session.n_past += len(ids)
        return Pending(self.gpu, self.rng, self.vocab, 1, 1)

    def submit_last_chunks(self, rows: Sequence[Any]) -> Pending:
        for row in rows:
            row.session.n_past += len(row.ids)
        return Pending(self.gpu, self.rng, self.vocab, 1, len(rows))

    def submit_decode(self, rows: Sequence[Any], n_steps: int = 1) -> Pending:
        for row in rows:
            row.session.n_past += n_steps
        return Pending(self.gpu, self.rng, self.vocab, n_steps, len(rows))


class NullModel:
    """What the chat worker needs of a model, over the emulated engine."""

    context_length = Pool.n_ctx
    embedding_size = 640

    def __init__(self, tokenizer: Tokenizer, gpu: EmulatedGPU, max_batch: int) -> None:
        self.tokenizer, self.gpu, self.max_batch = tokenizer, gpu, max_batch
        self.vocab_size = tokenizer.vocab_size

    def new_session(self) -> Session:
        return Session(Pool(1))

    def generator(self, **kwargs: Any) -> BatchGenerator:
        engine = Engine(self.gpu, self.vocab_size, self.max_batch)
        return BatchGenerator(self, engine=engine, overlap_rounds=True, **kwargs)  # type: ignore[arg-type]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=8099)
    parser.add_argument("--step-ms", type=float, default=2.27, help="emulated GPU time of a decode step (2.27)")
    parser.add_argument("--c-calls", type=int, default=400, help="GIL-dropping C calls a step records (400)")
    parser.add_argument("--vocabulary", default="gemma-3-270m",
                        help="a GGUF whose tokenizer the tokens come from (default: the shipped Gemma 3 270M)")
    parser.add_argument("--max-batch", type=int, default=32)
    args = parser.parse_args()

    import uvicorn
    from gguf import GGUFReader

    from models.text.engine import resolve_model_path
    from server.app import create_app

    tokenizer = Tokenizer.from_gguf(GGUFReader(resolve_model_path(args.vocabulary)))
    gpu = EmulatedGPU(args.step_ms / 1e3, args.c_calls)
    model = NullModel(tokenizer, gpu, args.max_batch)
    app = create_app(load_settings(), loader=lambda source, **kwargs: model, warm_up=False)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
