"""Connections to remote servers, for remote topic views (``from NAME`` in a view specification).

The view evaluator holds one :class:`RemoteConnection` per remote server that some
view needs and that is defined (:mod:`fanout.servers`): a client session
(:func:`canopy.connect`) subscribed to the selectors of the views naming it, whose
notifications become the topic events the view engine takes (``server=NAME``).
A connection is shared by the views naming the same server, made when the first
needs it and closed when the last goes (or the definition does).

* While the session reconnects, the views keep their reference topics; the client
  library brings the subscriptions up to date when it is back.
* When the session ends for good (the reconnect timeout passed, or the server
  refused it), the server's topics count as lost: the views' reference topics go
  (:meth:`views.engine.ViewEngine.remote_lost`), and the connection tries again
  every retry delay; they come back with the topics.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

from fanout.servers import RemoteServer
from topics.protocol import Added, Appended, Changed, Removed, TopicEvent
from topics.timeseries import Event
from topics.types import TopicType, encode

log = logging.getLogger("canopy.views")

#: seconds ``server check`` waits for a session
CHECK_TIMEOUT = 10.0
#: seconds a view change waits for the remote server to take an unsubscription
UNSUBSCRIBE_TIMEOUT = 5.0


class RemoteConnection:
    """One remote server's session and subscriptions. ``on_events(server, events)``
    takes what it hears; ``on_lost(server)`` is told when its topics are lost."""

    def __init__(
        self,
        server: RemoteServer,
        on_events: Callable[[str, list[TopicEvent]], None],
        on_lost: Callable[[str], None],
    ) -> None:
        self.server = server
        self._on_events = on_events
        self._on_lost = on_lost
        self.selectors: set[str] = set()
        self.state = "connecting"
        self.error = ""
        self.session: Any = None
        self._follows: dict[str, asyncio.Task[None]] = {}
        self._task: asyncio.Task[None] | None = None
        self._ended: asyncio.Event | None = None
        #: time series path -> newest sequence passed on (several subscriptions may carry one event)
        self._sequences: dict[str, int] = {}
        self._lost_topics = False

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.ensure_future(self._run())

    async def want(self, selectors: set[str]) -> None:
        """Subscribe to exactly these selectors (now if connected, else once connected)."""
        added, removed = selectors - self.selectors, self.selectors - selectors
        self.selectors = set(selectors)
        session = self.session
        if session is None or session.closed or self.state not in ("connected", "reconnecting"):
            return
        for selector in added:
            self._follow(selector)
        for selector in removed:
            task = self._follows.pop(selector, None)
            if task is not None:
                task.cancel()
            with contextlib.suppress(Exception):  # a session reconnecting must not hold the caller
                await asyncio.wait_for(session.topics.unsubscribe(selector), UNSUBSCRIBE_TIMEOUT)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        for task in self._follows.values():
            task.cancel()
        if self.session is not None:
            with contextlib.suppress(Exception):
                await self.session.close()

    async def _run(self) -> None:
        import canopy

        s = self.server
        while True:
            self.state = "connecting" if not self.error else "retrying"
            try:
                self.session = await canopy.connect(
                    list(s.urls), s.principal, s.password, reconnect_timeout=s.reconnect_timeout,
                    retry_delay=s.retry_delay,
                )
            except Exception as e:
                self.error = f"{type(e).__name__}: {e}"
                self.state = "retrying"
                log.warning("remote server %s: cannot connect (%s); again in %.3g s", s.name, self.error, s.retry_delay)
                await asyncio.sleep(s.retry_delay)
                continue
            self.state, self.error = "connected", ""
            log.info("remote server %s: connected (session %s)", s.name, self.session.session_id)
            self._ended = asyncio.Event()
            for selector in self.selectors:
                self._follow(selector)
            await self._ended.wait()
            for task in self._follows.values():
                task.cancel()
            self._follows.clear()
            reason = self.session.close_reason
            self.error = str(reason) if reason is not None else "the session ended"
            log.warning("remote server %s: the session ended (%s); its views' reference topics go", s.name, self.error)
            with contextlib.suppress(Exception):
                await self.session.close()
            self.session = None
            self._follows.clear()
            self._sequences.clear()
            self._on_lost(s.name)
            self.state = "retrying"
            await asyncio.sleep(s.retry_delay)

    def _follow(self, selector: str) -> None:
        task = self._follows.get(selector)
        if task is None or task.done():  # a subscription that failed is made again
            self._follows[selector] = asyncio.ensure_future(self._subscription(selector))

    async def _subscription(self, selector: str) -> None:
        session = self.session
        try:
            subscription = await session.topics.subscribe(selector)
            async for event in subscription:
                events = self._translate(event)
                if events:
                    self._on_events(self.server.name, events)
        except asyncio.CancelledError:
            raise
        except Exception as e:
            log.warning("remote server %s: subscription %s ended: %s", self.server.name, selector, e)
        if session.closed and self._ended is not None:
            self._ended.set()

    def _translate(self, event: Any) -> list[TopicEvent]:
        kind = event.kind
        if kind == "disconnected":
            self.state = "reconnecting"
            return []
        if kind == "reconnected":
            self.state = "connected"
            return []
        spec = event.specification
        if kind == "unsubscribed":
            self._sequences.pop(event.path, None)
            return [Removed(event.path)]
        if spec is None:
            return []
        if spec.type is TopicType.TIME_SERIES:
            if kind == "subscribed":
                return [Added(event.path, spec.type.value, spec.properties, None)]
            ts = event.event
            if ts is None or spec.event_type is None or ts.sequence <= self._sequences.get(event.path, -1):
                return []
            self._sequences[event.path] = ts.sequence
            original = ts.original
            data = encode(spec.event_type, ts.value)
            return [Appended(event.path, Event(ts.sequence, ts.timestamp, ts.author, data,
                                               original.sequence if original is not None else None))]
        value = encode(spec.type, event.value) if event.value is not None else None
        if kind == "subscribed":
            return [Added(event.path, spec.type.value, spec.properties, value)]
        return [Changed(event.path, value)] if value is not None else []

    def describe(self) -> dict[str, Any]:
        return {"state": self.state, "error": self.error, "selectors": sorted(self.selectors),
                "session": self.session.session_id if self.session is not None else None}


async def check(server: RemoteServer) -> dict[str, Any]:
    """Open a session to the server with its definition and close it: whether it worked,
    in how long, or why not."""
    import time

    import canopy

    started = time.monotonic()
    try:
        session = await asyncio.wait_for(
            canopy.connect(list(server.urls), server.principal, server.password, reconnect_timeout=0), CHECK_TIMEOUT)
    except Exception as e:
        return {"name": server.name, "ok": False, "error": f"{type(e).__name__}: {e}",
                "ms": round((time.monotonic() - started) * 1000, 1)}
    took = (time.monotonic() - started) * 1000
    await session.close()
    return {"name": server.name, "ok": True, "error": "", "ms": round(took, 1)}
