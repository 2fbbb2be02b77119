"""A block's output matvec adding its rows to the residual and making the next norm's input (linear_residual,
matvec/store_residual.wgsl), and the matvecs that read that input (a PrenormedInput, matvec/x_prenormed.wgsl),
against numpy in float64.

The residual, its product with the next norm's weight and the sums of squares are one f32 add, one multiply and a
sum of a workgroup's rows past the linear's own error (tests/gpu/test_matmul.py: 1e-5 of the row's L1 magnitude),
so they are compared to 1e-5 relative. The reading matvec scales its f32 row sums by 1 / rms: a few ulp more than
the linear's error on the normalised input, which its tolerance already covers (as test_matvec_normed_input's).
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from gpu.ops import matmul as matmul_ops
from gpu.ops.matmul import LinearKernel, PrenormedInput, linear, linear_glu, linear_residual
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.weights import upload_weight
from tests.gpu.test_linear_glu import gelu_tanh
from tests.gpu.test_matmul import SENTINEL, random_weight_bytes, reference, tuned

EPS = 1e-6


def rms_normed(r: np.ndarray, w: np.ndarray) -> np.ndarray:
    return r / np.sqrt(np.mean(r * r, axis=1, keepdims=True) + EPS) * w


@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("pairs", [False, True], ids=["rows", "pairs"])
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q8_0], ids=lambda q: q.name)
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_residual_output(ex: Executor, subgroups: bool, qtype: Q, pairs: bool, tokens: int) -> None:
    """residual += a W^T in place, normed = residual * w_next and each workgroup's sums of residual^2, for the
    step's tokens (the rows past them untouched); 200 rows of 512: a partial last workgroup, with rows in pairs
    where the plan pairs them (tuning row_pairs) or not; one token, or 3 of a 4-token program (Q4_K's word
    lanes)."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    if pairs and qtype is Q.Q8_0:
        pytest.skip("the generic matvec does not pair rows")
    rng = np.random.default_rng(31)
    k, n, t_max = 512, 200, 1 if tokens == 1 else 4
    ex = tuned(ex, row_pairs=pairs, row_pairs_min_k=256)
    raw = random_weight_bytes(rng, qtype, k, n)
    weight = upload_weight(ex, "w", qtype, k, n, raw)
    a = rng.standard_normal((t_max, k)).astype(np.float32)
    residual = rng.standard_normal((t_max, n)).astype(np.float32) * 4
    w_next = rng.uniform(0.5, 1.5, n).astype(np.float32)
    a_t, residual_t, w_t = (ex.tensor(name, v.shape, data=v) for name, v in
                            (("a", a), ("residual", residual), ("w_next", w_next)))
    b = ProgramBuilder(ex, "residual")
    out = linear_residual(b, weight, a_t, residual_t, w_t, EPS, "normed", t_max, subgroups=subgroups,
                          whole_rows=False)
    program = b.build()
    dispatch, = program.dispatches
    paired = dispatch.defines["PAIRS"] == 1
    assert dispatch.defines["STORE"] == "residual" and (paired == pairs or qtype is not Q.Q4_K)
    got_r, got_normed, got_sums = ex.run(program, StepParams(tokens), read=[residual_t, out.x, out.square_sums])

    y, allowed = reference(raw, qtype, a[:tokens])
    r = residual[:tokens].astype(np.float64) + y
    assert np.all(np.abs(got_r[:tokens] - r) <= allowed + 1e-5 * np.abs(r))
    np.testing.assert_array_equal(got_r[tokens:], residual[tokens:])
    np.testing.assert_allclose(got_normed[:tokens], got_r[:tokens].astype(np.float64) * w_next, rtol=1e-6)
    span = dispatch.defines["ROWS"] * (1 + int(paired))  # rows a workgroup
    assert out.parts == -(-n // span)
    squares = np.zeros((tokens, out.parts * span))
    squares[:, :n] = got_r[:tokens].astype(np.float64) ** 2
    np.testing.assert_allclose(got_sums[:tokens], squares.reshape(tokens, out.parts, span).sum(axis=2), rtol=1e-5)


def prenormed_input(ex: Executor, rng: np.random.Generator, t: int, k: int, parts: int,
                    ) -> tuple[PrenormedInput, np.ndarray]:
    """A PrenormedInput of t random residual rows r of k values, its sums of squares split unevenly over `parts`
    groups of columns, and (float64) the normalised input it stands for."""
    r = rng.standard_normal((t, k)).astype(np.float32) * 3
    w = rng.uniform(0.5, 1.5, k).astype(np.float32)
    cuts = np.sort(rng.choice(np.arange(1, k), parts - 1, replace=False))
    squares = r.astype(np.float64) ** 2
    sums = np.stack([s.sum(axis=1) for s in np.split(squares, cuts, axis=1)], axis=1).astype(np.float32)
    x = ex.tensor("x", (t, k), data=r * w)
    source = PrenormedInput(x, ex.tensor("sums", sums.shape, data=sums), parts, EPS)
    return source, rms_normed(r.astype(np.float64), w)


@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("kind", ["Q4_K", "Q6_K", "Q8_0", "Q4_K glu", "stacked"])
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_prenormed_input(ex: Executor, subgroups: bool, kind: str, tokens: int) -> None:
    """A matvec on a PrenormedInput (its rms from 7 partial sums, more than a thread's share on lavapipe's
    workgroups of 8 invocations for some): plain, GLU and the stacked Q4_K | Q6_K kernel, each against numpy on the
    normalised input."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    rng = np.random.default_rng(37)
    k, n = 512, 70
    source, x = prenormed_input(ex, rng, tokens, k, parts=7)
    choices = {"subgroups": subgroups, "whole_rows": False}
    b = ProgramBuilder(ex, "prenormed")
    if kind == "stacked":
        parts = [(Q.Q4_K, 48), (Q.Q6_K, 37)]
        raws = [random_weight_bytes(rng, qtype, k, rows) for qtype, rows in parts]
        first, second = (upload_weight(ex, f"w{i}", qtype, k, rows, raw)
                         for i, ((qtype, rows), raw) in enumerate(zip(parts, raws)))
        y = ex.tensor("y", (tokens, 85), data=np.full((tokens, 85), SENTINEL, np.float32))
        matmul_ops.linear_stacked(b, first, second, source, y, tokens, **choices)
        expected = [reference(raw, qtype, x) for (qtype, _), raw in zip(parts, raws)]
        want = np.concatenate([w for w, _ in expected], axis=1)
        allowed = np.concatenate([e for _, e in expected], axis=1)
    else:
        qtype = Q[kind.split()[0]]
        glu = kind.endswith("glu")
        raw = random_weight_bytes(rng, qtype, k, 2 * n if glu else n)
        weight = upload_weight(ex, "w", qtype, k, 2 * n if glu else n, raw)
        y = ex.tensor("y", (tokens, n), data=np.full((tokens, n), SENTINEL, np.float32))
        if glu:
            linear_glu(b, weight, source, y, tokens, kernel=LinearKernel.MATVEC, **choices)
        else:
            linear(b, weight, source, y, tokens, kernel=LinearKernel.MATVEC, **choices)
        want, allowed = reference(raw, qtype, x)
        if glu:
            gate, up = want[:, :n], want[:, n:]
            want = gelu_tanh(gate) * up
            allowed = (allowed[:, :n] * np.abs(up) + allowed[:, n:] * np.abs(gate)) * 1.5 + 1e-5
    program = b.build()
    assert all(d.defines["X_SOURCE"] == "prenormed" for d in program.dispatches)
    got, = ex.run(program, StepParams(tokens), read=[y])
    err = np.abs(got - want)
    assert np.all(err <= allowed + 1e-5 * np.abs(want)), f"worst {err.max()}"


def test_prenormed_input_needs_a_gpu_matvec(ex: Executor) -> None:
    """A PrenormedInput is read by the GPU matvecs only: a matmul (a prompt's tiles or whole rows) refuses it."""
    rng = np.random.default_rng(41)
    source, _ = prenormed_input(ex, rng, 1, 256, parts=2)
    weight = upload_weight(ex, "w", Q.Q8_0, 256, 8, random_weight_bytes(rng, Q.Q8_0, 256, 8))
    y = ex.tensor("y", (1, 8), data=np.zeros((1, 8), np.float32))
    with pytest.raises(ValueError, match="needs a GPU matvec"):
        linear(ProgramBuilder(ex, "prenormed"), weight, source, y, 1, kernel=LinearKernel.MATMUL)
