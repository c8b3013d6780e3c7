"""Primary/backup replication of one partition, over real TCP, in one process.

Two or three :class:`~actors.partition.PartitionActor` replicas of partition 0
(each with its own journal directory, as on different nodes) are driven the way
the controller drives them (``become_backup``, ``become_primary``,
``set_backup``, ``handover``); a :class:`~actors.link.PartitionLink` writes to
the primary the test's partition map names. What was acknowledged is checked
against what the replicas hold, never by eye.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import cbor2
import pytest

from actors.link import PartitionLink, Route
from actors.partition import NotCaughtUp, PartitionActor
from cluster.config import InstanceConfig
from replication.journal import Journal, JournalCorrupt
from topics import protocol as p
from tests.conftest import until as wait_until
from tests.unit.actors.test_link import Handle

DEADLINE = 10.0


async def until(condition: Any, what: str) -> Any:
    return await wait_until(condition, DEADLINE, what)


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


class Map:
    """The test's partition map: the route to partition 0's primary."""

    def __init__(self, route: Route) -> None:
        self.route = route

    async def resolve(self, index: int, failed: int) -> Route:
        if self.route.epoch <= failed:
            raise LookupError("no newer primary yet")
        return self.route


def settings(data_dir: Path, **changed: Any) -> InstanceConfig:
    """A replica's settings: its journal in ``data_dir``, never fsynced, no read-back and no history
    export (unless ``changed``)."""
    return InstanceConfig(**{"data_dir": str(data_dir), "journal_fsync": "never", "journal_scrub_ms": 0,
                             "history_export_ms": 0, **changed})


@pytest.fixture
async def replicas(tmp_path: Path) -> AsyncIterator[dict[str, PartitionActor]]:
    made: dict[str, PartitionActor] = {}
    for name in ("a", "b", "c"):
        made[name] = PartitionActor(0, 1, settings(tmp_path / name), host="127.0.0.1", role="idle", replicated=True)
    yield made
    for actor in made.values():
        await actor.stop()


async def pair(replicas: dict[str, PartitionActor], epoch: int = 1) -> tuple[PartitionActor, PartitionActor]:
    """``a`` primary, ``b`` its backup, caught up."""
    primary, backup = replicas["a"], replicas["b"]
    address = await backup.become_backup(epoch)
    await primary.become_primary(epoch, address)
    await until(lambda: primary.core and primary.core.caught_up, "the backup to catch up")
    return primary, backup


async def linked(primary: PartitionActor, epoch: int, name: str = "gw") -> tuple[PartitionLink, Map]:
    routes = Map(Route(epoch, Handle(primary)))
    link = PartitionLink(name, [routes.route], lambda *_: None, resolve=routes.resolve)
    await link.attach()
    return link, routes


async def three_writes_on_a_pair(replicas: dict[str, PartitionActor]) -> tuple[PartitionActor, PartitionActor]:
    """A primary and its backup at epoch 1, with ``k0``..``k2`` written and replicated."""
    primary, backup = await pair(replicas)
    link, _ = await linked(primary, 1)
    try:
        for k in range(3):
            await link.request(0, p.SetValue(f"k{k}", cb(k), False, None, True))
        await until(lambda: len(topics(backup)) == 3, "the backup to hold the writes")
    finally:
        link.close()
    return primary, backup


async def crash(actor: PartitionActor) -> None:
    """As when the replica's process dies: its journal closes, every stream and the server with it."""
    core = actor.core
    assert core is not None
    await actor.stop()
    for peer in list(core.links.values()):
        if peer.transport is not None:
            peer.transport.abort()


def topics(actor: PartitionActor, volatile: bool = True) -> dict[str, Any]:
    assert actor.core is not None
    return {s.path: (s.type, s.value, s.events) for s in actor.core.store.state(volatile=volatile)}


def sequences(directory: Path) -> tuple[int, list[int]]:
    """A replica's journal as it reads back: its last record and every record its segments hold."""
    journal = Journal.for_partition(directory, 0)
    try:
        recovery = journal.recover()
        return recovery.last_sequence, [r.sequence for r in _records(journal)]
    finally:
        journal.close()


