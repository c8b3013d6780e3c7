"""Change records and topic states: what a partition journals and snapshots (pure).

A :class:`~topics.store.TopicStore` that records changes turns every change
it applies to a *persistent* topic (PERSISTENT not ``false``) into a
:class:`Change`; :meth:`~topics.store.TopicStore.drain_changes` hands them
out in the order they happened. Reference topics of views are never
recorded: they are rebuilt from their sources.

=====================  ============================================================
change                 recorded when
=====================  ============================================================
:class:`TopicAdded`    a topic is created (by ``add`` or by ``set`` with
                       add-if-missing: then ``value`` is its first value)
:class:`ValueSet`      a topic's value is set (``type``: the topic type)
:class:`TopicRemoved`  a topic is removed
:class:`EventAppended` a time series event is appended or edited: the
                       :class:`~topics.timeseries.Event` as the log numbered
                       it (an edit carries its ``original_*`` fields);
                       ``type``: the event value type
=====================  ============================================================

A :class:`TopicState` is one persistent topic as a snapshot holds it:
specification, value, and for a TIME_SERIES topic its retained events and
the sequence number the next event gets. ``TopicStore.state()`` →
``TopicStore.load()``, then ``TopicStore.replay()`` of the changes made
after the state was taken, rebuild the store.

Each kind has exactly one encoder and one decoder here (to plain lists of
msgpack-able values); nobody else indexes into the encoded lists::

    TopicAdded     [1, path, type, properties, value | None (, attributes (, removal))]
    ValueSet       [2, path, type, value (, attributes)]
    TopicRemoved   [3, path]
    EventAppended  [4, path, type, sequence, timestamp, author, value,
                    original_sequence, original_timestamp, original_author]
    TopicState     [path, type, properties, value | None, events | None, next_sequence (, attributes (, removal))]
                   events: [[sequence, timestamp, author, value,
                             original_sequence, original_timestamp, original_author], ...]

``properties`` is ``[[name, value], ...]``, sorted by name (the
specification's items); values are the stored bytes. ``attributes`` (left off when empty)
are what a retained value was published with (MQTT 5 message properties: see
:mod:`mqtt.attributes`), kept with it so that a later subscriber receives them too.
``removal`` (left off when ``None``) is what a topic with a REMOVAL policy keeps for its
watch (:meth:`topics.removal_tracker.RemovalTracker.kept`): ``[created_ms, creator,
roles, last_update_ms]``, so a store rebuilt from a journal, a snapshot or a backup's
prime never finds a policy due earlier than the original would have.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from topics.specification import TopicSpecification
from topics.timeseries import Event

__all__ = [
    "Change", "ChangeFormatError", "EventAppended", "Properties", "TopicAdded", "TopicRemoved", "TopicState",
    "ValueSet", "decode_change", "decode_state", "encode_change", "encode_state", "operation_name", "persistent_only",
]

Properties = list[list[str]]
"""A specification's items as lists: ``[[name, value], ...]``."""


class ChangeFormatError(ValueError):
    """An encoded change or topic state that is not one."""


class TopicAdded(NamedTuple):
    path: str
    type: str
    properties: Properties
    value: bytes | None
    attributes: bytes = b""
    removal: list[Any] | None = None

    def specification(self) -> TopicSpecification:
        return TopicSpecification.of(self.type, dict(_pairs(self.properties)))


class ValueSet(NamedTuple):
    path: str
    type: str
    value: bytes
    attributes: bytes = b""


class TopicRemoved(NamedTuple):
    path: str


class EventAppended(NamedTuple):
    """A time series event or edit, numbered as the topic's log numbered it."""

    path: str
    type: str
    event: Event


Change = TopicAdded | ValueSet | TopicRemoved | EventAppended


class TopicState(NamedTuple):
    """One persistent topic as a snapshot holds it. ``events`` (a TIME_SERIES
    topic's retained events in sequence order) is ``None`` for other topics,
    whose ``next_sequence`` is 0."""

    path: str
    type: str
    properties: Properties
    value: bytes | None
    events: tuple[Event, ...] | None = None
    next_sequence: int = 0
    attributes: bytes = b""
    removal: list[Any] | None = None

    def specification(self) -> TopicSpecification:
        return TopicSpecification.of(self.type, dict(_pairs(self.properties)))


def persistent_only(changes: list[Change], volatile: list[int]) -> list[Change]:
    """``changes`` without those at the positions ``volatile`` names (changes to
    topics that are not persistent: replicated, never journaled)."""
    if not volatile:
        return changes
    skip = set(volatile)
    return [c for i, c in enumerate(changes) if i not in skip]


def operation_name(change: Change) -> str:
    """The change's operation as the history tables name it: add, set, remove, append or edit."""
    if type(change) is EventAppended:
        return "edit" if change.event.is_edit else "append"
    return _NAMES[type(change)]


_NAMES: dict[type[Any], str] = {TopicAdded: "add", ValueSet: "set", TopicRemoved: "remove"}
_ADDED, _SET, _REMOVED, _APPENDED = 1, 2, 3, 4


