"""The partition journal on real files: round trips, rollover, snapshots, torn tails, corruption, fsync policies."""

from __future__ import annotations

import errno
import os
import shutil
import stat
import tempfile
import threading
from pathlib import Path
from typing import Any

import cbor2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replication.journal import (
    DAMAGED_EPOCH,
    DEFAULT_FSYNC,
    MAX_RECORD,
    FsyncMode,
    FsyncPolicy,
    Journal,
    JournalBusy,
    JournalCorrupt,
    JournalError,
    JournalGap,
    JournalWriteError,
    Held,
    Record,
    awaiting_prime,
    held,
    held_epoch,
    partition_directory,
    read_segment,
    record_row,
)
from tests.unit.topics.test_changes import HISTORIES, Clock, persistent_topics, run
from topics.changes import Change, EventAppended, TopicAdded, TopicRemoved, TopicState, ValueSet
from topics.store import TopicStore
from topics.timeseries import Event


def value(i: int) -> bytes:
    return bytes(cbor2.dumps(f"value {i:06d} " + "x" * 36))  # ~50 bytes


def batch(start: int, n: int) -> list[Change]:
    return [ValueSet(f"topics/{i % 7}", "STRING", value(i)) for i in range(start, start + n)]


def segments(directory: Path) -> list[Path]:
    return sorted(directory.glob("segment-*.log"))


def open_journal(directory: Path, **options: Any) -> Journal:
    options.setdefault("policy", FsyncPolicy.parse("never"))
    return Journal(directory, **options)


def recover(directory: Path, **options: Any) -> tuple[list[TopicState], list[Change], Journal]:
    repair = options.pop("repair", False)
    journal = open_journal(directory, **options)
    recovery = journal.recover(repair=repair)
    return recovery.states, recovery.changes, journal


class FsyncCounter:
    def __init__(self) -> None:
        self.files = 0
        self.directories = 0

    def __call__(self, fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            self.directories += 1
        else:
            self.files += 1


# -- appending and recovering ----------------------------------------------------------


def test_append_and_recover_every_kind_of_change(tmp_path: Path) -> None:
    changes: list[Change] = [
        TopicAdded("a", "STRING", [["PRIORITY", "high"]], value(0)),
        ValueSet("a", "STRING", value(1)),
        TopicAdded("t", "TIME_SERIES", [["TIME_SERIES_EVENT_VALUE_TYPE", "string"]], None),
        EventAppended("t", "string", Event(0, 1000, "alice", value(2))),
        EventAppended("t", "string", Event(1, 1001, "bob", value(3), 0, 1000, "alice")),
        TopicRemoved("a"),
    ]
    journal = open_journal(tmp_path)
    assert journal.recover().changes == []
    assert journal.append(changes[:2], 100) == 2
    assert journal.append([], 101) == 2
    assert journal.append(changes[2:], 102) == 6
    journal.close()

    _, recovered, journal = recover(tmp_path)
    assert recovered == changes and journal.last_sequence == 6
    assert journal.append(batch(0, 3), 103) == 9
    journal.close()
    records = [r for path in segments(tmp_path) for r in read_segment(path, 0)]
    assert [r.sequence for r in records] == list(range(1, 10))
    assert [r.timestamp for r in records] == [100, 100, 102, 102, 102, 102, 103, 103, 103]
    _, recovered, journal = recover(tmp_path)
    assert recovered == changes + batch(0, 3)
    assert len(segments(tmp_path)) == 2  # a restarted journal never appends to an old segment
    journal.close()


def test_a_batch_is_one_write(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 1), 1)
    writes: list[int] = []
    real_write = os.write

    def counting(fd: int, data: Any) -> int:
        writes.append(len(data))
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", counting)
    journal.append(batch(1, 100), 2)
    monkeypatch.undo()
    assert len(writes) == 1 and writes[0] > 100 * 50
    journal.close()


def test_rollover_keeps_batches_whole(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=1000)
    journal.recover()
    sizes = [1, 5, 20, 3, 1, 1, 40, 2]
    start = 0
    for n in sizes:
        journal.append(batch(start, n), start)
        start += n
    closed = journal.closed_segments()
    journal.close()
    files = segments(tmp_path)
    assert len(files) > 3 and [s.path for s in closed] == files[:-1]
    firsts = [int(p.name[8:28]) for p in files]
    boundaries = {sum(sizes[:i]) + 1 for i in range(len(sizes))}
    assert set(firsts) <= boundaries  # a segment starts with a batch
    for segment in closed:
        records = read_segment(segment.path, 0)
        assert (records[0].sequence, records[-1].sequence) == (segment.first_sequence, segment.last_sequence)
        # only a single batch bigger than a segment takes one past its size
        assert segment.path.stat().st_size <= 1000 or records[0].timestamp == records[-1].timestamp
    _, recovered, journal = recover(tmp_path)
    assert recovered == batch(0, start)
    journal.close()


