"""Transformer kernels against numpy: rms_norm, norm_rope, qk_norm_rope_store, attention over the
paged KV cache (tokens of several sequences in one step), decode attention doing qk_norm_rope_store's work
(RawQKV: compared bit for bit with the two dispatches), residual_norm, residual_scale_norm, glu_mul, add,
store_tokens, softcap, gather_rows.

Tolerances: these kernels compute in f32 like the numpy reference but sum in another
order, so results agree to a few f32 ulps of the values' magnitude (rtol 1e-5, atol 1e-5).
f16 cache paths are compared with references that round k and v to f16 the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.kv_cache import PAGE_TOKENS, KVPool, rope_table
from gpu.ops import transformer as ops
from gpu.ops.transformer import RawQKV
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.tensor import Tensor

RTOL = ATOL = 1e-5



def _run(ex: Executor, build, step: StepParams, read):
    b = ProgramBuilder(ex, "t")
    build(b)
    return ex.run(b.build(), step, read=read)


def _rms(x: np.ndarray, w: np.ndarray, eps: float) -> np.ndarray:
    x64 = x.astype(np.float64)
    return (x64 / np.sqrt((x64 ** 2).mean(-1, keepdims=True) + eps) * w).astype(np.float32)


@pytest.mark.parametrize("accumulate", [False, True])
def test_rms_norm(ex: Executor, accumulate: bool) -> None:
    rng = np.random.default_rng(0)
    t_max, n, d = 6, 4, 640
    x = rng.standard_normal((t_max, d)).astype(np.float32) * 3
    w = rng.standard_normal(d).astype(np.float32)
    base = rng.standard_normal((t_max, d)).astype(np.float32)
    xt, wt = ex.tensor("x", x.shape, data=x), ex.tensor("w", w.shape, data=w)
    out = ex.tensor("o", x.shape, data=base)
    got, = _run(ex, lambda b: ops.rms_norm(b, xt, wt, out, 1e-6, accumulate=accumulate), StepParams(n, 0), [out])
    want = _rms(x[:n], w, 1e-6) + (base[:n] if accumulate else 0)
    np.testing.assert_allclose(got[:n], want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got[n:], base[n:])  # rows past n_tokens untouched


def test_rms_norm_heads_and_last_row(ex: Executor) -> None:
    rng = np.random.default_rng(1)
    t_max, n, heads, d = 5, 3, 4, 256
    x = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    xt, wt = ex.tensor("x", x.shape, data=x), ex.tensor("w", w.shape, data=w)
    out = ex.tensor("o", x.shape)
    last = ex.tensor("l", (1, heads * d))

    def build(b: ProgramBuilder) -> None:
        ops.rms_norm(b, xt, wt, out, 1e-6, heads=heads)
        ops.rms_norm(b, xt, wt, last, 1e-6, heads=heads, last_row=True)

    got, got_last = _run(ex, build, StepParams(n, 7), [out, last])
    want = _rms(x.reshape(t_max, heads, d), w, 1e-6).reshape(t_max, heads * d)
    np.testing.assert_allclose(got[:n], want[:n], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_last[0], want[n - 1], rtol=RTOL, atol=ATOL)


def _rope_reference(x: np.ndarray, positions: np.ndarray, base: float) -> np.ndarray:
    """HF rotate_half RoPE in float64."""
    d = x.shape[-1]
    inv = 1.0 / base ** (np.arange(0, d, 2) / d)
    ang = positions[:, None] * inv[None, :]
    cos = np.concatenate([np.cos(ang)] * 2, -1)[:, None, :]
    sin = np.concatenate([np.sin(ang)] * 2, -1)[:, None, :]
    rot = np.concatenate([-x[..., d // 2:], x[..., : d // 2]], -1)
    return x * cos + rot * sin


def _rows_table(ex: Executor, t_max: int, positions: list[int], slots: list[int] | None = None):
    """The row table tensor for tokens at these positions (of these slots)."""
    rows = np.zeros((t_max, 4), np.uint32)
    rows[:len(positions), 0] = positions
    rows[:len(positions), 1] = slots if slots is not None else 0
    return ex.tensor("rows", rows.shape, "u32", data=rows)


def test_norm_rope(ex: Executor) -> None:
    rng = np.random.default_rng(2)
    t_max, heads, d, base = 8, 4, 256, 10000.0
    positions = [1000, 3, 1001, 0, 517]  # each row its own position (rows of several sequences)
    n = len(positions)
    x = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    table = rope_table(d, 2048, base)
    xt, wt = ex.tensor("x", x.shape, data=x), ex.tensor("w", w.shape, data=w)
    rt, rows = ex.tensor("rope", table.shape, data=table), _rows_table(ex, t_max, positions)
    got, = _run(ex, lambda b: ops.norm_rope(b, xt, wt, rt, rows, heads, 1e-6), StepParams(n), [xt])
    normed = _rms(x.reshape(t_max, heads, d), w, 1e-6).astype(np.float64)
    want = _rope_reference(normed[:n], np.array(positions, np.float64), base).reshape(n, heads * d)
    # Angles up to ~1000 rad are rounded to f32 (as the reference model does): |error| <= 1e-4.
    np.testing.assert_allclose(got[:n], want, rtol=0, atol=1e-4 * np.abs(want).max())
    np.testing.assert_array_equal(got[n:], x[n:])


def _pool(ex: Executor, width: int, kv_dtype: str, n_ctx: int, lengths: tuple[int, int]) -> tuple[KVPool, int, int]:
    """A pool with two sequences of these lengths whose pages interleave (a, b, a, a, ...)."""
    pages = sum(-(-n // PAGE_TOKENS) for n in lengths) + 1
    pool = KVPool(ex, "c", [width], n_ctx, pages * PAGE_TOKENS, 3, kv_dtype)
    a, b = pool.open_slot(), pool.open_slot()
    pool.reserve(a, min(lengths[0], PAGE_TOKENS))
    pool.reserve(b, lengths[1])
    pool.reserve(a, lengths[0])
    assert (np.diff(pool.pool_rows(a, np.arange(lengths[0]))) != 1).any(), "a's pages should not be contiguous"
    return pool, a, b


def _as_f32(words: np.ndarray, kv_f16: bool) -> np.ndarray:
    return words.view(np.float16).astype(np.float32) if kv_f16 else words.view(np.float32)


def _attention_reference(q, k, v, pos, heads, kv_heads, window, scale, softcap=0.0):
    """q: [n, heads, d]; k, v: [ctx, kv_heads, d] -> [n, heads, d], float64."""
    n, _, d = q.shape
    out = np.zeros((n, heads, d))
    for t in range(n):
        p = pos + t
        lo = max(0, p + 1 - window) if window else 0
        for h in range(heads):
            g = h // (heads // kv_heads)
            s = (k[lo:p + 1, g] @ q[t, h]) * scale
            if softcap:
                s = softcap * np.tanh(s / softcap)
            e = np.exp(s - s.max())
            out[t, h] = (e / e.sum()) @ v[lo:p + 1, g]
    return out


@pytest.mark.parametrize("kv_f16,window,heads,kv_heads,d,splits,softcap", [
    (True, 0, 4, 1, 256, 1, 0.0), (False, 0, 4, 1, 256, 1, 0.0), (True, 50, 8, 2, 128, 1, 0.0),
    (False, 70, 2, 2, 64, 1, 0.0),
    (True, 0, 4, 1, 256, 7, 0.0), (False, 40, 2, 1, 64, 16, 0.0),  # parts of ~29 keys; 40 keys in 3 parts, 13 empty
    (True, 0, 2, 1, 512, 3, 0.0),  # Gemma 4's global head dim: 2 invocations a dim quad for values, 2 for the combine
    (True, 30, 4, 2, 64, 3, 0.5),  # Gemma 2's attention softcap: scores of |s| ~ 1, most bent by a cap of 0.5
    (False, 0, 4, 2, 48, 1, 0.0), (True, 0, 4, 2, 80, 2, 0.0),  # dim quads that do not divide the 32-key chunk
])
@pytest.mark.parametrize("subgroups,key_lanes", [(False, False), (True, False), (False, True)],
                         ids=["workgroup", "subgroup", "key_lanes"])
def test_paged_attention(ex: Executor, kv_f16: bool, window: int, heads: int, kv_heads: int, d: int,
                         splits: int, softcap: float, subgroups: bool, key_lanes: bool) -> None:
    """Six prompt tokens of sequence a (positions 150-155, keys across a page edge and the
    window edge) and one decode token of sequence b (position 200) in one step; attention.wgsl's sums
    through workgroup memory or by subgroup operations, or attention_key_lanes.wgsl (splits: the parts of a row's
    keys, an invocation each; 1: a row group an invocation, 8 a workgroup, key_lane_head_group's heads a row group:
    4 for 4 heads of 64 dims a kv head, 2 for 256, 1 for Gemma 4's 512 or where heads and kv heads are equal)."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("the adapter has no subgroups")
    rng = np.random.default_rng(3)
    n_ctx, t_max, width = 512, 8, kv_heads * d
    kv_dtype = "f16" if kv_f16 else "f32"
    pool, a, b = _pool(ex, width, kv_dtype, n_ctx, (300, 201))
    keys = {s: rng.standard_normal((n, width)).astype(np.float32) for s, n in ((a, 300), (b, 201))}
    values = {s: rng.standard_normal((n, width)).astype(np.float32) for s, n in ((a, 300), (b, 201))}
    pool_rows = pool.n_pages * PAGE_TOKENS
    for cache, per_slot in ((pool.keys[0], keys), (pool.values[0], values)):
        table = np.zeros((pool_rows, width), np.float32)
        for slot, data in per_slot.items():
            if kv_f16:
                data[:] = data.astype(np.float16)
            table[pool.pool_rows(slot, np.arange(len(data)))] = data
        ex.write(cache, table.astype(np.float16).view(np.uint32) if kv_f16 else table.view(np.uint32))
    positions, slots = [150, 151, 152, 153, 154, 155, 200], [a] * 6 + [b]
    n = len(positions)
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    qt, out = ex.tensor("q", q.shape, data=q), ex.tensor("o", (t_max, heads * d))
    rows = _rows_table(ex, t_max, positions, slots)
    scale = 1 / np.sqrt(d)
    got, = _run(ex, lambda bld: ops.attention(bld, qt, pool, 0, rows, out, heads=heads, kv_heads=kv_heads,
                                              head_dim=d, window=window, scale=scale, softcap=softcap,
                                              splits=splits, subgroups=subgroups, key_lanes=key_lanes),
                StepParams(n), [out])
    for t, (p, slot) in enumerate(zip(positions, slots, strict=True)):
        k = keys[slot].reshape(-1, kv_heads, d).astype(np.float64)
        v = values[slot].reshape(-1, kv_heads, d).astype(np.float64)
        want = _attention_reference(q[t:t + 1].reshape(1, heads, d).astype(np.float64), k, v, p, heads, kv_heads,
                                    window, scale, softcap)
        np.testing.assert_allclose(got[t].reshape(1, heads, d), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_array_equal(got[n:], 0)  # rows past n_tokens untouched


def test_key_lane_head_groups() -> None:
    """attention_key_lanes takes as many heads of a kv head together as divide the group, up to 4 and 512 dims."""
    got = {(group, d): ops.key_lane_head_group(group, d) for group in (1, 2, 3, 4, 8) for d in (64, 256, 512)}
    assert got == {(1, 64): 1, (1, 256): 1, (1, 512): 1, (2, 64): 2, (2, 256): 2, (2, 512): 1,
                   (3, 64): 1, (3, 256): 1, (3, 512): 1, (4, 64): 4, (4, 256): 2, (4, 512): 1,
                   (8, 64): 4, (8, 256): 2, (8, 512): 1}


@pytest.mark.parametrize("key_lanes", [False, True], ids=["attention", "key_lanes"])
@pytest.mark.parametrize("splits", [1, 3])
def test_paged_attention_later_keys(ex: Executor, key_lanes: bool, splits: int) -> None:
    """An image's rows (positions 150-155 of sequence a) see the image's later rows too (the row table's w), past
    the causal limit, in attention.wgsl and attention_key_lanes.wgsl alike; the decode row of b stays causal."""
    rng = np.random.default_rng(29)
    heads, kv_heads, d, t_max = 4, 2, 64, 8
    width = kv_heads * d
    pool, a, b = _pool(ex, width, "f32", 512, (300, 201))
    keys = {s: rng.standard_normal((n, width)).astype(np.float32) for s, n in ((a, 300), (b, 201))}
    values = {s: rng.standard_normal((n, width)).astype(np.float32) for s, n in ((a, 300), (b, 201))}
    for cache, per_slot in ((pool.keys[0], keys), (pool.values[0], values)):
        table = np.zeros((pool.n_pages * PAGE_TOKENS, width), np.float32)
        for slot, data in per_slot.items():
            table[pool.pool_rows(slot, np.arange(len(data)))] = data
        ex.write(cache, table.view(np.uint32))
    positions, slots = [150, 151, 152, 153, 154, 155, 200], [a] * 6 + [b]
    later = [155 - p for p in positions[:6]] + [0]
    table = np.zeros((t_max, 4), np.uint32)
    table[:7, 0], table[:7, 1], table[:7, 3] = positions, slots, later
    rows = ex.tensor("rows", table.shape, "u32", data=table)
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    qt, out = ex.tensor("q", q.shape, data=q), ex.tensor("o", (t_max, heads * d))
    got, = _run(ex, lambda bld: ops.attention(bld, qt, pool, 0, rows, out, heads=heads, kv_heads=kv_heads,
                                              head_dim=d, window=0, scale=0.125, splits=splits,
                                              key_lanes=key_lanes),
                StepParams(7), [out])
    for t, (p, slot, w) in enumerate(zip(positions, slots, later, strict=True)):
        k = keys[slot].reshape(-1, kv_heads, d).astype(np.float64)
        v = values[slot].reshape(-1, kv_heads, d).astype(np.float64)
        want = _attention_reference(q[t:t + 1].reshape(1, heads, d).astype(np.float64), k[:p + w + 1], v[:p + w + 1],
                                    p + w, heads, kv_heads, 0, 0.125)
        np.testing.assert_allclose(got[t].reshape(1, heads, d), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kv_f16", [True, False])
def test_key_lanes_attention_short_rows(ex: Executor, kv_f16: bool) -> None:
    """attention_key_lanes.wgsl on decode rows of 1, 2, 6, 71 and 300 keys (a window of 256 on the last): with 16
    lane parts of at least 4 keys a row, the shortest fill one part and leave 15 empty, the longest fill all 16 with
    parts of unequal length; each row against numpy over the cache as the pool holds it."""
    rng = np.random.default_rng(23)
    heads, kv_heads, d, window = 4, 2, 64, 256
    positions, width = [0, 1, 5, 70, 299], kv_heads * d
    kv_dtype = "f16" if kv_f16 else "f32"
    n, t_max = len(positions), 8
    pool, slots = _decode_pool(ex, width, kv_dtype, positions, seed=24)
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    qt, out = ex.tensor("q", q.shape, data=q), ex.tensor("o", (t_max, heads * d))
    rows = _rows_table(ex, t_max, positions, slots)
    scale = 1 / np.sqrt(d)
    for w in (0, window):
        got, = _run(ex, lambda bld: ops.attention(bld, qt, pool, 0, rows, out, heads=heads, kv_heads=kv_heads,
                                                  head_dim=d, window=w, scale=scale, key_lanes=True),
                    StepParams(n), [out])
        k_all, v_all = (_as_f32(ex.read(cache), kv_f16).reshape(-1, width) for cache in (pool.keys[0], pool.values[0]))
        for t, (p, slot) in enumerate(zip(positions, slots, strict=True)):
            at = pool.pool_rows(slot, np.arange(p + 1))
            k = k_all[at].reshape(-1, kv_heads, d).astype(np.float64)
            v = v_all[at].reshape(-1, kv_heads, d).astype(np.float64)
            want = _attention_reference(q[t:t + 1].reshape(1, heads, d).astype(np.float64), k, v, p, heads, kv_heads,
                                        w, scale)
            np.testing.assert_allclose(got[t].reshape(1, heads, d), want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("activation", ["gelu_tanh", "silu"])
def test_glu_mul_and_add(ex: Executor, activation: str) -> None:
    rng = np.random.default_rng(4)
    t_max, n, d = 4, 3, 2048
    g = (rng.standard_normal((t_max, d)) * 4).astype(np.float32)
    g[0, :4] = [30.0, -30.0, 0.0, 1e-3]  # saturated tanh and the origin
    u = rng.standard_normal((t_max, d)).astype(np.float32)
    gt, ut = ex.tensor("g", g.shape, data=g), ex.tensor("u", u.shape, data=u)
    out, total = ex.tensor("o", g.shape), ex.tensor("s", g.shape)

    def build(b: ProgramBuilder) -> None:
        ops.glu_mul(b, gt, ut, out, activation)
        ops.add(b, gt, ut, total)

    got, got_sum = _run(ex, build, StepParams(n, 0), [out, total])
    g64 = g.astype(np.float64)
    if activation == "silu":
        want = g64 / (1 + np.exp(-g64)) * u
    else:
        want = 0.5 * g64 * (1 + np.tanh(np.sqrt(2 / np.pi) * (g64 + 0.044715 * g64 ** 3))) * u
    np.testing.assert_allclose(got[:n], want[:n], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got_sum[:n], (g + u)[:n], rtol=0, atol=0)


# -- fused kernels and the row-sum variants ---------------------------------------------------
# Each fused kernel is checked against numpy, and against the separate kernels it replaces run on
# the same adapter: with the workgroup-memory row sum (the separate kernels' tree) they do the same
# f32 operations in the same order, so the results must agree bit for bit; the subgroup row sum adds
# in another order, so there they agree to f32 rounding (RTOL, ATOL as above).

REDUCES = [False, True]  # subgroups off (workgroup-memory tree) and on


def _subgroups(ex: Executor, subgroups: bool) -> bool:
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter lacks the subgroup feature")
    return subgroups


def _tolerance(subgroups: bool, atol: float) -> dict[str, float]:
    """Keyword arguments for comparing with the separate kernels: none for exact equality."""
    return {"rtol": RTOL, "atol": atol} if subgroups else {}


def _residual_norm_reference(y, x, w_post, w_next, eps):
    x_new = (x.astype(np.float64) + _rms(y, w_post, eps)).astype(np.float32)
    return x_new, _rms(x_new, w_next, eps)


@pytest.mark.parametrize("subgroups", REDUCES)
@pytest.mark.parametrize("threads", [None, 256, 96])
def test_residual_norm(ex: Executor, subgroups: bool, threads: int | None) -> None:
    """A quad of the row an invocation (160 of them, or 256 with idle ones), and two (96: the second quads of
    the last 64 past the row)."""
    rng = np.random.default_rng(6)
    t_max, n, d = 6, 4, 640
    y = rng.standard_normal((t_max, d)).astype(np.float32) * 5
    x = rng.standard_normal((t_max, d)).astype(np.float32) * 20
    w_post, w_next = (rng.standard_normal(d).astype(np.float32) for _ in range(2))
    yt, wpt, wnt = (ex.tensor(name, a.shape, data=a) for name, a in (("y", y), ("wp", w_post), ("wn", w_next)))
    x_fused, x_split = ex.tensor("xf", x.shape, data=x), ex.tensor("xs", x.shape, data=x)
    h_fused, h_split = ex.tensor("hf", (t_max, d)), ex.tensor("hs", (t_max, d))
    sg = _subgroups(ex, subgroups)

    def build(b: ProgramBuilder) -> None:
        ops.residual_norm(b, yt, wpt, x_fused, wnt, h_fused, 1e-6, subgroups=sg, threads=threads)
        ops.rms_norm(b, yt, wpt, x_split, 1e-6, accumulate=True)
        ops.rms_norm(b, x_split, wnt, h_split, 1e-6)

    gx, gh, sx, sh = _run(ex, build, StepParams(n), [x_fused, h_fused, x_split, h_split])
    want_x, want_h = _residual_norm_reference(y[:n], x[:n], w_post, w_next, 1e-6)
    np.testing.assert_allclose(gx[:n], want_x, rtol=RTOL, atol=ATOL * 20)  # |x| ~ 60: f32 ulps of it
    np.testing.assert_allclose(gh[:n], want_h, rtol=RTOL, atol=ATOL)
    # rms_norm twice adds the squares in another order (strided slices of 64 invocations): equal to f32 rounding
    np.testing.assert_allclose(gx, sx, rtol=RTOL, atol=ATOL * 20)
    np.testing.assert_allclose(gh, sh, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(gx[n:], x[n:])  # rows past n_tokens untouched


@pytest.mark.parametrize("subgroups", REDUCES)
def test_residual_norm_without_post_norm(ex: Executor, subgroups: bool) -> None:
    """post_weight None (a plain residual add: Llama, Qwen, Phi): x += y, then h = rms_norm(x) * w_next."""
    rng = np.random.default_rng(16)
    t_max, n, d = 5, 3, 512
    y = rng.standard_normal((t_max, d)).astype(np.float32) * 5
    x = rng.standard_normal((t_max, d)).astype(np.float32) * 20
    w_next = rng.standard_normal(d).astype(np.float32)
    yt, wnt, xt = (ex.tensor(name, a.shape, data=a) for name, a in (("y", y), ("wn", w_next), ("x", x)))
    h = ex.tensor("h", (t_max, d))
    sg = _subgroups(ex, subgroups)
    got_x, got_h = _run(ex, lambda b: ops.residual_norm(b, yt, None, xt, wnt, h, 1e-6, subgroups=sg), StepParams(n),
                        [xt, h])
    want_x = (x[:n].astype(np.float64) + y[:n]).astype(np.float32)
    np.testing.assert_allclose(got_x[:n], want_x, rtol=RTOL, atol=ATOL * 20)
    np.testing.assert_allclose(got_h[:n], _rms(want_x, w_next, 1e-6), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got_x[n:], x[n:])


@pytest.mark.parametrize("subgroups", REDUCES)
def test_residual_norm_gather(ex: Executor, subgroups: bool) -> None:
    """Only the output rows (the last token of each sequence) are normalised, into h[0..n_out)."""
    rng = np.random.default_rng(16)
    t_max, n, d, r_max, picked = 6, 5, 640, 4, [4, 1]
    y = rng.standard_normal((t_max, d)).astype(np.float32) * 5
    x = rng.standard_normal((t_max, d)).astype(np.float32) * 20
    w_post, w_next = (rng.standard_normal(d).astype(np.float32) for _ in range(2))
    yt, wpt, wnt, xt = (ex.tensor(name, a.shape, data=a)
                        for name, a in (("y", y), ("wp", w_post), ("wn", w_next), ("x", x)))
    out_rows = ex.tensor("out_rows", (r_max,), "u32", data=np.array(picked + [0, 0], np.uint32))
    h = ex.tensor("h", (r_max, d), data=np.full((r_max, d), 7.0, np.float32))
    sg = _subgroups(ex, subgroups)
    gx, gh = _run(ex, lambda b: ops.residual_norm(b, yt, wpt, xt, wnt, h, 1e-6, out_rows=out_rows, subgroups=sg),
                  StepParams(n, n_out=len(picked)), [xt, h])
    want_x, want_h = _residual_norm_reference(y[picked], x[picked], w_post, w_next, 1e-6)
    np.testing.assert_allclose(gx[picked], want_x, rtol=RTOL, atol=ATOL * 20)
    np.testing.assert_allclose(gh[:len(picked)], want_h, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(gh[len(picked):], 7.0)  # rows past n_out untouched
    others = [i for i in range(t_max) if i not in picked]
    np.testing.assert_array_equal(gx[others], x[others])  # x rows not gathered stay stale


def test_store_tokens(ex: Executor) -> None:
    rows = _rows_table(ex, 6, [5, 6, 7, 9, 3], [2, 2, 2, 0, 1])
    sampled = ex.tensor("sampled", (4,), "u32", data=np.array([11, 22, 33, 44], np.uint32))
    out_rows = ex.tensor("out_rows", (4,), "u32", data=np.array([2, 4, 3, 0], np.uint32))
    slot_tokens = ex.tensor("slot_tokens", (4,), "u32", data=np.full(4, 99, np.uint32))
    got, = _run(ex, lambda b: ops.store_tokens(b, sampled, out_rows, rows, slot_tokens), StepParams(5, n_out=3),
                [slot_tokens])
    # out row 0 is token row 2 (slot 2), row 1 is token row 4 (slot 1), row 2 is token row 3 (slot 0)
    assert got.tolist() == [33, 22, 11, 99]


@pytest.mark.parametrize("gather", [False, True])
def test_residual_scale_norm(ex: Executor, gather: bool) -> None:
    """x = (x + rms_norm(y) * w_post) * scale, h = rms_norm(x) * w_next; gathered: the output rows only."""
    rng = np.random.default_rng(17)
    t_max, n, d, picked = 6, 5, 640, [4, 1]
    y = rng.standard_normal((t_max, d)).astype(np.float32) * 5
    x = rng.standard_normal((t_max, d)).astype(np.float32) * 20
    w_post, w_next = (rng.standard_normal(d).astype(np.float32) for _ in range(2))
    scale = np.array([0.75], np.float32)
    yt, wpt, wnt, xt, st = (ex.tensor(name, a.shape, data=a) for name, a in
                            (("y", y), ("wp", w_post), ("wn", w_next), ("x", x), ("s", scale)))
    out_rows = ex.tensor("out_rows", (len(picked),), "u32", data=np.array(picked, np.uint32)) if gather else None
    h = ex.tensor("h", (len(picked) if gather else t_max, d))
    gx, gh = _run(ex, lambda b: ops.residual_scale_norm(b, yt, wpt, xt, st, wnt, h, 1e-6, out_rows=out_rows),
                  StepParams(n, n_out=len(picked)), [xt, h])
    rows = picked if gather else list(range(n))
    want_x = ((x[rows].astype(np.float64) + _rms(y[rows], w_post, 1e-6)) * scale[0]).astype(np.float32)
    np.testing.assert_allclose(gx[rows], want_x, rtol=RTOL, atol=ATOL * 20)  # |x| ~ 60: f32 ulps of it
    np.testing.assert_allclose(gh[:len(rows)], _rms(want_x, w_next, 1e-6), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(gx[n:], x[n:])  # rows past n_tokens untouched


def test_softcap(ex: Executor) -> None:
    """cap * tanh(logits / cap) on the step's n_out rows, in place."""
    rng = np.random.default_rng(18)
    logits = rng.standard_normal((3, 1000)).astype(np.float32) * 40
    lt = ex.tensor("logits", logits.shape, data=logits)
    got, = _run(ex, lambda b: ops.softcap(b, lt, 30.0), StepParams(3, n_out=2), [lt])
    np.testing.assert_allclose(got[:2], 30.0 * np.tanh(logits[:2].astype(np.float64) / 30.0), rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got[2:], logits[2:])


def test_gather_rows(ex: Executor) -> None:
    """dst[r] = src[out_rows[r]] for the step's n_out rows, src[r] for the others; u32 rows as well."""
    rng = np.random.default_rng(19)
    src = rng.integers(0, 1 << 31, (6, 8), dtype=np.uint32)
    st = ex.tensor("src", src.shape, "u32", data=src)
    out_rows = ex.tensor("out_rows", (3,), "u32", data=np.array([5, 2, 0], np.uint32))
    dst = ex.tensor("dst", (3, 8), "u32")
    got, = _run(ex, lambda b: ops.gather_rows(b, st, out_rows, dst), StepParams(6, n_out=2), [dst])
    np.testing.assert_array_equal(got, src[[5, 2, 2]])


@pytest.mark.parametrize("subgroups", REDUCES)
@pytest.mark.parametrize("kv_f16,heads,kv_heads,d,fused", [
    (True, 4, 1, 256, True), (False, 4, 2, 64, False), (True, 2, 2, 36, True), (False, 2, 1, 64, True)])
def test_qk_norm_rope_store(ex: Executor, subgroups: bool, kv_f16: bool, heads: int, kv_heads: int,
                            d: int, fused: bool) -> None:
    """Two tokens of sequence a (positions 1000, 1001) and one of sequence b (position 5) in one step;
    q, k, v as columns of one fused projection output, or as three tensors."""
    rng = np.random.default_rng(7)
    t_max, n_ctx, base = 5, 1024, 10000.0
    width = kv_heads * d
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    k = rng.standard_normal((t_max, width)).astype(np.float32) * 2
    v = rng.standard_normal((t_max, width)).astype(np.float32)
    q_w, k_w = (rng.standard_normal(d).astype(np.float32) for _ in range(2))
    table = rope_table(d, n_ctx, base)
    kv_dtype = "f16" if kv_f16 else "f32"
    pool, a, b = _pool(ex, width, kv_dtype, n_ctx, (1002, 6))
    positions, slots = [1000, 1001, 5], [a, a, b]
    n = len(positions)
    rows = _rows_table(ex, t_max, positions, slots)
    if fused:
        qkv = np.concatenate([q, k, v], axis=1)
        qkv_t = ex.tensor("qkv", qkv.shape, data=qkv)
        sources = [(qkv_t, 0), (qkv_t, heads * d), (qkv_t, heads * d + width)]
    else:
        sources = [(ex.tensor(name, arr.shape, data=arr), 0) for name, arr in (("qf", q), ("kf", k), ("vf", v))]
    q_out = ex.tensor("q_out", q.shape)
    qs, ks = ex.tensor("qs", q.shape, data=q), ex.tensor("ks", k.shape, data=k)
    qwt, kwt, rt = (ex.tensor(name, arr.shape, data=arr) for name, arr in (("qw", q_w), ("kw", k_w), ("rope", table)))
    sg = _subgroups(ex, subgroups)

    def build(bld: ProgramBuilder) -> None:
        ops.qk_norm_rope_store(bld, *sources, qwt, kwt, rt, pool, 0, rows, q_out, heads=heads, kv_heads=kv_heads,
                               eps=1e-6, subgroups=sg)
        ops.norm_rope(bld, qs, qwt, rt, rows, heads, 1e-6)
        ops.norm_rope(bld, ks, kwt, rt, rows, kv_heads, 1e-6)

    got_q, k_split = _run(ex, build, StepParams(n), [q_out, ks])
    k_cache, v_cache = (_as_f32(ex.read(t), kv_f16) for t in (pool.keys[0], pool.values[0]))
    written = np.concatenate([pool.pool_rows(s, np.array([p])) for p, s in zip(positions, slots, strict=True)])
    want_q = _rope_reference(_rms(q.reshape(t_max, heads, d), q_w, 1e-6)[:n].astype(np.float64),
                             np.array(positions, np.float64), base)
    want_k = _rope_reference(_rms(k.reshape(t_max, kv_heads, d), k_w, 1e-6)[:n].astype(np.float64),
                             np.array(positions, np.float64), base)
    # Angles up to ~1000 rad are rounded to f32 (as the reference model does): |error| <= 1e-4;
    # the f16 cache adds f16 rounding (2^-11 relative).
    np.testing.assert_allclose(got_q[:n], want_q.reshape(n, -1), rtol=0, atol=1e-4 * np.abs(want_q).max())
    k_tol = (1e-3 if kv_f16 else 1e-4) * np.abs(want_k).max()
    np.testing.assert_allclose(k_cache[written], want_k.reshape(n, -1), rtol=0, atol=k_tol)
    want_v = v[:n].astype(np.float16).astype(np.float32) if kv_f16 else v[:n]
    np.testing.assert_array_equal(v_cache[written], want_v)
    # The same f32 operations as norm_rope; the sources left as they were; no other cache row written.
    same = np.testing.assert_allclose if sg else np.testing.assert_array_equal
    same(got_q[:n], ex.read(qs)[:n], **_tolerance(sg, ATOL))
    k_ref = k_split[:n].astype(np.float16).astype(np.float32) if kv_f16 else k_split[:n]
    # f16 words of the two paths may round apart by one f16 ulp where the f32 values differ by an ulp
    same(k_cache[written], k_ref, **_tolerance(sg, (2e-3 if kv_f16 else ATOL) * np.abs(k_ref).max()))
    np.testing.assert_array_equal(ex.read(sources[1][0]), qkv if fused else k)  # sources only read
    others = np.setdiff1d(np.arange(len(k_cache)), written)
    assert not k_cache[others].any() and not v_cache[others].any()


@pytest.mark.parametrize("subgroups", REDUCES)
def test_qk_rope_store_without_norms(ex: Executor, subgroups: bool) -> None:
    """qk_norm False (Llama, Qwen 2): q and k rotated as they come, k and v stored; the weights are not read."""
    rng = np.random.default_rng(19)
    t_max, n_ctx, base, heads, kv_heads, d = 3, 1024, 10000.0, 4, 2, 32
    width = kv_heads * d
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    k = rng.standard_normal((t_max, width)).astype(np.float32) * 2
    v = rng.standard_normal((t_max, width)).astype(np.float32)
    qkv = np.concatenate([q, k, v], axis=1)
    qkv_t = ex.tensor("qkv", qkv.shape, data=qkv)
    sources = [(qkv_t, 0), (qkv_t, heads * d), (qkv_t, heads * d + width)]
    nan = ex.tensor("nan", (d,), data=np.full(d, np.nan, np.float32))  # must not reach the output
    pool, a, _ = _pool(ex, width, "f32", n_ctx, (1002, 6))
    positions = [1000, 1001]
    rows = _rows_table(ex, t_max, positions, [a, a])
    q_out = ex.tensor("q_out", q.shape)
    rt = ex.tensor("rope", (n_ctx, d), data=rope_table(d, n_ctx, base))
    sg = _subgroups(ex, subgroups)
    got_q, = _run(ex, lambda b: ops.qk_norm_rope_store(b, *sources, nan, nan, rt, pool, 0, rows, q_out, heads=heads,
                                                       kv_heads=kv_heads, eps=1e-6, subgroups=sg, qk_norm=False),
                  StepParams(len(positions)), [q_out])
    pos = np.array(positions, np.float64)
    want_q = _rope_reference(q[:2].reshape(2, heads, d).astype(np.float64), pos, base).reshape(2, -1)
    want_k = _rope_reference(k[:2].reshape(2, kv_heads, d).astype(np.float64), pos, base).reshape(2, -1)
    # angles of ~1000 rad rounded to f32, as in test_qk_norm_rope_store
    np.testing.assert_allclose(got_q[:2], want_q, rtol=0, atol=1e-4 * np.abs(want_q).max())
    written = np.concatenate([pool.pool_rows(a, np.array([p])) for p in positions])
    k_cache, v_cache = (_as_f32(ex.read(t), False) for t in (pool.keys[0], pool.values[0]))
    np.testing.assert_allclose(k_cache[written], want_k, rtol=0, atol=1e-4 * np.abs(want_k).max())
    np.testing.assert_array_equal(v_cache[written], v[:2])


def _decode_pool(ex: Executor, width: int, kv_dtype: str, positions: list[int], seed: int) -> tuple[KVPool, list[int]]:
    """A pool with one sequence per position, reserved through it, their pages interleaved, and random words in
    every row (those at the positions too, which the step overwrites): the same pool for the same arguments."""
    pages = sum(-(-(p + 1) // PAGE_TOKENS) for p in positions) + 1
    pool = KVPool(ex, "c", [width], 512, pages * PAGE_TOKENS, len(positions), kv_dtype)
    slots = [pool.open_slot() for _ in positions]
    for slot, p in zip(slots, positions, strict=True):
        pool.reserve(slot, min(p + 1, PAGE_TOKENS))
    for slot, p in zip(slots, positions, strict=True):
        pool.reserve(slot, p + 1)
    rng = np.random.default_rng(seed)
    for cache in (pool.keys[0], pool.values[0]):
        table = rng.standard_normal((pool.n_pages * PAGE_TOKENS, width)).astype(np.float32)
        ex.write(cache, table.astype(np.float16).view(np.uint32) if kv_dtype == "f16" else table.view(np.uint32))
    return pool, slots


def test_f16_rounded(ex: Executor) -> None:
    """common/f16_rounded.wgsl against numpy's float16 conversion (round to nearest, ties to even): values
    across f16's range, its subnormals, the ties halfway between neighbouring f16 values in both ranges,
    signed zeros and the largest f16. Exact: both give the same f16 value."""
    import wgpu

    from gpu.shaders import KERNEL_DIR

    rng = np.random.default_rng(5)
    normal = np.float16(np.clip(rng.standard_normal(2048) * np.exp2(rng.uniform(-14, 15, 2048)), -6e4, 6e4))
    subnormal = np.arange(-1100, 1100, dtype=np.int32) * np.float32(2.0 ** -24)
    neighbours = np.float16(np.concatenate([normal, [6.1035e-05, 1.0, 2048.0, 65472.0]]))
    above = np.nextafter(neighbours.astype(np.float16), np.float16(np.inf)).astype(np.float32)
    ties = (neighbours.astype(np.float32) + above) / 2   # exact in f32
    x = np.concatenate([rng.standard_normal(4096).astype(np.float32) * np.exp2(rng.uniform(-30, 15, 4096)),
                        normal.astype(np.float32), subnormal, ties, subnormal[::7] + np.float32(2.0 ** -25),
                        [0.0, -0.0, 65504.0, -65504.0, 65519.0]]).astype(np.float32)
    x = x[np.abs(x) < 65519.5]   # from 65520 on the cache holds inf; f16_rounded does not go there
    source = (KERNEL_DIR / "common/f16_rounded.wgsl").read_text() + """
@group(0) @binding(0) var<storage, read> x: array<f32>;
@group(0) @binding(1) var<storage, read_write> y: array<f32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < arrayLength(&x)) { y[id.x] = f16_rounded(x[id.x]); }
}"""
    device = ex.device.device
    pipeline = device.create_compute_pipeline(
        layout="auto", compute={"module": device.create_shader_module(code=source), "entry_point": "main"})
    x_buf = device.create_buffer_with_data(data=x.tobytes(), usage=wgpu.BufferUsage.STORAGE)
    y_buf = device.create_buffer(size=x.nbytes, usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
    bind = device.create_bind_group(layout=pipeline.get_bind_group_layout(0), entries=[
        {"binding": 0, "resource": {"buffer": x_buf}}, {"binding": 1, "resource": {"buffer": y_buf}}])
    encoder = device.create_command_encoder()
    compute = encoder.begin_compute_pass()
    compute.set_pipeline(pipeline)
    compute.set_bind_group(0, bind)
    compute.dispatch_workgroups(-(-len(x) // 64))
    compute.end()
    device.queue.submit([encoder.finish()])
    got = np.frombuffer(device.queue.read_buffer(y_buf), np.float32)
    want = x.astype(np.float16).astype(np.float32)
    np.testing.assert_array_equal(got, want)
    assert (np.signbit(got) == np.signbit(want)).all()


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize("kv_f16,window,kv_heads,d,splits,fused,qk_norm", [
    (True, 0, 1, 256, 5, True, True), (False, 50, 2, 64, 5, True, True), (True, 50, 1, 64, 1, False, True),
    (False, 0, 2, 128, 1, True, True), (True, 0, 2, 64, 5, True, False)])
def test_attention_raw_qkv(ex: Executor, kv_f16: bool, window: int, kv_heads: int,
                           d: int, splits: int, fused: bool, qk_norm: bool, subgroups: bool) -> None:
    """Decode rows of four sequences (positions 128, a page's first; 127, its last; 200; 5, whose 6 keys leave
    some of 5 parts empty): attention taking q, k, v from the projection (RawQKV, its prologue doing
    qk_norm_rope_store's work) gives the same bits as qk_norm_rope_store (with the same reduction variant,
    whose order of sums the prologue follows) then attention, and leaves the same cache. The same f32
    operations in the same order, with k(p) and v(p) rounded as the cache rounds them, so equality is exact."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("the adapter has no subgroups")
    rng = np.random.default_rng(17)
    heads, t_max, positions = 4, 6, [128, 127, 200, 5]
    n, width, kv_dtype = len(positions), kv_heads * d, "f16" if kv_f16 else "f32"
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    k = rng.standard_normal((t_max, width)).astype(np.float32) * 2
    v = rng.standard_normal((t_max, width)).astype(np.float32)
    if fused:
        qkv = ex.tensor("qkv", (t_max, heads * d + 2 * width), data=np.concatenate([q, k, v], axis=1))
        sources = [(qkv, 0), (qkv, heads * d), (qkv, heads * d + width)]
    else:
        sources = [(ex.tensor(name, arr.shape, data=arr), 0) for name, arr in (("qf", q), ("kf", k), ("vf", v))]
    q_w, k_w = (ex.tensor(name, (d,), data=rng.standard_normal(d).astype(np.float32)) for name in ("qw", "kw"))
    table = ex.tensor("rope", (512, d), data=rope_table(d, 512, 10000.0))
    results = []
    for fold in (False, True):
        pool, slots = _decode_pool(ex, width, kv_dtype, positions, seed=18)
        initial_k = ex.read(pool.keys[0])
        rows = _rows_table(ex, t_max, positions, slots)
        b = ProgramBuilder(ex, "t")
        if fold:
            q_in: Tensor | RawQKV = RawQKV(*sources, q_w, k_w, table, 1e-6, qk_norm)
        else:
            q_in = ex.tensor("q_out", (t_max, heads * d))
            ops.qk_norm_rope_store(b, *sources, q_w, k_w, table, pool, 0, rows, q_in, heads=heads, kv_heads=kv_heads,
                                   eps=1e-6, subgroups=subgroups, qk_norm=qk_norm)
        out = ex.tensor("out", (t_max, heads * d), data=np.zeros((t_max, heads * d), np.float32))
        ops.attention(b, q_in, pool, 0, rows, out, heads=heads, kv_heads=kv_heads, head_dim=d, window=window,
                      scale=1 / np.sqrt(d), splits=splits, subgroups=subgroups)
        got, = ex.run(b.build(), StepParams(n), read=[out])
        got = got[:n]  # rows past n_tokens are not written
        results.append((got, ex.read(pool.keys[0]), ex.read(pool.values[0])))
    (want, want_k, want_v), (got, got_k, got_v) = results
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_k, want_k)
    np.testing.assert_array_equal(got_v, want_v)
    written = np.concatenate([pool.pool_rows(s, np.array([p])) for p, s in zip(positions, slots, strict=True)])
    assert (got_k[written] != initial_k[written]).any(axis=1).all()  # each row's k(p) was stored over the noise
