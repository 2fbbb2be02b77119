"""The int8 prefill matmul (kernels/quantize_q8.wgsl, matmul/tiles_i8.wgsl) against numpy.

quantize_q8: each 32-value block of x becomes d = max|x| / 127 and q = round(x / d); the kernel
multiplies by 1 / d (a division rounded as the adapter rounds it), so a q may differ from numpy's
where x / d lies within a few ulps of a half: we check the defining property instead, that d q is
within d / 2 (and a few ulps) of x, with d equal to max|x| / 127 to 1e-6 and the block sums to 1e-6
of sum |x|.

tiles_i8: with the GPU's own quantised x (read back), the kernel's sums are exact integer dots
scaled in f32 and added over K / 32 blocks in f32, so each output is within a few f32 ulps of the
magnitude of its terms: we allow 1e-5 of it, as tests/gpu/test_matmul.py does for the f32 kernels.
Against the exact product W x the int8 path is off by the rounding of x only: at most
sum_k |W[r, k]| d_x(k) / 2, which the second check allows (plus the same f32 allowance).
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from gpu.ops import matmul as matmul_ops
from gpu.ops.matmul import LinearKernel, linear, linear_glu, quantize_input
from gpu.ops.matmul_plan import INT8_MATVEC_KERNELS, INT8_TYPES, WHOLE_ROW_INT8_KERNELS, MatmulTile
from gpu.ops.matmul_tuning import DEFAULT_TUNING
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.weights import upload_weight
from tests.gpu.test_linear_glu import gelu_tanh
from tests.gpu.test_matmul import REL_TOL, SENTINEL, random_normed_input, random_weight_bytes, tuned

TYPES = sorted(INT8_TYPES, key=lambda q: q.name)
T = MatmulTile



def quantized(ex: Executor, x: np.ndarray, n_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(q int [T, K], d [T, K / 32], sums [T, K / 32]) as the GPU quantises x's first n_tokens rows."""
    t_max, k = x.shape
    b = ProgramBuilder(ex, "q8")
    source = quantize_input(b, ex.tensor("x", x.shape, data=x), t_max)
    words, scales = ex.run(b.build(), StepParams(n_tokens), read=[source.q, source.scales])
    q = words[:n_tokens].astype(np.uint32).view(np.int8).reshape(n_tokens, k).astype(np.int64)
    pairs = scales[:n_tokens].reshape(n_tokens, k // 32, 2)
    return q, pairs[..., 0].astype(np.float64), pairs[..., 1].astype(np.float64)


def test_quantize_q8(ex: Executor) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 128)).astype(np.float32) * rng.uniform(0.01, 100, (6, 1)).astype(np.float32)
    x[1, 32:64] = 0.0           # an all-zero block: d = 0, q = 0
    x[2, 7] = 3e4               # an outlier sets its block's scale
    q, d, sums = quantized(ex, x, 5)
    blocks = x[:5].reshape(5, 4, 32).astype(np.float64)
    np.testing.assert_allclose(d, np.abs(blocks).max(axis=2) / 127, rtol=1e-6)
    assert np.all(np.abs(q) <= 127)
    dq = q.reshape(5, 4, 32) * d[..., None]
    assert np.all(np.abs(dq - blocks) <= d[..., None] * (0.5 + 1e-5)), "a value rounded to the wrong q"
    assert np.all(q[1, 32:64] == 0) and d[1, 1] == 0.0
    assert np.all(np.abs(sums - blocks.sum(axis=2)) <= 1e-6 * np.abs(blocks).sum(axis=2))


