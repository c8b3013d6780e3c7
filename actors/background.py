"""Work a gateway's part starts and does not wait for (a call to another actor, a coroutine):
each kept until it is done, so that it is not collected half-way, and a failure logged with
what it was for."""

from __future__ import annotations

import asyncio
import logging
from typing import Any


class Background:
    def __init__(self, log: logging.Logger) -> None:
        self._log = log
        self._tasks: set[asyncio.Future[Any]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def track(self, awaitable: Any, what: str) -> None:
        """Run ``awaitable`` (a coroutine, or an awaitable such as a Ray object reference) to
        its end; ``what`` says in the log line what could not be done if it fails."""
        task = asyncio.ensure_future(awaitable)
        self._tasks.add(task)

        def done(t: asyncio.Future[Any]) -> None:
            self._tasks.discard(t)
            if not t.cancelled() and t.exception() is not None:
                self._log.warning("could not %s: %s", what, t.exception())

        task.add_done_callback(done)
