"""Host side of the transformer kernels: each function adds one dispatch to a program.

Shapes use T for the program's maximum tokens per step (T_MAX); kernels skip rows past
the step's n_tokens. Each function names the kernel file it dispatches.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpu.kv_cache import KVPool
from gpu.ops.quantised import QuantisedActivation
from gpu.ops.split_sums import SplitSums
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

ELEMENTWISE_GROUP = 256  # invocations per workgroup of the elementwise kernels
ATTENTION_GROUPS = 512  # attention workgroups wanted on a GPU: key ranges split until rows x parts reach it
ATTENTION_MIN_PART_KEYS = 16  # fewest keys a part of a split row takes
# software adapters (kernels/attention_key_lanes.wgsl): invocations a workgroup (a CPU's vector of 8 f32 lanes), the
# parts a row's keys are cut into where a step has fewer than KEY_LANE_MIN_ROWS rows (else 1: a row an invocation),
# and the fewest keys a part takes
KEY_LANES = 8
KEY_LANE_PARTS = 16
KEY_LANE_MIN_ROWS = 64
KEY_LANE_MIN_KEYS = 4
KEY_LANE_GROUP_DIMS = 512  # most query dims an invocation holds (heads of one kv head sharing its key and value loads)
Column = tuple[Tensor, int]  # a tensor and the first of its columns an op reads
# The gate activations of a gated feed-forward, as kernels/matmul/glu.wgsl's GLU_ACT codes
GLU_ACTIVATIONS = {"gelu_tanh": 0, "silu": 1}


def glu_act(activation: str) -> int:
    """matmul/glu.wgsl's GLU_ACT for an activation name (ValueError for one it lacks)."""
    if activation not in GLU_ACTIVATIONS:
        raise ValueError(f"no gated feed-forward for activation {activation!r} (known: {sorted(GLU_ACTIVATIONS)})")
    return GLU_ACTIVATIONS[activation]


def _rows(t: Tensor) -> int:
    return t.shape[0]


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


