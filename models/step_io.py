"""The tensors through which the host talks to a text model's step programs.

Every step program of a model (all prefill and decode buckets) binds the same input tensors,
so the host writes a step's inputs once whichever program runs it:

    ids          u32 [T]       token ids of the step's rows (prompt tokens)
    rows         u32 [T, 4]    row table: (position, slot, token source, 0) per row (gpu/kernels/common/rows.wgsl)
    out_rows     u32 [R]       the token row of each output row (the last token of each sequence)
    slot_tokens  u32 [slots]   each sequence's last GPU-sampled token: decode rows read their input here

and each output width R (a program's r_max) has its own outputs, so a sampler or a readback
touches only R rows of V logits:

    logits       f32 [R, V]
    sampling     u32 [R, 4]    per output row: (bits of f32 1/temperature (0 = greedy), seed, position, 0)
    sampled      u32 [R]       the token the GPU picked for each output row
    candidates   u32 [R, C], f32 [R, C], f32 [R, 2]: each row's C best logits and softmax statistics, for
                 the rows the CPU samples from (top-k, top-p, min-p, logprobs) without reading V logits
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu.program import Executor
from gpu.tensor import Tensor

CANDIDATES = 64  # best logits read back per CPU-sampled row (a power of two, at most 256)


@dataclass(frozen=True)
class StepOutputs:
    """The output tensors of the programs with one output width R (module docstring)."""

    logits: Tensor
    sampling: Tensor
    sampled: Tensor
    candidate_ids: Tensor
    candidate_logits: Tensor
    candidate_stats: Tensor


class StepIO:
    """A model's step inputs (shared by all its programs) and its outputs per output width (module docstring)."""

    def __init__(self, executor: Executor, name: str, max_tokens: int, max_out: int, n_slots: int,
                 vocab_size: int) -> None:
        self.executor = executor
        self.name = name
        self.vocab_size = vocab_size
        self.max_tokens = max_tokens
        self.max_out = max_out
        self.ids = executor.tensor(f"{name}.ids", (max_tokens,), "u32")
        self.rows = executor.tensor(f"{name}.rows", (max_tokens, 4), "u32")
        self.out_rows = executor.tensor(f"{name}.out_rows", (max_out,), "u32")
        self.slot_tokens = executor.tensor(f"{name}.slot_tokens", (n_slots,), "u32")
        self._outputs: dict[int, StepOutputs] = {}

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
            )
        return self._outputs[r_max]
