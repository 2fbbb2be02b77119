"""Host side of Gated DeltaNet's own kernels (kernels/gated_delta_rule.wgsl, gated_delta_chunk.wgsl,
gated_delta_scan.wgsl, gated_rms_norm.wgsl): the gated delta rule and the gated output norm of a linear-attention
layer (Qwen3.5, Qwen3-Next), as transformers' Qwen3_5GatedDeltaNet computes them. The layer's short convolution over
q|k|v is gpu/ops/short_conv.py's causal_conv.

    gated_delta_rule(b, qkv, alpha, beta, ssm_a, dt_bias, rows, state, o, shape=shape, prompt=...)
    gated_rms_norm(b, o, z, norm_w, y, head_dim=shape.d_v, heads=shape.h_v)

The rule serves prompt chunks, decode rows of many sequences and mixes alike, from the step's row table
(rows[t] = (position, slot, -, -), common/rows.wgsl): each run of consecutive rows of one slot at consecutive
positions is one sequence's, in order. Its state lies in gpu/recurrent_state.py's matrix state, slot s at
s * h_v * d_k * d_v floats (head h's [d_k, d_v] matrix after it, row-major); a run starting at position 0 starts
from zeros, so slots need no clearing. Two forms, equal but for rounding: the recurrence (a row at a time; decode
steps) and the chunked form (prompt steps): blocks of CHUNK rows reduced to a few products each by the UT transform
in parallel, then a scan over the blocks carrying the state, as transformers' torch_chunk_gated_delta_rule and
FLA's kernels compute it, since the recurrence walks a long prompt one latency-bound row at a time.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

MAX_INVOCATIONS = 256  # per workgroup of gated_delta_rule.wgsl
LANE_ROWS = 8  # state values an invocation of gated_delta_rule.wgsl holds in registers, at most
STAGED_BYTES = 8192  # workgroup memory for the staged rows' q and k (half the 16 KiB every WebGPU device has)
CHUNK = 32  # rows of a block of the chunked form (its UT system, C x C, lies in workgroup memory)
SCAN_BYTES = 12288  # workgroup memory of gated_delta_scan.wgsl: its state columns and their V' rows


@dataclass(frozen=True)
class DeltaShape:
    """Head counts and sizes of a Gated DeltaNet layer (GGUF: ssm.group_count, ssm.time_step_rank,
    ssm.state_size, ssm.inner_size / time_step_rank)."""

    h_k: int  # query / key heads
    h_v: int  # value heads (a multiple of h_k)
    d_k: int  # query / key head dimension: rows of the state
    d_v: int  # value head dimension: columns of the state
    v_tiled: bool = True  # value head h uses key head h % h_k (llama.cpp's GGUF order), else h // (h_v // h_k)

    @property
    def key_dim(self) -> int:
        return self.h_k * self.d_k

    @property
    def value_dim(self) -> int:
        return self.h_v * self.d_v

    @property
    def conv_dim(self) -> int:
        """Channels of the short convolution: q, k and v side by side."""
        return 2 * self.key_dim + self.value_dim

    @property
    def matrix(self) -> tuple[int, int, int]:
        """One sequence's recurrent state: gpu/recurrent_state.py's RecurrentLayerState.matrix."""
        return (self.h_v, self.d_k, self.d_v)

    @property
    def state_floats(self) -> int:
        """Floats of one sequence's recurrent state (one slot of the pool)."""
        return self.h_v * self.d_k * self.d_v


def _check_rows(op: str, t: Tensor, width: int, what: str) -> None:
    if t.dtype != "f32" or len(t.shape) != 2 or t.shape[1] < width:
        raise ValueError(f"{op}: {what} {t} must be f32 [rows, >= {width}]")


def rule_split(d_k: int, d_v: int) -> tuple[int, int]:
    """(columns, lanes) of a workgroup of gated_delta_rule.wgsl: each state column's d_k values spread over `lanes`
    invocations (at most LANE_ROWS values each), as many columns (a divisor of d_v) as MAX_INVOCATIONS allow."""
    rows = max(r for r in range(1, min(d_k, LANE_ROWS) + 1) if d_k % r == 0)
    lanes = d_k // rows
    if lanes > MAX_INVOCATIONS:
        raise ValueError(f"gated_delta_rule: a key head of {d_k} needs {lanes} invocations a column")
    columns = max(c for c in range(1, d_v + 1) if d_v % c == 0 and c * lanes <= MAX_INVOCATIONS)
    return columns, lanes


