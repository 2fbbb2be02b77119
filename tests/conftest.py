"""Fixtures every test module may use: one device for the whole run, an executor per module."""

from __future__ import annotations

import pytest

from gpu.device import Device, default_device
from gpu.program import Executor


@pytest.fixture(scope="session")
def device() -> Device:
    """The adapter's device, made once for the run (adapter choice and device creation are the slow part)."""
    return default_device()


@pytest.fixture(scope="module")
def ex(device: Device) -> Executor:
    """An executor of the module's own (pipelines, buffers) on the session's device, freed with the module."""
    return Executor(device)
