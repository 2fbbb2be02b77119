"""gpu/ops/sampling.py mask_logits against numpy: exact (it only copies -inf over masked logits).

Rows are flagged constrained or not in their sampling params; an unflagged row must come back untouched
whatever its mask holds, and only the step's n_out rows are touched. Vocabularies that are not a multiple
of 32 check the last, partial mask word.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops import sampling
from gpu.program import Executor, ProgramBuilder, StepParams


def _masked_reference(logits: np.ndarray, mask: np.ndarray, flags: np.ndarray, n_out: int) -> np.ndarray:
    v = logits.shape[1]
    allowed = np.unpackbits(mask.view(np.uint8), axis=1, bitorder="little")[:, :v].astype(bool)
    out = logits.copy()
    for r in range(n_out):
        if flags[r]:
            out[r, ~allowed[r]] = -np.inf
    return out


@pytest.mark.parametrize("v,rows,n_out", [(3001, 4, 3), (64, 2, 2), (262_144, 2, 2)])
def test_mask_logits(ex: Executor, v: int, rows: int, n_out: int) -> None:
    rng = np.random.default_rng(v)
    words = sampling.mask_words(v)
    logits = rng.standard_normal((rows, v)).astype(np.float32)
    mask = rng.integers(0, 2**32, (rows, words), dtype=np.uint64).astype(np.uint32)
    mask[0, : words // 2] = 0xFFFFFFFF  # whole words allowed: the kernel's shortcut
    mask[-1] = 0  # a row that allows nothing (unflagged below: it must stay as it is)
    flags = np.zeros(rows, np.uint32)
    flags[: rows - 1] = 1
    params = np.zeros((rows, 4), np.uint32)
    params[:, sampling.MASK_FLAG_WORD] = flags

    t_logits = ex.tensor("logits", (rows, v), data=logits)
    t_params = ex.tensor("params", (rows, 4), "u32", data=params)
    t_mask = ex.tensor("mask", (rows, words), "u32", data=mask)
    b = ProgramBuilder(ex, "mask")
    sampling.mask_logits(b, t_logits, t_params, t_mask)
    got, = ex.run(b.build(), StepParams(n_tokens=n_out, n_out=n_out), read=[t_logits])
    np.testing.assert_array_equal(got, _masked_reference(logits, mask, flags, n_out))


def test_masked_rows_sample_only_allowed_tokens(ex: Executor) -> None:
    """Masked logits then argmax and Gumbel-max (greedy and hot rows): every pick is an allowed token."""
    v, rows = 5000, 4
    rng = np.random.default_rng(1)
    logits = (rng.standard_normal((rows, v)) * 4).astype(np.float32)
    allowed = np.zeros((rows, v), bool)
    for r in range(rows):
        allowed[r, rng.choice(v, 1 + r * 7, replace=False)] = True
    mask = np.packbits(np.pad(allowed, ((0, 0), (0, sampling.mask_words(v) * 32 - v))), axis=1,
                       bitorder="little").view(np.uint32)
    params = sampling.sample_params([0.0, 1.0, 2.0, 0.5], [1, 2, 3, 4])
    params[:, sampling.MASK_FLAG_WORD] = 1
    t_logits = ex.tensor("logits", (rows, v), data=logits)
    t_params = ex.tensor("params", (rows, 4), "u32", data=params)
    t_mask = ex.tensor("mask", (rows, mask.shape[1]), "u32", data=mask)
    t_ids = ex.tensor("ids", (rows,), "u32")
    b = ProgramBuilder(ex, "mask_sample")
    sampling.mask_logits(b, t_logits, t_params, t_mask)
    sampling.gumbel_sample(b, t_logits, t_params, t_ids)
    program = b.build()
    for seed in range(20):
        ex.write(t_logits, logits)
        ids, = ex.run(program, StepParams(n_tokens=rows, n_out=rows, seed=seed), read=[t_ids])
        assert all(allowed[r, int(ids[r])] for r in range(rows)), ids
    assert int(ids[0]) == int(np.flatnonzero(allowed[0])[np.argmax(logits[0, allowed[0]])])
