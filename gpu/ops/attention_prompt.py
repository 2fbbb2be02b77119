"""Host side of prompt attention (kernels/attention_prompt.wgsl): causal attention of a prefill chunk
over the paged KV cache, with the same inputs and outputs as `gpu.ops.transformer.attention`.

attention.wgsl gives each (token, head) row its own workgroup, which reads the row's keys and values
from memory: a 512-token prompt reads every key hundreds of times. attention_prompt gives a workgroup
a block of R query rows (the heads of one kv head for R / GROUP tokens) and one part of their keys;
each chunk of keys is read into workgroup memory once for the block, and each row's output lives in
the registers of its TPR = head_dim / 32 threads. For decode steps (one token per sequence, rows of
different sequences in a block) it would walk each sequence's keys in turn: keep attention.wgsl there.

Variants and tunables (PromptConfig): the row sums through subgroup shuffles where the adapter's
subgroups hold a row's TPR threads, else through workgroup memory; PAIRS, each thread holding 16 dims
of two rows (TPR = head_dim / 16) so that every workgroup-memory read feeds twice the multiply-adds
(GPUs with wide enough subgroups); threads per workgroup (WG); keys per chunk (KC, bounded by workgroup
memory and by four vec4 loads per thread); SPLITS, the parts a block's keys may be cut into (each at
least MIN_PART keys), merged by attention/prompt_combine.wgsl. Head dims other than 32, 64, 128, 256
or 512 fall back to attention.wgsl. tools/perf/attention.py compares it with attention.wgsl.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpu.device import Device
from gpu.kv_cache import KVPool
from gpu.ops import transformer
from gpu.program import ProgramBuilder, workgroup_grid
from gpu.tensor import Tensor

HEAD_DIMS = (32, 64, 128, 256, 512)  # D / 32 threads per row: a power of two
DIMS_PER_THREAD = 32  # q and accumulator values per thread (8 named vec4 each)
# GPU defaults: the variant closest to the best one across Gemma 3's prompt shapes in a sweep of
# tools/perf/attention.py (subgroup sums, pairs, threads, keys per chunk and splits).
GPU_THREADS = 128
GPU_KEYS = 8  # keys per chunk: 2 x 8 x 256 x 4 bytes = 16 KiB of workgroup memory at D = 256
GPU_SPLITS = 4  # fixed: a part never has fewer than MIN_PART keys, so short ranges use fewer
SOFTWARE_THREADS = 128
SOFTWARE_KEYS = 8
MIN_PART = 64  # fewest keys per part: shorter ranges get fewer parts (each part writes D + 4 floats a row)
MAX_LOADS_PER_THREAD = 4  # the kernel's named prefetch registers (vec4 of K and of V each)
COMBINE_THREADS = 256


@dataclass(frozen=True)
class PromptConfig:
    """One variant of attention_prompt.wgsl."""

    reduce: str  # "subgroup" or "workgroup" (attention/prompt_<reduce>.wgsl)
    threads: int  # WG: threads per workgroup, a multiple of head_dim / 32
    keys: int  # KC: keys per chunk, a multiple of 4
    splits: int  # SPLITS: most parts a block's keys are cut into
    min_part: int = MIN_PART
    pairs: bool = False  # PAIRS: each thread holds 16 dims of two rows instead of 32 of one

    def row_threads(self, head_dim: int) -> int:
        """Threads per query row (TPR)."""
        return head_dim * (2 if self.pairs else 1) // DIMS_PER_THREAD

    def rows(self, head_dim: int) -> int:
        """Query rows per workgroup."""
        return self.threads // self.row_threads(head_dim) * (2 if self.pairs else 1)


def supports(head_dim: int, heads: int, kv_heads: int) -> bool:
    """True where attention_prompt.wgsl runs these shapes (else attention_prompt falls back)."""
    return head_dim in HEAD_DIMS and heads % kv_heads == 0


# Subgroup sizes by PCI vendor: NVIDIA's are always 32; AMD's 32 or 64; Apple's 32. wgpu reports a
# minimum of 4 for all of them (seen on an H100), so the vendor is a better guide where it is known.
_VENDOR_MIN_SUBGROUP = {0x10DE: 32, 0x1002: 32, 0x106B: 32}


def _min_subgroup(device: Device) -> int:
    """The adapter's smallest subgroup size (0 when it does not say)."""
    info = device.adapter.info
    if info.get("vendor_id") in _VENDOR_MIN_SUBGROUP:
        return _VENDOR_MIN_SUBGROUP[info["vendor_id"]]
    # wgpu-py 0.32 spells the key "stackgroup_min_size"; later versions may fix it
    return int(info.get("subgroup_min_size", info.get("stackgroup_min_size", 0)) or 0)


def choose_reduce(device: Device, head_dim: int, subgroups: bool | None = None, pairs: bool = False) -> str:
    """Subgroup shuffles where the adapter has them and its subgroups hold a row's threads."""
    tpr = head_dim * (2 if pairs else 1) // DIMS_PER_THREAD
    if subgroups is None:
        subgroups = device.has("subgroup") and _min_subgroup(device) >= tpr
    elif subgroups and _min_subgroup(device) < tpr:
        raise ValueError(f"subgroups of {_min_subgroup(device)} cannot hold the {tpr} threads of a row")
    return device.reduction(subgroups)


