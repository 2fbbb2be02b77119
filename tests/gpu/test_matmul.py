"""Quantised linear kernels (matvec, both reductions, and matmul) against numpy on every weight type.

Weights are random but valid GGUF blocks: random bytes with every f16 scale field replaced by a
finite f16 of modest size, so all bit patterns of the packed values and sub-block scales occur.
The reference is gguf-py's `dequantize(raw, qtype)` (float64) @ x.

Tolerance: the kernels dequantise exactly as ggml does (up to one f32 rounding where a fused
multiply-add is used) and sum in f32 in another order than numpy's float64, so each output may
differ by a few f32 ulps of the row's L1 magnitude sum_k |W[r, k] x[t, k]|: we allow 1e-5 of it.
The GPU matmul with f16 tiles (adapters with "shader-f16", lavapipe included) rounds each x and
each dequantised weight to f16 (relative error <= 2^-11 each, absolute <= 2^-25 for values in
f16's subnormal range) before its f32 products and sums, so there each product may be off by
2^-10 of its magnitude (plus 2^-25 |w| or 2^-25 |x| for a subnormal x or w): we allow 2^-10 of
the L1 magnitude, 2^-25 of sum_k |W[r, k]| + sum_k |x[t, k]|, and the f32 allowance above.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest
from gguf import GGML_QUANT_SIZES
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from gpu.device import Device
from gpu.ops import matmul as matmul_ops
from gpu.ops import matmul_plan as plan
from gpu.ops.matmul import LinearKernel, block_values, device_traits, linear, linear_glu
from gpu.ops.matmul_plan import MatmulTile, MatvecShape
from gpu.ops.matmul_tuning import DEFAULT_TUNING
from gpu.ops.transformer import add
from gpu.program import Executor, Program, ProgramBuilder, StepParams
from gpu.weights import SUPPORTED_TYPES, QuantWeight, row_bytes, upload_weight

REL_TOL = 1e-5  # of the row's L1 magnitude, see the module docstring
F16_REL_TOL = 2.0 ** -10  # of the L1 magnitude where tiles are f16
F16_ABS_TOL = 2.0 ** -25  # of sum_k |W[r, k]| + |x[t, k]| where tiles are f16 (f16 subnormals)
SENTINEL = 1234.5  # y rows past n_tokens must keep it
MATVEC_MAX_TOKENS = DEFAULT_TUNING.matvec_max_tokens

TYPES = list(SUPPORTED_TYPES)
# Byte offsets of the f16 fields (scales, mins) in each block, as in ggml's block structs.
F16_FIELDS = {
    Q.Q8_0: (0,), Q.Q4_0: (0,), Q.Q4_1: (0, 2), Q.Q5_0: (0,), Q.Q5_1: (0, 2),
    Q.Q4_K: (0, 2), Q.Q5_K: (0, 2), Q.Q6_K: (208,),
}


def random_weight_bytes(rng: np.random.Generator, qtype: Q, k: int, n: int) -> np.ndarray:
    """n rows of k values of valid random qtype blocks, as raw bytes [n, row_bytes]."""
    if qtype == Q.F32:
        return rng.standard_normal((n, k)).astype(np.float32).view(np.uint8)
    if qtype == Q.F16:
        return rng.standard_normal((n, k)).astype(np.float16).view(np.uint8)
    if qtype == Q.BF16:
        return (rng.standard_normal((n, k)).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)
    block_size, type_size = GGML_QUANT_SIZES[qtype]
    blocks = rng.integers(0, 256, (n * k // block_size, type_size), dtype=np.uint8)
    for offset in F16_FIELDS[qtype]:
        scale = (rng.uniform(0.5, 2.0, len(blocks)) * rng.choice([-1, 1], len(blocks)) / 64).astype(np.float16)
        blocks[:, offset:offset + 2] = scale.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(n, row_bytes(qtype, k))


def reference(raw: np.ndarray, qtype: Q, x: np.ndarray, f16_tiles: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(W @ x per token, the error allowed: see the module docstring) in float64, as [T, N]."""
    w = dequantize(raw, qtype).astype(np.float64)
    x64 = x.astype(np.float64)
    magnitude = np.abs(x64) @ np.abs(w).T
    if f16_tiles:
        subnormal = np.abs(w).sum(axis=1)[None, :] + np.abs(x64).sum(axis=1)[:, None]
        return x64 @ w.T, (REL_TOL + F16_REL_TOL) * magnitude + F16_ABS_TOL * subnormal
    return x64 @ w.T, REL_TOL * magnitude


def uses_f16_tiles(ex: Executor, qtype: Q, t_max: int, kernel: LinearKernel | None, whole_rows: bool | None) -> bool:
    """Whether linear with these arguments runs the GPU matmul with f16 tiles."""
    tiled = not (ex.device.is_software if whole_rows is None else whole_rows)
    matmul = (kernel or plan.default_kernel(t_max, not tiled, ex.tuning)) is LinearKernel.MATMUL
    return matmul and tiled and plan.tiles_in_f16(device_traits(ex.device), qtype, ex.tuning)



