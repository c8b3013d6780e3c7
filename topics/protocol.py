"""The partition protocol: what crosses between a partition and its links (pure).

A *link* (a gateway, the view evaluator, later a fan-out link) talks to each
partition over one ordered byte stream. This module is the only place that
knows how the values on that stream are laid out: the *operations* a link
asks a partition to apply, their *results*, the *events* a partition streams
to the links whose selectors match, and the *frames* that carry them. Each
kind is a typed, immutable value with exactly one encoder and one decoder
here; nobody else indexes into the encoded lists.

Frames (one msgpack array each, back to back on the stream)::

    link -> partition   Hello(link, secret, epoch)   first frame, once
                        Batch(sequence, operations)  sequence 1, 2, 3, ...
    partition -> link   Done(sequence, results, events, applied_ns, position)
                        Events(events, position)

    primary -> backup   Follow(secret, epoch)        first frame, once
                        Prime(id, sequence, states, final, position, recent)
                        Replicate(id, first, timestamp, changes, volatile, recent, position)
    backup -> primary   Replicated(id)
                        Superseded(epoch)            the follow was refused: a newer
                                                     epoch's primary took over

A replica that is not (or no longer) the partition's primary answers every
operation of a batch with ``Failed("MOVED", ...)`` without applying any: the
link sends them again to the primary the partition map names.

A partition applies a :class:`Batch` in order and answers one :class:`Done`
with a result per operation (:class:`Ok` or :class:`Failed`, in order) and
the events the batch produced for *this* link; the events it produced for
other links reach them in :class:`Events` frames. Because each stream is
ordered, a link sees every partition's events in the order the partition
made them, and a batch's own events before its results.

Operations and their result payloads:

=====================  ================================================
operation              ``Ok`` payload
=====================  ================================================
:class:`AddTopic`      ``"CREATED"`` or ``"EXISTS"``
:class:`SetValue`      ``"CREATED"`` or ``None``
:class:`PatchJson`     ``None``
:class:`RemoveTopics`  number of topics removed
:class:`FetchTopics`   list of :class:`TopicRow`, sorted by path
:class:`Register`      ``None`` (a snapshot follows as events)
:class:`Unregister`    ``None``
:class:`AppendEvent`   :class:`EventMeta`
:class:`EditEvent`     :class:`EditMeta`
:class:`QueryEvents`   :class:`QueryAnswer`
:class:`ReadRecent`    :class:`RecentAnswer`
:class:`CountTopics`   per selector, ``{type: topics}`` (a metric collector's figure)
:class:`RemovalFacts`  :class:`RemovalWatch` (what removal policies need next)
:class:`RefPut` ...    ``None`` (:class:`RefDropView`: claims dropped)
=====================  ================================================

Events: :class:`Snapshot` (a registration's current state, per topic),
:class:`End` (that snapshot is complete), :class:`Added`, :class:`Changed`,
:class:`Removed` and :class:`Appended` (a time series event or edit); for a
*structure* registration (:attr:`Register.structure`: topic notifications, which
need the tree's shape and no value) :class:`Present` and :class:`Absent` instead,
and never a value.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, NamedTuple

import msgpack

from topics import constraints
from topics.constraints import Constraint
from topics.errors import ConstraintError
from topics.timeseries import Event

__all__ = [
    "Absent", "AddTopic", "Added", "AppendEvent", "Appended", "Batch", "Changed", "CountTopics", "Done", "EditEvent",
    "EditMeta", "End", "EventMeta", "Events", "Failed", "FetchTopics", "Follow", "FrameReader", "Hello", "MOVED", "Ok",
    "PatchJson", "Present", "Prime", "ProtocolError", "QueryAnswer", "QueryEvents", "RefDrop", "RefDropView", "RefEvent", "RefPut",
    "RefReserve", "Register", "RemovalFacts", "RemovalWatch", "Removed", "RemoveTopics", "Replicate", "Replicated", "SetValue", "Snapshot",
    "Superseded",
    "TopicRow", "Unregister",
    "decode_event", "decode_operation", "decode_result", "encode_event", "encode_frame",
    "encode_operation", "encode_result",
]

#: the failure code of an operation sent to a replica that is not the partition's primary (not applied)
MOVED = "MOVED"

Properties = list[list[str]]
"""A specification's properties on the stream: ``[[name, value], ...]``."""


