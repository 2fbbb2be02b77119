"""Host side of sampling on the GPU: the next token is picked from the logits where they are,
so a decode step reads back a few words instead of the vocabulary's row.

Each function adds dispatches to a program over logits f32 [R, V] (R rows, one per sequence
of a batch; every row is processed). All ops are two passes (kernels/sample/):

- argmax: argmax_partial + argmax_combine (2 dispatches).
- gumbel_sample: gumbel_partial + argmax_combine (2 dispatches); exact sampling from
  softmax(logits * inv_temperature) per row, greedy rows allowed in the same batch.
- top_candidates: topk_partial + topk_combine (2 dispatches); the k best logits of each row and
  the row's (max, sum of exps), from which the CPU finishes top-k/top-p/min-p sampling and
  exact log-probabilities.

Pass 1 spreads each row over many workgroups (a chunk of the vocabulary each) so that a row of
262,144 logits is read by many SMs; pass 2 combines one row per workgroup. Both passes reduce
with subgroup operations where the adapter has the "subgroup" feature (kernels/sample/
reduce_subgroup.wgsl, histogram_subgroup.wgsl), else in workgroup memory (*_workgroup.wgsl).
NaN logits count as -inf everywhere.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

ARGMAX_TARGET_CHUNKS = 128  # argmax/gumbel pass 1: about this many workgroups per row
ARGMAX_MIN_CHUNK = 1024  # ... each taking at least this many logits (4 per invocation)
TOPK_MAX_CHUNKS = 256  # top_candidates pass 1: at most this many workgroups per row
# argmax/gumbel pass 1 on software adapters: a workgroup of one CPU vector's lanes, whose reductions then pass no
# barrier between the vectors of a workgroup (lavapipe runs each as a coroutine, suspended at every barrier)
SOFTWARE_PARTIAL_WG = 8
MAX_TOP_K = 256  # top_candidates' k: a power of two up to this (one radix bin per invocation)
# Fields of `struct SampleParams` in kernels/sample/gumbel_partial.wgsl, one u32 each.
SAMPLE_PARAMS_FIELDS = ("inv_temperature", "seed_lo", "seed_hi", "reserved")
MASK_FLAG_WORD = 3  # the word of a row's sampling params that says whether its token mask applies (mask_logits)


def _rows_vocab(logits: Tensor) -> tuple[int, int]:
    if logits.dtype != "f32" or len(logits.shape) != 2:
        raise ValueError(f"sampling needs f32 logits [R, V], not {logits}")
    return logits.shape[0], logits.shape[1]


def _check_out(t: Tensor, dtype: str, numel: int, what: str) -> None:
    if t.dtype != dtype or t.numel < numel:
        raise ValueError(f"{what} must be {dtype} with at least {numel} elements, not {t}")


def argmax_chunk(v: int) -> int:
    """Logits per workgroup of argmax/gumbel pass 1 for a vocabulary of v: a power of two giving
    about ARGMAX_TARGET_CHUNKS chunks per row (2048 for 262,144)."""
    return max(ARGMAX_MIN_CHUNK, 1 << max(0, math.ceil(v / ARGMAX_TARGET_CHUNKS) - 1).bit_length())


def topk_chunks(v: int, k: int) -> int:
    """Workgroups per row of top_candidates pass 1: a power of two near sqrt(v / k), which
    balances pass 1 (a chunk of v / chunks logits per workgroup) against pass 2 (chunks * k
    candidates in one workgroup per row): 32 for v = 262,144 and k = 256, 64 for k = 64."""
    chunks = 1 << max(0, round(math.log2(max(1.0, v / k)) / 2))
    return min(chunks, TOPK_MAX_CHUNKS)


def _partial_workgroup(b: ProgramBuilder) -> dict[str, int]:
    """The WG define of argmax/gumbel pass 1: SOFTWARE_PARTIAL_WG on software adapters, else the kernels' 256."""
    return {"WG": SOFTWARE_PARTIAL_WG} if b.device.is_software else {}


