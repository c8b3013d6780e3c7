"""The event log of a TIME_SERIES topic.

An :class:`EventLog` holds the retained events of one time series. Each
event has a *sequence* number (0, 1, 2, ... in order of arrival, never
reused), a *timestamp* (milliseconds since the epoch, never earlier than the
previous event's), an *author* (the principal that wrote it) and a value
(bytes, encoded with the topic's event value type; the log does not look
inside them).

An *edit* is an event of its own, with its own sequence number, that refers
to an *original* event; the latest edit of an original replaces its value in
the *value view* of the series.

Retention (:class:`~topics.properties.TimeSeriesRange`) is applied after
every append and edit. It counts every event, originals and edits alike, in
sequence order; ``last N`` is measured back from the newest event's
timestamp (the log reads no clock). When an original leaves the range its
edits leave with it, so memory is bounded by the range.

Range queries (:class:`RangeQuery`) select original events by an *anchor*
and a *span*:

===================  =====================================================
anchor               first original event in the range
===================  =====================================================
``START``            the first retained event
``SEQUENCE n``       the first event with sequence >= n
``TIME t``           the first event with timestamp >= t
``LAST n``           the n-th event from the end
``LAST_MILLIS ms``   the first event no older than ``ms`` before the newest
===================  =====================================================

===================  =====================================================
span                 events in the range
===================  =====================================================
``END``              from the anchor to the newest event
``TO_SEQUENCE n``    from the anchor up to sequence n inclusive
``TO_TIME t``        from the anchor up to timestamp t inclusive
``NEXT n``           n events from the anchor
``NEXT_MILLIS ms``   events from the anchor earlier than anchor time + ms
``UNTIL_LAST n``     from the anchor, all but the newest n events
``UNTIL_LAST_MILLIS``from the anchor, all events older than newest - ms
``PREVIOUS n``       the n events *up to* the anchor (inclusive when the
                     anchor names an event exactly)
``PREVIOUS_MILLIS``  events up to the anchor no older than anchor time - ms
``TO_START``         every event up to the anchor
===================  =====================================================

A VALUES query returns, for each original in range, its latest edit if it
has one, else the original. An EDITS query returns each original in range
followed by its edits (all of them, or only the latest). ``limit`` caps the
number of events returned; the result says how many were selected.
"""

from __future__ import annotations

import enum
from bisect import bisect_left, bisect_right
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from topics.errors import RangeQueryError, TimestampOrderError, UnknownSequenceError
from topics.properties import DEFAULT_RETAINED_RANGE, TimeSeriesRange

__all__ = [
    "Anchor",
    "Event",
    "EventLog",
    "QueryResult",
    "RangeQuery",
    "Span",
    "ViewKind",
]


@dataclass(frozen=True, slots=True)
class Event:
    """One event of a time series; ``original_sequence`` is set on edits."""

    sequence: int
    timestamp: int
    author: str
    value: bytes
    original_sequence: int | None = None
    original_timestamp: int | None = None
    original_author: str | None = None

    @property
    def is_edit(self) -> bool:
        return self.original_sequence is not None


class Anchor(enum.Enum):
    START = "start"
    SEQUENCE = "sequence"
    TIME = "time"
    LAST = "last"
    LAST_MILLIS = "last_millis"


class Span(enum.Enum):
    END = "end"
    TO_SEQUENCE = "to_sequence"
    TO_TIME = "to_time"
    NEXT = "next"
    NEXT_MILLIS = "next_millis"
    UNTIL_LAST = "until_last"
    UNTIL_LAST_MILLIS = "until_last_millis"
    PREVIOUS = "previous"
    PREVIOUS_MILLIS = "previous_millis"
    TO_START = "to_start"


class ViewKind(enum.Enum):
    VALUES = "values"
    LATEST_EDITS = "latest_edits"
    ALL_EDITS = "all_edits"


@dataclass(frozen=True)
class RangeQuery:
    """Which events to read from a log; see the module docstring for the semantics."""

    anchor: Anchor = Anchor.START
    anchor_value: int = 0
    span: Span = Span.END
    span_value: int = 0
    view: ViewKind = ViewKind.VALUES
    limit: int | None = None

    def __post_init__(self) -> None:
        for name in ("anchor_value", "span_value"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool):
                raise RangeQueryError(f"{name} must be an integer, got {value!r}")
        if self.anchor is not Anchor.TIME and self.anchor_value < 0:
            raise RangeQueryError(f"anchor {self.anchor.value} needs a non-negative value")
        if self.span is not Span.TO_TIME and self.span_value < 0:
            raise RangeQueryError(f"span {self.span.value} needs a non-negative value")
        if self.limit is not None and (not isinstance(self.limit, int) or self.limit < 0):
            raise RangeQueryError(f"limit must be a non-negative integer, got {self.limit!r}")


@dataclass(frozen=True)
class QueryResult:
    events: tuple[Event, ...]
    selected_count: int

    @property
    def is_complete(self) -> bool:
        return len(self.events) == self.selected_count