def test_append_needs_recover_and_an_open_journal(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    with pytest.raises(JournalError, match="recover"):
        journal.append(batch(0, 1), 0)
    journal.recover()
    with pytest.raises(JournalError, match="once"):
        journal.recover()
    journal.close()
    journal.close()
    with pytest.raises(JournalError, match="closed"):
        journal.append(batch(0, 1), 0)


def test_each_partition_has_its_directory(tmp_path: Path) -> None:
    journal = Journal.for_partition(tmp_path, 3, policy=FsyncPolicy.parse("never"))
    assert journal.directory == tmp_path / "journal" / "partition-3" and journal.partition == 3
    journal.recover()
    journal.append(batch(0, 1), 0)
    journal.close()
    assert read_segment(segments(journal.directory)[0], 3) == [Record(1, 0, batch(0, 1)[0])]
    with pytest.raises(JournalCorrupt, match="not the header of partition 2"):
        read_segment(segments(journal.directory)[0], 2)


def test_one_process_at_a_time(tmp_path: Path) -> None:
    first = open_journal(tmp_path)
    first.recover()
    with pytest.raises(JournalBusy):
        open_journal(tmp_path).recover()
    first.close()
    second = open_journal(tmp_path)
    second.recover()
    second.close()


def test_a_failed_write_leaves_the_journal_as_it_was(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 3), 0)
    size = segments(tmp_path)[0].stat().st_size
    real_write = os.write
    calls = []

    def half_then_full(fd: int, data: Any) -> int:
        calls.append(len(data))
        if len(calls) == 1:
            return real_write(fd, bytes(data[: len(data) // 2]))
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", half_then_full)
    with pytest.raises(JournalWriteError, match="No space"):
        journal.append(batch(3, 10), 1)
    monkeypatch.undo()
    assert segments(tmp_path)[0].stat().st_size == size and journal.last_sequence == 3
    assert journal.append(batch(3, 2), 2) == 5
    journal.close()
    _, recovered, journal = recover(tmp_path)
    assert recovered == batch(0, 3) + batch(3, 2)
    journal.close()


def test_record_rows_for_the_history_tables() -> None:
    e = Event(4, 50, "bob", b"v", 2, 40, "alice")
    row = record_row(3, Record(9, 1234, EventAppended("t", "string", e)))
    assert row["sequence"] == 9 and row["partition"] == 3 and row["operation"] == "edit"
    assert (row["event_sequence"], row["author"], row["original_author"], row["value"]) == (4, "bob", "alice", b"v")
    assert record_row(0, Record(1, 2, ValueSet("a", "INT64", b"\x01")))["type"] == "INT64"
    assert record_row(0, Record(1, 2, TopicRemoved("a")))["operation"] == "remove"
    added = record_row(0, Record(1, 2, TopicAdded("a", "JSON", [["PRIORITY", "high"]], None)))
    assert added["properties"] == [["PRIORITY", "high"]] and added["value"] is None


def test_a_backup_journals_under_its_primarys_numbers(tmp_path: Path) -> None:
    _, _, journal = recover(tmp_path)
    assert journal.append(batch(0, 3), 1, first=1) == 3
    with pytest.raises(JournalGap, match="record 5 follows record 3"):
        journal.append(batch(3, 2), 2, first=5)
    assert journal.append(batch(3, 2), 2, first=4) == 5
    journal.close()
    _, changes, again = recover(tmp_path)
    assert changes == batch(0, 5)
    again.close()


def test_reset_starts_over_from_a_primarys_state(tmp_path: Path) -> None:
    """A backup that takes its primary's state drops its own history and numbers on from the primary's."""
    _, _, journal = recover(tmp_path, segment_bytes=400)
    for start in range(0, 30, 5):
        journal.append(batch(start, 5), 1)
    journal.write_snapshot([], 10)
    assert len(segments(tmp_path)) > 1
    primary = [TopicState("p/a", "STRING", [], value(1)), TopicState("p/b", "STRING", [], value(2))]
    journal.reset(primary, 500)
    assert journal.last_sequence == 500 and journal.snapshot_sequence == 500
    assert segments(tmp_path) == [] and [p.name for p in tmp_path.glob("snapshot-*")] == [
        "snapshot-00000000000000000500.snap"
    ]
    with pytest.raises(JournalGap):
        journal.append(batch(0, 1), 2, first=600)
    assert journal.append([ValueSet("p/a", "STRING", value(3))], 2, first=501) == 501
    journal.close()
    states, changes, again = recover(tmp_path)
    assert states == primary and changes == [ValueSet("p/a", "STRING", value(3))]
    assert again.last_sequence == 501
    again.close()


def test_the_epoch_survives_a_restart(tmp_path: Path) -> None:
    _, _, journal = recover(tmp_path)
    assert journal.epoch == 0
    journal.set_epoch(7)
    journal.set_epoch(9)
    journal.close()
    _, _, again = recover(tmp_path)
    assert again.epoch == 9
    assert sorted(p.name for p in tmp_path.iterdir()) == ["EPOCH", "LOCK"]
    again.close()


def test_a_journal_awaiting_its_prime_is_weighed_at_the_epoch_of_the_state_it_holds(tmp_path: Path) -> None:
    """A backup told to follow at epoch 5 marks its journal (it may not lead from it) and saves
    no epoch: a restarted cluster weighs its records, kept, at the epoch it held them at. The
    prime's reset records epoch 5 and lifts the mark."""
    directory = partition_directory(tmp_path, 0)
    _, _, journal = recover(directory)
    journal.set_epoch(2)
    journal.append(batch(0, 4), 1)
    journal.await_prime(5)
    assert journal.damaged is not None and journal.damaged["awaiting_prime"] == 5 and awaiting_prime(journal.damaged)
    assert journal.epoch == 2 and held_epoch(tmp_path, 0) == 2 and held(tmp_path, 0) == Held(2, 4)
    journal.await_prime(6)  # told again, at a newer epoch, before any prime
    assert journal.damaged is not None and journal.damaged["awaiting_prime"] == 6 and journal.epoch == 2
    journal.close()
    _, changes, again = recover(directory)  # a restarted replica still has its records, and the mark
    assert changes == batch(0, 4) and again.epoch == 2 and awaiting_prime(again.damaged)
    again.reset([TopicState("p/a", "STRING", [], value(1))], 40)
    assert again.damaged is None and again.epoch == 6 and held(tmp_path, 0) == Held(6, 40)
    again.close()


def test_a_mark_of_a_journal_set_aside_stays_while_it_awaits_its_prime(tmp_path: Path) -> None:
    """Its files went (it holds nothing): it says so until the prime, which records the epoch."""
    directory = partition_directory(tmp_path, 0)
    _, _, journal = recover(directory)
    journal.set_epoch(3)
    journal.append(batch(0, 4), 1)
    journal.close()
    aside = Journal(directory)
    aside.set_aside("a checksum mismatch", 77)
    aside.recover()
    aside.await_prime(4)
    mark = aside.damaged
    assert mark is not None and mark["files"] == "damaged-77" and mark["awaiting_prime"] == 4
    assert not awaiting_prime(mark) and held(tmp_path, 0) == Held(DAMAGED_EPOCH, 0)
    aside.reset([], 9)
    assert aside.damaged is None and held(tmp_path, 0) == Held(4, 9)
    aside.close()


def test_a_journal_trusted_after_all_is_weighed_as_a_whole_one(tmp_path: Path) -> None:
    """Its replica took over from it, placed from every copy's journal with none newer."""
    directory = partition_directory(tmp_path, 0)
    _, _, journal = recover(directory)
    journal.append(batch(0, 3), 1)
    journal.await_prime(4)
    journal.set_epoch(5)  # it became the primary at epoch 5
    journal.trust()
    assert journal.damaged is None and held(tmp_path, 0) == Held(5, 3)
    journal.trust()  # nothing to lift
    journal.close()


def test_a_mark_on_nothing_holds_nothing(tmp_path: Path) -> None:
    """A new backup, never primed, has no journal to weigh."""
    journal = Journal(partition_directory(tmp_path, 0))
    journal.await_prime(3)
    assert journal.damaged is not None and held_epoch(tmp_path, 0) is None and held(tmp_path, 0) is None


def test_fsync_policies_parse() -> None:
    assert FsyncPolicy.parse("always").mode is FsyncMode.ALWAYS
    assert FsyncPolicy.parse("interval") == DEFAULT_FSYNC == FsyncPolicy(FsyncMode.INTERVAL, 100)
    assert FsyncPolicy.parse("interval:250").interval_ms == 250
    assert str(FsyncPolicy.parse(" Never ")) == "never" and str(DEFAULT_FSYNC) == "interval:100"
    for bad in ("sometimes", "interval:0", "interval:x", "always:5", ""):
        with pytest.raises(ValueError):
            FsyncPolicy.parse(bad)


# -- fsync policies --------------------------------------------------------------------


def test_fsync_always_syncs_every_batch_before_returning(tmp_path: Path) -> None:
    counter = FsyncCounter()
    journal = Journal(tmp_path, policy=FsyncPolicy.parse("always"), fsync=counter)
    journal.recover()
    for i in range(5):
        journal.append(batch(i * 10, 10), i)
        assert counter.files == i + 1
    assert counter.directories == 1  # the new segment's name
    assert not journal.tick(10**9)
    journal.close()
    assert counter.files == 5


def test_fsync_never_leaves_appends_to_the_system_but_keeps_segments_in_order(tmp_path: Path) -> None:
    """No append waits for an fsync; a segment is fsynced when it is closed, and a new one's name
    when it is made, so that a power cut leaves a prefix of the records, never a gap between segments."""
    counter = FsyncCounter()
    journal = Journal(tmp_path, policy=FsyncPolicy.parse("never"), fsync=counter, segment_bytes=500)
    journal.recover()
    for i in range(20):
        before = counter.files
        journal.append(batch(i, 3), i * 1000)
        made = len(segments(tmp_path))
        assert counter.files - before <= 1  # only the segment this append closed
    assert not journal.tick(10**9)
    journal.close()
    assert made > 1 and counter.files == made and counter.directories == made


def test_fsync_interval_syncs_once_a_byte_waited_that_long(tmp_path: Path) -> None:
    counter = FsyncCounter()
    journal = Journal(tmp_path, policy=FsyncPolicy.parse("interval:100"), fsync=counter)
    journal.recover()
    assert journal.next_sync_ms is None
    journal.append(batch(0, 1), 1000)
    journal.append(batch(1, 1), 1050)
    assert counter.files == 0 and journal.next_sync_ms == 1100
    assert not journal.tick(1099)
    journal.append(batch(2, 1), 1100)  # due, but that is the timer's job
    assert counter.files == 0
    assert journal.tick(1100) and counter.files == 1 and journal.next_sync_ms is None
    journal.append(batch(3, 1), 1120)
    assert not journal.tick(1150) and counter.files == 1
    assert journal.tick(1220) and counter.files == 2
    assert not journal.tick(5000)
    journal.append(batch(4, 1), 6000)
    journal.append(batch(5, 1), 6199)
    assert counter.files == 2
    journal.append(batch(6, 1), 6200)  # no timer came for twice the interval: the append syncs
    assert counter.files == 3 and journal.next_sync_ms is None
    journal.append(batch(7, 1), 6300)
    journal.close()  # close syncs what waits
    assert counter.files == 4


def test_rollover_syncs_the_segment_it_closes(tmp_path: Path) -> None:
    counter = FsyncCounter()
    journal = Journal(tmp_path, policy=FsyncPolicy.parse("interval:100"), fsync=counter, segment_bytes=300)
    journal.recover()
    journal.append(batch(0, 4), 0)
    journal.append(batch(4, 4), 1)  # rolls over: the first segment is synced before it is closed
    assert counter.files == 1 and counter.directories == 2
    journal.close()


# -- snapshots -------------------------------------------------------------------------


def states(n: int, tag: str = "") -> list[TopicState]:
    return [TopicState(f"s/{i}", "STRING", [], value(i) + tag.encode()) for i in range(n)]


def test_snapshot_then_later_changes(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=2000)
    journal.recover()
    journal.append(batch(0, 30), 0)
    assert journal.write_snapshot(iter(states(10)), 30).name == "snapshot-00000000000000000030.snap"
    journal.append(batch(30, 5), 1)
    journal.close()
    restored, changes, journal = recover(tmp_path)
    assert restored == states(10) and changes == batch(30, 5)
    assert journal.snapshot_sequence == 30 and journal.last_sequence == 35
    journal.close()


def test_snapshots_remove_what_the_previous_one_covers(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=1500)
    journal.recover()
    for i in range(4):
        journal.append(batch(i * 10, 10), 0)
    journal.write_snapshot(states(3, "a"), 40)
    assert len(segments(tmp_path)) >= 2  # nothing removed yet: the first snapshot is the only one
    journal.append(batch(40, 10), 1)
    journal.write_snapshot(states(3, "b"), 50)
    # the segments up to 40 went; 41..50 stay for a fallback to snapshot 40
    assert [p.name for p in segments(tmp_path)] == ["segment-00000000000000000041.log"]
    journal.append(batch(50, 10), 2)
    journal.write_snapshot(states(3, "c"), 60)
    assert [p.name for p in sorted(tmp_path.glob("snapshot-*"))] == [
        "snapshot-00000000000000000050.snap", "snapshot-00000000000000000060.snap"]
    assert [p.name for p in segments(tmp_path)] == ["segment-00000000000000000051.log"]
    journal.append(batch(60, 1), 3)
    journal.close()
    restored, changes, journal = recover(tmp_path)
    assert restored == states(3, "c") and changes == batch(60, 1)
    journal.close()


def test_keep_segment_keeps_covered_segments(tmp_path: Path) -> None:
    seen = []

    def keep(segment: Any) -> bool:
        seen.append((segment.first_sequence, segment.last_sequence))
        return True

    journal = open_journal(tmp_path, keep_segment=keep)
    journal.recover()
    for n in range(3):
        journal.append(batch(n * 10, 10), n)
        journal.write_snapshot(states(1, str(n)), (n + 1) * 10)
    assert len(segments(tmp_path)) == 3 and (1, 10) in seen
    journal.close()
    restored, changes, journal = recover(tmp_path)  # old segments before the snapshot are skipped
    assert restored == states(1, "2") and changes == []
    journal.close()


def test_a_corrupt_newest_snapshot_falls_back_to_the_previous_one(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 10), 0)
    journal.write_snapshot(states(5, "old"), 10)
    journal.append(batch(10, 10), 1)
    newest = journal.write_snapshot(states(5, "new"), 20)
    journal.append(batch(20, 3), 2)
    journal.close()
    data = bytearray(newest.read_bytes())
    data[len(data) // 2] ^= 0x40
    newest.write_bytes(bytes(data))

    restored, changes, journal = recover(tmp_path)
    assert restored == states(5, "old") and changes == batch(10, 13)
    assert newest.with_name(newest.name + ".corrupt").exists() and not newest.exists()
    journal.append(batch(23, 1), 3)
    journal.write_snapshot(states(5, "newer"), 24)
    journal.close()
    restored, changes, journal = recover(tmp_path)
    assert restored == states(5, "newer") and changes == []
    journal.close()


def test_an_incomplete_snapshot_is_not_used(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 10), 0)
    snapshot = journal.write_snapshot(states(50), 10)
    journal.close()
    with open(snapshot, "r+b") as f:
        f.truncate(snapshot.stat().st_size - 20)  # the trailer and a bit: every frame left is valid
    (tmp_path / ".snapshot-00000000000000000010.1.2.tmp").write_bytes(b"half written")
    restored, changes, journal = recover(tmp_path)
    assert restored == [] and changes == batch(0, 10)
    assert not list(tmp_path.glob(".snapshot-*"))
    journal.close()


def test_a_snapshot_written_on_another_thread_while_appends_go_on(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=4000)
    journal.recover()
    journal.append(batch(0, 50), 0)
    big = states(20_000)
    writer = threading.Thread(target=journal.write_snapshot, args=(big, 50))
    writer.start()
    n = 50
    while writer.is_alive() or n < 60:
        journal.append(batch(n, 1), n)
        n += 1
    writer.join()
    journal.append(batch(n, 1), n)
    journal.close()
    restored, changes, journal = recover(tmp_path)
    assert restored == big and changes == batch(50, n - 49)
    journal.close()


def test_a_previous_snapshot_that_no_longer_reads_keeps_every_segment(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=400)
    journal.recover()
    journal.append(batch(0, 10), 0)
    first = journal.write_snapshot(states(3, "1"), 10)
    journal.append(batch(10, 10), 1)
    data = bytearray(first.read_bytes())
    data[30] ^= 1
    first.write_bytes(bytes(data))
    before = len(segments(tmp_path))
    journal.write_snapshot(states(3, "2"), 20)
    assert len(segments(tmp_path)) == before and first.with_name(first.name + ".corrupt").exists()
    journal.close()


# -- torn tails and corruption ---------------------------------------------------------


def _template(directory: Path, batches: int = 4) -> tuple[Path, int, int]:
    """A journal whose last batch is one record; the segment and where that record starts and ends."""
    journal = open_journal(directory)
    journal.recover()
    for i in range(batches - 1):
        journal.append(batch(i * 3, 3), i)
    last = segments(directory)[-1]
    start = last.stat().st_size
    journal.append(batch(100, 1), 99)
    journal.close()
    return last, start, last.stat().st_size


def test_a_torn_tail_is_cut_at_every_offset_of_the_last_record(tmp_path: Path, caplog: pytest.LogCaptureFixture
                                                                ) -> None:
    template = tmp_path / "template"
    segment, start, end = _template(template)
    expected = batch(0, 3) + batch(3, 3) + batch(6, 3)
    for cut in range(start + 1, end):  # every way of writing part of the record
        work = tmp_path / f"cut-{cut}"
        shutil.copytree(template, work)
        torn = work / segment.name
        os.truncate(torn, cut)
        caplog.clear()
        _, changes, journal = recover(work)
        assert changes == expected, cut
        assert torn.stat().st_size == start
        assert f"torn tail of {torn} at offset {start}" in caplog.text
        assert journal.append(batch(200, 2), 5) == 11  # later appends continue cleanly
        journal.close()
        _, changes, journal = recover(work)
        assert changes == expected + batch(200, 2)
        journal.close()
        shutil.rmtree(work)


def test_a_bad_last_record_is_damage_not_a_torn_tail(tmp_path: Path) -> None:
    """Every byte of the last frame is there but its checksum fails: no write cut short leaves
    that, and under ``always`` its record may have been acknowledged. Recovery refuses it
    rather than cut it, and changes nothing; ``repair`` cuts it."""
    template = tmp_path / "template"
    segment, start, end = _template(template)
    for offset in (start, start + 4, start + 9, end - 1):  # the length, the checksum, the payload
        work = tmp_path / f"flip-{offset}"
        shutil.copytree(template, work)
        _flip(work / segment.name, offset)
        with pytest.raises(JournalCorrupt, match=f"corrupt at offset {start}: .*it ends the journal"):
            recover(work)
        assert (work / segment.name).stat().st_size == end
        _, changes, journal = recover(work, repair=True)
        assert changes == batch(0, 3) + batch(3, 3) + batch(6, 3), offset
        journal.close()


def test_a_torn_first_write_of_a_segment_is_cut(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 2), 0)
    journal.close()
    only = segments(tmp_path)[0]
    size = only.stat().st_size
    for cut in (0, 5, 20, size - 1):
        os.truncate(only, cut)
        _, changes, journal = recover(tmp_path)
        assert changes == [] and journal.last_sequence == 0 and only.stat().st_size <= cut
        journal.close()
    _, _, journal = recover(tmp_path)
    journal.append(batch(0, 1), 0)
    journal.close()
    assert recover(tmp_path)[1] == batch(0, 1)


@pytest.mark.parametrize("garbage", [b"\0" * 4096, b"\xff" * 7, bytes(range(256)) * 3])
def test_garbage_after_the_last_record_is_a_torn_tail(tmp_path: Path, garbage: bytes) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 5), 0)
    journal.close()
    segment = segments(tmp_path)[0]
    size = segment.stat().st_size
    with open(segment, "ab") as f:
        f.write(garbage)
    _, changes, journal = recover(tmp_path)
    assert changes == batch(0, 5) and segment.stat().st_size == size
    journal.close()


