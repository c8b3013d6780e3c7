"""The history jobs on Spark local mode (history/jobs.py), over small generated journals."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from history.jobs import History, HistoryError, parse_time
from history.replay import replay
from topics.changes import EventAppended, TopicAdded, TopicRemoved, ValueSet
from topics.properties import TimeSeriesRange
from topics.timeseries import Anchor, Event, EventLog, RangeQuery, Span, ViewKind
from topics.types import TopicType, encode
from tests.history.conftest import T0, export_all, journal, write

DAY = 86_400_000
TS_PROPS = [["TIME_SERIES_EVENT_VALUE_TYPE", "INT64"]]


def js(value: Any) -> bytes:
    return encode(TopicType.JSON, value)


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Two partitions over two days: JSON sensors, a time series with edits, a removed topic."""
    base = tmp_path_factory.mktemp("history")
    location = base / "history"
    rng = random.Random(7)
    p0, p1 = journal(base / "data", 0), journal(base / "data", 1)
    p0_batches: list[tuple[int, list[Any]]] = [(T0, [TopicAdded("s/a", "JSON", [], js({"v": 0})),
                                                     TopicAdded("s/b", "JSON", [], js({"v": 0}))])]
    p1_batches: list[tuple[int, list[Any]]] = [(T0, [TopicAdded("t/x", "STRING", [], encode(TopicType.STRING, "x")),
                                                     TopicAdded("t/ts", "TIME_SERIES", TS_PROPS, None)])]
    events: list[Event] = []
    for i in range(1, 300):
        now = T0 + i * 600_000  # every 10 minutes: about two days
        p0_batches.append((now, [ValueSet(rng.choice(["s/a", "s/b"]), "JSON", js({"v": i}))]))
        if i % 3 == 0:
            event = Event(len(events), now, "pub", encode(TopicType.INT64, i))
            events.append(event)
            p1_batches.append((now, [EventAppended("t/ts", "INT64", event)]))
        if i % 50 == 0 and len(events) > 3:
            original = events[-3 - (i % 2)]
            edit = Event(len(events), now, "ed", encode(TopicType.INT64, -i), original.sequence, original.timestamp,
                         original.author)
            events.append(edit)
            p1_batches.append((now, [EventAppended("t/ts", "INT64", edit)]))
    p1_batches.append((T0 + 200 * 600_000, [TopicRemoved("t/x")]))
    p1_batches.sort(key=lambda b: b[0])
    write(p0, p0_batches)
    write(p1, p1_batches)
    export_all(p0, location)
    export_all(p1, location)
    return {"location": location, "p0": p0_batches, "p1": p1_batches, "events": events}


def test_times_are_milliseconds_or_iso_8601() -> None:
    assert parse_time("1764000000000") == 1_764_000_000_000 == parse_time("2025-11-24T16:00:00Z")
    assert parse_time("2025-11-24T17:00:00+01:00") == 1_764_000_000_000 == parse_time("2025-11-24 16:00:00")
    assert parse_time(None) is None
    with pytest.raises(HistoryError, match="neither milliseconds"):
        parse_time("yesterday", "--from")


def test_query_gives_every_change_of_matching_topics_ordered_per_topic(spark: Any, world: dict[str, Any]) -> None:
    h = History(spark, world["location"])
    start, end = T0 + 50 * 600_000, T0 + 250 * 600_000
    got = h.query("?s/", start=start, end=str(end)).collect()
    expected = sorted(
        ((c.path, t) for t, changes in world["p0"] for c in changes if start <= t <= end),
        key=lambda pt: pt[0],
    )
    assert [(r["path"], r["timestamp"]) for r in got] == expected
    assert all(r["sequence"] < s["sequence"] for r, s in zip(got, got[1:]) if r["path"] == s["path"])
    assert {json.loads(r["value_json"])["v"] for r in got} == set(range(50, 251))
    # a literal path, a window spanning both days, and a selector that matches nothing
    assert [r["op"] for r in h.query(">t/x").collect()] == ["add", "remove"]
    assert h.query("?nothing/").count() == 0
    with pytest.raises(HistoryError, match="selector"):
        h.query("?[")
    with pytest.raises(HistoryError, match="ends"):
        h.query("?s/", start=end, end=start)


def test_timeseries_has_the_live_range_query_semantics(spark: Any, world: dict[str, Any]) -> None:
    h = History(spark, world["location"])
    live = EventLog(TimeSeriesRange(limit=1_000_000))
    for e in world["events"]:
        live.put(e)
    start, end = T0 + 30 * 600_000, T0 + 200 * 600_000
    for edits, kind in (("values", ViewKind.VALUES), ("latest", ViewKind.LATEST_EDITS), ("all", ViewKind.ALL_EDITS)):
        got = h.timeseries("t/ts", start, end, edits).collect()
        expected = live.query(RangeQuery(Anchor.TIME, start, Span.TO_TIME, end, kind)).events
        assert [(r["sequence"], r["timestamp"], bytes(r["value"]), r["original_sequence"]) for r in got] == [
            (e.sequence, e.timestamp, e.value, e.original_sequence) for e in expected
        ], edits
        assert len(got) > 10
    assert any(r["op"] == "edit" for r in h.timeseries("t/ts", edits="all").collect())
    with pytest.raises(HistoryError, match="--edits"):
        h.timeseries("t/ts", edits="some")


