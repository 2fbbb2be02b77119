"""Weight layout on the host (gpu/weights.py): Q4_0 / Q5_0 blocks re-encoded as Q8_0 keep every value, and
concat_rows puts matrices of one input into as few matrices as their types allow.

Exactness is checked with gguf-py's dequantize (ggml's reference decoders): the re-encoded Q8_0 bytes must give
the same floats, bit for bit, as the source blocks, over blocks of random bytes (every nibble and fifth-bit
pattern) with random finite f16 scales."""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from gpu.ops.matmul import LinearKernel, linear
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.weights import as_q8_0, concat_rows, upload_weight
from tests.gpu.test_matmul import random_weight_bytes


@pytest.mark.parametrize("qtype", [Q.Q4_0, Q.Q5_0, Q.Q8_0], ids=lambda q: q.name)
def test_as_q8_0_keeps_every_value(qtype: Q) -> None:
    raw = random_weight_bytes(np.random.default_rng(1), qtype, 32 * 64, 40).reshape(-1)
    widened = as_q8_0(qtype, raw)
    assert widened.nbytes == 34 * (32 * 64 // 32) * 40
    np.testing.assert_array_equal(dequantize(widened, Q.Q8_0), dequantize(raw, qtype))


def test_as_q8_0_refuses_other_types() -> None:
    with pytest.raises(ValueError, match="Q4_K"):
        as_q8_0(Q.Q4_K, np.zeros(144, np.uint8))


def _matrix(rng: np.random.Generator, name: str, qtype: Q, k: int, rows: int) -> tuple[str, Q, int, int, np.ndarray]:
    return name, qtype, k, rows, random_weight_bytes(rng, qtype, k, rows).reshape(-1)


def test_concat_rows_groups() -> None:
    rng = np.random.default_rng(2)
    q, k, v = (_matrix(rng, n, t, 256, r) for n, t, r in (("q", Q.Q5_0, 64), ("k", Q.Q5_0, 16), ("v", Q.Q8_0, 16)))
    (one,) = concat_rows([q, k, v])  # Q5_0 q|k beside a Q8_0 v: one Q8_0 matrix
    assert (one.name, one.qtype, one.k, one.rows, one.row_starts) == ("q+k+v", Q.Q8_0, 256, 96, [0, 64, 80])
    assert one.file_bytes == q[4].nbytes + k[4].nbytes + v[4].nbytes
    v_rows = dequantize(one.raw, Q.Q8_0).reshape(96, 256)[80:]
    np.testing.assert_array_equal(v_rows, dequantize(v[4], Q.Q8_0).reshape(16, 256))

    same = concat_rows([q, k])  # agreeing types stay as they are
    assert [(g.qtype, g.rows) for g in same] == [(Q.Q5_0, 80)]
    np.testing.assert_array_equal(same[0].raw, np.concatenate([q[4], k[4]]))

    mixed_k = [_matrix(rng, n, t, 256, 8) for n, t in (("q", Q.Q4_K), ("k", Q.Q4_K), ("v", Q.Q6_K))]
    assert [(g.name, g.qtype) for g in concat_rows(mixed_k)] == [("q+k", Q.Q4_K), ("v", Q.Q6_K)]
    other_width = _matrix(rng, "w", Q.Q8_0, 512, 8)
    assert [g.name for g in concat_rows([q, other_width, v])] == ["q", "w", "v"]


def test_concat_rows_linear_matches_separate(ex: Executor) -> None:
    """One matvec over the re-encoded q|k|v gives each part's products as the separate matvecs do (the same
    values in the same 16-value groups; the row split may differ with the row count, so the sums may differ in
    f32 rounding: a few ulp of each row's magnitude)."""
    rng = np.random.default_rng(3)
    parts = [_matrix(rng, n, t, 640, r) for n, t, r in (("q", Q.Q5_0, 40), ("k", Q.Q5_0, 24), ("v", Q.Q8_0, 24))]
    x_data = rng.standard_normal((1, 640)).astype(np.float32)
    x = ex.tensor("x", (1, 640), data=x_data)
    (group,) = concat_rows(parts)
    fused = upload_weight(ex, group.name, group.qtype, group.k, group.rows, group.raw)
    y = ex.tensor("y", (1, group.rows))
    b = ProgramBuilder(ex, "fused")
    linear(b, fused, x, y, 1, kernel=LinearKernel.MATVEC)
    (got,) = ex.run(b.build(), StepParams(1), read=[y])
    for (name, qtype, k, rows, raw), start in zip(parts, group.row_starts):
        weight = upload_weight(ex, name, qtype, k, rows, raw)
        y_part = ex.tensor(f"y_{name}", (1, rows))
        b = ProgramBuilder(ex, name)
        linear(b, weight, x, y_part, 1, kernel=LinearKernel.MATVEC)
        (want,) = ex.run(b.build(), StepParams(1), read=[y_part])
        magnitude = np.abs(x_data.astype(np.float64)) @ np.abs(dequantize(raw, qtype).reshape(rows, k)).T
        assert np.all(np.abs(got[:, start:start + rows] - want) <= 1e-6 * magnitude), name