def q4_k_mins(raw: np.ndarray, k: int) -> np.ndarray:
    """The additive minimum of each 32-value block of Q4_K rows: -dmin * min (ggml get_scale_min_k4)."""
    n = raw.shape[0]
    blocks = raw.reshape(n * k // 256, GGML_QUANT_SIZES[Q.Q4_K][1])
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float64)[:, 0]
    sc = blocks[:, 4:16].astype(np.int64)
    mins = np.empty((len(blocks), 8), np.int64)
    mins[:, :4] = sc[:, 4:8] & 63
    mins[:, 4:] = (sc[:, 8:12] >> 4) | ((sc[:, 4:8] >> 6) << 4)
    return (-dmin[:, None] * mins).reshape(n, k // 32)


def check_int8_linear(ex: Executor, qtype: Q, k: int, n: int, t_max: int, n_tokens: int, glu: bool,
                      seed: int, kernel: LinearKernel = LinearKernel.MATMUL, subgroups: bool | None = None,
                      whole_rows: bool = False) -> None:
    rng = np.random.default_rng(seed)
    raw = random_weight_bytes(rng, qtype, k, n)
    weight = upload_weight(ex, "w", qtype, k, n, raw)
    x = (rng.standard_normal((t_max, k)) * rng.uniform(0.1, 10, (t_max, 1))).astype(np.float32)
    cols = n // 2 if glu else n
    yt = ex.tensor("y", (t_max, cols), data=np.full((t_max, cols), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "linear")
    (linear_glu if glu else linear)(b, weight, ex.tensor("x", x.shape, data=x), yt, t_max,
                                    kernel=kernel, whole_rows=whole_rows, int8=True, subgroups=subgroups)
    program = b.build()
    if whole_rows:
        assert {d.kernel for d in program.dispatches} == {WHOLE_ROW_INT8_KERNELS[qtype]}, "the int8 kernel did not run"
    else:
        int8_label = "tiles_i8]" if kernel is LinearKernel.MATMUL else "q8_direct]"
        assert any(d.label.endswith(int8_label) for d in program.dispatches), "the int8 kernel did not run"
    got, = ex.run(program, StepParams(n_tokens), read=[yt])
    assert np.all(got[n_tokens:] == SENTINEL), "rows past n_tokens were written"
    got = got[:n_tokens].astype(np.float64)

    q, d, sums = quantized(ex, x, n_tokens)
    w = dequantize(raw, qtype).astype(np.float64)                      # [n, k], exact ggml values
    x_hat = q * np.repeat(d, 32, axis=1)                                 # what the kernel multiplies
    want = x_hat @ w.T
    magnitude = np.abs(x_hat) @ np.abs(w).T
    if qtype == Q.Q4_K:  # the kernel takes the minimum times the exact block sum, not times sum(x_hat)
        mins = q4_k_mins(raw, k)                                         # [n, k / 32]
        want += (sums - x_hat.reshape(n_tokens, -1, 32).sum(axis=2)) @ mins.T
        magnitude += np.abs(sums) @ np.abs(mins).T
    exact = x[:n_tokens].astype(np.float64) @ w.T
    rounding = np.repeat(d, 32, axis=1) / 2 @ np.abs(w).T                # |W| d_x / 2: x's rounding bound
    if glu:
        g, u = want[:, :cols], want[:, cols:]
        gelu = gelu_tanh(g)
        err = np.abs(got - gelu * u)
        # first order in the errors of g and u: |d(gelu(g) u)| <= |gelu'(g)| |u| dg + |gelu(g)| du, gelu' <= 1.13
        allowed = 1.13 * np.abs(u) * REL_TOL * magnitude[:, :cols] + np.abs(gelu) * REL_TOL * magnitude[:, cols:]
        assert np.all(err <= allowed + 1e-6 * np.abs(gelu * u)), f"{qtype.name} GLU: worst {np.max(err - allowed)}"
        return
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err - REL_TOL * magnitude), err.shape)
    assert np.all(err <= REL_TOL * magnitude), f"{qtype.name}: token, row {worst}: {got[worst]} != {want[worst]}"
    assert np.all(np.abs(got - exact) <= rounding + REL_TOL * magnitude), f"{qtype.name}: beyond x's rounding"


@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_matmul_int8(ex: Executor, qtype: Q, glu: bool) -> None:
    """Every int8 type, plain and gate-up: two token tiles and two row tiles (the last of each partial), K of
    several 32-value blocks and (K-quants) two super-blocks."""
    k = 512 if qtype in (Q.Q4_K, Q.Q6_K) else 256
    check_int8_linear(ex, qtype, k, 300 if glu else 150, 70, 67, glu, seed=21)


