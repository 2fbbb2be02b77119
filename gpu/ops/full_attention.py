"""Host side of full (unmasked) self-attention over a fixed number of rows from fused q | k | v rows
(kernels/attention_full*.wgsl, softmax_rows.wgsl). Activations are f32 row-major [rows, width].
"""

from __future__ import annotations

from dataclasses import dataclass

from gpu.device import DeviceLimits
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

MAX_SCORES_BYTES = 256 << 20  # the scores activation of one group of heads at most (and within the binding limit)
FLASH = True  # one pass (attention_full_flash.wgsl) where flash_plan finds a fit; False: always the scores path
FLASH_ROWS = (64, 32, 16)  # query rows per workgroup tried, most first (fewer passes over K and V)
FLASH_MAX_KEYS = 64  # keys per chunk at most
FLASH_MIN_KEYS = 32  # keys per chunk that a larger row block must allow to be preferred


@dataclass(frozen=True)
class FlashPlan:
    """Work split of attention_full_flash.wgsl: its BR, KC and PREFETCH overrides and the threads they give."""

    rows: int  # query rows per workgroup (BR)
    keys: int  # keys per chunk in workgroup memory (KC)
    threads: int  # workgroup size: rows / 4 * head_dim / 4
    storage_bytes: int  # workgroup memory used
    prefetch: bool = False  # K and V fetched into registers a phase ahead: at most 4 vec4 a thread, keys <= rows


def flash_storage_bytes(rows: int, keys: int, head_dim: int) -> int:
    """Workgroup memory of attention_full_flash.wgsl: q tile, K/V tile (rows padded to an odd count of vec4),
    scores, one f32 per row and one per row and softmax part."""
    padded = (head_dim // 4) | 1
    parts = min(4, head_dim // 16)
    return 16 * (rows * padded + keys * padded + rows * keys // 4) + 4 * rows * (1 + parts)


def flash_plan(n: int, heads: int, head_dim: int, limits: DeviceLimits) -> FlashPlan | None:
    """Rows per workgroup and keys per chunk for attention_full_flash.wgsl on a device with these limits, or
    None where the kernel does not apply (head_dim not a multiple of 4 or under 16, or no block fits). The most
    rows whose block still takes FLASH_MIN_KEYS keys a chunk, else the most keys a chunk; keys a multiple of 4, at
    most FLASH_MAX_KEYS and at most n rounded up to 4; prefetching where the keys allow it."""
    if head_dim % 4 or head_dim < 16 or n < 1 or heads < 1:
        return None
    cap = min(FLASH_MAX_KEYS, -(-n // 4) * 4)
    fits = []
    for rows in FLASH_ROWS:
        threads = rows // 4 * head_dim // 4
        if threads > limits.max_invocations:
            continue
        keys = cap
        while keys >= 4 and flash_storage_bytes(rows, keys, head_dim) > limits.workgroup_storage_bytes:
            keys -= 4
        if keys >= 4:
            fits.append(FlashPlan(rows, keys, threads, flash_storage_bytes(rows, keys, head_dim), keys <= rows))
    for plan in fits:
        if plan.keys >= min(FLASH_MIN_KEYS, cap):
            return plan
    return max(fits, key=lambda p: p.keys, default=None)


def score_groups(b: ProgramBuilder, n: int, heads: int) -> int:
    """Groups of heads whose n x n scores each fit one binding (and MAX_SCORES_BYTES): the fewest that do."""
    limit = min(MAX_SCORES_BYTES, b.device.limits.max_binding_bytes)
    per_head = 4 * n * n
    if per_head > limit:
        raise ValueError(f"full attention over {n} rows needs {per_head >> 20} MiB of scores per head, more than "
                         f"the {limit >> 20} MiB a binding holds")
    group = min(heads, limit // per_head)
    while heads % group:
        group -= 1
    return heads // group


def attention_full_flash(b: ProgramBuilder, qkv: Tensor, out: Tensor, n: int, heads: int, head_dim: int,
                         scale: float, plan: FlashPlan) -> None:
    """out = attention of the fused q|k|v rows over all n rows in one pass (kernels/attention_full_flash.wgsl):
    one workgroup per block of plan.rows query rows of one head."""
    constants = {"N": n, "HEADS": heads, "D": head_dim, "SCALE": scale, "BR": plan.rows, "KC": plan.keys,
                 "PREFETCH": plan.prefetch}
    b.dispatch("attention_full_flash", constants, [b.step, qkv, out], workgroup_grid(heads * -(-n // plan.rows)))


def full_attention(b: ProgramBuilder, qkv: Tensor, out: Tensor, n: int, heads: int, head_dim: int,
                   scale: float) -> None:
    """out = attention of the fused q|k|v rows over all n rows: in one pass without the n x n scores
    (kernels/attention_full_flash.wgsl) where flash_plan finds a work split within the device's limits and FLASH is
    on, else through the scores (full_attention_scores). Software adapters (lavapipe) take the scores: on a CPU the
    one pass measured slower (tools/perf/full_attention.py)."""
    plan = flash_plan(n, heads, head_dim, b.device.limits) if FLASH and not b.device.is_software else None
    if plan is not None:
        attention_full_flash(b, qkv, out, n, heads, head_dim, scale, plan)
    else:
        full_attention_scores(b, qkv, out, n, heads, head_dim, scale)


def full_attention_scores(b: ProgramBuilder, qkv: Tensor, out: Tensor, n: int, heads: int, head_dim: int,
                          scale: float) -> None:
    """full_attention through the scores. With n a multiple of 4: scores into an activation [group * n, n] by
    register tiles, softmax per row in place, then the values by register tiles (kernels/attention_full_scores.wgsl,
    softmax_rows.wgsl, attention_full_values.wgsl), for each group of heads whose scores fit one binding
    (score_groups); else one pass per (head, row) (kernels/attention_full.wgsl)."""
    constants = {"N": n, "HEADS": heads, "D": head_dim}
    if n % 4:
        b.dispatch("attention_full", constants | {"SCALE": scale}, [b.step, qkv, out],
                   workgroup_grid(-(-n * heads // 64)))
        return
    groups = score_groups(b, n, heads)
    group = heads // groups
    scores = b.activation("scores", (group * n, n))
    blocks = n // 4
    for first in range(0, heads, group):
        part = {"N": n, "HEADS": group, "D": head_dim} | (
            {"ROW_HEADS": heads, "FIRST_HEAD": first} if groups > 1 else {})
        b.dispatch("attention_full_scores", part | {"SCALE": scale}, [b.step, qkv, scores],
                   workgroup_grid(-(-group * blocks * blocks // 64)))
        b.dispatch("softmax_rows", {"ROWS": group * n, "N": n}, [b.step, scores], workgroup_grid(group * n))
        b.dispatch("attention_full_values", part, [b.step, scores, qkv, out],
                   workgroup_grid(-(-group * blocks * (head_dim // 4) // 64)))