def gated_delta_rule(b: ProgramBuilder, qkv: Tensor, alpha: Tensor, beta: Tensor, ssm_a: Tensor, dt_bias: Tensor,
                     rows: Tensor, state: Tensor, o: Tensor, *, shape: DeltaShape, alpha_offset: int = 0,
                     beta_offset: int = 0, prompt: bool = False, name: str = "delta") -> None:
    """o[t, h * d_v:(h + 1) * d_v] = the gated delta rule's output for row t and value head h, each sequence's rows
    in order, its state carried in `state` at its slot: by the recurrence (kernels/gated_delta_rule.wgsl), or
    where prompt by the chunked form (gated_delta_chunk.wgsl then gated_delta_scan.wgsl, through two activations
    named after `name`).

    qkv: f32 [T_MAX, >= conv_dim], the convolution's output (q, k, v heads side by side); alpha, beta: f32 [T_MAX,
    >= offset + h_v], the decay and update-rate projections (ssm_alpha, ssm_beta; may be one tensor at two
    offsets); ssm_a: f32 [h_v], -exp(A_log); dt_bias: f32 [h_v]; rows: u32 [T_MAX, 4] the step's row table;
    state: f32 [slots, h_v, d_k, d_v] (or any shape of that size); o: f32 [T_MAX, >= h_v * d_v].
    """
    op = "gated_delta_rule"
    if shape.h_v % shape.h_k:
        raise ValueError(f"{op}: {shape.h_v} value heads do not share {shape.h_k} key heads evenly")
    _check_rows(op, qkv, shape.conv_dim, "qkv")
    _check_rows(op, o, shape.value_dim, "o")
    if alpha.shape[1] != beta.shape[1]:
        raise ValueError(f"{op}: alpha {alpha} and beta {beta} must have rows of one width")
    _check_rows(op, alpha, alpha_offset + shape.h_v, "alpha")
    _check_rows(op, beta, beta_offset + shape.h_v, "beta")
    for t, what in ((ssm_a, "ssm_a"), (dt_bias, "dt_bias")):
        if t.dtype != "f32" or t.numel != shape.h_v:
            raise ValueError(f"{op}: {what} {t} must be f32 [{shape.h_v}]")
    if state.dtype != "f32" or state.numel % shape.state_floats:
        raise ValueError(f"{op}: state {state} is not slots of {shape.state_floats} floats")
    if rows.dtype != "u32" or len(rows.shape) != 2 or rows.shape[1] != 4:
        raise ValueError(f"{op}: the row table {rows} must be u32 [T_MAX, 4]")
    heads = {"H_K": shape.h_k, "H_V": shape.h_v, "D_K": shape.d_k, "D_V": shape.d_v, "V_TILED": shape.v_tiled,
             "QKV_STRIDE": qkv.shape[1], "Q_OFFSET": 0, "K_OFFSET": shape.key_dim}
    gates = {"V_OFFSET": 2 * shape.key_dim, "AB_STRIDE": alpha.shape[1], "A_OFFSET": alpha_offset,
             "B_OFFSET": beta_offset}
    t_max = o.shape[0]  # the program's rows (the row table may have more)
    if prompt:
        wu = b.activation(f"{name}.wu", (t_max, shape.h_v * (shape.d_k + shape.d_v)))
        pg = b.activation(f"{name}.pg", (t_max, shape.h_v * (CHUNK + 4)))
        b.dispatch("gated_delta_chunk", heads | gates | {"C": CHUNK},
                   [b.step, qkv, alpha, beta, ssm_a, dt_bias, rows, wu, pg],
                   workgroup_grid(-(-t_max // CHUNK) * shape.h_v))
        cols = scan_columns(shape.d_k, shape.d_v)
        b.dispatch("gated_delta_scan", heads | {"C": CHUNK, "COLS": cols, "O_STRIDE": o.shape[1]},
                   [b.step, qkv, rows, wu, pg, state, o], workgroup_grid(t_max * shape.h_v * (shape.d_v // cols)))
        return
    cols, lanes = rule_split(shape.d_k, shape.d_v)
    block = max(1, min(16, STAGED_BYTES // (8 * shape.d_k)))  # rows staged together: q and k of each, f32
    constants = heads | gates | {"COLS": cols, "LANES": lanes, "BLOCK": block, "O_STRIDE": o.shape[1]}
    groups = t_max * shape.h_v * (shape.d_v // cols)
    b.dispatch(op, constants, [b.step, qkv, alpha, beta, ssm_a, dt_bias, rows, state, o], workgroup_grid(groups))


def scan_columns(d_k: int, d_v: int) -> int:
    """State columns a workgroup of gated_delta_scan.wgsl holds: the most (a divisor of d_v, at most 32) whose
    d_k state values and CHUNK rows of V' fit SCAN_BYTES."""
    return max(c for c in range(1, min(d_v, 32) + 1) if d_v % c == 0 and (d_k + CHUNK) * c * 4 <= SCAN_BYTES)


def gated_rms_norm(b: ProgramBuilder, x: Tensor, z: Tensor, w: Tensor, y: Tensor, *, head_dim: int, heads: int,
                   eps: float = 1e-6, z_offset: int = 0) -> None:
    """y = rms_norm(x) * w * silu(z) per head of head_dim values (kernels/gated_rms_norm.wgsl) on the step's rows.

    x, y: f32 [rows, heads * head_dim]; z: f32 [rows, >= z_offset + heads * head_dim]; w: f32 [head_dim].
    """
    op = "gated_rms_norm"
    _check_rows(op, x, heads * head_dim, "x")
    _check_rows(op, y, heads * head_dim, "y")
    _check_rows(op, z, z_offset + heads * head_dim, "z")
    if w.numel != head_dim:
        raise ValueError(f"{op}: weight {w} must hold {head_dim} values")
    constants = {"D": head_dim, "HEADS": heads, "EPS": eps, "Z_STRIDE": z.shape[1], "Z_OFFSET": z_offset}
    b.dispatch(op, constants, [b.step, x, z, w, y], workgroup_grid(x.shape[0] * heads))
