"""Encoder kernels against numpy: layer_norm (LayerNorm, RMSNorm), bias_add, gelu (erf, tanh, gated),
encoder_attention (packed sequences, fused QKV, grouped heads, sliding window), qk_norm_rope, pool, l2_normalize.

Tolerances: the kernels compute in f32 and the references in float64; sums run in another order,
so results agree to a few f32 ulps of the values' magnitude (rtol 1e-5, atol 1e-5), except where
a row sum over hundreds of values meets cancellation (the LayerNorm mean): atol 2e-5 there.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpu.ops import encoder as ops
from gpu.program import Executor, ProgramBuilder, StepParams

RTOL = ATOL = 1e-5



def _run(ex: Executor, build, n_tokens: int, read):
    b = ProgramBuilder(ex, "t")
    build(b)
    return ex.run(b.build(), StepParams(n_tokens=n_tokens), read=read)


def _subgroups(ex: Executor, subgroups: bool) -> bool:
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter lacks the subgroup feature")
    return subgroups


def _spans(lengths: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(spans [T, 2], seqs [B, 2]) of sequences packed one after another."""
    ends = np.cumsum(lengths)
    starts = ends - np.asarray(lengths)
    seqs = np.stack([starts, ends], 1).astype(np.uint32)
    spans = np.repeat(seqs, lengths, axis=0)
    return spans, seqs


@pytest.mark.parametrize("subgroups", [False, True])
@pytest.mark.parametrize("variant", ["layer", "layer_bias_residual", "rms_accumulate"])
def test_layer_norm(ex: Executor, variant: str, subgroups: bool) -> None:
    subgroups = _subgroups(ex, subgroups)
    rng = np.random.default_rng(0)
    t_max, n, d = 7, 5, 384
    x = (rng.standard_normal((t_max, d)) * 2 + 0.5).astype(np.float32)
    res = rng.standard_normal((t_max, d)).astype(np.float32)
    bias, gamma, beta = (rng.standard_normal(d).astype(np.float32) for _ in range(3))
    base = rng.standard_normal((t_max, d)).astype(np.float32)
    tx, tres, tb, tg, tbeta = (ex.tensor(f"i{i}", a.shape, data=a) for i, a in enumerate((x, res, bias, gamma, beta)))
    out = ex.tensor("o", x.shape, data=base)
    rms = variant.startswith("rms")
    extra = {"bias": tb, "residual": tres} if variant == "layer_bias_residual" else {}

    def build(b: ProgramBuilder) -> None:
        ops.layer_norm(b, tx, tg, out, 1e-12 if not rms else 1e-6, beta=None if rms else tbeta, rms=rms,
                       accumulate=rms, subgroups=subgroups, **extra)

    got, = _run(ex, build, n, [out])
    v = x.astype(np.float64) + (bias + res if extra else 0)
    if rms:
        want = v / np.sqrt((v ** 2).mean(-1, keepdims=True) + 1e-6) * gamma + base
    else:
        c = v - v.mean(-1, keepdims=True)
        want = c / np.sqrt((c ** 2).mean(-1, keepdims=True) + 1e-12) * gamma + beta
    np.testing.assert_allclose(got[:n], want[:n], rtol=RTOL, atol=2e-5)
    np.testing.assert_array_equal(got[n:], base[n:])  # rows past n_tokens untouched


def test_bias_add(ex: Executor) -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    bias = rng.standard_normal(40).astype(np.float32)
    tx, tb = ex.tensor("x", x.shape, data=x), ex.tensor("b", bias.shape, data=bias)
    got, = _run(ex, lambda b: ops.bias_add(b, tx, tb), 4, [tx])
    np.testing.assert_array_equal(got[:4], x[:4] + bias)  # one f32 addition: exact
    np.testing.assert_array_equal(got[4:], x[4:])


