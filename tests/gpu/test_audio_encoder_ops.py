"""The kernels of Gemma 4's audio conformer against numpy: conv2d_norm (strided 3 x 3 convolution, LayerNorm over
channels, ReLU), sigmoid_mul (SiLU and GLU) and attention_local_relative (local attention with relative keys and a
softcap), each on the step's rows only (rows past n_tokens keep what they held).

Tolerances: the kernels sum in f32 in another order than numpy's float64 references; values are of order 1 and
the sums short (at most a few hundred terms), so 1e-5 absolute covers f32 rounding with a wide margin while a
wrong index or a missing term shows up at order 0.1.
"""

from __future__ import annotations

import numpy as np
import pytest

from gpu.ops import encoder as ops
from gpu.program import Executor, ProgramBuilder, StepParams

TOL = 1e-5


def _conv2d_norm_reference(x: np.ndarray, w: np.ndarray, gamma: np.ndarray, eps: float) -> np.ndarray:
    """x [T, F, C_in], w [C_out, C_in, 3, 3] -> [T', F', C_out]: stride 2, padding 1, LayerNorm, ReLU."""
    t, f, c_in = x.shape
    xp = np.pad(x.astype(np.float64), ((1, 1), (1, 1), (0, 0)))
    t_out, f_out = (t + 1) // 2, (f + 1) // 2
    v = np.zeros((t_out, f_out, w.shape[0]))
    for a in range(3):
        for bb in range(3):
            patch = xp[a:a + 2 * t_out:2, bb:bb + 2 * f_out:2]  # [T', F', C_in]
            v += patch @ w[:, :, a, bb].T.astype(np.float64)
    mean = v.mean(-1, keepdims=True)
    var = ((v - mean) ** 2).mean(-1, keepdims=True)
    return np.maximum((v - mean) / np.sqrt(var + eps) * gamma, 0)


@pytest.mark.parametrize(("tokens", "run", "valid", "c_in", "c_out", "f_in", "t_in_per", "t_out_per"),
                         [(3, 3, 12, 1, 128, 16, 4, 2), (4, 3, 6, 8, 72, 8, 2, 1), (3, 3, 9, 1, 64, 16, 4, 2)])
def test_conv2d_norm(ex: Executor, tokens: int, run: int, valid: int, c_in: int, c_out: int, f_in: int,
                     t_in_per: int, t_out_per: int) -> None:
    """valid: input time rows that count; the rows past it hold data the kernel must read as zero."""
    rng = np.random.default_rng(c_out)
    f_out = (f_in + 1) // 2
    x = rng.standard_normal((tokens * t_in_per, f_in, c_in)).astype(np.float32)
    w = (rng.standard_normal((c_out, c_in, 3, 3)) * 0.3).astype(np.float32)
    gamma = (1 + 0.2 * rng.standard_normal(c_out)).astype(np.float32)
    tx = ex.tensor("x", (x.shape[0] * f_in, c_in), data=x.reshape(-1, c_in))
    tw = ex.tensor("w", (c_out, 9 * c_in), data=np.ascontiguousarray(w.transpose(0, 2, 3, 1)).reshape(c_out, -1))
    tg = ex.tensor("gamma", (c_out,), data=gamma)
    rows = tokens * t_out_per * f_out
    out = ex.tensor("y", (rows, c_out), data=np.full((rows, c_out), 7, np.float32))
    lengths = ex.tensor("lengths", (2,), "u32", data=np.array([99, valid], np.uint32))
    b = ProgramBuilder(ex, "conv2d_norm")
    ops.conv2d_norm(b, tx, tw, tg, out, lengths, c_in=c_in, f_in=f_in, t_in_per_token=t_in_per,
                    t_out_per_token=t_out_per, length_index=1)
    got, = ex.run(b.build(), StepParams(n_tokens=run), read=[out])
    want = np.full((rows, c_out), 7, np.float32)
    kept = x[:run * t_in_per].copy()
    kept[valid:] = 0
    ref = _conv2d_norm_reference(kept, w, gamma, 1e-6)[:run * t_out_per]
    want[:run * t_out_per * f_out] = ref.reshape(-1, c_out)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)


@pytest.mark.parametrize(("d", "stride", "offset"), [(72, 72, 0), (40, 80, 40)])
def test_sigmoid_mul(ex: Executor, d: int, stride: int, offset: int) -> None:
    rng = np.random.default_rng(d)
    rows, n = 6, 5
    x = (rng.standard_normal((rows, stride)) * 4).astype(np.float32)
    tx = ex.tensor("x", x.shape, data=x)
    out = ex.tensor("out", (rows, d), data=np.full((rows, d), 7, np.float32))
    b = ProgramBuilder(ex, "sigmoid_mul")
    ops.sigmoid_mul(b, tx, out, gate_offset=offset)
    got, = ex.run(b.build(), StepParams(n_tokens=n), read=[out])
    x64 = x.astype(np.float64)
    want = np.full((rows, d), 7, np.float64)
    want[:n] = x64[:n, :d] / (1 + np.exp(-x64[:n, offset:offset + d]))
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


def _local_attention_reference(q, k, v, rel, q_scale, heads, k_scale, cap):  # noqa: ANN001, ANN202
    n, width = q.shape
    hd = width // heads
    window = rel.shape[0]
    out = np.zeros((n, width))
    for i in range(n):
        for h in range(heads):
            s = slice(h * hd, (h + 1) * hd)
            qi = q[i, s].astype(np.float64) * q_scale
            js = [j for j in range(max(0, i - window + 1), i + 1)]
            z = np.array([k_scale * qi @ k[j, s] + qi @ rel[i - j, s] for j in js])
            z = cap * np.tanh(z / cap)
            p = np.exp(z - z.max())
            p /= p.sum()
            out[i, s] = p @ v[js, s]
    return out


@pytest.mark.parametrize(("n", "run", "heads", "hd", "window", "cap"),
                         [(30, 27, 4, 8, 12, 50.0), (9, 9, 2, 20, 5, 2.0)])
def test_attention_local_relative(ex: Executor, n: int, run: int, heads: int, hd: int, window: int,
                                  cap: float) -> None:
    rng = np.random.default_rng(n + hd)
    q, k, v = ((rng.standard_normal((n, heads * hd)) * 1.5).astype(np.float32) for _ in range(3))
    rel = rng.standard_normal((window, heads * hd)).astype(np.float32)
    q_scale = (0.3 + rng.random(hd)).astype(np.float32)
    k_scale = 1.9
    tensors = [ex.tensor(name, a.shape, data=a) for name, a in (("q", q), ("k", k), ("v", v), ("rel", rel),
                                                                ("q_scale", q_scale))]
    out = ex.tensor("out", q.shape, data=np.full(q.shape, 7, np.float32))
    b = ProgramBuilder(ex, "local_attention")
    ops.attention_local_relative(b, *tensors, out, heads=heads, k_scale=k_scale, cap=cap)
    got, = ex.run(b.build(), StepParams(n_tokens=run), read=[out])
    want = np.full(q.shape, 7, np.float64)
    want[:run] = _local_attention_reference(q[:run], k, v, rel, q_scale, heads, k_scale, cap)
    np.testing.assert_allclose(got, want, rtol=0, atol=TOL)