def _event_wire(e: Event) -> list[Any]:
    return [e.sequence, e.timestamp, e.author, e.value, e.original_sequence, e.original_timestamp,
            e.original_author]


def _event_of(fields: Any) -> Event:
    if not isinstance(fields, list) or len(fields) != 7:
        raise ChangeFormatError(f"a time series event has 7 fields, got {fields!r}")
    seq, ts, author, value, oseq, ots, oauthor = fields
    if not (_is_int(seq) and _is_int(ts) and isinstance(author, str) and isinstance(value, bytes)):
        raise ChangeFormatError(f"not a time series event: {fields!r}")
    if not ((oseq is None and ots is None and oauthor is None)
            or (_is_int(oseq) and _is_int(ots) and isinstance(oauthor, str))):
        raise ChangeFormatError(f"not an edit's original: {fields!r}")
    return Event(seq, ts, author, value, oseq, ots, oauthor)


def encode_change(change: Change) -> list[Any]:
    kind = type(change)
    if kind is ValueSet:  # the most frequent first
        return [_SET, *change] if change.attributes else [_SET, *change[:3]]  # type: ignore[union-attr]
    if kind is EventAppended:
        assert isinstance(change, EventAppended)
        return [_APPENDED, change.path, change.type, *_event_wire(change.event)]
    if kind is TopicAdded:
        if change.removal is not None:  # type: ignore[union-attr]
            return [_ADDED, *change]
        return [_ADDED, *change[:5]] if change.attributes else [_ADDED, *change[:4]]  # type: ignore[union-attr]
    if kind is TopicRemoved:
        return [_REMOVED, *change]
    raise TypeError(f"not a change: {change!r}")


def decode_change(item: Any) -> Change:
    """The change an encoded list stands for; :class:`ChangeFormatError` if none."""
    if not isinstance(item, list) or not item:
        raise ChangeFormatError(f"a change is a non-empty list, got {item!r}")
    code, n = item[0], len(item)
    if code == _SET and n in (4, 5):
        path, type_name, value = item[1:4]
        attributes = item[4] if n == 5 else b""
        if isinstance(path, str) and isinstance(type_name, str) and isinstance(value, bytes) \
                and isinstance(attributes, bytes):
            return ValueSet(path, type_name, value, attributes)
    elif code == _APPENDED and n == 10:
        if isinstance(item[1], str) and isinstance(item[2], str):
            return EventAppended(item[1], item[2], _event_of(item[3:]))
    elif code == _ADDED and n in (5, 6, 7):
        path, type_name, properties, value = item[1:5]
        attributes = item[5] if n >= 6 else b""
        removal = item[6] if n == 7 else None
        if (isinstance(path, str) and isinstance(type_name, str) and _is_properties(properties)
                and (value is None or isinstance(value, bytes)) and isinstance(attributes, bytes)
                and _is_removal(removal)):
            return TopicAdded(path, type_name, properties, value, attributes, removal)
    elif code == _REMOVED and n == 2:
        if isinstance(item[1], str):
            return TopicRemoved(item[1])
    raise ChangeFormatError(f"not a change: {item!r}")


def encode_state(state: TopicState) -> list[Any]:
    events = state.events
    out = [state.path, state.type, state.properties, state.value,
           None if events is None else [_event_wire(e) for e in events], state.next_sequence]
    if state.attributes or state.removal is not None:
        out.append(state.attributes)
    if state.removal is not None:
        out.append(state.removal)
    return out


def decode_state(item: Any) -> TopicState:
    """The topic state an encoded list stands for; :class:`ChangeFormatError` if none."""
    if not isinstance(item, list) or len(item) not in (6, 7, 8):
        raise ChangeFormatError(f"a topic state is a list of 6 to 8, got {item!r}")
    path, type_name, properties, value, events, next_sequence = item[:6]
    attributes = item[6] if len(item) >= 7 else b""
    removal = item[7] if len(item) == 8 else None
    if not (isinstance(path, str) and isinstance(type_name, str) and _is_properties(properties)
            and (value is None or isinstance(value, bytes)) and _is_int(next_sequence)
            and (events is None or isinstance(events, list)) and isinstance(attributes, bytes)
            and _is_removal(removal)):
        raise ChangeFormatError(f"not a topic state: {item!r}")
    return TopicState(path, type_name, properties, value,
                      None if events is None else tuple(_event_of(e) for e in events), next_sequence, attributes,
                      removal)


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_removal(value: Any) -> bool:
    """``None`` or ``[created_ms, creator | None, roles | None, last_update_ms | None]``."""
    if value is None:
        return True
    if not (isinstance(value, list) and len(value) == 4):
        return False
    created, creator, roles, updated = value
    return (_is_int(created) and (creator is None or isinstance(creator, str))
            and (roles is None or (isinstance(roles, list) and all(isinstance(r, str) for r in roles)))
            and (updated is None or _is_int(updated)))


def _is_properties(value: Any) -> bool:
    return isinstance(value, list) and (not value or all(
        isinstance(p, list) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], str) for p in value
    ))


def _pairs(properties: Properties) -> list[tuple[str, str]]:
    return [(name, value) for name, value in properties]
