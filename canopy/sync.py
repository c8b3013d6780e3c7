"""A blocking facade over the asyncio client, for scripts and the CLI.

::

    with canopy.connect_sync("ws://127.0.0.1:8080") as session:
        session.topics.add("a/b", "STRING")
        session.topics.set("a/b", "hello")
        for event in session.topics.subscribe("?a//"):
            print(event.path, event.value)

The session runs on an event loop in a background thread; every method
blocks until the server has answered (``timeout`` seconds at most, then
:class:`TimeoutError`). Events a subscription receives are buffered while the
caller is not iterating.

The session reconnects as the asyncio one does (see :func:`canopy.connect`):
subscriptions yield ``disconnected`` and ``reconnected`` events, a request
that was in flight when the connection dropped raises
:class:`~canopy.errors.ConnectionInterruptedError`, and one made while the
session is disconnected waits for the next connection (within ``timeout``,
like any other).
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator, Sequence
from typing import Any, TypeVar

from canopy.client import (
    DEFAULT_URL,
    AddResult,
    EventMetadata,
    FetchedTopic,
    HandlerRegistration,
    MissingTopicNotification,
    RangeResult,
    Session,
    Subscription,
    TopicEvent,
    UpdateStream,
    connect,
)
from topics.constraints import Constraint
from topics.selectors import Selector
from topics.types import TopicType

T = TypeVar("T")


async def _awaited(request: Awaitable[T]) -> T:
    return await request


async def _in_loop(method: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any) -> T:
    """Call ``method`` on the session's loop (it needs one to queue its request) and await it."""
    return await method(*args, **kwargs)


class _Loop:
    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="canopy-client", daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float | None) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=5)
        if not self.thread.is_alive():
            self.loop.close()


class SyncSubscription:
    """A blocking iterator of :class:`TopicEvent`."""

    def __init__(self, runner: _Loop, sub: Subscription, timeout: float | None) -> None:
        self._runner = runner
        self._sub = sub
        self.selector = sub.selector
        self._timeout = timeout

    def __iter__(self) -> Iterator[TopicEvent]:
        return self

    def __next__(self) -> TopicEvent:
        try:
            return self._runner.run(self._sub.__anext__(), None)
        except StopAsyncIteration:
            raise StopIteration from None

    def next(self, timeout: float | None = None) -> TopicEvent:
        """The next event; :class:`TimeoutError` after ``timeout`` seconds."""
        return self._runner.run(self._sub.next(timeout), None)

    def unsubscribe(self) -> None:
        self._runner.run(self._sub.unsubscribe(), self._timeout)

    def __enter__(self) -> SyncSubscription:
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._sub.session.closed:
            self.unsubscribe()


class SyncTopics:
    def __init__(self, runner: _Loop, session: Session, timeout: float | None) -> None:
        self._r, self._s, self._t = runner, session, timeout

    def add(self, path: str, type: TopicType | str, properties: dict[str, Any] | None = None) -> AddResult:
        return self._r.run(self._s.topics.add(path, type, properties), self._t)

    def set(
        self, path: str, value: Any, type: TopicType | str | None = None, *, add_if_missing: bool = False,
        retain: bool = True, constraint: Constraint | None = None,
    ) -> None:
        self._r.run(_in_loop(self._s.topics.set, path, value, type, add_if_missing=add_if_missing, retain=retain,
                             constraint=constraint), self._t)

    def add_and_set(
        self, path: str, value: Any, type: TopicType | str | None = None, *, constraint: Constraint | None = None
    ) -> None:
        self._r.run(_in_loop(self._s.topics.add_and_set, path, value, type, constraint=constraint), self._t)

    def apply_json_patch(self, path: str, patch: Any, constraint: Constraint | None = None) -> None:
        self._r.run(_in_loop(self._s.topics.apply_json_patch, path, patch, constraint), self._t)

    def update_stream(
        self, path: str, type: TopicType | str, constraint: Constraint | None = None, *, add_if_missing: bool = False
    ) -> SyncUpdateStream:
        stream = self._s.topics.update_stream(path, type, constraint, add_if_missing=add_if_missing)
        return SyncUpdateStream(self._r, stream, self._t)

    def remove(self, selector: str | Selector) -> int:
        return self._r.run(self._s.topics.remove(selector), self._t)

    def fetch(
        self,
        selector: str | Selector,
        with_values: bool = True,
        with_properties: bool = False,
        types: list[TopicType | str] | None = None,
        limit: int | None = None,
    ) -> list[FetchedTopic]:
        return self._r.run(self._s.topics.fetch(selector, with_values, with_properties, types, limit), self._t)

    def subscribe(self, selector: str | Selector) -> SyncSubscription:
        request = self._s.topics.subscribe(selector)
        return SyncSubscription(self._r, self._r.run(_awaited(request), self._t), self._t)

    def unsubscribe(self, selector: str | Selector) -> None:
        self._r.run(self._s.topics.unsubscribe(selector), self._t)


class SyncUpdateStream:
    """Blocking form of :class:`canopy.client.UpdateStream`."""

    def __init__(self, runner: _Loop, stream: UpdateStream, timeout: float | None) -> None:
        self._r, self._stream, self._t = runner, stream, timeout

    def set(self, value: Any) -> None:
        self._r.run(_in_loop(self._stream.set, value), self._t)

    def get(self) -> Any:
        return self._stream.get()

    @property
    def validated(self) -> bool:
        return self._stream.validated


