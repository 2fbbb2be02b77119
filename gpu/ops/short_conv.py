"""Host side of the causal short convolution: its output and its state's update, in two forms.

Gated (LFM2's conv layers), causal_short_conv:
    bx = B * x                                                 # B, x, C: columns of the in-projection's output
    y[t] = C[t] * sum_j w[:, j] * bx[position(t) - (K - 1) + j]  # per channel, over each sequence's positions
    state[slot] = bx of the sequence's last K - 1 positions
Plain (Gated DeltaNet's conv over q|k|v), causal_conv: y[t] = act(sum_j w[:, j] * x[position(t) - (K - 1) + j]).

The inputs before a step's rows come from the sequence's conv state (gpu/recurrent_state.py); the same two
dispatches serve prompt chunks (many rows of one sequence), decode rows of many sequences, and a mix.
"""

from __future__ import annotations

import math

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

GROUP = 256  # invocations per workgroup of both kernels
MAX_KERNEL = 9  # taps the state kernel holds in registers (kernels/causal_short_conv_state.wgsl's MAX_K + 1)


def causal_short_conv(b: ProgramBuilder, bcx: Tensor, columns: tuple[int, int, int], weight: Tensor, state: Tensor,
                      rows: Tensor, out: Tensor, *, prompt: bool = True) -> None:
    """out = C * causal_conv(B * x) of the step's rows, then the state moved past them
    (kernels/causal_short_conv.wgsl, kernels/causal_short_conv_state.wgsl).

    bcx: [T, S] holding B, C and x from the first columns given (columns: B's, C's, x's); weight: [C, K] taps;
    state: [slots, K - 1, C] (updated in place); rows: the step's row table; out: [T, C]. prompt False: every
    sequence has one row in the step (decode), and one dispatch also moves the state on."""
    _dispatch(b, bcx, columns, weight, state, rows, out, gated=True, silu=False, prompt=prompt)


def causal_conv(b: ProgramBuilder, x: Tensor, column: int, weight: Tensor, state: Tensor, rows: Tensor, out: Tensor,
                activation: str | None = "silu", *, prompt: bool = True) -> None:
    """out = activation(causal_conv(x)) of the step's rows, then the state moved past them (the same kernels, not
    gated). x: [T, S] holding the C input channels from `column`; activation: "silu" or None; the rest as
    causal_short_conv."""
    if activation not in ("silu", None):
        raise ValueError(f"causal_conv's activation is silu or None, not {activation!r}")
    _dispatch(b, x, (column, column, column), weight, state, rows, out, gated=False, silu=activation == "silu",
              prompt=prompt)


def _dispatch(b: ProgramBuilder, bcx: Tensor, columns: tuple[int, int, int], weight: Tensor, state: Tensor,
              rows: Tensor, out: Tensor, *, gated: bool, silu: bool, prompt: bool) -> None:
    channels, kernel = weight.shape
    if not 2 <= kernel <= MAX_KERNEL:
        raise ValueError(f"causal_short_conv takes 2 to {MAX_KERNEL} taps, not {kernel}")
    if state.shape[1:] != (kernel - 1, channels):
        raise ValueError(f"a conv state of {state.shape[1:]} for {channels} channels and {kernel} taps")
    stride = bcx.shape[1]
    b_col, c_col, x_col = columns
    if max(columns) + channels > stride or out.shape[1] != channels:
        raise ValueError(f"columns {columns} of {channels} do not fit bcx {bcx.shape} / out {out.shape}")
    common = {"C": channels, "K": kernel, "STRIDE": stride, "B_COL": b_col, "X_COL": x_col, "GATED": gated}
    groups = workgroup_grid(math.ceil(bcx.shape[0] * channels / GROUP))
    b.dispatch("causal_short_conv", common | {"C_COL": c_col, "SILU": silu, "STORE": not prompt},
               [b.step, bcx, weight, state, rows, out], groups)
    if prompt:  # rows of one sequence read the state the last of them moves on: a second pass
        b.dispatch("causal_short_conv_state", common, [b.step, bcx, state, rows], groups)
