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
import enum
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
    NotificationCallback,
    NotificationListener,
    RangeResult,
    RequestContext,
    RequestHandlerRegistration,
    Session,
    SessionEvent,
    SessionListener,
    SessionLock,
    SessionLockScope,
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

    def notifications(
        self, selector: str | Selector | None, callback: NotificationCallback, *,
        descendants: NotificationCallback | None = None,
    ) -> SyncNotificationListener:
        """See :meth:`canopy.client.Topics.notifications`; the callbacks run on the client's
        own thread and must not block (hand the notifications to a queue)."""
        listener = self._r.run(self._s.topics.notifications(selector, callback, descendants=descendants), self._t)
        return SyncNotificationListener(self._r, listener, self._t)


class SyncNotificationListener:
    """Blocking form of :class:`canopy.client.NotificationListener`."""

    def __init__(self, runner: _Loop, listener: NotificationListener, timeout: float | None) -> None:
        self._r, self._listener, self._t = runner, listener, timeout

    @property
    def selectors(self) -> list[str]:
        return list(self._listener.selectors)

    def select(self, selector: str) -> None:
        self._r.run(self._listener.select(selector), self._t)

    def deselect(self, selector: str) -> None:
        self._r.run(self._listener.deselect(selector), self._t)

    def close(self) -> None:
        self._r.run(self._listener.close(), self._t)

    def __enter__(self) -> SyncNotificationListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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


class SyncSessionListener:
    """A blocking session event listener's registration (:meth:`close` ends it)."""

    def __init__(self, runner: _Loop, listener: SessionListener, timeout: float | None) -> None:
        self._r, self._listener, self._t = runner, listener, timeout
        self.registration = listener.registration

    def close(self) -> None:
        self._r.run(self._listener.close(), self._t)

    def __enter__(self) -> SyncSessionListener:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class SyncMessaging:
    """Blocking form of :class:`canopy.client.Messaging`: each handler, request stream
    callback and filter response callback runs in a worker thread, so it may use the
    session's blocking methods. A send waits for the request's own ``timeout`` (plus
    a margin) rather than the session's."""

    def __init__(self, runner: _Loop, session: Session, timeout: float | None) -> None:
        self._r, self._s, self._t = runner, session, timeout
        self._streams: dict[str, Callable[[Any, RequestContext], Any]] = {}

    def _wait(self, timeout: float | None) -> float | None:
        return None if self._t is None else max(self._t, (timeout if timeout is not None else 60.0) + 5.0)

    def add_request_handler(
        self, path: str, handler: Callable[[Any, RequestContext], Any], request_type: TopicType | str | None = None,
        response_type: TopicType | str | None = None, session_properties: Sequence[str] = (),
    ) -> RequestHandlerRegistration:
        async def in_thread(request: Any, context: RequestContext) -> Any:
            return await asyncio.to_thread(handler, request, context)

        return self._r.run(_in_loop(self._s.messaging.add_request_handler, path, in_thread, request_type,
                                    response_type, session_properties), self._t)

    def remove_request_handler(self, registration: RequestHandlerRegistration) -> None:
        self._r.run(registration.close(), self._t)

    def set_request_stream(
        self, path: str, callback: Callable[[Any, RequestContext], Any], request_type: TopicType | str | None = None,
        response_type: TopicType | str | None = None,
    ) -> Callable[[Any, RequestContext], Any] | None:
        async def in_thread(request: Any, context: RequestContext) -> Any:
            return await asyncio.to_thread(callback, request, context)

        async def set_it() -> None:
            self._s.messaging.set_request_stream(path, in_thread, request_type, response_type)

        self._r.run(set_it(), self._t)
        old, self._streams[path] = self._streams.get(path), callback
        return old

    def remove_request_stream(self, path: str) -> Callable[[Any, RequestContext], Any] | None:
        async def remove_it() -> None:
            self._s.messaging.remove_request_stream(path)

        self._r.run(remove_it(), self._t)
        return self._streams.pop(path, None)

    def send_request(self, path: str, value: Any, request_type: TopicType | str | None = None,
                     response_type: TopicType | str | None = None, timeout: float | None = None) -> Any:
        return self._r.run(_in_loop(self._s.messaging.send_request, path, value, request_type, response_type,
                                    timeout), self._wait(timeout))

    def send_request_to_session(
        self, session_id: str, path: str, value: Any, request_type: TopicType | str | None = None,
        response_type: TopicType | str | None = None, timeout: float | None = None,
    ) -> Any:
        return self._r.run(_in_loop(self._s.messaging.send_request_to_session, session_id, path, value, request_type,
                                    response_type, timeout), self._wait(timeout))

    def send_request_to_filter(
        self, session_filter: str, path: str, value: Any, callback: Callable[[str, Any, Any], Any],
        request_type: TopicType | str | None = None, response_type: TopicType | str | None = None,
        timeout: float | None = None,
    ) -> int:
        async def in_thread(session_id: str, response: Any, error: Any) -> None:
            await asyncio.to_thread(callback, session_id, response, error)

        return self._r.run(_in_loop(self._s.messaging.send_request_to_filter, session_filter, path, value, in_thread,
                                    request_type, response_type, timeout), self._t)

    def drain(self) -> None:
        """Wait until every request received so far is answered."""
        self._r.run(self._s.messaging.drain(), self._t)


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