def residual_norm_split(b: ProgramBuilder, d: int, subgroups: bool | None = None,
                        threads: int | None = None) -> dict[str, int | str]:
    """The work split of the residual norm kernels (common/residual_norm_row.wgsl) for rows of d values: WG
    invocations a row holding QUADS quads (4 values) each, and the REDUCE of their sums. One quad an invocation
    where the row's d / 4 fit a workgroup (two beyond); the workgroup reduction wants a power of two. threads:
    the invocations asked for instead (at least d / 8). A row's values stay in registers between its passes,
    where a fixed 256 invocations each walking a strided slice would read the row three times."""
    if d % 4:
        raise ValueError(f"the residual norms take rows of a multiple of 4 values, not {d}")
    reduce = b.device.reduction(subgroups)
    quads = d // 4
    per = -(-quads // min(threads or quads, b.device.limits.max_invocations))
    if per > 2:
        raise ValueError(f"rows of {d} values: more than 2 quads an invocation")
    wg = threads or -(-quads // per)
    if reduce == "workgroup":
        wg = 1 << (wg - 1).bit_length()
    if wg > b.device.limits.max_invocations:
        raise ValueError(f"rows of {d} values: {wg} invocations exceed the adapter's workgroups")
    return {"D": d, "REDUCE": reduce, "WG": wg, "QUADS": per}


def residual_norm(
    b: ProgramBuilder, y: Tensor | SplitSums, post_weight: Tensor | None, x: Tensor, next_weight: Tensor,
    h: Tensor | QuantisedActivation, eps: float, *,
    out_rows: Tensor | None = None, subgroups: bool | None = None, threads: int | None = None,
) -> None:
    """x += rms_norm(y) * post_weight, then h = rms_norm(x) * next_weight, per row (kernels/residual_norm.wgsl).

    One dispatch for Gemma's post-norm residual add and the next pre-norm; post_weight None: a plain residual
    add, x += y (the blocks of networks without post-norms). out_rows (u32 [R]):
    only the step's first n_out rows listed there, into h[0..n_out) (x's other rows are then left
    stale: use it after the last layer, before the output head). A QuantisedActivation h is written
    quantised per 32 values (kernels/residual_norm_q8.wgsl; not with out_rows). y may be the parts of a k-split
    linear (SplitSums), added as they are read. subgroups and threads: see residual_norm_split.
    """
    d = next_weight.numel
    gather = out_rows is not None
    constants = residual_norm_split(b, d, subgroups, threads) | {"EPS": eps}
    if post_weight is None:  # not read: next_weight stands in
        constants["POST_NORM"] = False
        post_weight = next_weight
    if isinstance(y, SplitSums):
        constants |= {"SPLIT": y.split, "PART_ROWS": y.rows}
        y = y.parts
    groups = workgroup_grid(out_rows.numel if out_rows else _rows(x))
    if isinstance(h, QuantisedActivation):
        if gather or h.width != d:
            raise ValueError(f"{h.tensor}: a quantised residual norm output takes every row, {d} values each")
        b.dispatch("residual_norm_q8", constants, [b.step, y, post_weight, x, next_weight, h.tensor, post_weight],
                   groups)
        return
    # without GATHER the out_rows binding is not read: post_weight stands in
    tensors = [b.step, y, post_weight, x, next_weight, h, out_rows or post_weight]
    b.dispatch("residual_norm", constants | {"GATHER": gather}, tensors, groups)


def norm_rope(
    b: ProgramBuilder, x: Tensor, weight: Tensor, rope_table: Tensor, rows: Tensor, heads: int, eps: float,
) -> None:
    """In place: x[t, h] = rope(rms_norm(x[t, h]) * weight) at position rows[t].x (kernels/norm_rope.wgsl)."""
    d = weight.numel
    b.dispatch("norm_rope", {"D": d, "HEADS": heads, "EPS": eps}, [b.step, x, weight, rope_table, rows],
               workgroup_grid(_rows(x) * heads))


def _paging(pool: KVPool) -> dict[str, int]:
    return {"PAGE_TOKENS": pool.page_tokens, "MAX_PAGES": pool.max_pages}


def _qkv_columns(q: Column, k: Column, v: Column) -> dict[str, int]:
    """The constants of kernels/common/qkv_columns.wgsl: each source's row stride and first column."""
    return {f"{name}_{what}": value for name, (tensor, offset) in (("Q", q), ("K", k), ("V", v))
            for what, value in (("STRIDE", tensor.shape[1]), ("OFFSET", offset))}


def qk_norm_rope_store(
    b: ProgramBuilder, q: Column, k: Column, v: Column, q_weight: Tensor, k_weight: Tensor, rope_table: Tensor,
    pool: KVPool, layer: int, rows: Tensor, q_out: Tensor, *, heads: int, kv_heads: int, eps: float,
    subgroups: bool | None = None, v_norm: bool = False, qk_norm: bool = True,
) -> None:
    """norm_rope of q into q_out and of k, and k, v stored in the layer's paged cache at each row's
    position (rows: the row table), in one dispatch (kernels/qk_norm_rope_store.wgsl). qk_norm False: q and k
    are rotated without a norm (q_weight and k_weight are then not read).

    q, k and v are (tensor, first column) of projection outputs: the same tensor for all three
    when the projections ran as one fused matrix product, each its own tensor at column 0 if not.
    v_norm (Gemma 4): v is RMS-normalised (no weight) before it is stored.
    """
    d = q_weight.numel
    if d % 4:
        raise ValueError(f"qk_norm_rope_store needs a head dimension multiple of 4, not {d}")
    constants: dict[str, int | float | bool | str] = {
        "D": d, "HEADS": heads, "KV_HEADS": kv_heads, "EPS": eps, "KV_F16": pool.f16,
        "REDUCE": b.device.reduction(subgroups), **_paging(pool)}
    if v_norm:
        constants["V_NORM"] = True
    if not qk_norm:
        constants["QK_NORM"] = False
    constants |= _qkv_columns(q, k, v)
    tensors = [b.step, q[0], k[0], v[0], q_weight, k_weight, rope_table, pool.keys[layer], pool.values[layer], rows,
               pool.page_table, q_out]
    b.dispatch("qk_norm_rope_store", constants, tensors, workgroup_grid(_rows(q_out) * (heads + kv_heads)))


@dataclass(frozen=True)
class RawQKV:
    """What attention needs to normalise and rotate q, k and v itself, in place of qk_norm_rope_store (whose
    arguments these are): the projections' columns, the norm weights, the RoPE table and the norms' eps.
    attention then also stores k and v in the cache: decode steps only (every token row the only new token
    of its sequence, so that no workgroup needs a key another one writes)."""

    q: Column
    k: Column
    v: Column
    q_weight: Tensor
    k_weight: Tensor
    rope_table: Tensor
    eps: float
    qk_norm: bool = True


def attention(
    b: ProgramBuilder, q: Tensor | RawQKV, pool: KVPool, layer: int, rows: Tensor, out: Tensor, *,
    heads: int, kv_heads: int, head_dim: int, window: int, scale: float, softcap: float = 0.0,
    splits: int | None = None, subgroups: bool | None = None, later_keys: bool = True, key_lanes: bool | None = None,
) -> None:
    """Causal attention of the step's queries over their sequences' keys in the layer's paged
    cache (kernels/attention.wgsl; on software adapters kernels/attention_key_lanes.wgsl, see key_lanes); rows is
    the row table (each token's position and sequence). softcap > 0: scores capped to softcap * tanh(score /
    softcap) before the softmax (Gemma 2).

    q: the queries as qk_norm_rope_store leaves them [T, heads * head_dim], or, for a decode step, RawQKV:
    the attention then does qk_norm_rope_store's work itself (kernels/attention/q_raw.wgsl), one dispatch
    fewer. splits > 1 divides each row's keys over that many workgroups and merges their partial
    softmaxes (kernels/attention_combine.wgsl). By default a step with few (token, head)
    rows (decode) is split so that a GPU gets ~ATTENTION_GROUPS workgroups (at most 32 parts). A part holds at least
    ATTENTION_MIN_PART_KEYS keys, so short rows leave the rest of their parts empty. subgroups: the
    kernels' sums by subgroup operations (kernels/attention/decode_subgroup.wgsl, combine_subgroup.wgsl;
    the default where the adapter has them) or through workgroup memory (False). later_keys False: rows'
    later keys (an image's rest, common/rows.wgsl) are ignored and every row is causal. key_lanes: each invocation
    walks whole keys (_attention_key_lanes; the default on software adapters unless splits is given), splits then
    counting the parts of a row, an invocation each.
    """
    if head_dim % 16 or head_dim > 512:
        raise ValueError(f"attention supports head_dim multiple of 16 up to 512, not {head_dim}")
    if key_lanes is None:
        key_lanes = b.device.is_software and splits is None and not isinstance(q, RawQKV)
    if key_lanes:
        if isinstance(q, RawQKV):
            raise ValueError("attention_key_lanes reads queries as qk_norm_rope_store leaves them, not RawQKV")
        _attention_key_lanes(b, q, pool, layer, rows, out, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                             window=window, scale=scale, softcap=softcap, parts=splits, later_keys=later_keys)
        return
    source: dict[str, int | float | str]
    if isinstance(q, RawQKV):  # kernels/attention/q_raw.wgsl
        queries, extra = q.q[0], [q.k[0], q.v[0], q.q_weight, q.k_weight, q.rope_table]
        source = {"Q_SOURCE": "raw", "EPS": q.eps, **_qkv_columns(q.q, q.k, q.v)}
        if not q.qk_norm:
            source["QK_NORM"] = False
    else:  # kernels/attention/q_cache.wgsl
        queries, extra, source = q, [], {"Q_SOURCE": "cache"}
    n_rows = _rows(queries) * heads
    if splits is None:  # about 512 workgroups (a batch of 32 decode rows x 4 heads: 4 parts each)
        splits = max(1, min(32, ATTENTION_GROUPS // n_rows))
    cut = _key_cut(splits, window, ATTENTION_MIN_PART_KEYS, later_keys)
    reduce = b.device.reduction(subgroups)
    constants: dict[str, int | float | bool | str] = {
        "D": head_dim, "HEADS": heads, "KV_HEADS": kv_heads, "SCALE": scale, "KV_F16": pool.f16, "REDUCE": reduce,
        **cut, **_paging(pool), **source}
    if softcap:
        constants["SOFTCAP"] = softcap
    cache = [pool.keys[layer], pool.values[layer]]
    if splits == 1:
        b.dispatch("attention", constants, [b.step, queries, *cache, out, rows, pool.page_table, *extra],
                   workgroup_grid(n_rows))
        return
    partials = b.activation("attention_partials", (n_rows * splits, head_dim + 4))
    b.dispatch("attention", constants, [b.step, queries, *cache, partials, rows, pool.page_table, *extra],
               workgroup_grid(n_rows * splits))
    _combine_parts(b, partials, out, rows, n_rows=n_rows, head_dim=head_dim, heads=heads, cut=cut, reduce=reduce)


def _key_cut(parts: int, window: int, min_part_keys: int, later_keys: bool) -> dict[str, int | bool]:
    """The constants by which an attention kernel and attention_combine.wgsl cut each row's keys into parts alike
    (attention/key_parts.wgsl); LATER_KEYS is named only off its default, so other pipelines' keys stay as they were."""
    later = {} if later_keys else {"LATER_KEYS": False}
    return {"SPLITS": parts, "WINDOW": window, "MIN_PART_KEYS": min_part_keys, **later}


def _combine_parts(b: ProgramBuilder, partials: Tensor, out: Tensor, rows: Tensor, *, n_rows: int, head_dim: int,
                   heads: int, cut: dict[str, int | bool], reduce: str) -> None:
    """attention_combine.wgsl: out = the n_rows rows' partial softmaxes (partials, [n_rows * parts, head_dim + 4])
    merged, reading only the parts that the attention's key cut gave keys."""
    # software adapters: an invocation a dim quad over every part, so that the workgroup's barriers hold fewer CPU
    # vectors (lavapipe suspends and resumes each at every barrier)
    lanes = {"WG": head_dim // 4} if b.device.is_software else {}
    b.dispatch("attention_combine", {"D": head_dim, "HEADS": heads, "REDUCE": reduce, **cut, **lanes},
               [b.step, partials, out, rows], workgroup_grid(n_rows))


def _attention_key_lanes(b: ProgramBuilder, q: Tensor, pool: KVPool, layer: int, rows: Tensor, out: Tensor, *,
                         heads: int, kv_heads: int, head_dim: int, window: int, scale: float, softcap: float,
                         parts: int | None, later_keys: bool) -> None:
    """attention() on kernels/attention_key_lanes.wgsl: a token's heads of one kv head taken together
    (key_lane_head_group's), each such group's keys cut into `parts` parts (KEY_LANE_PARTS for a step of few rows,
    else 1), an invocation each, their partial softmaxes merged by attention_combine.wgsl where there are several."""
    n_rows = _rows(q) * heads
    parts = parts or (KEY_LANE_PARTS if n_rows < KEY_LANE_MIN_ROWS else 1)
    cut = _key_cut(parts, window, KEY_LANE_MIN_KEYS, later_keys)
    # heads together where each invocation walks a whole row's keys (prompts): their variants take several times
    # longer for lavapipe to compile, and decode's split rows gain little from them
    group = key_lane_head_group(heads // kv_heads, head_dim) if parts == 1 else 1
    constants: dict[str, int | float | bool | str] = {
        "D": head_dim, "HEADS": heads, "KV_HEADS": kv_heads, "SCALE": scale, "KV_F16": pool.f16,
        "LANES": KEY_LANES, **cut, **_paging(pool)}
    if group > 1:
        constants["HEAD_GROUP"] = group
    if softcap:
        constants["SOFTCAP"] = softcap
    cache = [pool.keys[layer], pool.values[layer]]
    invocations = n_rows // group * parts
    grid = workgroup_grid(-(-invocations // KEY_LANES))
    if parts == 1:
        b.dispatch("attention_key_lanes", constants, [b.step, q, *cache, out, rows, pool.page_table], grid)
        return
    partials = b.activation("attention_partials", (n_rows * parts, head_dim + 4))
    b.dispatch("attention_key_lanes", constants, [b.step, q, *cache, partials, rows, pool.page_table], grid)
    _combine_parts(b, partials, out, rows, n_rows=n_rows, head_dim=head_dim, heads=heads, cut=cut,
                   reduce=b.device.reduction(None))


def key_lane_head_group(queries_per_kv_head: int, head_dim: int) -> int:
    """Heads of one kv head that an attention_key_lanes invocation takes together, so that each key and value
    load serves them all: the most of 4, 2 and 1 that divides the group and holds at most KEY_LANE_GROUP_DIMS
    query dims (more heads run faster on lavapipe, but their state takes it far longer to compile)."""
    return next(g for g in (4, 2, 1) if queries_per_kv_head % g == 0 and g * head_dim <= KEY_LANE_GROUP_DIMS
                or g == 1)


def glu_mul(b: ProgramBuilder, gate: Tensor, up: Tensor, out: Tensor, activation: str = "gelu_tanh") -> None:
    """out = activation(gate) * up (kernels/glu_mul.wgsl; activation: a GLU_ACTIVATIONS name)."""
    width = gate.shape[1]
    act = {"GLU_ACT": glu_act(activation)} if activation != "gelu_tanh" else {}  # the kernel's default
    b.dispatch("glu_mul", {"D": width, **act}, [b.step, gate, up, out],
               workgroup_grid(math.ceil(_rows(gate) * width / ELEMENTWISE_GROUP)))


def add(b: ProgramBuilder, x: Tensor, y: Tensor, out: Tensor) -> None:
    """out = x + y (kernels/add.wgsl)."""
    width = x.shape[1]
    b.dispatch("add", {"D": width}, [b.step, x, y, out],
               workgroup_grid(math.ceil(_rows(x) * width / ELEMENTWISE_GROUP)))


def store_tokens(b: ProgramBuilder, sampled: Tensor, out_rows: Tensor, rows: Tensor, slot_tokens: Tensor) -> None:
    """slot_tokens[slot of out row r] = sampled[r] for r < n_out (kernels/store_tokens.wgsl): each
    sequence's sampled token becomes the input of its next decode step without leaving the GPU."""
    b.dispatch("store_tokens", {}, [b.step, sampled, out_rows, rows, slot_tokens], (1, 1, 1))


def residual_scale_norm(
    b: ProgramBuilder, y: Tensor, post_weight: Tensor, x: Tensor, scale: Tensor, next_weight: Tensor, h: Tensor,
    eps: float, *, out_rows: Tensor | None = None,
) -> None:
    """x = (x + rms_norm(y) * post_weight) * scale[0], then h = rms_norm(x) * next_weight, per row
    (kernels/residual_scale_norm.wgsl). out_rows (u32 [R]): only the step's first n_out rows listed there,
    into h[0..n_out) (the last block, before the output head)."""
    constants = residual_norm_split(b, post_weight.numel) | {"EPS": eps, "GATHER": out_rows is not None}
    # without GATHER the out_rows binding is not read: scale stands in
    tensors = [b.step, y, post_weight, x, scale, next_weight, h, out_rows or scale]
    b.dispatch("residual_scale_norm", constants, tensors,
               workgroup_grid(out_rows.numel if out_rows is not None else x.shape[0]))


def softcap(b: ProgramBuilder, logits: Tensor, cap: float) -> None:
    """In place: logits = cap * tanh(logits / cap) for the step's n_out rows (kernels/softcap.wgsl)."""
    v = logits.shape[1]
    b.dispatch("softcap", {"V": v, "CAP": cap}, [b.step, logits],
               workgroup_grid(math.ceil(logits.shape[0] * v / ELEMENTWISE_GROUP)))


def gather_rows(b: ProgramBuilder, src: Tensor, out_rows: Tensor, dst: Tensor) -> None:
    """dst[r] = src[out_rows[r]] for the step's n_out output rows, src[r] for dst's other rows
    (kernels/gather_rows.wgsl); rows of any 32-bit type."""
    width = src.numel // src.shape[0]
    if dst.numel // dst.shape[0] != width:
        raise ValueError(f"gather_rows: rows of {src} and {dst} differ")
    b.dispatch("gather_rows", {"WIDTH": width, "ROWS": dst.shape[0]}, [b.step, src, out_rows, dst],
               workgroup_grid(math.ceil(dst.numel / ELEMENTWISE_GROUP)))
