"""Per-layer embedding kernels (gpu/ops/per_layer_embedding.py) against numpy: the per-layer inputs from their two
halves (per_layer_inputs) and a block's gate on its layer's slice (gelu_mul_slice). Tolerances: f32 in both,
summed in another order (rtol, atol 1e-5)."""

from __future__ import annotations

import numpy as np

from gpu.ops import per_layer_embedding as ple
from gpu.program import Executor, ProgramBuilder, StepParams

RTOL = ATOL = 1e-5



def _run(ex: Executor, build, n_tokens: int, read):
    b = ProgramBuilder(ex, "t")
    build(b)
    return ex.run(b.build(), StepParams(n_tokens, 0), read=read)


def test_per_layer_inputs(ex: Executor) -> None:
    rng = np.random.default_rng(0)
    t_max, n, layers, p, eps, proj_scale = 4, 3, 5, 64, 1e-6, 0.125
    proj = rng.standard_normal((t_max, layers * p)).astype(np.float32)
    w = rng.standard_normal(p).astype(np.float32)
    tok = rng.standard_normal((t_max, layers * p)).astype(np.float32)
    pt, wt, tt = (ex.tensor(name, a.shape, data=a) for name, a in (("p", proj), ("w", w), ("tok", tok)))
    got, = _run(ex, lambda b: ple.combine(b, pt, wt, tt, layers, eps, proj_scale), n, [tt])
    scaled = proj.reshape(t_max, layers, p).astype(np.float64) * proj_scale
    normed = scaled / np.sqrt((scaled ** 2).mean(-1, keepdims=True) + eps) * w
    want = ((normed + tok.reshape(t_max, layers, p)) * 2 ** -0.5).reshape(t_max, -1)
    np.testing.assert_allclose(got[:n], want[:n], rtol=RTOL, atol=ATOL)
    np.testing.assert_array_equal(got[n:], tok[n:])  # rows past n_tokens untouched


def test_gelu_mul_slice(ex: Executor) -> None:
    rng = np.random.default_rng(1)
    t_max, n, layers, p, layer = 3, 2, 4, 32, 2
    g = rng.standard_normal((t_max, p)).astype(np.float32)
    inputs = rng.standard_normal((t_max, layers * p)).astype(np.float32)
    gt, it = ex.tensor("g", g.shape, data=g), ex.tensor("i", inputs.shape, data=inputs)
    out = ex.tensor("o", g.shape)
    got, = _run(ex, lambda b: ple.gelu_mul_layer(b, gt, it, layer, out), n, [out])
    g64 = g.astype(np.float64)
    gelu = 0.5 * g64 * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g64 + 0.044715 * g64 ** 3)))
    want = gelu * inputs[:, layer * p:(layer + 1) * p]
    np.testing.assert_allclose(got[:n], want[:n], rtol=RTOL, atol=ATOL)