def _flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x08
    path.write_bytes(bytes(data))


def test_corruption_in_the_middle_refuses_to_start_unless_repaired(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=1200)
    journal.recover()
    for i in range(12):
        journal.append(batch(i * 4, 4), i)
    journal.close()
    files = segments(tmp_path)
    assert len(files) >= 3
    middle = files[1]
    records = read_segment(middle, 0)
    first = records[0].sequence
    offset = 60  # inside the first record after the header
    _flip(middle, offset)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}

    with pytest.raises(JournalCorrupt) as caught:
        open_journal(tmp_path).recover()
    assert caught.value.path == middle and caught.value.reason == "checksum mismatch"
    assert str(middle) in str(caught.value) and "repair=True" in str(caught.value)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before  # nothing changed

    journal = open_journal(tmp_path)
    recovery = journal.recover(repair=True)
    assert recovery.changes == batch(0, first - 1) and recovery.last_sequence == first - 1
    assert any("repair" in p for p in recovery.problems)
    assert middle.with_name(middle.name + ".corrupt").read_bytes() == before[middle.name]
    for later in files[2:]:
        assert not later.exists() and later.with_name(later.name + ".corrupt").exists()
    journal.append(batch(500, 2), 99)
    journal.close()
    _, changes, journal = recover(tmp_path)
    assert changes == batch(0, first - 1) + batch(500, 2)
    journal.close()


