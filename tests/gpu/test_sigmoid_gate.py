"""sigmoid_gate (kernels/sigmoid_gate.wgsl) against numpy: Qwen3.5's gated attention output, the gates interleaved
with the queries per head in the query projection's rows. One f32 exp and division a value: rtol 1e-6."""

from __future__ import annotations

import numpy as np

from gpu.ops.rows import sigmoid_gate
from gpu.program import Executor, ProgramBuilder, StepParams


def test_sigmoid_gate_reads_interleaved_gates(ex: Executor) -> None:
    rng = np.random.default_rng(2)
    rows, heads, d = 5, 3, 16
    x = rng.standard_normal((rows, heads * d)).astype(np.float32)
    qg = rng.standard_normal((rows, heads * 2 * d)).astype(np.float32)  # per head: query, then gate
    t_x, t_g = ex.tensor("x", x.shape, data=x), ex.tensor("qg", qg.shape, data=qg)
    b = ProgramBuilder(ex, "gate")
    sigmoid_gate(b, t_x, t_g, heads=heads, head_dim=d, g_offset=d, g_head_stride=2 * d)
    got, = ex.run(b.build(), StepParams(n_tokens=rows - 1), read=[t_x])  # the last row is past the step
    gates = qg.reshape(rows, heads, 2, d)[:, :, 1].reshape(rows, -1).astype(np.float64)
    want = x / (1.0 + np.exp(-gates))
    np.testing.assert_allclose(got[:-1], want[:-1], rtol=1e-6, atol=1e-7)
    np.testing.assert_array_equal(got[-1], x[-1])
