"""Request ids and the log lines that carry them.

The request middleware gives each request an id (the client's `X-Request-Id` when it is a sane token, else a
new one) and puts it in a context variable; every log record made while that request is served, in the
event loop or in a thread started with its context (asyncio.to_thread), gets it as `request_id` ("-" outside
a request). A model's worker thread serves many requests at once: its lines about one request's job carry that
request's id (`logging_as`, with the id the job kept), its other lines "-". Background tasks that outlive the
request that started them (the idle-unload reaper) run in `outside_requests()`, so their lines carry "-" too.

`configure_logging` sets the format: text (`... [req-id] logger: message`) or one JSON object a line.
"""

from __future__ import annotations

import contextvars
import json
import logging
import re
import secrets
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, Literal

_request_id: contextvars.ContextVar[str] = contextvars.ContextVar("hearth_request_id", default="-")
# Callbacks to run when the request's response has ended (its stream included); None outside a request.
_at_end: contextvars.ContextVar[list[Callable[[], None]] | None] = contextvars.ContextVar("hearth_at_end",
                                                                                           default=None)
# What a client may send as its own request id: printable, no spaces or quotes, at most 128 characters.
_CLIENT_ID = re.compile(r"^[A-Za-z0-9._:/+=@-]{1,128}$")
TEXT_FORMAT = "%(asctime)s %(levelname)-7s [%(request_id)s] %(name)s: %(message)s"
# LogRecord attributes that are not extra fields of a JSON line.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime", "request_id",
                                                                         "color_message"}


def new_request_id() -> str:
    return f"req_{secrets.token_hex(12)}"


def request_id_from(header: str | None) -> str:
    """The client's id when it is a sane token (so logs cannot be forged with newlines), else a new one."""
    if header and _CLIENT_ID.match(header):
        return header
    return new_request_id()


def current_request_id() -> str:
    """The id of the request being served ("-" outside a request)."""
    return _request_id.get()


def set_request_id(request_id: str) -> contextvars.Token[str]:
    return _request_id.set(request_id)


def reset_request_id(token: contextvars.Token[str]) -> None:
    _request_id.reset(token)


@contextmanager
def logging_as(request_id: str) -> Iterator[None]:
    """Records made in the block carry this request id (a worker thread logging about one request's job)."""
    token = _request_id.set(request_id)
    try:
        yield
    finally:
        _request_id.reset(token)


def outside_requests() -> contextvars.Context:
    """A context belonging to no request (id "-", no metrics, no end callbacks), for a task that a request starts
    but that serves the whole server; a task otherwise inherits the context of the request it was started in."""
    return contextvars.Context()


def begin_request() -> contextvars.Token[list[Callable[[], None]] | None]:
    """Start collecting the current request's end callbacks (the request middleware calls this)."""
    return _at_end.set([])


def end_request(token: contextvars.Token[list[Callable[[], None]] | None]) -> None:
    """Run the request's end callbacks, newest first, then forget them."""
    callbacks = _at_end.get() or []
    _at_end.reset(token)
    for callback in reversed(callbacks):
        try:
            callback()
        except Exception:  # noqa: BLE001 - one failing callback must not keep the others from running
            logging.getLogger("hearth.server").exception("a request-end callback failed")


def at_request_end(callback: Callable[[], None]) -> bool:
    """Run callback once the current request's response has ended; False (and nothing done) outside a request."""
    callbacks = _at_end.get()
    if callbacks is None:
        return False
    callbacks.append(callback)
    return True


_base_factory = logging.getLogRecordFactory()


def _record_with_request_id(*args: Any, **kwargs: Any) -> logging.LogRecord:
    record = _base_factory(*args, **kwargs)
    record.request_id = _request_id.get()
    return record


def install_record_factory() -> None:
    """Give every log record a `request_id` attribute (idempotent; safe with any handler or format)."""
    if logging.getLogRecordFactory() is not _record_with_request_id:
        logging.setLogRecordFactory(_record_with_request_id)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, request id, message, the record's extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": self.formatTime(record, "%Y-%m-%dT%H:%M:%S") + f".{int(record.msecs):03d}",
            "level": record.levelname.lower(),
            "logger": record.name,
            "request_id": getattr(record, "request_id", "-"),
            "message": record.getMessage(),
        }
        line.update({k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")})
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def configure_logging(level: str = "info", fmt: Literal["text", "json"] = "text") -> None:
    """Log to stderr in the chosen format, every line with its request id; uvicorn's loggers included."""
    install_record_factory()
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error"):  # through the root handler, in the same format
        logging.getLogger(name).handlers[:] = []
        logging.getLogger(name).propagate = True
    # The request middleware writes one access line per request (with its id, status and time).
    logging.getLogger("uvicorn.access").disabled = True