class ProtocolError(ValueError):
    """Bytes or lists that are not a valid partition protocol value."""

    code = "INVALID_REQUEST"


# -- operations ------------------------------------------------------------------


class AddTopic(NamedTuple):
    """Add a topic. A topic with a REMOVAL policy carries who created it (the session id and
    its roles then: :mod:`topics.removal_tracker` watches the session and removes with the roles)."""

    path: str
    type: str
    properties: dict[str, str] | None = None
    creator: str | None = None
    roles: list[str] | None = None


class SetValue(NamedTuple):
    """Set a topic's value; ``raw`` and ``retain`` as :meth:`topics.store.TopicStore.set` says
    (``author``: who appends, when a text value goes to a TIME_SERIES topic)."""

    path: str
    data: bytes
    raw: bool | str
    type: str | None = None
    add_if_missing: bool = False
    retain: bool = True
    author: str = ""
    #: opaque bytes delivered with the value to the subscribers, never stored (an MQTT 5
    #: publish's message properties: response topic, correlation data, user properties ...)
    attributes: bytes = b""
    #: applied only when this holds against the topic as it is (:mod:`topics.constraints`)
    constraint: Constraint | None = None
    #: a principal the gateway found without the permission the update needs: applied only
    #: when the topic's OWNER names it (:mod:`topics.owner`)
    owner: str = ""


class PatchJson(NamedTuple):
    """Apply an RFC 6902 patch (JSON text) to a JSON topic's value, when ``constraint`` (if
    any) holds (:meth:`topics.store.TopicStore.patch`)."""

    path: str
    patch: str
    constraint: Constraint | None = None
    owner: str = ""  # as SetValue's


class RemoveTopics(NamedTuple):
    selector: str
    owner: str = ""  # as SetValue's (the selector then names one path)


class FetchTopics(NamedTuple):
    selector: str
    with_values: bool = True
    with_properties: bool = False
    types: list[str] | None = None
    limit: int | None = None


class Register(NamedTuple):
    """Stream this link the events of ``selector``, starting with a snapshot tagged ``token``.

    With ``structure`` the registration hears of topics only, never of values: its snapshot
    is :class:`Present` events, then a :class:`Present` (token 0) for each topic added and an
    :class:`Absent` for each removed; no value, no :class:`Changed` or :class:`Appended`
    travels for it. A link's structure and value registrations of one selector are two."""

    selector: str
    token: int
    structure: bool = False


class Unregister(NamedTuple):
    selector: str
    structure: bool = False


class AppendEvent(NamedTuple):
    path: str
    data: bytes
    raw: bool
    timestamp: int | None = None
    author: str = ""
    owner: str = ""  # as SetValue's


class EditEvent(NamedTuple):
    path: str
    original_sequence: int
    data: bytes
    raw: bool
    author: str = ""
    own_only: bool = False


class QueryEvents(NamedTuple):
    path: str
    anchor: str
    anchor_value: int
    span: str
    span_value: int
    view: str
    limit: int | None = None


class RefEvent(NamedTuple):
    """A time series event a reference topic appends: value, time (ms), author."""

    value: bytes
    timestamp: int
    author: str


class RefPut(NamedTuple):
    """A view's claim on a reference topic path (lower precedence wins). With ``retain``
    false it claims nothing: ``value`` goes to the topic's subscribers (if the claim holds
    the path) without becoming its value (a fan-out replica of an MQTT publish without
    RETAIN)."""

    path: str
    precedence: int
    view: str
    type: str
    properties: dict[str, str] | None
    value: bytes | None
    event: RefEvent | None = None
    retain: bool = True


