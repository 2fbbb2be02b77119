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
