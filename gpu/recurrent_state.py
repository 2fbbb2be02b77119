"""Per-sequence recurrent state beside the paged KV cache: what the recurrent layers of a hybrid network (LFM2's
short convolutions, Gated DeltaNet's linear attention) carry from one step of a sequence to the next.

Attention layers keep every past key and value, so their memory grows with a sequence and lives in KV pages. A
recurrent layer keeps a fixed amount per sequence, whatever its length:
- a conv state: the last kernel - 1 inputs of its causal depthwise convolution, per channel;
- optionally a matrix state (DeltaNet's [heads, key dim, value dim] memory).
So the pool holds, per recurrent layer, one row of each for every sequence slot of the KV pool, indexed by the
same slot: a sequence's state is allocated when it opens its slot (admission) and freed when it closes it
(finish, cancellation, preemption), with no pages to manage.

A state is never cleared by a write. The kernels treat it as empty at a sequence's start instead: a step whose
first row of a sequence is at position 0 reads zeros, not the slot's row (kernels/causal_short_conv.wgsl). So a
slot handed to a new sequence, a session reset to position 0, and a preempted sequence prefilling again from its
start all begin from the empty state, as the KV cache's positions are simply overwritten.

Rows are f32: the state is small (LFM2 350M: 2 x 1024 values a layer) and is read and written every step, so its
rounding would accumulate over a sequence where the KV cache's does not.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu.program import Executor
from gpu.tensor import Tensor


@dataclass(frozen=True)
class RecurrentLayerState:
    """The state shapes of one recurrent layer, per sequence."""

    channels: int  # C: convolution channels
    kernel: int  # K: the convolution's taps (the state keeps K - 1 inputs per channel)
    matrix: tuple[int, ...] = ()  # the matrix state's shape (DeltaNet: heads, key dim, value dim); () = none


class RecurrentStatePool:
    """Per recurrent layer a conv state [slots, K - 1, C] (oldest input first) and, where the layer has one, a matrix
    state [slots, *matrix], f32, one row per slot of the KV pool it sits beside."""

    def __init__(self, executor: Executor, name: str, layers: list[RecurrentLayerState], n_slots: int) -> None:
        """layers: the shapes of each recurrent layer, in layer order (a layer's index here is its state index)."""
        for layer in layers:
            if layer.kernel < 2:
                raise ValueError(f"a causal convolution state needs a kernel of at least 2 taps, not {layer.kernel}")
        self.layers = layers
        self.n_slots = n_slots
        self.conv = [executor.tensor(f"{name}.conv{i}", (n_slots, layer.kernel - 1, layer.channels))
                     for i, layer in enumerate(layers)]
        self.matrix: list[Tensor | None] = [
            executor.tensor(f"{name}.matrix{i}", (n_slots, *layer.matrix)) if layer.matrix else None
            for i, layer in enumerate(layers)]

    @property
    def nbytes(self) -> int:
        return sum(t.nbytes for t in self.conv) + sum(t.nbytes for t in self.matrix if t is not None)