class RefReserve(NamedTuple):
    path: str
    precedence: int
    view: str


class RefDrop(NamedTuple):
    path: str
    precedence: int


class RefDropView(NamedTuple):
    precedence: int


class ReadRecent(NamedTuple):
    """The partition's recent messages after position ``since`` on paths that one of
    ``selectors`` selects (:meth:`topics.store.TopicStore.recent_since`); answered with a
    :class:`RecentAnswer`."""

    selectors: list[str]
    since: int


class RemovalFacts(NamedTuple):
    """A gateway's report on what the partition's removal policies need
    (:class:`~topics.removal_tracker.RemovalTracker`), answering the interest of ``version``:
    per watched path, how many of its sessions are subscribed; per session filter, how many of
    its sessions match; per creator session id, whether it is open here."""

    version: int
    subscriptions: dict[str, int]
    sessions: dict[str, int]
    creators: dict[str, bool]


class CountTopics(NamedTuple):
    """How many of the partition's topics each of ``selectors`` selects, by topic type
    (:meth:`topics.store.TopicStore.count`): one ``{type: count}`` per selector, in order."""

    selectors: list[str]


Operation = (
    AddTopic | SetValue | RemoveTopics | FetchTopics | Register | Unregister | AppendEvent | EditEvent
    | QueryEvents | RefPut | RefReserve | RefDrop | RefDropView | ReadRecent | CountTopics | PatchJson
    | RemovalFacts
)

_OPERATIONS: tuple[type[Any], ...] = (
    AddTopic, SetValue, RemoveTopics, FetchTopics, Register, Unregister, AppendEvent, EditEvent,
    QueryEvents, RefPut, RefReserve, RefDrop, RefDropView, ReadRecent, CountTopics, PatchJson,
    RemovalFacts,
)
_OP_CODE: dict[type[Any], int] = {cls: code for code, cls in enumerate(_OPERATIONS, 1)}
_SET = _OP_CODE[SetValue]
_PATCH = _OP_CODE[PatchJson]


def encode_operation(op: Operation) -> list[Any]:
    kind = type(op)
    if (kind is Register or kind is Unregister) and not op.structure:  # type: ignore[union-attr]
        return [_OP_CODE[kind], *op[:-1]]  # the common registration: its default stays off the wire
    if kind is SetValue:
        assert isinstance(op, SetValue)
        if op.retain and not op.author and not op.attributes and op.constraint is None and not op.owner:
            return [_SET, *op[:5]]  # the common set: its defaults stay off the wire
        fields = [_SET, *op[:8], constraints.to_wire(op.constraint) if op.constraint is not None else None]
        return [*fields, op.owner] if op.owner else fields
    if kind is PatchJson:
        assert isinstance(op, PatchJson)
        fields = [_PATCH, op.path, op.patch, constraints.to_wire(op.constraint) if op.constraint is not None else None]
        return [*fields, op.owner] if op.owner else fields
    if (kind is RemoveTopics or kind is AppendEvent) and not op.owner:  # type: ignore[union-attr]
        return [_OP_CODE[kind], *op[:-1]]
    return [_OP_CODE[kind], *op]


def decode_operation(item: Any) -> Operation:
    """The operation an encoded list stands for; :class:`ProtocolError` if none."""
    cls = _kind(item, _OPERATIONS, "operation")
    op = _make(cls, item)
    if cls is RefPut and op.event is not None:
        event = op.event
        if not isinstance(event, list) or len(event) != 3:
            raise ProtocolError(f"a reference topic event is [value, timestamp, author], got {event!r}")
        op = op._replace(event=RefEvent(*event))
    elif (cls is SetValue or cls is PatchJson) and op.constraint is not None:
        try:
            op = op._replace(constraint=constraints.from_wire(op.constraint))
        except ConstraintError as e:
            raise ProtocolError(str(e)) from None
    return op  # type: ignore[no-any-return]