@pytest.mark.parametrize("variant", ["erf_bias", "erf", "erf_gated", "tanh", "tanh_gated"])
def test_gelu(ex: Executor, variant: str) -> None:
    rng = np.random.default_rng(2)
    t, d = 5, 1536
    x = (rng.standard_normal((t, d)) * 3).astype(np.float32)
    x[0, :8] = [0.0, -0.5, 0.9, -1.1, 2.0, -4.0, 7.0, -9.0]  # every branch of erf
    up = rng.standard_normal((t, d)).astype(np.float32)
    bias = rng.standard_normal(d).astype(np.float32)
    tx, tu, tb = (ex.tensor(f"i{i}", a.shape, data=a) for i, a in enumerate((x, up, bias)))
    out = ex.tensor("o", x.shape)
    tanh, gated, biased = variant.startswith("tanh"), variant.endswith("gated"), variant.endswith("bias")
    kwargs = {"up": tu if gated else None, "bias": tb if biased else None, "tanh": tanh}
    got, = _run(ex, lambda b: ops.gelu(b, tx, out, **kwargs), t, [out])
    v = x.astype(np.float64) + (bias if biased else 0)
    if tanh:
        want = 0.5 * v * (1 + np.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v ** 3)))
    else:
        want = 0.5 * v * (1 + np.vectorize(math.erf)(v / math.sqrt(2)))
    want = want * up if gated else want
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def _attention_reference(q, k, v, lengths, heads, kv_heads, d, scale, window):
    out = np.zeros((q.shape[0], heads * d))
    spans, _ = _spans(lengths)
    group = heads // kv_heads
    for t in range(q.shape[0]):
        lo, hi = spans[t]
        if window:
            lo, hi = max(lo, t - window), min(hi, t + window + 1)
        for h in range(heads):
            g = h // group
            qh = q[t, h * d:(h + 1) * d].astype(np.float64)
            kh = k[lo:hi, g * d:(g + 1) * d].astype(np.float64)
            vh = v[lo:hi, g * d:(g + 1) * d].astype(np.float64)
            s = kh @ qh * scale
            p = np.exp(s - s.max())
            out[t, h * d:(h + 1) * d] = p @ vh / p.sum()
    return out


@pytest.mark.parametrize("fused,heads,kv_heads,d,window,lengths", [
    (True, 12, 12, 32, 0, [7, 1, 20, 3]),  # BERT: one QKV tensor, uneven sequences
    (False, 4, 2, 64, 0, [30]),  # grouped heads, one sequence longer than a chunk of keys
    (False, 3, 1, 256, 4, [5, 13]),  # EmbeddingGemma shape, sliding layer
])
def test_attention(ex: Executor, fused: bool, heads: int, kv_heads: int, d: int, window: int,
                   lengths: list[int]) -> None:
    rng = np.random.default_rng(3)
    t = sum(lengths)
    t_max = t + 3  # rows past the step stay untouched
    q = rng.standard_normal((t_max, heads * d)).astype(np.float32)
    k = rng.standard_normal((t_max, kv_heads * d)).astype(np.float32)
    v = rng.standard_normal((t_max, kv_heads * d)).astype(np.float32)
    spans, _ = _spans(lengths)
    tspans = ex.tensor("spans", (t_max, 2), "u32", data=np.vstack([spans, np.zeros((3, 2), np.uint32)]))
    out = ex.tensor("o", (t_max, heads * d))
    scale = 1 / math.sqrt(d)
    kw = {"heads": heads, "kv_heads": kv_heads, "head_dim": d, "scale": scale, "window": window}
    if fused:
        qkv = np.concatenate([q, k, v], 1)
        tq = ex.tensor("qkv", qkv.shape, data=qkv)
        offsets = (0, heads * d, (heads + kv_heads) * d)
        build = lambda b: ops.attention(b, tq, tq, tq, tspans, out, offsets=offsets, **kw)  # noqa: E731
    else:
        tq, tk, tv = (ex.tensor(f"t{i}", a.shape, data=a) for i, a in enumerate((q, k, v)))
        build = lambda b: ops.attention(b, tq, tk, tv, tspans, out, **kw)  # noqa: E731
    got, = _run(ex, build, t, [out])
    want = _attention_reference(q[:t], k[:t], v[:t], lengths, heads, kv_heads, d, scale, window)
    np.testing.assert_allclose(got[:t], want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got[t:], 0)


