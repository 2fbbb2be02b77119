"""The executor core: step struct layout, activation pooling by liveness, errors that name the op."""

from __future__ import annotations

import re

import numpy as np
import pytest

from gpu.device import Device, choose_adapter
from gpu.errors import GPUFailure
from gpu.ops import transformer as ops
from gpu.program import Executor, ProgramBuilder, StepParams, workgroup_grid
from gpu.shaders import KERNEL_DIR, ShaderSourceError, compile_source
from gpu.tensor import Tensor


def test_step_struct_matches_python_mirror() -> None:
    source = (KERNEL_DIR / "common" / "step.wgsl").read_text()
    fields = re.findall(r"^\s+(\w+): u32,", source, re.MULTILINE)
    assert fields == ["n_tokens", "n_out", "iteration", "seed"]
    assert len(fields) * 4 == StepParams.STRUCT_BYTES == len(StepParams(3, 5).pack())
    assert np.frombuffer(StepParams(3, 2, 7, seed=9).pack(), np.uint32).tolist() == [3, 2, 7, 9]


def test_workgroup_grid_covers_large_counts() -> None:
    for n in (1, 65535, 65536, 262144, 10_000_000):
        x, y, z = workgroup_grid(n)
        assert x <= 65535 and y <= 65535 and z == 1 and x * y >= n


def test_activations_share_buffers_only_when_lifetimes_do_not_overlap(ex: Executor) -> None:
    x = ex.tensor("x", (2, 64), data=np.ones((2, 64), np.float32))
    b = ProgramBuilder(ex, "pool")
    a1, a2, a3 = (b.activation(f"a{i}", (2, 64)) for i in range(3))
    out = ex.tensor("out", (2, 64))
    ops.add(b, x, x, a1)      # a1 = 2
    ops.add(b, a1, x, a2)     # a2 = 3; a1 dies here
    ops.add(b, a2, x, a3)     # a3 = 4 may reuse a1's buffer, not a2's
    ops.add(b, a3, a2, out)   # out = 7
    program = b.build()
    assert a3.buffer is a1.buffer
    assert a2.buffer is not a1.buffer
    assert program.activation_bytes == 2 * a1.nbytes
    got, = ex.run(program, StepParams(2, 0), read=[out])
    np.testing.assert_array_equal(got, np.full((2, 64), 7.0, np.float32))


def test_submission_runs_steps_with_their_own_params_and_copies_between_them(ex: Executor) -> None:
    """Three steps in one submission: each sees its own Step struct (n_tokens differs), copies
    recorded between steps see the state after the step before, and reads come back at once."""
    x = ex.tensor("sx", (3, 64), data=np.ones((3, 64), np.float32))
    w = ex.tensor("sw", (64,), data=np.ones(64, np.float32))
    acc = ex.tensor("acc", (3, 64))
    history = ex.tensor("hist", (3, 3, 64))
    b = ProgramBuilder(ex, "accumulate")
    ops.rms_norm(b, x, w, acc, 0.0, accumulate=True)  # acc[:n_tokens] += 1 (the norm of a row of ones)
    program = b.build()
    submission = ex.submission()
    for i, n in enumerate((3, 1, 2)):
        submission.step(program, StepParams(n, iteration=i))
        submission.copy(acc, history, dst_offset=i * acc.nbytes)
    submission.read(acc)
    submission.read(history, nbytes=acc.nbytes, offset=acc.nbytes)  # the second step's snapshot
    pending = submission.submit()
    final, second = pending.wait()
    np.testing.assert_allclose(final[:, 0], [3, 2, 1], rtol=1e-6)
    np.testing.assert_allclose(second.reshape(3, 64)[:, 0], [2, 1, 1], rtol=1e-6)


@pytest.mark.parametrize("early", [1, 2, 3], ids=lambda e: f"every-{e}")
def test_step_submitted_early_in_parts(ex: Executor, early: int) -> None:
    """A step whose dispatches go to the GPU in parts (Submission.step's early_dispatches), two steps with their
    own values, a copy between them: each part sees the one before, the step values hold across parts, and the
    native replay that follows once every dispatch went through wgpu-py gives the same."""
    x = ex.tensor(f"ex{early}", (3, 64), data=np.ones((3, 64), np.float32))
    w = ex.tensor(f"ew{early}", (64,), data=np.ones(64, np.float32))
    acc = ex.tensor(f"eacc{early}", (3, 64))
    snapshot = ex.tensor(f"esnap{early}", (3, 64))
    b = ProgramBuilder(ex, f"early{early}")
    for _ in range(5):
        ops.rms_norm(b, x, w, acc, 0.0, accumulate=True)  # acc[:n_tokens] += 1, five times
    program = b.build()
    for _ in range(2):  # the first replay records through wgpu-py, the second natively where it can
        ex.write(acc, np.zeros((3, 64), np.float32))
        submission = ex.submission()
        submission.step(program, StepParams(3), early_dispatches=early)
        submission.copy(acc, snapshot)
        submission.step(program, StepParams(1, iteration=1), early_dispatches=early)
        submission.read(acc)
        submission.read(snapshot)
        final, first = submission.submit().wait()
        np.testing.assert_allclose(first.reshape(3, 64)[:, 0], [5, 5, 5], rtol=1e-6)
        np.testing.assert_allclose(final.reshape(3, 64)[:, 0], [10, 5, 5], rtol=1e-6)


def test_unused_activation_is_an_error(ex: Executor) -> None:
    b = ProgramBuilder(ex, "unused")
    b.activation("never", (1, 4))
    with pytest.raises(ValueError, match="never"):
        b.build()


def test_pipelines_compiled_counts_each_variant_once(device: Device) -> None:
    before = device.pipelines_compiled
    first = device.pipeline("rms_norm", {"D": 40})  # a width no model here uses, so it compiles now
    assert device.pipelines_compiled == before + 1
    assert device.pipeline("rms_norm", {"D": 40}) is first  # cached: nothing new
    device.pipeline("rms_norm", {"D": 44})
    assert device.pipelines_compiled == before + 2


def test_unknown_constant_names_the_kernel() -> None:
    with pytest.raises(ShaderSourceError, match="rms_norm.*NOT_A_CONSTANT"):
        compile_source("rms_norm", {"NOT_A_CONSTANT": 1})


def test_validation_error_names_stage_and_op(ex: Executor) -> None:
    small = Tensor("too_small", (1,), "f32")
    small.buffer = ex.device.create_buffer(4, "too_small")
    w = ex.tensor("w", (640,))
    b = ProgramBuilder(ex, "bad")
    out = b.activation("out", (1, 640))
    # The uniform step buffer bound where a storage buffer belongs: wgpu rejects the bind group.
    b.dispatch("rms_norm", {"D": 640}, [small, small, w, out], workgroup_grid(1))
    with pytest.raises(GPUFailure, match="creating bind group for rms_norm"):
        b.build()


def test_adapter_choice_by_name(device: Device) -> None:
    assert choose_adapter(device.name.split()[0]).info["device"] == device.name
    with pytest.raises(GPUFailure, match="matches none"):
        choose_adapter("no adapter is called this")
