"""The tensors through which the host talks to a text model's step programs.

Every step program of a model (all prefill and decode buckets) binds the same input tensors,
so the host writes a step's inputs once whichever program runs it:

    ids          u32 [T]       token ids of the step's rows (prompt tokens)
    rows         u32 [T, 4]    row table: (position, slot, token source, 0) per row (gpu/kernels/common/rows.wgsl)
    out_rows     u32 [R]       the token row of each output row (the last token of each sequence)
    slot_tokens  u32 [slots]   each sequence's last GPU-sampled token: decode rows read their input here
    images       f32 [T, D]    input embeddings of image rows (token source 2): row t for the step's row t

and each output width R (a program's r_max) has its own outputs, so a sampler or a readback
touches only R rows of V logits. A StepIO made by sharing_slot_tokens has inputs and outputs of its own but the
same slot_tokens: the split decode steps of constrained rows keep their rows and logits there while other steps
run (models/text/engine.py's submit_logits):

    logits       f32 [R, V]
    sampling     u32 [R, 4]    per output row: (bits of f32 1/temperature (0 = greedy), seed, position, masked)
    token_mask   u32 [R, W]    per output row: the tokens a constrained row may take, one bit each (W = V / 32)
    sampled      u32 [R]       the token the GPU picked for each output row
    candidates   u32 [R, C], f32 [R, C], f32 [R, 2]: each row's C best logits and softmax statistics, for
                 the rows the CPU samples from (top-k, top-p, min-p, logprobs) without reading V logits
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from gpu.ops import transformer as ops
from gpu.ops.sampling import gumbel_sample, mask_logits, mask_words
from gpu.program import Executor, PendingResult, ProgramBuilder
from gpu.tensor import Tensor
from models.text.sampler import Candidates

if TYPE_CHECKING:
    from models.text.engine import Session

CANDIDATES = 64  # best logits read back per CPU-sampled row (a power of two, at most 256)
PREFILL_BUCKETS = (16, 64, 256, 512)  # token rows of the prefill programs; longer prompts go in chunks


@dataclass(frozen=True)
class StepOutputs:
    """The output tensors of the programs with one output width R (module docstring)."""

    logits: Tensor
    sampling: Tensor
    sampled: Tensor
    candidate_ids: Tensor
    candidate_logits: Tensor
    candidate_stats: Tensor
    token_mask: Tensor


class StepIO:
    """A model's step inputs (shared by all its programs) and its outputs per output width (module docstring)."""

    def __init__(self, executor: Executor, name: str, max_tokens: int, max_out: int, n_slots: int,
                 vocab_size: int, slot_tokens: Tensor | None = None, embedding_size: int = 0) -> None:
        """slot_tokens: another StepIO's, for programs whose sampled tokens the others' steps read (see
        sharing_slot_tokens); else its own. embedding_size: the model's D, for an images input (0: none, and
        no row may take its input from images)."""
        self.executor = executor
        self.name = name
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self.max_out = max_out
        self.ids = executor.tensor(f"{name}.ids", (max_tokens,), "u32")
        self.rows = executor.tensor(f"{name}.rows", (max_tokens, 4), "u32")
        self.out_rows = executor.tensor(f"{name}.out_rows", (max_out,), "u32")
        if slot_tokens is None:
            slot_tokens = executor.tensor(f"{name}.slot_tokens", (n_slots,), "u32")
        self.slot_tokens = slot_tokens
        self.images = (executor.tensor(f"{name}.images", (max_tokens, embedding_size)) if embedding_size
                       else None)
        self.n_slots = n_slots
        self._outputs: dict[int, StepOutputs] = {}

    def sharing_slot_tokens(self, name: str, max_tokens: int) -> StepIO:
        """A StepIO of its own (inputs of up to max_tokens rows, outputs) but for slot_tokens, which it shares
        with this one: its programs' sampled tokens are the next inputs of this one's, and the other way round."""
        return StepIO(self.executor, name, max_tokens, self.max_out, self.n_slots, self.vocab_size, self.slot_tokens)

    def outputs(self, r_max: int) -> StepOutputs:
        """The output tensors of programs with r_max output rows (made on first use)."""
        if r_max not in self._outputs:
            tag = f"{self.name}.r{r_max}"
            e = self.executor
            self._outputs[r_max] = StepOutputs(
                e.tensor(f"{tag}.logits", (r_max, self.vocab_size)),
                e.tensor(f"{tag}.sampling", (r_max, 4), "u32"),
                e.tensor(f"{tag}.sampled", (r_max,), "u32"),
                e.tensor(f"{tag}.candidate_ids", (r_max, CANDIDATES), "u32"),
                e.tensor(f"{tag}.candidate_logits", (r_max, CANDIDATES)),
                e.tensor(f"{tag}.candidate_stats", (r_max, 2)),
                e.tensor(f"{tag}.token_mask", (r_max, mask_words(self.vocab_size)), "u32"),
            )
        return self._outputs[r_max]


