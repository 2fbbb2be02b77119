"""The fused gate-up linear (linear_glu) against numpy on every weight type and kernel variant.

y = gelu_tanh(x Wg^T) * (x Wu^T), W = [Wg; Wu] one weight of 2F rows. The reference computes g and
u in float64 from gguf-py's dequantisation, as tests/gpu/test_matmul.py does, and the same gelu_tanh.

Tolerance: g and u carry the errors test_matmul.py allows a linear (eg, eu: a few f32 ulps of the
L1 magnitude, or f16 rounding of the operands with f16 tiles). They reach y as at most
|gelu_tanh'(g)| eg |u| + |gelu_tanh(g)| eu + eg eu, with |gelu_tanh'| < 1.2 everywhere; the f32
epilogue (tanh, products) adds a few ulps of |y| and of |g u|: we allow 1e-5 of each.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from gpu.ops.matmul import LinearKernel, block_values, linear_glu
from gpu.ops.matmul_plan import MatmulTile, MatvecShape, matmul_tile
from gpu.ops.matmul_tuning import DEFAULT_TUNING
from gpu.program import Executor, Program, ProgramBuilder, StepParams
from gpu.weights import row_bytes, upload_weight
from tests.gpu.test_matmul import (
    EVERY_ROW_STEPS,
    MATVEC_MAX_TOKENS,
    SENTINEL,
    TYPES,
    random_weight_bytes,
    reference,
    small_k,
    tuned,
    uses_f16_tiles,
)

GELU_SLOPE = 1.2  # bound of |d gelu_tanh / dg|
EPILOGUE_TOL = 1e-5  # of |y| and |g u|: the f32 epilogue


def gelu_tanh(g: np.ndarray) -> np.ndarray:
    return 0.5 * g * (1.0 + np.tanh(np.sqrt(2.0 / np.pi) * (g + 0.044715 * g ** 3)))


def silu(g: np.ndarray) -> np.ndarray:
    return g / (1.0 + np.exp(-g))


ACTIVATIONS = {"gelu_tanh": gelu_tanh, "silu": silu}  # both slopes are below GELU_SLOPE (silu's: 1.1)



def run_glu(
    ex: Executor, qtype: Q, k: int, f: int, t_max: int, n_tokens: int, *, seed: int = 0,
    kernel: LinearKernel | None = None, subgroups: bool | None = None, whole_rows: bool | None = None,
    max_shard_bytes: int | None = None, activation: str = "gelu_tanh", nan_past_step: bool = False,
) -> tuple[int, Program]:
    """Run linear_glu on random data and check it against numpy; returns (shards, the program). nan_past_step: x's
    rows past n_tokens hold NaN."""
    rng = np.random.default_rng(seed)
    raw = random_weight_bytes(rng, qtype, k, 2 * f)  # gate rows then up rows
    weight = upload_weight(ex, "w", qtype, k, 2 * f, raw, max_shard_bytes=max_shard_bytes)
    x = rng.standard_normal((t_max, k)).astype(np.float32)
    if nan_past_step:
        x[n_tokens:] = np.nan
    xt = ex.tensor("x", x.shape, data=x)
    yt = ex.tensor("y", (t_max, f), data=np.full((t_max, f), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "glu")
    linear_glu(b, weight, xt, yt, t_max, kernel=kernel, subgroups=subgroups, whole_rows=whole_rows,
               activation=activation)
    program = b.build()
    got, = ex.run(program, StepParams(n_tokens), read=[yt])

    f16 = uses_f16_tiles(ex, qtype, t_max, kernel, whole_rows)
    g, eg = reference(raw[:f], qtype, x[:n_tokens], f16)
    u, eu = reference(raw[f:], qtype, x[:n_tokens], f16)
    act = ACTIVATIONS[activation]
    want = act(g) * u
    allowed = (GELU_SLOPE * eg * np.abs(u) + np.abs(act(g)) * eu + eg * eu
               + EPILOGUE_TOL * (np.abs(want) + np.abs(g * u)))
    err = np.abs(got[:n_tokens] - want)
    worst = np.unravel_index(np.argmax(err / allowed), err.shape)
    assert np.all(err <= allowed), (
        f"{qtype.name} {k}x{f}: token {worst[0]} column {worst[1]}: got {got[worst]}, want {want[worst]}")
    assert np.all(got[n_tokens:] == SENTINEL), "rows past n_tokens were written"
    return len(weight.shards), program


def glu_k(qtype: Q, blocks_small: int, blocks_k: int) -> int:
    return small_k(qtype, blocks_small if block_values(qtype) <= 32 else blocks_k)


@pytest.mark.parametrize("variant", ["workgroup", "subgroup", "whole-rows"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_glu_decode(ex: Executor, qtype: Q, variant: str) -> None:
    """matvec: both reductions (GPUs) and whole rows (software adapters; Q8_0 by block pairs), F not
    a multiple of a workgroup's rows, fewer tokens than T_MAX."""
    if variant == "subgroup" and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    k = glu_k(qtype, 4, 2)
    shards, program = run_glu(ex, qtype, k, 45, MATVEC_MAX_TOKENS, MATVEC_MAX_TOKENS - 1, seed=1,
                              kernel=LinearKernel.MATVEC, subgroups=variant == "subgroup",
                              whole_rows=variant == "whole-rows")
    assert (shards, len(program.dispatches)) == (1, 1)


