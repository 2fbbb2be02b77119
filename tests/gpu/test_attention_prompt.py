"""Prompt attention (gpu/ops/attention_prompt.py, kernels/attention_prompt.wgsl) against numpy.

One step holds tokens of three sequences, as a batched prefill would: a chunk of a prompt whose earlier
positions are already in the pool (chunked prefill), a whole short prompt, and a single token, so that
workgroup blocks straddle sequences; the sequences' pages interleave in the pool. Every variant (subgroup
and workgroup row sums, split and whole key ranges, f16 and f32 cache, sliding window, grouped-query
heads, head dims 64 to 512) is compared with a float64 softmax over the cache's stored values. Image rows
(rows[t].w > 0: a row also sees its image's later rows, Gemma 3's bidirectional attention within an image) are
checked the same way, their reference softmax running to the image's last row.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.kv_cache import KVPool
from gpu.ops.attention_prompt import PromptConfig, attention_prompt, choose_reduce, prompt_config, supports
from gpu.program import Executor, ProgramBuilder, StepParams

PAGE = 16  # small pages: a sequence's keys cross many page edges
# Scores and sums are f32 over at most 256 products, the softmax in base 2 with q prescaled by
# SCALE * log2(e) (a few ulp per score); outputs are averages of N(0, 1) values, so 1e-4 relative
# and 2e-5 absolute leave a margin of about 10x over what f32 rounding gives.
RTOL, ATOL = 1e-4, 2e-5



def _reference(q, k, v, p, heads, kv_heads, window, scale, softcap=0.0, later=0):
    """q: [heads, d]; k, v: [n, kv_heads, d] of one sequence; the token at position p, seeing `later` keys
    past its own -> [heads, d]."""
    lo = max(0, p + 1 - window) if window else 0
    out = np.zeros(q.shape)
    for h in range(heads):
        g = h // (heads // kv_heads)
        s = (k[lo:p + 1 + later, g] @ q[h]) * scale
        if softcap:
            s = softcap * np.tanh(s / softcap)
        e = np.exp(s - s.max())
        out[h] = (e / e.sum()) @ v[lo:p + 1 + later, g]
    return out


def _step(ex: Executor, kv_f16: bool, heads: int, kv_heads: int, d: int, segments: list[tuple[int, int]],
          t_max: int, seed: int = 0, images: Images = ()):
    """A pool holding sequences with keys at positions [0, start + n) for each (start, n) segment, and
    the step's row table and q for tokens [start, start + n) of each, in order; images: (segment, first,
    last) positions of an image's rows, which see up to its last. Returns what to run."""
    rng = np.random.default_rng(seed)
    width = kv_heads * d
    lengths = [start + n for start, n in segments]
    n_pages = sum(-(-n // PAGE) for n in lengths) + 2
    pool = KVPool(ex, "c", [width], max(lengths), n_pages * PAGE, len(segments) + 1,
                  "f16" if kv_f16 else "f32", page_tokens=PAGE)
    slots = [pool.open_slot() for _ in segments]
    for grow in range(1, max(lengths) + 1):  # one page at a time, round robin: the pages interleave
        for slot, n in zip(slots, lengths):
            pool.reserve(slot, min(grow, n))
    keys, values = [], []
    pool_rows = pool.n_pages * PAGE
    k_table, v_table = np.zeros((pool_rows, width), np.float32), np.zeros((pool_rows, width), np.float32)
    for slot, n in zip(slots, lengths):
        kk, vv = (rng.standard_normal((n, width)).astype(np.float32) for _ in range(2))
        if kv_f16:
            kk, vv = kk.astype(np.float16).astype(np.float32), vv.astype(np.float16).astype(np.float32)
        at = pool.pool_rows(slot, np.arange(n))
        k_table[at], v_table[at] = kk, vv
        keys.append(kk.reshape(n, kv_heads, d).astype(np.float64))
        values.append(vv.reshape(n, kv_heads, d).astype(np.float64))
    for cache, table in ((pool.keys[0], k_table), (pool.values[0], v_table)):
        ex.write(cache, table.astype(np.float16).view(np.uint32) if kv_f16 else table.view(np.uint32))
    tokens = [(i, start + j) for i, (start, n) in enumerate(segments) for j in range(n)]
    rows = np.zeros((t_max, 4), np.uint32)
    rows[:len(tokens), 0] = [p for _, p in tokens]
    rows[:len(tokens), 1] = [slots[i] for i, _ in tokens]
    rows[:len(tokens), 3] = [_later(images, i, p) for i, p in tokens]
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    return pool, keys, values, tokens, ex.tensor("rows", rows.shape, "u32", data=rows), q


Images = tuple[tuple[int, int, int], ...]  # (segment, first position, last position) of each image's rows


def _later(images: Images, segment: int, p: int) -> int:
    """The keys past its own that the token at position p of a segment sees: the rest of its image, if any."""
    return next((last - p for i, first, last in images if i == segment and first <= p <= last), 0)


def _check(ex: Executor, *, kv_f16: bool, heads: int, kv_heads: int, d: int, window: int,
           segments: list[tuple[int, int]], t_max: int, config: PromptConfig | None = None,
           softcap: float = 0.0, scale: float | None = None, images: Images = (), later_keys: bool = True) -> None:
    pool, keys, values, tokens, rows, q = _step(ex, kv_f16, heads, kv_heads, d, segments, t_max, images=images)
    qt, out = ex.tensor("q", q.shape, data=q), ex.tensor("o", (t_max, heads * d))
    scale = scale or 1 / np.sqrt(d)
    b = ProgramBuilder(ex, "t")
    attention_prompt(b, qt, pool, 0, rows, out, heads=heads, kv_heads=kv_heads, head_dim=d, window=window,
                     scale=scale, softcap=softcap, config=config, later_keys=later_keys)
    got, = ex.run(b.build(), StepParams(len(tokens)), read=[out])
    for t, (i, p) in enumerate(tokens):
        want = _reference(q[t].reshape(heads, d).astype(np.float64), keys[i], values[i], p, heads, kv_heads,
                          window, scale, softcap, _later(images, i, p) if later_keys else 0)
        np.testing.assert_allclose(got[t].reshape(heads, d), want, rtol=RTOL, atol=ATOL,
                                   err_msg=f"token {t} (sequence {i}, position {p})")
    np.testing.assert_array_equal(got[len(tokens):], 0)  # rows past n_tokens untouched


# (start, n): a chunk at positions 70-92 after 70 cached ones, a whole 13-token prompt, one token at 40
SEGMENTS = [(70, 23), (0, 13), (40, 1)]


@pytest.mark.parametrize("kv_f16", [True, False])
@pytest.mark.parametrize("subgroups", [True, False])
def test_prompt_attention_gemma3_270m_heads(ex: Executor, kv_f16: bool, subgroups: bool) -> None:
    """4 heads over 1 kv head of 256 dims (Gemma 3 270M and 1B), global, whole key ranges."""
    config = prompt_config(ex.device, head_dim=256, kv_f16=kv_f16, t_max=40, heads=4, kv_heads=1, splits=1,
                           subgroups=False)
    if subgroups:
        # The subgroup variant needs subgroups of 8 (D / 32 threads a row). lavapipe reports a minimum of 4,
        # so the op picks the workgroup variant there, but its subgroups are as wide as its SIMD lanes
        # ("256 bits": 8), which lets this test run the subgroup variant at D = 256 anyway.
        wide = choose_reduce(ex.device, 256) == "subgroup" or "256 bits" in ex.device.name
        if not (ex.device.has("subgroup") and wide):
            pytest.skip("the adapter's subgroups cannot hold a row's 8 threads")
        config = PromptConfig("subgroup", config.threads, config.keys, config.splits)
    _check(ex, kv_f16=kv_f16, heads=4, kv_heads=1, d=256, window=0, segments=SEGMENTS, t_max=40, config=config)


@pytest.mark.parametrize("kv_f16,window", [(True, 20), (False, 50)])
def test_prompt_attention_split_keys(ex: Executor, kv_f16: bool, window: int) -> None:
    """Keys cut into up to 4 parts of at least 8 (merged by prompt_combine), sliding window, 8 heads
    over 4 kv heads (Gemma 3 4B's grouping)."""
    base = prompt_config(ex.device, head_dim=256, kv_f16=kv_f16, t_max=40, heads=8, kv_heads=4)
    config = PromptConfig(base.reduce, base.threads, base.keys, splits=4, min_part=8)
    _check(ex, kv_f16=kv_f16, heads=8, kv_heads=4, d=256, window=window, segments=SEGMENTS, t_max=40,
           config=config)


def test_prompt_attention_softcap(ex: Executor) -> None:
    """Gemma 2's attention logit softcap, scores scaled up so that the cap bends most of them (|s| ~ 3 to 10
    against a cap of 5)."""
    _check(ex, kv_f16=True, heads=4, kv_heads=2, d=64, window=30, segments=SEGMENTS, t_max=40, softcap=5.0,
           scale=0.8)


@pytest.mark.parametrize("d,heads,kv_heads,window", [(64, 2, 2, 0), (128, 8, 2, 30), (512, 2, 1, 0)])
def test_prompt_attention_head_dims(ex: Executor, d: int, heads: int, kv_heads: int, window: int) -> None:
    """Other head dims (2 to 16 threads per row) with the default variant, including a split."""
    config = prompt_config(ex.device, head_dim=d, kv_f16=True, t_max=40, heads=heads, kv_heads=kv_heads)
    config = PromptConfig(config.reduce, config.threads, config.keys, splits=2, min_part=16)
    _check(ex, kv_f16=True, heads=heads, kv_heads=kv_heads, d=d, window=window, segments=SEGMENTS, t_max=40,
           config=config)


def test_prompt_attention_default_config_and_fallback(ex: Executor) -> None:
    """The op's own variant choice, and head dims it does not cover going to attention.wgsl."""
    _check(ex, kv_f16=True, heads=4, kv_heads=1, d=256, window=16, segments=[(0, 30)], t_max=32)
    assert not supports(80, 4, 1) and supports(256, 8, 4)
    _check(ex, kv_f16=True, heads=2, kv_heads=1, d=80, window=0, segments=[(5, 6)], t_max=8)


@pytest.mark.parametrize("kv_f16,d,heads,kv_heads,window,splits", [
    (True, 256, 4, 1, 0, 1), (False, 256, 8, 4, 20, 3), (True, 64, 3, 3, 7, 1), (True, 512, 4, 1, 0, 2),
])
def test_prompt_attention_pairs(ex: Executor, kv_f16: bool, d: int, heads: int, kv_heads: int, window: int,
                                splits: int) -> None:
    """Two rows per thread (PAIRS): heads of one token, or (one head per kv head) two tokens a thread."""
    base = prompt_config(ex.device, head_dim=d, kv_f16=kv_f16, t_max=40, heads=heads, kv_heads=kv_heads, pairs=True)
    config = PromptConfig(base.reduce, base.threads, base.keys, splits, min_part=8, pairs=True)
    _check(ex, kv_f16=kv_f16, heads=heads, kv_heads=kv_heads, d=d, window=window, segments=SEGMENTS, t_max=40,
           config=config)


# an image of rows 75-84 in the chunk of the first segment, one of rows 2-9 in the second
IMAGES = ((0, 75, 84), (1, 2, 9))


@pytest.mark.parametrize("splits,pairs", [(1, False), (4, False), (2, True)])
def test_prompt_attention_image_rows(ex: Executor, splits: int, pairs: bool) -> None:
    """An image's rows see each other (rows[t].w), with whole and split key ranges, one or two rows a thread;
    the rows around them stay causal. Gemma 3 4B's grouping, a sliding window wider than the images."""
    base = prompt_config(ex.device, head_dim=256, kv_f16=True, t_max=40, heads=8, kv_heads=4, pairs=pairs)
    config = PromptConfig(base.reduce, base.threads, base.keys, splits, min_part=8, pairs=pairs)
    _check(ex, kv_f16=True, heads=8, kv_heads=4, d=256, window=30, segments=SEGMENTS, t_max=40, config=config,
           images=IMAGES)


@pytest.mark.parametrize("splits,pairs", [(1, False), (4, False), (2, True)])
def test_prompt_attention_image_wider_than_window(ex: Executor, splits: int, pairs: bool) -> None:
    """A sliding window (6) narrower than the images (10 and 8 rows; Gemma 4's 26B and 31B let an image's rows see
    each other on sliding layers, transformers ANDing the window over causal OR image): an image's first rows see
    all its later ones, its later rows' earliest key still trails them by the window."""
    base = prompt_config(ex.device, head_dim=256, kv_f16=True, t_max=40, heads=8, kv_heads=4, pairs=pairs)
    config = PromptConfig(base.reduce, base.threads, base.keys, splits, min_part=8, pairs=pairs)
    _check(ex, kv_f16=True, heads=8, kv_heads=4, d=256, window=6, segments=SEGMENTS, t_max=40, config=config,
           images=IMAGES)
    _check(ex, kv_f16=False, heads=2, kv_heads=1, d=80, window=6, segments=SEGMENTS, t_max=40, images=IMAGES)


def test_prompt_attention_image_rows_fallback(ex: Executor) -> None:
    """Head dims attention_prompt does not cover go to attention.wgsl, whose key parts and their merge
    (attention_combine.wgsl) follow an image's rows too."""
    _check(ex, kv_f16=False, heads=2, kv_heads=1, d=80, window=0, segments=SEGMENTS, t_max=40, images=IMAGES)


@pytest.mark.parametrize("splits", [1, 4])
def test_prompt_attention_image_rows_kept_causal(ex: Executor, splits: int) -> None:
    """LATER_KEYS off (Gemma 4's full layers under an image): the same row table, every row causal."""
    base = prompt_config(ex.device, head_dim=256, kv_f16=True, t_max=40, heads=8, kv_heads=4)
    config = PromptConfig(base.reduce, base.threads, base.keys, splits, min_part=8)
    _check(ex, kv_f16=True, heads=8, kv_heads=4, d=256, window=0, segments=SEGMENTS, t_max=40, config=config,
           images=IMAGES, later_keys=False)


def test_prompt_attention_image_rows_kept_causal_fallback(ex: Executor) -> None:
    """LATER_KEYS off in attention.wgsl and attention_combine.wgsl's key parts (one head: few enough rows that a
    software adapter splits them, so the merge runs)."""
    _check(ex, kv_f16=False, heads=1, kv_heads=1, d=80, window=0, segments=SEGMENTS, t_max=40, images=IMAGES,
           later_keys=False)
