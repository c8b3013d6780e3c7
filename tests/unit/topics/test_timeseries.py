from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.errors import RangeQueryError, TimestampOrderError, UnknownSequenceError
from topics.properties import TimeSeriesRange
from topics.timeseries import Anchor, EventLog, RangeQuery, Span, ViewKind


def make_log(n: int = 6, step: int = 100, retained: TimeSeriesRange | None = None) -> EventLog:
    log = EventLog(retained or TimeSeriesRange(limit=1000))
    for i in range(n):
        log.append(f"v{i}".encode(), 1000 + i * step, "alice")
    return log


def seqs(log: EventLog, q: RangeQuery) -> list[int]:
    return [e.sequence for e in log.query(q).events]


def test_append_assigns_sequence_and_metadata() -> None:
    log = EventLog()
    first = log.append(b"a", 10, "alice")
    second = log.append(b"b", 10, "bob")
    assert (first.sequence, first.timestamp, first.author, first.value) == (0, 10, "alice", b"a")
    assert second.sequence == 1 and not second.is_edit
    assert log.latest == second


def test_timestamps_may_not_go_backwards_and_nothing_changes() -> None:
    log = make_log(3)
    before = log.events()
    with pytest.raises(TimestampOrderError, match="earlier than the latest"):
        log.append(b"x", 999, "alice")
    with pytest.raises(TimestampOrderError):
        log.edit(0, b"x", 999, "alice")
    assert log.events() == before
    assert log.next_sequence == 3


def test_edit_latest_wins_in_value_view() -> None:
    log = make_log(3)
    log.edit(1, b"e1", 2000, "bob")
    last = log.edit(1, b"e2", 2001, "carol")
    assert last.is_edit and last.original_sequence == 1 and last.original_author == "alice"
    assert last.original_timestamp == 1100
    values = [e.value for e in log.query().events]
    assert values == [b"v0", b"e2", b"v2"]


def test_edit_views() -> None:
    log = make_log(3)
    log.edit(1, b"e1", 2000)
    log.edit(1, b"e2", 2001)
    all_edits = log.query(RangeQuery(view=ViewKind.ALL_EDITS)).events
    assert [e.value for e in all_edits] == [b"v0", b"v1", b"e1", b"e2", b"v2"]
    latest = log.query(RangeQuery(view=ViewKind.LATEST_EDITS)).events
    assert [e.value for e in latest] == [b"v0", b"v1", b"e2", b"v2"]


def test_edit_of_unknown_or_edit_sequence() -> None:
    log = make_log(2)
    edit = log.edit(0, b"e", 5000)
    with pytest.raises(UnknownSequenceError, match="no retained original event with sequence 7"):
        log.edit(7, b"x", 5000)
    with pytest.raises(UnknownSequenceError, match="is an edit"):
        log.edit(edit.sequence, b"x", 5000)


def test_retained_range_limit_counts_every_event() -> None:
    log = make_log(0, retained=TimeSeriesRange(limit=3))
    for i in range(5):
        log.append(bytes([i]), i)
    assert [e.sequence for e in log.events()] == [2, 3, 4]
    log.edit(3, b"e", 10)
    assert [e.sequence for e in log.events()] == [3, 4, 5]
    # the next append pushes the original 3 out, and its edit goes with it
    log.append(b"n", 11)
    assert [e.sequence for e in log.events()] == [4, 6]
    with pytest.raises(UnknownSequenceError):
        log.edit(3, b"x", 12)


def test_retained_range_by_time_from_newest_event() -> None:
    log = make_log(0, retained=TimeSeriesRange(last_ms=1000))
    for t in (0, 500, 900, 1600, 1700):
        log.append(b"x", t)
    assert [e.timestamp for e in log.events()] == [900, 1600, 1700]


def test_retained_range_smaller_wins() -> None:
    log = make_log(0, retained=TimeSeriesRange(limit=2, last_ms=10_000))
    for t in (0, 1, 2):
        log.append(b"x", t)
    assert len(log) == 2
    log2 = make_log(0, retained=TimeSeriesRange(limit=100, last_ms=5))
    for t in (0, 1, 10):
        log2.append(b"x", t)
    assert [e.timestamp for e in log2.events()] == [10]