@pytest.mark.parametrize("tile", [T(64, 64, 8, 32, 4), T(128, 64, 8, 32, 2), T(64, 128, 8, 32, 8)],
                         ids=lambda t: "x".join(map(str, t)))
@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_matmul_int8_tiles(ex: Executor, tile: MatmulTile, glu: bool, qtype: Q) -> None:
    """The other tile shapes, with k split over workgroups (parts added by matmul_reduce): with 4 and 8 parts
    of K = 512 a part starts inside a super-block, where the Q4_K tiles load the head they hold for its
    32-value blocks on the part's first block rather than at the super-block's."""
    check_int8_linear(tuned(ex, int8_tile=tile), qtype, 512, 300 if glu else 150, 70, 67, glu, seed=22)


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
@pytest.mark.parametrize("qtype", sorted(INT8_MATVEC_KERNELS, key=lambda q: q.name), ids=lambda q: q.name)
def test_matvec_int8(ex: Executor, qtype: Q, glu: bool, subgroups: bool) -> None:
    """The int8 decode matvecs (matvec_q4_k_i8, matvec_q6_k_i8; x quantised in each workgroup's prologue, by
    8-lane groups with subgroups, else a block an invocation): the same bounds as the tiles, for 3 of 5 tokens
    (every token loop) over 3 super-blocks, with rows that leave the last workgroup part-empty; every type and
    GLU, whether or not int8_matvec_pays picks them in models."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("the adapter has no subgroups")
    check_int8_linear(tuned(ex, int8_matvec_everywhere=True), qtype, 768, 94 if glu else 47, 5, 3, glu, seed=23,
                      kernel=LinearKernel.MATVEC,
                      subgroups=subgroups)


@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
@pytest.mark.parametrize("qtype", sorted(WHOLE_ROW_INT8_KERNELS, key=lambda q: q.name), ids=lambda q: q.name)
def test_matvec_whole_rows_int8(ex: Executor, qtype: Q, glu: bool, tokens: int) -> None:
    """The software adapters' int8 matvecs (matvec_q8_0_rows_i8: x quantised in each workgroup's prologue, a block
    an invocation, then whole rows by block pairs), on any adapter: the tiles' bounds, at K = 640 (rows at 8-byte but
    not 16-byte offsets: a pair's first word takes every place in its vec4), with rows that leave the last
    workgroup part-empty, one token and several of a program of 5."""
    check_int8_linear(ex, qtype, 640, 150 if glu else 75, 5, tokens, glu, seed=24, kernel=LinearKernel.MATVEC,
                      whole_rows=True)


@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
@pytest.mark.parametrize("qtype", sorted(INT8_MATVEC_KERNELS, key=lambda q: q.name), ids=lambda q: q.name)
def test_matvec_int8_normed_input(ex: Executor, qtype: Q, glu: bool) -> None:
    """An int8 matvec on a NormedInput (matvec/x_q8_normed.wgsl: the normalisation of
    tests/gpu/test_matmul.py::test_matvec_normed_input, then the quantisation, in each workgroup): against the
    exact product with numpy's float64 normalised x, within x's rounding (d_x / 2 a value, d_x from numpy's x:
    the GPU's f32 x is a few ulp away, covered by the 1e-5 allowance) and the f32 allowance."""
    ex = tuned(ex, int8_matvec_everywhere=True)
    rng = np.random.default_rng(24)
    k, n, t, eps = 512, 70, 2, 1e-6
    rows = 2 * n if glu else n
    raw = random_weight_bytes(rng, qtype, k, rows)
    weight = upload_weight(ex, "w", qtype, k, rows, raw)
    normed, r, x = random_normed_input(ex, rng, t, k, eps)
    y = ex.tensor("y", (t, n), data=np.full((t, n), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "normed")
    (linear_glu if glu else linear)(b, weight, normed, y, t, kernel=LinearKernel.MATVEC, whole_rows=False,
                                    int8=True)
    program = b.build()
    assert any(d.label.endswith("q8_normed]") for d in program.dispatches), "the int8 kernel did not run"
    got, got_residual = ex.run(program, StepParams(t), read=[y, normed.residual_out])
    np.testing.assert_allclose(got_residual, r, rtol=1e-5, atol=1e-5)
    w = dequantize(raw, qtype).astype(np.float64)
    exact = x @ w.T
    d = np.repeat(np.abs(x).reshape(t, -1, 32).max(axis=2) / 127, 32, axis=1)
    bound = (d / 2 * (1 + 1e-5) + 1e-5 * np.abs(x)) @ np.abs(w).T + REL_TOL * (np.abs(x) @ np.abs(w).T)
    if glu:
        g, u = exact[:, :n], exact[:, n:]
        gelu = gelu_tanh(g)
        # first order: |d(gelu(g) u)| <= |gelu'(g)| |u| dg + |gelu(g)| du (gelu' <= 1.13), plus the second order dg du
        allowed = 1.13 * np.abs(u) * bound[:, :n] + (np.abs(gelu) + 1.13 * bound[:, :n]) * bound[:, n:]
        err = np.abs(got - gelu * u)
        assert np.all(err <= allowed + 1e-6 * np.abs(gelu * u)), f"{qtype.name} GLU: worst {np.max(err - allowed)}"
        return
    err = np.abs(got - exact)
    assert np.all(err <= bound), f"{qtype.name}: worst {np.max(err - bound)}"


def test_int8_matvec_choice(ex: Executor) -> None:
    """int8_matvec_pays as measured: Gemma 3 4B's output head and its Q4_K linears without GLU take the int8
    kernels; its gate-up, down and Q6_K v, and the 270M's small o, keep the f32 ones."""
    def kernel(qtype: Q, k: int, n: int, glu: bool = False) -> str:
        weight = upload_weight(ex, "w", qtype, k, n, random_weight_bytes(np.random.default_rng(0), qtype, k, n))
        x = ex.tensor("x", (1, k))
        y = ex.tensor("y", (1, n // 2 if glu else n))
        b = ProgramBuilder(ex, "choice")
        (linear_glu if glu else linear)(b, weight, x, y, 1, kernel=LinearKernel.MATVEC, whole_rows=False, int8=True)
        return b.build().dispatches[-1].label.split("[")[0]

    assert kernel(Q.Q6_K, 256, DEFAULT_TUNING.head_rows) == "matvec_q6_k_i8"
    assert kernel(Q.Q4_K, 2048, 2560) == "matvec_q4_k_i8"     # the 4B's o
    assert kernel(Q.Q4_K, 1024, 640) == "matvec_q4_k"         # the 270M's o
    assert kernel(Q.Q4_K, 2560, 128, glu=True) == "matvec_q4_k"
    assert kernel(Q.Q4_K, 10240, 64) == "matvec_q4_k"
    assert kernel(Q.Q6_K, 2560, 64) == "matvec_q6_k"


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize("down_type", [Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
@pytest.mark.parametrize("gate_type", [Q.Q4_K, Q.Q5_0], ids=lambda q: q.name)
def test_quantised_glu_output_into_int8_down(ex: Executor, gate_type: Q, down_type: Q, subgroups: bool) -> None:
    """A gate-up writing its output quantised (matvec/store_q8.wgsl; the wide Q4_K kernel and the generic one,
    each workgroup holding whole 32-column blocks) and a down projection reading it (matvec/x_q8_buffer.wgsl),
    2 of 3 tokens: the blocks are quantize_q8's rule applied to the f32 gate-up's output (to the f32 ulps by
    which the two dispatches' sums may differ), and the down projection is the int8 product of those
    blocks within the tiles' bound."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("the adapter has no subgroups")
    rng = np.random.default_rng(25)
    k, f, n, t_max, n_tokens = 256, 256, 40, 3, 2
    raw_gu, raw_down = random_weight_bytes(rng, gate_type, k, 2 * f), random_weight_bytes(rng, down_type, f, n)
    gate_up = upload_weight(ex, "gu", gate_type, k, 2 * f, raw_gu)
    down = upload_weight(ex, "down", down_type, f, n, raw_down)
    x = ex.tensor("x", (t_max, k), data=rng.standard_normal((t_max, k)).astype(np.float32))
    act_f32 = ex.tensor("act32", (t_max, f))
    y = ex.tensor("y", (t_max, n), data=np.full((t_max, n), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "q8 glu")
    options = dict(kernel=LinearKernel.MATVEC, whole_rows=False, subgroups=subgroups)
    linear_glu(b, gate_up, x, act_f32, t_max, **options)
    act = matmul_ops.quantised_activation(b, "act", t_max, f)
    linear_glu(b, gate_up, x, act, t_max, **options)
    linear(b, down, act, y, t_max, **options)
    program = b.build()
    assert any(d.label.endswith("q8_buffer]") for d in program.dispatches), "the int8 down did not run"
    want_act, words, got = ex.run(program, StepParams(n_tokens), read=[act_f32, act.tensor, y])
    assert np.all(got[n_tokens:] == SENTINEL), "rows past n_tokens were written"

    words = words[:n_tokens].astype(np.uint32)
    q = words[:, :f // 4].copy().view(np.int8).reshape(n_tokens, f).astype(np.int64)
    pairs = words[:, f // 4:].copy().view(np.float32).reshape(n_tokens, f // 32, 2).astype(np.float64)
    d, sums = pairs[..., 0], pairs[..., 1]
    blocks = want_act[:n_tokens].astype(np.float64).reshape(n_tokens, f // 32, 32)
    np.testing.assert_allclose(d, np.abs(blocks).max(axis=2) / 127, rtol=1e-5)
    assert np.all(np.abs(q.reshape(blocks.shape) * d[..., None] - blocks) <= d[..., None] * (0.5 + 1e-4))
    assert np.all(np.abs(sums - blocks.sum(axis=2)) <= 1e-5 * np.abs(blocks).sum(axis=2))

    w = dequantize(raw_down, down_type).astype(np.float64)
    x_hat = q * np.repeat(d, 32, axis=1)
    want = x_hat @ w.T
    magnitude = np.abs(x_hat) @ np.abs(w).T
    if down_type == Q.Q4_K:
        mins = q4_k_mins(raw_down, f)
        want += (sums - x_hat.reshape(n_tokens, -1, 32).sum(axis=2)) @ mins.T
        magnitude += np.abs(sums) @ np.abs(mins).T
    err = np.abs(got[:n_tokens] - want)
    assert np.all(err <= REL_TOL * magnitude), f"worst {np.max(err - REL_TOL * magnitude)}"


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_quantised_ffn_input(ex: Executor, subgroups: bool) -> None:
    """A residual norm writing its output quantised (kernels/residual_norm_q8.wgsl) and an int8 gate-up reading
    it (matvec/x_q8_buffer.wgsl with GLU), 2 of 3 tokens: the quantised rows are exactly quantize_q8 of the f32
    residual norm's (the same row arithmetic, the same block rule), x is updated alike, and the gate-up's output
    equals the int8 gate-up's on the f32 rows (quantised in its prologue: the same q, block sums added in
    another order) to f32 rounding."""
    from gpu.ops import transformer as ops

    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("the adapter has no subgroups")
    ex = tuned(ex, int8_matvec_everywhere=True)
    rng = np.random.default_rng(26)
    d, f, t_max, n_tokens = 256, 128, 3, 2
    block_out = rng.standard_normal((t_max, d)).astype(np.float32) * 5
    residual = rng.standard_normal((t_max, d)).astype(np.float32) * 20
    w_post, w_next = (rng.uniform(0.5, 1.5, d).astype(np.float32) for _ in range(2))
    yt, wpt, wnt = (ex.tensor(n, a.shape, data=a) for n, a in (("y", block_out), ("wp", w_post), ("wn", w_next)))
    x_f32, x_q8 = (ex.tensor(n, residual.shape, data=residual) for n in ("x32", "x8"))
    h_f32 = ex.tensor("h32", (t_max, d))
    gate_up = upload_weight(ex, "gu", Q.Q4_K, d, 2 * f, random_weight_bytes(rng, Q.Q4_K, d, 2 * f))
    act_direct, act_buffer = ex.tensor("a_direct", (t_max, f)), ex.tensor("a_buffer", (t_max, f))
    reduce = ex.device.has("subgroup") and subgroups
    b = ProgramBuilder(ex, "q8 ffn input")
    ops.residual_norm(b, yt, wpt, x_f32, wnt, h_f32, 1e-6, subgroups=reduce)
    h_q8 = matmul_ops.quantised_activation(b, "h8", t_max, d)
    ops.residual_norm(b, yt, wpt, x_q8, wnt, h_q8, 1e-6, subgroups=reduce)
    reference = quantize_input(b, h_f32, t_max)
    options = dict(kernel=LinearKernel.MATVEC, whole_rows=False, subgroups=subgroups, int8=True)
    linear_glu(b, gate_up, h_f32, act_direct, t_max, **options)
    linear_glu(b, gate_up, h_q8, act_buffer, t_max, **options)
    outputs = ex.run(b.build(), StepParams(n_tokens),
                     read=[x_f32, x_q8, h_q8.tensor, reference.q, reference.scales, act_direct, act_buffer])
    gx32, gx8, packed, want_q, want_scales, got_direct, got_buffer = outputs
    np.testing.assert_array_equal(gx8, gx32)
    packed = packed[:n_tokens].astype(np.uint32)
    np.testing.assert_array_equal(packed[:, :d // 4], want_q[:n_tokens].astype(np.uint32))
    np.testing.assert_array_equal(packed[:, d // 4:].view(np.float32), want_scales[:n_tokens])
    np.testing.assert_allclose(got_buffer[:n_tokens], got_direct[:n_tokens], rtol=1e-5,
                               atol=1e-5 * np.abs(got_direct[:n_tokens]).max())


@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
def test_matmul_int8_on_a_quantised_activation(ex: Executor, glu: bool) -> None:
    """A prompt's input quantised by the residual norm before it (kernels/residual_norm_q8.wgsl writing a
    QuantisedActivation, which matmul/tiles_i8.wgsl reads through both its input bindings) gives the same sums,
    bit for bit, as the norm's f32 output quantised by quantize_q8 inside the linear: the same q, d and block
    sums (common/q8_block.wgsl's rule, quad by quad in the same order) go into the same tiles."""
    from gpu.ops import transformer as ops
    from gpu.ops.quantised import quantised_activation

    rng = np.random.default_rng(23)
    t_max, n_tokens, k = 70, 67, 256
    n = 300 if glu else 150
    weight = upload_weight(ex, "w", Q.Q4_K, k, n, random_weight_bytes(rng, Q.Q4_K, k, n))
    block_out, residual = (rng.standard_normal((t_max, k)).astype(np.float32) for _ in range(2))
    w_post, w_next = (ex.tensor(name, (k,), data=rng.uniform(0.5, 1.5, k).astype(np.float32))
                      for name in ("w_post", "w_next"))
    y_in = ex.tensor("block_out", (t_max, k), data=block_out)
    cols = n // 2 if glu else n
    outputs, labels = [], []
    for quantised in (False, True):
        b = ProgramBuilder(ex, "norm_linear")
        x = ex.tensor("residual", (t_max, k), data=residual)
        h = quantised_activation(b, "h", t_max, k) if quantised else b.activation("h", (t_max, k))
        ops.residual_norm(b, y_in, w_post, x, w_next, h, 1e-6)
        y = ex.tensor("y", (t_max, cols), data=np.full((t_max, cols), SENTINEL, np.float32))
        (linear_glu if glu else linear)(b, weight, h, y, t_max, kernel=LinearKernel.MATMUL, whole_rows=False,
                                        int8=True)
        program = b.build()
        labels.append([d.label for d in program.dispatches])
        outputs.append(ex.run(program, StepParams(n_tokens), read=[y])[0])
    assert "quantize_q8" in labels[0] and "quantize_q8" not in labels[1]
    assert any(label.startswith("residual_norm_q8[") for label in labels[1])
    assert any(label.endswith("tiles_i8]") for label in labels[1])
    np.testing.assert_array_equal(outputs[1], outputs[0])
    assert np.all(outputs[1][n_tokens:] == SENTINEL) and np.all(outputs[1][:n_tokens] != SENTINEL)
