"""Mixture-of-experts kernels (gpu/ops/moe.py) against numpy: the router's choices and weights (expert_route),
the dense weighted GLU of every expert (expert_gelu_mul), and the chosen experts' products (expert_matvec, f32
weights). Tolerances: f32 in both, summed in another order (rtol, atol 1e-5)."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType

from gpu.ops import moe
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.weights import upload_weight

RTOL = ATOL = 1e-5



def _run(ex: Executor, build, n_tokens: int, read):
    b = ProgramBuilder(ex, "t")
    build(b)
    return ex.run(b.build(), StepParams(n_tokens, 0), read=read)


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    return 0.5 * x * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (x + 0.044715 * x ** 3)))


def test_expert_route(ex: Executor) -> None:
    rng = np.random.default_rng(0)
    t_max, n, experts, top_k = 5, 4, 8, 3
    scores = rng.standard_normal((t_max, experts)).astype(np.float32)
    scale = rng.uniform(0.5, 2.0, experts).astype(np.float32)
    s, sc = ex.tensor("s", scores.shape, data=scores), ex.tensor("sc", scale.shape, data=scale)
    weights, choice = ex.tensor("w", (t_max, experts)), ex.tensor("c", (t_max, top_k), "u32")
    routes = ex.tensor("r", (t_max, top_k))
    got_w, got_c, got_r = _run(ex, lambda b: moe.route(b, s, sc, weights, choice, routes), n,
                               [weights, choice, routes])
    p = np.exp(scores - scores.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    want_c = np.argsort(-scores, axis=1, kind="stable")[:, :top_k]
    chosen = np.take_along_axis(p, want_c, 1)
    want_r = chosen / chosen.sum(1, keepdims=True) * scale[want_c]
    want_w = np.zeros_like(p)
    np.put_along_axis(want_w, want_c, want_r, 1)
    np.testing.assert_array_equal(got_c.reshape(t_max, top_k)[:n], want_c[:n])
    np.testing.assert_allclose(got_w.reshape(t_max, experts)[:n], want_w[:n], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got_r.reshape(t_max, top_k)[:n], want_r[:n], rtol=RTOL, atol=ATOL)


def test_expert_gelu_mul(ex: Executor) -> None:
    rng = np.random.default_rng(1)
    t_max, n, experts, width = 3, 2, 4, 64
    gate_up = rng.standard_normal((t_max, experts * 2 * width)).astype(np.float32)
    weights = rng.uniform(0, 1, (t_max, experts)).astype(np.float32)
    g, w = ex.tensor("g", gate_up.shape, data=gate_up), ex.tensor("w", weights.shape, data=weights)
    act = ex.tensor("a", (t_max, experts * width))
    got, = _run(ex, lambda b: moe.weighted_gelu_mul(b, g, w, act), n, [act])
    gu = gate_up.reshape(t_max, experts, 2, width).astype(np.float64)
    want = (_gelu_tanh(gu[:, :, 0]) * gu[:, :, 1] * weights[:, :, None]).reshape(t_max, -1)
    np.testing.assert_allclose(got.reshape(t_max, -1)[:n], want[:n], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("down", [False, True])
def test_expert_matvec(ex: Executor, down: bool) -> None:
    rng = np.random.default_rng(2)
    t_max, n_tok, experts, top_k, k, n = 3, 2, 4, 2, 64, 32
    rows = experts * (n if down else 2 * n)
    w = (0.1 * rng.standard_normal((rows, k))).astype(np.float32)
    weight = upload_weight(ex, "experts", GGMLQuantizationType.F32, k, rows, w.reshape(-1).view(np.uint8))
    x = rng.standard_normal((t_max, top_k, k) if down else (t_max, k)).astype(np.float32)
    choice = np.stack([rng.choice(experts, top_k, replace=False) for _ in range(t_max)]).astype(np.uint32)
    routes = rng.uniform(0, 1, (t_max, top_k)).astype(np.float32)
    xt = ex.tensor("x", (t_max, x[0].size), data=x.reshape(t_max, -1))
    ct, rt = ex.tensor("c", choice.shape, "u32", data=choice), ex.tensor("r", routes.shape, data=routes)
    y = ex.tensor("y", (t_max, n) if down else (t_max, top_k * n))
    got, = _run(ex, lambda b: moe.expert_matvec(b, weight, xt, ct, rt, y, down=down), n_tok, [y])
    w64, x64 = w.astype(np.float64), x.astype(np.float64)
    if down:
        want = np.stack([sum(routes[t, c] * w64[choice[t, c] * n:(choice[t, c] + 1) * n] @ x64[t, c]
                             for c in range(top_k)) for t in range(t_max)])
    else:
        want = np.stack([np.concatenate([
            _gelu_tanh(w64[e * 2 * n:e * 2 * n + n] @ x64[t]) * (w64[e * 2 * n + n:(e + 1) * 2 * n] @ x64[t])
            for e in choice[t]]) for t in range(t_max)])
    np.testing.assert_allclose(got.reshape(t_max, -1)[:n_tok], want[:n_tok], rtol=RTOL, atol=ATOL)
