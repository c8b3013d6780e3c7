"""The asyncio client.

::

    import canopy

    async with canopy.connect("ws://127.0.0.1:8080") as session:
        await session.topics.add("prices/cod", "DOUBLE")
        await session.topics.set("prices/cod", 12.5)
        async for event in session.topics.subscribe("?prices//"):
            print(event.kind, event.path, event.value)

Requests issued in the same event-loop turn travel in one frame, and any
number may be outstanding, so ``asyncio.gather`` over many ``set`` calls
pipelines them. Values are Python objects: ``str``, ``int``, ``float``,
JSON-compatible ``dict``/``list`` values, and ``bytes`` for BINARY topics.
Without a ``type``, ``set`` sends the value for the server to check
against the topic's type.

A :class:`Subscription` is an async iterator of :class:`TopicEvent`
(``subscribed`` with the current value, ``value`` for each update,
``unsubscribed`` with a reason) for the topics its selector matches; it
ends when the selector is unsubscribed or the session closes. Subscribing
is per session and per selector, as on the server: two subscriptions with
the same selector share it, and unsubscribing the selector ends both.

A session outlives its connection. When the connection drops, the client
reconnects (to the same URL or any other it was given), resumes the session
where the server still has it or opens a new one and subscribes again, and
brings every subscription up to date; subscriptions see ``disconnected`` and
``reconnected`` events around it. Requests in flight when it dropped fail with
:class:`~canopy.errors.ConnectionInterruptedError` (their outcome is
unknown); requests made meanwhile wait. :func:`connect` has the details.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import enum
import functools
import itertools
import logging
import os
import random
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from canopy import errors
from canopy import protocol as wire
from canopy import transport
from canopy.transport import Handler, WebSocketStream
from topics import openajax
from topics import types as values
from topics.errors import TopicModelError
from topics.selectors import Selector, parse_selector
from topics.specification import TopicSpecification
from topics.types import TopicType

log = logging.getLogger("canopy.client")
DEFAULT_URL = "ws://127.0.0.1:8080"
_END = object()


class AddResult(enum.Enum):
    CREATED = "CREATED"
    EXISTS = "EXISTS"


class EventMetadata(NamedTuple):
    """Where a time series event sits: its sequence number, time (ms) and author."""

    sequence: int
    timestamp: int
    author: str


class TimeSeriesEvent(NamedTuple):
    """A time series event; ``original`` is set when it is an edit."""

    sequence: int
    timestamp: int
    author: str
    value: Any
    original: EventMetadata | None = None

    @property
    def is_edit(self) -> bool:
        return self.original is not None


class RangeResult(NamedTuple):
    events: list[TimeSeriesEvent]
    selected_count: int

    @property
    def complete(self) -> bool:
        """False when ``limit`` cut the result short."""
        return len(self.events) == self.selected_count


class TopicEvent(NamedTuple):
    """One notification for a subscription.

    ``subscribed`` (with the current value), ``value`` for each update,
    ``unsubscribed`` with a reason. For a TIME_SERIES topic every event and
    edit arrives as a ``value`` notification whose ``event`` holds the event
    (``value`` is its value).

    Two kinds concern the session's connection, not a topic (their ``path`` is
    ``""`` and their ``type`` ``None``): ``disconnected`` when the connection
    dropped (``reason`` says how; the session is reconnecting, and the values
    may be stale until) ``reconnected``, once the subscription is up to date
    again (``reason`` ``RESUMED`` or ``NEW_SESSION``, ``value`` the session id).
    Between the two come the current values of the topics it knew (``value``),
    the topics that appeared (``subscribed``) and those that went
    (``unsubscribed``, reason ``DISCONNECTED``). See :func:`connect`.
    """

    kind: str  # "subscribed" | "value" | "unsubscribed" | "disconnected" | "reconnected"
    path: str
    type: TopicType | None  # None for the connection events
    value: Any = None
    specification: TopicSpecification | None = None
    reason: str | None = None
    name: str | None = None  # the OpenAjax name, for hub subscriptions
    event: TimeSeriesEvent | None = None
    #: false for a value delivered without becoming the topic's value (an MQTT publish
    #: without RETAIN, a ``set`` with ``retain=False``): the topic keeps the one it had
    retained: bool = True


@dataclass(frozen=True)
class FetchedTopic:
    path: str
    type: TopicType
    value: Any = None
    properties: dict[str, str] | None = None


def _local(error: TopicModelError) -> errors.CanopyError:
    return errors.error_for(error.code, str(error))


@dataclass
class _Topic:
    path: str
    spec: TopicSpecification
    value: Any
    #: the last time series event delivered (TIME_SERIES topics)
    sequence: int = -1

    def decode(self, data: bytes) -> Any:
        """A new value's bytes as a Python value (a TIME_SERIES topic's stay bytes)."""
        kind = self.spec.type
        if kind is TopicType.BINARY:
            return data
        if kind is TopicType.TIME_SERIES:
            return data
        return values.decode(kind, data)

    def value_event(self, value: Any) -> TopicEvent:
        return _new_event(TopicEvent, ("value", self.path, self.spec.type, value, self.spec, None, None, None, True))


_new_event = tuple.__new__


class Subscription:
    """Events for one selector; iterate with ``async for``; ``async with`` unsubscribes on exit.

    With a ``callback`` the events are not queued: each is passed to the
    callback the moment it arrives, from the session's socket callback (no
    task in between), and iterating the subscription only tells when it ends.
    The callback must not block; an exception it raises is logged and the
    session goes on. Either way the subscription also gets the session's
    ``disconnected`` and ``reconnected`` events (see :class:`TopicEvent`);
    it ends when the session does, for good.
    """

    def __init__(
        self,
        session: Session,
        selector: Selector,
        hub_root: str | None = None,
        callback: Callable[[TopicEvent], Any] | None = None,
    ) -> None:
        self.session = session
        self.selector = selector
        self._events: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._hub_root = hub_root
        self._error: errors.CanopyError | None = None
        self._callback = callback
        self.ended = False
        self._down = False  # told "disconnected", not yet "reconnected"

    def _push(self, item: Any) -> None:
        callback = self._callback
        if callback is not None and item is not _END:
            try:
                callback(item)
            except Exception:
                log.exception("a subscription callback for %s failed", self.selector)
            return
        self._events.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _put(self, event: TopicEvent) -> None:
        if self._hub_root is not None:
            name = openajax.path_to_name(event.path, self._hub_root)
            if name is None:
                return
            event = event._replace(name=name)
        self._push(event)

    def _notify(self, event: TopicEvent) -> None:
        """A connection event: for every subscription, whatever its selector."""
        if not self.ended:
            self._push(event)

    def _end(self, error: errors.CanopyError | None = None) -> None:
        """No more events: the selector was unsubscribed, or the session ended
        (``error`` says why when the client did not close it itself)."""
        if not self.ended:
            self.ended = True
            self._error = error
            self._push(_END)

    def __aiter__(self) -> AsyncIterator[TopicEvent]:
        return self

    async def __anext__(self) -> TopicEvent:
        while not self._events:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        item = self._events[0]
        if item is _END:  # stays at the head: the subscription stays ended
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        self._events.popleft()
        assert isinstance(item, TopicEvent)
        return item

    async def next(self, timeout: float | None = None) -> TopicEvent:
        """The next event, or :class:`TimeoutError` after ``timeout`` seconds."""
        return await asyncio.wait_for(self.__anext__(), timeout)

    async def unsubscribe(self) -> None:
        await self.session.topics.unsubscribe(self.selector)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.session.closed:
            await self.unsubscribe()


class SubscribeRequest:
    """What ``subscribe`` returns. ``await`` it for the :class:`Subscription`, or
    iterate it directly (``async for event in session.topics.subscribe(...)``),
    or use it with ``async with`` to unsubscribe on exit."""

    def __init__(self, pending: Coroutine[Any, Any, Subscription]) -> None:
        self._pending: Coroutine[Any, Any, Subscription] | None = pending
        self._subscription: Subscription | None = None

    async def _get(self) -> Subscription:
        if self._subscription is None:
            assert self._pending is not None
            pending, self._pending = self._pending, None
            self._subscription = await pending
        return self._subscription

    def __await__(self) -> Generator[Any, None, Subscription]:
        return self._get().__await__()

    def __aiter__(self) -> AsyncIterator[TopicEvent]:
        return self

    async def __anext__(self) -> TopicEvent:
        return await (await self._get()).__anext__()

    async def __aenter__(self) -> Subscription:
        return await self._get()

    async def __aexit__(self, *exc: object) -> None:
        if self._subscription is not None:
            await self._subscription.__aexit__(*exc)

    def __del__(self) -> None:
        if self._pending is not None:
            self._pending.close()  # never awaited: nothing was sent


class Topics:
    """Topic operations of a session (``session.topics``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def add(
        self, path: str, type: TopicType | str, properties: dict[str, Any] | None = None
    ) -> AddResult:
        try:
            spec = TopicSpecification.of(type, properties)
        except TopicModelError as e:
            raise _local(e) from None
        return AddResult(await self._s._call("add", path, spec.type.value, spec.properties))

    def set(
        self, path: str, value: Any, type: TopicType | str | None = None, *, add_if_missing: bool = False,
        retain: bool = True,
    ) -> asyncio.Future[None]:
        """Set a topic's value; await the result to know the partition applied it.

        The request is sent at the end of the current event-loop turn whether
        or not the result is awaited, so many sets pipeline without a task
        each. Every error (a value that cannot be encoded included) comes
        out of the awaited result.

        With ``retain=False`` the value goes to the subscribers (their
        :class:`TopicEvent` says ``retained=False``) without becoming the
        topic's value, which stays what it was: an MQTT publish without RETAIN.
        """
        try:
            topic_type = TopicType.parse(type) if type is not None else None
            data, raw = values.encode_any(value, topic_type)
            if not retain:
                return self._s._request(
                    "set", path, data, raw, topic_type.value if topic_type else None, add_if_missing, False,
                    result=_nothing,
                )
            return self._s._request(
                "set", path, data, raw, topic_type.value if topic_type else None, add_if_missing, result=_nothing
            )
        except TopicModelError as e:
            return _failed(_local(e))
        except errors.CanopyError as e:
            return _failed(e)

    def add_and_set(self, path: str, value: Any, type: TopicType | str | None = None) -> asyncio.Future[None]:
        """Set the value, creating the topic (of ``type``, or inferred from the value) if missing."""
        return self.set(path, value, type, add_if_missing=True)

    async def remove(self, selector: str | Selector) -> int:
        result: int = await self._s._call("remove", str(self._s._selector(selector)))
        return result

    async def fetch(
        self,
        selector: str | Selector,
        with_values: bool = True,
        with_properties: bool = False,
        types: list[TopicType | str] | None = None,
        limit: int | None = None,
    ) -> list[FetchedTopic]:
        try:
            wanted = [TopicType.parse(t).value for t in types] if types is not None else None
        except TopicModelError as e:
            raise _local(e) from None
        rows = await self._s._call(
            "fetch", str(self._s._selector(selector)), with_values, with_properties, wanted, limit
        )
        out = []
        for path, type_name, props, data, event_type in rows:
            topic_type = TopicType(type_name)
            value = None
            if data is not None:
                value = values.decode(TopicType(event_type) if event_type else topic_type, data)
            out.append(FetchedTopic(path, topic_type, value, dict(props) if props is not None else None))
        return out

    def subscribe(
        self, selector: str | Selector, callback: Callable[[TopicEvent], Any] | None = None
    ) -> SubscribeRequest:
        """Subscribe; use ``await``, ``async with`` or ``async for`` on the result.

        With ``callback``, every event goes to it as it arrives instead (see
        :class:`Subscription`): the lowest latency, for code that does not block.
        """
        return SubscribeRequest(self._s._subscribe(self._s._selector(selector), callback=callback))

    async def unsubscribe(self, selector: str | Selector) -> None:
        sel = self._s._selector(selector)
        await self._s._call_again("unsubscribe", str(sel))
        for sub in [s for s in self._s._subscriptions if s.selector == sel]:
            self._s._subscriptions.remove(sub)
            sub._end()
        self._s._reroute()


_ANCHORS = ("from_sequence", "from_time", "from_last", "from_last_ms")
_SPANS = ("to_sequence", "to_time", "next", "next_ms", "previous", "previous_ms", "until_last", "until_last_ms")
_ANCHOR_WIRE = {"from_sequence": "sequence", "from_time": "time", "from_last": "last", "from_last_ms": "last_millis"}
_SPAN_WIRE = {
    "to_sequence": "to_sequence",
    "to_time": "to_time",
    "next": "next",
    "next_ms": "next_millis",
    "previous": "previous",
    "previous_ms": "previous_millis",
    "until_last": "until_last",
    "until_last_ms": "until_last_millis",
}
_VIEWS = {None: "values", "latest": "latest_edits", "all": "all_edits"}


def _millis(value: Any, what: str) -> int:
    if isinstance(value, datetime.datetime):
        if value.tzinfo is None:
            raise errors.InvalidQueryError(f"{what} must be timezone-aware (or milliseconds since the epoch)")
        return int(value.timestamp() * 1000)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise errors.InvalidQueryError(f"{what} must be milliseconds since the epoch or a datetime, got {value!r}")


def _event_of(fields: list[Any], event_type: TopicType) -> TimeSeriesEvent:
    sequence, timestamp, author, data, o_seq, o_time, o_author = fields
    original = EventMetadata(o_seq, o_time, o_author) if o_seq is not None else None
    return TimeSeriesEvent(sequence, timestamp, author, values.decode(event_type, data), original)


class TimeSeries:
    """Time series operations (``session.time_series``).

    Values are checked by the server against the topic's event value type.
    Timestamps are milliseconds since the epoch (a timezone-aware
    ``datetime`` is accepted too); without one, the server's clock stamps
    the event.
    """

    def __init__(self, session: Session) -> None:
        self._s = session

    async def append(self, path: str, value: Any, timestamp: int | datetime.datetime | None = None) -> EventMetadata:
        data, raw = self._encode(value)
        stamp = _millis(timestamp, "timestamp") if timestamp is not None else None
        sequence, ts, author = await self._s._call("append", path, data, raw, stamp)
        return EventMetadata(sequence, ts, author)

    async def edit(self, path: str, original_sequence: int, value: Any) -> EventMetadata:
        """Edit a retained event; returns the edit event's own metadata."""
        data, raw = self._encode(value)
        sequence, ts, author, *_ = await self._s._call("edit", path, original_sequence, data, raw)
        return EventMetadata(sequence, ts, author)

    async def range_query(
        self,
        path: str,
        *,
        from_sequence: int | None = None,
        from_time: int | datetime.datetime | None = None,
        from_last: int | None = None,
        from_last_ms: int | None = None,
        to_sequence: int | None = None,
        to_time: int | datetime.datetime | None = None,
        next: int | None = None,
        next_ms: int | None = None,
        previous: int | None = None,
        previous_ms: int | None = None,
        until_last: int | None = None,
        until_last_ms: int | None = None,
        to_start: bool = False,
        edits: str | None = None,
        limit: int | None = None,
    ) -> RangeResult:
        """Events of a series within its retained range.

        One anchor (``from_*``, default the start) and one span (``to_*``,
        ``next*``, ``previous*``, ``until_last*``, ``to_start``; default to
        the end). ``edits=None`` gives the *value view* (each original event
        as its latest edit reads); ``"latest"`` or ``"all"`` give the *edit
        view*: originals followed by their latest or all edits.
        """
        given = locals()
        anchors = [a for a in _ANCHORS if given[a] is not None]
        spans = [p for p in _SPANS if given[p] is not None] + (["to_start"] if to_start else [])
        if len(anchors) > 1 or len(spans) > 1:
            raise errors.InvalidQueryError(
                f"give at most one anchor and one span, got {', '.join(anchors + spans)}"
            )
        if edits not in _VIEWS:
            raise errors.InvalidQueryError(f"edits must be None, 'latest' or 'all', got {edits!r}")
        anchor, anchor_value = "start", 0
        if anchors:
            raw = given[anchors[0]]
            anchor = _ANCHOR_WIRE[anchors[0]]
            anchor_value = _millis(raw, anchors[0]) if anchors[0] == "from_time" else raw
        span, span_value = "end", 0
        if spans:
            if spans[0] == "to_start":
                span = "to_start"
            else:
                raw = given[spans[0]]
                span = _SPAN_WIRE[spans[0]]
                span_value = _millis(raw, spans[0]) if spans[0] == "to_time" else raw
        for what, value in (("anchor", anchor_value), ("span", span_value), ("limit", limit)):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
                raise errors.InvalidQueryError(f"{what} must be an integer, got {value!r}")
        selected, rows, type_name = await self._s._call(
            "range_query", path, anchor, anchor_value, span, span_value, _VIEWS[edits], limit
        )
        event_type = TopicType(type_name)
        return RangeResult([_event_of(row, event_type) for row in rows], selected)

    @staticmethod
    def _encode(value: Any) -> tuple[bytes, bool]:
        try:
            return values.encode_any(value)
        except TopicModelError as e:
            raise _local(e) from None


class Security:
    """The security store (``session.security``): needs VIEW_SECURITY to read
    and MODIFY_SECURITY to change. Commands are described in
    :mod:`sessions.security`; the helpers below build them."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def get(self) -> dict[str, Any]:
        """Roles, principals (without password hashes) and the anonymous settings."""
        result: dict[str, Any] = await self._s._call("security_get")
        return result

    async def update(self, *commands: list[Any]) -> int:
        """Apply commands all or nothing; return the store's new version."""
        version: int = await self._s._call("security_update", [list(c) for c in commands])
        return version

    async def set_global_permissions(self, role: str, permissions: list[str]) -> int:
        return await self.update(["set_global_permissions", role, list(permissions)])

    async def set_default_path_permissions(self, role: str, permissions: list[str]) -> int:
        return await self.update(["set_default_path_permissions", role, list(permissions)])

    async def set_path_permissions(self, role: str, path: str, permissions: list[str]) -> int:
        return await self.update(["set_path_permissions", role, path, list(permissions)])

    async def remove_path_permissions(self, role: str, path: str) -> int:
        return await self.update(["remove_path_permissions", role, path])

    async def set_role_includes(self, role: str, roles: list[str]) -> int:
        return await self.update(["set_role_includes", role, list(roles)])

    async def add_principal(self, name: str, password: str, roles: list[str]) -> int:
        return await self.update(["add_principal", name, password, list(roles)])

    async def set_password(self, name: str, password: str) -> int:
        return await self.update(["set_password", name, password])

    async def set_principal_roles(self, name: str, roles: list[str]) -> int:
        return await self.update(["set_principal_roles", name, list(roles)])

    async def remove_principal(self, name: str) -> int:
        return await self.update(["remove_principal", name])

    async def set_anonymous(self, allowed: bool, roles: list[str]) -> int:
        return await self.update(["set_anonymous", allowed, list(roles)])


class SessionTrees:
    """The branch mapping tables of session trees (``session.session_trees``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def put_table(self, session_tree_branch: str, mappings: list[tuple[str, str]]) -> int:
        """Replace the table of a branch with ``[(session filter, topic tree branch), ...]``;
        an empty list removes it. Returns the tables' new version. Needs MODIFY_TOPIC on
        the branch and EXPOSE_BRANCH on every topic tree branch."""
        version: int = await self._s._call(
            "tree_put", session_tree_branch, [[f, b] for f, b in mappings]
        )
        return version

    async def get_table(self, session_tree_branch: str) -> list[tuple[str, str]] | None:
        """The table of a branch, or ``None``; needs MODIFY_TOPIC on the branch."""
        table = await self._s._call("tree_get", session_tree_branch)
        return [(f, b) for f, b in table[1]] if table is not None else None

    async def list_tables(self) -> dict[str, list[tuple[str, str]]]:
        """The tables of the branches the session has MODIFY_TOPIC on, by branch."""
        return {branch: [(f, b) for f, b in mappings] for branch, mappings in await self._s._call("tree_list")}

    async def remove_table(self, session_tree_branch: str) -> int:
        version: int = await self._s._call("tree_remove", session_tree_branch)
        return version


def _target(session_id: str | None, session_filter: str | None) -> list[str]:
    if (session_id is None) == (session_filter is None):
        raise errors.InvalidRequestError("name exactly one of session_id and filter")
    return ["id", session_id] if session_id is not None else ["filter", session_filter]  # type: ignore[list-item]


class Sessions:
    """Other sessions (``session.sessions``): their properties, VIEW_SESSION to read and
    MODIFY_SESSION to change, and closing them (both). A target is one session id or a
    session filter."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def get_properties(
        self, session_id: str | None = None, *, filter: str | None = None
    ) -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = await self._s._call("session_get", _target(session_id, filter))
        return found

    async def set_properties(
        self, properties: dict[str, str | None], session_id: str | None = None, *, filter: str | None = None
    ) -> int:
        """Change user properties (``None`` removes one); return how many sessions changed."""
        changed: int = await self._s._call("session_set", _target(session_id, filter), dict(properties))
        return changed

    async def close(self, session_id: str | None = None, *, filter: str | None = None) -> int:
        """Close the sessions a target names, on every gateway; return how many closed. Their
        clients are told ``CLOSED_BY_CLIENT_CONTROL`` and do not reconnect. Closing this
        session itself ends it before any answer: the call fails with
        :class:`~canopy.errors.SessionClosedError`."""
        closed: int = await self._s._call("session_close", _target(session_id, filter))
        return closed