def prompt_config(
    device: Device, *, head_dim: int, kv_f16: bool, t_max: int, heads: int, kv_heads: int,
    threads: int | None = None, keys: int | None = None, splits: int | None = None, subgroups: bool | None = None,
    pairs: bool | None = None,
) -> PromptConfig:
    """The variant for these shapes on this device; any of threads, keys, splits, pairs may be forced."""
    if pairs is None:  # pairs need subgroups wide enough for the row's 2 D / 32 threads
        pairs = (not device.is_software and subgroups is not False
                 and choose_reduce(device, head_dim, None, True) == "subgroup")
    reduce = choose_reduce(device, head_dim, subgroups, pairs)
    threads = threads or (SOFTWARE_THREADS if device.is_software else GPU_THREADS)
    tpr = head_dim * (2 if pairs else 1) // DIMS_PER_THREAD
    if threads % tpr or threads > device.limits.max_invocations:
        raise ValueError(f"{threads} threads cannot hold rows of {tpr} threads on {device.name}")
    words = head_dim // (8 if kv_f16 else 4)  # vec4 words per cache row of one head
    reduce_bytes = 16 * threads if reduce == "workgroup" else 0
    # largest multiple of 4 that fits the prefetch registers and workgroup memory (two f32 tiles)
    fit = min(MAX_LOADS_PER_THREAD * threads // words,
              (device.limits.workgroup_storage_bytes - reduce_bytes) // (2 * 4 * head_dim))
    keys = keys or min(SOFTWARE_KEYS if device.is_software else GPU_KEYS, fit // 4 * 4)
    if keys < 4 or keys % 4 or keys > fit:
        raise ValueError(f"{keys} keys per chunk do not fit (at most {fit}) for head_dim {head_dim}")
    if splits is None:
        splits = 1 if device.is_software else GPU_SPLITS
    return PromptConfig(reduce, threads, keys, splits, MIN_PART, pairs)


def attention_prompt(
    b: ProgramBuilder, q: Tensor, pool: KVPool, layer: int, rows: Tensor, out: Tensor, *,
    heads: int, kv_heads: int, head_dim: int, window: int, scale: float, softcap: float = 0.0,
    config: PromptConfig | None = None, subgroups: bool | None = None, later_keys: bool = True,
) -> None:
    """Causal attention of the step's queries (q: [T, heads * head_dim]) over their sequences' keys in
    the layer's paged cache, into out ([T, heads * head_dim]); rows is the row table. Arguments as
    `transformer.attention`; config forces a variant (tests, benchmarks)."""
    if not supports(head_dim, heads, kv_heads):
        transformer.attention(b, q, pool, layer, rows, out, heads=heads, kv_heads=kv_heads, head_dim=head_dim,
                              window=window, scale=scale, softcap=softcap, later_keys=later_keys)
        return
    t_max = q.shape[0]
    if config is None:
        config = prompt_config(b.device, head_dim=head_dim, kv_f16=pool.f16, t_max=t_max, heads=heads,
                               kv_heads=kv_heads, subgroups=subgroups)
    constants = {"D": head_dim, "HEADS": heads, "KV_HEADS": kv_heads, "WINDOW": window, "SCALE": scale,
                 "KV_F16": pool.f16, "WG": config.threads, "KC": config.keys, "SPLITS": config.splits,
                 "MIN_PART": config.min_part, "PAIRS": config.pairs, "T_MAX": t_max, "REDUCE": config.reduce,
                 "PAGE_TOKENS": pool.page_tokens, "MAX_PAGES": pool.max_pages}
    if softcap:
        constants["SOFTCAP"] = softcap
    if not later_keys:  # named only off its default, so that other pipelines keep their keys
        constants["LATER_KEYS"] = False
    blocks = math.ceil(t_max * (heads // kv_heads) / config.rows(head_dim)) * kv_heads
    cache = [pool.keys[layer], pool.values[layer]]
    if config.splits == 1:
        b.dispatch("attention_prompt", constants, [b.step, q, *cache, out, rows, pool.page_table],
                   workgroup_grid(blocks))
        return
    # scratch: each (row, part)'s accumulator [D], then its (max, sum, -, -)
    parts = t_max * heads * config.splits
    scratch = b.activation("attention_prompt_parts", (parts * (head_dim + 4),))
    b.dispatch("attention_prompt", constants, [b.step, q, *cache, scratch, rows, pool.page_table],
               workgroup_grid(blocks * config.splits))
    b.dispatch("attention/prompt_combine", {"D": head_dim, "HEADS": heads, "SPLITS": config.splits, "T_MAX": t_max},
               [b.step, scratch, out], workgroup_grid(math.ceil(t_max * heads * head_dim // 4 / COMBINE_THREADS)))
