"""Host side of the transformer kernels: each function adds one dispatch to a program.

Shapes use T for the program's maximum tokens per step (T_MAX); kernels skip rows past
the step's n_tokens. Each function names the kernel file it dispatches.
"""

from __future__ import annotations

import math

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

ELEMENTWISE_GROUP = 256  # invocations per workgroup of the elementwise kernels


def _rows(t: Tensor) -> int:
    return t.shape[0]


def _reduce(b: ProgramBuilder, subgroups: bool | None) -> str:
    """The norms' row-sum variant (kernels/common/row_sum_<variant>.wgsl): "subgroup" where the
    adapter has the feature (unless subgroups is False), else "workgroup"."""
    if subgroups is None:
        subgroups = b.device.has("subgroup")
    elif subgroups and not b.device.has("subgroup"):
        raise ValueError("subgroup reductions asked for, but the adapter lacks the feature")
    return "subgroup" if subgroups else "workgroup"


def rms_norm(
    b: ProgramBuilder, x: Tensor, weight: Tensor, out: Tensor, eps: float, *,
    heads: int = 1, accumulate: bool = False, last_row: bool = False,
) -> None:
    """out = x / rms(x) * weight per row of weight.numel values (kernels/rms_norm.wgsl).

    accumulate: out += ... (residual add); last_row: only the step's last token, into out[0].
    """
    d = weight.numel
    rows = heads if last_row else _rows(x) * heads
    b.dispatch("rms_norm", {"D": d, "HEADS": heads, "EPS": eps, "ACCUMULATE": accumulate, "LAST_ROW": last_row},
               [b.step, x, weight, out], workgroup_grid(rows))


def residual_norm(
    b: ProgramBuilder, y: Tensor, post_weight: Tensor, x: Tensor, next_weight: Tensor, h: Tensor, eps: float, *,
    last_row: bool = False, subgroups: bool | None = None,
) -> None:
    """x += rms_norm(y) * post_weight, then h = rms_norm(x) * next_weight, per row (kernels/residual_norm.wgsl).

    One dispatch for Gemma's post-norm residual add and the next pre-norm. last_row: only the
    step's last token, into h[0] (x's other rows are then left stale: use it after the last layer).
    """
    d = post_weight.numel
    b.dispatch("residual_norm", {"D": d, "EPS": eps, "LAST_ROW": last_row, "REDUCE": _reduce(b, subgroups)},
               [b.step, y, post_weight, x, next_weight, h], workgroup_grid(1 if last_row else _rows(x)))


def norm_rope(b: ProgramBuilder, x: Tensor, weight: Tensor, rope_table: Tensor, heads: int, eps: float) -> None:
    """In place: x[t, h] = rope(rms_norm(x[t, h]) * weight) at position step.pos + t (kernels/norm_rope.wgsl)."""
    d = weight.numel
    b.dispatch("norm_rope", {"D": d, "HEADS": heads, "EPS": eps}, [b.step, x, weight, rope_table],
               workgroup_grid(_rows(x) * heads))


def qk_norm_rope_store(
    b: ProgramBuilder, q: Tensor, k: Tensor, v: Tensor, q_weight: Tensor, k_weight: Tensor, rope_table: Tensor,
    k_cache: Tensor, v_cache: Tensor, *, heads: int, kv_heads: int, eps: float, kv_f16: bool,
    subgroups: bool | None = None,
) -> None:
    """norm_rope on q (in place) and on k, and k, v appended to the cache at step.pos, in one
    dispatch (kernels/qk_norm_rope_store.wgsl); k and v are left as they were."""
    d = q_weight.numel
    if d % 4:
        raise ValueError(f"qk_norm_rope_store needs a head dimension multiple of 4, not {d}")
    constants = {"D": d, "HEADS": heads, "KV_HEADS": kv_heads, "EPS": eps, "KV_F16": kv_f16,
                 "REDUCE": _reduce(b, subgroups)}
    b.dispatch("qk_norm_rope_store", constants, [b.step, q, k, v, q_weight, k_weight, rope_table, k_cache, v_cache],
               workgroup_grid(_rows(q) * (heads + kv_heads)))


def kv_store(b: ProgramBuilder, k: Tensor, v: Tensor, k_cache: Tensor, v_cache: Tensor, kv_f16: bool) -> None:
    """Append the step's k and v rows to the cache at step.pos (kernels/kv_store.wgsl)."""
    width = k.shape[1]
    words = width // 2 if kv_f16 else width
    b.dispatch("kv_store", {"WIDTH": width, "KV_F16": kv_f16}, [b.step, k, v, k_cache, v_cache],
               workgroup_grid(math.ceil(_rows(k) * words / ELEMENTWISE_GROUP)))


def attention(
    b: ProgramBuilder, q: Tensor, k_cache: Tensor, v_cache: Tensor, out: Tensor, *,
    heads: int, kv_heads: int, head_dim: int, window: int, scale: float, kv_f16: bool, splits: int | None = None,
) -> None:
    """Causal attention of the step's queries over the cache (kernels/attention.wgsl).

    splits > 1 divides each row's keys over that many workgroups and merges their partial
    softmaxes (kernels/attention_combine.wgsl). By default a step with few (token, head)
    rows (decode) is split so that a GPU gets ~128 workgroups; a CPU adapter gets 2 parts.
    """
    if head_dim % 16 or head_dim > 512:
        raise ValueError(f"attention supports head_dim multiple of 16 up to 512, not {head_dim}")
    rows = _rows(q) * heads
    if splits is None:
        splits = 1 if rows >= 64 else (2 if b.device.is_software else max(1, 128 // rows))
    constants = {"D": head_dim, "HEADS": heads, "KV_HEADS": kv_heads, "WINDOW": window, "SCALE": scale,
                 "KV_F16": kv_f16, "SPLITS": splits}
    if splits == 1:
        b.dispatch("attention", constants, [b.step, q, k_cache, v_cache, out], workgroup_grid(rows))
        return
    partials = b.activation("attention_partials", (rows * splits, head_dim + 2))
    b.dispatch("attention", constants, [b.step, q, k_cache, v_cache, partials], workgroup_grid(rows * splits))
    b.dispatch("attention_combine", {"D": head_dim, "HEADS": heads, "SPLITS": splits}, [b.step, partials, out],
               workgroup_grid(rows))


def gelu_mul(b: ProgramBuilder, gate: Tensor, up: Tensor, out: Tensor) -> None:
    """out = gelu_tanh(gate) * up (kernels/gelu_mul.wgsl)."""
    width = gate.shape[1]
    b.dispatch("gelu_mul", {"D": width}, [b.step, gate, up, out],
               workgroup_grid(math.ceil(_rows(gate) * width / ELEMENTWISE_GROUP)))


def add(b: ProgramBuilder, x: Tensor, y: Tensor, out: Tensor) -> None:
    """out = x + y (kernels/add.wgsl)."""
    width = x.shape[1]
    b.dispatch("add", {"D": width}, [b.step, x, y, out],
               workgroup_grid(math.ceil(_rows(x) * width / ELEMENTWISE_GROUP)))
