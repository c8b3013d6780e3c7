"""The disk model on its own: the fsync policies, power cuts, corruption, what ``held`` says.
(``test_models.py`` checks it against the real journal.)"""

from __future__ import annotations

import random
from typing import Any

import pytest

from replication.journal import JournalCorrupt, JournalError, JournalGap, Recovery
from tests.simulation.disk import NodeDisk, SimJournal


def journal(policy: str = "always") -> SimJournal:
    j = SimJournal("node-1", 0, policy)
    j.recover()
    return j


def contents(recovery: Recovery) -> tuple[list[Any], list[Any], int, int]:
    """What recovery gave back: states, changes (the model's are whatever was appended), snapshot, last."""
    return list(recovery.states), list(recovery.changes), recovery.snapshot_sequence, recovery.last_sequence


def test_appends_number_records_and_a_backup_must_follow_its_last() -> None:
    j = journal()
    assert j.append(["a", "b"], 1000) == 2
    assert j.append(["c"], 1001, first=3) == 3
    with pytest.raises(JournalGap):
        j.append(["d"], 1002, first=5)
    assert j.append([], 1003, first=99) == 3  # nothing to journal: nothing checked
    assert [r[0] for r in j.records] == [1, 2, 3] and j.synced == 3
    fresh = SimJournal("node-1", 0)
    with pytest.raises(JournalError):
        fresh.append(["x"], 0)


def test_a_kill_loses_nothing_and_a_power_cut_what_was_not_synced() -> None:
    j = journal("interval:100")
    j.append(["a"], 1000)
    assert j.next_sync_ms == 1100
    assert not j.tick(1099) and j.tick(1100) and j.next_sync_ms is None
    j.append(["b"], 1200)
    j.kill()
    assert j.last_sequence == 0
    with pytest.raises(JournalError):
        j.append(["c"], 1300)
    assert contents(j.recover()) == ([], ["a", "b"], 0, 2)  # and synced: recovery syncs what it finds
    j.append(["c"], 1300)
    j.power_cut()
    recovery = j.recover()
    assert contents(recovery) == ([], ["a", "b"], 0, 2) and recovery.times == [1000, 1200]


def test_interval_an_append_twice_the_interval_late_syncs() -> None:
    j = journal("interval:100")
    j.append(["a"], 1000)
    j.append(["b"], 1150)
    assert j.synced == 0
    j.append(["c"], 1200)  # the oldest waited 200 ms: the timer is late
    assert j.synced == 3 and j.next_sync_ms is None


def test_a_killed_process_unsynced_records_are_synced_by_the_next_one_so_no_power_cut_leaves_a_hole() -> None:
    j = journal("interval:100")
    j.append(["a"], 1000)
    j.kill()
    j.recover()
    j.append(["b"], 2000)
    assert j.tick(2100) and j.synced == 2
    assert j.held() == (0, 2)
    j.power_cut()
    assert j.held() == (0, 2) and j.recover().last_sequence == 2


def test_writeback_may_keep_part_of_the_unsynced_tail() -> None:
    kept = set()
    for seed in range(40):
        j = journal("interval:100")
        j.append(["a", "b", "c"], 1000)
        j.power_cut(random.Random(seed))
        kept.add(j.recover().last_sequence)
    assert kept == {0, 1, 2, 3}


def test_reset_snapshot_and_epoch_are_durable_at_once() -> None:
    j = journal("never")
    j.append(["old"], 1000)
    j.set_epoch(4)
    j.reset(["state"], 10)
    j.append(["new"], 1001)
    j.power_cut()
    assert contents(j.recover()) == (["state"], [], 10, 10)
    assert j.epoch == 4 and j.held() == (4, 10)
    j.append(["x", "y"], 1002)
    j.write_snapshot(["state 2"], 12)
    j.power_cut()
    assert contents(j.recover()) == (["state 2"], [], 12, 12)
    with pytest.raises(JournalError):
        j.write_snapshot([], 13)


def test_corruption_refuses_recovery_the_last_record_too() -> None:
    """A durable record whose bytes went bad is damage wherever it is: the last one may have
    been acknowledged (the real journal: a whole frame that fails its checksum)."""
    rng = random.Random(0)
    for bad in (3, 1):
        j = journal()
        j.append(["a", "b", "c"], 1000)
        assert j.corrupt(rng, bad) == bad and j.corrupt(rng, 99) is None
        j.set_epoch(3)
        assert j.held() == (-1, 0)
        j.kill()
        with pytest.raises(JournalCorrupt):
            j.recover()
        assert j.held() == (-1, 0)
        j.set_aside("corrupt", 2000)
        assert contents(j.recover()) == ([], [], 0, 0) and j.damaged is not None and j.epoch == 0
        assert j.held() == (-1, 0)
        with pytest.raises(JournalError):
            j.set_aside("again", 2001)
        j.await_prime(4)
        assert j.held() == (-1, 0)  # still set aside
        j.reset(["primed"], 7)
        assert j.damaged is None and j.held() == (4, 7)


def test_a_journal_awaiting_its_prime_keeps_its_records_and_epoch() -> None:
    j = journal()
    j.set_epoch(2)
    j.append(["a", "b"], 1000)
    j.await_prime(5)
    assert j.damaged is not None and j.held() == (2, 2) and j.epoch == 2
    j.kill()
    assert contents(j.recover()) == ([], ["a", "b"], 0, 2) and j.damaged is not None
    j.reset(["primed"], 9)
    assert j.damaged is None and j.epoch == 5 and j.held() == (5, 9)
    fresh = journal()
    fresh.await_prime(3)
    assert fresh.held() is None  # a mark on nothing


def test_held_says_none_for_a_journal_never_written() -> None:
    j = SimJournal("node-1", 0)
    assert j.held() is None
    j.set_epoch(2)
    assert j.held() is None  # an EPOCH file alone is no journal
    j.recover()
    j.append(["a"], 0)
    assert j.held() == (2, 1)


def test_a_node_disk_holds_a_journal_per_partition() -> None:
    disk = NodeDisk("node-2", "interval:50")
    assert disk.journal(1) is disk.journal(1) and disk.held(0) is None
    a = disk.journal(0)
    a.recover()
    a.append(["a"], 0)
    disk.kill()
    assert not a.recovered and disk.held(0) == (0, 1)
    disk.set_policy("always")
    assert disk.journal(3).policy.mode.value == "always"
