"""Gated DeltaNet's kernels (gpu/ops/gated_delta.py) against float64 numpy references written from transformers'
Qwen3_5GatedDeltaNet, and those references against transformers' own torch functions on stored inputs
(tests/golden/qwen35/delta_ops.npz, written by scripts/make_qwen35_fixture.py; no torch at test time).

Tolerances. gated_delta_rule: k is l2-normalised and beta in (0, 1), so each update S (I - beta k k^T) has
eigenvalues in [0, 1] and the decay exp(g) <= 1: the recurrence does not amplify rounding errors, which grow at
most by about d_k * 2^-24 * |S| a row and as a random walk over rows; over the 70-row prompts here (d_k <= 128,
|S| of order 1) that stays below 1e-5 (measured: at most 8e-7), so atol 1e-5 / rtol 1e-4. A wrong head, slot or
row gives errors of order 1. gated_rms_norm sums d values: 1e-5.
The recurrence run as one prompt step must equal it run as one-row (decode) steps bit for bit: both are the same
pipeline doing the same f32 operations in the same order, the state round-tripping memory unchanged. The chunked
form (prompt steps) sums the same terms in another order: the UT transform's forward substitution over a chunk's
32 rows multiplies by (I + L)^-1, whose entries stay of order 1 for l2-normalised keys and beta < 1; against the
recurrence it is held to 1e-6 absolute on outputs and states of order 0.1-1 (measured: at most 4e-7), and to the
references with the recurrence's tolerances.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gpu.ops.gated_delta import DeltaShape, gated_delta_rule, gated_rms_norm
from gpu.program import Executor, ProgramBuilder, StepParams

GOLDEN = Path(__file__).resolve().parents[1] / "golden" / "qwen35" / "delta_ops.npz"
RULE_ATOL, RULE_RTOL = 1e-5, 1e-4
NORM_TOL = 1e-5


def softplus(x: np.ndarray) -> np.ndarray:
    return np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0))))


def key_head(h: int, shape: DeltaShape) -> int:
    return h % shape.h_k if shape.v_tiled else h // (shape.h_v // shape.h_k)


def reference_rule(qkv: np.ndarray, alpha: np.ndarray, beta: np.ndarray, ssm_a: np.ndarray, dt_bias: np.ndarray,
                   state: np.ndarray, shape: DeltaShape) -> tuple[np.ndarray, np.ndarray]:
    """o [T, h_v * d_v] and the final state [h_v, d_k, d_v] of one sequence's rows, as transformers'
    torch_recurrent_gated_delta_rule(use_qk_l2norm_in_kernel=True) computes them, in float64."""
    qkv = qkv.astype(np.float64)
    s = state.astype(np.float64).copy()
    t_rows = qkv.shape[0]
    o = np.zeros((t_rows, shape.value_dim))
    kd = shape.key_dim
    g = ssm_a.astype(np.float64) * softplus(alpha.astype(np.float64) + dt_bias)  # [T, h_v]
    b = 1.0 / (1.0 + np.exp(-beta.astype(np.float64)))
    for h in range(shape.h_v):
        hk = key_head(h, shape)
        q = qkv[:, hk * shape.d_k:(hk + 1) * shape.d_k]
        k = qkv[:, kd + hk * shape.d_k:kd + (hk + 1) * shape.d_k]
        v = qkv[:, 2 * kd + h * shape.d_v:2 * kd + (h + 1) * shape.d_v]
        q = q / np.sqrt((q * q).sum(-1, keepdims=True) + 1e-6) / np.sqrt(shape.d_k)
        k = k / np.sqrt((k * k).sum(-1, keepdims=True) + 1e-6)
        for t in range(t_rows):
            s[h] *= np.exp(g[t, h])
            delta = (v[t] - k[t] @ s[h]) * b[t, h]
            s[h] += np.outer(k[t], delta)
            o[t, h * shape.d_v:(h + 1) * shape.d_v] = q[t] @ s[h]
    return o, s


def reference_gated_norm(x: np.ndarray, z: np.ndarray, w: np.ndarray, d: int, eps: float = 1e-6) -> np.ndarray:
    x = x.astype(np.float64).reshape(x.shape[0], -1, d)
    z = z.astype(np.float64).reshape(x.shape)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + eps) * w * (z / (1.0 + np.exp(-z)))
    return y.reshape(x.shape[0], -1)


def _rule_inputs(rng: np.random.Generator, rows: int, shape: DeltaShape) -> tuple[np.ndarray, ...]:
    qkv = rng.standard_normal((rows, shape.conv_dim)).astype(np.float32)
    ab = rng.standard_normal((rows, 2 * shape.h_v)).astype(np.float32)  # alpha and beta side by side
    ssm_a = -np.exp(rng.uniform(-2.0, 1.0, shape.h_v)).astype(np.float32)
    dt_bias = rng.standard_normal(shape.h_v).astype(np.float32)
    return qkv, ab, ssm_a, dt_bias


def _row_table(entries: list[tuple[int, int]], t_max: int) -> np.ndarray:
    """u32 [t_max, 4] rows (position, slot, 0, 0); rows past the entries (not in the step) point at slot 0."""
    table = np.zeros((t_max, 4), np.uint32)
    table[:len(entries), :2] = entries
    return table


def _run_rule(ex: Executor, qkv: np.ndarray, ab: np.ndarray, ssm_a: np.ndarray, dt_bias: np.ndarray,
              seqs: list[tuple[int, int, int, int]], pool: np.ndarray, shape: DeltaShape,
              split: bool = False, chunked: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """o and the pool after gated_delta_rule over qkv's rows, sequence n being rows [first, first + n) at slot
    `slot` from position `start` (seqs: (first, n, slot, start)), all in one step; split: in decode steps instead,
    step i holding row i of every sequence still running (rows gathered into the step's first rows); chunked: the
    chunked form (a prompt step's) rather than the recurrence."""
    t_max = qkv.shape[0] + 1  # a spare row past every step
    t_qkv = ex.tensor("qkv", (t_max, qkv.shape[1]))
    t_ab = ex.tensor("ab", (t_max, ab.shape[1]))
    t_a, t_dt = ex.tensor("ssm_a", (shape.h_v,), data=ssm_a), ex.tensor("dt_bias", (shape.h_v,), data=dt_bias)
    t_state = ex.tensor("state", pool.shape, data=pool)
    t_rows = ex.tensor("rows", (t_max, 4), "u32")
    t_o = ex.tensor("o", (t_max, shape.value_dim))
    b = ProgramBuilder(ex, "rule")
    gated_delta_rule(b, t_qkv, t_ab, t_ab, t_a, t_dt, t_rows, t_state, t_o, shape=shape, beta_offset=shape.h_v,
                     prompt=chunked)
    program = b.build()
    o = np.zeros((qkv.shape[0], shape.value_dim), np.float32)
    steps = [[(first + i, slot, start + i) for first, n, slot, start in seqs if i < n]
             for i in range(max(n for _, n, _, _ in seqs))] if split else \
        [[(first + i, slot, start + i) for first, n, slot, start in seqs for i in range(n)]]
    for step in steps:
        picked = [r for r, _, _ in step]
        ex.write(t_qkv, qkv[picked])
        ex.write(t_ab, ab[picked])
        ex.write(t_rows, _row_table([(pos, slot) for _, slot, pos in step], t_max))
        out, = ex.run(program, StepParams(n_tokens=len(step)), read=[t_o])
        o[picked] = out[:len(step)]
    return o, ex.read(t_state)


SHAPES = {  # name: (shape, rows of each sequence)
    "gqa_tiled_prompt": (DeltaShape(h_k=2, h_v=4, d_k=16, d_v=16, v_tiled=True), (70, 5)),
    "gqa_grouped": (DeltaShape(h_k=2, h_v=4, d_k=16, d_v=8, v_tiled=False), (9, 3)),
    "real_head_sizes": (DeltaShape(h_k=1, h_v=2, d_k=128, d_v=128), (6,)),
}


@pytest.mark.parametrize("chunked", [False, True], ids=["recurrent", "chunked"])
@pytest.mark.parametrize("name", list(SHAPES))
def test_gated_delta_rule_matches_reference(ex: Executor, name: str, chunked: bool) -> None:
    shape, lengths = SHAPES[name]
    rng = np.random.default_rng(len(name))
    rows = sum(lengths)
    qkv, ab, ssm_a, dt_bias = _rule_inputs(rng, rows, shape)
    slots = len(lengths) + 2
    pool = (0.5 * rng.standard_normal((slots, shape.state_floats))).astype(np.float32)
    table, first = [], 0
    for i, n in enumerate(lengths):
        table.append((first, n, slots - 1 - 2 * i, 3 + i))  # slots out of order, some left untouched
        first += n
    o, after = _run_rule(ex, qkv, ab, ssm_a, dt_bias, table, pool, shape, chunked=chunked)
    touched = set()
    for first, n, slot, _ in table:
        r = slice(first, first + n)
        want_o, want_s = reference_rule(qkv[r], ab[r, :shape.h_v], ab[r, shape.h_v:], ssm_a, dt_bias,
                                        pool[slot].reshape(shape.h_v, shape.d_k, shape.d_v), shape)
        np.testing.assert_allclose(o[r], want_o, rtol=RULE_RTOL, atol=RULE_ATOL)
        np.testing.assert_allclose(after[slot], want_s.reshape(-1), rtol=RULE_RTOL, atol=RULE_ATOL)
        touched.add(slot)
    for slot in set(range(slots)) - touched:
        np.testing.assert_array_equal(after[slot], pool[slot])


def test_prompt_equals_one_row_steps(ex: Executor) -> None:
    """A 70-row prompt (longer than transformers' 64-row chunk) and a 5-row one in one dispatch give exactly what
    decode steps of one row per sequence give."""
    shape, lengths = SHAPES["gqa_tiled_prompt"]
    rng = np.random.default_rng(7)
    qkv, ab, ssm_a, dt_bias = _rule_inputs(rng, sum(lengths), shape)
    pool = (0.5 * rng.standard_normal((3, shape.state_floats))).astype(np.float32)
    table = [(0, lengths[0], 2, 9), (lengths[0], lengths[1], 0, 1)]
    o_prompt, s_prompt = _run_rule(ex, qkv, ab, ssm_a, dt_bias, table, pool, shape)
    o_steps, s_steps = _run_rule(ex, qkv, ab, ssm_a, dt_bias, table, pool, shape, split=True)
    np.testing.assert_array_equal(o_prompt, o_steps)
    np.testing.assert_array_equal(s_prompt, s_steps)


def test_chunked_form_equals_the_recurrence(ex: Executor) -> None:
    """The chunked form on a prompt step of three runs: one across two chunk boundaries (80 rows from a stored state),
    one starting at position 0 mid-chunk, one of a single row; against the recurrence in decode steps."""
    shape, _ = SHAPES["gqa_tiled_prompt"]
    rng = np.random.default_rng(13)
    table = [(0, 80, 3, 7), (80, 21, 0, 0), (101, 1, 2, 4)]
    qkv, ab, ssm_a, dt_bias = _rule_inputs(rng, 102, shape)
    pool = (0.5 * rng.standard_normal((4, shape.state_floats))).astype(np.float32)
    o_chunked, s_chunked = _run_rule(ex, qkv, ab, ssm_a, dt_bias, table, pool, shape, chunked=True)
    o_steps, s_steps = _run_rule(ex, qkv, ab, ssm_a, dt_bias, table, pool, shape, split=True)
    np.testing.assert_allclose(o_chunked, o_steps, rtol=0, atol=1e-6)
    np.testing.assert_allclose(s_chunked, s_steps, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(s_chunked[1], pool[1])  # a slot no run holds


@pytest.mark.parametrize("chunked", [False, True], ids=["recurrent", "chunked"])
def test_sequence_at_position_zero_starts_from_zero_state(ex: Executor, chunked: bool) -> None:
    """A run starting at position 0 ignores what its slot held (a slot reused by a new sequence), beside a run that
    continues its slot's state in the same step."""
    shape, _ = SHAPES["gqa_grouped"]
    rng = np.random.default_rng(11)
    qkv, ab, ssm_a, dt_bias = _rule_inputs(rng, 7, shape)
    pool = (0.5 * rng.standard_normal((2, shape.state_floats))).astype(np.float32)
    o, after = _run_rule(ex, qkv, ab, ssm_a, dt_bias, [(0, 4, 1, 0), (4, 3, 0, 5)], pool, shape, chunked=chunked)
    zero = np.zeros((shape.h_v, shape.d_k, shape.d_v))
    for (first, n, slot), start in (((0, 4, 1), zero), ((4, 3, 0), pool[0].reshape(zero.shape))):
        r = slice(first, first + n)
        want_o, want_s = reference_rule(qkv[r], ab[r, :shape.h_v], ab[r, shape.h_v:], ssm_a, dt_bias, start, shape)
        np.testing.assert_allclose(o[r], want_o, rtol=RULE_RTOL, atol=RULE_ATOL)
        np.testing.assert_allclose(after[slot], want_s.reshape(-1), rtol=RULE_RTOL, atol=RULE_ATOL)


def test_gated_rms_norm_matches_reference(ex: Executor) -> None:
    rng = np.random.default_rng(5)
    rows, heads, d = 7, 3, 96
    x = rng.standard_normal((rows, heads * d)).astype(np.float32)
    z = rng.standard_normal((rows, heads * d + 8)).astype(np.float32)
    w = rng.standard_normal(d).astype(np.float32)
    t_x, t_z, t_w = ex.tensor("x", x.shape, data=x), ex.tensor("z", z.shape, data=z), ex.tensor("w", (d,), data=w)
    t_y = ex.tensor("y", x.shape)
    b = ProgramBuilder(ex, "norm")
    gated_rms_norm(b, t_x, t_z, t_w, t_y, head_dim=d, heads=heads, z_offset=8)
    ex.run(b.build(), StepParams(n_tokens=rows - 1))  # the last row is past the step
    y = ex.read(t_y)
    np.testing.assert_allclose(y[:-1], reference_gated_norm(x, z[:, 8:], w, d)[:-1], rtol=NORM_TOL, atol=NORM_TOL)
    np.testing.assert_array_equal(y[-1], 0.0)


def test_references_match_transformers() -> None:
    """The numpy references against transformers' torch functions (float32) on the stored inputs: both the chunked
    (chunk 64, so the 70 rows span two chunks) and the recurrent form of the rule, and the gated norm. The stored
    outputs are float32 computations: rule 1e-5 (the chunked form's triangular solves over 64 rows), norm 1e-5."""
    z = np.load(GOLDEN)
    shape = DeltaShape(h_k=2, h_v=4, d_k=8, d_v=8, v_tiled=False)  # transformers' repeat_interleave order
    a_coef = -np.exp(z["gates/A_log"].astype(np.float64))
    g = a_coef * softplus(z["gates/a"][0].astype(np.float64) + z["gates/dt_bias"])
    np.testing.assert_allclose(g, z["gates/g"][0], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(1.0 / (1.0 + np.exp(-z["gates/b"][0].astype(np.float64))), z["gates/beta"][0],
                               rtol=1e-6, atol=1e-7)
    qkv = np.concatenate([z["rule/q"][0].reshape(-1, shape.key_dim), z["rule/k"][0].reshape(-1, shape.key_dim),
                          z["rule/v"][0].reshape(-1, shape.value_dim)], axis=1)
    o, s = reference_rule(qkv, z["gates/a"][0], z["gates/b"][0], a_coef, z["gates/dt_bias"], z["rule/state"][0],
                          shape)
    for form in ("chunk", "recurrent"):
        np.testing.assert_allclose(o, z[f"rule/{form}/out"][0].reshape(o.shape), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(s, z[f"rule/{form}/state"][0], rtol=1e-5, atol=1e-5)
    y = reference_gated_norm(z["norm/x"], z["norm/z"], z["norm/w"].astype(np.float64), z["norm/x"].shape[1])
    np.testing.assert_allclose(y, z["norm/y"], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("chunked", [False, True], ids=["recurrent", "chunked"])
def test_gated_delta_rule_matches_transformers(ex: Executor, chunked: bool) -> None:
    """Both forms on transformers' inputs (a 70-row prompt from a stored state) against its chunked form's float32
    output: 1e-5 as above."""
    z = np.load(GOLDEN)
    shape = DeltaShape(h_k=2, h_v=4, d_k=8, d_v=8, v_tiled=False)
    qkv = np.concatenate([z["rule/q"][0].reshape(-1, shape.key_dim), z["rule/k"][0].reshape(-1, shape.key_dim),
                          z["rule/v"][0].reshape(-1, shape.value_dim)], axis=1)
    ab = np.concatenate([z["gates/a"][0], z["gates/b"][0]], axis=1)
    ssm_a = -np.exp(z["gates/A_log"]).astype(np.float32)  # what the converter stores as ssm_a
    pool = np.zeros((2, shape.state_floats), np.float32)
    pool[1] = z["rule/state"].reshape(-1)
    o, after = _run_rule(ex, qkv, ab, ssm_a, z["gates/dt_bias"], [(0, qkv.shape[0], 1, 1)], pool, shape,
                         chunked=chunked)
    np.testing.assert_allclose(o, z["rule/chunk/out"][0].reshape(o.shape), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(after[1], z["rule/chunk/state"].reshape(-1), rtol=1e-5, atol=1e-5)


def _layer_on_gguf_weights(ex: Executor, z: dict, shape: DeltaShape, chunked: bool = False) -> np.ndarray:
    """Qwen3_5GatedDeltaNet's output from the weights as llama.cpp's converter stores them: projections, the short
    convolution (zero state, SiLU) and the output projection in float64 numpy, the rule and the norm on the GPU."""
    x = z["layer/x"].astype(np.float64)
    qkv_in = x @ z["layer/attn_qkv"].T
    taps = z["layer/ssm_conv1d"]  # [C, K]
    k = taps.shape[1]
    padded = np.concatenate([np.zeros((k - 1, qkv_in.shape[1])), qkv_in])
    conv = sum(padded[j:j + x.shape[0]] * taps[:, j] for j in range(k))
    qkv = (conv / (1.0 + np.exp(-conv))).astype(np.float32)
    ab = np.concatenate([x @ z["layer/ssm_alpha"].T, x @ z["layer/ssm_beta"].T], axis=1).astype(np.float32)
    pool = np.zeros((1, shape.state_floats), np.float32)
    o, _ = _run_rule(ex, qkv, ab, z["layer/ssm_a"], z["layer/ssm_dt"], [(0, x.shape[0], 0, 0)], pool, shape,
                     chunked=chunked)
    gate = (x @ z["layer/attn_gate"].T).astype(np.float32)
    t_o, t_z = ex.tensor("o", o.shape, data=o), ex.tensor("z", gate.shape, data=gate)
    t_w, t_y = ex.tensor("w", (shape.d_v,), data=z["layer/ssm_norm"]), ex.tensor("y", o.shape)
    b = ProgramBuilder(ex, "norm")
    gated_rms_norm(b, t_o, t_z, t_w, t_y, head_dim=shape.d_v, heads=shape.h_v)
    y, = ex.run(b.build(), StepParams(n_tokens=o.shape[0]), read=[t_y])
    return y.astype(np.float64) @ z["layer/ssm_out"].T


@pytest.mark.parametrize("chunked", [False, True], ids=["recurrent", "chunked"])
def test_layer_from_converter_layout_matches_transformers(ex: Executor, chunked: bool) -> None:
    """A whole Gated DeltaNet layer with grouped value heads (4 over 2 key heads) from the GGUF layout (V heads in
    llama.cpp's tiled order) equals transformers' layer output: 1e-4 (inputs of order 1 through four f32 products of
    32 terms and the rule; measured below 1e-5). Reading the heads in transformers' grouped order instead must fail."""
    z = dict(np.load(GOLDEN))
    shape = DeltaShape(h_k=2, h_v=4, d_k=8, d_v=8, v_tiled=True)
    y = _layer_on_gguf_weights(ex, z, shape, chunked)
    np.testing.assert_allclose(y, z["layer/y"], rtol=1e-4, atol=1e-4)
    wrong = _layer_on_gguf_weights(ex, z, DeltaShape(h_k=2, h_v=4, d_k=8, d_v=8, v_tiled=False), chunked)
    assert np.abs(wrong - z["layer/y"]).max() > 1e-2
