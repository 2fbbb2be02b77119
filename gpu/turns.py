"""Turns on a shared adapter: the models loaded on one GPU (each on a wgpu device of its own) take its work in turn.

Devices on one adapter do not share a queue, so nothing orders their work: on a CPU rasteriser (lavapipe) a long
speech step and a short chat step run at once and the short one pays for both. A worker holds its adapter's turn
for one bounded step (a batch round, a decoder window, a synthesis stage) and gives it back between steps; the turn
goes to whoever asked first, so a model with a long run of steps alternates with the others instead of starving them.
"""

from __future__ import annotations

import concurrent.futures
import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class Turns:
    """A first-come, first-served lock: threads get it in the order they asked (threading.Lock promises no order)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._waiting: deque[object] = deque()
        self._holder: object | None = None

    @contextmanager
    def turn(self) -> Iterator[None]:
        """Hold the adapter for one step; re-entrant for the thread that holds it (a step inside a step)."""
        me = threading.get_ident()
        if self._holder == me:
            yield
            return
        ticket = object()
        with self._cond:
            self._waiting.append(ticket)
            while self._holder is not None or self._waiting[0] is not ticket:
                self._cond.wait()
            self._waiting.popleft()
            self._holder = me
        try:
            yield
        finally:
            with self._cond:
                self._holder = None
                self._cond.notify_all()

    @contextmanager
    def stoppable_turn(self, should_stop: Callable[[], bool] | None) -> Iterator[None]:
        """turn() for one step of a long job (a transcription's windows): refused with
        concurrent.futures.CancelledError once should_stop says so."""
        if should_stop is not None and should_stop():
            raise concurrent.futures.CancelledError("stopped")
        with self.turn():
            yield

    @property
    def waiting(self) -> int:
        """Threads waiting for a turn (the holder not counted)."""
        with self._cond:
            return len(self._waiting)


_by_adapter: dict[str, Turns] = {}
_registry_lock = threading.Lock()


def turns_for(adapter_key: str) -> Turns:
    """The one Turns of an adapter, shared by every device made on it in this process."""
    with _registry_lock:
        return _by_adapter.setdefault(adapter_key, Turns())
