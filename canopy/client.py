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
"""

from __future__ import annotations

import asyncio
import datetime
import enum
import logging
import os
import ssl
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from dataclasses import dataclass
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

    For a TIME_SERIES topic every event and edit arrives as a ``value``
    notification whose ``event`` holds the event (``value`` is its value).
    """

    kind: str  # "subscribed" | "value" | "unsubscribed"
    path: str
    type: TopicType
    value: Any = None
    specification: TopicSpecification | None = None
    reason: str | None = None
    name: str | None = None  # the OpenAjax name, for hub subscriptions
    event: TimeSeriesEvent | None = None


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

    def decode(self, data: bytes) -> Any:
        """A new value's bytes as a Python value (a TIME_SERIES topic's stay bytes)."""
        kind = self.spec.type
        if kind is TopicType.BINARY:
            return data
        if kind is TopicType.TIME_SERIES:
            return data
        return values.decode(kind, data)

    def value_event(self, value: Any) -> TopicEvent:
        return _new_event(TopicEvent, ("value", self.path, self.spec.type, value, self.spec, None, None, None))


_new_event = tuple.__new__


class Subscription:
    """Events for one selector; iterate with ``async for``; ``async with`` unsubscribes on exit.

    With a ``callback`` the events are not queued: each is passed to the
    callback the moment it arrives, from the session's socket callback (no
    task in between), and iterating the subscription only tells when it ends.
    The callback must not block; an exception it raises is logged and the
    session goes on.
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
        self, path: str, value: Any, type: TopicType | str | None = None, *, add_if_missing: bool = False
    ) -> asyncio.Future[None]:
        """Set a topic's value; await the result to know the partition applied it.

        The request is sent at the end of the current event-loop turn whether
        or not the result is awaited, so many sets pipeline without a task
        each. Every error (a value that cannot be encoded included) comes
        out of the awaited result.
        """
        try:
            topic_type = TopicType.parse(type) if type is not None else None
            data, raw = values.encode_any(value, topic_type)
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
        await self._s._call("unsubscribe", str(sel))
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
    """Branch mapping tables (``session.session_trees``), seed 002."""

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
    """Other sessions' properties (``session.sessions``): VIEW_SESSION to read,
    MODIFY_SESSION to change. A target is one session id or a session filter."""

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


@dataclass(frozen=True)
class TopicView:
    """A topic view as the server holds it (seed 001)."""

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
    """Topic views (``session.views``), seeds 000 and 001: MODIFY_TOPIC_VIEWS
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