def _kind(item: Any, kinds: tuple[type[Any], ...], what: str) -> Any:
    """The class an encoded ``[code, ...]`` list stands for."""
    if not isinstance(item, list) or not item:
        raise ProtocolError(f"an {what} is a non-empty list" if what[0] in "aeiou" else f"a {what} is a non-empty list")
    code = item[0]
    if not isinstance(code, int) or isinstance(code, bool) or not 1 <= code <= len(kinds):
        raise ProtocolError(f"unknown {what} code {code!r}")
    return kinds[code - 1]


def _make(cls: Any, item: list[Any]) -> Any:
    fields = len(item) - 1
    required = len(cls._fields) - len(cls._field_defaults)
    if not required <= fields <= len(cls._fields):
        raise ProtocolError(
            f"{cls.__name__} has {required}..{len(cls._fields)} fields, got {fields}"
            if required != len(cls._fields)
            else f"{cls.__name__} has {required} fields, got {fields}"
        )
    return cls(*item[1:])


# -- results ---------------------------------------------------------------------------


class Ok(NamedTuple):
    value: Any = None


class Failed(NamedTuple):
    code: str
    message: str


Result = Ok | Failed


class TopicRow(NamedTuple):
    """One topic of a fetch. A TIME_SERIES topic's value is its newest event's
    value as it now reads, encoded with ``event_type``."""

    path: str
    type: str
    properties: Properties | None
    value: bytes | None
    event_type: str | None


class EventMeta(NamedTuple):
    sequence: int
    timestamp: int
    author: str


class EditMeta(NamedTuple):
    sequence: int
    timestamp: int
    author: str
    original_sequence: int
    original_timestamp: int
    original_author: str


class QueryAnswer(NamedTuple):
    selected_count: int
    events: list[Event]
    event_type: str


class RemovalWatch(NamedTuple):
    """What a partition answers a :class:`RemovalFacts`: the interest its removal policies
    have now (``version``; the paths, filters and creator sessions to report on) and the
    ``removals`` it hands this gateway to carry out across partitions: ``[selector, roles]``
    pairs, the roles ``None`` when the creator's are unknown (nothing is checked)."""

    version: int
    paths: list[str]
    filters: list[str]
    creators: list[str]
    removals: list[list[Any]]


class RecentAnswer(NamedTuple):
    """What :class:`ReadRecent` found: the positions of the oldest and the newest message
    the partition keeps, and the chosen messages (events), oldest first."""

    first: int
    last: int
    events: list[Any]


def encode_result(result: Result) -> list[Any]:
    if isinstance(result, Failed):
        return [1, result.code, result.message]
    value = result.value
    if type(value) is QueryAnswer:
        value = [value.selected_count, [_event_wire(e) for e in value.events], value.event_type]
    elif type(value) is RecentAnswer:
        value = [value.first, value.last, [encode_event(e) for e in value.events]]
    elif type(value) is RemovalWatch:
        value = list(value)
    return [0, value]


def decode_result(op: Operation, item: Any) -> Result:
    """The result of ``op`` from its encoded list (the payload typed by the operation)."""
    if not isinstance(item, list) or not item:
        raise ProtocolError("a result is a non-empty list")
    if item[0] == 1 and len(item) == 3:
        return Failed(item[1], item[2])
    if item[0] != 0 or len(item) != 2:
        raise ProtocolError(f"not a result: {item!r}")
    value = item[1]
    kind = type(op)
    if kind is FetchTopics:
        value = [TopicRow(*row) for row in value]
    elif kind is AppendEvent:
        value = EventMeta(*value)
    elif kind is EditEvent:
        value = EditMeta(*value)
    elif kind is QueryEvents:
        value = QueryAnswer(value[0], [_event_of(e) for e in value[1]], value[2])
    elif kind is ReadRecent:
        if not isinstance(value, list) or len(value) != 3 or not isinstance(value[2], list):
            raise ProtocolError(f"recent messages are [first, last, events], got {value!r}")
        value = RecentAnswer(value[0], value[1], [decode_event(e) for e in value[2]])
    elif kind is RemovalFacts:
        if not isinstance(value, list) or len(value) != 5:
            raise ProtocolError(f"a removal watch is [version, paths, filters, creators, removals], got {value!r}")
        value = RemovalWatch(*value)
    return Ok(value)