def _argmax_combine(b: ProgramBuilder, partials: Tensor, out_ids: Tensor, rows: int, chunks: int,
                    reduce: str) -> None:
    b.dispatch("sample/argmax_combine", {"ROWS": rows, "CHUNKS": chunks, "REDUCE": reduce}, [partials, out_ids],
               workgroup_grid(rows))


def argmax(b: ProgramBuilder, logits: Tensor, out_ids: Tensor, *, subgroups: bool | None = None) -> None:
    """out_ids[r] = the index of the largest logits[r, i], the lowest index on ties (numpy.argmax),
    NaN counted as -inf (kernels/sample/argmax_partial.wgsl, argmax_combine.wgsl; 2 dispatches).

    logits: f32 [R, V]; out_ids: u32 with at least R elements (only the first R are written).
    """
    rows, v = _rows_vocab(logits)
    _check_out(out_ids, "u32", rows, "argmax out_ids")
    reduce = b.device.reduction(subgroups)
    chunk = argmax_chunk(v)
    chunks = -(-v // chunk)
    partials = b.activation("argmax_partials", (rows * chunks, 2), "u32")
    b.dispatch("sample/argmax_partial", {"V": v, "ROWS": rows, "CHUNK": chunk, "CHUNKS": chunks, "REDUCE": reduce,
                                         **_partial_workgroup(b)}, [logits, partials], workgroup_grid(rows * chunks))
    _argmax_combine(b, partials, out_ids, rows, chunks, reduce)


def gumbel_sample(
    b: ProgramBuilder, logits: Tensor, params: Tensor, out_ids: Tensor, *, subgroups: bool | None = None
) -> None:
    """out_ids[r] ~ softmax(logits[r] * inv_temperature[r]), drawn by the Gumbel-max trick with
    Philox4x32-10 noise keyed by the row's seed and counted by step.seed (kernels/sample/
    gumbel_partial.wgsl, argmax_combine.wgsl; 2 dispatches).

    params: u32 [R, 4] rows of `struct SampleParams` (see sample_params): the f32 bits of
    inv_temperature, then the seed's low and high words, then 0. A row with inv_temperature 0
    (or negative, infinite, NaN) gets the argmax. The same (row seed, step.seed) gives the same
    token; the caller changes step.seed every step, and gives rows that must draw independently
    different seeds (two rows with equal seeds and logits draw the same token).
    out_ids: u32 with at least R elements. Reads the step uniform (binds b.step).
    """
    rows, v = _rows_vocab(logits)
    _check_out(out_ids, "u32", rows, "gumbel_sample out_ids")
    if params.dtype != "u32" or params.numel < rows * len(SAMPLE_PARAMS_FIELDS):
        raise ValueError(f"gumbel_sample params must be u32 [{rows}, 4], not {params}")
    reduce = b.device.reduction(subgroups)
    chunk = argmax_chunk(v)
    chunks = -(-v // chunk)
    partials = b.activation("gumbel_partials", (rows * chunks, 2), "u32")
    b.dispatch("sample/gumbel_partial", {"V": v, "ROWS": rows, "CHUNK": chunk, "CHUNKS": chunks, "REDUCE": reduce,
                                         **_partial_workgroup(b)},
               [b.step, params, logits, partials], workgroup_grid(rows * chunks))
    _argmax_combine(b, partials, out_ids, rows, chunks, reduce)


def sample_params(temperatures: Sequence[float], seeds: Sequence[int]) -> np.ndarray:
    """The u32 [R, 4] params of gumbel_sample for rows with these temperatures (0 = greedy) and
    seeds (taken modulo 2^64)."""
    if len(temperatures) != len(seeds):
        raise ValueError(f"{len(temperatures)} temperatures for {len(seeds)} seeds")
    t = np.asarray(temperatures, dtype=np.float64)
    if (t < 0).any() or not np.isfinite(t).all():
        raise ValueError(f"temperatures must be finite and >= 0, not {temperatures}")
    inv = np.zeros(len(t), np.float32)
    np.divide(1.0, t, out=inv, where=t > 0, casting="unsafe")
    out = np.zeros((len(t), len(SAMPLE_PARAMS_FIELDS)), np.uint32)
    out[:, 0] = inv.view(np.uint32)
    s = np.array([int(x) % (1 << 64) for x in seeds], dtype=np.uint64)
    out[:, 1] = (s & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    out[:, 2] = (s >> np.uint64(32)).astype(np.uint32)
    return out


def top_candidates(
    b: ProgramBuilder, logits: Tensor, k: int, out_ids: Tensor, out_values: Tensor, out_stats: Tensor, *,
    subgroups: bool | None = None,
) -> None:
    """Per row, the k largest logits sorted descending (lower index first among equal values) and
    the row's softmax statistics (kernels/sample/topk_partial.wgsl, topk_combine.wgsl; 2 dispatches).

    k: a power of two, 1 <= k <= min(256, V). out_ids: u32 [R, k]; out_values: f32 [R, k] (NaN
    logits come out as -inf); out_stats: f32 [R, 2] = (max_i logits[r, i], sum_i exp(logits[r, i]
    - max)) over the whole row, -inf and NaN logits contributing nothing (a row of only those gives
    (-inf, 0)); with +inf logits the sum is undefined. log p_i = logit_i - max - log(sum).
    """
    rows, v = _rows_vocab(logits)
    if k < 1 or k > MAX_TOP_K or k & (k - 1) or k > v:
        raise ValueError(f"top_candidates k must be a power of two in [1, min({MAX_TOP_K}, V={v})], not {k}")
    _check_out(out_ids, "u32", rows * k, "top_candidates out_ids")
    _check_out(out_values, "f32", rows * k, "top_candidates out_values")
    _check_out(out_stats, "f32", rows * 2, "top_candidates out_stats")
    reduce = b.device.reduction(subgroups)
    chunks = topk_chunks(v, k)
    chunk = -(-v // chunks)
    chunks = -(-v // chunk)
    partials = b.activation("topk_partials", (rows * chunks, 2 * k + 2), "u32")
    b.dispatch("sample/topk_partial", {"V": v, "ROWS": rows, "K": k, "CHUNK": chunk, "CHUNKS": chunks,
                                       "REDUCE": reduce}, [logits, partials], workgroup_grid(rows * chunks))
    b.dispatch("sample/topk_combine", {"ROWS": rows, "K": k, "CHUNKS": chunks, "REDUCE": reduce},
               [partials, out_ids, out_values, out_stats], workgroup_grid(rows))


def mask_words(v: int) -> int:
    """u32 words of one row's token mask for a vocabulary of v (one bit per token)."""
    return -(-v // 32)


def mask_logits(b: ProgramBuilder, logits: Tensor, params: Tensor, mask: Tensor) -> None:
    """In place: logits[r, i] = -inf where row r is constrained (params[r, 3] != 0) and bit i % 32 of
    mask[r, i // 32] is 0, for the step's n_out rows (kernels/mask_logits.wgsl; 1 dispatch). Rows that are not
    constrained keep their logits, so constrained and free sequences share a batch.

    logits: f32 [R, V]; params: u32 [R, 4] (the rows' sampling params; word 3 is the flag); mask: u32 [R, W]
    with W = ceil(V / 32). Reads the step uniform (binds b.step).
    """
    rows, v = _rows_vocab(logits)
    words = mask_words(v)
    if mask.dtype != "u32" or mask.numel < rows * words:
        raise ValueError(f"mask_logits mask must be u32 [{rows}, {words}], not {mask}")
    if params.dtype != "u32" or params.numel < rows * len(SAMPLE_PARAMS_FIELDS):
        raise ValueError(f"mask_logits params must be u32 [{rows}, 4], not {params}")
    b.dispatch("mask_logits", {"V": v, "WORDS": words}, [b.step, params, mask, logits],
               workgroup_grid(-(-rows * words // 256)))