def tuned(ex: Executor, **changes: Any) -> Executor:
    """An executor on ex's device whose programs plan with DEFAULT_TUNING but for `changes`."""
    return Executor(ex.device, int8_matmuls=ex.int8_matmuls, tuning=replace(DEFAULT_TUNING, **changes))


def run_linear(
    ex: Executor, qtype: Q, k: int, n: int, t_max: int, n_tokens: int, *, seed: int = 0,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, max_shard_bytes: int | None = None,
    whole_rows: bool | None = None, nan_past_step: bool = False, x_activation: bool = False,
) -> tuple[QuantWeight, Program]:
    """Run one linear layer on random data and check it against numpy; returns the weight and the program.
    nan_past_step: x's rows past n_tokens hold NaN. x_activation: the linear reads x + 0 made in the step (an
    activation) rather than the input tensor."""
    rng = np.random.default_rng(seed)
    raw = random_weight_bytes(rng, qtype, k, n)
    weight = upload_weight(ex, "w", qtype, k, n, raw, max_shard_bytes=max_shard_bytes)
    x = rng.standard_normal((t_max, k)).astype(np.float32)
    if nan_past_step:
        x[n_tokens:] = np.nan
    xt = ex.tensor("x", x.shape, data=x)
    yt = ex.tensor("y", (t_max, n), data=np.full((t_max, n), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "linear")
    if x_activation:
        zeros = ex.tensor("zeros", x.shape, data=np.zeros_like(x))
        made = b.activation("x", x.shape)
        add(b, xt, zeros, made)
        xt = made
    linear(b, weight, xt, yt, t_max, kernel=kernel, subgroups=subgroups, whole_rows=whole_rows)
    program = b.build()
    got, = ex.run(program, StepParams(n_tokens), read=[yt])
    want, allowed = reference(raw, qtype, x[:n_tokens], uses_f16_tiles(ex, qtype, t_max, kernel, whole_rows))
    err = np.abs(got[:n_tokens] - want)
    worst = np.unravel_index(np.argmax(err / allowed), err.shape)
    assert np.all(err <= allowed), (
        f"{qtype.name} {k}x{n}: token {worst[0]} row {worst[1]}: got {got[worst]}, want {want[worst]}")
    assert np.all(got[n_tokens:] == SENTINEL), "rows past n_tokens were written"
    return weight, program


def small_k(qtype: Q, blocks: int) -> int:
    return block_values(qtype) * blocks


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_matvec_decode(ex: Executor, qtype: Q, subgroups: bool) -> None:
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    # K of several blocks (more 16-value groups than threads per row for the small blocks), N odd
    run_linear(ex, qtype, small_k(qtype, 24 if block_values(qtype) <= 32 else 3), 45, 1, 1,
               kernel=LinearKernel.MATVEC, subgroups=subgroups, whole_rows=False)


@pytest.mark.parametrize("tokens", [1, MATVEC_MAX_TOKENS])
@pytest.mark.parametrize("wide", [True, False], ids=["wide", "generic"])
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_matvec_k_quant_kernels(ex: Executor, qtype: Q, wide: bool, tokens: int) -> None:
    """Q4_K and Q6_K through their own kernels (matvec_q4_k/q6_k.wgsl) and through the generic one: 10 blocks a
    row (units of the last block split over lanes unevenly; Q6_K's 210-byte blocks alternate between 4-aligned
    and 2 bytes past), every sub-block's scale, and a row count that leaves a partial workgroup."""
    run_linear(tuned(ex, wide_matvec=wide), qtype, 2560, 37, tokens, tokens, seed=12, kernel=LinearKernel.MATVEC,
               subgroups=ex.device.has("subgroup"), whole_rows=False)


@pytest.mark.parametrize("tokens", [1, MATVEC_MAX_TOKENS])
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_matvec_row_pairs(ex: Executor, qtype: Q, subgroups: bool, tokens: int) -> None:
    """Q4_K and Q6_K rows two a thread on one load of x (PAIRS, row_pairs_shape), made to apply at K = 2560: 45
    rows, an odd count, so that the last workgroup's pair row falls past the shard (read clamped, not stored)."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    ex = tuned(ex, row_pairs_min_k=2560)
    _, program = run_linear(ex, qtype, 2560, 45, tokens, tokens, seed=21, kernel=LinearKernel.MATVEC,
                            subgroups=subgroups, whole_rows=False)
    assert program.dispatches[-1].defines["PAIRS"] == 1, "the matvec did not take rows in pairs"


@pytest.mark.parametrize(("t_max", "n_tokens"), [(4, 3), (MATVEC_MAX_TOKENS, MATVEC_MAX_TOKENS)])
@pytest.mark.parametrize("blocks", [1, 5])
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_matvec_q4_k_word_lanes(ex: Executor, subgroups: bool, blocks: int, t_max: int, n_tokens: int) -> None:
    """Q4_K steps of Q4_WORD_LANES_MIN_TOKENS tokens or more, a row's lanes along each block's quant words
    (matvec/q4_k_words.wgsl) at 64 threads a row: one block a row (the second 32 lanes hold nothing) and five (three
    blocks for the first 32 lanes, two for the others); fewer tokens than the program's rows; 45 rows in pairs, the
    last pair row past the shard."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    assert t_max >= DEFAULT_TUNING.q4_word_lanes_min_tokens
    _, program = run_linear(ex, Q.Q4_K, 256 * blocks, 45, t_max, n_tokens, seed=22, kernel=LinearKernel.MATVEC,
                            subgroups=subgroups, whole_rows=False)
    defines = program.dispatches[-1].defines
    assert (defines.get("LANE_WORDS"), defines["TPR"], defines["ROWS"]) == (1, 64, 2), "no word lanes"


# (type, program rows, step tokens) of the matvecs that compute every row of x (matmul_plan.computes_every_row)
EVERY_ROW_STEPS = [(Q.Q4_K, MATVEC_MAX_TOKENS, 5), (Q.Q4_K, 4, 1), (Q.Q6_K, 2, 1), (Q.Q6_K, 4, 3)]


@pytest.mark.parametrize(("qtype", "t_max", "n_tokens"), EVERY_ROW_STEPS, ids=lambda v: getattr(v, "name", v))
def test_matvec_every_row(ex: Executor, qtype: Q, t_max: int, n_tokens: int) -> None:
    """The matvecs that compute every row of x (EVERY_ROW: Q4_K on word lanes, Q6_K steps of a few tokens): rows of
    x past the step's tokens hold NaN, as stale rows may, and the step's outputs are still right and the rows past
    it untouched (the fused gate-up: tests/gpu/test_linear_glu.py)."""
    _, program = run_linear(ex, qtype, 1280, 45, t_max, n_tokens, seed=25, kernel=LinearKernel.MATVEC,
                            whole_rows=False, nan_past_step=True)
    assert program.dispatches[-1].defines.get("EVERY_ROW") == 1, "the matvec did not compute every row"


@pytest.mark.parametrize("pairs", [False, True], ids=["rows", "pairs"])
@pytest.mark.parametrize("interleave", [2, 8])
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize(("qtype", "kernel"), [(Q.Q8_0, "matvec"), (Q.Q5_0, "matvec"), (Q.Q6_K, "matvec_q6_k"),
                                               (Q.Q4_K, "matvec_q4_k")], ids=lambda v: getattr(v, "name", v))
def test_matvec_row_interleave(ex: Executor, qtype: Q, kernel: str, subgroups: bool, interleave: int, pairs: bool,
                               ) -> None:
    """Steps of INTERLEAVE_MIN_TOKENS tokens or more: a workgroup's rows alternating thread by thread (INTERLEAVE), in
    the generic kernel and the K-quant ones (Q4_K along units: word lanes off), at 16 threads a row and 8 row slots a
    workgroup: with 8 rows interleaved a row's lanes span four subgroups of 32 (its sums meet in workgroup memory),
    with 2 they sit in one; rows in pairs or not; 45 rows, the last workgroup partial; fewer tokens than the program's
    rows."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    if pairs and kernel not in plan.ROW_PAIRS_KERNELS:
        pytest.skip("the generic kernel does not pair rows")
    assert DEFAULT_TUNING.interleave_min_tokens <= MATVEC_MAX_TOKENS
    shape = MatvecShape(16, 8)
    ex = tuned(ex, q4_word_lanes_min_tokens=MATVEC_MAX_TOKENS + 1, row_interleave=interleave, matvec_split=shape,
               row_pairs=pairs)
    _, program = run_linear(ex, qtype, 2560, 45, MATVEC_MAX_TOKENS, MATVEC_MAX_TOKENS - 1, seed=23,
                            kernel=LinearKernel.MATVEC, subgroups=subgroups, whole_rows=False)
    dispatch = program.dispatches[-1]
    chosen = [dispatch.kernel] + [dispatch.defines[key] for key in ("TPR", "ROWS", "PAIRS", "INTERLEAVE")]
    assert chosen == [kernel, *shape, int(pairs), interleave]


@pytest.mark.parametrize("pairs", [False, True], ids=["rows", "pairs"])
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize(("qtype", "kernel"), [(Q.Q8_0, "matvec"), (Q.Q6_K, "matvec_q6_k"),
                                               (Q.Q4_K, "matvec_q4_k")], ids=lambda v: getattr(v, "name", v))
def test_matvec_one_token_interleave(ex: Executor, qtype: Q, kernel: str, subgroups: bool, pairs: bool) -> None:
    """One-token steps: a workgroup's rows interleaved in twos (one_token_row_interleave) by default, in the generic
    kernel and the K-quant ones, rows in pairs or not, at 16 threads a row and 8 row slots a workgroup; 45 rows, the
    last workgroup partial (the fused gate-up: tests/gpu/test_linear_glu.py)."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    if pairs and kernel not in plan.ROW_PAIRS_KERNELS:
        pytest.skip("the generic kernel does not pair rows")
    shape = MatvecShape(16, 8)
    ex = tuned(ex, matvec_split=shape, row_pairs=pairs, row_pairs_min_k=256)
    _, program = run_linear(ex, qtype, 2560, 45, 1, 1, seed=24, kernel=LinearKernel.MATVEC, subgroups=subgroups,
                            whole_rows=False)
    dispatch = program.dispatches[-1]
    chosen = [dispatch.kernel] + [dispatch.defines[key] for key in ("TPR", "ROWS", "PAIRS", "INTERLEAVE")]
    assert chosen == [kernel, *shape, int(pairs), DEFAULT_TUNING.one_token_row_interleave]


def random_normed_input(ex: Executor, rng: np.random.Generator, t: int, k: int, eps: float, post_norm: bool = True,
                        ) -> tuple[matmul_ops.NormedInput, np.ndarray, np.ndarray]:
    """A NormedInput of t random rows of k values, and in float64 what it computes: the residual r (written to
    its residual_out) and the normalised input x. post_norm False: a plain residual add (no w_post)."""
    block_out, residual = (rng.standard_normal((t, k)).astype(np.float32) * s for s in (3.0, 1.0))
    w_post, w_next = (rng.uniform(0.5, 1.5, k).astype(np.float32) for _ in range(2))
    tensors = [ex.tensor(name, a.shape, data=a) for name, a in
               (("block_out", block_out), ("residual", residual), ("w_post", w_post), ("w_next", w_next))]
    residual_out = ex.tensor("residual_out", (t, k), data=np.zeros((t, k), np.float32))

    def rms_norm(v: np.ndarray) -> np.ndarray:
        return v / np.sqrt(np.mean(v * v, axis=1, keepdims=True) + eps)

    if post_norm:
        r = residual.astype(np.float64) + rms_norm(block_out.astype(np.float64)) * w_post
    else:
        r = residual.astype(np.float64) + block_out
    normed = matmul_ops.NormedInput(tensors[0], tensors[2] if post_norm else None, tensors[1], tensors[3],
                                    residual_out, eps)
    return normed, r, rms_norm(r) * w_next


# 1 x 2560 and 1 x 1312: several vec4s of the row a thread, the last of them past the row for some (1312: Q8_0 only)
@pytest.mark.parametrize("k, t", [(512, 3), (2560, 1), (1312, 1)], ids=["3x512", "1x2560", "1x1312"])
@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
@pytest.mark.parametrize("qtype", [Q.Q4_K, Q.Q6_K, Q.Q8_0], ids=lambda q: q.name)
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_matvec_normed_input(ex: Executor, subgroups: bool, qtype: Q, glu: bool, k: int, t: int) -> None:
    """A NormedInput: every workgroup normalises residual + rms_norm(block_out) * w_post itself (its sums of
    squares by the entry point's workgroup_sum: a tree, or subgroup sums), workgroup 0 writes that sum to
    residual_out; compared with numpy in float64 (the linear's tolerance on the normalised input, whose own
    f32 rounding is a few ulp)."""
    rng = np.random.default_rng(13)
    if k % block_values(qtype):
        pytest.skip(f"K = {k} is not a multiple of {qtype.name}'s block")
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    n, eps = 70, 1e-6
    rows = 2 * n if glu else n
    raw = random_weight_bytes(rng, qtype, k, rows)
    weight = upload_weight(ex, "w", qtype, k, rows, raw)
    normed, r, x = random_normed_input(ex, rng, t, k, eps)
    check_normed_matvec(ex, qtype, raw, weight, normed, r, x, n, glu, subgroups)


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_matvec_normed_input_without_post_norm(ex: Executor, subgroups: bool) -> None:
    """A NormedInput of a block without post-norm (Llama, Qwen): residual + block_out, then the next norm."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    rng = np.random.default_rng(14)
    n, k = 70, 512
    raw = random_weight_bytes(rng, Q.Q8_0, k, 2 * n)
    weight = upload_weight(ex, "w", Q.Q8_0, k, 2 * n, raw)
    normed, r, x = random_normed_input(ex, rng, 3, k, 1e-6, post_norm=False)
    check_normed_matvec(ex, Q.Q8_0, raw, weight, normed, r, x, n, True, subgroups)


def check_normed_matvec(ex: Executor, qtype: Q, raw: np.ndarray, weight: QuantWeight, normed: matmul_ops.NormedInput,
                        r: np.ndarray, x: np.ndarray, n: int, glu: bool, subgroups: bool) -> Program:
    """Run a matvec (linear_glu with glu) of weight on normed and check residual_out against r and y against
    numpy on x (random_normed_input's), the linear's tolerance carried through the GELU for the GLU."""
    t = x.shape[0]
    y = ex.tensor("y", (t, n), data=np.full((t, n), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "normed")
    (linear_glu if glu else linear)(b, weight, normed, y, t, kernel=LinearKernel.MATVEC, subgroups=subgroups,
                                    whole_rows=False)
    program = b.build()
    got, got_residual = ex.run(program, StepParams(t), read=[y, normed.residual_out])
    np.testing.assert_allclose(got_residual, r, rtol=1e-5, atol=1e-5)
    want, allowed = reference(raw, qtype, x, False)
    if glu:
        gate, up = want[:, :n], want[:, n:]
        want = 0.5 * gate * (1 + np.tanh(np.sqrt(2 / np.pi) * (gate + 0.044715 * gate ** 3))) * up
        allowed = (allowed[:, :n] * np.abs(up) + allowed[:, n:] * np.abs(gate)) * 1.5 + 1e-5
    assert np.all(np.abs(got - want) <= allowed + 1e-5 * np.abs(want))
    return program


@pytest.mark.parametrize("glu", [False, True], ids=["linear", "glu"])
def test_matvec_normed_odd_workgroup(ex: Executor, glu: bool) -> None:
    """A normalised input on the subgroup reduction takes workgroups of rows that need not be a power of two
    (wide_matvec_shape's max_threads): 2560 Q4_K rows of 512 values give 10 rows a workgroup, 256 workgroups;
    the sums and the residual against numpy as in test_matvec_normed_input."""
    if not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    rng = np.random.default_rng(19)
    k, n, eps = 512, 2560, 1e-6
    rows = 2 * n if glu else n
    raw = random_weight_bytes(rng, Q.Q4_K, k, rows)
    weight = upload_weight(ex, "w", Q.Q4_K, k, rows, raw)
    normed, r, x = random_normed_input(ex, rng, 1, k, eps)
    program = check_normed_matvec(ex, Q.Q4_K, raw, weight, normed, r, x, n, glu, subgroups=True)
    rows = program.dispatches[-1].defines["ROWS"]
    assert rows & (rows - 1), f"power-of-two rows: {rows}"


@pytest.mark.parametrize("tokens", [1, 3])
@pytest.mark.parametrize("normed", [False, True], ids=["plain", "normed"])
@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_matvec_stacked(ex: Executor, subgroups: bool, normed: bool, tokens: int) -> None:
    """A Q4_K matrix and a Q6_K one of the same input in one dispatch (linear_stacked, matvec_q4_k_q6_k.wgsl): 48
    Q4_K rows then 37 Q6_K rows (a partial last workgroup), on a plain input and on a NormedInput; each part
    against numpy with the linear's tolerance, as the q|k and v of a Gemma 3 4B layer."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    rng = np.random.default_rng(17)
    k, eps = 512, 1e-6
    parts = [(Q.Q4_K, 48), (Q.Q6_K, 37)]
    raws = [random_weight_bytes(rng, qtype, k, n) for qtype, n in parts]
    first, second = (upload_weight(ex, f"w{i}", qtype, k, n, raw)
                     for i, ((qtype, n), raw) in enumerate(zip(parts, raws)))
    if normed:
        source, r, x = random_normed_input(ex, rng, tokens, k, eps)
    else:
        x = rng.standard_normal((tokens, k)).astype(np.float32)
        source = ex.tensor("x", x.shape, data=x)
    y = ex.tensor("y", (tokens, 85), data=np.full((tokens, 85), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "stacked")
    assert matmul_ops.stacks_in_one_matvec(b, first, second, tokens, subgroups, whole_rows=False)
    matmul_ops.linear_stacked(b, first, second, source, y, tokens, subgroups=subgroups, whole_rows=False)
    program = b.build()
    assert [d.kernel for d in program.dispatches] == ["matvec_q4_k_q6_k"]
    if normed:
        got, got_residual = ex.run(program, StepParams(tokens), read=[y, source.residual_out])
        np.testing.assert_allclose(got_residual, r, rtol=1e-5, atol=1e-5)
    else:
        got, = ex.run(program, StepParams(tokens), read=[y])
    for (qtype, _), raw, columns in zip(parts, raws, (slice(0, 48), slice(48, 85))):
        want, allowed = reference(raw, qtype, x, False)
        err = np.abs(got[:, columns] - want)
        assert np.all(err <= allowed + 1e-5 * np.abs(want)), f"{qtype.name} rows: worst {err.max()}"


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize("tpr", [2, 8, 64])
def test_matvec_threads_per_row(ex: Executor, tpr: int, subgroups: bool) -> None:
    """Each split of a row whatever the adapter picks: fewer threads per row than a subgroup, as many
    (lavapipe's is 8), and more (64 is two NVIDIA subgroups), each with a partial last workgroup."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    for wide in (False, True):  # matvec.wgsl, then matvec_q6_k.wgsl (64 threads: K = 4096 has 128 units)
        run_linear(tuned(ex, matvec_split=MatvecShape(tpr, 4), wide_matvec=wide), Q.Q6_K, 4096, 9, 1, 1, seed=7,
                   kernel=LinearKernel.MATVEC, subgroups=subgroups,
                   whole_rows=False)


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
def test_matvec_short_rows(ex: Executor, subgroups: bool) -> None:
    """K = 128: 2 to 4 threads per row, fewer than a subgroup (8 on lavapipe, 32 on NVIDIA)."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    run_linear(ex, Q.Q8_0, 128, 75, 1, 1, seed=8, kernel=LinearKernel.MATVEC, subgroups=subgroups, whole_rows=False)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_matvec_few_tokens(ex: Executor, qtype: Q) -> None:
    run_linear(ex, qtype, small_k(qtype, 2), 19, MATVEC_MAX_TOKENS, MATVEC_MAX_TOKENS - 1, seed=1,
               kernel=LinearKernel.MATVEC, subgroups=False, whole_rows=False)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_matvec_whole_rows(ex: Executor, qtype: Q) -> None:
    """The software adapters' kernels (whole rows per thread; Q8_0 by aligned block pairs), on any
    adapter: N not a multiple of the 4 rows per thread, fewer tokens than T_MAX."""
    run_linear(ex, qtype, small_k(qtype, 4 if block_values(qtype) <= 32 else 2), 75, MATVEC_MAX_TOKENS,
               MATVEC_MAX_TOKENS - 1, seed=9, kernel=LinearKernel.MATVEC, whole_rows=True)


@pytest.mark.parametrize("tokens", [1, MATVEC_MAX_TOKENS - 1])
@pytest.mark.parametrize("k,n", [(640, 300), (96, 41)], ids=["pairs-kernel", "odd-block-count"])
def test_matvec_whole_rows_q8_0(ex: Executor, k: int, n: int, tokens: int) -> None:
    """Q8_0 by block pairs (K = 640: rows at 8-byte but not 16-byte offsets, so a pair's first word
    takes every place in its vec4), and K = 96 (3 blocks), which falls back to the generic kernel;
    one token, and several on one read of each pair's words."""
    run_linear(ex, Q.Q8_0, k, n, MATVEC_MAX_TOKENS, tokens, seed=10, kernel=LinearKernel.MATVEC, whole_rows=True)


@pytest.mark.parametrize("tokens", [1, MATVEC_MAX_TOKENS - 1])
@pytest.mark.parametrize("k,n,kernel", [(640, 300, "matvec_q5_0_rows"), (1024, 45, "matvec_q5_0_rows"),
                                        (96, 41, "matvec")], ids=["quads-640", "quads-1024", "odd-quad-count"])
def test_matvec_whole_rows_q5_0(ex: Executor, k: int, n: int, kernel: str, tokens: int) -> None:
    """Q5_0 by block quads (K = 640: rows at 8-byte but not 16-byte offsets, so a quad's first word takes places 0
    and 2 in its vec4; K = 1024 over two shards), and K = 96 (3 blocks), which falls back to the generic kernel;
    one token, and several on one read of each quad's words."""
    shard_bytes = 30 * row_bytes(Q.Q5_0, k) if k == 1024 else None
    weight, program = run_linear(ex, Q.Q5_0, k, n, MATVEC_MAX_TOKENS, tokens, seed=11, kernel=LinearKernel.MATVEC,
                                 whole_rows=True, max_shard_bytes=shard_bytes)
    assert {d.kernel for d in program.dispatches} == {kernel}
    assert len(weight.shards) == (2 if shard_bytes else 1)


@pytest.mark.parametrize("tokens", [1, MATVEC_MAX_TOKENS - 1])
@pytest.mark.parametrize("k,n", [(1024, 640), (2048, 45)], ids=["one-shard", "two-shards"])
def test_matvec_whole_rows_q4_k(ex: Executor, k: int, n: int, tokens: int) -> None:
    """Q4_K by vec4 units (its header once a block), 640 rows (a workgroup's rows partial) and 45 over two shards;
    one token, and several."""
    shard_bytes = 30 * row_bytes(Q.Q4_K, k) if n == 45 else None
    weight, program = run_linear(ex, Q.Q4_K, k, n, MATVEC_MAX_TOKENS, tokens, seed=12, kernel=LinearKernel.MATVEC,
                                 whole_rows=True, max_shard_bytes=shard_bytes)
    assert {d.kernel for d in program.dispatches} == {"matvec_q4_k_rows"}
    assert len(weight.shards) == (2 if shard_bytes else 1)


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q6_K], ids=lambda q: q.name)
def test_matvec_whole_rows_on_an_activation(ex: Executor, qtype: Q) -> None:
    """x made in the step: on a software adapter an activation binds as a uniform too, and the whole-row matvecs
    (the block kernels, and matvec.wgsl's for Q6_K) read it there; the same sums either way."""
    _, program = run_linear(ex, qtype, 1024, 75, 1, 1, seed=13, kernel=LinearKernel.MATVEC, whole_rows=True,
                            x_activation=True)
    matvec, = [d for d in program.dispatches if d.kernel.startswith("matvec")]
    assert matvec.defines["X_SOURCE"] == ("uniform" if ex.device.is_software else "direct")


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_matmul(ex: Executor, qtype: Q) -> None:
    # two token tiles and two row tiles (the second of each partial), K of 2 blocks
    run_linear(ex, qtype, small_k(qtype, 2), 150, 70, 67, seed=2, kernel=LinearKernel.MATMUL)


@pytest.mark.parametrize("whole_rows", [False, True], ids=["tiled", "whole-rows"])
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q5_0, Q.Q4_K, Q.Q6_K, Q.F16], ids=lambda q: q.name)
def test_matmul_variants(ex: Executor, qtype: Q, whole_rows: bool) -> None:
    """Both splits on any adapter (tiled for GPUs, whole rows for software adapters): two token and
    row tiles of the whole-row split (128 rows x 64 tokens), the last of each partial."""
    run_linear(ex, qtype, small_k(qtype, 2), 150, 70, 67, seed=11, kernel=LinearKernel.MATMUL, whole_rows=whole_rows)


