"""A decoder block's parts as a model describes them, with the fusion and int8 choices made here.

A model file says what its network computes (the residual add and the next norm, attention with its q/k norms
and rope, a gated feed-forward); these functions pick how: one product for matrices with the same input, a
stacked matvec for two of them, the residual norm folded into the matvec that reads it (NormedInput) on decode
steps, or, on models too wide for that, made by the matvec that writes the block's output (PrenormedInput), inputs
written as int8 blocks where an int8 product reads them (QuantisedActivation), the k-split parts of a prompt's
matmul added by the residual norm that reads them (SplitSums), attention normalising and rotating its own q and k
on decode steps (RawQKV). The predicates that decide live in gpu/ops/matmul.py.

`fusable` (Residual): whether a network's block boundaries may take the fused forms at all. One whose block
output is more than a post-normed residual add (a layer output scale, a per-layer input) runs its blocks through
plain dispatches: one product per fused matrix, whole linear outputs, f32 block inputs except an int8 gate-up's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gpu.kv_cache import KVPool
from gpu.ops import transformer as ops
from gpu.ops.attention_prompt import attention_prompt
from gpu.ops.encoder import bias_add
from gpu.ops.matmul import (
    NormedInput,
    PrenormedInput,
    QuantisedActivation,
    folds_norms,
    linear,
    linear_glu,
    linear_output,
    linear_residual,
    linear_stacked,
    prenorms_inputs,
    quantised_activation,
    quantises_ffn_input,
    quantises_glu_output,
    quantises_prompt_input,
    stacks_in_one_matvec,
)
from gpu.ops.rows import sigmoid_gate
from gpu.ops.split_sums import SplitSums
from gpu.ops.transformer import RawQKV
from gpu.program import ProgramBuilder
from gpu.tensor import Tensor
from gpu.weights import QuantWeight

BlockInput = Tensor | NormedInput | PrenormedInput | QuantisedActivation  # a block's normalised input, as read
Columns = list[tuple[Tensor, int]]  # each projection's output tensor and first column


@dataclass(frozen=True)
class DeferredOutput:
    """A block's output product (o, down) not yet recorded: the residual add that reads it records it, as a matvec
    that adds its rows to the residual and makes the next norm's input (linear_residual) where that applies, else
    as a plain linear."""

    weight: QuantWeight
    a: Tensor
    name: str


BlockOutput = Tensor | SplitSums | DeferredOutput  # a block's output product, as the residual add reads it


class FusedWeight(Protocol):
    """What the block functions need of a fused matrix (models/formats/weights.py's Fused): the weight and each part's
    first row."""

    @property
    def weight(self) -> QuantWeight: ...

    @property
    def parts(self) -> list[int]: ...


def projections(b: ProgramBuilder, fused: Sequence[FusedWeight], x: BlockInput, t_max: int, name: str, *,
                stack: bool = True) -> Columns:
    """x times each fused matrix; each projection as (output tensor, first column). stack: two matrices of
    different types that one matvec takes together (a Q4_K q|k and a Q6_K v) share one dispatch and output."""
    if (stack and len(fused) == 2 and not isinstance(x, QuantisedActivation)
            and stacks_in_one_matvec(b, fused[0].weight, fused[1].weight, t_max)):
        first, second = fused
        y = b.activation(f"{name}.stacked", (t_max, first.weight.n + second.weight.n))
        linear_stacked(b, first.weight, second.weight, x, y, t_max)
        return [(y, start) for start in first.parts] + [(y, first.weight.n + start) for start in second.parts]
    columns: Columns = []
    for j, f in enumerate(fused):
        y = b.activation(f"{name}.{j}", (t_max, f.weight.n))
        linear(b, f.weight, x, y, t_max)
        columns += [(y, start) for start in f.parts]
    return columns


class Residual:
    """The residual stream x of a step, and the forms its post-norm adds and the next pre-norms take.

    On one-token steps of wide models without post-norms, the output matvec adds its rows to x in place and makes
    the next input (prenorm: output() defers the product to add_norm). Elsewhere, where norms fold (decode steps on
    a GPU: each consumer matvec normalises its input itself), x alternates between buffers, one per add.
    post_norms: the blocks normalise their outputs before adding them (Gemma's post-norms), which the output
    matvec cannot."""

    def __init__(self, b: ProgramBuilder, x: Tensor, eps: float, t_max: int, *, fusable: bool,
                 post_norms: bool = False) -> None:
        self.b, self.x, self.eps, self.t_max = b, x, eps, t_max
        self.fusable = fusable
        self.prenorm = fusable and not post_norms and prenorms_inputs(b, x.shape[1], t_max)
        self.fold = fusable and not self.prenorm and folds_norms(b, x.shape[1], t_max)

    def gather(self, x: Tensor, t_max: int) -> None:
        """Continue on other rows (x: the stream's rows gathered into a tensor of t_max rows)."""
        self.x, self.t_max = x, t_max

    def output(self, weight: QuantWeight, a: Tensor, name: str) -> BlockOutput:
        """a's product with a block's output matrix (o, down), as the residual norm that adds it reads it: recorded
        now, or by add_norm where the product can make the next input itself (DeferredOutput)."""
        if self.prenorm and len(weight.shards) == 1 and weight.n == self.x.shape[1]:
            return DeferredOutput(weight, a, name)
        if self.fusable:
            return linear_output(self.b, weight, a, name, self.t_max)
        y = self.b.activation(name, (self.t_max, weight.n))
        linear(self.b, weight, a, y, self.t_max)
        return y

    def recorded(self, y: BlockOutput) -> Tensor | SplitSums:
        """A block output as a plain product (a DeferredOutput recorded now)."""
        if isinstance(y, DeferredOutput):
            return linear_output(self.b, y.weight, y.a, y.name, self.t_max)
        return y

    def add_norm(self, y: BlockOutput, post_norm: Tensor | None, next_norm: Tensor,
                 consumers: Sequence[FusedWeight], name: str, *, gated: bool = False) -> BlockInput:
        """x += rms_norm(y) * post_norm (x += y without a post_norm); the next part's input rms_norm(x) * next_norm,
        for its matrices (consumers; gated: a gate-up whose GLU reads it)."""
        if isinstance(y, DeferredOutput) and post_norm is None:  # the add and the next input in y's epilogue
            return linear_residual(self.b, y.weight, y.a, self.x, next_norm, self.eps, name, self.t_max)
        y = self.recorded(y)
        b, t, d = self.b, self.t_max, self.x.shape[1]
        weights = [f.weight for f in consumers]
        if gated:  # int8 for a gate-up where no f32 gate-up can normalise its input itself (the fold is faster)
            quantised = len(weights) == 1 and (
                (self.fusable and quantises_prompt_input(b, weights, t))
                or (not self.fold and quantises_ffn_input(b, weights[0], t)))
        else:
            quantised = not self.fold and self.fusable and quantises_prompt_input(b, weights, t)
        h: Tensor | QuantisedActivation
        if quantised:  # normalised and quantised once for the int8 products that read it
            h = quantised_activation(b, name, t, d)
        elif self.fold:
            assert isinstance(y, Tensor)  # decode matvecs split no k
            x_next = b.activation(f"{name}.x", (t, d))
            normed = NormedInput(y, post_norm, self.x, next_norm, x_next, self.eps)
            self.x = x_next
            return normed
        else:
            h = b.activation(name, (t, d))
        ops.residual_norm(b, y, post_norm, self.x, next_norm, h, self.eps)
        return h

    def add_norm_rows(self, y: BlockOutput, post_norm: Tensor | None, next_norm: Tensor,
                      out_rows: Tensor, r_max: int, name: str) -> Tensor:
        """x += rms_norm(y) * post_norm (or y), then rms_norm(x) * next_norm of the rows out_rows lists only (before the
        output head)."""
        y = self.recorded(y)
        h = self.b.activation(name, (r_max, self.x.shape[1]))
        ops.residual_norm(self.b, y, post_norm, self.x, next_norm, h, self.eps, out_rows=out_rows)
        return h


def attention(
    b: ProgramBuilder, qkv: Sequence[FusedWeight], x: BlockInput, q_norm: Tensor, k_norm: Tensor | None,
    rope: Tensor, pool: KVPool, cache: int, rows: Tensor, t_max: int, name: str, *, prompt: bool, heads: int,
    kv_heads: int, head_dim: int, window: int, scale: float, eps: float, v_norm: bool = False, stack: bool = True,
    qk_norm: bool = True, biases: Sequence[Tensor | None] = (), softcap: float = 0.0, output_gate: bool = False,
    later_keys: bool = True,
) -> Tensor:
    """Self-attention of a block [T, heads * head_dim]: q = rope(rms_norm(x Wq) * q_norm); unless the layer reads
    another layer's cache (k_norm None: q alone among the projections), k = rope(rms_norm(x Wk) * k_norm) and
    v = x Wv (or k before its norm and rope when the projections hold q and k only), rms-normalised without a
    weight where v_norm, stored in the pool's cache `cache` at each row's position; then attention over that
    cache, causal, within window keys (0: all). prompt: rows of prompt chunks (on a GPU the blocked prompt kernel),
    else decode rows (flash-decoding splits). qk_norm False: q and k are rotated without their norms (q_norm and
    k_norm are not read). biases: each fused matrix's bias (q|k|v biases, as its rows), added to its product.
    softcap: attention logits capped (Gemma 2), 0 for none. output_gate: the projections' fourth part is a per-head
    gate, and each head's output is scaled by its sigmoid (Qwen3.5). later_keys False: an image's rows stay causal
    here even where the row table lets them see the image's rest (Gemma 4's full layers).
    """
    cols = projections(b, qkv, x, t_max, f"qkv.{name}", stack=stack and not any(bias is not None for bias in biases))
    if any(bias is not None for bias in biases):  # one product per fused matrix: its first column's tensor
        outputs = [tensor for tensor, start in cols if start == 0]
        for y, bias in zip(outputs, biases, strict=True):
            if bias is not None:
                bias_add(b, y, bias)
    queries: Tensor | RawQKV
    if k_norm is None:  # q alone: norm and rope in place
        if not qk_norm:
            raise ValueError("a layer reading another layer's cache needs its q norm")
        queries = cols[0][0]
        ops.norm_rope(b, queries, q_norm, rope, rows, heads, eps)
    else:
        q, k = cols[0], cols[1]
        v = cols[2] if len(cols) > 2 else k
        # decode rows on a GPU: attention's prologue normalises and rotates them (no row needs another row's new
        # key); it has no v norm
        if not prompt and not b.device.is_software and not v_norm:
            queries = RawQKV(q, k, v, q_norm, k_norm, rope, eps, qk_norm)
        else:
            queries = b.activation(f"q.{name}", (t_max, heads * head_dim))
            ops.qk_norm_rope_store(b, q, k, v, q_norm, k_norm, rope, pool, cache, rows, queries, heads=heads,
                                   kv_heads=kv_heads, eps=eps, v_norm=v_norm, qk_norm=qk_norm)
    a = b.activation(f"attn.{name}", (t_max, heads * head_dim))
    # prompt rows on a GPU: the blocked prompt kernel; a software adapter's rows, prompt or decode, go through
    # attention_key_lanes (ops.attention's default there)
    attend = attention_prompt if prompt and not b.device.is_software else ops.attention
    attend(b, queries, pool, cache, rows, a, heads=heads, kv_heads=kv_heads, head_dim=head_dim, window=window,
           scale=scale, softcap=softcap, later_keys=later_keys)
    if output_gate:
        gate, column = cols[3]
        sigmoid_gate(b, a, gate, heads=heads, head_dim=head_dim, g_offset=column)
    return a


def gated_feed_forward(b: ProgramBuilder, gate_up: Sequence[FusedWeight], down: QuantWeight, x: BlockInput,
                       residual: Residual, name: str, activation: str = "gelu_tanh") -> BlockOutput:
    """(activation(x Wgate) * x Wup) Wdown: gate and up in one GLU product where they are one matrix, the GLU's
    output kept as int8 blocks where an int8 down reads it. activation: gelu_tanh (GeGLU) or silu (SwiGLU)."""
    t, width = residual.t_max, down.k
    act: Tensor | QuantisedActivation
    if len(gate_up) == 1 and quantises_glu_output(b, gate_up[0].weight, down, t, isinstance(x, NormedInput)):
        act = quantised_activation(b, f"act.{name}", t, width)
    else:
        act = b.activation(f"act.{name}", (t, width))
    if len(gate_up) == 1:
        linear_glu(b, gate_up[0].weight, x, act, t, activation=activation)
    else:
        (gate, _), (up, _) = projections(b, gate_up, x, t, f"gate_up.{name}", stack=residual.fusable)
        assert isinstance(act, Tensor)
        ops.glu_mul(b, gate, up, act, activation)
    return residual.output(down, act, f"down.{name}")
