"""Request ids on every response (500s included) and on the log lines of that request only: the worker thread's
lines about a job carry the job's request id, and the idle-unload reaper's lines carry none ("-")."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from config.settings import load_settings
from server.app import create_app
from server.request_context import install_record_factory
from tests.models.ollama_store import add_model, fake_gguf
from tests.server.fake_model import fake_loader
from tests.server.live_server import ThreadServer
from tests.server.test_app import CHAT, start, wait_until

LOGGERS = ("hearth.server", "hearth.worker", "hearth.access", "uvicorn.error")


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    def about(self, text: str) -> list[tuple[str, str]]:
        """(request id, message) of the records whose message holds text."""
        return [(getattr(r, "request_id", "?"), r.getMessage()) for r in list(self.records) if text in r.getMessage()]


@pytest.fixture()
def records() -> Iterator[Records]:
    install_record_factory()
    handler = Records()
    levels = {}
    for name in LOGGERS:
        logger = logging.getLogger(name)
        levels[name] = logger.level
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
    yield handler
    for name in LOGGERS:
        logging.getLogger(name).removeHandler(handler)
        logging.getLogger(name).setLevel(levels[name])


def test_a_500_carries_the_request_id_and_so_does_its_log_line(records: Records) -> None:
    """A bug in a route: the 500 error object goes out with X-Request-Id, and the line that logs the traceback
    carries that id. (Starlette's outermost handler answered it past the request middleware: no header, and the
    lines logged there and by uvicorn carried "-".)"""
    app = create_app(load_settings(env={"HEARTH_OLLAMA": "false"}), loader=fake_loader())

    @app.get("/boom")
    async def boom() -> None:
        raise RuntimeError("a secret detail")

    server = ThreadServer(app).__enter__()
    try:
        reply = httpx.get(f"{server.url}/boom", headers={"X-Request-Id": "trace-500"})
        assert reply.status_code == 500
        assert reply.headers.get("x-request-id") == "trace-500"
        assert reply.json()["error"]["code"] == "internal_error" and "secret" not in reply.text
        assert [rid for rid, _ in records.about("unexpected error")] == ["trace-500"]
        assert wait_until(lambda: records.about("GET /boom 500"))
        assert [rid for rid, _ in records.about("GET /boom 500")] == ["trace-500"]
        assert not [r for r in records.records if r.name == "uvicorn.error" and r.levelno >= logging.ERROR]
        fresh = httpx.get(f"{server.url}/boom")  # no id sent: one is made, and sent back
        assert fresh.status_code == 500 and fresh.headers["x-request-id"].startswith("req_")
        assert httpx.get(f"{server.url}/health").status_code == 200  # the server goes on
    finally:
        server.__exit__()


def test_the_workers_lines_about_a_job_carry_that_jobs_request_id(records: Records) -> None:
    """Two requests fail in the batch at once (a GPU fault at their second token): the worker thread's line about
    each names it by its own id, never the other's and never "-"."""
    server = start(fail_after=2)
    try:
        replies: dict[str, int] = {}

        def ask(request_id: str) -> None:
            replies[request_id] = httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "max_tokens": 8},
                                             headers={"X-Request-Id": request_id}, timeout=30).status_code

        threads = [threading.Thread(target=ask, args=(rid,)) for rid in ("trace-a", "trace-b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        assert replies == {"trace-a": 500, "trace-b": 500}
        lines = [r for r in records.records if r.name == "hearth.worker" and "failed in the batch" in r.getMessage()]
        assert sorted(getattr(r, "request_id", "?") for r in lines) == ["trace-a", "trace-b"]
        assert all(r.threadName.startswith("hearth-worker") for r in lines)  # made on the worker thread
    finally:
        server.__exit__()


def test_idle_unload_lines_carry_no_request_id(records: Records, tmp_path: Path) -> None:
    """The first request for an on-demand model starts the idle reaper; the reaper's line about unloading the model
    later is not that request's (it carried its id, inherited with the task's context)."""
    store = tmp_path / "store"
    add_model(store, fake_gguf(tmp_path / "one.gguf", "gemma3"), "one", "1b")
    server = start(env={"HEARTH_OLLAMA": "true", "OLLAMA_MODELS": str(store), "HEARTH_KEEP_ALIVE": "0.3s"})
    try:
        reply = httpx.post(f"{server.url}/v1/completions", json={"model": "one:1b", "prompt": "a", "max_tokens": 2},
                           headers={"X-Request-Id": "trace-idle"}, timeout=30)
        assert reply.status_code == 200
        assert wait_until(lambda: records.about("unloading one:1b (idle)"), timeout=10)
        assert [rid for rid, _ in records.about("unloading one:1b (idle)")] == ["-"]
    finally:
        server.__exit__()