@dataclass(frozen=True)
class TopicView:
    """A topic view as the server holds it."""

    name: str
    specification: str
    #: the security context: the creating session's principal and roles
    principal: str
    roles: frozenset[str]
    #: lower wins a path conflict: the order of first creation
    precedence: int
    #: "active", or why not (remote views wait for their remote server)
    state: str

    @classmethod
    def _from_wire(cls, data: dict[str, Any]) -> TopicView:
        return cls(
            data["name"], data["specification"], data["principal"], frozenset(data["roles"]),
            data["precedence"], data["state"],
        )


class TopicViews:
    """Topic views (``session.views``): MODIFY_TOPIC_VIEWS
    and SELECT_TOPIC on the source selector's path prefix to create, replace
    or remove; READ_TOPIC_VIEWS to list."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def create(self, name: str, specification: str) -> TopicView:
        """Create a view, or replace the view of that name (keeping its precedence).
        A bad specification raises :class:`~canopy.errors.InvalidViewError`
        (:class:`~canopy.errors.ViewSyntaxError` when it does not parse)."""
        return TopicView._from_wire(await self._s._call("view_create", name, specification))

    async def list(self) -> list[TopicView]:
        """Every view, in creation order."""
        return [TopicView._from_wire(v) for v in await self._s._call("view_list")]

    async def remove(self, name: str) -> None:
        """Remove a view and its reference topics; succeeds if there is none."""
        await self._s._call("view_remove", name)


class Server:
    """Operating the gateway the session is connected to (``session.server``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def trace(self, every: int = 0, limit: int = 100_000) -> list[wire.TraceRecord]:
        """Time every ``every``-th set this gateway receives from now on (0
        stops); return the records taken since the last call (CONTROL_SERVER)."""
        rows = await self._s._call("trace", every, limit)
        return [wire.TraceRecord(*row) for row in rows]

    async def cluster_status(self) -> dict[str, Any]:
        """The whole cluster, as ``canopy cluster status --json`` prints it (VIEW_SERVER):
        ``nodes`` (name, address, alive), ``partitions`` (primary and backup node, epoch,
        topics, selectors registered, journal sequence of each, whether the backup caught up,
        replication lag, failovers since the controller started, healthy), ``gateways`` (node, url, sessions), ``balanced``, ``configuration``
        (the security store's version; the configuration log's ``log_term``,
        ``log_committed``, ``log_majority`` and ``log_copies``: each node's committed
        position) and ``healthy``."""
        status: dict[str, Any] = await self._s._call("cluster_status")
        return status

    async def kill_node(self, node: str, *, force: bool = False) -> dict[str, Any]:
        """Crash a cluster node (CONTROL_SERVER): its raylet and every process it started
        get SIGKILL, with no warning, as when a machine fails. Refused
        (:class:`~canopy.errors.RefusedError`) on clusters not started with
        ``--local-nodes`` and on the controller's node unless ``force``."""
        return await self._node("kill", node, 0.0, force)

    async def pause_node(self, node: str, seconds: float, *, force: bool = False) -> dict[str, Any]:
        """Freeze a cluster node for ``seconds`` (SIGSTOP, then SIGCONT): a node that hangs.
        Paused past the failure detector, it is replaced, and on resuming it leaves the
        cluster. The same refusals as :meth:`kill_node`."""
        return await self._node("pause", node, seconds, force)

    async def add_node(self, node: str | None = None) -> dict[str, Any]:
        """Start a simulated node (``--local-nodes`` clusters): ``node-<k>`` by default;
        a dead node's name starts it again on its data directory. Answered once asked
        for; the node appears in :meth:`cluster_status` seconds later."""
        return await self._node("add", node, 0.0, False)

    async def restart_gcs(self, seconds: float = 2.0) -> dict[str, Any]:
        """Kill Ray's GCS (the head's store of nodes, actors and names) and start it
        again ``seconds`` later, as when the head restarts (CONTROL_SERVER;
        ``--local-nodes`` clusters started with ``gcs_redis_address`` only, else
        :class:`~canopy.errors.RefusedError`). The broker serves throughout: the GCS
        reads its tables back from Redis. Answered once asked for; canopy serve
        carries it out at its next health check."""
        return await self._node("restart-gcs", None, seconds, False)

    async def _node(self, action: str, node: str | None, seconds: float, force: bool) -> dict[str, Any]:
        answer: dict[str, Any] = await self._s._call("cluster_node", action, node, seconds, force)
        return answer


@dataclass(frozen=True)
class MissingTopicNotification:
    """A subscription or fetch matched no topic under a path this session handles."""

    #: the selector the other session subscribed to or fetched
    selector: str
    #: the requesting session's id and properties
    session_id: str
    properties: dict[str, str]
    #: the servers the request passed through, where it was made first (fan-out adds hops)
    servers: tuple[str, ...]
    #: the path this handler was registered for
    path: str
    id: str = ""


#: a missing-topic handler: given a notification, True (or None) to proceed, False to cancel;
#: it may be a coroutine function
MissingTopicHandler = Callable[[MissingTopicNotification], Any]


class HandlerRegistration:
    """A missing-topic handler's registration; :meth:`close` (or closing the session) ends it."""

    def __init__(self, owner: MissingTopics, token: str, path: str, handler: MissingTopicHandler) -> None:
        self._owner = owner
        self.token = token
        self.path = path
        self.handler = handler
        self.closed = False

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._owner._by_token.pop(self.token, None)
        if not self._owner._s.closed:
            with contextlib.suppress(errors.InvalidRequestError, errors.ConnectionInterruptedError):
                await self._owner._s._call("missing_topic_rm", self.token)

    async def __aenter__(self) -> HandlerRegistration:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class MissingTopics:
    """Missing-topic handlers (``session.missing_topics``): this session hears of
    subscriptions and fetches that match no topic under a path, and says whether
    they go on (REGISTER_HANDLER, and MODIFY_TOPIC on the path).

    The request waits for the answer (the server's ``missing_topic_timeout_ms``
    at most; no answer counts as proceed); a handler that makes the topic before
    it answers proceed has the subscriber receive it. Cancel ends the request with
    :class:`~canopy.errors.RequestCancelledError`. A handler that raises counts
    as proceed (the error is logged).
    """

    def __init__(self, session: Session) -> None:
        self._s = session
        self._by_token: dict[str, HandlerRegistration] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def add_handler(self, path: str, handler: MissingTopicHandler) -> HandlerRegistration:
        """Register ``handler`` for ``path``: it hears of requests whose selector's path prefix
        lies at or under ``path``, unless a handler registered for a longer path does. Of the
        sessions that register one path, the first is notified."""
        token: str = await self._s._call("missing_topic_add", path)
        registration = self._by_token[token] = HandlerRegistration(self, token, path, handler)
        return registration

    async def list(self) -> list[tuple[str, str, str]]:
        """Every registration of the server: ``(registration, path, session id)``
        (REGISTER_HANDLER or VIEW_SERVER)."""
        return [(str(t), str(p), str(s)) for t, p, s in await self._s._call("missing_topic_list")]

    def _notified(self, body: Any) -> None:
        try:
            registration = self._by_token.get(body["registration"])
            notification = MissingTopicNotification(
                str(body["selector"]), str(body["session_id"]), dict(body["properties"]),
                tuple(body["servers"]), str(body["path"]), str(body["id"]),
            )
        except (KeyError, TypeError, ValueError) as e:
            log.warning("malformed missing-topic notification from the server: %s", e)
            return
        if registration is None or registration.closed:
            self._answer(notification.id, True)
            return
        task = asyncio.ensure_future(self._run(registration, notification))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _run(self, registration: HandlerRegistration, notification: MissingTopicNotification) -> None:
        try:
            answer = registration.handler(notification)
            if asyncio.iscoroutine(answer) or isinstance(answer, asyncio.Future):
                answer = await answer
        except Exception:
            log.exception("missing-topic handler for %s failed; proceeding", registration.path)
            answer = True
        with contextlib.suppress(errors.CanopyError):  # a late answer, a session gone: logged
            await self._answer(notification.id, answer is not False)

    def _answer(self, notification_id: str, proceed: bool) -> asyncio.Future[Any]:
        if self._s.closed:
            done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            done.set_result(None)
            return done
        future = self._s._request("missing_topic_ans", notification_id, "proceed" if proceed else "cancel")
        future.add_done_callback(_ignore_answer)
        return future

    async def drain(self) -> None:
        """Wait until every notification received so far is answered (and the server took the answer)."""
        while self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    def _register_again(self) -> None:
        """A new server session (the old one was gone): register every handler again."""
        old, self._by_token = self._by_token, {}
        for registration in old.values():
            if registration.closed:
                continue
            future = self._s._request("missing_topic_add", registration.path)
            future.add_done_callback(functools.partial(self._registered_again, registration))

    def _registered_again(self, registration: HandlerRegistration, future: asyncio.Future[Any]) -> None:
        if future.cancelled() or future.exception() is not None:
            log.warning("could not register the missing-topic handler for %s again: %s", registration.path,
                        "cancelled" if future.cancelled() else future.exception())
            return
        registration.token = future.result()
        self._by_token[registration.token] = registration


def _ignore_answer(future: asyncio.Future[Any]) -> None:
    if not future.cancelled() and future.exception() is not None:
        log.info("a missing-topic answer was not taken: %s", future.exception())


class Fanout:
    """This server's fan-out connections to its primaries (``session.fanout``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def list(self) -> list[dict[str, Any]]:
        """Each connection: ``name``, ``primaries``, ``state``, ``error``, ``sessions``,
        ``forwarded`` (missing-topic notifications passed on), the lag (``lag_ms``: half the
        primary's round trip ``rtt_ms`` plus ``apply_ms``, an update's arrival to its
        application here; ``apply_max_ms`` since the last listing; ``last_update_s``), and
        ``links``, each with its ``selector``, ``topics`` mirrored, ``updates`` and
        ``contested`` paths (VIEW_SERVER)."""
        listed: list[dict[str, Any]] = await self._s._call("fanout_list")
        return listed

    async def add(
        self, name: str, primaries: str | Sequence[str], links: str | Sequence[str], *,
        principal: str | None = None, password: str | None = None,
        retry_delay: float = 1.0, reconnect_timeout: float = 60.0,
    ) -> dict[str, Any]:
        """Make this server a secondary of ``primaries`` (URLs tried in turn) for the topics
        ``links`` (selectors) match there (CONTROL_SERVER). Kept in the replicated configuration
        (the password too: it is needed to connect); a name in use, or a bad definition, raises
        :class:`~canopy.errors.InvalidFanoutError`. Returns the definition, without the password."""
        definition = {
            "name": name, "primaries": [primaries] if isinstance(primaries, str) else list(primaries),
            "links": [links] if isinstance(links, str) else list(links), "principal": principal,
            "password": password, "retry_delay": retry_delay, "reconnect_timeout": reconnect_timeout,
        }
        added: dict[str, Any] = await self._s._call("fanout_add", definition)
        return added

    async def remove(self, name: str) -> bool:
        """Remove a connection added at run time (its replicas go); False when there is none."""
        removed: bool = await self._s._call("fanout_remove", name)
        return removed


class RemoteServers:
    """Remote server definitions (``session.remote_servers``), the sources of remote topic
    views (``map ?a// from NAME to ...``). Kept in the replicated configuration (with the
    password, which the server needs to connect)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def add(
        self, name: str, urls: str | Sequence[str], *, principal: str | None = None, password: str | None = None,
        retry_delay: float = 1.0, reconnect_timeout: float = 60.0, missing_topic_filter: str | None = None,
    ) -> dict[str, Any]:
        """Define a remote server (CONTROL_SERVER); views naming it become active once it connects.
        A bad definition or a name in use raises :class:`~canopy.errors.InvalidRemoteServerError`."""
        definition = {
            "name": name, "urls": [urls] if isinstance(urls, str) else list(urls), "principal": principal,
            "password": password, "retry_delay": retry_delay, "reconnect_timeout": reconnect_timeout,
            "missing_topic_filter": missing_topic_filter,
        }
        added: dict[str, Any] = await self._s._call("server_add", definition)
        return added

    async def list(self) -> list[dict[str, Any]]:
        """Every definition (no password), with the ``views`` naming it, its connection's
        ``state`` and ``error`` (VIEW_SERVER)."""
        listed: list[dict[str, Any]] = await self._s._call("server_list")
        return listed

    async def check(self, name: str) -> dict[str, Any]:
        """Open a session with the definition and close it: ``{name, ok, error, ms}`` (VIEW_SERVER)."""
        checked: dict[str, Any] = await self._s._call("server_check", name)
        return checked

    async def remove(self, name: str) -> bool:
        """Remove a definition (CONTROL_SERVER): views naming it go inactive; False when there is none."""
        removed: bool = await self._s._call("server_remove", name)
        return removed


class Metrics:
    """Metric collectors (``session.metrics``): labelled series every gateway exports on its
    ``/metrics``, kept in the replicated configuration. Putting replaces a collector of the
    same name; a bad definition, or more than 100 collectors, raises
    :class:`~canopy.errors.InvalidCollectorError`. Putting and removing need CONTROL_SERVER,
    listing VIEW_SERVER."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def put_topic_collector(self, name: str, selector: str, group_by_type: bool = False) -> dict[str, Any]:
        """Count the topics ``selector`` selects and the subscriptions to them
        (``canopy_topic_collector_topics``, ``..._subscriptions``), by topic type when
        ``group_by_type``. Returns the definition with ``replaced`` (whether one of that
        name was replaced)."""
        definition = {"kind": "topic", "name": name, "selector": selector, "group_by_type": group_by_type}
        put: dict[str, Any] = await self._s._call("collector_put", definition)
        return put

    async def put_session_collector(
        self, name: str, filter: str, group_by: Sequence[str] = (), remove_metrics_with_no_matches: bool = False,
    ) -> dict[str, Any]:
        """Count the sessions ``filter`` matches (``canopy_session_collector_sessions``, and
        those opened and closed), one series per value of the ``group_by`` session properties;
        with ``remove_metrics_with_no_matches`` a group no session matches now has no series.
        Returns the definition with ``replaced``."""
        definition = {"kind": "session", "name": name, "filter": filter, "group_by": list(group_by),
                      "remove_metrics_with_no_matches": remove_metrics_with_no_matches}
        put: dict[str, Any] = await self._s._call("collector_put", definition)
        return put

    async def list_collectors(self) -> list[dict[str, Any]]:
        """Every collector's definition (``kind`` ``topic`` or ``session``), in the order
        they were first defined."""
        listed: list[dict[str, Any]] = await self._s._call("collector_list")
        return listed

    async def remove_collector(self, name: str) -> bool:
        """Remove a collector (its series go); False when there is none of that name."""
        removed: bool = await self._s._call("collector_remove", name)
        return removed


class Hub:
    """OpenAjax-style publish/subscribe with dotted names (``session.hub``).

    Names map onto JSON topics under the server's hub root branch
    (``org.example.a`` → ``hub/org/example/a``); publishing creates the topic
    when it is missing.
    """

    def __init__(self, session: Session) -> None:
        self._s = session

    @property
    def root(self) -> str:
        return self._s.hub_root

    async def publish(self, name: str, value: Any) -> None:
        try:
            path = openajax.name_to_path(name, self.root)
        except TopicModelError as e:
            raise _local(e) from None
        await self._s.topics.set(path, value, TopicType.JSON, add_if_missing=True)

    def subscribe(self, pattern: str, callback: Callable[[TopicEvent], Any] | None = None) -> SubscribeRequest:
        """Subscribe to a dotted pattern; ``await``, ``async with`` or ``async for`` the
        result, or pass a ``callback`` (see :meth:`Topics.subscribe`)."""
        try:
            selector = openajax.parse_pattern(pattern).to_selector(self.root)
        except TopicModelError as e:
            raise _local(e) from None
        return SubscribeRequest(self._s._subscribe(selector, hub_root=self.root, callback=callback))


_VALUE = wire.VALUE


def _nothing(_: Any) -> None:
    return None


def _failed(error: BaseException) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_exception(error)
    return future


#: server CLOSE codes after which the session may be opened again (the gateway stops; the session is gone);
#: any other ends the session for good (``QUEUE_LIMIT``, ``PROTOCOL_ERROR``, ``CLOSED_BY_CLIENT_CONTROL``, ...)
RESUMABLE_CLOSES = frozenset({"SERVER_SHUTDOWN"})
#: WebSocket close codes with which a server refuses what this client did: the session ends for good
FINAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 1009, 1010})
#: the reason of an ``unsubscribed`` event for a topic that went while the session was disconnected
GONE_WHILE_DISCONNECTED = "DISCONNECTED"
#: the reason of a ``reconnected`` event: the server still had the session, or a new one was opened
RESUMED, NEW_SESSION = "RESUMED", "NEW_SESSION"


@dataclass
class _Resync:
    """Bringing what the application was told up to date after a reconnection.

    For a resumed session, ``remaining`` counts the messages of the server's
    refresh still to come (SUBSCRIBED and EVENT); for a new one, the
    re-subscriptions not answered yet. ``seen`` holds the paths announced
    since, ``previous`` the topics by alias before (a resumed session keeps
    its aliases: the same alias is the same topic).
    """

    resumed: bool
    remaining: int
    previous: dict[int, _Topic]
    seen: set[str] = field(default_factory=set)
    #: loop time until which a re-subscription refused UNAVAILABLE is tried again
    deadline: float = 0.0


class Session(Handler):
    """A client session. Create it with :func:`connect`.

    The session outlives its connection: when the connection drops (not
    closed by the client, nor ended by the server for good: see
    :func:`connect`) the session reconnects on its own, and until
    :attr:`closed` it takes requests (those made while it is disconnected
    wait). :attr:`connected` tells whether it has a connection right now,
    :attr:`session_id` and :attr:`properties` are those of the server's
    session now (a new one when the server no longer had the old one).
    """

    def __init__(
        self,
        stream: WebSocketStream,
        protocol: wire.ClientProtocol,
        welcome: wire.Welcome,
        hub_root: str | None,
        dialer: _Dialer | None = None,
        url: str = "",
    ) -> None:
        self._stream: WebSocketStream | None = stream
        self._protocol = protocol
        self._dialer = dialer
        self._url = url
        self._resume_token = welcome.resume_token
        self.session_id = welcome.session_id
        self.properties = welcome.properties
        self.max_frame_size = welcome.max_frame_size
        self.max_messages = welcome.max_messages
        self.hub_root = hub_root or welcome.hub_root
        self.topics = Topics(self)
        self.time_series = TimeSeries(self)
        self.hub = Hub(self)
        self.security = Security(self)
        self.session_trees = SessionTrees(self)
        self.sessions = Sessions(self)
        self.views = TopicViews(self)
        self.server = Server(self)
        self.missing_topics = MissingTopics(self)
        self.fanout = Fanout(self)
        self.remote_servers = RemoteServers(self)
        self.metrics = Metrics(self)
        self.closed = False
        self._closing = False
        self.close_reason: errors.CanopyError | None = None
        #: how many times the session got a connection back
        self.reconnects = 0
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], Any] | None]] = {}
        self._subscriptions: list[Subscription] = []
        self._aliases: dict[int, _Topic] = {}
        self._routes: dict[int, list[Subscription]] = {}  # alias -> subscriptions matching it
        #: path -> topic, every topic the subscriptions were told of (and not told it went)
        self._known: dict[str, _Topic] = {}
        self._server_close: wire.Close | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._resync: _Resync | None = None
        self._flush_scheduled = False
        self._writable: asyncio.Future[None] | None = None
        self.errors: list[errors.CanopyError] = []  # errors the server reported outside any request

    @property
    def connected(self) -> bool:
        """Whether the session has a connection now (false while it reconnects, and once closed)."""
        return self._stream is not None and not self.closed

    # -- plumbing ----------------------------------------------------------------

    def _selector(self, selector: str | Selector) -> Selector:
        try:
            return parse_selector(selector)
        except TopicModelError as e:
            raise _local(e) from None

    def _check_open(self) -> None:
        if self.closed:
            raise self.close_reason or errors.SessionClosedError("the session is closed")

    def _request(self, op: str, *args: Any, result: Callable[[Any], Any] | None = None) -> asyncio.Future[Any]:
        """Queue a request; the future resolves to its result (passed through
        ``result`` when given). Requests of one loop turn share a frame; while
        the session is disconnected they wait for the next connection."""
        self._check_open()
        try:
            cid = self._protocol.request(op, *args, max_size=self.max_frame_size)
        except wire.UnencodableRequestError as e:
            raise errors.InvalidRequestError(str(e)) from None
        except ValueError as e:
            raise errors.FrameTooLargeError(f"{e} (the server's maximum frame size)") from None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[cid] = (future, result)
        if not self._flush_scheduled and self._stream is not None:  # disconnected: sent once back
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._stream is not None:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def _call(self, op: str, *args: Any) -> Any:
        future = self._request(op, *args)
        stream = self._stream
        if stream is not None and stream.paused:  # the server reads slower than we send: wait for it
            await self._drained()
        return await future

    async def _call_again(self, op: str, *args: Any) -> Any:
        """A request that may be made twice (subscribe, unsubscribe: they set
        what the session is subscribed to, which the client must know): when
        the connection drops while it is in flight, it is made again."""
        while True:
            try:
                return await self._call(op, *args)
            except errors.ConnectionInterruptedError:
                continue  # the session goes on: made again on the next connection

    def _flush(self) -> None:
        self._flush_scheduled = False
        stream = self._stream
        if stream is None:
            return  # disconnected: the requests wait for the next connection
        for data in self._protocol.data_to_send(self.max_frame_size, self.max_messages):
            if not stream.send(data):
                return

    async def _drained(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._writable)

    def _release_writers(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # -- what the stream tells the session (transport.Handler) ------------------------

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        if not isinstance(data, bytes) or stream is not self._stream:
            return
        try:
            self._receive(data)
        except wire.ProtocolError as e:
            self.close_reason = errors.ProtocolViolationError(str(e))
            stream.close(1002, "PROTOCOL_ERROR")

    def on_writable(self, stream: WebSocketStream) -> None:
        if stream is self._stream:
            self._release_writers()

    def on_closed(self, stream: WebSocketStream) -> None:
        if stream is self._stream:
            self._lost(stream)

    def on_open(self, stream: WebSocketStream) -> None:
        pass

    # -- losing a connection, getting one back ------------------------------------------

    def _why_lost(self, stream: WebSocketStream) -> tuple[errors.CanopyError, bool]:
        """Why the connection ended, and whether that ends the session for good:
        the client closed it, the client found the server's data broken, the
        server's CLOSE gave a reason other than :data:`RESUMABLE_CLOSES`, or the
        server's close code refused what the client sent (:data:`FINAL_CLOSE_CODES`,
        and 4000-4999, the application's codes)."""
        if self._closing or self.close_reason is not None:
            return self.close_reason or errors.SessionClosedError("the session is closed"), True
        close = self._server_close
        if close is not None:
            return errors.SessionClosedError(close.message, close.code), close.code not in RESUMABLE_CLOSES
        code = stream.close_code
        if code == 1009:
            return errors.FrameTooLargeError("the server closed the session: frame too large"), True
        detail = f" ({code} {stream.close_reason}".rstrip() + ")" if code is not None else ""
        final = code is not None and (code in FINAL_CLOSE_CODES or 4000 <= code < 5000)
        return errors.SessionClosedError(f"the session is closed{detail}"), final

    def _lost(self, stream: WebSocketStream) -> None:
        self._stream = None
        self._flush_scheduled = False
        self._release_writers()
        error, final = self._why_lost(stream)
        dialer = self._dialer
        if final or dialer is None or dialer.reconnect_timeout <= 0:
            self._end(error)
            return
        self._interrupt(stream)
        self._reconnecting = asyncio.ensure_future(self._reconnect(dialer, error))

    def _interrupt(self, stream: WebSocketStream) -> None:
        """The connection dropped: fail what was in flight on it, tell the subscriptions."""
        close, code = self._server_close, stream.close_code
        if close is not None:
            how = f"the server closed it ({close.code}: {close.message})"
        elif code is None or code == 1006:
            how = "it was dropped"
        else:
            how = f"it closed with code {code} {stream.close_reason}".rstrip()
        lost = f"the connection to {self._url or 'the server'} was lost ({how})"
        interrupted = errors.ConnectionInterruptedError(
            f"{lost}; the request was in flight: its outcome is unknown"
        )
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(interrupted)
        self._protocol.discard()
        self._resync = None
        log.info("%s; reconnecting", lost)
        notice = _new_event(TopicEvent, ("disconnected", "", None, None, None, lost, None, None, True))
        for sub in list(self._subscriptions):
            if not sub._down:
                sub._down = True
                sub._notify(notice)

    async def _reconnect(self, dialer: _Dialer, cause: errors.CanopyError) -> None:
        """Try the URLs in turn (this connection's first), a retry delay with
        jitter apart, until one takes the session back or the reconnect
        timeout has passed; then end the session."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + dialer.reconnect_timeout
        urls = dialer.urls
        first = urls.index(self._url) if self._url in urls else 0
        last: BaseException = cause
        for attempt in itertools.count():
            if attempt:
                await asyncio.sleep(min(dialer.retry_delay * random.uniform(0.5, 1.5), max(deadline - loop.time(), 0)))
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            url = urls[(first + attempt) % len(urls)]
            resume = wire.Resume(self.session_id, self._resume_token)
            try:
                opened = await dialer.dial(url, self._protocol, min(dialer.timeout, remaining), resume)
            except errors.ConnectError as e:
                last = e
                continue
            except errors.CanopyError as e:  # the server refused the HELLO: trying again would not help
                self._reconnecting = None
                self._end(errors.SessionClosedError(f"could not reconnect to {url}: {e.message}", e.code))
                return
            except Exception as e:  # a bug, not the network: end the session rather than hang it
                log.exception("reconnecting to %s failed", url)
                self._reconnecting = None
                self._end(errors.SessionClosedError(f"could not reconnect to {url}: {type(e).__name__}: {e}"))
                return
            self._reconnecting = None
            self._attach(url, opened)
            return
        self._reconnecting = None
        self._end(errors.SessionClosedError(
            f"could not reconnect within {dialer.reconnect_timeout:g} s: {last}", "RECONNECT_TIMEOUT"
        ))

    def _attach(self, url: str, opened: _Opened) -> None:
        """A new connection: resume the session or go on with a new one, then bring the subscriptions up to date."""
        stream, welcome = opened.stream, opened.welcome
        resumed = welcome.resumed and welcome.session_id == self.session_id
        self._stream, self._url, self._server_close = stream, url, None
        self._resume_token = welcome.resume_token
        self.session_id = welcome.session_id
        self.properties = welcome.properties
        self.max_frame_size = welcome.max_frame_size
        self.max_messages = welcome.max_messages
        self.reconnects += 1
        log.info("reconnected to %s: %s session %s", url, "resumed" if resumed else "new", self.session_id)
        previous, self._aliases, self._routes = self._aliases, {}, {}
        if resumed:
            resync = self._resync = _Resync(True, welcome.refresh, previous)
            if not welcome.refresh:
                self._resynced(resync)
        else:
            selectors = list(dict.fromkeys(sub.selector for sub in self._subscriptions))
            dialer = self._dialer
            resync = self._resync = _Resync(False, len(selectors), {}, deadline=asyncio.get_running_loop().time() + (
                dialer.reconnect_timeout if dialer is not None else 0.0))
            for selector in selectors:
                self._resubscribe(resync, selector)
            if not selectors:
                self._resynced(resync)
            self.missing_topics._register_again()
        stream.handler = self
        for m in opened.rest:
            if self._stream is stream:
                self._dispatch(m)
        for data in opened.early:  # anything that came with the WELCOME
            self.on_message(stream, data)
        self._schedule_flush()  # the requests that waited, the re-subscriptions
        if stream.lost.done() and self._stream is stream:  # it went before the session could hear of it
            self._lost(stream)

    def _resubscribe(self, resync: _Resync, selector: Selector) -> None:
        if self._resync is not resync or self.closed:
            return
        self._request("subscribe", str(selector)).add_done_callback(
            functools.partial(self._resubscribed, resync, selector)
        )
        self._schedule_flush()

    def _resubscribed(self, resync: _Resync, selector: Selector, future: asyncio.Future[Any]) -> None:
        error = future.exception()
        if self._resync is not resync:
            return  # another connection took over (or the session ended)
        loop = asyncio.get_running_loop()
        if isinstance(error, errors.UnavailableError) and loop.time() < resync.deadline and self._dialer is not None:
            # a new gateway whose way to a partition is still failing over (the cluster lost the
            # node this session was on): the subscription waits for it, as the session waited
            delay = self._dialer.retry_delay * random.uniform(0.5, 1.5)
            loop.call_later(delay, self._resubscribe, resync, selector)
            return
        if error is not None and not isinstance(error, errors.ConnectionInterruptedError):
            assert isinstance(error, errors.CanopyError), error
            for sub in [s for s in self._subscriptions if s.selector == selector]:
                self._subscriptions.remove(sub)
                sub._end(error)
            self._reroute()
        resync.remaining -= 1
        if resync.remaining <= 0:
            self._resynced(resync)

    def _resynced(self, resync: _Resync) -> None:
        """The refresh is complete: topics not announced again went while the
        session was away; every subscription that was told of the disconnection
        is told it is over."""
        if self._resync is not resync:
            return
        self._resync = None
        for path in [p for p in self._known if p not in resync.seen]:
            gone = self._known.pop(path)
            self._fan_out(_new_event(TopicEvent, (
                "unsubscribed", path, gone.spec.type, None, gone.spec, GONE_WHILE_DISCONNECTED, None, None, True
            )))
        how = RESUMED if resync.resumed else NEW_SESSION
        notice = _new_event(TopicEvent, ("reconnected", "", None, self.session_id, None, how, None, None, True))
        for sub in list(self._subscriptions):
            if sub._down:
                sub._down = False
                sub._notify(notice)

    def _end(self, error: errors.CanopyError) -> None:
        """The session is over: every request fails with ``error`` and every
        subscription ends with it (without an error when the client closed it)."""
        if self.closed:
            return
        self.closed = True
        if self.close_reason is None:
            self.close_reason = error
        error = self.close_reason
        self._stream = None
        self._resync = None
        task, self._reconnecting = self._reconnecting, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._release_writers()
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(error)
        self._protocol.discard()
        ended_by_client = self._closing
        for sub in self._subscriptions:
            sub._end(None if ended_by_client else error)
        self._subscriptions.clear()

    # -- what the server sends ------------------------------------------------------------

    def _receive(self, data: bytes) -> None:
        aliases, routes_of = self._aliases, self._routes
        for item in wire.unpack_frame(data):
            # the fast path: a topic value, by far the most common message
            if type(item) is list and len(item) == 3 and item[0] == _VALUE and type(item[2]) is bytes:
                topic = aliases.get(item[1])
                if topic is not None:
                    value = topic.value = topic.decode(item[2])
                    routes = routes_of.get(item[1])
                    if routes:
                        event = topic.value_event(value)
                        for sub in routes:
                            sub._put(event)
                continue
            self._dispatch(wire.decode_item(item))

    def _route(self, alias: int, path: str) -> None:
        self._routes[alias] = [s for s in self._subscriptions if s.selector.matches(path)]

    def _reroute(self) -> None:
        for alias, topic in self._aliases.items():
            self._route(alias, topic.path)

    def _dispatch(self, m: Any) -> None:
        if isinstance(m, wire.Value):
            topic = self._aliases.get(m.alias)
            if topic is not None:
                value = self._decode(topic.spec, m.value)
                if m.retained:
                    topic.value = value
                self._fan_out(TopicEvent("value", topic.path, topic.spec.type, value, topic.spec, retained=m.retained))
        elif isinstance(m, wire.Response):
            pending = self._pending.pop(m.cid, None)
            if pending is not None and not pending[0].done():
                future, convert = pending
                future.set_result(convert(m.result) if convert is not None else m.result)
        elif isinstance(m, wire.Subscribed):
            self._subscribed(m)
        elif isinstance(m, wire.Unsubscribed):
            gone = self._aliases.pop(m.alias, None)
            self._routes.pop(m.alias, None)
            if gone is not None:
                if self._known.get(gone.path) is gone:
                    del self._known[gone.path]
                self._fan_out(
                    TopicEvent("unsubscribed", gone.path, gone.spec.type, None, gone.spec, m.reason)
                )
        elif isinstance(m, wire.Error):
            error = errors.error_for(m.code, m.message)
            pending = self._pending.pop(m.cid, None) if m.cid else None
            if pending is not None and not pending[0].done():
                pending[0].set_exception(error)
            else:
                log.warning("server error: %s", error)
                self.errors.append(error)
        elif isinstance(m, wire.Event):
            self._event(m)
            resync = self._resync
            if resync is not None and resync.resumed:
                self._refreshed(resync)
        elif isinstance(m, wire.Close):
            self._server_close = m
        elif isinstance(m, wire.Notify):
            if m.kind == "missing_topic":
                self.missing_topics._notified(m.body)
            else:
                log.info("ignoring a %r notification (a newer server?)", m.kind)
        elif isinstance(m, wire.Malformed):
            log.warning("malformed message from server: %s", m.reason)

    def _event(self, m: wire.Event) -> None:
        """A time series event; one seen already (before a reconnection) is not delivered again."""
        topic = self._aliases.get(m.alias)
        if topic is None or topic.spec.event_type is None or m.sequence <= topic.sequence:
            return
        original = (
            EventMetadata(m.original_sequence, m.original_timestamp or 0, m.original_author or "")
            if m.original_sequence is not None
            else None
        )
        value = values.decode(topic.spec.event_type, m.value)
        event = TimeSeriesEvent(m.sequence, m.timestamp, m.author, value, original)
        topic.value = value
        topic.sequence = m.sequence
        routes = self._routes.get(m.alias)
        if routes:
            notice = TopicEvent("value", topic.path, topic.spec.type, value, topic.spec, event=event)
            for sub in routes:
                sub._put(notice)

    def _subscribed(self, m: wire.Subscribed) -> None:
        """A topic announced: new to the subscriptions, or (after a reconnection)
        one they knew, whose current value they are given again."""
        spec = TopicSpecification.of(m.type, dict(m.properties))
        value = self._decode(spec, m.value) if m.value is not None else None
        topic = _Topic(m.path, spec, value)
        self._aliases[m.alias] = topic
        self._route(m.alias, m.path)
        old = self._known.get(m.path)
        self._known[m.path] = topic
        resync = self._resync
        if old is None:
            self._fan_out(TopicEvent("subscribed", m.path, spec.type, value, spec))
        elif old.spec != spec:  # replaced while we were away
            self._fan_out(TopicEvent("unsubscribed", m.path, old.spec.type, None, old.spec, "REMOVED"))
            self._fan_out(TopicEvent("subscribed", m.path, spec.type, value, spec))
        elif spec.type is TopicType.TIME_SERIES:
            if resync is not None and resync.previous.get(m.alias) is old:
                topic.sequence = old.sequence  # the same series: only the events not seen yet follow
        elif value is not None:
            self._fan_out(TopicEvent("value", m.path, spec.type, value, spec))
        if resync is not None:
            resync.seen.add(m.path)
            if resync.resumed:
                self._refreshed(resync)

    def _refreshed(self, resync: _Resync) -> None:
        """One more message of a resumed session's refresh."""
        resync.remaining -= 1
        if resync.remaining <= 0:
            self._resynced(resync)

    @staticmethod
    def _decode(spec: TopicSpecification, data: bytes) -> Any:
        if spec.type is TopicType.TIME_SERIES:
            return data
        return values.decode(spec.type, data)

    def _fan_out(self, event: TopicEvent) -> None:
        for sub in self._subscriptions:
            if sub.selector.matches(event.path):
                sub._put(event)

    async def _subscribe(
        self, selector: Selector, hub_root: str | None = None, callback: Callable[[TopicEvent], Any] | None = None
    ) -> Subscription:
        sub = Subscription(self, selector, hub_root, callback)
        # topics this session already receives through another selector are
        # not announced again by the server: replay them locally
        for topic in self._known.values():
            if selector.matches(topic.path):
                sub._put(TopicEvent("subscribed", topic.path, topic.spec.type, topic.value, topic.spec))
        self._subscriptions.append(sub)
        self._reroute()
        try:
            await self._call_again("subscribe", str(selector))
        except BaseException:
            if sub in self._subscriptions:
                self._subscriptions.remove(sub)
                self._reroute()
            raise
        return sub

    # -- lifecycle ---------------------------------------------------------------

    async def close(self) -> None:
        """End the session (at once on the server too); closing a closed session does nothing."""
        if not self.closed:
            self._closing = True
            self.close_reason = errors.SessionClosedError("the session was closed by the client")
            task = self._reconnecting
            stream = self._stream
            if stream is not None:
                await stream.aclose(1000)
                await stream.lost
            self._end(self.close_reason)
            if task is not None and task is not asyncio.current_task():
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Opened(NamedTuple):
    """A connection whose HELLO was welcomed, and what came with the WELCOME."""

    stream: WebSocketStream
    welcome: wire.Welcome
    rest: list[wire.Message | wire.Malformed]  # after the WELCOME, in its frame
    early: list[bytes | str]  # frames after it


@dataclass(frozen=True)
class _Dialer:
    """Where a session's server is, who the session is, and how patiently to reconnect."""

    urls: tuple[str, ...]
    principal: str | None
    password: str | None
    properties: dict[str, str]
    timeout: float
    context: ssl.SSLContext | None  # for wss:// URLs
    reconnect_timeout: float
    retry_delay: float

    async def dial(
        self, url: str, protocol: wire.ClientProtocol, timeout: float, resume: wire.Resume | None = None
    ) -> _Opened:
        """Connect to ``url`` and say HELLO (asking to resume ``resume``).

        :class:`~canopy.errors.ConnectError` when the server cannot be reached
        or does not answer in ``timeout`` seconds; the error the server
        answered the HELLO with (``AuthenticationError``...) when it refused.
        """
        hello = protocol.hello(self.principal, self.password, self.properties, resume)
        secure = url.lower().startswith("wss:")
        try:
            stream = await asyncio.wait_for(
                transport.connect(url, ssl_context=self.context if secure else None), timeout
            )
        except ssl.SSLError as e:
            raise errors.ConnectError(f"cannot connect to {url}: {transport.tls_failure(e)}") from None
        except (OSError, TimeoutError, transport.InvalidHandshake, transport.InvalidURI) as e:
            hint = ""
            if isinstance(e, transport.InvalidHandshake) and not secure:
                hint = " (if the server serves TLS, use wss://)"
            elif isinstance(e, ConnectionResetError) and secure:  # only the TLS handshake was under way
                hint = " during the TLS handshake (does the server serve wss://?)"
            detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            raise errors.ConnectError(f"cannot connect to {url}: {detail}{hint}") from None
        try:
            stream.send(hello)
            data = await asyncio.wait_for(transport.first_message(stream), timeout)
            messages = protocol.receive(data) if isinstance(data, bytes) else []
        except (ConnectionError, TimeoutError, wire.ProtocolError) as e:
            await stream.aclose()
            raise errors.ConnectError(f"handshake with {url} failed: {type(e).__name__}: {e}") from None
        except BaseException:
            stream.abort()
            raise
        first = messages[0] if messages else None
        if isinstance(first, wire.Error):
            await stream.aclose()
            raise errors.error_for(first.code, first.message)
        if not isinstance(first, wire.Welcome):
            await stream.aclose()
            raise errors.ConnectError(f"handshake with {url} failed: unexpected reply")
        return _Opened(stream, first, messages[1:], transport.take_messages(stream))


class _Connect:
    """What :func:`connect` returns: await it, or use it with ``async with``."""

    def __init__(self, dialer: _Dialer, hub_root: str | None) -> None:
        self._dialer = dialer
        self._hub_root = hub_root
        self._session: Session | None = None

    def __await__(self) -> Generator[Any, None, Session]:
        return _open(self._dialer, self._hub_root).__await__()

    async def __aenter__(self) -> Session:
        self._session = await _open(self._dialer, self._hub_root)
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


def connect(
    url: str | Sequence[str] = DEFAULT_URL,
    principal: str | None = None,
    password: str | None = None,
    properties: dict[str, str] | None = None,
    *,
    hub_root: str | None = None,
    timeout: float = 10.0,
    ca_file: str | os.PathLike[str] | None = None,
    reconnect_timeout: float = 60.0,
    retry_delay: float = 0.5,
) -> _Connect:
    """Open a session: ``async with canopy.connect(url) as session: ...``.

    ``url`` is one URL or a list of them, any of which serves the session:
    connecting tries them in order until one answers. ``timeout`` bounds
    each attempt. A ``wss://`` server must present a certificate for the
    URL's host that the CA certificates in ``ca_file`` (PEM) sign, or without
    ``ca_file`` one the system trusts; otherwise
    :class:`~canopy.errors.ConnectError` says what is wrong with it.
    ``ca_file`` is not used for ``ws://`` URLs.

    **Reconnecting.** When the connection drops, the session reconnects for
    up to ``reconnect_timeout`` seconds (0: never; the session ends with the
    connection), trying the URLs in turn from the one it had, ``retry_delay``
    seconds apart (with jitter: 0.5 to 1.5 times that). Meanwhile:

    * requests that were in flight fail with
      :class:`~canopy.errors.ConnectionInterruptedError`: their outcome is
      unknown (a ``set`` may or may not have been applied). ``subscribe``
      and ``unsubscribe`` are made again instead, being safe to repeat;
    * requests made while disconnected wait for the next connection;
    * every subscription yields a ``disconnected`` event (with callbacks too).

    On the next connection the session is *resumed* when the server still
    has it (same session id, properties and subscriptions; it keeps a session
    ``session_grace_ms`` after its connection dropped), else a new one is
    opened with the same principal, password and properties, and every
    selector subscribed again. Either way each subscription is then told the
    current state: a ``value`` event with the current value for each topic
    it knew (for a TIME_SERIES topic, the events of its subscription range
    not seen yet), ``subscribed`` for topics that appeared and
    ``unsubscribed`` (reason ``DISCONNECTED``) for those that went, and then
    a ``reconnected`` event (reason ``RESUMED`` or ``NEW_SESSION``).
    Requests made while disconnected are sent as soon as the server has
    welcomed the session.

    The session ends for good — every waiting request and every
    subscription ends with :class:`~canopy.errors.SessionClosedError` — when
    the reconnect timeout passes (code ``RECONNECT_TIMEOUT``), when the
    server refuses the new HELLO (e.g. ``AUTHENTICATION_FAILED``: a changed
    password), or when the server ends the session on purpose: a CLOSE for
    anything but ``SERVER_SHUTDOWN`` (``QUEUE_LIMIT``, ``PROTOCOL_ERROR``),
    or a close code that refuses what the client sent (1002, 1003, 1007,
    1008, 1009, 1010, 4000-4999). A gateway that shuts down (``SERVER_SHUTDOWN``)
    took the session with it; the client opens a new one, there or elsewhere.
    """
    urls = (url,) if isinstance(url, str) else tuple(url)
    if not urls or not all(isinstance(u, str) for u in urls):
        raise errors.InvalidRequestError("url must be a URL or a non-empty list of URLs")
    for what, seconds in (("reconnect_timeout", reconnect_timeout), ("retry_delay", retry_delay), ("timeout", timeout)):
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds >= 0:
            raise errors.InvalidRequestError(f"{what} must be a number of seconds, at least 0; got {seconds!r}")
    for key, value in (properties or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise errors.InvalidPropertiesError("session properties must map strings to strings")
    context = None
    if ca_file is not None and any(u.lower().startswith("wss:") for u in urls):
        try:
            context = transport.client_context(ca_file)
        except OSError as e:  # an ssl.SSLError: the file holds no certificate
            problem = "it holds no PEM certificate" if isinstance(e, ssl.SSLError) else e.strerror or str(e)
            raise errors.ConnectError(f"cannot use the CA file {os.fspath(ca_file)}: {problem}") from None
    dialer = _Dialer(
        urls, principal, password, dict(properties or {}), float(timeout), context,
        float(reconnect_timeout), float(retry_delay),
    )
    return _Connect(dialer, hub_root)


async def _open(dialer: _Dialer, hub_root: str | None) -> Session:
    """A new session on the first of the dialer's URLs that takes it."""
    protocol = wire.ClientProtocol()
    try:  # before connecting: a HELLO that cannot be encoded never leaves
        protocol.hello(dialer.principal, dialer.password, dialer.properties)
    except (UnicodeEncodeError, TypeError, ValueError) as e:
        raise errors.InvalidRequestError(
            f"the principal, password and properties must be text that UTF-8 can encode ({type(e).__name__})"
        ) from None
    failure: errors.ConnectError | None = None
    for url in dialer.urls:
        try:
            opened = await dialer.dial(url, protocol, dialer.timeout)
        except errors.ConnectError as e:
            failure = e
            continue
        session = Session(opened.stream, protocol, opened.welcome, hub_root, dialer, url)
        opened.stream.handler = session
        for m in opened.rest:
            session._dispatch(m)
        for data in opened.early:  # anything that came with the WELCOME
            session.on_message(opened.stream, data)
        if opened.stream.lost.done() and session._stream is opened.stream:
            session._lost(opened.stream)  # it went before the session could hear of it
        return session
    assert failure is not None
    if len(dialer.urls) > 1:
        raise errors.ConnectError(f"none of {len(dialer.urls)} URLs answered; the last: {failure.message}")
    raise failure
