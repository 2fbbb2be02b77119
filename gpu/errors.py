"""One exception type for every wgpu failure, naming the stage and the op that failed."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import wgpu


class GPUFailure(RuntimeError):
    """A wgpu call failed: validation error, out of memory, or a lost device.

    This is never the client's mistake, so the server maps it to a 500-class error.
    """

    def __init__(self, stage: str, op: str, cause: BaseException) -> None:
        self.stage = stage
        self.op = op
        super().__init__(f"{stage} for {op}: {cause}")


@contextmanager
def gpu_stage(stage: str, op: str) -> Iterator[None]:
    """Run wgpu calls, turning their errors into a GPUFailure that says what was asked for.

    wgpu-py raises validation errors synchronously from the failing call, so a plain
    try/except around the call is the error scope.
    """
    try:
        yield
    except GPUFailure:
        raise
    except wgpu.GPUError as error:
        raise GPUFailure(stage, op, error) from error