class SyncTimeSeries:
    def __init__(self, runner: _Loop, session: Session, timeout: float | None) -> None:
        self._r, self._s, self._t = runner, session, timeout

    def append(self, path: str, value: Any, timestamp: Any = None) -> EventMetadata:
        return self._r.run(self._s.time_series.append(path, value, timestamp), self._t)

    def edit(self, path: str, original_sequence: int, value: Any) -> EventMetadata:
        return self._r.run(self._s.time_series.edit(path, original_sequence, value), self._t)

    def range_query(self, path: str, **query: Any) -> RangeResult:
        """See :meth:`canopy.client.TimeSeries.range_query` for the keywords."""
        return self._r.run(self._s.time_series.range_query(path, **query), self._t)


class SyncHub:
    def __init__(self, runner: _Loop, session: Session, timeout: float | None) -> None:
        self._r, self._s, self._t = runner, session, timeout

    @property
    def root(self) -> str:
        return self._s.hub.root

    def publish(self, name: str, value: Any) -> None:
        self._r.run(self._s.hub.publish(name, value), self._t)

    def subscribe(self, pattern: str) -> SyncSubscription:
        request = self._s.hub.subscribe(pattern)
        return SyncSubscription(self._r, self._r.run(_awaited(request), self._t), self._t)


class SyncMissingTopics:
    """Blocking form of :class:`canopy.client.MissingTopics`: each handler runs in a
    worker thread, so it may use the session's blocking methods (to create the topic)."""

    def __init__(self, runner: _Loop, session: Session, timeout: float | None) -> None:
        self._r, self._s, self._t = runner, session, timeout

    def add_handler(self, path: str, handler: Callable[[MissingTopicNotification], Any]) -> HandlerRegistration:
        async def in_thread(notification: MissingTopicNotification) -> Any:
            return await asyncio.to_thread(handler, notification)

        return self._r.run(self._s.missing_topics.add_handler(path, in_thread), self._t)

    def remove_handler(self, registration: HandlerRegistration) -> None:
        self._r.run(registration.close(), self._t)

    def list(self) -> list[tuple[str, str, str]]:
        return self._r.run(self._s.missing_topics.list(), self._t)

    def drain(self) -> None:
        """Wait until every notification received so far is answered."""
        self._r.run(self._s.missing_topics.drain(), self._t)


class _Blocking:
    """Blocking versions of every coroutine method of an async API object."""

    def __init__(self, runner: _Loop, target: Any, timeout: float | None) -> None:
        self._r, self._target, self._t = runner, target, timeout

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._target, name)
        if not callable(method):
            return method

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._r.run(method(*args, **kwargs), self._t)

        call.__doc__ = method.__doc__
        return call


class SyncSession:
    def __init__(self, runner: _Loop, session: Session, timeout: float | None) -> None:
        self._runner = runner
        self._session = session
        self.topics = SyncTopics(runner, session, timeout)
        self.time_series = SyncTimeSeries(runner, session, timeout)
        self.hub = SyncHub(runner, session, timeout)
        #: blocking forms of :class:`canopy.client.Security`, ``SessionTrees``, ``Sessions``,
        #: ``TopicViews`` and ``Server``
        self.security = _Blocking(runner, session.security, timeout)
        self.session_trees = _Blocking(runner, session.session_trees, timeout)
        self.sessions = _Blocking(runner, session.sessions, timeout)
        self.views = _Blocking(runner, session.views, timeout)
        self.server = _Blocking(runner, session.server, timeout)
        self.missing_topics = SyncMissingTopics(runner, session, timeout)
        self.fanout = _Blocking(runner, session.fanout, timeout)
        self.remote_servers = _Blocking(runner, session.remote_servers, timeout)
        self.metrics = _Blocking(runner, session.metrics, timeout)

    @property
    def session_id(self) -> str:
        """The server's session now (another after a reconnection that could not resume it)."""
        return self._session.session_id

    @property
    def properties(self) -> dict[str, str]:
        return self._session.properties

    @property
    def connected(self) -> bool:
        return self._session.connected

    @property
    def closed(self) -> bool:
        return self._session.closed

    def close(self) -> None:
        try:
            self._runner.run(self._session.close(), 10)
        finally:
            self._runner.stop()

    def __enter__(self) -> SyncSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def connect_sync(
    url: str | Sequence[str] = DEFAULT_URL,
    principal: str | None = None,
    password: str | None = None,
    properties: dict[str, str] | None = None,
    *,
    hub_root: str | None = None,
    timeout: float | None = 30.0,
    ca_file: str | os.PathLike[str] | None = None,
    reconnect_timeout: float = 60.0,
    retry_delay: float = 0.5,
    deltas: bool = True,
) -> SyncSession:
    """Open a blocking session (see the module docstring; ``url`` (one or a
    list), ``ca_file``, ``reconnect_timeout``, ``retry_delay`` and ``deltas`` as for
    :func:`canopy.connect`)."""
    runner = _Loop()

    async def open_session() -> Session:
        return await connect(
            url, principal, password, properties, hub_root=hub_root, ca_file=ca_file,
            reconnect_timeout=reconnect_timeout, retry_delay=retry_delay, deltas=deltas,
        )

    try:
        session = runner.run(open_session(), timeout)
    except BaseException:
        runner.stop()
        raise
    return SyncSession(runner, session, timeout)