def sample_tokens(b: ProgramBuilder, io: StepIO, r_max: int, masked: bool) -> None:
    """The end of a step: each output row's token drawn from its logits (after its token mask where masked and the
    row is flagged constrained) and kept as its sequence's next input (slot_tokens)."""
    out = io.outputs(r_max)
    if masked:
        mask_logits(b, out.logits, out.sampling, out.token_mask)
    gumbel_sample(b, out.logits, out.sampling, out.sampled)
    ops.store_tokens(b, out.sampled, io.out_rows, io.rows, io.slot_tokens)


@dataclass(frozen=True)
class GpuSampling:
    """How the GPU picks a row's next token: the argmax (temperature 0) or an exact draw from
    softmax(logits / temperature) by the Gumbel-max trick, its noise keyed by (seed, position)
    so a seeded request gives the same tokens however the server batches it."""

    temperature: float = 0.0
    seed: int = 0

    def words(self, position: int, masked: bool = False) -> tuple[int, int, int, int]:
        inv_t = 0.0 if self.temperature == 0 else 1.0 / self.temperature
        # (1/temperature bits, Philox key low word = seed, high word = the first sampled position, whether the
        # row's token mask applies); the step counts 0, 1, ... within a submission
        # (gpu/kernels/sample/gumbel_partial.wgsl, gpu/kernels/mask_logits.wgsl)
        return (int(np.float32(inv_t).view(np.uint32)), self.seed & 0xFFFFFFFF, position, int(masked))


@dataclass
class DecodeRow:
    """One sequence's row in a batched decode submission."""

    session: Session
    token: int | None = None  # the input token; None: the token the GPU sampled last for this sequence
    sampling: GpuSampling = field(default_factory=GpuSampling)
    read_logits: bool = False  # copy this row's logits back (single-step submissions only)
    read_candidates: bool = False  # its CANDIDATES best logits and softmax statistics instead (idem)
    # Constrained decoding (single-step submissions only): the tokens the row may take, u32 [ceil(V / 32)] bits.
    # Set when the submission is recorded, or later, up to RecordedDecode.submit().
    mask: np.ndarray | None = None
    constrained: bool = False  # whether the row has a mask (known when the submission is recorded)


@dataclass
class ChunkRow:
    """One sequence's last prompt chunk in a batched submission (Engine.submit_last_chunks): the token after it is
    sampled."""

    session: Session
    ids: list[int]
    sampling: GpuSampling = field(default_factory=GpuSampling)
    read_logits: bool = False
    read_candidates: bool = False
    mask: np.ndarray | None = None  # the tokens the one after the chunk may be, u32 [ceil(V / 32)] bits


class PendingStep:
    """A submitted step (or run of decode steps); wait() gives the sampled tokens and any logits,
    `candidates` then holds the rows' candidates that were asked for."""

    def __init__(self, pending: PendingResult, n_steps: int, n_rows: int, logit_rows: list[int],
                 candidate_rows: list[int] | None = None) -> None:
        self._pending, self.n_steps, self.n_rows, self.logit_rows = pending, n_steps, n_rows, logit_rows
        self.candidate_rows = candidate_rows or []
        self._result: tuple[np.ndarray, dict[int, np.ndarray]] | None = None
        self.candidates: dict[int, Candidates] = {}

    def wait(self) -> tuple[np.ndarray, dict[int, np.ndarray]]:
        """(tokens [n_steps, n_rows] the GPU sampled, {row: logits [V]} of the rows that asked)."""
        if self._result is None:
            arrays = self._pending.wait()
            if not arrays:  # a submission that reads nothing back
                self._result = (np.zeros((0, self.n_rows), np.int64), {})
                return self._result
            tokens = arrays[0].reshape(-1)[: self.n_steps * self.n_rows].reshape(self.n_steps, self.n_rows)
            n_logits = len(self.logit_rows)
            self._result = (tokens.astype(np.int64), dict(zip(self.logit_rows, arrays[1:1 + n_logits], strict=True)))
            if self.candidate_rows:
                ids, logits, stats = arrays[1 + n_logits:]
                ids, logits, stats = ids.reshape(-1, CANDIDATES), logits.reshape(-1, CANDIDATES), stats.reshape(-1, 2)
                self.candidates = {row: Candidates(ids[row].astype(np.int64), logits[row], float(stats[row, 0]),
                                                   float(stats[row, 1])) for row in self.candidate_rows}
        return self._result
