"""gpu/ops/full_attention.py against numpy: full attention over a fused q|k|v in one pass (attention_full_flash,
with its work split from flash_plan), and the scores path it falls back to (attention_full_scores + softmax_rows
+ attention_full_values, for all heads at once or in groups whose scores fit a binding, and attention_full where
the row count is not a multiple of 4).

Tolerance: f32 kernels against float64 references; attention sums up to 1024 keys of up to 72-value dot products
with an online softmax (exp2 of prescaled scores, rescaled per chunk): outputs are weighted means of values of
order 1, accurate to a few f32 ulps times the rescales, well inside rtol/atol 1e-5 (the worst seen is ~5e-7).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpu.device import DeviceLimits
from gpu.ops import full_attention as attention_op
from gpu.ops.full_attention import (
    FlashPlan,
    attention_full_flash,
    flash_plan,
    flash_storage_bytes,
    full_attention,
)
from gpu.program import Executor, ProgramBuilder, StepParams


def reference(qkv: np.ndarray, heads: int, d: int) -> np.ndarray:
    """Full attention of fused q|k|v rows [n, 3 * heads * d] in float64: [n, heads * d]."""
    n = qkv.shape[0]
    x = qkv.astype(np.float64).reshape(n, 3, heads, d)
    scores = np.einsum("thd,jhd->htj", x[:, 0], x[:, 1]) * d ** -0.5
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return np.einsum("htj,jhd->thd", p, x[:, 2]).reshape(n, heads * d)


def limits(storage: int, invocations: int = 1024) -> DeviceLimits:
    """Device limits with this workgroup storage (bytes) and invocations per workgroup."""
    return DeviceLimits(max_binding_bytes=128 << 20, max_buffer_bytes=1 << 31, workgroup_storage_bytes=storage,
                        max_invocations=invocations, max_storage_buffers=8, min_offset_alignment=256)


@pytest.mark.parametrize(("n", "heads", "d", "storage"), [
    (64, 1, 16, 32768),     # one block, one chunk
    (201, 3, 64, 32768),    # rows and keys past the last full block and chunk (Whisper's head size)
    (130, 2, 72, 16384),    # Gemma 3 vision's head size under WebGPU's minimum workgroup storage
    (37, 2, 128, 32768),    # fewer rows than a block
    (1024, 16, 72, 32768),  # Gemma 3 vision's heads at a quarter of its rows
])
@pytest.mark.parametrize("prefetch", [False, True])
def test_attention_full_flash(ex: Executor, n: int, heads: int, d: int, storage: int, prefetch: bool) -> None:
    storage = min(storage, ex.device.limits.workgroup_storage_bytes)
    plan = flash_plan(n, heads, d, limits(storage, ex.device.limits.max_invocations))
    assert plan is not None
    keys = min(plan.keys, plan.rows) if prefetch else plan.keys  # prefetching needs keys <= rows
    plan = replace(plan, keys=keys, storage_bytes=flash_storage_bytes(plan.rows, keys, d), prefetch=prefetch)
    rng = np.random.default_rng(n + d)
    qkv = rng.standard_normal((n, 3 * heads * d)).astype(np.float32)
    q_t, out_t = ex.tensor("qkv", qkv.shape, data=qkv), ex.tensor("out", (n, heads * d))
    b = ProgramBuilder(ex, "attn")
    attention_full_flash(b, q_t, out_t, n, heads, d, d ** -0.5, plan)
    assert [x.kernel for x in b._dispatches] == ["attention_full_flash"]
    out, = ex.run(b.build(), StepParams(n_tokens=n), read=[out_t])
    np.testing.assert_allclose(out, reference(qkv, heads, d), rtol=1e-5, atol=1e-5)


def test_flash_plan() -> None:
    # lavapipe's and NVIDIA's 32 KiB: 64 rows would leave 16 keys a chunk for 72 dims, so 32 rows of 48 keys
    assert flash_plan(4096, 16, 72, limits(32768)) == FlashPlan(32, 48, 144, 31104)
    assert flash_plan(1500, 6, 64, limits(32768)) == FlashPlan(32, 56, 128, 31744)
    # 48 KiB: 64 rows of 48 keys
    assert flash_plan(4096, 16, 72, limits(49152)) == FlashPlan(64, 48, 288, 47616, prefetch=True)
    # WebGPU's 16 KiB minimum and 256 invocations
    plan = flash_plan(4096, 16, 72, limits(16384, 256))
    assert plan is not None and plan.storage_bytes <= 16384 and plan.threads <= 256 and plan.keys % 4 == 0
    # keys per chunk never past n rounded up to 4
    assert flash_plan(10, 1, 64, limits(32768)).keys == 12
    # every plan within its limits
    for storage in (16384, 32768, 49152, 65536):
        for d in (16, 64, 72, 80, 96, 128, 256):
            plan = flash_plan(4096, 8, d, limits(storage))
            if plan is not None:
                assert plan.storage_bytes == flash_storage_bytes(plan.rows, plan.keys, d) <= storage
                assert plan.threads == plan.rows * d // 16 and plan.rows % 4 == 0 and plan.keys % 4 == 0
                assert plan.prefetch == (plan.keys <= plan.rows)
    assert flash_plan(100, 2, 70, limits(32768)) is None  # head dim not a multiple of 4
    assert flash_plan(100, 2, 512, limits(16384)) is None  # no block fits


def test_full_attention_takes_one_pass_on_gpus_only(ex: Executor) -> None:
    """The one pass where flash_plan fits, but on software adapters, where the scores path runs faster."""
    b = ProgramBuilder(ex, "attn")
    full_attention(b, ex.tensor("qkv", (64, 3 * 64)), ex.tensor("out", (64, 64)), 64, 1, 64, 0.125)
    one_pass = ["attention_full_flash"]
    assert ([x.kernel for x in b._dispatches] == one_pass) == (not ex.device.is_software)


def test_full_attention_scores_path_without_flash(ex: Executor, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention_op, "FLASH", False)
    b = ProgramBuilder(ex, "attn")
    full_attention(b, ex.tensor("qkv", (8, 48)), ex.tensor("out", (8, 16)), 8, 1, 16, 0.25)
    assert [x.kernel for x in b._dispatches] == ["attention_full_scores", "softmax_rows", "attention_full_values"]


@pytest.mark.parametrize(("n", "heads", "group"), [
    (200, 3, 3),  # tiled scores + values (n % 4 == 0), all heads at once
    (201, 3, 3),  # one pass per row
    (200, 6, 2),  # heads in groups whose scores fit the (here lowered) limit
    (200, 5, 2),  # a limit of 2 heads' scores that does not divide 5 heads: groups of 1
])
def test_full_attention(ex: Executor, monkeypatch: pytest.MonkeyPatch, n: int, heads: int, group: int) -> None:
    monkeypatch.setattr(attention_op, "MAX_SCORES_BYTES", group * 4 * n * n)
    monkeypatch.setattr(attention_op, "FLASH", False)
    d = 16
    rng = np.random.default_rng(0)
    qkv = rng.standard_normal((n, 3 * heads * d)).astype(np.float32)
    q_t, out_t = ex.tensor("qkv", qkv.shape, data=qkv), ex.tensor("out", (n, heads * d))
    b = ProgramBuilder(ex, "attn")
    full_attention(b, q_t, out_t, n, heads, d, d ** -0.5)
    if n % 4 == 0:
        expected_groups = heads // group if heads % group == 0 else heads
        assert sum(d.kernel == "attention_full_scores" for d in b._dispatches) == expected_groups
    out, = ex.run(b.build(), StepParams(n_tokens=n), read=[out_t])
    np.testing.assert_allclose(out, reference(qkv, heads, d), rtol=1e-5, atol=1e-5)
