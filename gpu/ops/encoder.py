"""Host side of the encoder kernels (embedding models): each function adds one dispatch to a program.

An encoder step runs a batch of sequences of uneven lengths packed row after row, with no padding:
T is the program's maximum token rows per step (T_MAX) and kernels skip rows past the step's
n_tokens. Each token row knows its sequence's rows through a span table (u32 [T, 2]: first row,
end row), which is the attention's padding mask; pooling reads a sequence table (u32 [B, 2]).
Linear layers are gpu/ops/matmul.py's `linear` (W x only): biases are added here.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from gpu.ops.matmul import linear
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor
from gpu.weights import QuantWeight

ELEMENTWISE_GROUP = 256  # invocations per workgroup of the elementwise kernels
ROWS_PER_GROUP = 64  # (token, head) rows per workgroup of encoder_attention.wgsl
CONV2D_MAX_CHANNELS = 512  # MAX_C of kernels/conv2d_norm.wgsl
LOCAL_ATTENTION_MAX_WINDOW = 32  # MAX_W of kernels/attention_local_relative.wgsl
POOLING_MODES = {"mean": 0, "cls": 1, "last": 2, "max": 3, "mean_sqrt_len": 4}  # MODE of kernels/pool.wgsl


def _check(t: Tensor, width: int, what: str, dtype: str = "f32") -> None:
    if t.dtype != dtype or len(t.shape) != 2 or t.shape[1] != width:
        raise ValueError(f"{what} {t} must be {dtype} [rows, {width}]")


def layer_norm(
    b: ProgramBuilder, x: Tensor, gamma: Tensor, out: Tensor, eps: float, *, beta: Tensor | None = None,
    bias: Tensor | None = None, residual: Tensor | None = None, rms: bool = False, accumulate: bool = False,
    subgroups: bool | None = None,
) -> None:
    """out = norm(x + bias + residual) * gamma (+ beta) per token row (kernels/layer_norm.wgsl).

    LayerNorm (mean and biased variance, then beta) unless rms (RMSNorm, no beta). bias: [D],
    added to every row (the previous linear's bias); residual: [T, D]; accumulate: out += ...
    """
    d = gamma.numel
    _check(x, d, "x")
    _check(out, d, "out")
    if residual is not None:
        _check(residual, d, "residual")
    if not rms and beta is None:
        raise ValueError("LayerNorm needs beta")
    constants = {"D": d, "EPS": eps, "RMS": rms, "HAS_BIAS": bias is not None, "HAS_RESIDUAL": residual is not None,
                 "ACCUMULATE": accumulate, "REDUCE": b.device.reduction(subgroups)}
    # Unread bindings are bound to tensors of the right kind: the kernel keeps them in its layout.
    tensors = [b.step, x, bias or gamma, residual or x, gamma, beta or gamma, out]
    b.dispatch("layer_norm", constants, tensors, workgroup_grid(x.shape[0]))


def bias_add(b: ProgramBuilder, x: Tensor, bias: Tensor) -> None:
    """x += bias on every token row, in place (kernels/bias_add.wgsl)."""
    width = bias.numel
    _check(x, width, "x")
    b.dispatch("bias_add", {"D": width}, [b.step, x, bias],
               workgroup_grid(math.ceil(x.shape[0] * width / ELEMENTWISE_GROUP)))


def qkv_projection(b: ProgramBuilder, weights: Sequence[QuantWeight], biases: Sequence[Tensor], x: Tensor,
                   rows: int, layer: int, *, int8: bool | None = None,
                   ) -> tuple[Tensor, Tensor, Tensor, tuple[int, int, int]]:
    """An encoder layer's q, k, v = x W + b ([rows, D] each): one product into [rows, 3D] where the loader fused
    the three matrices (weights and biases of one), else three; with q's, k's and v's column offsets in the tensors
    returned (attention's `offsets`). int8: as `linear`'s (None: the executor's choice)."""
    d = weights[-1].n // (3 if len(weights) == 1 else 1)
    if len(weights) == 1:
        qkv = b.activation(f"qkv{layer}", (rows, 3 * d))
        linear(b, weights[0], x, qkv, rows, int8=int8)
        bias_add(b, qkv, biases[0])
        return qkv, qkv, qkv, (0, d, 2 * d)
    q, k, v = (b.activation(f"{name}{layer}", (rows, d)) for name in "qkv")
    for weight, bias, y in zip(weights, biases, (q, k, v), strict=True):
        linear(b, weight, x, y, rows, int8=int8)
        bias_add(b, y, bias)
    return q, k, v, (0, 0, 0)


def clamp(b: ProgramBuilder, x: Tensor, out: Tensor, lo: float, hi: float) -> None:
    """out = min(max(x, lo), hi) on the step's rows (kernels/clamp.wgsl); lo and hi are pipeline constants."""
    width = x.shape[1]
    _check(out, width, "out")
    if not lo <= hi:
        raise ValueError(f"clamp bounds [{lo}, {hi}] are empty")
    b.dispatch("clamp", {"D": width, "LO": lo, "HI": hi}, [b.step, x, out],
               workgroup_grid(math.ceil(x.shape[0] * width / ELEMENTWISE_GROUP)))


def gelu(
    b: ProgramBuilder, x: Tensor, out: Tensor, *, bias: Tensor | None = None, up: Tensor | None = None,
    tanh: bool = False,
) -> None:
    """out = gelu(x + bias) * up (kernels/gelu.wgsl): exact erf GELU unless tanh; bias and up optional."""
    width = x.shape[1]
    _check(out, width, "out")
    if up is not None:
        _check(up, width, "up")
    constants = {"D": width, "TANH": tanh, "HAS_BIAS": bias is not None, "GATED": up is not None}
    b.dispatch("gelu", constants, [b.step, x, bias or x, up or x, out],
               workgroup_grid(math.ceil(x.shape[0] * width / ELEMENTWISE_GROUP)))


def attention(
    b: ProgramBuilder, q: Tensor, k: Tensor, v: Tensor, spans: Tensor, out: Tensor, *, heads: int, kv_heads: int,
    head_dim: int, scale: float, offsets: tuple[int, int, int] = (0, 0, 0), window: int = 0,
) -> None:
    """Bidirectional attention of each token over its own sequence (kernels/encoder_attention.wgsl).

    q, k, v: [T, width] tensors (the same fused tensor three times with offsets, for a fused QKV);
    head h of a row starts at offsets[i] + h * head_dim. spans: u32 [T, 2] (first row, end row) of
    each token's sequence. window > 0: keys at most that many rows away (sliding layers).
    out: [T, heads * head_dim].
    """
    if head_dim % 4 or heads % kv_heads:
        raise ValueError(f"attention needs head_dim % 4 == 0 and heads % kv_heads == 0 ({head_dim}, {heads})")
    for offset, t in zip(offsets, (q, k, v)):
        if offset % 4 or t.shape[1] % 4:
            raise ValueError(f"{t}: row width and head offset {offset} must be multiples of 4")
    _check(spans, 2, "spans", "u32")
    _check(out, heads * head_dim, "out")
    constants = {
        "D": head_dim, "HEADS": heads, "KV_HEADS": kv_heads, "SCALE": scale, "WINDOW": window,
        "Q_STRIDE": q.shape[1], "Q_OFFSET": offsets[0], "K_STRIDE": k.shape[1], "K_OFFSET": offsets[1],
        "V_STRIDE": v.shape[1], "V_OFFSET": offsets[2],
    }
    rows = q.shape[0] * heads
    b.dispatch("encoder_attention", constants, [b.step, q, k, v, spans, out],
               workgroup_grid(math.ceil(rows / ROWS_PER_GROUP)))


def qk_norm_rope(
    b: ProgramBuilder, q: Tensor, k: Tensor, q_weight: Tensor, k_weight: Tensor, positions: Tensor, rope: Tensor, *,
    heads: int, kv_heads: int, eps: float, subgroups: bool | None = None,
) -> None:
    """In place: each head of q and k RMS-normalised (times its weight), then rotated by RoPE at the
    token's position (kernels/encoder_qk_norm_rope.wgsl). rope: [positions, head_dim] cos | sin."""
    d = q_weight.numel
    _check(q, heads * d, "q")
    _check(k, kv_heads * d, "k")
    _check(rope, d, "rope")
    constants = {"D": d, "HEADS": heads, "KV_HEADS": kv_heads, "EPS": eps, "REDUCE": b.device.reduction(subgroups)}
    b.dispatch("encoder_qk_norm_rope", constants, [b.step, q, k, q_weight, k_weight, positions, rope],
               workgroup_grid(q.shape[0] * (heads + kv_heads)))


def pool(b: ProgramBuilder, h: Tensor, seqs: Tensor, out: Tensor, mode: str) -> None:
    """out[s] = the pooled token rows of sequence s (kernels/pool.wgsl); mode: one of POOLING_MODES."""
    if mode not in POOLING_MODES:
        raise ValueError(f"pooling {mode!r} is not supported (supported: {', '.join(POOLING_MODES)})")
    d = h.shape[1]
    _check(seqs, 2, "seqs", "u32")
    _check(out, d, "out")
    b_max = seqs.shape[0]
    if out.shape[0] < b_max:
        raise ValueError(f"out {out} has fewer rows than the {b_max} sequence slots")
    b.dispatch("pool", {"D": d, "B_MAX": b_max, "MODE": POOLING_MODES[mode]}, [b.step, h, seqs, out],
               workgroup_grid(b_max))


def l2_normalize(b: ProgramBuilder, x: Tensor, *, eps: float = 1e-12, subgroups: bool | None = None) -> None:
    """x[r] /= max(||x[r]||, eps) for every row of x, in place (kernels/l2_normalize.wgsl)."""
    rows, d = x.shape
    b.dispatch("l2_normalize", {"D": d, "ROWS": rows, "EPS": eps, "REDUCE": b.device.reduction(subgroups)}, [b.step, x],
               workgroup_grid(rows))


def avg_pool2d(b: ProgramBuilder, x: Tensor, out: Tensor, *, side: int, kernel: int) -> None:
    """out = each image's side x side grid of rows of x averaged over kernel x kernel blocks
    (kernels/avg_pool2d.wgsl), for the step's n_tokens / side^2 images. x: [images * side^2, D] (grid rows in
    row-major order), out: [images * (side / kernel)^2, D]."""
    if side % kernel:
        raise ValueError(f"a grid of side {side} is not a whole number of {kernel}-blocks")
    d = x.shape[1]
    _check(out, d, "out")
    if x.shape[0] % (side * side) or out.shape[0] * kernel * kernel != x.shape[0]:
        raise ValueError(f"avg_pool2d: x {x} must hold whole {side}x{side} grids and out {out} one row per block")
    b.dispatch("avg_pool2d", {"D": d, "SIDE": side, "K": kernel}, [b.step, x, out],
               workgroup_grid(math.ceil(out.shape[0] * d / ELEMENTWISE_GROUP)))


def rope(b: ProgramBuilder, x: Tensor, table: Tensor, positions: Tensor, *, heads: int, head_dim: int,
         offset: int = 0) -> None:
    """In place: heads [offset + h * head_dim, ...) of each row of x rotated by RoPE (NeoX pairs i, i + D/2) at the
    row's position (kernels/rope.wgsl). table: [positions, head_dim / 2] (cos, sin) pairs as f32 [P, head_dim];
    positions: u32 [rows]."""
    if head_dim % 2 or x.shape[1] < offset + heads * head_dim:
        raise ValueError(f"rope: {heads} heads of {head_dim} (even) from column {offset} do not fit x {x}")
    _check(table, head_dim, "rope table")
    if positions.dtype != "u32" or positions.shape[0] < x.shape[0]:
        raise ValueError(f"rope: positions {positions} must be u32 [>= {x.shape[0]}]")
    constants = {"D": head_dim, "HEADS": heads, "STRIDE": x.shape[1], "OFFSET": offset}
    b.dispatch("rope", constants, [b.step, x, table, positions],
               workgroup_grid(math.ceil(x.shape[0] * heads * head_dim // 2 / ELEMENTWISE_GROUP)))


def group_norm(b: ProgramBuilder, x: Tensor, gamma: Tensor, beta: Tensor, out: Tensor, *, groups: int = 1,
               eps: float = 1e-5, tanh: bool = False) -> None:
    """out = GroupNorm of the step's rows of time-major x [T, C] (tanh(x) first when tanh), per-channel gamma and
    beta (kernels/group_norm.wgsl): each group's statistics over all its channels and rows."""
    c = gamma.numel
    _check(x, c, "x")
    _check(out, c, "out")
    if beta.numel != c or c % groups:
        raise ValueError(f"group_norm: {c} channels, beta of {beta.numel}, {groups} groups")
    b.dispatch("group_norm", {"C": c, "GROUPS": groups, "EPS": eps, "TANH": tanh}, [b.step, x, gamma, beta, out],
               workgroup_grid(groups))


def conv2d_norm(b: ProgramBuilder, x: Tensor, w: Tensor, gamma: Tensor, y: Tensor, lengths: Tensor, *, c_in: int,
                f_in: int, t_in_per_token: int, t_out_per_token: int, length_index: int = 0, kernel: int = 3,
                stride: int = 2, padding: int = 1, eps: float = 1e-6) -> None:
    """y = relu(LayerNorm_channels(conv2d(x))) over channels-last rows (kernels/conv2d_norm.wgsl): x
    [T_in * f_in, c_in], w [C_out, kernel, kernel, c_in] (torch's layout with the input channels moved last), gamma
    [C_out], y [T_out * F_out, C_out] (or [T_out, F_out * C_out]); T_in and T_out are the step's n_tokens times the
    per-token counts. Input time rows at or past lengths[length_index] (u32) read as zero."""
    c_out = gamma.numel
    if lengths.dtype != "u32" or lengths.numel <= length_index:
        raise ValueError(f"conv2d_norm: lengths {lengths} must be u32 with an entry {length_index}")
    if c_out > CONV2D_MAX_CHANNELS:
        raise ValueError(f"conv2d_norm: {c_out} output channels, more than {CONV2D_MAX_CHANNELS}")
    if w.numel != c_out * kernel * kernel * c_in:
        raise ValueError(f"conv2d_norm: w {w} is not [{c_out}, {kernel}, {kernel}, {c_in}]")
    f_out = (f_in + 2 * padding - kernel) // stride + 1
    _check(x, c_in, "x")
    if x.shape[0] % f_in:
        raise ValueError(f"conv2d_norm: x {x} must hold whole time rows of {f_in} columns")
    # y may also be [T_out, F_out * C_out]: the flattened rows the next linear takes, the same memory.
    if y.dtype != "f32" or len(y.shape) != 2 or y.shape[1] not in (c_out, f_out * c_out) or y.numel % (f_out * c_out):
        raise ValueError(f"conv2d_norm: y {y} must be f32 [T_out * {f_out}, {c_out}] or [T_out, {f_out * c_out}]")
    constants = {"C_IN": c_in, "C_OUT": c_out, "F_IN": f_in, "F_OUT": f_out, "K": kernel, "S": stride, "P": padding,
                 "T_IN_PER_TOKEN": t_in_per_token, "T_OUT_PER_TOKEN": t_out_per_token, "EPS": eps,
                 "LENGTH_INDEX": length_index}
    b.dispatch("conv2d_norm", constants, [b.step, x, w, gamma, lengths, y], workgroup_grid(y.numel // c_out))


def sigmoid_mul(b: ProgramBuilder, x: Tensor, out: Tensor, *, gate_offset: int = 0) -> None:
    """out[t, i] = x[t, i] * sigmoid(x[t, gate_offset + i]) (kernels/sigmoid_mul.wgsl): SiLU with gate_offset 0,
    torch's GLU on rows twice out's width with gate_offset = out's width."""
    d = out.shape[1]
    if x.dtype != "f32" or len(x.shape) != 2 or x.shape[1] < gate_offset + d:
        raise ValueError(f"sigmoid_mul: x {x} must be f32 [rows, >= {gate_offset + d}]")
    b.dispatch("sigmoid_mul", {"D": d, "X_STRIDE": x.shape[1], "G_OFF": gate_offset}, [b.step, x, out],
               workgroup_grid(math.ceil(out.shape[0] * d / ELEMENTWISE_GROUP)))


def attention_local_relative(b: ProgramBuilder, q: Tensor, k: Tensor, v: Tensor, rel: Tensor, q_scale: Tensor,
                             out: Tensor, *, heads: int, k_scale: float, cap: float) -> None:
    """Local attention over each token and the rel.shape[0] - 1 before it, with relative keys and a softcap
    (kernels/attention_local_relative.wgsl). q, k, v, out: [T, heads * head_dim]; rel: [window, heads * head_dim]
    (row m: distance m); q_scale: [head_dim]."""
    head_dim = q_scale.numel
    width = heads * head_dim
    for t, what in ((q, "q"), (k, "k"), (v, "v"), (out, "out"), (rel, "rel")):
        _check(t, width, what)
    window = rel.shape[0]
    if not 1 <= window <= LOCAL_ATTENTION_MAX_WINDOW:
        raise ValueError(f"attention_local_relative: a window of {window} keys (1 to {LOCAL_ATTENTION_MAX_WINDOW})")
    constants = {"H": heads, "HD": head_dim, "W": window, "K_SCALE": k_scale, "CAP": cap}
    b.dispatch("attention_local_relative", constants, [b.step, q, k, v, rel, q_scale, out],
               workgroup_grid(math.ceil(q.shape[0] * heads / ROWS_PER_GROUP)))