@pytest.mark.parametrize("subgroups", [False, True])
def test_qk_norm_rope(ex: Executor, subgroups: bool) -> None:
    subgroups = _subgroups(ex, subgroups)
    rng = np.random.default_rng(4)
    t, heads, kv_heads, d = 6, 3, 1, 64
    q = rng.standard_normal((t, heads * d)).astype(np.float32)
    k = rng.standard_normal((t, kv_heads * d)).astype(np.float32)
    qw, kw = (rng.standard_normal(d).astype(np.float32) for _ in range(2))
    positions = np.array([0, 1, 2, 0, 1, 7], np.uint32)
    ang = np.arange(8)[:, None] / 10000.0 ** (np.arange(0, d, 2) / d)[None, :]
    rope = np.concatenate([np.cos(ang), np.sin(ang)], 1).astype(np.float32)
    tq, tk, tqw, tkw, tp, tr = (ex.tensor(f"i{i}", a.shape, a.dtype == np.uint32 and "u32" or "f32", data=a)
                                for i, a in enumerate((q, k, qw, kw, positions, rope)))
    got_q, got_k = _run(ex, lambda b: ops.qk_norm_rope(b, tq, tk, tqw, tkw, tp, tr, heads=heads, kv_heads=kv_heads,
                                                       eps=1e-6, subgroups=subgroups), t, [tq, tk])

    def reference(x, w, n_heads):
        x = x.reshape(t, n_heads, d).astype(np.float64)
        x = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + 1e-6) * w
        cos = rope[positions, None, :d // 2].astype(np.float64)
        cos = np.concatenate([cos, cos], -1)
        sin = rope[positions, None, d // 2:].astype(np.float64)
        sin = np.concatenate([sin, sin], -1)
        rot = np.concatenate([-x[..., d // 2:], x[..., :d // 2]], -1)
        return (x * cos + rot * sin).reshape(t, n_heads * d)

    np.testing.assert_allclose(got_q, reference(q, qw, heads), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_k, reference(k, kw, kv_heads), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("subgroups", [False, True])
@pytest.mark.parametrize("mode", list(ops.POOLING_MODES))
def test_pool_and_normalize(ex: Executor, mode: str, subgroups: bool) -> None:
    subgroups = _subgroups(ex, subgroups)
    rng = np.random.default_rng(5)
    lengths, d, b_max = [3, 1, 6], 384, 5
    t = sum(lengths)
    h = rng.standard_normal((t, d)).astype(np.float32)
    _, seqs = _spans(lengths)
    th = ex.tensor("h", h.shape, data=h)
    tseqs = ex.tensor("seqs", (b_max, 2), "u32", data=np.vstack([seqs, np.zeros((2, 2), np.uint32)]))
    out = ex.tensor("o", (b_max, d), data=np.full((b_max, d), 7, np.float32))

    def build(b: ProgramBuilder) -> None:
        ops.pool(b, th, tseqs, out, mode)
        ops.l2_normalize(b, out, subgroups=subgroups)

    got, = _run(ex, build, t, [out])
    want = []
    for start, end in seqs:
        rows = h[start:end].astype(np.float64)
        want.append({"mean": rows.mean(0), "cls": rows[0], "last": rows[-1], "max": rows.max(0),
                     "mean_sqrt_len": rows.sum(0) / math.sqrt(len(rows))}[mode])
    want = np.array(want)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got[:3], want, rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got[3:], 0)  # empty slots: zeros, and normalising keeps them zero