def test_stats_count_changes_bytes_and_rates(spark: Any, world: dict[str, Any]) -> None:
    h = History(spark, world["location"])
    by_topic = {r["topic"]: r for r in h.stats("topic").collect()}
    everything = [(t, c) for t, cs in world["p0"] + world["p1"] for c in cs]
    for path in ("s/a", "s/b", "t/ts", "t/x"):
        mine = [(t, c) for t, c in everything if c.path == path]
        assert by_topic[path]["changes"] == len(mine)
        size = sum(len(getattr(c, "value", None) or (c.event.value if hasattr(c, "event") else b"")) for _, c in mine)
        assert by_topic[path]["bytes"] == size
        assert (by_topic[path]["first"], by_topic[path]["last"]) == (min(t for t, _ in mine), max(t for t, _ in mine))
    branches = {r["branch"]: r for r in h.stats("branch", T0, T0 + DAY).collect()}
    assert set(branches) == {"s", "t"}
    in_day = sum(1 for t, c in everything if c.path.startswith("s/") and t <= T0 + DAY)
    assert branches["s"]["changes"] == in_day and branches["s"]["per_second"] == round(in_day / 86_400, 3)
    with pytest.raises(HistoryError, match="--by"):
        h.stats("leaf")


def rows_of(batches: list[tuple[int, list[Any]]]) -> list[dict[str, Any]]:
    """History rows as the replay reads them, from (timestamp, changes) batches of one partition."""
    out, sequence = [], 0
    for t, changes in batches:
        for c in changes:
            sequence += 1
            row: dict[str, Any] = {"path": c.path, "timestamp": t, "partition": 0, "sequence": sequence}
            if isinstance(c, TopicAdded):
                row.update(op="add", type=c.type, properties=c.properties, value=c.value)
            elif isinstance(c, ValueSet):
                row.update(op="set", type=c.type, value=c.value)
            elif isinstance(c, TopicRemoved):
                row.update(op="remove")
            out.append(row)
    return out


VIEW = "map ?s// to v/<path(1)>/<scalar(/v)>"


def test_replay_view_in_spark_equals_the_engine_fed_in_order(spark: Any, world: dict[str, Any]) -> None:
    h = History(spark, world["location"])
    direct = list(replay(VIEW, rows_of(world["p0"])))
    got = h.replay_view(VIEW).collect()
    assert sorted((r["path"], r["timestamp"], r["op"], r["value_json"]) for r in got) == sorted(
        (r[0], r[1], r[2], r[5]) for r in direct
    )
    assert {r["op"] for r in got} == {"put", "remove"} and len(got) > 300
    serial = h.replay_view(VIEW, parallel=False).collect()
    assert sorted(map(tuple, serial)) == sorted(map(tuple, got))


def test_replay_view_opens_the_window_with_each_source_as_it_then_was(spark: Any, world: dict[str, Any]) -> None:
    h = History(spark, world["location"])
    start = T0 + 100 * 600_000 + 1
    got = h.replay_view("map ?s// to w/<path(1)>", start=start).collect()
    current = {c.path: c.value for t, changes in world["p0"] if t < start for c in changes}
    opening = {r["path"]: bytes(r["value"]) for r in got if r["timestamp"] == start}
    assert opening == {"w/a": current["s/a"], "w/b": current["s/b"]}
    later = sum(1 for t, cs in world["p0"] for _ in cs if t >= start)
    assert len(got) == 2 + later


def test_sources_that_claim_one_path_replay_as_the_live_view_does(spark: Any, world: dict[str, Any]) -> None:
    h = History(spark, world["location"])
    view = "map ?s// to one"  # s/a and s/b both map to 'one': the first claimant keeps it
    direct = [(r[0], r[1], r[2], r[5], r[6]) for r in replay(view, rows_of(world["p0"]))]
    got = [(r["path"], r["timestamp"], r["op"], r["value_json"], r["source_path"]) for r in h.replay_view(view).collect()]
    assert sorted(got) == sorted(direct)
    assert {r[4] for r in got} == {"s/a"}


def test_bad_specifications_and_remote_views_are_refused(spark: Any, world: dict[str, Any]) -> None:
    h = History(spark, world["location"])
    with pytest.raises(HistoryError, match="view specification"):
        h.replay_view("map ?s// into nowhere")
    with pytest.raises(HistoryError, match="server 'far'"):
        h.replay_view("map ?s// from far to v/<path(1)>")


def test_an_empty_history_answers_with_no_rows(spark: Any, tmp_path: Path) -> None:
    h = History(spark, tmp_path / "nothing")
    assert h.query("?a//").count() == 0 and h.stats().count() == 0 and h.timeseries("a/ts").count() == 0
