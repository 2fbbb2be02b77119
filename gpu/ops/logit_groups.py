"""Host side of kernels/logit_group_summary.wgsl: what a greedy step needs from a row of logits, so the row stays
on the GPU."""

from __future__ import annotations

from gpu.program import ProgramBuilder
from gpu.tensor import Tensor


def logit_group_summary(b: ProgramBuilder, logits: Tensor, mask: Tensor, params: Tensor, out: Tensor, *, eot: int,
                        timestamp_begin: int) -> None:
    """out[12] = per group of tokens ([0, eot), eot, (eot, timestamp_begin), [params[0], params[1]]) the max logit
    of row 0 of logits, its token (as u32 bits) and the log-sum-exp, over the tokens mask allows."""
    vocab = logits.shape[1]
    b.dispatch("logit_group_summary", {"V": vocab, "EOT": eot, "TB": timestamp_begin},
               [b.step, logits, mask, params, out], (4, 1, 1))
