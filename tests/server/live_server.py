"""Real uvicorn servers on loopback for the API tests: in a thread (fake models) or a subprocess (real ones)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class ThreadServer:
    """uvicorn serving an app object in a background thread of this process."""

    def __init__(self, app: Any) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.app = app
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> ThreadServer:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("uvicorn did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(30)


class SubprocessServer:
    """`python -m server` in a child process (its own GPU device and memory), logging to a file."""

    def __init__(self, log_path: Path, env: dict[str, str] | None = None, args: list[str] | None = None,
                 port: int | None = None, port_flag: bool = True) -> None:
        """port_flag=False leaves the port to HEARTH_PORT in env (which must then be `port`)."""
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = log_path
        self._env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
        self._args = (["--port", str(self.port)] if port_flag else []) + (args or [])
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, ready_timeout: float = 600.0) -> SubprocessServer:
        """Start and wait for /ready (the default models loaded and warmed up)."""
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child writes to it for its whole life
        self.process = subprocess.Popen([sys.executable, "-m", "server", *self._args],
                                        cwd=ROOT, env=self._env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/ready", timeout=2).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.25)
        raise RuntimeError(f"server not ready after {ready_timeout} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _status_bytes(self, key: str) -> int:
        assert self.process is not None
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
        raise RuntimeError(f"no {key}")

    def rss_bytes(self) -> int:
        """Resident memory of the server process (Linux /proc)."""
        return self._status_bytes("VmRSS")

    def peak_rss_bytes(self) -> int:
        """The most resident memory the server process has held since it started or since reset_peak_rss: the
        kernel's high-water mark, so a spike between two samples of rss_bytes is not missed."""
        return self._status_bytes("VmHWM")

    def reset_peak_rss(self) -> None:
        """Start peak_rss_bytes afresh from the current RSS (clear_refs 5, Linux 4.0 on)."""
        assert self.process is not None
        Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGINT)
        try:
            self.process.wait(30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)