def _records(journal: Journal) -> list[Any]:
    from replication.journal import read_segment

    out: list[Any] = []
    for segment in sorted(journal.directory.glob("segment-*.log")):
        out.extend(read_segment(segment, 0))
    return out


async def test_a_write_is_answered_only_once_the_backup_has_it(replicas: dict[str, PartitionActor]) -> None:
    primary, backup = await pair(replicas)
    link, _ = await linked(primary, 1)
    try:
        assert await link.request(0, p.SetValue("x", cb(1), False, None, True)) == p.Ok("CREATED")
        assert topics(backup)["x"][1] == cb(1)
        assert backup.core is not None and backup.core.follower is not None
        backup.core.follower.transport.pause_reading()  # type: ignore[union-attr]
        pending = link.request(0, p.SetValue("x", cb(2), False))
        assert primary.core is not None
        await until(lambda: topics(primary)["x"][1] == cb(2), "the primary to apply the update")
        await until(lambda: len(primary.core._outbox) == 1, "the answer to wait for the backup")  # type: ignore[union-attr]
        assert not pending.done(), "answered before the backup had the update"
        backup.core.follower.transport.resume_reading()  # type: ignore[union-attr]
        assert await asyncio.wait_for(pending, DEADLINE) == p.Ok(None)
        assert topics(backup)["x"][1] == cb(2)
    finally:
        link.close()