class SyncClients(_Blocking):
    """Blocking form of :class:`canopy.client.Clients`: a listener's callback runs on the
    client's own thread and must not block (hand events to a queue)."""

    def listen(self, callback: Callable[[SessionEvent], Any], filter: str | None = None,
               properties: Sequence[str] = ()) -> SyncSessionListener:
        listener = self._r.run(self._target.listen(callback, filter, properties), self._t)
        return SyncSessionListener(self._r, listener, self._t)

    def unrequested(self) -> SyncSubscription:
        """See :meth:`canopy.client.Clients.unrequested`."""

        async def made() -> Subscription:
            return self._target.unrequested()  # type: ignore[no-any-return]

        return SyncSubscription(self._r, self._r.run(made(), self._t), self._t)


class _Default(enum.Enum):
    SESSION = "the session's timeout"


class SyncSessionLock:
    """Blocking form of :class:`canopy.client.SessionLock`."""

    def __init__(self, runner: _Loop, lock: SessionLock, timeout: float | None) -> None:
        self._r, self._lock, self._t = runner, lock, timeout
        self.name, self.sequence, self.scope = lock.name, lock.sequence, lock.scope

    @property
    def owned(self) -> bool:
        return self._lock.owned

    def unlock(self) -> bool:
        return self._r.run(self._lock.unlock(), self._t)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SyncSessionLock):
            return NotImplemented
        return self._lock == other._lock

    def __hash__(self) -> int:
        return hash(self._lock)

    def __repr__(self) -> str:
        return f"Sync{self._lock!r}"


class SyncLocks:
    """Blocking form of :class:`canopy.client.Locks`: :meth:`lock` blocks until the lock is
    granted or ``timeout`` (the session's, unless given: ``None`` waits for ever) has
    passed, which withdraws the request and raises :class:`TimeoutError`."""

    def __init__(self, runner: _Loop, session: Session, timeout: float | None) -> None:
        self._r, self._s, self._t = runner, session, timeout

    def lock(self, name: str, scope: SessionLockScope | str = SessionLockScope.UNLOCK_ON_SESSION_LOSS,
             timeout: float | None | _Default = _Default.SESSION) -> SyncSessionLock:
        wait = self._t if isinstance(timeout, _Default) else timeout

        async def locked() -> SessionLock:
            return await asyncio.wait_for(self._s.locks.lock(name, scope), wait)

        return SyncSessionLock(self._r, self._r.run(locked(), None), self._t)

    def list(self) -> list[dict[str, Any]]:
        return self._r.run(self._s.locks.list(), self._t)


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
        self.clients = SyncClients(runner, session.clients, timeout)
        self.views = _Blocking(runner, session.views, timeout)
        self.server = _Blocking(runner, session.server, timeout)
        self.missing_topics = SyncMissingTopics(runner, session, timeout)
        self.messaging = SyncMessaging(runner, session, timeout)
        self.fanout = _Blocking(runner, session.fanout, timeout)
        self.remote_servers = _Blocking(runner, session.remote_servers, timeout)
        self.metrics = _Blocking(runner, session.metrics, timeout)
        self.locks = SyncLocks(runner, session, timeout)

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
    compression: bool = True,
) -> SyncSession:
    """Open a blocking session (see the module docstring; ``url`` (one or a
    list), ``ca_file``, ``reconnect_timeout``, ``retry_delay``, ``deltas`` and ``compression`` as for
    :func:`canopy.connect`)."""
    runner = _Loop()

    async def open_session() -> Session:
        return await connect(
            url, principal, password, properties, hub_root=hub_root, ca_file=ca_file,
            reconnect_timeout=reconnect_timeout, retry_delay=retry_delay, deltas=deltas,
            compression=compression,
        )

    try:
        session = runner.run(open_session(), timeout)
    except BaseException:
        runner.stop()
        raise
    return SyncSession(runner, session, timeout)
