"""The broker on one Ray node, driven through the real client over WebSocket."""

from __future__ import annotations

import asyncio

import pytest

import canopy
from canopy import errors
from canopy.client import AddResult, Subscription, TopicEvent

from tests.actors.conftest import ADMIN
from tests.conftest import until

pytestmark = pytest.mark.asyncio


async def collect(sub: Subscription, n: int, timeout: float = 20.0) -> list[TopicEvent]:
    out = []
    for _ in range(n):
        out.append(await sub.next(timeout))
    return out


async def test_add_set_fetch_remove(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        assert await s.topics.add(f"{prefix}/s", "STRING") is AddResult.CREATED
        assert await s.topics.add(f"{prefix}/s", "STRING") is AddResult.EXISTS
        with pytest.raises(errors.TopicExistsMismatchError):
            await s.topics.add(f"{prefix}/s", "JSON")
        await s.topics.add(f"{prefix}/j", "JSON", {"CONFLATION": "off"})
        await s.topics.set(f"{prefix}/s", "hello")
        await s.topics.set(f"{prefix}/j", {"b": 1, "a": [1, 2.5, None]})
        await s.topics.add_and_set(f"{prefix}/n/1", 42)
        await s.topics.add_and_set(f"{prefix}/bin", b"\x00\xff")
        rows = await s.topics.fetch(f"?{prefix}//", with_properties=True)
        assert [(r.path, r.type.value, r.value) for r in rows] == [
            (f"{prefix}/bin", "BINARY", b"\x00\xff"),
            (f"{prefix}/j", "JSON", {"b": 1, "a": [1, 2.5, None]}),
            (f"{prefix}/n/1", "INT64", 42),
            (f"{prefix}/s", "STRING", "hello"),
        ]
        assert rows[1].properties == {"CONFLATION": "off"}
        only = await s.topics.fetch(f"?{prefix}//", types=["json", "STRING"], with_values=False, limit=1)
        assert [(r.path, r.value) for r in only] == [(f"{prefix}/j", None)]
        assert await s.topics.remove(f">{prefix}/n") == 0
        assert await s.topics.remove(f"?{prefix}/n//") == 1
        assert await s.topics.remove(f"?{prefix}//") == 3
        assert await s.topics.fetch(f"?{prefix}//") == []


async def test_subscription_lifecycle(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as pub, canopy.connect(broker, *ADMIN) as sub_session:
        await pub.topics.add_and_set(f"{prefix}/a", "v0")
        sub = await sub_session.topics.subscribe(f"?{prefix}/.*")
        first = await sub.next(10)
        assert (first.kind, first.path, first.value) == ("subscribed", f"{prefix}/a", "v0")
        for i in range(1, 50):
            await pub.topics.set(f"{prefix}/a", f"v{i}")
        values = [e.value for e in await collect(sub, 49)]
        assert values == [f"v{i}" for i in range(1, 50)]
        await pub.topics.add(f"{prefix}/later", "INT64")
        later = await sub.next(10)
        assert (later.kind, later.path, later.value) == ("subscribed", f"{prefix}/later", None)
        await pub.topics.remove(f">{prefix}/later")
        gone = await sub.next(10)
        assert (gone.kind, gone.path, gone.reason) == ("unsubscribed", f"{prefix}/later", "REMOVED")
        await sub.unsubscribe()
        bye = await sub.next(10)
        assert (bye.kind, bye.reason) == ("unsubscribed", "REQUESTED")
        with pytest.raises(StopAsyncIteration):
            await sub.__anext__()
        # no more deliveries after unsubscribe: a new subscription sees only the latest value
        await pub.topics.set(f"{prefix}/a", "after")
        again = await sub_session.topics.subscribe(f">{prefix}/a")
        event = await again.next(10)
        assert (event.kind, event.value) == ("subscribed", "after")


async def test_a_value_set_without_retain_is_delivered_not_kept(broker: str, prefix: str) -> None:
    """``set(..., retain=False)``: the subscribers get it, marked ``retained=False``; the topic
    keeps its value, which a later subscriber and a fetch see (an MQTT publish without RETAIN)."""
    async with canopy.connect(broker, *ADMIN) as s:
        path = f"{prefix}/x"
        await s.topics.add_and_set(path, "kept")
        sub = await s.topics.subscribe(path)
        assert (await sub.next(timeout=10)).value == "kept"
        await s.topics.set(path, "passing", retain=False)
        event = await sub.next(timeout=10)
        assert (event.kind, event.value, event.retained) == ("value", "passing", False)
        assert [t.value for t in await s.topics.fetch(path)] == ["kept"]
        await s.topics.set(path, "next")
        assert (await sub.next(timeout=10)).retained is True
        async with canopy.connect(broker, *ADMIN) as late:
            later = await late.topics.subscribe(path)
            assert (await later.next(timeout=10)).value == "next"


async def test_updates_arrive_in_order_per_topic(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as pub, canopy.connect(broker, *ADMIN) as s:
        paths = [f"{prefix}/{i}" for i in range(8)]
        for p in paths:
            await pub.topics.add(p, "INT64", {"CONFLATION": "off"})
        sub = await s.topics.subscribe(f"?{prefix}/.*")
        await collect(sub, len(paths))
        await asyncio.gather(*(pub.topics.set(p, n) for n in range(300) for p in paths))
        seen: dict[str, list[int]] = {p: [] for p in paths}
        for event in await collect(sub, 300 * len(paths)):
            seen[event.path].append(event.value)
        assert all(values == list(range(300)) for values in seen.values())


async def test_sessions_sharing_a_selector(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as pub, canopy.connect(broker, *ADMIN) as a, canopy.connect(broker, *ADMIN) as b:
        await pub.topics.add_and_set(f"{prefix}/x", 1)
        sa = await a.topics.subscribe(f"?{prefix}//")
        sb = await b.topics.subscribe(f"?{prefix}//")
        assert (await sa.next(10)).value == 1
        assert (await sb.next(10)).value == 1
        await a.topics.unsubscribe(f"?{prefix}//")
        await pub.topics.set(f"{prefix}/x", 2)
        assert (await sb.next(10)).value == 2
        assert [e.kind for e in await collect(sa, 1)] == ["unsubscribed"]


async def test_overlapping_selectors_in_one_session(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add_and_set(f"{prefix}/x", "v")
        broad = await s.topics.subscribe(f"?{prefix}//")
        assert (await broad.next(10)).kind == "subscribed"
        narrow = await s.topics.subscribe(f">{prefix}/x")
        replay = await narrow.next(10)  # already subscribed: replayed locally
        assert (replay.kind, replay.value) == ("subscribed", "v")
        await s.topics.unsubscribe(f"?{prefix}//")
        await s.topics.set(f"{prefix}/x", "w")
        assert (await narrow.next(10)).value == "w"


async def test_dont_retain_value(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add(f"{prefix}/v", "STRING", {"DONT_RETAIN_VALUE": "true"})
        sub = await s.topics.subscribe(f">{prefix}/v")
        assert (await sub.next(10)).value is None
        await s.topics.set(f"{prefix}/v", "transient")
        assert (await sub.next(10)).value == "transient"
        assert [r.value for r in await s.topics.fetch(f">{prefix}/v")] == [None]


async def test_session_properties(broker: str) -> None:
    async with canopy.connect(broker, *ADMIN, properties={"TIER": "2"}) as s:
        props = s.properties
        assert props["$Principal"] == "admin" and props["TIER"] == "2"
        assert props["$Roles"] == '"ADMINISTRATOR"' and props["$Country"] == "LO"  # from the configured table
        assert props["$SessionId"] == s.session_id and props["$Transport"] == "WEBSOCKET"
        assert props["$ClientIP"] == "127.0.0.1" and int(props["$StartTime"]) > 0
    with pytest.raises(errors.InvalidPropertiesError):
        await canopy.connect(broker, properties={"$Principal": "mallory"})


async def test_hub_publish_and_wildcard_subscribe(broker: str, prefix: str) -> None:
    root = prefix.replace("/", ".")
    async with canopy.connect(broker, *ADMIN) as s:
        sub = await s.hub.subscribe(f"{root}.*.log")
        deep = await s.hub.subscribe(f"{root}.**")
        await s.hub.publish(f"{root}.type1.log", {"line": 1})
        await s.hub.publish(f"{root}.type1.trace", "x")
        event = await sub.next(10)
        assert (event.name, event.value, event.path) == (f"{root}.type1.log", {"line": 1}, f"hub/{prefix}/type1/log")
        names = {(await deep.next(10)).name for _ in range(2)}
        assert names == {f"{root}.type1.log", f"{root}.type1.trace"}
        with pytest.raises(errors.InvalidNameError, match="not when publishing"):
            await s.hub.publish(f"{root}.*", 1)
        with pytest.raises(errors.InvalidNameError, match="only be the last"):
            await s.hub.subscribe("a.**.b")
        await asyncio.sleep(0)
        assert sub.session is s


async def test_many_sessions_and_a_late_joiner(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as pub:
        await pub.topics.add_and_set(f"{prefix}/k", 0)
        sessions = [await canopy.connect(broker, *ADMIN) for _ in range(5)]
        try:
            subs = [await s.topics.subscribe(f"?{prefix}/.*") for s in sessions]
            for sub in subs:
                assert (await sub.next(10)).value == 0
            await pub.topics.set(f"{prefix}/k", 1)
            for sub in subs:
                assert (await sub.next(10)).value == 1
            async with canopy.connect(broker, *ADMIN) as late:
                joined = await late.topics.subscribe(f">{prefix}/k")
                assert (await joined.next(10)).value == 1
        finally:
            for s in sessions:
                await s.close()


async def test_subscribe_can_be_iterated_directly(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add_and_set(f"{prefix}/a", "x")
        seen = []
        async for event in s.topics.subscribe(f"?{prefix}//"):
            seen.append((event.kind, event.value))
            if len(seen) == 1:
                await s.topics.set(f"{prefix}/a", "y")
            else:
                break
        assert seen == [("subscribed", "x"), ("value", "y")]
        async with s.topics.subscribe(f">{prefix}/a") as sub:
            assert (await sub.next(10)).value == "y"


async def test_a_callback_subscription_gets_every_event_as_it_arrives(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add_and_set(f"{prefix}/a", 0)
        seen: list[tuple[str, object]] = []

        def on_event(event: canopy.TopicEvent) -> None:
            seen.append((event.kind, event.value))
            if event.value == 2:
                raise RuntimeError("a bug in the callback: logged, the session goes on")

        sub = await s.topics.subscribe(f">{prefix}/a", callback=on_event)
        for i in range(1, 5):
            await s.topics.set(f"{prefix}/a", i)
        await until(lambda: len(seen) == 5, 10, "every event")
        assert seen == [("subscribed", 0), ("value", 1), ("value", 2), ("value", 3), ("value", 4)]
        await sub.unsubscribe()
        assert [e async for e in sub] == []  # iterating only tells it ended
        assert not s.closed