class Session(Handler):
    """A connected client session. Create it with :func:`connect`."""

    def __init__(
        self, stream: WebSocketStream, protocol: wire.ClientProtocol, welcome: wire.Welcome, hub_root: str | None
    ) -> None:
        self._stream = stream
        self._protocol = protocol
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
        self.closed = False
        self._closing = False
        self.close_reason: errors.CanopyError | None = None
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], Any] | None]] = {}
        self._subscriptions: list[Subscription] = []
        self._aliases: dict[int, _Topic] = {}
        self._routes: dict[int, list[Subscription]] = {}  # alias -> subscriptions matching it
        self._flush_scheduled = False
        self._writable: asyncio.Future[None] | None = None
        self.errors: list[errors.CanopyError] = []  # errors the server reported outside any request

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
        ``result`` when given). Requests of one loop turn share a frame."""
        self._check_open()
        try:
            cid = self._protocol.request(op, *args, max_size=self.max_frame_size)
        except wire.UnencodableRequestError as e:
            raise errors.InvalidRequestError(str(e)) from None
        except ValueError as e:
            raise errors.FrameTooLargeError(f"{e} (the server's maximum frame size)") from None
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._pending[cid] = (future, result)
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)
        return future

    async def _call(self, op: str, *args: Any) -> Any:
        future = self._request(op, *args)
        if self._stream.paused:  # the server reads slower than we send: wait for it
            await self._drained()
        return await future

    def _flush(self) -> None:
        self._flush_scheduled = False
        for data in self._protocol.data_to_send(self.max_frame_size, self.max_messages):
            if not self._stream.send(data):
                return

    async def _drained(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._writable)

    # -- what the stream tells the session (transport.Handler) ------------------------

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        if not isinstance(data, bytes):
            return
        try:
            self._receive(data)
        except wire.ProtocolError as e:
            self.close_reason = errors.ProtocolViolationError(str(e))
            stream.close(1002, "PROTOCOL_ERROR")

    def on_writable(self, stream: WebSocketStream) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    def on_closed(self, stream: WebSocketStream) -> None:
        self._closed_by_peer()

    def on_open(self, stream: WebSocketStream) -> None:
        pass

    def _closed_by_peer(self) -> None:
        if self.close_reason is None:
            code = self._stream.close_code
            if code == 1009:
                self.close_reason = errors.FrameTooLargeError("the server closed the session: frame too large")
            else:
                detail = f" ({code} {self._stream.close_reason})" if code is not None else ""
                self.close_reason = errors.SessionClosedError(f"the session is closed{detail}")
        self.closed = True
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)
        for future, _ in self._pending.values():
            if not future.done():
                future.set_exception(self.close_reason)
        self._pending.clear()
        ended_by_client = self._closing
        for sub in self._subscriptions:
            sub._end(None if ended_by_client else self.close_reason)
        self._subscriptions.clear()

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
                topic.value = self._decode(topic.spec, m.value)
                self._fan_out(TopicEvent("value", topic.path, topic.spec.type, topic.value, topic.spec))
        elif isinstance(m, wire.Response):
            pending = self._pending.pop(m.cid, None)
            if pending is not None and not pending[0].done():
                future, convert = pending
                future.set_result(convert(m.result) if convert is not None else m.result)
        elif isinstance(m, wire.Subscribed):
            spec = TopicSpecification.of(m.type, dict(m.properties))
            value = self._decode(spec, m.value) if m.value is not None else None
            self._aliases[m.alias] = _Topic(m.path, spec, value)
            self._route(m.alias, m.path)
            self._fan_out(TopicEvent("subscribed", m.path, spec.type, value, spec))
        elif isinstance(m, wire.Unsubscribed):
            gone = self._aliases.pop(m.alias, None)
            self._routes.pop(m.alias, None)
            if gone is not None:
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
            topic = self._aliases.get(m.alias)
            if topic is not None and topic.spec.event_type is not None:
                original = (
                    EventMetadata(m.original_sequence, m.original_timestamp or 0, m.original_author or "")
                    if m.original_sequence is not None
                    else None
                )
                value = values.decode(topic.spec.event_type, m.value)
                event = TimeSeriesEvent(m.sequence, m.timestamp, m.author, value, original)
                topic.value = value
                routes = self._routes.get(m.alias)
                if routes:
                    notice = TopicEvent("value", topic.path, topic.spec.type, value, topic.spec, event=event)
                    for sub in routes:
                        sub._put(notice)
        elif isinstance(m, wire.Close):
            self.close_reason = errors.SessionClosedError(m.message, m.code)
        elif isinstance(m, wire.Malformed):
            log.warning("malformed message from server: %s", m.reason)

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
        for topic in self._aliases.values():
            if selector.matches(topic.path):
                sub._put(TopicEvent("subscribed", topic.path, topic.spec.type, topic.value, topic.spec))
        self._subscriptions.append(sub)
        self._reroute()
        try:
            await self._call("subscribe", str(selector))
        except BaseException:
            if sub in self._subscriptions:
                self._subscriptions.remove(sub)
                self._reroute()
            raise
        return sub

    # -- lifecycle ---------------------------------------------------------------

    async def close(self) -> None:
        if not self.closed:
            self._closing = True
            self.close_reason = errors.SessionClosedError("the session was closed by the client")
            await self._stream.aclose(1000)
        await self._stream.lost

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Connect:
    """What :func:`connect` returns: await it, or use it with ``async with``."""

    def __init__(self, url: str, principal: str | None, password: str | None,
                 properties: dict[str, str] | None, hub_root: str | None, timeout: float,
                 ca_file: str | os.PathLike[str] | None = None) -> None:
        self._args = (url, principal, password, properties, hub_root, timeout, ca_file)
        self._session: Session | None = None

    def __await__(self) -> Generator[Any, None, Session]:
        return _open(*self._args).__await__()

    async def __aenter__(self) -> Session:
        self._session = await _open(*self._args)
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


def connect(
    url: str = DEFAULT_URL,
    principal: str | None = None,
    password: str | None = None,
    properties: dict[str, str] | None = None,
    *,
    hub_root: str | None = None,
    timeout: float = 10.0,
    ca_file: str | os.PathLike[str] | None = None,
) -> _Connect:
    """Open a session: ``async with canopy.connect(url) as session: ...``.

    A ``wss://`` server must present a certificate for the URL's host that
    the CA certificates in ``ca_file`` (PEM) sign, or without ``ca_file`` one
    the system trusts; otherwise :class:`~canopy.errors.ConnectError` says
    what is wrong with it. ``ca_file`` is not used for ``ws://`` URLs.
    """
    return _Connect(url, principal, password, properties, hub_root, timeout, ca_file)


async def _open(url: str, principal: str | None, password: str | None,
                properties: dict[str, str] | None, hub_root: str | None, timeout: float,
                ca_file: str | os.PathLike[str] | None = None) -> Session:
    for key, value in (properties or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise errors.InvalidPropertiesError("session properties must map strings to strings")
    protocol = wire.ClientProtocol()
    try:  # before connecting: a HELLO that cannot be encoded never leaves
        hello = protocol.hello(principal, password, properties)
    except (UnicodeEncodeError, TypeError, ValueError) as e:
        raise errors.InvalidRequestError(
            f"the principal, password and properties must be text that UTF-8 can encode ({type(e).__name__})"
        ) from None
    secure = url.lower().startswith("wss:")
    context = None
    if ca_file is not None and secure:
        try:
            context = transport.client_context(ca_file)
        except OSError as e:  # an ssl.SSLError: the file holds no certificate
            problem = "it holds no PEM certificate" if isinstance(e, ssl.SSLError) else e.strerror or str(e)
            raise errors.ConnectError(f"cannot use the CA file {os.fspath(ca_file)}: {problem}") from None
    try:
        stream = await asyncio.wait_for(transport.connect(url, ssl_context=context), timeout)
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
    session = Session(stream, protocol, first, hub_root)
    early = transport.take_messages(stream)
    stream.handler = session
    for data in early:  # anything that came with the WELCOME
        session.on_message(stream, data)
    return session