# -- events -----------------------------------------------------------------------------


class Snapshot(NamedTuple):
    """A topic as a registration found it; ``attributes``: what its value was published
    with (see :class:`Changed`), kept with it."""

    token: int
    path: str
    type: str
    properties: Properties
    value: bytes | None
    attributes: bytes = b""


class End(NamedTuple):
    token: int


class Added(NamedTuple):
    path: str
    type: str
    properties: Properties
    value: bytes | None


class Changed(NamedTuple):
    """A topic's new value; ``retained`` false: delivered, not kept (an MQTT publish without
    the retain flag): caches keep the value they had."""

    path: str
    value: bytes
    retained: bool = True
    attributes: bytes = b""


class Removed(NamedTuple):
    path: str


class Appended(NamedTuple):
    """A time series event (or an edit) of the topic at ``path``."""

    path: str
    event: Event


class Present(NamedTuple):
    """For a structure registration (:attr:`Register.structure`): a topic is bound at
    ``path``, found by the registration's snapshot (its ``token``) or just added (token 0)."""

    token: int
    path: str
    type: str
    properties: Properties


class Absent(NamedTuple):
    """For a structure registration: the topic at ``path`` was removed."""

    path: str


TopicEvent = Snapshot | End | Added | Changed | Removed | Appended | Present | Absent
_EVENTS: tuple[type[Any], ...] = (Snapshot, End, Added, Changed, Removed, Appended, Present, Absent)
_EV_CODE: dict[type[Any], int] = {cls: code for code, cls in enumerate(_EVENTS, 1)}
_APPENDED = _EV_CODE[Appended]
_CHANGED = _EV_CODE[Changed]


def _event_wire(e: Event) -> list[Any]:
    return [e.sequence, e.timestamp, e.author, e.value, e.original_sequence, e.original_timestamp, e.original_author]


def _event_of(fields: list[Any]) -> Event:
    if not isinstance(fields, list) or len(fields) != 7:
        raise ProtocolError(f"a time series event has 7 fields, got {fields!r}")
    return Event(*fields)


def encode_event(event: TopicEvent) -> list[Any]:
    kind = type(event)
    if kind is Appended:
        return [_APPENDED, event.path, _event_wire(event.event)]  # type: ignore[union-attr]
    if kind is Changed and event.retained and not event.attributes:  # type: ignore[union-attr]
        return [_CHANGED, event.path, event.value]  # type: ignore[union-attr]
    return [_EV_CODE[kind], *event]


def decode_event(item: Any) -> TopicEvent:
    cls = _kind(item, _EVENTS, "event")
    if cls is Appended:
        if len(item) != 3:
            raise ProtocolError(f"Appended has 2 fields, got {len(item) - 1}")
        return Appended(item[1], _event_of(item[2]))
    return _make(cls, item)  # type: ignore[no-any-return]


# -- frames -----------------------------------------------------------------------------
#
# A frame is an envelope: it carries operations, results and events *encoded*
# (lists made by the functions above), so that a partition encodes an event
# once however many links it goes to, and a receiver decodes each item with
# the decoder of its kind.


class Hello(NamedTuple):
    """The first frame of a link: who it is, the partition's secret, and the
    partition map epoch at which the link learnt that this replica is the
    partition's primary (every batch on the stream is sent under that epoch)."""

    link: str
    secret: str
    epoch: int = 0


class Batch(NamedTuple):
    """Operations to apply in order (each from :func:`encode_operation`)."""

    sequence: int
    operations: list[list[Any]]


