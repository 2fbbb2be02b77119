"""WGSL compute on wgpu: devices, buffers, kernels and programs.

Importing the package first gives the process a private XDG_RUNTIME_DIR when it has none: Mesa's drivers
(lavapipe, llvmpipe's EGL) try to reach a Wayland display while wgpu enumerates adapters, and without that
directory libwayland prints `error: XDG_RUNTIME_DIR is invalid or not set` several times at start-up, which
looks like a failure on a headless server although nothing is wrong. An empty directory makes the attempt fail
quietly; a directory the user set is left alone.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile


def _ensure_runtime_dir() -> None:
    current = os.environ.get("XDG_RUNTIME_DIR")
    if current and os.path.isdir(current):
        return
    private = tempfile.mkdtemp(prefix="hearth-runtime-")  # mode 0700, as the XDG spec asks
    os.environ["XDG_RUNTIME_DIR"] = private
    atexit.register(shutil.rmtree, private, ignore_errors=True)


_ensure_runtime_dir()
