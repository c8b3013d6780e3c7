"""Time series operations of a session (``session.time_series``)."""

from __future__ import annotations

import datetime
from typing import TYPE_CHECKING, Any

from canopy import errors
from canopy.client.events import EventMetadata, RangeResult, TimeSeriesEvent, _local
from topics import types as values
from topics.errors import TopicModelError
from topics.types import TopicType

if TYPE_CHECKING:
    from canopy.client.session import Session


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
