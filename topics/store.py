"""The topic store: one partition's topics, the gateways interested in them,
and the operations a partition applies.

A :class:`TopicStore` owns a :class:`~topics.tree.TopicTree` and a
:class:`~topics.sublist.SubscriptionIndex` whose subscribers are *gateway
ids*: a gateway registers a selector once, however many of its sessions use
it, and fans updates out to those sessions itself.

Operations and events are the typed values of :mod:`topics.protocol`.
:meth:`TopicStore.apply` applies operations in order and returns one
:class:`~topics.protocol.Ok` or :class:`~topics.protocol.Failed` per
operation. Every change produces events for the links whose selectors
match; they accumulate until :meth:`TopicStore.drain_events` hands them out,
one list per link, so a partition writes each link once per batch.

A registration's snapshot of a TIME_SERIES topic is followed by the events
its TIME_SERIES_SUBSCRIPTION_RANGE selects (default: the newest event). A
*structure* registration (topic notifications) is kept in an index of its own
(:attr:`TopicStore.outline`) and hears of topics added and removed only
(:class:`~topics.protocol.Present`, :class:`~topics.protocol.Absent`): a value
costs it nothing, and with no structure registration a value costs one test.

Appends and edits without a timestamp take the injected clock's time, or
the newest event's if the clock is behind it, so they never go backwards.

Reference topics (topic views) arrive as *claims*: a view with
a precedence (lower wins: the view created first) claims a path with a
specification and a value (:class:`~topics.protocol.RefPut`; a TIME_SERIES claim carries
a :class:`~topics.protocol.RefEvent` to append, or ``None`` when nothing
new happened). The path is bound to the winning claim's reference topic
unless a normal topic holds it; when the winner drops its claim, the next
claim takes the path, and when a normal topic is removed the best claim
takes its place. A delayed view *reserves* a path first
(:class:`~topics.protocol.RefReserve`): an unpublished claim that keeps lower views out but
shows nothing until its first put. Reference topics are read-only: ``set``,
``append``, ``edit`` and ``add`` on them fail with
:class:`~topics.errors.ReferenceTopicError`; ``remove`` skips them (and
fails when its selector names one path, a reference topic).

``properties`` is a list of ``[name, value]`` pairs. Values are the stored
bytes. A topic with DONT_RETAIN_VALUE keeps no value: updates are delivered
but snapshots and fetches carry none.

Conditional updates: a set (and a JSON patch, :meth:`TopicStore.patch`) may carry an update
constraint (:mod:`topics.constraints`), evaluated against the topic as it is in the same step
as the update; when it does not hold the operation fails ``UNSATISFIED_CONSTRAINT`` and nothing
changes. A patch's result is recorded and announced as a set of that value would be.

Values: every value set, appended or edited must read as the topic's (event) type
(:func:`topics.types.accept`); a topic with VALIDATE_VALUES ``true`` also refuses a value that
is not plain CBOR of the type (:func:`topics.types.check_plain`: no tags, no simple values but
booleans and null, no byte strings), with ``INVALID_VALUE`` and nothing changed.

Durability (:mod:`topics.changes`): a store made with ``record_changes=True``
records every change it applies to a persistent topic (PERSISTENT not
``false``; never a reference topic) until :meth:`TopicStore.drain_changes`
hands them out; the owner journals them after each batch. :meth:`TopicStore.state`
is every persistent topic as it is now: take it right after draining, so it
holds exactly the changes drained so far. A fresh store rebuilds the
original with :meth:`TopicStore.load` of a state and :meth:`TopicStore.replay`
of the changes drained after it; neither emits events nor records changes.

Removal policies (:mod:`topics.removal_tracker`): a normal topic whose specification has a
REMOVAL policy is watched from its creation (the clock's time, the creating session and its
roles, which :class:`~topics.protocol.AddTopic` carries) and every update (sets, values not
retained, appends and edits). What the watch needs is kept in the topic's
:class:`~topics.changes.TopicAdded` and :class:`~topics.changes.TopicState`; :meth:`TopicStore.replay`
and :meth:`TopicStore.extend_recent` take the times their changes were recorded as last updates,
so a rebuilt store watches with times at or after the original's. Gateways report the facts
about sessions (:meth:`TopicStore.removal_facts`); the owner calls :meth:`TopicStore.expire`
when :meth:`RemovalTracker.next_check_ms <topics.removal_tracker.RemovalTracker.next_check_ms>`
says: a due policy removes its topic here as a ``remove`` would (events, changes), or hands
its ``remove`` clause to the next gateway that reports.

Recent messages: every event that carries a value to subscribers (a :class:`Changed`, an
:class:`Appended`, an :class:`Added` with a value) takes the next *position* of the store and
joins a window of the newest ``recent`` of them, whether or not a link is registered for its
path. :meth:`TopicStore.recent_since` reads the window after a position: what a subscriber that
had everything up to that position missed (an MQTT session whose gateway was lost takes up its
queue from there). Positions only grow; a store starts at the ``position`` its owner gives (a
partition gives its start time in milliseconds times 1,000, so that a replica started afresh
numbers above every position an earlier one handed out, and a position from before is
recognised as out of its window). A backup is handed the primary's messages and position
(:meth:`TopicStore.extend_recent`), so a promoted backup goes on numbering where its primary was.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from topics import constraints
from topics import types as values
from topics.changes import (
    Change,
    EventAppended,
    Properties,
    TopicAdded,
    TopicRemoved,
    TopicState,
    ValueSet,
    persistent_only,
)
from topics.constraints import Constraint, Current
from topics.errors import (
    InvalidValueError,
    NoSuchTopicError,
    NotEventAuthorError,
    NotOwnerError,
    PatchFailedError,
    RangeQueryError,
    ReferenceTopicError,
    TopicModelError,
)
from topics.patch import PatchFailed, PatchSyntaxError, apply_patch, parse_patch
from topics.owner import parse_owner
from topics.properties import OWNER, REMOVAL
from topics.removal_tracker import Due, RemovalTracker
from topics.selectors import Selector, parse_selector
from topics.specification import TopicSpecification, check_honoured
from topics.sublist import SubscriptionIndex
from topics.timeseries import (
    DEFAULT_SUBSCRIPTION_RANGE,
    Anchor,
    EventLog,
    RangeQuery,
    Span,
    ViewKind,
)
from topics.protocol import (
    Absent,
    Added,
    AddTopic,
    AppendEvent,
    Appended,
    Changed,
    CountTopics,
    EditEvent,
    EditMeta,
    End,
    EventMeta,
    Failed,
    FetchTopics,
    Ok,
    Operation,
    PatchJson,
    Present,
    QueryAnswer,
    QueryEvents,
    ReadRecent,
    RecentAnswer,
    RefDrop,
    RefDropView,
    RefEvent,
    RefPut,
    RefReserve,
    Register,
    RemovalFacts,
    RemovalWatch,
    Removed,
    RemoveTopics,
    Result,
    SetValue,
    Snapshot,
    TopicEvent,
    TopicRow,
    Unregister,
)
from topics.tree import Topic, TopicTree
from topics.types import TopicType

CREATED, EXISTS = "CREATED", "EXISTS"
#: messages a store keeps for :meth:`TopicStore.recent_since` unless told otherwise
RECENT = 100_000
#: bytes of values the recent messages may hold, whatever their number
RECENT_BYTES = 64 * 1024 * 1024
#: bytes of values one read of the recent messages answers at most (more: it says it is not all)
MAX_RECENT_ANSWER = 16 * 1024 * 1024
#: selectors one read of the recent messages may name
MAX_RECENT_SELECTORS = 1_000
#: selectors one count may name (a gateway names each topic metric collector's)
MAX_COUNTED_SELECTORS = 1_000


@dataclass
class _Claim:
    view: str
    spec: TopicSpecification | None  # None: reserved by a delayed view, not yet published
    value: bytes | None


class OperationError(TopicModelError):
    """A malformed operation (wrong arity or argument types)."""

    code = "INVALID_REQUEST"


def _message_size(event: TopicEvent) -> int:
    """About how many bytes a kept message holds (its value, attributes, path)."""
    kind = type(event)
    if kind is Changed:
        return len(event.value) + len(event.attributes) + len(event.path) + 64  # type: ignore[union-attr, arg-type]
    if kind is Appended:
        return len(event.event.value) + len(event.path) + 96  # type: ignore[union-attr]
    return len(getattr(event, "value", None) or b"") + len(event.path) + 64  # type: ignore[union-attr]


def _spec_wire(spec: TopicSpecification) -> list[list[str]]:
    return [list(item) for item in spec.items]


class _SpecificationCache:
    """Specifications by their wire form: restoring validates each kind once, not once a topic."""

    def __init__(self) -> None:
        self._specs: dict[tuple[str, tuple[tuple[str, ...], ...]], TopicSpecification] = {}

    def __call__(self, type_name: str, properties: Properties) -> TopicSpecification:
        key = (type_name, tuple(map(tuple, properties)))
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = TopicSpecification.of(type_name, {name: v for name, v in properties})
        return spec


def _no_clock() -> int:
    raise InvalidValueError("this store has no clock: give every event a timestamp")


class TopicStore:
    """Topics of one partition plus the gateway registrations over them.

    ``clock`` returns the current time in milliseconds since the epoch; it
    stamps time series events that come without a timestamp.
    """

    def __init__(
        self, clock: Callable[[], int] = _no_clock, *, record_changes: bool = False, record_volatile: bool = False,
        position: int = 0, recent: int = RECENT, recent_bytes: int = RECENT_BYTES,
    ) -> None:
        self.clock = clock
        #: the position of the newest message (see the module's "recent messages")
        self.position = position
        #: the newest messages (at most ``recent`` of them, ``recent_bytes`` of values), oldest
        #: first; the last one is at ``position``
        self.recent: deque[TopicEvent] = deque()
        self._recent_max = max(recent, 0)
        self._recent_budget = recent_bytes
        self._recent_bytes = 0
        #: messages made since the last :meth:`drain_recent` (for a backup; None: not kept)
        self._fresh: list[TopicEvent] | None = [] if record_volatile else None
        #: changes not drained yet; None: this store records none
        self._changes: list[Change] | None = [] if record_changes or record_volatile else None
        #: whether changes to topics that are not persistent are recorded too (replication)
        self._all = record_volatile
        #: positions in ``_changes`` of changes to topics that are not persistent
        self._volatile: list[int] = []
        self.tree = TopicTree()
        self.index: SubscriptionIndex[str] = SubscriptionIndex()
        #: path -> what its value was published with (a retained MQTT 5 publish's message
        #: properties, opaque), for the topics whose value came so
        self.attributes: dict[str, bytes] = {}
        self._shared_attributes: dict[bytes, bytes] = {}
        self._registrations: dict[str, set[Selector]] = {}
        #: structure registrations (topic notifications: topics added and removed, no values)
        self.outline: SubscriptionIndex[str] = SubscriptionIndex()
        self._outlines: dict[str, set[Selector]] = {}
        self._events: dict[str, list[TopicEvent]] = {}
        #: path -> precedence -> claim of a view on that path
        self.claims: dict[str, dict[int, _Claim]] = {}
        #: path -> precedence of the claim whose reference topic is bound there
        self.references: dict[str, int] = {}
        #: the topics with a REMOVAL policy (see the module's "removal policies")
        self.removals = RemovalTracker()
        #: due ``remove`` clauses not yet handed to a gateway (:meth:`removal_facts`)
        self.removal_outbox: list[Due] = []
        self._handlers: dict[type[Any], Callable[[str, Any], Any]] = {
            SetValue: lambda _, op: self._as_owner(op.owner, op.path, "UPDATE_TOPIC", lambda: self.set(
                op.path, op.data, op.raw, op.type, op.add_if_missing, op.retain, op.author, op.attributes,
                op.constraint,
            )),
            PatchJson: lambda _, op: self._as_owner(op.owner, op.path, "UPDATE_TOPIC", lambda: self.patch(
                op.path, op.patch, op.constraint)),
            AddTopic: lambda _, op: self.add(op.path, op.type, op.properties, op.creator, op.roles),
            RemoveTopics: lambda _, op: self._as_owner(op.owner, op.selector, "MODIFY_TOPIC", lambda: self.remove(
                op.selector)),
            FetchTopics: lambda _, op: self.fetch(op.selector, op.with_values, op.with_properties, op.types, op.limit),
            Register: lambda link, op: self.register(link, op.selector, op.token, op.structure),
            Unregister: lambda link, op: self.unregister(link, op.selector, op.structure),
            AppendEvent: lambda _, op: self._as_owner(op.owner, op.path, "UPDATE_TOPIC", lambda: self.append(
                op.path, op.data, op.raw, op.timestamp, op.author)),
            EditEvent: lambda _, op: self.edit(op.path, op.original_sequence, op.data, op.raw, op.author, op.own_only),
            QueryEvents: lambda _, op: self.query(
                op.path, op.anchor, op.anchor_value, op.span, op.span_value, op.view, op.limit
            ),
            RefPut: lambda _, op: self.ref_put(
                op.path, op.precedence, op.view, op.type, op.properties, op.value, op.event, op.retain
            ),
            RefReserve: lambda _, op: self.ref_reserve(op.path, op.precedence, op.view),
            RefDrop: lambda _, op: self.ref_drop(op.path, op.precedence),
            RefDropView: lambda _, op: self.ref_drop_view(op.precedence),
            ReadRecent: lambda _, op: RecentAnswer(*self.recent_since(op.since, op.selectors)),
            CountTopics: lambda _, op: self.count(op.selectors),
            RemovalFacts: self.removal_facts,
        }

    def _as_owner(self, principal: str, path: str, permission: str, then: Callable[[], Any]) -> Any:
        """``then()`` when ``principal`` is empty (the gateway granted the update) or the topic at
        ``path`` has an OWNER naming it; otherwise :class:`NotOwnerError`, worded as the
        gateway's refusal would have been. (``path`` is a literal selector for a remove.)"""
        if not principal:
            return then()
        topic = self.tree.get(path.removeprefix(">"))
        owner = topic.specification.get(OWNER) if topic is not None else None
        if owner is None or parse_owner(owner) != principal:
            raise NotOwnerError(f"permission {permission} is needed on {path.removeprefix('>')!r}")
        return then()

    # -- batches -----------------------------------------------------------

    def apply(self, link: str, operations: Iterable[Operation]) -> list[Result]:
        """Apply a batch in order; a failing operation changes nothing and
        does not stop the ones after it."""
        return [self.apply_one(link, op) for op in operations]

    def apply_one(self, link: str, op: Operation) -> Result:
        handler = self._handlers.get(type(op))
        if handler is None:
            return Failed(OperationError.code, f"not an operation: {op!r}")
        try:
            return Ok(handler(link, op))
        except TopicModelError as e:
            return Failed(e.code, str(e))
        except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
            return Failed(OperationError.code, f"malformed operation {type(op).__name__}: {e}")

    def drain_events(self) -> dict[str, list[TopicEvent]]:
        """The events accumulated since the last drain, by link id."""
        events, self._events = self._events, {}
        return events

    @property
    def records_changes(self) -> bool:
        return self._changes is not None

    def drain_changes(self) -> list[Change]:
        """The changes to persistent topics recorded since the last drain, in
        the order they were applied (always empty when not recording)."""
        changes, volatile = self.drain_replicated()
        return persistent_only(changes, volatile) if volatile else changes

    def drain_replicated(self) -> tuple[list[Change], list[int]]:
        """Every change recorded since the last drain, in order, and the positions of
        those to topics that are not persistent (recorded only with ``record_volatile``:
        a backup applies them all and journals the others)."""
        changes = self._changes
        if not changes:
            return [], []
        self._changes = []
        volatile, self._volatile = self._volatile, []
        return changes, volatile

    def _record(self, change: Change, persistent: bool) -> None:
        changes = self._changes
        if changes is None:
            return
        if not persistent:
            if not self._all:
                return
            self._volatile.append(len(changes))
        changes.append(change)

    def _emit(self, path: str, event: TopicEvent) -> None:
        """Emit an :class:`Added` (without a value) or a :class:`Removed`."""
        for gateway in self.index.match(path):
            self._events.setdefault(gateway, []).append(event)
        if self._outlines:
            self._outline(path, event)

    def _outline(self, path: str, event: TopicEvent) -> None:
        """Tell the structure registrations of ``path`` of an :class:`Added` or :class:`Removed`."""
        links = self.outline.match(path)
        if links:
            shaped: TopicEvent = (
                Present(0, path, event.type, event.properties) if isinstance(event, Added)
                else Absent(path)
            )
            for link in links:
                self._events.setdefault(link, []).append(shaped)

    def _message(self, path: str, event: TopicEvent) -> None:
        """Emit an event that carries a value: it takes the next position and joins the
        recent messages."""
        self.position += 1
        self._keep_recent(event)
        if self._fresh is not None:
            self._fresh.append(event)
        for gateway in self.index.match(path):
            self._events.setdefault(gateway, []).append(event)
        if self._outlines and type(event) is Added:
            self._outline(path, event)

    # -- recent messages ---------------------------------------------------

    def drain_recent(self) -> list[TopicEvent]:
        """The messages made since the last drain, in order (kept only with
        ``record_volatile``: what a primary hands its backup with the batch's changes)."""
        fresh = self._fresh
        if not fresh:
            return []
        self._fresh = []
        return fresh

    def extend_recent(self, messages: Iterable[TopicEvent], position: int, at_ms: int | None = None) -> None:
        """Take a primary's messages, the last of them at ``position`` (a backup), made at or
        before ``at_ms`` (the last update of a topic with a REMOVAL policy: values not
        retained are in no change)."""
        watched = self.removals.watched
        for event in messages:
            self._keep_recent(event)
            if watched and at_ms is not None and event.path in watched:  # type: ignore[union-attr]
                self.removals.updated(event.path, at_ms)  # type: ignore[union-attr]
        self.position = position

    def _keep_recent(self, event: TopicEvent) -> None:
        recent = self.recent
        if not self._recent_max:
            return
        if len(recent) >= self._recent_max:
            self._recent_bytes -= _message_size(recent.popleft())
        recent.append(event)
        self._recent_bytes += _message_size(event)
        while self._recent_bytes > self._recent_budget and len(recent) > 1:
            self._recent_bytes -= _message_size(recent.popleft())

    def recent_since(self, since: int, selectors: Iterable[str]) -> tuple[int, int, list[TopicEvent]]:
        """The recent messages after position ``since`` whose paths match one of
        ``selectors``, oldest first, with the position of the oldest message kept and of
        the newest: when the oldest is above ``since + 1`` some messages after ``since``
        are no longer kept (or were made by an earlier replica), and those returned are
        not all that was missed."""
        if not isinstance(since, int) or isinstance(since, bool):
            raise OperationError(f"a position is an integer, got {since!r}")
        selectors = list(selectors)
        if len(selectors) > MAX_RECENT_SELECTORS:
            raise OperationError(f"at most {MAX_RECENT_SELECTORS} selectors, got {len(selectors)}")
        parsed = [parse_selector(s) for s in selectors]
        recent = self.recent
        first = self.position - len(recent) + 1
        skip = max(since + 1 - first, 0)
        chosen: list[TopicEvent] = []
        size = 0
        if skip < len(recent):
            literal = {sel.literal_path for sel in parsed}
            matchers = [sel.matches for sel in parsed] if None in literal else None
            for event in itertools.islice(recent, skip, None):
                path = event.path  # type: ignore[union-attr]
                if (path in literal) if matchers is None else any(m(path) for m in matchers):
                    chosen.append(event)
                    size += _message_size(event)
                    if size > MAX_RECENT_ANSWER:  # too much for one answer: it says it is not all
                        return max(first, since + 2), self.position, chosen
        return first, self.position, chosen

    # -- topics ------------------------------------------------------------

    def add(
        self, path: str, type_name: str, properties: dict[str, Any] | None = None,
        creator: str | None = None, roles: list[str] | None = None,
    ) -> str:
        """Add a topic; one with a REMOVAL policy is watched from now (the clock's time), for
        the session ``creator`` with ``roles`` (see :mod:`topics.removal_tracker`)."""
        spec = TopicSpecification.of(type_name, properties)
        check_honoured(spec)
        self._writable(path)
        topic, created = self.tree.add(path, spec)
        if not created:
            return EXISTS
        wire = _spec_wire(spec)
        policy = spec.get(REMOVAL)
        if policy is not None:
            self.removals.added(topic.path, policy, self.clock(), creator, roles)
        if self._changes is not None:
            self._record(TopicAdded(topic.path, spec.type.value, wire, None, b"", self.removals.kept(topic.path)),
                         spec.persistent)
        self._emit(topic.path, Added(topic.path, spec.type.value, wire, None))
        return CREATED

    def set(
        self,
        path: str,
        data: bytes,
        raw: bool | str,
        type_name: str | None = None,
        add_if_missing: bool = False,
        retain: bool = True,
        author: str = "",
        attributes: bytes = b"",
        constraint: Constraint | None = None,
    ) -> str | None:
        """Set the value of the topic at ``path`` (adding a topic of ``type_name``, else of
        the type the value suggests, when ``add_if_missing``).

        ``raw`` is the value's form: ``False`` one CBOR item, ``True`` raw bytes (BINARY),
        or :data:`~topics.types.TEXT` the value as text (:func:`~topics.types.from_text`:
        what an MQTT publish carries); a text value for a TIME_SERIES topic is appended as
        an event by ``author``, a topic added for one is BINARY unless ``type_name``
        says otherwise, and ``type_name`` is only the type of a topic to add (a text value
        converts to the type of the topic that is there). With ``retain`` false the value is delivered to the subscribers
        (:class:`Changed` with ``retained`` false) but is not kept, journaled or replicated:
        the topic keeps the value it had (a topic added for it has none). ``attributes`` go
        with the value's :class:`Changed` event, opaque, and are kept with a retained value
        (:attr:`attributes`: registrations' snapshots carry them; so do the journal and the
        backup) until a value without them replaces it. With a ``constraint`` nothing happens
        unless it holds against the topic as it is (:class:`~topics.errors.UnsatisfiedConstraintError`
        otherwise): ``no_topic`` with ``add_if_missing`` adds the topic only if none is there."""
        if not isinstance(data, (bytes, bytearray)):
            raise InvalidValueError(f"a value travels as bytes, got {type(data).__name__}")
        text = raw == values.TEXT
        wanted = TopicType.parse(type_name) if type_name is not None else None
        self._writable(path)
        topic = self.tree.get(path)
        if constraint is not None:
            constraints.check(constraint, self._current(topic))
        created = False
        if topic is None:
            if not add_if_missing:
                raise NoSuchTopicError(f"no topic at {path!r}")
            topic_type = wanted or (TopicType.BINARY if text else values.infer(data, raw=bool(raw)))
            if topic_type is TopicType.TIME_SERIES:
                raise InvalidValueError("a TIME_SERIES topic cannot be created by setting a value")
            stored = _accepted(topic_type, data, raw)
            spec = TopicSpecification.of(topic_type)
            topic, created = self.tree.add(path, spec)
        else:
            spec = topic.specification
            if wanted is not None and wanted is not spec.type and not text:
                raise InvalidValueError(
                    f"topic {topic.path!r} is a {spec.type.value} topic, not {wanted.value}"
                )
            if spec.type is TopicType.TIME_SERIES:
                if text:
                    self.append(topic.path, data, raw, None, author)
                    return None
                raise InvalidValueError(
                    f"topic {topic.path!r} is a TIME_SERIES topic: append events instead of setting a value"
                )
            stored = _accepted(spec.type, data, raw, spec.validate_values)
        if created:
            changes = self._changes
            kept = stored if retain else None
            if kept is not None:
                self._store(topic, kept, attributes)
            wire = _spec_wire(spec)
            if changes is not None:
                self._record(TopicAdded(topic.path, spec.type.value, wire, kept, attributes if kept else b""),
                             spec.persistent)
            if attributes or not retain:  # the value as a change of its own, with what goes with it
                self._emit(topic.path, Added(topic.path, spec.type.value, wire, None))
                self._message(topic.path, Changed(topic.path, stored, retain, attributes))
            elif kept is not None:
                self._message(topic.path, Added(topic.path, spec.type.value, wire, kept))
            else:
                self._emit(topic.path, Added(topic.path, spec.type.value, wire, kept))
            return CREATED
        if not retain:
            self._touched(topic.path)
            self._message(topic.path, Changed(topic.path, stored, False, attributes))
            return None
        self._changed(topic, stored, attributes)
        return None

    def _touched(self, path: str) -> None:
        """The topic at ``path`` was updated now (for its removal policy, if it has one)."""
        if path in self.removals.watched:
            self.removals.updated(path, self.clock())

    def _changed(self, topic: Topic, stored: bytes, attributes: bytes = b"") -> None:
        """Make ``stored`` the value of ``topic`` (a topic already there): kept, recorded, announced."""
        spec = topic.specification
        self._store(topic, stored, attributes)
        self._touched(topic.path)
        changes = self._changes
        if changes is not None:
            if spec.persistent:
                changes.append(ValueSet(topic.path, spec.type.value, stored, attributes))
            else:
                self._record(ValueSet(topic.path, spec.type.value, stored, attributes), False)
        self._message(topic.path, Changed(topic.path, stored, True, attributes) if attributes else Changed(topic.path, stored))

    def patch(self, path: str, text: str, constraint: Constraint | None = None) -> None:
        """Apply the RFC 6902 patch ``text`` (:mod:`topics.patch`: ``test`` compares CBOR bytes)
        to the value of the JSON topic at ``path``, when ``constraint`` (if any) holds; the
        result becomes the topic's value as a set would make it (one :class:`Changed`, one
        :class:`~topics.changes.ValueSet` recorded). Patch text that is not a patch is
        :class:`~topics.errors.InvalidValueError`; a patch that cannot apply (a ``test`` that
        fails, a path that is not there, no value to patch) is
        :class:`~topics.errors.PatchFailedError`; either way nothing changes."""
        if not isinstance(text, str):
            raise OperationError(f"a JSON patch travels as text, got {type(text).__name__}")
        try:
            operations = parse_patch(text)
        except PatchSyntaxError as e:
            raise InvalidValueError(f"invalid JSON patch: {e}") from None
        self._writable(path)
        topic = self.tree.get(path)
        if constraint is not None:
            constraints.check(constraint, self._current(topic))
        if topic is None:
            raise NoSuchTopicError(f"no topic at {path!r}")
        if topic.type is not TopicType.JSON:
            raise InvalidValueError(
                f"topic {topic.path!r} is a {topic.type.value} topic: a JSON patch applies to JSON topics"
            )
        if topic.value is None:
            raise PatchFailedError(f"topic {topic.path!r} has no value to patch")
        try:
            patched = apply_patch(values.decode(TopicType.JSON, topic.value), operations)
        except PatchFailed as e:
            raise PatchFailedError(f"the JSON patch does not apply to {topic.path!r}: {e}") from None
        self._changed(topic, values.encode(TopicType.JSON, patched))  # encode() makes plain CBOR

    def _current(self, topic: Topic | None) -> Current:
        """What an update constraint is evaluated against (a TIME_SERIES topic: its newest event)."""
        if topic is None:
            return Current(None)
        if topic.log is None:
            return Current(topic.type, topic.value)
        return Current(topic.specification.event_type, self._value_of(topic))

    def _store(self, topic: Topic, stored: bytes, attributes: bytes = b"") -> None:
        """Keep ``stored`` as the topic's value, with what it was published with (or nothing)."""
        if not topic.specification.dont_retain_value:
            self.tree.set_value(topic.path, stored, check=False)
            if attributes:
                # many values come with the same attributes (one publisher's): one object for all
                shared = self._shared_attributes
                kept = shared.get(attributes)
                if kept is None:
                    if len(shared) >= 4096:
                        shared.clear()
                    kept = shared[attributes] = attributes
                self.attributes[topic.path] = kept
            elif self.attributes:
                self.attributes.pop(topic.path, None)

    def _forget(self, path: str) -> None:
        if self.attributes:
            self.attributes.pop(path, None)

    def remove(self, selector: str) -> int:
        sel = parse_selector(selector)
        literal = sel.literal_path
        if literal is not None and literal in self.references:
            self._writable(literal)
        removed = [t for t in self.tree.select(sel) if t.path not in self.references]
        for topic in removed:
            self.tree.remove(topic.path)
            self._forget(topic.path)
            self.removals.removed(topic.path)
            if self._changes is not None:
                self._record(TopicRemoved(topic.path), topic.specification.persistent)
            self._emit(topic.path, Removed(topic.path))
            if topic.path in self.claims:
                self._rebind(topic.path)
        return len(removed)

    def _writable(self, path: str) -> None:
        precedence = self.references.get(path)
        if precedence is not None:
            view = self.claims[path][precedence].view
            if precedence < 0:  # a fan-out replica (fanout/mirror.py): its claim names its link
                raise ReferenceTopicError(f"{path!r} is a replica of a primary's topic ({view}): it is read-only")
            raise ReferenceTopicError(
                f"{path!r} is a reference topic of topic view {view!r}: it is read-only"
            )

    def fetch(
        self,
        selector: str,
        with_values: bool = True,
        with_properties: bool = False,
        types: list[str] | None = None,
        limit: int | None = None,
    ) -> list[TopicRow]:
        sel = parse_selector(selector)
        wanted = {TopicType.parse(t) for t in types} if types else None
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise OperationError(f"limit must be a non-negative integer, got {limit!r}")
        chosen = sorted(
            (t for t in self.tree.select(sel) if wanted is None or t.type in wanted),
            key=lambda t: t.path,
        )
        if limit is not None:
            chosen = chosen[:limit]
        return [
            TopicRow(
                t.path,
                t.type.value,
                _spec_wire(t.specification) if with_properties else None,
                self._value_of(t) if with_values else None,
                t.specification.event_type.value if t.specification.event_type else None,
            )
            for t in chosen
        ]

    def count(self, selectors: list[str]) -> list[dict[str, int]]:
        """How many topics each selector selects, by type name (reference topics of views
        and fan-out replicas included: they are topics to their subscribers). The cost is
        that of the selection, with nothing copied out."""
        if not isinstance(selectors, list) or len(selectors) > MAX_COUNTED_SELECTORS:
            raise OperationError(f"count takes a list of at most {MAX_COUNTED_SELECTORS} selectors")
        out = []
        for text in selectors:
            counts: dict[str, int] = {}
            for topic in self.tree.select(parse_selector(text)):
                name = topic.type.value
                counts[name] = counts.get(name, 0) + 1
            out.append(counts)
        return out

    @staticmethod
    def _value_of(topic: Topic) -> bytes | None:
        if topic.log is None:
            return topic.value
        current = topic.log.current()
        return current.value if current is not None else None

    # -- time series -------------------------------------------------------

    def _series(self, path: str, writing: bool = True) -> tuple[Topic, EventLog, TopicType]:
        if writing:
            self._writable(path)
        topic = self.tree.get(path)
        if topic is None:
            raise NoSuchTopicError(f"no topic at {path!r}")
        if topic.log is None or topic.specification.event_type is None:
            raise InvalidValueError(f"topic {path!r} is a {topic.type.value} topic, not a TIME_SERIES topic")
        return topic, topic.log, topic.specification.event_type

    def _now(self, log: EventLog) -> int:
        now = self.clock()
        latest = log.latest
        return max(now, latest.timestamp) if latest is not None else now

    def append(
        self, path: str, data: bytes, raw: bool | str, timestamp: int | None = None, author: str = ""
    ) -> EventMeta:
        topic, log, event_type = self._series(path)
        stored = _accepted(event_type, data, raw, topic.specification.validate_values)
        if timestamp is None:
            timestamp = self._now(log)
        event = log.append(stored, timestamp, author)
        self._touched(topic.path)
        if self._changes is not None:
            self._record(EventAppended(topic.path, event_type.value, event), topic.specification.persistent)
        self._message(topic.path, Appended(topic.path, event))
        return EventMeta(event.sequence, event.timestamp, event.author)

    def edit(
        self,
        path: str,
        original_sequence: int,
        data: bytes,
        raw: bool,
        author: str = "",
        own_only: bool = False,
    ) -> EditMeta:
        """Edit an event; with ``own_only`` only an event ``author`` wrote."""
        topic, log, event_type = self._series(path)
        if not isinstance(original_sequence, int) or isinstance(original_sequence, bool):
            raise OperationError(f"an original sequence is an integer, got {original_sequence!r}")
        if own_only and log.original(original_sequence).author != author:
            raise NotEventAuthorError(
                f"permission EDIT_TIME_SERIES_EVENTS is needed on {path!r}: event {original_sequence} "
                "was written by another principal"
            )
        stored = _accepted(event_type, data, raw, topic.specification.validate_values)
        event = log.edit(original_sequence, stored, self._now(log), author)
        self._touched(topic.path)
        if self._changes is not None:
            self._record(EventAppended(topic.path, event_type.value, event), topic.specification.persistent)
        self._message(topic.path, Appended(topic.path, event))
        assert event.original_sequence is not None and event.original_timestamp is not None
        return EditMeta(event.sequence, event.timestamp, event.author, event.original_sequence,
                        event.original_timestamp, event.original_author or "")

    def query(
        self,
        path: str,
        anchor: str = Anchor.START.value,
        anchor_value: int = 0,
        span: str = Span.END.value,
        span_value: int = 0,
        view: str = ViewKind.VALUES.value,
        limit: int | None = None,
    ) -> QueryAnswer:
        _, log, event_type = self._series(path, writing=False)
        try:
            q = RangeQuery(Anchor(anchor), anchor_value, Span(span), span_value, ViewKind(view), limit)
        except ValueError as e:
            raise RangeQueryError(f"invalid range query: {e}") from None
        result = log.query(q)
        return QueryAnswer(result.selected_count, list(result.events), event_type.value)

    # -- durability --------------------------------------------------------

    def state(self, volatile: bool = False) -> list[TopicState]:
        """Every persistent normal topic as it is now (no reference topics); with
        ``volatile``, the topics that are not persistent too (a backup's first state)."""
        wires: dict[int, Properties] = {}
        references = self.references
        out: list[TopicState] = []
        for topic in self.tree:
            spec = topic.specification
            if (not spec.persistent and not volatile) or topic.path in references:
                continue
            wire = wires.get(id(spec))
            if wire is None:
                wire = wires[id(spec)] = _spec_wire(spec)
            log = topic.log
            removal = self.removals.kept(topic.path) if self.removals.watched else None
            if log is None:
                out.append(TopicState(topic.path, spec.type.value, wire, topic.value, None, 0,
                                      self.attributes.get(topic.path, b""), removal))
            else:
                out.append(TopicState(topic.path, spec.type.value, wire, None, log.events(), log.next_sequence,
                                      b"", removal))
        return out

    def load(self, states: Iterable[TopicState]) -> int:
        """Put the topics of a :meth:`state` into this store (replacing a normal
        topic already at a path); return how many. No events, no changes."""
        n = 0
        specification = _SpecificationCache()
        for state in states:
            spec = specification(state.type, state.properties)
            topic = self._restore_topic(state.path, spec, state.value, state.attributes)
            if topic is None:
                continue
            if topic.log is not None:
                topic.log = EventLog.restored(spec.retained_range, state.events or (), state.next_sequence)
            self._rewatch(topic.path, spec, state.removal)
            n += 1
        return n

    def replay(self, changes: Iterable[Change], times: Iterable[int] | int | None = None) -> int:
        """Apply recorded changes in order, as they were applied to the
        original; return how many did not apply. No events, no changes.
        ``times``: when each change was recorded (one time for them all, or one per change;
        at or after the change was made): the last update of a topic with a REMOVAL policy.

        On the state they were recorded after, every change applies. Replaying
        changes a state already holds is harmless (an add replaces the topic,
        events the log already has are skipped, a set or remove of a missing
        topic is skipped): those count as not applied.
        """
        skipped = 0
        tree = self.tree
        specification = _SpecificationCache()
        watched = self.removals.watched
        at = itertools.repeat(times) if times is None or isinstance(times, int) else iter(times)
        for change in changes:
            kind = type(change)
            when = next(at)
            if watched and when is not None and kind is not TopicRemoved and change.path in watched:
                self.removals.updated(change.path, when)
            if kind is ValueSet:
                assert isinstance(change, ValueSet)
                topic = tree.get(change.path)
                if (topic is None or topic.log is not None or topic.type.value != change.type
                        or change.path in self.references):
                    skipped += 1
                else:
                    self._store(topic, change.value, change.attributes)
            elif kind is EventAppended:
                assert isinstance(change, EventAppended)
                topic = tree.get(change.path)
                log = topic.log if topic is not None else None
                if log is None or change.path in self.references or change.event.sequence < log.next_sequence:
                    skipped += 1
                    continue
                try:
                    log.put(change.event)
                except (TopicModelError, ValueError):
                    skipped += 1
            elif kind is TopicAdded:
                assert isinstance(change, TopicAdded)
                spec = specification(change.type, change.properties)
                if self._restore_topic(change.path, spec, change.value, change.attributes) is None:
                    skipped += 1
                else:
                    self._rewatch(change.path, spec, change.removal)
            elif kind is TopicRemoved:
                if change.path in self.references or tree.remove(change.path) is None:
                    skipped += 1
                else:
                    self._forget(change.path)
                    self.removals.removed(change.path)
            else:
                raise TypeError(f"not a change: {change!r}")
        return skipped

    def _rewatch(self, path: str, spec: TopicSpecification, kept: list[Any] | None) -> None:
        """Watch a restored topic's REMOVAL policy again from what was ``kept`` (without it,
        as if created now: later, never earlier)."""
        policy = spec.get(REMOVAL)
        if policy is None:
            return
        if kept is None:
            self.removals.added(path, policy, self.clock())
        else:
            created, creator, roles, updated = kept
            self.removals.added(path, policy, created, creator, roles, updated)

    # -- removal policies --------------------------------------------------

    def removal_facts(self, link: str, op: RemovalFacts) -> RemovalWatch:
        """A gateway's report (:class:`~topics.protocol.RemovalFacts`): kept when it answers the
        interest of now; the answer is the interest, with the due ``remove`` clauses handed
        to this gateway to carry out."""
        tracker = self.removals
        watch = tracker.watch()
        if op.version == watch.version:
            tracker.report(link, self.clock(), op.subscriptions, op.sessions, op.creators)
        removals, self.removal_outbox = [[d.selector, d.roles] for d in self.removal_outbox], []
        return RemovalWatch(watch.version, list(watch.paths), list(watch.filters), list(watch.creators), removals)

    def expire(self, now_ms: int) -> int:
        """Remove what the removal policies due at ``now_ms`` say (a policy topic itself here;
        a ``remove`` clause waits in :attr:`removal_outbox` for a gateway); how many topics
        were removed here."""
        removed = 0
        for due in self.removals.due(now_ms):
            if due.local:
                removed += self.remove(due.selector)
            else:
                self.removal_outbox.append(due)
        return removed

    def _restore_topic(
        self, path: str, spec: TopicSpecification, value: bytes | None, attributes: bytes = b""
    ) -> Topic | None:
        """A fresh topic at ``path`` (replacing a normal one), holding ``value`` (and what it
        was published with); ``None`` when a reference topic holds the path."""
        if path in self.references:
            return None
        self.tree.remove(path)
        self._forget(path)
        self.removals.removed(path)
        topic, _ = self.tree.add(path, spec)
        if value is not None and topic.log is None:
            self._store(topic, value, attributes)
        return topic

    # -- reference topics (topic views) ------------------------------------

    def ref_put(
        self,
        path: str,
        precedence: int,
        view: str,
        type_name: str,
        properties: dict[str, str] | None,
        value: bytes | None,
        event: RefEvent | None = None,
        retain: bool = True,
    ) -> bool:
        """Claim ``path``; True when a fan-out claim (a negative precedence) finds another
        fan-out claim on the path: two links mirror one topic, and the lower precedence wins.
        Not ``retain``: no claim, ``value`` is delivered as a :class:`Changed` not retained
        when the claim of ``precedence`` holds the path, and kept nowhere."""
        spec = TopicSpecification.of(type_name, properties)
        if value is not None:
            value = values.validate(spec.type, value) if spec.type is not TopicType.TIME_SERIES else None
        if not retain:
            topic = self.tree.get(path)
            if value is not None and self.references.get(path) == precedence and topic is not None \
                    and topic.specification == spec:
                self._message(path, Changed(path, value, False))
            return False
        claims = self.claims.setdefault(path, {})
        claims[precedence] = _Claim(view, spec, value)
        self._rebind(path)
        if event is not None and self.references.get(path) == precedence:
            self._ref_append(path, event)
        return precedence < 0 and any(p < 0 and p != precedence for p in claims)

    def ref_reserve(self, path: str, precedence: int, view: str) -> None:
        claims = self.claims.setdefault(path, {})
        if precedence not in claims:
            claims[precedence] = _Claim(view, None, None)
            self._rebind(path)

    def ref_drop(self, path: str, precedence: int) -> None:
        claims = self.claims.get(path)
        if claims is None or claims.pop(precedence, None) is None:
            return
        if not claims:
            del self.claims[path]
        self._rebind(path)

    def ref_drop_view(self, precedence: int) -> int:
        """Drop every claim of one view; return how many there were."""
        chosen = [p for p, claims in self.claims.items() if precedence in claims]
        for path in chosen:
            self.ref_drop(path, precedence)
        return len(chosen)

    def _rebind(self, path: str) -> None:
        """Bind ``path`` to what its claims say now (a normal topic always stays)."""
        bound = self.references.get(path)
        if bound is None and path in self.tree:
            return  # a normal topic holds the path
        claims = self.claims.get(path)
        winner = min(claims) if claims else None
        claim = claims[winner] if claims and winner is not None else None
        if claim is None or claim.spec is None:
            if bound is not None:
                self._unbind(path)
            return
        if bound is not None:
            topic = self.tree.get(path)
            assert topic is not None
            if bound == winner and topic.specification == claim.spec:
                if claim.value is not None and claim.value != topic.value:
                    self._store(topic, claim.value)
                    self._message(path, Changed(path, claim.value))
                return
            self._unbind(path)
        topic, _ = self.tree.add(path, claim.spec)
        self.references[path] = winner  # type: ignore[assignment]
        if claim.value is not None:
            self._store(topic, claim.value)
        spec = claim.spec
        added = Added(path, spec.type.value, _spec_wire(spec), topic.value)
        if topic.value is not None:
            self._message(path, added)
        else:
            self._emit(path, added)

    def _unbind(self, path: str) -> None:
        del self.references[path]
        self.tree.remove(path)
        self._forget(path)
        self._emit(path, Removed(path))

    def _ref_append(self, path: str, event: RefEvent) -> None:
        topic = self.tree.get(path)
        if topic is None or topic.log is None or topic.specification.event_type is None:
            return
        data, timestamp, author = event.value, event.timestamp, event.author
        stored = values.validate(topic.specification.event_type, data)
        latest = topic.log.latest
        if latest is not None and timestamp < latest.timestamp:
            timestamp = latest.timestamp
        appended = topic.log.append(stored, timestamp, author)
        self._message(path, Appended(path, appended))

    # -- registrations -----------------------------------------------------

    def register(self, gateway: str, selector: str, token: int, structure: bool = False) -> None:
        sel = parse_selector(selector)
        if structure:
            self.outline.add(sel, gateway)
            self._outlines.setdefault(gateway, set()).add(sel)
            shapes = self._events.setdefault(gateway, [])
            for topic in self.tree.select(sel):
                shapes.append(Present(token, topic.path, topic.specification.type.value, _spec_wire(topic.specification)))
            shapes.append(End(token))
            return
        self.index.add(sel, gateway)
        self._registrations.setdefault(gateway, set()).add(sel)
        out = self._events.setdefault(gateway, [])
        attributes = self.attributes
        for topic in self.tree.select(sel):
            spec = topic.specification
            out.append(Snapshot(token, topic.path, spec.type.value, _spec_wire(spec), topic.value,
                                attributes.get(topic.path, b"") if attributes else b""))
            if topic.log is not None:
                window = spec.subscription_range or DEFAULT_SUBSCRIPTION_RANGE
                for event in topic.log.tail(window):
                    out.append(Appended(topic.path, event))
        out.append(End(token))

    def unregister(self, gateway: str, selector: str, structure: bool = False) -> None:
        sel = parse_selector(selector)
        index, by_link = (self.outline, self._outlines) if structure else (self.index, self._registrations)
        index.remove(sel, gateway)
        registered = by_link.get(gateway)
        if registered is not None:
            registered.discard(sel)
            if not registered:
                del by_link[gateway]

    def drop_gateway(self, gateway: str) -> int:
        """Forget every registration of a gateway that went away."""
        selectors = self._registrations.pop(gateway, set())
        for sel in selectors:
            self.index.remove(sel, gateway)
        outlines = self._outlines.pop(gateway, set())
        for sel in outlines:
            self.outline.remove(sel, gateway)
        self._events.pop(gateway, None)
        self.removals.forget(gateway)
        return len(selectors) + len(outlines)

    def gateways(self) -> list[str]:
        return sorted(self._registrations.keys() | self._outlines.keys())


def _accepted(value_type: TopicType, data: bytes, raw: bool | str, plain: bool = False) -> bytes:
    """What to store of a value received in the form ``raw`` says (see :meth:`TopicStore.set`);
    with ``plain`` (VALIDATE_VALUES) it must also be :func:`~topics.types.check_plain`."""
    if raw == values.TEXT:
        return values.from_text(value_type, data)  # makes plain CBOR
    stored = values.accept(value_type, data, raw=bool(raw))
    if plain:
        values.check_plain(value_type, stored)
    return stored
