"""Transformer kernels against numpy: rms_norm, norm_rope, kv_store, attention, gelu_mul, add.

Tolerances: these kernels compute in f32 like the numpy reference but sum in another
order, so results agree to a few f32 ulps of the values' magnitude (rtol 1e-5, atol 1e-5).
f16 cache paths are compared with references that round k and v to f16 the same way.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.device import default_device
from gpu.kv_cache import KVCache, rope_table
from gpu.ops import transformer as ops
from gpu.program import Executor, ProgramBuilder, StepParams

RTOL = ATOL = 1e-5


@pytest.fixture(scope="module")
def ex() -> Executor:
    return Executor(default_device())


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


def test_norm_rope(ex: Executor) -> None:
    rng = np.random.default_rng(2)
    t_max, n, heads, d, pos, base = 8, 5, 4, 256, 1000, 10000.0
    x = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    table = rope_table(d, 2048, base)
    xt, wt = ex.tensor("x", x.shape, data=x), ex.tensor("w", w.shape, data=w)
    rt = ex.tensor("rope", table.shape, data=table)
    got, = _run(ex, lambda b: ops.norm_rope(b, xt, wt, rt, heads, 1e-6), StepParams(n, pos), [xt])
    normed = _rms(x.reshape(t_max, heads, d), w, 1e-6).astype(np.float64)
    want = _rope_reference(normed[:n], np.arange(pos, pos + n, dtype=np.float64), base).reshape(n, heads * d)
    # Angles up to ~1000 rad are rounded to f32 (as the reference model does): |error| <= 1e-4.
    np.testing.assert_allclose(got[:n], want, rtol=0, atol=1e-4 * np.abs(want).max())
    np.testing.assert_array_equal(got[n:], x[n:])


def _attention_reference(q, k, v, pos, heads, kv_heads, window, scale):
    """q: [n, heads, d]; k, v: [ctx, kv_heads, d] -> [n, heads, d], float64."""
    n, _, d = q.shape
    out = np.zeros((n, heads, d))
    for t in range(n):
        p = pos + t
        lo = max(0, p + 1 - window) if window else 0
        for h in range(heads):
            g = h // (heads // kv_heads)
            s = (k[lo:p + 1, g] @ q[t, h]) * scale
            e = np.exp(s - s.max())
            out[t, h] = (e / e.sum()) @ v[lo:p + 1, g]
    return out


@pytest.mark.parametrize("kv_f16,window,heads,kv_heads,d,splits", [
    (True, 0, 4, 1, 256, 1), (False, 0, 4, 1, 256, 1), (True, 50, 8, 2, 128, 1), (False, 70, 2, 2, 64, 1),
    (True, 0, 4, 1, 256, 7), (False, 40, 2, 1, 64, 16),  # parts of ~22 keys; 16 parts of <= 3 keys, some empty
])
def test_kv_store_and_attention(ex: Executor, kv_f16: bool, window: int, heads: int, kv_heads: int, d: int,
                                splits: int) -> None:
    rng = np.random.default_rng(3)
    n_ctx, t_max, n, pos = 256, 8, 6, 150  # keys span several 64-key chunks and the window edge
    width = kv_heads * d
    kv_dtype = "f16" if kv_f16 else "f32"
    cache = KVCache.allocate(ex, "c", [width], n_ctx, kv_dtype)
    past_k = rng.standard_normal((n_ctx, width)).astype(np.float32)
    past_v = rng.standard_normal((n_ctx, width)).astype(np.float32)
    if kv_f16:
        past_k, past_v = past_k.astype(np.float16).astype(np.float32), past_v.astype(np.float16).astype(np.float32)
        ex.write(cache.keys[0], past_k.astype(np.float16).view(np.uint32).reshape(n_ctx, width // 2))
        ex.write(cache.values[0], past_v.astype(np.float16).view(np.uint32).reshape(n_ctx, width // 2))
    else:
        ex.write(cache.keys[0], past_k.view(np.uint32))
        ex.write(cache.values[0], past_v.view(np.uint32))
    new_k = rng.standard_normal((t_max, width)).astype(np.float32)
    new_v = rng.standard_normal((t_max, width)).astype(np.float32)
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    kt, vt, qt = (ex.tensor(name, a.shape, data=a) for name, a in (("k", new_k), ("v", new_v), ("q", q)))
    out = ex.tensor("o", (t_max, heads * d))
    scale = 1 / np.sqrt(d)

    def build(b: ProgramBuilder) -> None:
        ops.kv_store(b, kt, vt, cache.keys[0], cache.values[0], kv_f16)
        ops.attention(b, qt, cache.keys[0], cache.values[0], out, heads=heads, kv_heads=kv_heads, head_dim=d,
                      window=window, scale=scale, kv_f16=kv_f16, splits=splits)

    got, = _run(ex, build, StepParams(n, pos), [out])
    k_all, v_all = past_k.copy(), past_v.copy()
    stored_k, stored_v = new_k[:n], new_v[:n]
    if kv_f16:
        stored_k, stored_v = stored_k.astype(np.float16), stored_v.astype(np.float16)
    k_all[pos:pos + n], v_all[pos:pos + n] = stored_k, stored_v
    want = _attention_reference(q[:n].reshape(n, heads, d).astype(np.float64),
                                k_all.reshape(n_ctx, kv_heads, d).astype(np.float64),
                                v_all.reshape(n_ctx, kv_heads, d).astype(np.float64), pos, heads, kv_heads,
                                window, scale)
    np.testing.assert_allclose(got[:n].reshape(n, heads, d), want, rtol=1e-4, atol=1e-5)
    # The cache rows written are exactly the step's rows (rounded to f16 when packed).
    stored = ex.read(cache.keys[0])
    as_f32 = stored.view(np.float16).astype(np.float32) if kv_f16 else stored.view(np.float32)
    np.testing.assert_array_equal(as_f32[pos:pos + n], stored_k.astype(np.float32))


def test_gelu_mul_and_add(ex: Executor) -> None:
    rng = np.random.default_rng(4)
    t_max, n, d = 4, 3, 2048
    g = (rng.standard_normal((t_max, d)) * 4).astype(np.float32)
    g[0, :4] = [30.0, -30.0, 0.0, 1e-3]  # saturated tanh and the origin
    u = rng.standard_normal((t_max, d)).astype(np.float32)
    gt, ut = ex.tensor("g", g.shape, data=g), ex.tensor("u", u.shape, data=u)
    out, total = ex.tensor("o", g.shape), ex.tensor("s", g.shape)

    def build(b: ProgramBuilder) -> None:
        ops.gelu_mul(b, gt, ut, out)
        ops.add(b, gt, ut, total)

    got, got_sum = _run(ex, build, StepParams(n, 0), [out, total])
    g64 = g.astype(np.float64)
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
@pytest.mark.parametrize("last_row", [False, True])
def test_residual_norm(ex: Executor, subgroups: bool, last_row: bool) -> None:
    rng = np.random.default_rng(6)
    t_max, n, d = 6, 4, 640
    y = rng.standard_normal((t_max, d)).astype(np.float32) * 5
    x = rng.standard_normal((t_max, d)).astype(np.float32) * 20
    w_post, w_next = (rng.standard_normal(d).astype(np.float32) for _ in range(2))
    yt, wpt, wnt = (ex.tensor(name, a.shape, data=a) for name, a in (("y", y), ("wp", w_post), ("wn", w_next)))
    x_fused, x_split = ex.tensor("xf", x.shape, data=x), ex.tensor("xs", x.shape, data=x)
    h_rows = 1 if last_row else t_max
    h_fused, h_split = ex.tensor("hf", (h_rows, d)), ex.tensor("hs", (h_rows, d))
    sg = _subgroups(ex, subgroups)

    def build(b: ProgramBuilder) -> None:
        ops.residual_norm(b, yt, wpt, x_fused, wnt, h_fused, 1e-6, last_row=last_row, subgroups=sg)
        ops.rms_norm(b, yt, wpt, x_split, 1e-6, accumulate=True)
        ops.rms_norm(b, x_split, wnt, h_split, 1e-6, last_row=last_row)

    gx, gh, sx, sh = _run(ex, build, StepParams(n, 0), [x_fused, h_fused, x_split, h_split])
    want_x, want_h = _residual_norm_reference(y[:n], x[:n], w_post, w_next, 1e-6)
    rows = slice(n - 1, n) if last_row else slice(0, n)
    np.testing.assert_allclose(gx[rows], want_x[rows], rtol=RTOL, atol=ATOL * 20)  # |x| ~ 60: f32 ulps of it
    np.testing.assert_allclose(gh[:n], want_h[rows], rtol=RTOL, atol=ATOL)
    same = np.testing.assert_allclose if sg else np.testing.assert_array_equal
    same(gx[rows], sx[rows], **_tolerance(sg, ATOL * 20))
    same(gh, sh, **_tolerance(sg, ATOL))
    np.testing.assert_array_equal(gx[n:], x[n:])  # rows past n_tokens untouched
    if last_row:
        np.testing.assert_array_equal(gx[:n - 1], x[:n - 1])  # only the last row is updated


@pytest.mark.parametrize("subgroups", REDUCES)
@pytest.mark.parametrize("kv_f16,heads,kv_heads,d", [(True, 4, 1, 256), (False, 4, 2, 64), (True, 2, 2, 36)])
def test_qk_norm_rope_store(ex: Executor, subgroups: bool, kv_f16: bool, heads: int, kv_heads: int,
                            d: int) -> None:
    rng = np.random.default_rng(7)
    t_max, n, pos, n_ctx, base = 5, 3, 1000, 1024, 10000.0
    width = kv_heads * d
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    k = rng.standard_normal((t_max, width)).astype(np.float32) * 2
    v = rng.standard_normal((t_max, width)).astype(np.float32)
    q_w, k_w = (rng.standard_normal(d).astype(np.float32) for _ in range(2))
    table = rope_table(d, n_ctx, base)
    kv_dtype = "f16" if kv_f16 else "f32"
    fused, split = (KVCache.allocate(ex, name, [width], n_ctx, kv_dtype) for name in ("cf", "cs"))
    qf, qs = ex.tensor("qf", q.shape, data=q), ex.tensor("qs", q.shape, data=q)
    kf, ks = ex.tensor("kf", k.shape, data=k), ex.tensor("ks", k.shape, data=k)
    vt, qwt, kwt, rt = (ex.tensor(name, a.shape, data=a)
                        for name, a in (("v", v), ("qw", q_w), ("kw", k_w), ("rope", table)))
    sg = _subgroups(ex, subgroups)

    def build(b: ProgramBuilder) -> None:
        ops.qk_norm_rope_store(b, qf, kf, vt, qwt, kwt, rt, fused.keys[0], fused.values[0], heads=heads,
                               kv_heads=kv_heads, eps=1e-6, kv_f16=kv_f16, subgroups=sg)
        ops.norm_rope(b, qs, qwt, rt, heads, 1e-6)
        ops.norm_rope(b, ks, kwt, rt, kv_heads, 1e-6)
        ops.kv_store(b, ks, vt, split.keys[0], split.values[0], kv_f16)

    got_q, got_k = _run(ex, build, StepParams(n, pos), [qf, kf])
    caches = [ex.read(t) for t in (fused.keys[0], fused.values[0], split.keys[0], split.values[0])]

    def as_f32(words: np.ndarray) -> np.ndarray:
        return words.view(np.float16).astype(np.float32) if kv_f16 else words.view(np.float32)

    k_cache, v_cache, k_split, v_split = (as_f32(c) for c in caches)
    positions = np.arange(pos, pos + n, dtype=np.float64)
    want_q = _rope_reference(_rms(q.reshape(t_max, heads, d), q_w, 1e-6)[:n].astype(np.float64), positions, base)
    want_k = _rope_reference(_rms(k.reshape(t_max, kv_heads, d), k_w, 1e-6)[:n].astype(np.float64), positions, base)
    # Angles up to ~1000 rad are rounded to f32 (as the reference model does): |error| <= 1e-4;
    # the f16 cache adds f16 rounding (2^-11 relative).
    np.testing.assert_allclose(got_q[:n], want_q.reshape(n, -1), rtol=0, atol=1e-4 * np.abs(want_q).max())
    k_tol = (1e-3 if kv_f16 else 1e-4) * np.abs(want_k).max()
    np.testing.assert_allclose(k_cache[pos:pos + n], want_k.reshape(n, -1), rtol=0, atol=k_tol)
    want_v = v[:n].astype(np.float16).astype(np.float32) if kv_f16 else v[:n]
    np.testing.assert_array_equal(v_cache[pos:pos + n], want_v)
    # The same f32 operations as norm_rope + kv_store; k and v left as they were, other cache rows untouched.
    same = np.testing.assert_allclose if sg else np.testing.assert_array_equal
    same(got_q, ex.read(qs), **_tolerance(sg, ATOL))
    # f16 words of the two paths may round apart by one f16 ulp where the f32 values differ by an ulp
    same(k_cache, k_split, **_tolerance(sg, (2e-3 if kv_f16 else ATOL) * np.abs(k_split).max()))
    np.testing.assert_array_equal(v_cache, v_split)
    np.testing.assert_array_equal(got_k, k)
    assert not k_cache[:pos].any() and not k_cache[pos + n:].any()
