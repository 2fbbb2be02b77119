"""Running an image encoder's program in parts, so that other models' steps on the same adapter get in between.

A vision tower is hundreds of dispatches (a 27-layer tower at 896 px runs for a good part of a second on a GPU and
for minutes on a CPU rasteriser); recorded as one submission it would hold the adapter's turn (gpu/turns.py) for all
of it. Encoders cut their program after each layer and submit the parts one turn each.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from gpu.program import Executor, Program, StepParams
from gpu.tensor import Tensor


def run_in_parts(executor: Executor, program: Program, cuts: Sequence[int], n_tokens: int,
                 inputs: Sequence[tuple[Tensor, np.ndarray]], out: Tensor) -> np.ndarray:
    """Write `inputs` (tensor, values), run the program's dispatches in the parts that `cuts` (dispatch indices)
    mark, one adapter turn each, and read `out` back. A part is waited for where the device pauses between steps
    (a software adapter, or another model waiting), else left running while the next is recorded."""
    step = StepParams(n_tokens=n_tokens).pack()
    bounds = [*cuts, len(program.dispatches)]
    parts = [(start, stop) for start, stop in zip([0, *bounds], bounds) if start < stop]
    for index, (start, stop) in enumerate(parts):
        with executor.device.turns.turn():
            if index == 0:
                for tensor, values in inputs:
                    executor.write(tensor, values)
            # Re-set before every part: other steps on this executor's queue may have run in between.
            executor.device.queue.write_buffer(executor.step_tensor.buffer, 0, step)
            submission = executor.submission()
            compute_pass = submission.encoder.begin_compute_pass()
            program.encode(compute_pass, start, stop)
            compute_pass.end()
            if index == len(parts) - 1:
                submission.read(out)
                result, = submission.submit().wait()
                return result.reshape(out.shape)
            if executor.device.pauses_between_steps():
                submission.read(out, nbytes=4)  # only to wait until it has run
                submission.submit().wait()
            else:
                submission.submit()
    raise AssertionError("the program has no dispatches")
