"""Pre-queue work, bounded: the CPU work a request does before its model's queue (decoding an upload, tokenising
or phonemising its input) runs on a thread, and only `limits.max_preparing` requests do it at once. Without the
bound a burst of uploads would decode all at once, in memory, ahead of any queue limit.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
from collections.abc import Callable
from typing import ParamSpec, TypeVar

P = ParamSpec("P")
T = TypeVar("T")


class Preparation:
    """At most `limit` functions run at once on threads; the others wait for a place, first come first served."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._places = asyncio.Semaphore(limit)
        self.waiting = 0

    async def run(self, fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """fn(*args, **kwargs) on a thread (with this request's context: its id reaches the log lines), once a
        place is free."""
        self.waiting += 1
        try:
            await self._places.acquire()
        finally:
            self.waiting -= 1
        try:
            context = contextvars.copy_context()
            return await asyncio.get_running_loop().run_in_executor(None, functools.partial(context.run, fn, *args,
                                                                                            **kwargs))
        finally:
            self._places.release()
