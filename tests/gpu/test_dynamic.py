"""The params-sized ops (gpu/ops/dynamic.py) against numpy formulas of the PyTorch ops they replace.

Tolerances: f32 sums of a few hundred products agree with float64 numpy to ~1e-5 relative; 2e-4 absolute on
values of order 1 leaves room for the GPU's own summation order and transcendental functions.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops.dynamic import DynamicGraph
from gpu.program import Executor, StepParams
from models.kokoro.noise import source_noise

TOL = 2e-4



def run(ex: Executor, build, *inputs: np.ndarray, out_shapes: list[tuple[int, ...]]) -> list[np.ndarray]:
    g = DynamicGraph(ex, "test")
    ins = [ex.tensor(f"in{i}", a.shape, "u32" if a.dtype == np.uint32 else "f32", data=a) for i, a in enumerate(inputs)]
    outs = [ex.tensor(f"out{i}", s) for i, s in enumerate(out_shapes)]
    build(g, *ins, *outs)
    return ex.run(g.build(), StepParams(1), read=outs)


def conv1d_ref(x, w, b, stride=1, pad=0, dil=1, slope=None):
    if slope is not None:
        x = np.where(x >= 0, x, x * slope)
    c_out, c_in, k = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (pad, pad)))
    t_out = (xp.shape[1] - dil * (k - 1) - 1) // stride + 1
    y = np.zeros((c_out, t_out))
    for j in range(k):
        cols = xp[:, j * dil: j * dil + stride * (t_out - 1) + 1: stride]
        y += w[:, :, j].astype(np.float64) @ cols
    return y + b[:, None]


@pytest.mark.parametrize("c_in,c_out,t,k,stride,pad,dil", [
    (10, 13, 70, 3, 1, 1, 1), (9, 8, 300, 11, 1, 25, 5), (17, 9, 129, 7, 1, 3, 1), (22, 12, 61, 12, 6, 3, 1),
    (1, 1, 40, 3, 2, 1, 1)])
def test_conv1d(ex, c_in, c_out, t, k, stride, pad, dil):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((c_in, t)).astype(np.float32)
    w = rng.standard_normal((c_out, c_in, k)).astype(np.float32) * 0.3
    b = rng.standard_normal(c_out).astype(np.float32)
    ref = conv1d_ref(x, w, b, stride, pad, dil, slope=0.1)
    res = rng.standard_normal(ref.shape).astype(np.float32)
    (y,) = run(ex, lambda g, x_, w_, b_, r_, y_: g.conv1d(x_, w_, b_, y_, c_in=c_in, c_out=c_out, t_in=t, k=k,
                                                           stride=stride, pad=pad, dilation=dil, pre_slope=0.1,
                                                           residual=r_, scale=0.5),
               x, w, b, res, out_shapes=[ref.shape])
    np.testing.assert_allclose(y, 0.5 * (ref + res), atol=TOL * np.sqrt(c_in * k), rtol=1e-4)


def test_conv1d_upsampled_residual(ex):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 40)).astype(np.float32)
    w = rng.standard_normal((5, 6, 3)).astype(np.float32)
    b = np.zeros(5, np.float32)
    r = rng.standard_normal((5, 20)).astype(np.float32)
    (y,) = run(ex, lambda g, x_, w_, b_, r_, y_: g.conv1d(x_, w_, b_, y_, c_in=6, c_out=5, t_in=40, k=3, pad=1,
                                                           residual=r_, r_shift=1), x, w, b, r, out_shapes=[(5, 40)])
    np.testing.assert_allclose(y, conv1d_ref(x, w, b, pad=1) + np.repeat(r, 2, axis=1), atol=1e-3)


def conv_transpose_ref(x, w, b, stride, pad, out_pad=0, groups=1):
    c_in, t = x.shape
    c_out = w.shape[1] * groups
    k = w.shape[2]
    full = np.zeros((c_out, (t - 1) * stride + k + out_pad))
    per = c_in // groups
    for i in range(c_in):
        g = i // per
        for s in range(t):
            for o in range(w.shape[1]):
                full[g * w.shape[1] + o, s * stride: s * stride + k] += x[i, s] * w[i, o]
    return full[:, pad: full.shape[1] - pad] + b[:, None] if pad else full + b[:, None]


@pytest.mark.parametrize("c_in,c_out,t,k,stride,pad,depthwise,reflect", [
    (8, 4, 9, 20, 10, 5, False, False), (6, 3, 7, 12, 6, 3, False, True), (5, 5, 11, 3, 2, 1, True, False),
    (7, 6, 5, 20, 10, 5, False, False)])
def test_conv_transpose1d(ex, c_in, c_out, t, k, stride, pad, depthwise, reflect):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((c_in, t)).astype(np.float32)
    w = rng.standard_normal((c_in, 1 if depthwise else c_out, k)).astype(np.float32)
    b = rng.standard_normal(c_out).astype(np.float32)
    out_pad = 1 if depthwise else 0
    ref = conv_transpose_ref(x, w, b, stride, pad, out_pad, groups=c_in if depthwise else 1)
    if out_pad:  # PyTorch's output_padding adds columns at the end, trimmed by `pad` on the left only
        cols = (t - 1) * stride - 2 * pad + k + 1
        ref = conv_transpose_ref(x, w, b, stride, 0, out_pad, groups=c_in)[:, pad: pad + cols]
    if reflect:
        ref = np.concatenate([ref[:, 1:2], ref], axis=1)
    (y,) = run(ex, lambda g, x_, w_, b_, y_: g.conv_transpose1d(x_, w_, b_, y_, c_in=c_in, c_out=c_out, t_in=t, k=k,
                                                                 stride=stride, pad=pad, output_padding=out_pad,
                                                                 depthwise=depthwise, reflect_left=reflect),
               x, w if depthwise else np.ascontiguousarray(w.transpose(0, 2, 1)), b, out_shapes=[ref.shape])
    np.testing.assert_allclose(y, ref, atol=1e-3)


def test_adain_instance_norm_snake_and_leaky(ex):
    rng = np.random.default_rng(3)
    c, t = 7, 300
    x = (rng.standard_normal((c, t)) * 3 + 1).astype(np.float32)
    h = rng.standard_normal(2 * c).astype(np.float32) * 0.5
    alpha = rng.uniform(0.5, 2, c).astype(np.float32)
    xn = (x - x.mean(1, keepdims=True)) / np.sqrt(x.var(1, keepdims=True) + 1e-5)
    v = (1 + h[:c, None]) * xn + h[c:, None]
    snake = v + (1 / alpha[:, None]) * np.sin(alpha[:, None] * v) ** 2
    leaky = np.where(v >= 0, v, 0.2 * v)

    def build(g, x_, h_, a_, o1, o2):
        g.norm(x_, o1, groups=c, n=t, elem_stride=1, group_stride=t, by_group=True, style_h=h_, channels=c,
               snake_alpha=a_)
        g.norm(x_, o2, groups=c, n=t, elem_stride=1, group_stride=t, by_group=True, style_h=h_, channels=c, leaky=0.2)
    y1, y2 = run(ex, build, x, h, alpha, out_shapes=[(c, t), (c, t)])
    np.testing.assert_allclose(y1, snake, atol=TOL)
    np.testing.assert_allclose(y2, leaky, atol=TOL)


def test_layer_norm_over_channels_of_channel_major(ex):
    rng = np.random.default_rng(4)
    c, t = 12, 9
    x = rng.standard_normal((c, t)).astype(np.float32)
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    xn = (x - x.mean(0)) / np.sqrt(x.var(0) + 1e-5) * gamma[:, None] + beta[:, None]
    (y,) = run(ex, lambda g, x_, g_, b_, o: g.norm(x_, o, groups=t, n=c, elem_stride=t, group_stride=1,
                                                    by_group=False, gamma=g_, beta=b_), x, gamma, beta,
               out_shapes=[(c, t)])
    np.testing.assert_allclose(y, xn, atol=TOL)


def lstm_ref(x, wih, whh, b):
    """One direction of nn.LSTM (gate order i, f, g, o), float64."""
    hid = whh.shape[1]
    h, c, out = np.zeros(hid), np.zeros(hid), []
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for xt in x:
        g = wih @ xt + whh @ h + b
        i, f, gg, o = np.split(g, 4)
        c = sig(f) * c + sig(i) * np.tanh(gg)
        h = sig(o) * np.tanh(c)
        out.append(h)
    return np.array(out)


def test_bidirectional_lstm(ex):
    rng = np.random.default_rng(5)
    t, k, hid = 6, 20, 256
    x = rng.standard_normal((t, k)).astype(np.float32)
    wih = (rng.standard_normal((2, 4 * hid, k)) * 0.2).astype(np.float32)
    whh = (rng.standard_normal((2, 4 * hid, hid)) * 0.05).astype(np.float32)
    b = rng.standard_normal((2, 4 * hid)).astype(np.float32) * 0.1
    fwd = lstm_ref(x, wih[0], whh[0], b[0])
    rev = lstm_ref(x[::-1], wih[1], whh[1], b[1])[::-1]
    ref = np.concatenate([fwd, rev], axis=1)

    def build(g, x_, wih_, b_, whh_, y):
        gx = g.act((t, 8 * hid))
        g.linear(x_, wih_, b_, gx, rows=t, k=k, n=8 * hid)
        g.lstm(gx, whh_, y, steps=t, y_strides=(1, t))  # channel-major out
    (y,) = run(ex, build, x, np.ascontiguousarray(wih.reshape(8 * hid, k).T), b.reshape(-1), whh,
               out_shapes=[(2 * hid, t)])
    np.testing.assert_allclose(y.T, ref, atol=TOL)


def test_stft_matches_numpy_rfft(ex):
    rng = np.random.default_rng(6)
    n = 300
    x = rng.standard_normal(n).astype(np.float32)
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)
    xp = np.pad(x.astype(np.float64), 10, mode="reflect")
    frames = n // 5 + 1
    spec = np.array([np.fft.rfft(xp[f * 5: f * 5 + 20] * win) for f in range(frames)]).T  # [11, frames]
    (y,) = run(ex, lambda g, x_, o: g.stft(x_, o, samples=n), x, out_shapes=[(22, frames)])
    np.testing.assert_allclose(y[:11], np.abs(spec), atol=TOL)
    strong = np.abs(spec) > 1e-2  # angles of near-zero bins are arbitrary
    diff = np.angle(np.exp(1j * (y[11:] - np.angle(spec))))
    assert np.abs(diff[strong]).max() < 1e-3


def test_istft_matches_torch_formula(ex):
    rng = np.random.default_rng(7)
    frames = 40
    x = rng.standard_normal((22, frames)).astype(np.float32) * 0.5
    spec = np.exp(x[:11].astype(np.float64)) * np.exp(1j * np.sin(x[11:].astype(np.float64)))
    win = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(20) / 20)
    total = 20 + 5 * (frames - 1)
    y_full, env = np.zeros(total), np.zeros(total)
    for f in range(frames):
        y_full[f * 5: f * 5 + 20] += np.fft.irfft(spec[:, f], n=20) * win
        env[f * 5: f * 5 + 20] += win ** 2
    ref = (y_full / np.where(env > 1e-11, env, 1))[10: total - 10]
    (y,) = run(ex, lambda g, x_, o: g.istft(x_, o, frames=frames), x, out_shapes=[((frames - 1) * 5,)])
    np.testing.assert_allclose(y, ref, atol=1e-4)


def test_harmonic_source_with_seeded_noise(ex):
    rng = np.random.default_rng(8)
    frames, up = 12, 300
    f0 = np.where(rng.random(frames) > 0.3, rng.uniform(80, 300, frames), 0).astype(np.float32)
    lin = rng.standard_normal(10).astype(np.float32) * 0.5
    # numpy float32 mirror of SineGen + SourceModuleHnNSF (the kernels' operation order)
    m = np.arange(1, 10, dtype=np.float32)
    v = (f0[:, None] * m) / np.float32(24000)
    rad = v - np.floor(v)
    phase = ((np.cumsum(rad.astype(np.float64), axis=0).astype(np.float32) * np.float32(2))
             * np.float32(np.pi)) * np.float32(up)
    j = np.arange(frames * up)
    src = np.maximum(np.float32(1 / up) * (j.astype(np.float32) + np.float32(0.5)) - np.float32(0.5), 0)
    i0 = src.astype(np.int64)
    lam = src - i0
    i1 = np.minimum(i0 + 1, frames - 1)
    ph = phase[i0] * (1 - lam)[:, None] + phase[i1] * lam[:, None]
    uv = (np.repeat(f0, up) > 10).astype(np.float32)[:, None]
    sines = np.sin(ph.astype(np.float64)) * 0.1 * uv
    noise = (uv * 0.003 + (1 - uv) * 0.1 / 3) * source_noise(5, frames * up)
    ref = np.tanh((sines + noise) @ lin[:9] + lin[9])

    def build(g, f0_, lin_, o):
        phase_t = g.act((frames, 9))
        g.harmonic_source(f0_, phase_t, lin_, o, frames=frames, upsample=up, seed=5, noise=True)
    (y,) = run(ex, build, f0, lin, out_shapes=[(frames * up,)])
    # phases reach ~1e4 rad here: one f32 ulp of phase is ~1e-3, so 2e-3 bounds the sines' disagreement
    np.testing.assert_allclose(y, ref, atol=2e-3)


def test_linear_gather_axpby_attention_duration(ex):
    rng = np.random.default_rng(9)
    t, k, n = 5, 64, 3 * 128
    x = rng.standard_normal((t, k)).astype(np.float32)
    w = rng.standard_normal((n, k)).astype(np.float32) * 0.2
    b = rng.standard_normal(n).astype(np.float32)
    ids = np.array([3, 0, 4, 4], np.uint32)

    def build(g, x_, w_, b_, ids_, lin, gat, qkv_att, dur):
        g.linear(x_, w_, b_, lin, rows=t, k=k, n=n, gelu=True)
        g.gather(ids_, x_, gat, rows=4, channels=k, out_strides=(1, 4))
        g.attention(lin, qkv_att, rows=t, heads=2)
        g.duration(lin, dur, rows=t, bins=n, speed=1.25)
    lin, gat, att, dur = run(ex, build, x, np.ascontiguousarray(w.T), b, ids,
                             out_shapes=[(t, n), (k, 4), (t, 128), (t,)])
    z = x.astype(np.float64) @ w.T + b
    ref = 0.5 * z * (1 + np.tanh(0.7978845608028654 * (z + 0.044715 * z ** 3)))
    np.testing.assert_allclose(lin, ref, atol=1e-3)
    np.testing.assert_allclose(gat, x[ids].T, atol=0)
    q, kk, v = np.split(lin.astype(np.float64), 3, axis=1)
    heads = []
    for h in range(2):
        s = q[:, h * 64:(h + 1) * 64] @ kk[:, h * 64:(h + 1) * 64].T / 8
        p = np.exp(s - s.max(1, keepdims=True))
        heads.append((p / p.sum(1, keepdims=True)) @ v[:, h * 64:(h + 1) * 64])
    np.testing.assert_allclose(att, np.concatenate(heads, axis=1), atol=1e-4)
    np.testing.assert_allclose(dur, (1 / (1 + np.exp(-lin.astype(np.float64)))).sum(1) / 1.25, rtol=1e-5)
