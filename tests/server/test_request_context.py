"""Request ids in log lines: the id a request came with (or was given) is on every record made while serving it."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator

import httpx
import pytest

from server.request_context import (
    TEXT_FORMAT,
    JsonFormatter,
    configure_logging,
    install_record_factory,
    request_id_from,
)
from tests.server.live_server import ThreadServer
from tests.server.test_app import CHAT, start, wait_until


class Records(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


@pytest.fixture()
def records() -> Iterator[Records]:
    install_record_factory()
    handler = Records()
    for name in ("hearth.server", "hearth.access"):
        logging.getLogger(name).addHandler(handler)
        logging.getLogger(name).setLevel(logging.DEBUG)
    yield handler
    for name in ("hearth.server", "hearth.access"):
        logging.getLogger(name).removeHandler(handler)


def test_records_made_while_serving_a_request_carry_its_id(records: Records) -> None:
    server: ThreadServer = start()
    try:
        reply = httpx.post(f"{server.url}/v1/chat/completions", json={**CHAT, "max_tokens": 2, "user": "ada"},
                           headers={"X-Request-Id": "trace-7"})
        assert reply.status_code == 200
        def messages() -> list[str]:
            return [r.getMessage() for r in list(records.records) if getattr(r, "request_id", None) == "trace-7"]

        # The access line is written once the response has gone out, so it may follow the client's read.
        assert wait_until(lambda: any(m.startswith("POST /v1/chat/completions 200 ") for m in messages()))
        assert any("from user 'ada'" in m for m in messages())  # the chat service's own line
        other = httpx.get(f"{server.url}/v1/models").headers["x-request-id"]
        assert wait_until(lambda: any(getattr(r, "request_id", None) == other for r in list(records.records)))
        # Outside a request (the worker thread, startup): "-".
        assert all(getattr(r, "request_id", None) for r in records.records)
    finally:
        server.__exit__()


def test_json_lines_hold_the_id_and_the_extra_fields() -> None:
    install_record_factory()
    record = logging.getLogger("hearth.access").makeRecord(
        "hearth.access", logging.INFO, __file__, 1, "GET %s %d", ("/health", 200), None,
        extra={"status": 200, "path": "/health"})
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "GET /health 200" and line["level"] == "info" and line["logger"] == "hearth.access"
    assert line["request_id"] == "-" and line["status"] == 200 and line["path"] == "/health"
    assert "[%(request_id)s]" in TEXT_FORMAT


def test_configure_logging_routes_uvicorn_through_the_same_handler() -> None:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("warning", "json")
        assert len(root.handlers) == 1 and isinstance(root.handlers[0].formatter, JsonFormatter)
        assert logging.getLogger("uvicorn.error").propagate and logging.getLogger("uvicorn.access").disabled
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        logging.getLogger("uvicorn.access").disabled = False


@pytest.mark.parametrize(("sent", "kept"), [("abc-1", True), ("a" * 128, True), ("a" * 129, False),
                                            ("with space", False), ("new\nline", False), ("", False), (None, False)])
def test_which_client_ids_are_kept(sent: str | None, kept: bool) -> None:
    assert (request_id_from(sent) == sent) is kept