@dataclass
class EventLog:
    """The retained events of one time series."""

    retained_range: TimeSeriesRange = DEFAULT_RETAINED_RANGE
    _events: deque[Event] = field(default_factory=deque)
    _originals: list[Event] = field(default_factory=list)
    _edits: dict[int, list[Event]] = field(default_factory=dict)
    _next_sequence: int = 0

    # -- writing -----------------------------------------------------------

    @property
    def next_sequence(self) -> int:
        return self._next_sequence

    @property
    def latest(self) -> Event | None:
        return self._events[-1] if self._events else None

    def __len__(self) -> int:
        return len(self._events)

    def _check_time(self, timestamp: int) -> None:
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            raise TimestampOrderError(f"timestamp must be an integer, got {timestamp!r}")
        last = self._events[-1].timestamp if self._events else None
        if last is not None and timestamp < last:
            raise TimestampOrderError(
                f"timestamp {timestamp} is earlier than the latest event's ({last})"
            )

    def append(self, value: bytes, timestamp: int, author: str = "") -> Event:
        """Append an original event; its timestamp may not go backwards."""
        self._check_time(timestamp)
        event = Event(self._next_sequence, timestamp, author, value)
        self._next_sequence += 1
        self._events.append(event)
        self._originals.append(event)
        self._retain()
        return event

    def edit(self, original_sequence: int, value: bytes, timestamp: int, author: str = "") -> Event:
        """Append an edit of a retained original event."""
        self._check_time(timestamp)
        original = self._original(original_sequence)
        event = Event(
            self._next_sequence,
            timestamp,
            author,
            value,
            original.sequence,
            original.timestamp,
            original.author,
        )
        self._next_sequence += 1
        self._events.append(event)
        self._edits.setdefault(original.sequence, []).append(event)
        self._retain()
        return event

    @classmethod
    def restored(
        cls, retained_range: TimeSeriesRange, events: Iterable[Event], next_sequence: int
    ) -> EventLog:
        """The log that held ``events`` (its :meth:`events`, in sequence order)
        and would number its next event ``next_sequence``: equal to that log in
        every query, retention and edit to come."""
        log = cls(retained_range)
        for event in events:
            log._put(event)
        if next_sequence < log._next_sequence:
            raise ValueError(f"next sequence {next_sequence} is not after the events' ({log._next_sequence - 1})")
        log._next_sequence = next_sequence
        return log

    def put(self, event: Event) -> None:
        """Append ``event`` exactly as it was recorded (replaying a journal):
        its own sequence number, which may not be below :attr:`next_sequence`,
        and for an edit its original's fields; then apply retention."""
        self._put(event)
        self._retain()

    def _put(self, event: Event) -> None:
        if event.sequence < self._next_sequence:
            raise ValueError(f"event {event.sequence} is not after the log's newest ({self._next_sequence - 1})")
        self._check_time(event.timestamp)
        if event.original_sequence is not None:
            self._original(event.original_sequence)  # an edit of a retained original only
            self._edits.setdefault(event.original_sequence, []).append(event)
        else:
            self._originals.append(event)
        self._events.append(event)
        self._next_sequence = event.sequence + 1

    def original(self, sequence: int) -> Event:
        """The retained original event with this sequence number."""
        return self._original(sequence)

    def _original(self, sequence: int) -> Event:
        originals = self._originals
        i = bisect_left(originals, sequence, key=lambda e: e.sequence)
        if i < len(originals) and originals[i].sequence == sequence:
            return originals[i]
        if any(e.sequence == sequence for e in self._events):
            raise UnknownSequenceError(
                f"event {sequence} is an edit; edit its original event instead"
            )
        raise UnknownSequenceError(f"no retained original event with sequence {sequence}")

    def _retain(self) -> None:
        events = self._events
        limit = self.retained_range.limit
        last_ms = self.retained_range.last_ms
        oldest_time = events[-1].timestamp - last_ms if last_ms is not None and events else None
        dropped: list[int] = []
        while events and (
            (limit is not None and len(events) > limit)
            or (oldest_time is not None and events[0].timestamp < oldest_time)
        ):
            gone = events.popleft()
            if not gone.is_edit:
                dropped.append(gone.sequence)
        if dropped:
            gone_set = set(dropped)
            n = 0
            while n < len(self._originals) and self._originals[n].sequence in gone_set:
                n += 1
            del self._originals[:n]
            for seq in dropped:
                for e in self._edits.pop(seq, ()):
                    try:
                        events.remove(e)
                    except ValueError:  # already dropped by the limit
                        pass

    def set_retained_range(self, retained: TimeSeriesRange) -> None:
        self.retained_range = retained
        self._retain()

    def events(self) -> tuple[Event, ...]:
        """Every retained event (originals and edits) in sequence order."""
        return tuple(self._events)

    def latest_value(self, original: Event) -> Event:
        """The latest edit of ``original``, or ``original`` itself."""
        edits = self._edits.get(original.sequence)
        return edits[-1] if edits else original

    def current(self) -> Event | None:
        """The newest original event as it now reads (its latest edit), if any."""
        return self.latest_value(self._originals[-1]) if self._originals else None

    def tail(self, window: TimeSeriesRange) -> tuple[Event, ...]:
        """The newest events (originals and edits) that ``window`` selects, oldest first."""
        return tuple(select_tail(list(self._events), window))

    # -- reading -----------------------------------------------------------

    def query(self, q: RangeQuery = RangeQuery()) -> QueryResult:
        lo, hi = self._select(q)
        chosen = self._originals[lo:hi]
        out: list[Event] = []
        for original in chosen:
            edits = self._edits.get(original.sequence, [])
            if q.view is ViewKind.VALUES:
                out.append(edits[-1] if edits else original)
            else:
                out.append(original)
                if q.view is ViewKind.ALL_EDITS:
                    out.extend(edits)
                elif edits:
                    out.append(edits[-1])
        selected = len(out)
        if q.limit is not None:
            out = out[: q.limit]
        return QueryResult(tuple(out), selected)

    def _select(self, q: RangeQuery) -> tuple[int, int]:
        ev = self._originals
        n = len(ev)
        if n == 0:
            return 0, 0
        newest = self._events[-1].timestamp

        def first_seq_at_least(s: int) -> int:
            return bisect_left(ev, s, key=lambda e: e.sequence)

        def first_time_at_least(t: int) -> int:
            return bisect_left(ev, t, key=lambda e: e.timestamp)

        def first_time_after(t: int) -> int:
            return bisect_right(ev, t, key=lambda e: e.timestamp)

        # a: first index of the anchor; b: end (exclusive) of "up to the anchor"
        kind, value = q.anchor, q.anchor_value
        if kind is Anchor.START:
            a, b = 0, min(1, n)
        elif kind is Anchor.SEQUENCE:
            a = first_seq_at_least(value)
            b = a + 1 if a < n and ev[a].sequence == value else a
        elif kind is Anchor.TIME:
            a = first_time_at_least(value)
            b = first_time_after(value)
        elif kind is Anchor.LAST:
            a = max(0, n - value)
            b = min(a + 1, n) if value > 0 else n
        else:  # LAST_MILLIS
            a = first_time_at_least(newest - value)
            b = min(a + 1, n)
        if kind is Anchor.TIME:
            anchor_time = value
        else:
            anchor_time = ev[a].timestamp if a < n else newest

        span, sv = q.span, q.span_value
        if span is Span.END:
            return a, n
        if span is Span.TO_SEQUENCE:
            return a, max(a, bisect_right(ev, sv, key=lambda e: e.sequence))
        if span is Span.TO_TIME:
            return a, max(a, first_time_after(sv))
        if span is Span.NEXT:
            return a, min(n, a + sv)
        if span is Span.NEXT_MILLIS:
            return a, max(a, first_time_at_least(anchor_time + sv))
        if span is Span.UNTIL_LAST:
            return a, max(a, n - sv)
        if span is Span.UNTIL_LAST_MILLIS:
            return a, max(a, first_time_at_least(newest - sv))
        if span is Span.PREVIOUS:
            return max(0, b - sv), b
        if span is Span.PREVIOUS_MILLIS:
            return min(b, first_time_after(anchor_time - sv)), b
        return 0, b  # TO_START


