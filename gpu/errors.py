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


class DeviceLost(GPUFailure):
    """The device is gone (a driver reset, a GPU off the bus, a hung queue): nothing more runs on it, and the
    model loaded there must be loaded again elsewhere."""


# How wgpu-native words errors on a device that has been lost (wgpu-core's DeviceError::Lost and Invalid).
_LOST_WORDS = ("device is lost", "device lost", "parent device is lost", "devicelost", "device is invalid")


def is_device_lost(error: BaseException) -> bool:
    """Whether an error (or one it was raised from) says the device was lost, rather than one call failing."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, DeviceLost):
            return True
        if isinstance(current, GPUFailure | wgpu.GPUError) and any(w in str(current).lower() for w in _LOST_WORDS):
            return True
        current = current.__cause__ or current.__context__
    return False


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
        failure = DeviceLost if any(w in str(error).lower() for w in _LOST_WORDS) else GPUFailure
        raise failure(stage, op, error) from error
