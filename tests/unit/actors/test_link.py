"""The partition link against real partition stream servers, in one process.

The partitions are :class:`~actors.partition.PartitionActor` objects used
directly (no Ray): their stream servers listen on loopback and the link
connects over real TCP, as it does between actors.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import cbor2
import pytest

from actors.link import PartitionLink
from actors.partition import PartitionActor
from topics.partitioning import partition_of
from topics import protocol as p
from topics.selectors import parse_selector
from tests.conftest import until as wait_until

DEADLINE = 5.0


class Handle:
    """What the link needs of a Ray actor handle: ``attach.remote(...)``."""

    def __init__(self, actor: PartitionActor) -> None:
        self.actor = actor

        class _Attach:
            @staticmethod
            def remote(link_id: str, epoch: int = 0) -> Any:
                return actor.attach(link_id, epoch)

        self.attach = _Attach()


async def until(condition: Callable[[], Any], what: str) -> None:
    await wait_until(condition, DEADLINE, what)


class Recorder:
    def __init__(self) -> None:
        self.events: list[tuple[int, p.TopicEvent]] = []
        self.log: list[Any] = []  # events and results, in the order they arrived

    def on_events(self, partition: int, events: list[p.TopicEvent]) -> None:
        for e in events:
            self.events.append((partition, e))
            self.log.append(e)


@pytest.fixture
async def partitions() -> AsyncIterator[list[PartitionActor]]:
    actors = [PartitionActor(i, 2, host="127.0.0.1") for i in range(2)]
    yield actors
    for actor in actors:
        if actor.core is not None and actor.core.server is not None:
            actor.core.server.close()


async def linked(partitions: list[PartitionActor], name: str = "gw", **options: Any) -> tuple[PartitionLink, Recorder]:
    recorder = Recorder()
    link = PartitionLink(name, [Handle(a) for a in partitions], recorder.on_events, **options)
    await link.attach()
    await until(lambda: all(a.core and name in a.core.links for a in partitions), "the partitions to see the hello")
    return link, recorder


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


async def test_operations_of_one_loop_turn_travel_as_one_batch(partitions: list[PartitionActor]) -> None:
    link, _ = await linked(partitions)
    try:
        paths = [f"t{i}" for i in range(40)]
        futures = [link.request_route(path, p.SetValue(path, cb(i), False, None, True)) for i, path in enumerate(paths)]
        results = await asyncio.gather(*futures)
        assert results == [p.Ok("CREATED")] * 40
        used = {partition_of(path, 2) for path in paths}
        assert link.stats()["batches"] == len(used) == 2
        assert sum(a.core.batches for a in partitions if a.core) == 2
    finally:
        link.close()


async def test_results_are_typed_and_in_order(partitions: list[PartitionActor]) -> None:
    link, _ = await linked(partitions)
    try:
        index = partition_of("x", 2)
        futures = [
            link.request(index, p.AddTopic("x", "INT64")),
            link.request(index, p.SetValue("x", cb("not a number"), False)),
            link.request(index, p.SetValue("x", cb(3), False)),
            link.request(index, p.FetchTopics(">x")),
        ]
        added, bad, good, fetched = await asyncio.gather(*futures)
        assert added == p.Ok("CREATED") and good == p.Ok(None)
        assert isinstance(bad, p.Failed) and bad.code == "INVALID_VALUE"
        assert fetched == p.Ok([p.TopicRow("x", "INT64", None, cb(3), None)])
        assert type(fetched.value[0]) is p.TopicRow  # type: ignore[union-attr]
    finally:
        link.close()


async def test_a_batch_s_own_events_arrive_before_its_results(partitions: list[PartitionActor]) -> None:
    link, recorder = await linked(partitions)
    try:
        index = partition_of("a/x", 2)
        await link.request(index, p.AddTopic("a/x", "INT64"))
        await asyncio.gather(*link.everywhere(parse_selector("?a/"), p.Register("?a/", 1)))
        recorder.log.clear()
        link.route("a/x", p.SetValue("a/x", cb(5), False), lambda result: recorder.log.append(result))
        await until(lambda: len(recorder.log) == 2, "the update and its result")
        assert recorder.log == [p.Changed("a/x", cb(5)), p.Ok(None)]
    finally:
        link.close()


async def test_other_links_get_the_events_of_a_batch(partitions: list[PartitionActor]) -> None:
    writer, _ = await linked(partitions, "writer")
    reader, seen = await linked(partitions, "reader")
    try:
        await asyncio.gather(*reader.everywhere(parse_selector("?a/"), p.Register("?a/", 9)))
        await until(lambda: sum(isinstance(e, p.End) for _, e in seen.events) == 2, "both snapshots")
        for i in range(20):
            writer.route(f"a/{i % 3}", p.SetValue(f"a/{i % 3}", cb(i), False, None, True))
        expected = [(f"a/{i % 3}", cb(i)) for i in range(20)]

        def updates() -> list[tuple[str, bytes | None]]:
            return [(e.path, e.value) for _, e in seen.events if isinstance(e, (p.Added, p.Changed))]

        await until(lambda: len(updates()) == 20, "every update")
        for path in ("a/0", "a/1", "a/2"):  # each topic's updates in order
            assert [v for q, v in updates() if q == path] == [v for q, v in expected if q == path]
    finally:
        writer.close()
        reader.close()


async def test_in_flight_limit_makes_batches_grow(partitions: list[PartitionActor]) -> None:
    link, _ = await linked(partitions, max_in_flight=1)
    try:
        index = partition_of("t", 2)
        first = link.request(index, p.SetValue("t", cb(0), False, None, True))
        await asyncio.sleep(0)  # the first batch leaves alone ...
        rest = [link.request(index, p.SetValue("t", cb(i), False)) for i in range(1, 50)]
        await asyncio.gather(first, *rest)  # ... and the others wait for its answer, then go together
        assert link.stats()["batches"] == 2
    finally:
        link.close()


async def test_a_broken_stream_fails_what_was_in_flight_and_later_operations_wait_for_it(
    partitions: list[PartitionActor],
) -> None:
    link, _ = await linked(partitions)
    try:
        await asyncio.gather(*link.everywhere(parse_selector("?a/"), p.Register("?a/", 1)))
        assert all(a.core and len(a.core.store.index) == 1 for a in partitions)
        index = partition_of("t", 2)
        pending = link.request(index, p.SetValue("t", cb(1), False, None, True))
        core = partitions[index].core
        assert core is not None
        peer = core.links["gw"]
        assert peer.transport is not None
        peer.transport.abort()
        result = await asyncio.wait_for(pending, DEADLINE)
        assert isinstance(result, p.Failed) and result.code == "UNAVAILABLE"  # its fate is unknown
        later = await asyncio.wait_for(link.request(index, p.FetchTopics(">t")), DEADLINE)
        assert isinstance(later, p.Ok), later  # it waited for the stream to be back
        other = await link.request(1 - index, p.FetchTopics(">t"))
        assert isinstance(other, p.Ok)  # the other partition is fine
        # the partition dropped the link's registrations with the stream; the link registered them again
        await until(lambda: len(core.store.index) == 1, "the registrations to be back")
    finally:
        link.close()


class Unreachable(Handle):
    """A partition whose attach fails while ``down`` (Ray restarting it, a failover not done)."""

    def __init__(self, actor: PartitionActor) -> None:
        super().__init__(actor)
        self.down = False
        handle = self

        class _Attach:
            @staticmethod
            async def remote(link_id: str, epoch: int = 0) -> Any:
                if handle.down:
                    raise ConnectionError("the partition is not there")
                return await actor.attach(link_id, epoch)

        self.attach = _Attach()


async def test_operations_wait_for_a_lost_partition_only_for_the_hold_then_fail_at_once_until_it_is_back(
    partitions: list[PartitionActor],
) -> None:
    handles = [Unreachable(a) for a in partitions]
    link = PartitionLink("gw", handles, Recorder().on_events, hold=0.5)
    await link.attach()
    try:
        index = partition_of("t", 2)
        assert isinstance(await link.request(index, p.SetValue("t", cb(1), False, None, True)), p.Ok)
        core = partitions[index].core
        assert core is not None
        handles[index].down = True
        peer = core.links["gw"]
        assert peer.transport is not None
        peer.transport.abort()
        await until(lambda: link.channels[index].broken is not None, "the link to see the stream break")
        loop = asyncio.get_running_loop()
        began = loop.time()
        waited = await asyncio.wait_for(link.request(index, p.SetValue("t", cb(2), False)), DEADLINE)
        assert isinstance(waited, p.Failed) and waited.code == "UNAVAILABLE", waited
        assert loop.time() - began >= 0.3  # it waited for the partition, then gave up
        began = loop.time()
        at_once = await asyncio.wait_for(link.request(index, p.FetchTopics(">t")), DEADLINE)
        assert isinstance(at_once, p.Failed) and loop.time() - began < 0.3  # past the hold: no waiting
        handles[index].down = False
        await until(lambda: link.channels[index].broken is None, "the link to reach the partition again")
        rows = await asyncio.wait_for(link.request(index, p.FetchTopics(">t")), DEADLINE)
        assert isinstance(rows, p.Ok), rows
        assert isinstance(await link.request(index, p.SetValue("t", cb(3), False)), p.Ok)
    finally:
        link.close()


async def test_a_wrong_secret_is_refused(partitions: list[PartitionActor]) -> None:
    address = await partitions[0].attach("intruder")
    reader, writer = await asyncio.open_connection(address["host"], address["port"])
    writer.write(p.encode_frame(p.Hello("intruder", "guess")))
    writer.write(p.encode_frame(p.Batch(1, [p.encode_operation(p.AddTopic("evil", "STRING"))])))
    await writer.drain()
    assert await asyncio.wait_for(reader.read(), DEADLINE) == b""  # closed without an answer
    writer.close()
    core = partitions[0].core
    assert core is not None and "evil" not in core.store.tree and "intruder" not in core.links


async def test_a_failing_receiver_does_not_break_the_stream(partitions: list[PartitionActor]) -> None:
    calls: list[int] = []

    def explode(partition: int, events: list[p.TopicEvent]) -> None:
        calls.append(partition)
        raise RuntimeError("a bug in the receiver")

    link = PartitionLink("gw", [Handle(a) for a in partitions], explode)
    await link.attach()
    try:
        await asyncio.gather(*link.everywhere(parse_selector("?a/"), p.Register("?a/", 1)))
        assert calls  # the snapshot ENDs reached the receiver and it failed
        assert await link.request_route("a/x", p.SetValue("a/x", cb(1), False, None, True)) == p.Ok("CREATED")
    finally:
        link.close()


async def test_a_link_reconnects_and_registers_again(partitions: list[PartitionActor]) -> None:
    recorder = Recorder()
    resets: list[tuple[str, int]] = []
    link = PartitionLink(
        "gw", [Handle(a) for a in partitions], recorder.on_events,
        on_reset=lambda i: resets.append(("reset", i)), on_resynced=lambda i: resets.append(("resynced", i)),
    )
    await link.attach()
    try:
        await asyncio.gather(*link.everywhere(parse_selector("?a/"), p.Register("?a/", 5)))
        index = partition_of("a/x", 2)
        await link.request(index, p.SetValue("a/x", cb(1), False, None, True))
        core = partitions[index].core
        assert core is not None
        old = core.links["gw"]
        assert old.transport is not None
        old.transport.abort()  # the stream breaks (as when the partition's process dies)
        await until(lambda: ("resynced", index) in resets, "the link to be back and resynced")
        assert resets == [("reset", index), ("resynced", index)]
        assert core.links["gw"] is not old and len(core.store.index) == 1  # registered again
        snapshots = [e for i, e in recorder.events if i == index and isinstance(e, p.Snapshot)]
        assert [s.path for s in snapshots][-1] == "a/x"  # the registration's snapshot came again
        assert await link.request(index, p.SetValue("a/x", cb(2), False)) == p.Ok(None)
    finally:
        link.close()


async def test_writes_held_while_the_partition_is_away_reach_the_link_s_registrations(
    partitions: list[PartitionActor]
) -> None:
    """After a reconnect the registrations go ahead of the writes held meanwhile: a cluster
    test lost exactly those writes' events to subscribers when they went first (acknowledged,
    applied before the link was registered again, never delivered)."""
    recorder = Recorder()
    away = asyncio.Event()
    away.set()
    attempts: list[int] = []

    class Gated(Handle):
        """A partition that cannot be reached while ``away`` is clear."""

        def __init__(self, actor: PartitionActor) -> None:
            super().__init__(actor)

            class _Attach:
                @staticmethod
                async def remote(link_id: str, epoch: int = 0) -> Any:
                    attempts.append(1)
                    await away.wait()
                    return await actor.attach(link_id, epoch)

            self.attach = _Attach()

    link = PartitionLink("gw", [Gated(a) for a in partitions], recorder.on_events)
    await link.attach()
    try:
        await asyncio.gather(*link.everywhere(parse_selector("?a/"), p.Register("?a/", 5)))
        index = partition_of("a/x", 2)
        await link.request(index, p.SetValue("a/x", cb(0), False, None, True))
        core = partitions[index].core
        assert core is not None
        channel = link.channels[index]
        away.clear()
        core.links["gw"].transport.abort()  # type: ignore[union-attr]
        await until(lambda: channel.reconnecting is not None and attempts, "the link to try to reach it again")
        answers: list[p.Result] = []
        for value in range(1, 6):  # held until the partition is back
            link.route("a/x", p.SetValue("a/x", cb(value), False), answers.append)
        away.set()
        await until(lambda: len(answers) == 5, "the held writes' answers")
        assert all(isinstance(a, p.Ok) for a in answers), answers
        changed = [cbor2.loads(e.value) for i, e in recorder.events if i == index and isinstance(e, p.Changed)]
        assert changed[-5:] == [1, 2, 3, 4, 5], changed
    finally:
        link.close()
