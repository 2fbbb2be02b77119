"""gpu/ops/short_conv.py against numpy: the causal short convolution's output and conv state, for a prompt in two
chunks (the second reading the state the first left), and for one step mixing a sequence's chunk, decode rows of
others (a state only partly replaced) and a new sequence on a slot whose state holds stale values (not read); gated
(LFM2: B * x in, C * conv out) and plain with SiLU (Gated DeltaNet's q|k|v conv).

Tolerance: each output is a K-term dot product of f32 products, times C: 1e-5 relative covers the order of the sums;
the state is copied values (exact).
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops.short_conv import causal_conv, causal_short_conv
from gpu.program import Executor, ProgramBuilder, StepParams

D = 40  # channels, not a multiple of the workgroup
SLOTS = 4


def _reference(bcx: np.ndarray, w: np.ndarray, history: dict[int, list[np.ndarray]], rows: np.ndarray,
               cols: tuple[int, int, int], gated: bool = True) -> np.ndarray:
    """out rows of the step; history[slot] (the inputs so far, from position 0) grows by the step's rows. Not gated:
    x in, SiLU out."""
    k = w.shape[1]
    b0, c0, x0 = cols
    out = np.zeros((len(rows), D), np.float32)
    for t, (position, slot, _, _) in enumerate(rows.astype(np.int64)):
        seq = history.setdefault(int(slot), [])
        assert len(seq) == position
        seq.append(bcx[t, b0:b0 + D] * bcx[t, x0:x0 + D] if gated else bcx[t, x0:x0 + D])
        window = [seq[q] if q >= 0 else np.zeros(D, np.float32) for q in range(position - k + 1, position + 1)]
        y = np.einsum("cj,jc->c", w, np.stack(window))
        out[t] = bcx[t, c0:c0 + D] * y if gated else y / (1 + np.exp(-y))
    return out


def _state(history: list[np.ndarray], k: int) -> np.ndarray:
    last = [history[q] if q >= 0 else np.zeros(D, np.float32) for q in range(len(history) - k + 1, len(history))]
    return np.stack(last)


def _run(ex: Executor, bcx: np.ndarray, w: np.ndarray, state: np.ndarray, rows: np.ndarray, t_max: int,
         cols: tuple[int, int, int], gated: bool = True, prompt: bool = True) -> tuple[np.ndarray, np.ndarray]:
    n = len(rows)
    padded = np.zeros((t_max, bcx.shape[1]), np.float32)
    padded[:n] = bcx
    table = np.zeros((t_max, 4), np.uint32)
    table[:n] = rows
    bt = ex.tensor("bcx", padded.shape, data=padded)
    wt = ex.tensor("w", w.shape, data=w)
    st = ex.tensor("state", state.shape, data=state)
    rt = ex.tensor("rows", table.shape, "u32", data=table)
    ot = ex.tensor("out", (t_max, D))
    b = ProgramBuilder(ex, "short_conv")
    if gated:
        causal_short_conv(b, bt, cols, wt, st, rt, ot, prompt=prompt)
    else:
        causal_conv(b, bt, cols[2], wt, st, rt, ot, activation="silu", prompt=prompt)
    out, new_state = ex.run(b.build(), StepParams(n_tokens=n, n_out=1), read=[ot, st])
    return out.reshape(t_max, D)[:n], new_state.reshape(state.shape)


@pytest.mark.parametrize("k", [3, 4])
def test_prompt_in_two_chunks(ex: Executor, k: int) -> None:
    rng = np.random.default_rng(k)
    w = rng.standard_normal((D, k)).astype(np.float32)
    cols = (0, D, 2 * D)
    state = rng.standard_normal((SLOTS, k - 1, D)).astype(np.float32)  # stale: position 0 must not read it
    history: dict[int, list[np.ndarray]] = {}
    for start, n in ((0, 7), (7, 5)):
        bcx = rng.standard_normal((n, 3 * D)).astype(np.float32)
        rows = np.array([(start + i, 2, 0, 0) for i in range(n)], np.uint32)
        expected = _reference(bcx, w, history, rows, cols)
        out, state = _run(ex, bcx, w, state, rows, 16, cols)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
        np.testing.assert_array_equal(state[2], _state(history[2], k))


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "silu"])
def test_mixed_step(ex: Executor, gated: bool) -> None:
    """Slot 3 prefills positions 5..8 on its state; slots 0 and 1 decode one row each (slot 1 at position 1: its
    state's older half is before the sequence, zero); slot 2 starts at position 0 over a stale state."""
    k = 4
    rng = np.random.default_rng(7)
    w = rng.standard_normal((D, k)).astype(np.float32)
    cols = (2 * D, 0, D)  # x, B and C in another order, and a wider row
    state = rng.standard_normal((SLOTS, k - 1, D)).astype(np.float32)
    history = {3: [rng.standard_normal(D).astype(np.float32) for _ in range(5)],
               0: [rng.standard_normal(D).astype(np.float32) for _ in range(9)],
               1: [rng.standard_normal(D).astype(np.float32)]}
    for slot, seq in history.items():
        state[slot] = _state(seq, k)
    rows = np.array([(5, 3, 0, 0), (6, 3, 0, 0), (7, 3, 0, 0), (8, 3, 0, 0), (9, 0, 1, 0), (1, 1, 1, 0),
                     (0, 2, 0, 0)], np.uint32)
    bcx = rng.standard_normal((len(rows), 3 * D + 8)).astype(np.float32)
    expected = _reference(bcx, w, history, rows, cols, gated)
    out, new_state = _run(ex, bcx, w, state, rows, 16, cols, gated)
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    for slot in range(SLOTS):
        np.testing.assert_array_equal(new_state[slot], _state(history[slot], k))


@pytest.mark.parametrize("gated", [True, False], ids=["gated", "silu"])
def test_decode_rows_move_the_state_in_one_dispatch(ex: Executor, gated: bool) -> None:
    """Decode rows, one per sequence (prompt=False: the conv kernel also writes the state), over three steps: a
    sequence far in, one at position 1 (half its state before its start) and one starting on a stale state."""
    k = 4
    rng = np.random.default_rng(11)
    w = rng.standard_normal((D, k)).astype(np.float32)
    cols = (0, D, 2 * D)
    state = rng.standard_normal((SLOTS, k - 1, D)).astype(np.float32)
    history = {0: [rng.standard_normal(D).astype(np.float32) for _ in range(9)],
               1: [rng.standard_normal(D).astype(np.float32)], 2: []}
    for slot in (0, 1):
        state[slot] = _state(history[slot], k)
    for _ in range(3):
        rows = np.array([(len(history[slot]), slot, 1, 0) for slot in (0, 1, 2)], np.uint32)
        bcx = rng.standard_normal((3, 3 * D)).astype(np.float32)
        expected = _reference(bcx, w, history, rows, cols, gated)
        out, state = _run(ex, bcx, w, state, rows, 4, cols, gated, prompt=False)
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
        for slot in (0, 1, 2):
            np.testing.assert_array_equal(state[slot], _state(history[slot], k))