@pytest.mark.parametrize("t_max,n_tokens", [(2, 2), (4, 3), (5, 5)])
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K], ids=lambda q: q.name)
def test_matmul_whole_rows_few_tokens(ex: Executor, qtype: Q, t_max: int, n_tokens: int) -> None:
    """The whole-row matmul of a batched decode step on software adapters: fewer tokens a thread than 8 (as many
    as the step's t_max), the step itself shorter than t_max or not."""
    run_linear(ex, qtype, small_k(qtype, 2), 75, t_max, n_tokens, seed=16, kernel=LinearKernel.MATMUL,
               whole_rows=True)


@pytest.mark.parametrize("f16", [False, True], ids=["f32-tiles", "f16-tiles"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_matmul_tiles(ex: Executor, qtype: Q, f16: bool) -> None:
    """The GPU matmul with f32 and with f16 tiles on every weight type, on any adapter: two token
    and two row tiles of the default tile (64 x 128), the last of each partial."""
    if f16 and not ex.device.has("shader-f16"):
        pytest.skip("adapter without shader-f16")
    ex = tuned(ex, f16_tile_types=frozenset(TYPES) if f16 else frozenset())
    run_linear(ex, qtype, small_k(qtype, 2), 150, 70, 67, seed=12, kernel=LinearKernel.MATMUL, whole_rows=False)


# Every tile matmul_tile picks, with k in 1 to 8 parts (added by matmul_reduce), 4 vec4 of x per thread, and 8 tokens
# a thread with 8 or 4 rows.
T = MatmulTile
TILE_SHAPES = [T(64, 128, 8, 32), T(128, 64, 8, 32), T(64, 64, 4, 32), T(32, 128, 8, 16), T(32, 64, 4, 32),
               T(16, 64, 8, 16), T(16, 64, 4, 16), T(64, 128, 8, 32, 2), T(64, 64, 4, 32, 8), T(64, 64, 8, 32, 4),
               T(128, 128, 8, 16, 1, 8), T(64, 128, 8, 32, 2, 8), T(64, 64, 4, 16, 1, 8)]


@pytest.mark.parametrize("tile", TILE_SHAPES, ids=lambda t: "x".join(map(str, t)))
def test_matmul_tile_shapes(ex: Executor, tile: MatmulTile) -> None:
    """Each tile shape: partial token and row tiles, K of several chunks."""
    assert tile.problem(512, False) is None
    run_linear(tuned(ex, tile=tile), Q.Q4_K, 512, 150, 70, 67, seed=13, kernel=LinearKernel.MATMUL, whole_rows=False)


@pytest.mark.parametrize(("qtype", "split", "chunks"), [(Q.Q8_0, 3, 18), (Q.Q8_0, 5, 30), (Q.Q8_0, 6, 36),
                                                         (Q.Q8_0, 3, 20), (Q.Q8_0, 5, 32), (Q.Q8_0, 7, 8),
                                                         (Q.Q4_K, 3, 64), (Q.Q4_K, 5, 48)],
                         ids=lambda v: v.name if isinstance(v, Q) else str(v))
def test_matmul_uneven_splits(ex: Executor, qtype: Q, split: int, chunks: int) -> None:
    """k in a number of parts other than a power of two, as _whole_waves_split picks on NVIDIA GPUs (the 4B's o in
    3): the 8 x 8 tile, partial token and row tiles, parts of equal chunks and parts a chunk apart (20 chunks in 3
    parts: 6, 7, 7). For Q4_K, parts that start inside a block of 16 chunks (64 in 3: 21, 21, 22), whose first
    chunk must load the block's head, which the tiles then keep for the block's later chunks."""
    tile = T(128, 128, 8, 16, split, 8)
    k = 16 * chunks
    assert tile.problem(k, False) is None
    run_linear(tuned(ex, tile=tile), qtype, k, 150, 140, 131, seed=15, kernel=LinearKernel.MATMUL, whole_rows=False)


def test_matmul_split_sharded(ex: Executor) -> None:
    """k split over workgroups on a sharded weight: each shard's parts and reduction."""
    weight, _ = run_linear(tuned(ex, tile=T(32, 64, 4, 32, 2)), Q.Q8_0, 128, 90, 8, 7, seed=14,
                           kernel=LinearKernel.MATMUL, whole_rows=False,
                           max_shard_bytes=30 * row_bytes(Q.Q8_0, 128) + 4)
    assert len(weight.shards) == 3


@pytest.mark.parametrize("n_tokens", [1, 5, 12])
def test_matmul_token_counts(ex: Executor, n_tokens: int) -> None:
    run_linear(ex, Q.Q5_0, 64, 33, 12, n_tokens, seed=3 + n_tokens, kernel=LinearKernel.MATMUL)


@pytest.mark.parametrize("kernel", list(LinearKernel), ids=lambda k: k.value)
@pytest.mark.parametrize("qtype,n,shard_rows", [(Q.Q8_0, 90, 30), (Q.Q6_K, 50, 16), (Q.Q4_K, 21, 5)],
                         ids=["Q8_0-3-even-shards", "Q6_K-4-shards-short-last", "Q4_K-5-shards-short-last"])
def test_sharded(ex: Executor, kernel: LinearKernel, qtype: Q, n: int, shard_rows: int) -> None:
    k = small_k(qtype, 2)
    t_max = 1 if kernel is LinearKernel.MATVEC else 8
    # the +4 keeps room for upload_weight's 4 spare bytes, so each shard holds exactly shard_rows rows
    weight, _ = run_linear(ex, qtype, k, n, t_max, t_max, seed=4, kernel=kernel,
                           max_shard_bytes=shard_rows * row_bytes(qtype, k) + 4)
    assert len(weight.shards) == -(-n // shard_rows) >= 3
    assert [s.n_rows for s in weight.shards][:-1] == [shard_rows] * (len(weight.shards) - 1)


def test_default_kernel_choice(ex: Executor) -> None:
    """linear picks matvec for few tokens and matmul past MATVEC_MAX_TOKENS (past one token on software adapters,
    where the whole-row matmul takes batched decode); both agree with numpy."""
    tokens = (1, MATVEC_MAX_TOKENS, MATVEC_MAX_TOKENS + 1)
    assert [plan.default_kernel(t, False, DEFAULT_TUNING) for t in tokens] == [
        LinearKernel.MATVEC, LinearKernel.MATVEC, LinearKernel.MATMUL]
    assert [plan.default_kernel(t, True, DEFAULT_TUNING) for t in (1, 2)] == [LinearKernel.MATVEC, LinearKernel.MATMUL]
    for t_max in (1, 2, MATVEC_MAX_TOKENS + 1):
        run_linear(ex, Q.Q8_0, 64, 40, t_max, t_max, seed=5)


def test_rejects_bad_shapes(ex: Executor) -> None:
    rng = np.random.default_rng(6)
    weight = upload_weight(ex, "w", Q.F16, 40, 4, random_weight_bytes(rng, Q.F16, 40, 4))
    b = ProgramBuilder(ex, "bad")
    with pytest.raises(ValueError, match="multiple of 16"):
        linear(b, weight, ex.tensor("x", (1, 40)), ex.tensor("y", (1, 4)), 1)
    weight = upload_weight(ex, "w", Q.Q8_0, 64, 4, random_weight_bytes(rng, Q.Q8_0, 64, 4))
    with pytest.raises(ValueError, match="x"):
        linear(b, weight, ex.tensor("x", (1, 32)), ex.tensor("y", (1, 4)), 1)


@pytest.mark.parametrize("int8", [False, True], ids=["f32", "int8"])
def test_split_parts_added_by_the_residual_norm(device: Device, int8: bool) -> None:
    """A k-split matmul's parts left for the residual norm (linear_output -> SplitSums) give the x and h of
    matmul_reduce then the residual norm, bit for bit (the parts added in the same order), for f32 and int8 tiles
    (the 270M's o, 1024 x 640, at 64 tokens: k in 8 parts, 4 in int8), and the gathering norm of the last layer."""
    from gpu.ops import transformer as ops
    from gpu.ops.split_sums import SplitSums

    ex = Executor(device)
    rng = np.random.default_rng(31)
    k, n, t_max, n_tokens = 1024, 640, 64, 50
    raw = random_weight_bytes(rng, Q.Q4_K, k, n)
    weight = upload_weight(ex, "w", Q.Q4_K, k, n, raw)
    a = ex.tensor("a", (t_max, k), data=rng.standard_normal((t_max, k)).astype(np.float32))
    x0 = (rng.standard_normal((t_max, n)) * 20).astype(np.float32)
    w_post, w_next = (ex.tensor(name, (n,), data=rng.standard_normal(n).astype(np.float32)) for name in "pn")
    out_rows = ex.tensor("rows", (2,), "u32", data=np.array([49, 3], np.uint32))
    results = []
    for leave_parts in (False, True):
        x = ex.tensor(f"x{leave_parts}", x0.shape, data=x0)
        h = ex.tensor(f"h{leave_parts}", (t_max, n))
        last = ex.tensor(f"last{leave_parts}", (2, n))
        b = ProgramBuilder(ex, "split")
        if leave_parts:
            y = matmul_ops.linear_output(b, weight, a, "o", t_max, whole_rows=False, int8=int8)
            assert isinstance(y, SplitSums) and y.split == (4 if int8 else 8)
        else:
            y = b.activation("o", (t_max, n))
            matmul_ops.linear(b, weight, a, y, t_max, whole_rows=False, int8=int8)
        ops.residual_norm(b, y, w_post, x, w_next, h, 1e-6)
        ops.residual_norm(b, y, w_post, x, w_next, last, 1e-6, out_rows=out_rows)
        program = b.build()
        kernels = [d.kernel for d in program.dispatches]
        assert ("matmul_reduce" in kernels) != leave_parts
        assert any(("tiles_i8]" if int8 else "tiles,f32,") in d.label for d in program.dispatches)
        results.append(ex.run(program, StepParams(n_tokens, n_out=2), read=[x, h, last]))
    for want, got in zip(*results):
        np.testing.assert_array_equal(got[:n_tokens], want[:n_tokens])