class Done(NamedTuple):
    """A batch applied: its encoded results in order, and the encoded events
    it made for this link (they happened before the results were sent).
    ``applied_ns`` is the partition's monotonic clock when it had applied the
    batch (comparable with the link's only on the same machine: tracing).
    ``position``: the partition's newest message position after the batch (every
    message this link was to hear of up to there has come by this frame)."""

    sequence: int
    results: list[list[Any]]
    events: list[list[Any]]
    applied_ns: int = 0
    position: int = 0


class Events(NamedTuple):
    """Encoded events that other links' batches made for this link; ``position`` as
    in :class:`Done`."""

    events: list[list[Any]]
    position: int = 0


class Follow(NamedTuple):
    """The first frame of a primary's stream to its backup: the backup's secret
    and the epoch of the placement that made them primary and backup."""

    secret: str
    epoch: int


class Prime(NamedTuple):
    """Part of the primary's whole state (encoded :class:`~topics.changes.TopicState`
    items): a backup starts over from it. ``sequence`` is the primary's last
    journal record; the part with ``final`` completes it. ``id`` numbers what the
    backup acknowledges (:class:`Replicated`). ``position``: the primary's newest
    message position, where the backup's numbering goes on. ``recent``: part of the
    primary's recent messages (encoded events, oldest first, the last of them at
    ``position``), so that a backup promoted or handed the partition soon after its
    prime still gives a session taken up elsewhere what it missed."""

    id: int
    sequence: int
    states: list[list[Any]]
    final: bool
    position: int = 0
    recent: Sequence[list[Any]] = ()


class Replicate(NamedTuple):
    """A batch's changes (encoded :class:`~topics.changes.Change` items, in order),
    applied on the primary at ``timestamp``; ``volatile``: the positions of changes to
    topics that are not persistent (applied, not journaled); ``first``: the journal
    sequence of the first journaled change; ``recent``: the batch's messages (encoded
    events), the last of them at message ``position`` (the backup keeps them as its
    recent messages, numbered as the primary numbered them)."""

    id: int
    first: int
    timestamp: int
    changes: list[list[Any]]
    volatile: list[int]
    recent: Sequence[list[Any]] = ()
    position: int = 0


class Replicated(NamedTuple):
    """The backup applied and journaled everything up to ``id``."""

    id: int


class Superseded(NamedTuple):
    """A backup's answer to a :class:`Follow` from an older epoch: the partition is
    at ``epoch`` now, with another primary; the old one is fenced off."""

    epoch: int


Frame = Hello | Batch | Done | Events | Follow | Prime | Replicate | Replicated | Superseded
_FRAMES: tuple[type[Any], ...] = (Hello, Batch, Done, Events, Follow, Prime, Replicate, Replicated, Superseded)
_FRAME_CODE: dict[type[Any], int] = {cls: code for code, cls in enumerate(_FRAMES, 1)}


def encode_frame(frame: Frame) -> bytes:
    data: bytes = msgpack.packb([_FRAME_CODE[type(frame)], *frame], use_bin_type=True)
    return data


class FrameReader:
    """Sans-I/O decoding of a stream of frames: :meth:`feed` the bytes as
    they arrive, then iterate :meth:`frames` for the complete ones."""

    def __init__(self, max_frame: int = 256 * 1024 * 1024) -> None:
        self._unpacker = msgpack.Unpacker(raw=False, use_list=True, max_buffer_size=max_frame)

    def feed(self, data: bytes) -> None:
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull:
            raise ProtocolError("a frame is larger than the stream allows") from None

    def frames(self) -> Iterator[Frame]:
        try:
            for item in self._unpacker:
                yield _decode_frame(item)
        except msgpack.StackError:  # the C unpacker's fixed stack: 1,024 levels
            raise ProtocolError("a frame nests arrays and maps deeper than msgpack's 1024 levels") from None
        except (msgpack.ExtraData, msgpack.FormatError) as e:
            raise ProtocolError(f"the stream is not msgpack: {e}") from None


def _decode_frame(item: Any) -> Frame:
    frame: Frame = _make(_kind(item, _FRAMES, "frame"), item)
    return frame