def test_a_refused_recovery_sets_nothing_aside(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=400)
    journal.recover()
    for i in range(6):
        journal.append(batch(i * 2, 2), i)
    snapshot = journal.write_snapshot(states(2), 12)
    journal.close()
    _flip(snapshot, 20)  # falls back to no snapshot: every segment is read
    _flip(segments(tmp_path)[0], 60)
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(JournalCorrupt):
        open_journal(tmp_path).recover()
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def test_a_bad_record_followed_by_good_ones_in_the_last_segment_is_corruption(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    for i in range(5):
        journal.append(batch(i * 2, 2), i)
    journal.close()
    segment = segments(tmp_path)[0]
    _flip(segment, segment.stat().st_size // 2)
    with pytest.raises(JournalCorrupt, match="a valid record follows"):
        open_journal(tmp_path).recover()


def test_the_bad_last_record_of_an_older_segment_is_corruption(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=400)
    journal.recover()
    for i in range(6):
        journal.append(batch(i * 2, 2), i)
    journal.close()
    older = segments(tmp_path)[0]
    _flip(older, older.stat().st_size - 3)
    with pytest.raises(JournalCorrupt, match="later segment"):
        open_journal(tmp_path).recover()


def test_a_missing_segment_is_corruption(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=400)
    journal.recover()
    for i in range(6):
        journal.append(batch(i * 2, 2), i)
    journal.close()
    files = segments(tmp_path)
    files[1].unlink()
    with pytest.raises(JournalCorrupt, match="missing"):
        open_journal(tmp_path).recover()
    recovery = open_journal(tmp_path).recover(repair=True)
    assert recovery.changes == [r.change for r in read_segment(files[0], 0)]


def test_a_frame_may_not_announce_an_impossible_length(tmp_path: Path) -> None:
    journal = open_journal(tmp_path)
    journal.recover()
    journal.append(batch(0, 3), 0)
    journal.append(batch(3, 3), 1)
    journal.close()
    segment = segments(tmp_path)[0]
    data = bytearray(segment.read_bytes())
    header_end = 8 + data[0]
    data[header_end:header_end + 4] = (MAX_RECORD + 1).to_bytes(4, "little")
    segment.write_bytes(bytes(data))
    with pytest.raises(JournalCorrupt, match="impossible frame length"):
        open_journal(tmp_path).recover()


# -- a store through the journal -------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HISTORIES, st.lists(st.integers(1, 6), min_size=1), st.sets(st.integers(0, 30), max_size=3), st.data())
def test_a_store_comes_back_from_its_journal(ops: list[Any], sizes: list[int], snapshots: set[int],
                                             data: st.DataObject) -> None:
    clock = Clock()
    store = TopicStore(clock=clock, record_changes=True)
    with tempfile.TemporaryDirectory() as directory:
        journal = Journal(directory, policy=FsyncPolicy.parse("never"), segment_bytes=data.draw(
            st.sampled_from([200, 2000, 1 << 20]), label="segment_bytes"))
        journal.recover()
        i = 0
        for n, size in enumerate(sizes * (len(ops) // len(sizes) + 1)):
            if i >= len(ops):
                break
            run(store, clock, ops[i:i + size])
            i += size
            journal.append(store.drain_changes(), clock.now)
            if n in snapshots:
                journal.write_snapshot(store.state(), journal.last_sequence)
        journal.close()
        journal = Journal(directory)
        recovery = journal.recover()
        journal.close()
    restored = TopicStore()
    restored.load(recovery.states)
    assert restored.replay(recovery.changes) == 0
    assert persistent_topics(restored) == persistent_topics(store)