async def test_a_promoted_backup_holds_every_acknowledged_write_and_continues_the_sequence(
    replicas: dict[str, PartitionActor], tmp_path: Path
) -> None:
    primary, backup = await pair(replicas)
    link, routes = await linked(primary, 1)
    acknowledged: dict[str, bytes] = {}
    try:
        added = [await link.request(0, p.AddTopic("series", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64"})),
                 await link.request(0, p.AddTopic("scratch", "INT64", {"PERSISTENT": "false"}))]
        assert added == [p.Ok("CREATED")] * 2
        for i in range(200):
            path = f"t/{i % 17}"
            result = await link.request(0, p.SetValue(path, cb(i), False, None, True))
            assert not isinstance(result, p.Failed), result
            acknowledged[path] = cb(i)
            await link.request(0, p.AppendEvent("series", cb(i), None))
        await link.request(0, p.SetValue("scratch", cb(7), False))
        before = topics(primary)
        sequence = primary.core.journal.last_sequence  # type: ignore[union-attr]

        await crash(primary)
        await backup.become_primary(2, None)
        routes.route = Route(2, Handle(backup))

        assert topics(backup) == before  # every topic, the volatile one too, every retained event
        result = await until(lambda: link.channels[0].broken is None and link.channels[0].epoch == 2, "the link to move")
        assert result
        assert await link.request(0, p.SetValue("t/0", cb(-1), False)) == p.Ok(None)
        assert backup.core is not None and backup.core.journal is not None
        assert backup.core.journal.last_sequence == sequence + 1
    finally:
        link.close()
    await backup.stop()
    last, records = sequences(tmp_path / "b")
    assert last == sequence + 1 and records == list(range(records[0], sequence + 2))  # no gap, no duplicate


async def test_each_copy_journals_the_epoch_of_the_primary_whose_records_it_holds(
    replicas: dict[str, PartitionActor], tmp_path: Path
) -> None:
    """a leads epoch 1 with b its backup; a crashes, b leads epoch 2 alone: both copies name epoch 1 for
    the records a journaled, b names epoch 2 for its own, and the copies agree (no two primaries in one epoch)."""
    from replication.journal_agreement import compare
    from replication.journal_check import read_copy

    primary, backup = await pair(replicas)
    link, routes = await linked(primary, 1)
    try:
        for i in range(20):
            assert not isinstance(await link.request(0, p.SetValue(f"t/{i % 3}", cb(i), False, None, True)), p.Failed)
        await crash(primary)
        await backup.become_primary(2, None)
        routes.route = Route(2, Handle(backup))
        await until(lambda: link.channels[0].broken is None and link.channels[0].epoch == 2, "the link to move")
        assert await link.request(0, p.SetValue("t/0", cb(-1), False)) == p.Ok(None)
    finally:
        link.close()
    await backup.stop()
    a, b = (read_copy(tmp_path / name / "journal" / "partition-0", 0, name) for name in ("a", "b"))
    assert {s.epoch for s in a.stamps} == {1} and [s.epoch for s in b.stamps][-1] == 2, (a, b)
    agreement = compare(0, [a, b])
    assert agreement.agree and agreement.epochs == (1, 2) and agreement.compared == len(b.stamps) - 1, agreement


async def test_a_replaced_primary_can_never_acknowledge_again(replicas: dict[str, PartitionActor]) -> None:
    """The old primary hangs on: its backup is promoted (epoch 2). The old one
    still applies what its links send, but nothing it applies is ever answered,
    and the new primary never sees it; trying its backup again, it learns that it
    was superseded and stops serving (its links fail over)."""
    primary, backup = await pair(replicas)
    link, routes = await linked(primary, 1)
    try:
        assert await link.request(0, p.SetValue("x", cb("before"), False, None, True)) == p.Ok("CREATED")
        await backup.become_primary(2, None)
        late = link.request(0, p.SetValue("x", cb("late"), False))
        await until(lambda: topics(primary)["x"][1] == cb("late"), "the old primary to apply it")
        assert primary.core is not None
        await until(lambda: primary.core.role == "idle", "the old primary to learn that it was superseded")  # type: ignore[union-attr]
        assert primary.core.backup is None and primary.core.backup_address is None
        assert not late.done() or isinstance(late.result(), p.Failed), "a replaced primary acknowledged a write"
        assert topics(backup)["x"][1] == cb("before")
        routes.route = Route(2, Handle(backup))
        link.set_routes([routes.route])  # the controller's push
        assert isinstance(await asyncio.wait_for(late, DEADLINE), p.Failed)  # fate unknown: UNAVAILABLE
        await until(lambda: link.channels[0].broken is None and link.channels[0].epoch == 2, "the link to move")
        assert await link.request(0, p.SetValue("x", cb("new"), False)) == p.Ok(None)
        assert topics(backup)["x"][1] == cb("new")
    finally:
        link.close()


async def test_a_handover_moves_every_operation_to_the_new_primary_once(replicas: dict[str, PartitionActor]) -> None:
    primary, backup = await pair(replicas)
    link, routes = await linked(primary, 1)
    try:
        answers: list[p.Result] = []
        for i in range(50):
            link.submit(0, p.AppendEvent("log", cb(i), None) if i else p.AddTopic(
                "log", "TIME_SERIES",
                {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64", "TIME_SERIES_RETAINED_RANGE": "limit 1000"},
            ), answers.append)
        await until(lambda: len(answers) >= 10, "some answers")
        position = await primary.handover(DEADLINE)  # what is in flight now gets MOVED
        address = await primary.become_backup(2)
        await backup.become_primary(2, address)
        routes.route = Route(2, Handle(backup))
        for i in range(50, 100):
            link.submit(0, p.AppendEvent("log", cb(i), None), answers.append)
        await until(lambda: len(answers) == 100, "every answer")
        assert all(not isinstance(a, p.Failed) for a in answers), [a for a in answers if isinstance(a, p.Failed)]
        events = topics(backup)["log"][2]
        assert [cbor2.loads(e.value) for e in events] == list(range(1, 100))  # each once, in order
        assert position["role"] == "primary"
        await until(lambda: backup.core and backup.core.caught_up, "the old primary to follow")
        assert topics(primary) == topics(backup)
    finally:
        link.close()


async def test_a_new_backup_is_primed_with_the_whole_state(replicas: dict[str, PartitionActor], tmp_path: Path) -> None:
    primary = replicas["a"]
    await primary.become_primary(1, None)  # alone: answers at once
    link, _ = await linked(primary, 1)
    try:
        await link.request(0, p.AddTopic("scratch", "STRING", {"PERSISTENT": "false"}))
        for i in range(2500):  # more than one prime frame
            link.submit(0, p.SetValue(f"k/{i}", cb(i), False, None, True))
        assert await link.request(0, p.SetValue("scratch", cb("v"), False)) == p.Ok(None)
        third = replicas["c"]
        await primary.set_backup(2, await third.become_backup(2))
        await until(lambda: primary.core and primary.core.caught_up, "the new backup to catch up")
        assert topics(third) == topics(primary) and len(topics(third)) == 2501
        assert await link.request(0, p.SetValue("k/0", cb(-5), False)) == p.Ok(None)
        assert topics(third)["k/0"][1] == cb(-5)
    finally:
        link.close()
    await third.stop()
    journal = Journal.for_partition(tmp_path / "c", 0)
    try:
        recovery = journal.recover()  # the backup's own journal: the persistent topics only
        paths = {s.path for s in recovery.states} | {c.path for c in recovery.changes}
        assert "scratch" not in paths and len(paths) == 2500
    finally:
        journal.close()


async def test_a_backup_refuses_a_primary_of_an_older_epoch(replicas: dict[str, PartitionActor]) -> None:
    primary, backup = replicas["a"], replicas["b"]
    await primary.become_primary(3, None)
    link, _ = await linked(primary, 3)
    try:
        address = await backup.become_backup(5)
        await primary.set_backup(3, address)  # a stale placement
        pending = link.request(0, p.SetValue("x", cb(1), False, None, True))
        # refused (Superseded): the primary is fenced off and its link fails what it had in flight
        assert isinstance(await asyncio.wait_for(pending, DEADLINE), p.Failed)
        assert primary.core is not None and primary.core.role == "idle"
        stats = await primary.stats()
        assert stats["backup"] is None, stats
        assert "x" not in topics(backup)
        moved = await asyncio.wait_for(link.request(0, p.SetValue("y", cb(1), False, None, True)), DEADLINE)
        assert isinstance(moved, p.Failed), moved  # MOVED, then no other primary to go to
        assert "y" not in topics(primary)
    finally:
        link.close()


async def test_an_unprimed_backup_cannot_take_over(replicas: dict[str, PartitionActor]) -> None:
    backup = replicas["b"]
    await backup.become_backup(1)
    with pytest.raises(NotCaughtUp):
        await backup.become_primary(2, None)
    with pytest.raises(Exception, match="backup"):
        await backup.attach("gw", 1)


async def test_a_promoted_backup_holds_the_recent_messages_numbered_as_its_primary_numbered_them(
    replicas: dict[str, PartitionActor],
) -> None:
    """What an MQTT session whose gateway was lost takes up its queue from: every acknowledged
    message (a non-retained publish too) is in the promoted backup's recent messages, at the
    position its primary gave it, and the promoted backup numbers on from there."""
    primary, backup = await pair(replicas)
    positions: list[int] = []
    link, routes = await linked(primary, 1)
    frames = link.channels[0]
    try:
        assert await link.request(0, p.SetValue("m/x", cb(0), False, None, True)) == p.Ok("CREATED")
        start = await link.request(0, p.ReadRecent(["?m//"], 0))
        assert isinstance(start, p.Ok) and isinstance(start.value, p.RecentAnswer), start
        for i in range(1, 50):
            retain = i % 5 != 0
            assert not isinstance(await link.request(0, p.SetValue("m/x", cb(i), False, retain=retain)), p.Failed)
        got = await link.request(0, p.ReadRecent(["?m//"], start.value.last - 1))
        assert isinstance(got, p.Ok), got
        before = got.value
        assert [cbor2.loads(e.value) for e in before.events] == list(range(50))
        assert before.last == start.value.last + 49
        positions.append(frames.position)

        await crash(primary)
        await backup.become_primary(2, None)
        routes.route = Route(2, Handle(backup))
        await until(lambda: link.channels[0].broken is None and link.channels[0].epoch == 2, "the link to move")
        after = await link.request(0, p.ReadRecent(["?m//"], start.value.last - 1))
        assert isinstance(after, p.Ok) and after.value == before  # the same messages at the same positions
        assert [getattr(e, "retained", True) for e in after.value.events][:6] == [True] * 5 + [False]
        assert await link.request(0, p.SetValue("m/x", cb(50), False)) == p.Ok(None)
        numbered = await link.request(0, p.ReadRecent(["m/x"], before.last))
        assert isinstance(numbered, p.Ok) and numbered.value.last == before.last + 1, numbered
        assert [cbor2.loads(e.value) for e in numbered.value.events] == [50]
        positions.append(frames.position)
    finally:
        link.close()
    assert positions == [before.last, before.last + 1]  # the link heard each position with its answers


async def test_a_backup_primed_late_holds_the_recent_messages_made_before_its_prime(
    replicas: dict[str, PartitionActor],
) -> None:
    """A primary alone takes messages; a backup primed afterwards gets its window of recent
    messages with the prime (more than one chunk of them), so when it takes over, a session taken
    up elsewhere still gets what was published before the prime."""
    primary = replicas["a"]
    await primary.become_primary(1, None)
    link, routes = await linked(primary, 1)
    try:
        assert await link.request(0, p.SetValue("m/x", cb(0), False, None, True)) == p.Ok("CREATED")
        start = await link.request(0, p.ReadRecent(["?m//"], 0))
        assert isinstance(start, p.Ok)
        for i in range(1, 1500):  # past one chunk of the prime (1,000)
            link.submit(0, p.SetValue("m/x", cb(i), False, retain=i % 3 != 0))
        assert not isinstance(await link.request(0, p.SetValue("m/x", cb(1500), False)), p.Failed)
        before = await link.request(0, p.ReadRecent(["?m//"], start.value.last - 1))
        assert isinstance(before, p.Ok) and len(before.value.events) == 1501, before
        late = replicas["b"]
        await primary.set_backup(2, await late.become_backup(2))
        await until(lambda: primary.core and primary.core.caught_up, "the late backup to be primed")
        await crash(primary)
        await late.become_primary(3, None)
        routes.route = Route(3, Handle(late))
        await until(lambda: link.channels[0].broken is None and link.channels[0].epoch == 3, "the link to move")
        after = await link.request(0, p.ReadRecent(["?m//"], start.value.last - 1))
        assert isinstance(after, p.Ok) and after.value == before.value  # the same messages, the same positions
    finally:
        link.close()


async def test_recent_messages_read_in_a_batch_include_the_whole_batch(replicas: dict[str, PartitionActor]) -> None:
    """A read of the recent messages answers for the end of its batch: a write after it in
    the same batch, whose event comes in the same Done ahead of the answer, is in it."""
    primary, _ = await pair(replicas)
    link, _ = await linked(primary, 1)
    try:
        assert await link.request(0, p.SetValue("r/x", cb(0), False, None, True)) == p.Ok("CREATED")
        start = await link.request(0, p.ReadRecent(["r/x"], 0))
        assert isinstance(start, p.Ok), start
        batches = link.channels[0].batches
        read = link.request(0, p.ReadRecent(["r/x"], start.value.last))
        write = link.request(0, p.SetValue("r/x", cb(1), False))  # the same loop turn: the same batch
        answer, written = await asyncio.gather(read, write)
        assert link.channels[0].batches == batches + 1 and written == p.Ok(None)
        assert isinstance(answer, p.Ok) and [cbor2.loads(e.value) for e in answer.value.events] == [1], answer
    finally:
        link.close()


async def test_a_promoted_backup_takes_over_the_removal_policies_and_removes_no_earlier(
    replicas: dict[str, PartitionActor],
) -> None:
    """The backup has each policy topic's creation and last update from its primary (times at
    or after the primary's), evaluates it once it is the primary, and removes the topic as a
    journaled, replicated change; a report of a creator's session closing removes its topic."""
    primary, backup = await pair(replicas)
    link, routes = await linked(primary, 1)
    try:
        policies = {"idle": "when no updates for 1s", "mine": "when this session closes"}
        for path, policy in policies.items():
            assert await link.request(0, p.AddTopic(path, "STRING", {"REMOVAL": policy}, "s1", ["R"])) == p.Ok("CREATED")
        updated = time.time()
        assert await link.request(0, p.SetValue("idle", cb("x"), False)) == p.Ok(None)
        assert backup.core is not None
        assert backup.core.store.removals.kept("mine") == primary.core.store.removals.kept("mine")  # type: ignore[union-attr]
        await crash(primary)
        await backup.become_primary(2, None)
        routes.route = Route(2, Handle(backup))
        await until(lambda: "idle" not in backup.core.store.tree, "the idle topic to go")  # type: ignore[union-attr]
        assert time.time() >= updated + 1.0
        assert "mine" in backup.core.store.tree
        watch = await link.request(0, p.RemovalFacts(0, {}, {}, {}))
        assert isinstance(watch, p.Ok) and watch.value.creators == ["s1"]
        assert await link.request(0, p.RemovalFacts(watch.value.version, {}, {}, {"s1": False})) == p.Ok(
            p.RemovalWatch(watch.value.version, [], [], ["s1"], []))
        await until(lambda: "mine" not in backup.core.store.tree, "the creator's topic to go")  # type: ignore[union-attr]
        assert backup.core.removed_by_policy == 2
    finally:
        link.close()


async def write_topics(link: PartitionLink) -> None:
    """301 persistent topics, the last one acknowledged; then the link closes."""
    try:
        for i in range(300):
            link.submit(0, p.SetValue(f"k/{i}", cb(i), False, None, True))
        assert await link.request(0, p.SetValue("k/last", cb("v"), False, None, True)) == p.Ok("CREATED")
    finally:
        link.close()


def flip_middle_byte(segment: Path) -> int:
    """Flip one bit half way through ``segment`` (records follow it): damage, not a torn tail."""
    data = bytearray(segment.read_bytes())
    where = len(data) // 2
    data[where] ^= 0x10
    segment.write_bytes(bytes(data))
    return where


async def test_a_replica_whose_journal_is_damaged_starts_empty_and_is_primed_again(
    replicas: dict[str, PartitionActor], tmp_path: Path
) -> None:
    """A bit flipped on the backup's disk while it was down: recovery finds it (CRC), the files
    are set aside in ``damaged-*/``, and the replica starts empty. It refuses to become a primary
    (it holds nothing) until its peer primed it; then it holds everything acknowledged and the
    mark is gone."""
    from replication.journal import DAMAGED_EPOCH, DAMAGED_FILE, held_epoch

    primary, backup = await pair(replicas)
    link, _ = await linked(primary, 1)
    await write_topics(link)
    acknowledged = topics(primary, volatile=False)
    await crash(primary)
    await crash(backup)
    (segment,) = sorted((tmp_path / "b" / "journal" / "partition-0").glob("segment-*.log"))
    flip_middle_byte(segment)
    again = PartitionActor(0, 1, settings(tmp_path / "b"), host="127.0.0.1", role="idle", replicated=True)
    home = PartitionActor(0, 1, settings(tmp_path / "a"), host="127.0.0.1", role="idle", replicated=True)
    try:
        with pytest.raises(NotCaughtUp, match="damaged"):
            await again.become_primary(2, None)
        place = tmp_path / "b" / "journal" / "partition-0"
        (aside,) = place.glob("damaged-*")
        assert (aside / segment.name).exists() and not list(place.glob("segment-*.log"))
        assert held_epoch(tmp_path / "b", 0) == DAMAGED_EPOCH
        assert (await again.position())["damaged"] is True
        await home.become_primary(3, await again.become_backup(3))
        await until(lambda: home.core and home.core.caught_up, "the damaged replica to be primed")
        assert topics(again, volatile=False) == acknowledged == topics(home, volatile=False)
        assert not (place / DAMAGED_FILE).exists() and held_epoch(tmp_path / "b", 0) == 3
        assert (await again.position())["damaged"] is False
    finally:
        await again.stop()
        await home.stop()


async def test_an_unreplicated_partition_refuses_a_damaged_journal_and_says_how_to_repair_it(tmp_path: Path) -> None:
    """With no peer to prime it, nothing is set aside: the start fails naming the file, with the repair command."""
    config = settings(tmp_path)
    first = PartitionActor(0, 1, config, host="127.0.0.1")
    link, _ = await linked(first, 0)
    await write_topics(link)
    await crash(first)
    (segment,) = sorted((tmp_path / "journal" / "partition-0").glob("segment-*.log"))
    flip_middle_byte(segment)
    second = PartitionActor(0, 1, config, host="127.0.0.1")
    try:
        with pytest.raises(JournalCorrupt, match=f"{segment}.*canopy journal repair"):
            await second.position()
        assert segment.exists() and not list(segment.parent.glob("damaged-*"))
    finally:
        await second.stop()


async def test_a_running_replica_replaces_a_journal_file_damaged_under_it(tmp_path: Path) -> None:
    """The disk flips a bit in a closed segment while the partition runs: its periodic read-back
    finds it, a snapshot of what the replica holds replaces it, the file is set aside, and a
    restart recovers every acknowledged write without meeting the damage."""
    config = settings(tmp_path, journal_segment_bytes=4096, journal_scrub_ms=50)
    first = PartitionActor(0, 1, config, host="127.0.0.1")
    link, _ = await linked(first, 0)
    place = tmp_path / "journal" / "partition-0"
    try:
        for i in range(400):  # one batch each: several segments
            assert await link.request(0, p.SetValue(f"k/{i}", cb(i), False, None, True)) == p.Ok("CREATED")
        assert await link.request(0, p.SetValue("k/last", cb("v"), False, None, True)) == p.Ok("CREATED")
        segments = sorted(place.glob("segment-*.log"))
        assert len(segments) > 3, segments
        flip_middle_byte(segments[1])
        assert first.core is not None
        await until(lambda: first.core and first.core.damaged_files == 1 and list(place.glob("damaged-*/*")),
                    "the damaged segment to be found and set aside")
        (aside,) = place.glob("damaged-*")
        assert [f.name for f in aside.iterdir()] == [segments[1].name]
        assert await link.request(0, p.SetValue("k/after", cb("w"), False, None, True)) == p.Ok("CREATED")
        acknowledged = topics(first, volatile=False)
    finally:
        link.close()
    await crash(first)
    again = PartitionActor(0, 1, replace(config, journal_scrub_ms=0), host="127.0.0.1")
    try:
        assert (await again.position())["sequence"] == 402
        assert topics(again, volatile=False) == acknowledged and len(acknowledged) == 402
    finally:
        await again.stop()


async def test_a_quiet_partition_syncs_its_last_bytes_though_its_timer_fired_early(tmp_path: Path) -> None:
    """Under ``interval``, a roll (a snapshot, a rollover, an export) fsyncs what waited and the
    next append starts a new wait: the timer set for the earlier due time ticks in vain and must be
    set again, or the last bytes of a partition that then goes quiet are never forced to disk."""
    actor = PartitionActor(0, 1, settings(tmp_path, journal_fsync="interval:200"), host="127.0.0.1")
    link, _ = await linked(actor, 0)
    try:
        assert await link.request(0, p.SetValue("a", cb(1), False, None, True)) == p.Ok("CREATED")
        journal = actor.core.journal  # type: ignore[union-attr]
        assert journal is not None and journal.next_sync_ms is not None  # the timer is set for it
        assert journal.roll()  # what waited is fsynced; the timer stays set for the old due time
        await asyncio.sleep(0.05)  # the next append comes later: its wait ends after the timer
        assert await link.request(0, p.SetValue("b", cb(2), False, None, True)) == p.Ok("CREATED")
        assert journal.next_sync_ms is not None
        await until(lambda: journal.next_sync_ms is None, "the last append to be fsynced, the partition quiet")
    finally:
        link.close()
        await actor.stop()


async def test_a_primary_gives_up_a_backup_connect_that_hangs_and_tries_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """After a long cut the kernel's SYN back-off alone would hold a primary's connect to its new
    backup for about 30 s: the connect is bounded (``BACKUP_CONNECT_TIMEOUT``), and the replica
    state machine is told it failed (it tries again after its back-off). Here the backup's
    listening queue is full, so its SYNs go unanswered."""
    import socket

    from actors import partition
    from replication.replica import Address

    monkeypatch.setattr(partition, "BACKUP_CONNECT_TIMEOUT", 0.2)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(0)
    queued = [socket.create_connection(listener.getsockname()), socket.socket()]
    queued[1].setblocking(False)
    try:
        queued[1].connect(listener.getsockname())
    except BlockingIOError:
        pass
    core = partition.Partition(0, "127.0.0.1")
    failed: list[int] = []
    monkeypatch.setattr(core.replica, "connect_failed", lambda attempt: failed.append(attempt) or [])
    monkeypatch.setattr(core.replica, "connected", lambda attempt, stream: pytest.fail("the connect completed"))
    try:
        host, port = listener.getsockname()
        await asyncio.wait_for(core._connect_backup(Address(host, port, "secret"), 0, 3), 10)
        assert failed == [3]
    finally:
        for s in (*queued, listener):
            s.close()


async def test_a_copy_awaiting_a_prime_leads_only_from_the_journal_the_controller_weighed(
    replicas: dict[str, PartitionActor], tmp_path: Path
) -> None:
    """A backup told to follow a newer primary marks its journal as awaiting a prime; restarted
    before the prime, it refuses to become the primary -- unless the controller placed the
    partition from every copy's journal and found this one the newest (``weighed``: the epoch and
    last record it read), and the journal still holds just that."""
    _, backup = await three_writes_on_a_pair(replicas)
    await backup.become_backup(2)  # a new primary will connect: its journal awaits that prime
    await crash(backup)
    again = PartitionActor(0, 1, settings(tmp_path / "b"), host="127.0.0.1", role="idle", replicated=True)
    try:
        position = await again.position()
        assert position["damaged"] and position["epoch"] == 1, position
        last = position["sequence"]
        with pytest.raises(NotCaughtUp, match="awaiting|damaged|primed"):
            await again.become_primary(3, None)
        with pytest.raises(NotCaughtUp):
            await again.become_primary(3, None, (1, last + 1))  # it does not hold what was weighed
        await again.become_primary(3, None, (1, last))
        assert not (await again.position())["damaged"]
        assert set(topics(again)) == {"k0", "k1", "k2"}
    finally:
        await again.stop()


async def test_a_journal_set_aside_as_damaged_is_never_taken_over_whatever_the_controller_weighed(
    replicas: dict[str, PartitionActor], tmp_path: Path
) -> None:
    """A replica whose journal failed its checks sets it aside (for ``canopy journal repair``) and
    holds nothing: even told that its journal holds nothing (``weighed=()``), it refuses to lead."""
    _, backup = await three_writes_on_a_pair(replicas)
    await crash(backup)
    segment = max((tmp_path / "b").rglob("segment-*.log"))
    data = bytearray(segment.read_bytes())
    data[len(data) // 2] ^= 0xFF
    segment.write_bytes(bytes(data))
    again = PartitionActor(0, 1, settings(tmp_path / "b"), host="127.0.0.1", role="idle", replicated=True)
    try:
        position = await again.position()
        assert position["damaged"] and position["sequence"] == 0, position
        with pytest.raises(NotCaughtUp, match="set aside"):
            await again.become_primary(3, None, ())
    finally:
        await again.stop()
