"""Embedding lookup (kernels/get_rows.wgsl) against gguf-py's dequantize on every weight type.

Tolerance: each output is one dequantised value times the scale, computed in f32 as ggml does up
to one rounding where a fused multiply-add is used, so rtol 1e-6 (a few f32 ulps) with an atol of
1e-7 of the row's largest value for values that cancel to near zero.
"""

from __future__ import annotations

import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize

from gpu.ops.matmul import block_values, embedding
from gpu.program import Executor, ProgramBuilder, StepParams
from gpu.weights import row_bytes, upload_weight
from tests.gpu.test_matmul import SENTINEL, TYPES, random_weight_bytes

RTOL = 1e-6


def run_embedding(
    ex: Executor, qtype: Q, k: int, n: int, ids: list[int], t_max: int, n_tokens: int, scale: float,
    max_shard_bytes: int | None = None, seed: int = 0,
) -> int:
    """Look ids up and check against numpy; returns the weight's shard count."""
    rng = np.random.default_rng(seed)
    raw = random_weight_bytes(rng, qtype, k, n)
    weight = upload_weight(ex, "embd", qtype, k, n, raw, max_shard_bytes=max_shard_bytes)
    ids_t = ex.tensor("ids", (t_max,), "u32", data=np.array(ids, np.uint32))
    out = ex.tensor("out", (t_max, k), data=np.full((t_max, k), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "embedding")
    embedding(b, weight, ids_t, out, t_max, scale=scale)
    got, = ex.run(b.build(), StepParams(n_tokens, 0), read=[out])
    table = dequantize(raw, qtype).astype(np.float64) * scale
    table = np.concatenate([table, np.full((1, k), SENTINEL)])  # ids >= n leave their row untouched
    want = table[np.minimum(ids[:n_tokens], n)]
    atol = 1e-7 * np.abs(want).max(axis=1, keepdims=True)
    bad = np.abs(got[:n_tokens] - want) > RTOL * np.abs(want) + atol
    assert not bad.any(), f"{qtype.name}: {bad.sum()} values differ, first at {np.argwhere(bad)[0]}"
    assert np.all(got[n_tokens:] == SENTINEL), "rows past n_tokens were written"
    return len(weight.shards)


@pytest.mark.parametrize("qtype", TYPES, ids=lambda q: q.name)
def test_get_rows(ex: Executor, qtype: Q) -> None:
    # K of several blocks; more 16-value groups than threads for the small blocks
    k = block_values(qtype) * (40 if block_values(qtype) <= 32 else 2)
    run_embedding(ex, qtype, k, 23, [5, 0, 22, 5, 17, 9], 6, 5, scale=25.3)


@pytest.mark.parametrize("qtype,shard_rows", [(Q.Q8_0, 4), (Q.Q6_K, 3), (Q.F16, 5)],
                         ids=["Q8_0-4-shards", "Q6_K-5-shards", "F16-3-shards"])
def test_get_rows_sharded(ex: Executor, qtype: Q, shard_rows: int) -> None:
    """13 rows in shards of shard_rows (the last short): each shard writes only its own ids, none
    writes an id past the table."""
    k = block_values(qtype) * 2
    ids = [12, 0, 3, 4, 7, 13, 8, 11, 1, 12, 1000]
    shards = run_embedding(ex, qtype, k, 13, ids, len(ids), len(ids), scale=1.0, seed=1,
                           max_shard_bytes=shard_rows * row_bytes(qtype, k) + 4)
    assert shards == -(-13 // shard_rows) >= 3


@pytest.mark.parametrize("image_id", [None, 11], ids=["images", "image-id"])
@pytest.mark.parametrize("qtype,shard_rows", [(Q.Q8_0, None), (Q.Q6_K, 3)], ids=["Q8_0", "Q6_K-5-shards"])
def test_get_rows_token_sources(ex: Executor, qtype: Q, shard_rows: int | None, image_id: int | None) -> None:
    """The row table picks each row's input: ids (source 0), the slot's last sampled token (1), or row t of the
    step's images taken as it is, unscaled (2: an image's soft tokens), written once however many shards; with
    image_id (Gemma 4's per-layer embeddings) an image's row looks that id up instead."""
    rng = np.random.default_rng(3)
    k, n, t_max = block_values(qtype) * 2, 13, 8
    raw = random_weight_bytes(rng, qtype, k, n)
    weight = upload_weight(ex, "embd", qtype, k, n, raw,
                           max_shard_bytes=None if shard_rows is None else shard_rows * row_bytes(qtype, k) + 4)
    ids = np.array([4, 262, 262, 262, 9, 0, 262, 3], np.uint32)  # 262 (past the table): the image rows' ids
    sources = np.array([0, 2, 2, 2, 1, 0, 2, 1], np.uint32)
    rows = np.zeros((t_max, 4), np.uint32)
    rows[:, 1], rows[:, 2] = [0, 0, 0, 0, 1, 0, 0, 2], sources
    slot_tokens = np.array([7, 12, 1], np.uint32)
    images = rng.standard_normal((t_max, k)).astype(np.float32)
    out = ex.tensor("out", (t_max, k), data=np.full((t_max, k), SENTINEL, np.float32))
    b = ProgramBuilder(ex, "embedding")
    embedding(b, weight, ex.tensor("ids", (t_max,), "u32", data=ids), out, t_max, scale=3.5,
              rows=ex.tensor("rows", rows.shape, "u32", data=rows),
              slot_tokens=ex.tensor("slot_tokens", (3,), "u32", data=slot_tokens),
              images=None if image_id is not None else ex.tensor("images", images.shape, data=images),
              image_id=image_id)
    got, = ex.run(b.build(), StepParams(t_max, 0), read=[out])
    table = dequantize(raw, qtype).astype(np.float64) * 3.5
    for t in range(t_max):
        image_row = images[t] if image_id is None else table[image_id]
        want = image_row if sources[t] == 2 else table[slot_tokens[rows[t, 1]] if sources[t] == 1 else ids[t]]
        np.testing.assert_allclose(got[t], want, rtol=RTOL, atol=1e-7 * np.abs(want).max(), err_msg=f"row {t}")