def select_tail(events: list[Event], window: TimeSeriesRange) -> list[Event]:
    """The newest of ``events`` (in sequence order) that ``window`` selects:
    at most ``limit`` of them, none older than ``last_ms`` before the newest."""
    chosen = events
    if window.limit is not None:
        chosen = chosen[len(chosen) - window.limit :] if window.limit else []
    if window.last_ms is not None and chosen:
        oldest = events[-1].timestamp - window.last_ms
        chosen = [e for e in chosen if e.timestamp >= oldest]
    return chosen


#: what a new subscriber receives first when TIME_SERIES_SUBSCRIPTION_RANGE is not set
DEFAULT_SUBSCRIPTION_RANGE = TimeSeriesRange(limit=1)


class EventWindow:
    """The newest events of a series as seen by a subscriber (a gateway's cache).

    Events arrive already numbered; ones not newer than the last seen are
    ignored (the same event can come twice, through two registrations).
    """

    __slots__ = ("window", "_events")

    def __init__(self, window: TimeSeriesRange) -> None:
        self.window = window
        self._events: list[Event] = []

    def add(self, event: Event) -> bool:
        """Keep ``event`` if it is newer than every event held; True if kept."""
        if self._events and event.sequence <= self._events[-1].sequence:
            return False
        self._events.append(event)
        if len(self._events) > 2 * (self.window.limit or 64):
            self._events = select_tail(self._events, self.window)
        return True

    def events(self) -> list[Event]:
        return select_tail(self._events, self.window)