def test_default_retained_range_is_ten() -> None:
    log = EventLog()
    for i in range(15):
        log.append(b"x", i)
    assert len(log) == 10


# events: seq 0..5 at t = 1000, 1100, ..., 1500
@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (RangeQuery(), [0, 1, 2, 3, 4, 5]),
        (RangeQuery(Anchor.SEQUENCE, 2), [2, 3, 4, 5]),
        (RangeQuery(Anchor.SEQUENCE, 2, Span.TO_SEQUENCE, 4), [2, 3, 4]),
        (RangeQuery(Anchor.SEQUENCE, 4, Span.TO_SEQUENCE, 2), []),
        (RangeQuery(Anchor.TIME, 1150), [2, 3, 4, 5]),
        (RangeQuery(Anchor.TIME, 1100, Span.TO_TIME, 1300), [1, 2, 3]),
        (RangeQuery(Anchor.LAST, 2), [4, 5]),
        (RangeQuery(Anchor.LAST, 100), [0, 1, 2, 3, 4, 5]),
        (RangeQuery(Anchor.LAST_MILLIS, 200), [3, 4, 5]),
        (RangeQuery(Anchor.SEQUENCE, 1, Span.NEXT, 2), [1, 2]),
        (RangeQuery(Anchor.SEQUENCE, 1, Span.NEXT_MILLIS, 250), [1, 2, 3]),
        (RangeQuery(Anchor.START, 0, Span.UNTIL_LAST, 2), [0, 1, 2, 3]),
        (RangeQuery(Anchor.START, 0, Span.UNTIL_LAST_MILLIS, 200), [0, 1, 2]),
        (RangeQuery(Anchor.SEQUENCE, 3, Span.PREVIOUS, 2), [2, 3]),
        (RangeQuery(Anchor.TIME, 1350, Span.PREVIOUS, 2), [2, 3]),
        (RangeQuery(Anchor.SEQUENCE, 3, Span.PREVIOUS_MILLIS, 150), [2, 3]),
        (RangeQuery(Anchor.SEQUENCE, 3, Span.TO_START), [0, 1, 2, 3]),
        (RangeQuery(Anchor.SEQUENCE, 99), []),
        (RangeQuery(limit=2), [0, 1]),
    ],
)
def test_range_queries(query: RangeQuery, expected: list[int]) -> None:
    assert seqs(make_log(), query) == expected


def test_limit_reports_selected_count() -> None:
    result = make_log().query(RangeQuery(limit=2))
    assert result.selected_count == 6 and not result.is_complete
    assert make_log().query().is_complete


def test_query_on_empty_log() -> None:
    assert EventLog().query().events == ()


@pytest.mark.parametrize(
    "kwargs",
    [
        {"anchor": Anchor.SEQUENCE, "anchor_value": -1},
        {"span": Span.NEXT, "span_value": -1},
        {"limit": -1},
        {"anchor_value": "3"},
    ],
)
def test_bad_queries(kwargs: dict[str, object]) -> None:
    with pytest.raises(RangeQueryError):
        RangeQuery(**kwargs)  # type: ignore[arg-type]


@given(
    st.lists(st.tuples(st.booleans(), st.integers(0, 3)), max_size=60),
    st.integers(1, 8),
)
def test_retention_never_keeps_orphan_edits_and_respects_limit(
    ops: list[tuple[bool, int]], limit: int
) -> None:
    log = EventLog(TimeSeriesRange(limit=limit))
    t = 0
    for is_edit, back in ops:
        t += 1
        originals = [e for e in log.events() if not e.is_edit]
        if is_edit and originals:
            log.edit(originals[-1 - min(back, len(originals) - 1)].sequence, b"e", t)
        else:
            log.append(b"o", t)
    kept = log.events()
    assert len(kept) <= limit
    assert [e.sequence for e in kept] == sorted(e.sequence for e in kept)
    original_seqs = {e.sequence for e in kept if not e.is_edit}
    assert all(e.original_sequence in original_seqs for e in kept if e.is_edit)