@pytest.mark.parametrize(("qtype", "kernel"), [(Q.Q8_0, "matvec_q8_0_rows"), (Q.Q5_0, "matvec_q5_0_rows"),
                                               (Q.Q4_K, "matvec_q4_k_rows")], ids=lambda v: getattr(v, "name", v))
def test_glu_one_token_whole_rows(ex: Executor, qtype: Q, kernel: str) -> None:
    """The software adapters' block kernels at one token (a program of T_MAX = 1, as decode runs them), whose loops
    take the gate rows and then the up rows (Q5_0), or each row's block pair straight into its dot (Q8_0)."""
    _, program = run_glu(ex, qtype, 1024, 45, 1, 1, seed=9, kernel=LinearKernel.MATVEC, whole_rows=True)
    assert [d.kernel for d in program.dispatches] == [kernel]


@pytest.mark.parametrize(("qtype", "t_max", "n_tokens"), EVERY_ROW_STEPS, ids=lambda v: getattr(v, "name", v))
def test_glu_every_row(ex: Executor, qtype: Q, t_max: int, n_tokens: int) -> None:
    """The gate-up in the matvecs that compute every row of x (tests/gpu/test_matmul.py test_matvec_every_row): x's
    rows past the step hold NaN."""
    _, program = run_glu(ex, qtype, 1280, 45, t_max, n_tokens, seed=8, kernel=LinearKernel.MATVEC, whole_rows=False,
                         nan_past_step=True)
    assert program.dispatches[-1].defines.get("EVERY_ROW") == 1, "the gate-up did not compute every row"


@pytest.mark.parametrize("subgroups", [False, True], ids=["workgroup", "subgroup"])
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q6_K, Q.Q4_K], ids=lambda q: q.name)
def test_glu_one_token_interleave(ex: Executor, qtype: Q, subgroups: bool) -> None:
    """One token: a workgroup's gate rows interleaved in twos (one_token_row_interleave; each thread on a gate
    row's lanes and its up row's), at 16 threads a row and 8 rows a workgroup, 45 rows: the last workgroup partial."""
    if subgroups and not ex.device.has("subgroup"):
        pytest.skip("adapter without subgroups")
    shape = MatvecShape(16, 8)
    _, program = run_glu(tuned(ex, matvec_split=shape), qtype, 2560, 45, 1, 1, seed=7, kernel=LinearKernel.MATVEC,
                         subgroups=subgroups, whole_rows=False)
    defines = program.dispatches[-1].defines
    assert [defines[key] for key in ("TPR", "ROWS", "GLU", "INTERLEAVE")] == [
        *shape, 1, DEFAULT_TUNING.one_token_row_interleave]


@pytest.mark.parametrize("qtype,k", [(Q.Q5_0, 640), (Q.Q8_0, 640), (Q.Q4_K, 1024)],
                         ids=["Q5_0-quads", "Q8_0-pairs", "Q4_K-units"])
def test_glu_whole_rows_blocks(ex: Executor, qtype: Q, k: int) -> None:
    """The software adapters' gate-up by block quads (Q5_0), pairs (Q8_0) and vec4 units (Q4_K), at K = 640 (rows
    not 16-byte aligned) and 1024, 45 gate rows, one token and several."""
    kernel = {Q.Q5_0: "matvec_q5_0_rows", Q.Q8_0: "matvec_q8_0_rows", Q.Q4_K: "matvec_q4_k_rows"}[qtype]
    for n_tokens in (1, MATVEC_MAX_TOKENS - 1):
        _, program = run_glu(ex, qtype, k, 45, MATVEC_MAX_TOKENS, n_tokens, seed=8, kernel=LinearKernel.MATVEC,
                             whole_rows=True, activation="silu")
        assert [d.kernel for d in program.dispatches] == [kernel]


@pytest.mark.parametrize("variant", ["f32-tiles", "f16-tiles", "whole-rows"])
@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_glu_prefill(ex: Executor, qtype: Q, variant: str) -> None:
    """matmul: the GPU tiles in f32 and f16 and the software adapters' whole rows; two token tiles
    and two column tiles, the last of each partial."""
    if variant == "f16-tiles" and not ex.device.has("shader-f16"):
        pytest.skip("adapter without shader-f16")
    ex = tuned(ex, f16_tile_types=frozenset(TYPES) if variant == "f16-tiles" else frozenset())
    k = glu_k(qtype, 2, 1)
    shards, program = run_glu(ex, qtype, k, 75, 70, 67, seed=2, kernel=LinearKernel.MATMUL,
                              whole_rows=variant == "whole-rows")
    split = variant != "whole-rows" and matmul_tile(k, 75, 70, DEFAULT_TUNING, glu=True).split > 1
    assert (shards, len(program.dispatches)) == (1, 2 if split else 1)


