"""TIME_SERIES topics end to end through the client."""

from __future__ import annotations

import datetime

import pytest

import canopy
from canopy import errors
from canopy.client import EventMetadata

from tests.actors.conftest import ADMIN

pytestmark = pytest.mark.asyncio


def series(event_type: str, **extra: str) -> dict[str, str]:
    return {"TIME_SERIES_EVENT_VALUE_TYPE": event_type, **extra}


async def test_append_edit_and_query(broker: str, prefix: str) -> None:
    path = f"{prefix}/ts"
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add(path, "TIME_SERIES", series("JSON", TIME_SERIES_RETAINED_RANGE="limit 100"))
        first = await s.time_series.append(path, {"px": 1}, timestamp=1_000)
        assert first == EventMetadata(0, 1_000, "admin")
        for i in range(1, 6):
            await s.time_series.append(path, {"px": i + 1}, timestamp=1_000 + i * 100)
        stamped = await s.time_series.append(path, {"px": 99})  # server clock
        assert stamped.sequence == 6 and stamped.timestamp >= 1_500
        edit = await s.time_series.edit(path, 2, {"px": 30})
        assert edit.sequence == 7 and edit.author == "admin"

        values = await s.time_series.range_query(path)
        assert [e.value["px"] for e in values.events] == [1, 2, 30, 4, 5, 6, 99]
        assert values.events[2].is_edit and values.events[2].original == EventMetadata(2, 1_200, "admin")
        assert values.complete

        q = s.time_series.range_query
        assert [e.sequence for e in (await q(path, from_sequence=2, to_sequence=4)).events] == [7, 3, 4]
        assert [e.sequence for e in (await q(path, from_last=2)).events] == [5, 6]
        assert [e.sequence for e in (await q(path, from_time=1_150, next=2)).events] == [7, 3]
        assert [e.sequence for e in (await q(path, from_sequence=4, previous=2)).events] == [3, 4]
        assert [e.sequence for e in (await q(path, to_time=1_200)).events] == [0, 1, 7]
        assert [e.sequence for e in (await q(path, until_last=5)).events] == [0, 1]
        assert [e.sequence for e in (await q(path, from_sequence=1, to_start=True)).events] == [0, 1]
        when = datetime.datetime.fromtimestamp(1.3, tz=datetime.timezone.utc)
        assert [e.sequence for e in (await q(path, from_time=when, next_ms=150)).events] == [3, 4]
        all_edits = await q(path, from_sequence=2, next=1, edits="all")
        assert [(e.sequence, e.is_edit) for e in all_edits.events] == [(2, False), (7, True)]
        limited = await q(path, limit=3)
        assert len(limited.events) == 3 and limited.selected_count == 7 and not limited.complete
        fetched = await s.topics.fetch(f">{path}")
        assert fetched[0].value == {"px": 99}


async def test_retained_range_is_enforced(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add(f"{prefix}/default", "TIME_SERIES", series("INT64"))
        await s.topics.add(f"{prefix}/small", "TIME_SERIES", series("INT64", TIME_SERIES_RETAINED_RANGE="limit 3"))
        for i in range(15):
            await s.time_series.append(f"{prefix}/default", i)
            await s.time_series.append(f"{prefix}/small", i)
        default = await s.time_series.range_query(f"{prefix}/default")
        assert [e.value for e in default.events] == list(range(5, 15))
        small = await s.time_series.range_query(f"{prefix}/small")
        assert [e.value for e in small.events] == [12, 13, 14]
        with pytest.raises(errors.UnknownSequenceError):
            await s.time_series.edit(f"{prefix}/small", 0, 1)


async def test_subscribers_get_the_subscription_range_then_every_event(broker: str, prefix: str) -> None:
    path = f"{prefix}/ts"
    async with canopy.connect(broker, *ADMIN) as pub, canopy.connect(broker, *ADMIN) as a, canopy.connect(broker, *ADMIN) as b:
        await pub.topics.add(path, "TIME_SERIES", series("STRING", TIME_SERIES_SUBSCRIPTION_RANGE="limit 3"))
        for i in range(5):
            await pub.time_series.append(path, f"e{i}")
        sub_a = await a.topics.subscribe(f"?{prefix}/.*")
        subscribed = await sub_a.next(10)
        assert (subscribed.kind, subscribed.value) == ("subscribed", None)
        first = [await sub_a.next(10) for _ in range(3)]
        assert [e.event.sequence for e in first] == [2, 3, 4]  # type: ignore[union-attr]
        await pub.time_series.append(path, "e5")
        await pub.time_series.edit(path, 4, "e4-fixed")
        live = [await sub_a.next(10) for _ in range(2)]
        assert [(e.value, e.event.is_edit) for e in live] == [("e5", False), ("e4-fixed", True)]  # type: ignore[union-attr]
        # a second session on the same gateway is served from its cache: the newest three events
        sub_b = await b.topics.subscribe(f">{path}")
        await sub_b.next(10)
        late = [await sub_b.next(10) for _ in range(3)]
        assert [e.event.sequence for e in late] == [4, 5, 6]  # type: ignore[union-attr]


async def test_time_series_bad_input(broker: str, prefix: str) -> None:
    path = f"{prefix}/ts"
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add(path, "TIME_SERIES", series("DOUBLE"))
        await s.time_series.append(path, 1.5, timestamp=10_000)
        with pytest.raises(errors.TimestampOrderError, match="earlier than the latest"):
            await s.time_series.append(path, 2.5, timestamp=9_999)
        with pytest.raises(errors.InvalidValueError):
            await s.time_series.append(path, "not a number")
        with pytest.raises(errors.UnknownSequenceError):
            await s.time_series.edit(path, 42, 1.0)
        with pytest.raises(errors.InvalidQueryError, match="at most one anchor"):
            await s.time_series.range_query(path, from_sequence=1, from_last=2)
        with pytest.raises(errors.InvalidQueryError):
            await s.time_series.range_query(path, edits="some")
        with pytest.raises(errors.InvalidValueError, match="not a TIME_SERIES topic"):
            await s.topics.add(f"{prefix}/plain", "STRING")
            await s.time_series.append(f"{prefix}/plain", "x")
        with pytest.raises(errors.NoSuchTopicError):
            await s.time_series.append(f"{prefix}/missing", 1.0)
        with pytest.raises(errors.InvalidValueError, match="append events"):
            await s.topics.set(path, 3.0)
        for policy in ("conflate", "always"):
            with pytest.raises(errors.InvalidSpecificationError, match="not supported for TIME_SERIES"):
                await s.topics.add(f"{prefix}/c", "TIME_SERIES", series("DOUBLE", CONFLATION=policy))
        result = await s.time_series.range_query(path)
        assert [(e.sequence, e.value) for e in result.events] == [(0, 1.5)]


async def test_binary_and_sync_facade(broker: str, prefix: str) -> None:
    import asyncio

    path = f"{prefix}/bin"

    def work() -> list[bytes]:
        with canopy.connect_sync(broker, *ADMIN) as s:
            s.topics.add(path, "TIME_SERIES", series("BINARY"))
            s.time_series.append(path, b"\x00\x01")
            s.time_series.edit(path, 0, b"\x02")
            return [e.value for e in s.time_series.range_query(path, edits="all").events]

    assert await asyncio.to_thread(work) == [b"\x00\x01", b"\x02"]