@pytest.mark.parametrize("kernel", [LinearKernel.MATVEC, LinearKernel.MATMUL], ids=lambda k: k.value)
@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_K], ids=lambda q: q.name)
def test_glu_silu(ex: Executor, qtype: Q, kernel: LinearKernel) -> None:
    """SwiGLU (Llama, Qwen, Mistral, Phi): the same kernels with silu in the epilogue."""
    t_max = MATVEC_MAX_TOKENS if kernel == LinearKernel.MATVEC else 70
    run_glu(ex, qtype, glu_k(qtype, 2, 1), 45, t_max, t_max - 1, seed=3, kernel=kernel, activation="silu")


@pytest.mark.parametrize("tile", [MatmulTile(64, 64, 8, 32), MatmulTile(32, 128, 8, 16, 2),
                                  MatmulTile(32, 64, 8, 16, 4), MatmulTile(32, 64, 8, 16, 1, 8),
                                  MatmulTile(128, 128, 8, 16, 2, 8)],
                         ids=lambda t: "x".join(map(str, t)))
def test_glu_tile_shapes(ex: Executor, tile: MatmulTile) -> None:
    """Other tile shapes with GLU: 4 vec4 of x per thread, k split in 2 and 4 (2 dispatches: the parts,
    then matmul_reduce's GLU epilogue), 8 tokens a thread."""
    _, program = run_glu(tuned(ex, tile=tile), Q.Q6_K, 512, 40, 40, 37, seed=3, kernel=LinearKernel.MATMUL,
                         whole_rows=False)
    assert len(program.dispatches) == (1 if tile.split == 1 else 2)


@pytest.mark.parametrize("kernel", list(LinearKernel), ids=lambda k: k.value)
@pytest.mark.parametrize("whole_rows", [False, True], ids=["gpu", "software"])
@pytest.mark.parametrize("qtype,f,shard_rows", [(Q.Q8_0, 45, 30), (Q.Q4_K, 20, 10)],
                         ids=["Q8_0-shard-across-gate-up", "Q4_K-shards-meet-at-F"])
def test_glu_sharded(ex: Executor, kernel: LinearKernel, whole_rows: bool, qtype: Q, f: int, shard_rows: int) -> None:
    """A weight over several shards: two linears (per shard, its gate rows and its up rows) into
    activations and glu_mul. Q8_0: shards [0, 30) [30, 60) [60, 90), the middle one holding gate
    and up rows; Q4_K: four shards, two of gate rows and two of up rows. (Matmul tiles without a k
    split, so that each part is one dispatch.)"""
    ex = tuned(ex, tile=MatmulTile(16, 64, 8, 16))
    k = small_k(qtype, 2) if qtype is Q.Q8_0 else small_k(qtype, 1)
    t_max = 1 if kernel is LinearKernel.MATVEC else 8
    shards, program = run_glu(ex, qtype, k, f, t_max, t_max, seed=4, kernel=kernel, whole_rows=whole_rows,
                              max_shard_bytes=shard_rows * row_bytes(qtype, k) + 4)
    straddling = int(f % shard_rows != 0)
    assert shards == -(-2 * f // shard_rows) and len(program.dispatches) == shards + straddling + 1


def test_glu_default_kernels(ex: Executor) -> None:
    """linear_glu picks matvec for few tokens and matmul past MATVEC_MAX_TOKENS (past one on software adapters),
    as linear does."""
    for t_max in (1, 2, MATVEC_MAX_TOKENS + 1):
        run_glu(ex, Q.Q4_0, 64, 24, t_max, t_max, seed=5)


def test_glu_rejects_bad_shapes(ex: Executor) -> None:
    rng = np.random.default_rng(6)
    weight = upload_weight(ex, "w", Q.Q8_0, 64, 5, random_weight_bytes(rng, Q.Q8_0, 64, 5))
    b = ProgramBuilder(ex, "bad")
    with pytest.raises(ValueError, match="even number of rows"):
        linear_glu(b, weight, ex.tensor("x", (1, 64)), ex.tensor("y", (1, 2)), 1)
    weight = upload_weight(ex, "w", Q.Q8_0, 64, 4, random_weight_bytes(rng, Q.Q8_0, 64, 4))
    with pytest.raises(ValueError, match="y"):
        linear_glu(b, weight, ex.tensor("x", (1, 64)), ex.tensor("y", (1, 4)), 1)
