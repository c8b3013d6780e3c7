"""verify(): a journal's files checked read-only, each problem classified as recover() would treat it."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
import threading
import zlib
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from replication.journal import (
    Held,
    Journal,
    JournalCorrupt,
    JournalError,
    ProblemKind,
    Verification,
    held,
    partition_directory,
    read_segment,
    verify,
)
from tests.unit.replication.test_journal import _flip, batch, open_journal, segments, states


def contents(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(directory.rglob("*")) if p.is_file()}


def checked(directory: Path, **options: Any) -> Verification:
    """verify(), and that it changed no byte and created or removed no file."""
    before = contents(directory)
    verification = verify(directory, 0, **options)
    assert contents(directory) == before
    return verification


def write(directory: Path, batches: int = 12, snapshots: tuple[int, ...] = (), **options: Any) -> Journal:
    """A closed journal of ``batches`` batches of 3 records, snapshots after the batches named."""
    options.setdefault("segment_bytes", 600)
    journal = open_journal(directory, **options)
    journal.recover()
    for i in range(batches):
        journal.append(batch(i * 3, 3), i)
        if i in snapshots:
            journal.write_snapshot(states(4, str(i)), journal.last_sequence)
    journal.close()
    return journal


def snapshots(directory: Path) -> list[Path]:
    return sorted(directory.glob("snapshot-*.snap"))


def recovered(directory: Path, repair: bool = False) -> Any:
    journal = open_journal(directory)
    try:
        return journal.recover(repair=repair)
    finally:
        journal.close()


def test_a_clean_journal(tmp_path: Path) -> None:
    write(tmp_path, snapshots=(3, 7))
    v = checked(tmp_path)
    assert v.problems == () and v.worst is None and not v.damaged and v.skipped is None
    assert v.directory == tmp_path and v.partition == 0
    assert v.last_sequence == 36 and v.snapshot == snapshots(tmp_path)[-1] and v.snapshot_sequence == 24
    recovery = recovered(tmp_path)
    assert (recovery.last_sequence, recovery.snapshot_sequence) == (v.last_sequence, v.snapshot_sequence)


def test_an_empty_journal_and_a_missing_one(tmp_path: Path) -> None:
    v = checked(tmp_path)
    assert (v.problems, v.last_sequence, v.snapshot, v.snapshot_sequence) == ((), 0, None, 0)
    with pytest.raises(JournalError, match="no journal directory"):
        verify(tmp_path / "absent", 0)


def test_a_flipped_bit_in_a_closed_segment_is_damage(tmp_path: Path) -> None:
    write(tmp_path)
    files = segments(tmp_path)
    assert len(files) >= 3
    _flip(files[1], 60)
    v = checked(tmp_path)
    assert v.damaged and v.worst is ProblemKind.DAMAGE
    [problem] = v.problems
    with pytest.raises(JournalCorrupt) as caught:
        recovered(tmp_path)
    header_end = 8 + int.from_bytes(files[1].read_bytes()[:4], "little")  # offset 60 is in the record after it
    assert (problem.path, problem.offset) == (caught.value.path, caught.value.offset) == (files[1], header_end)
    assert problem.reason.startswith("checksum mismatch; a valid record follows at offset ")
    assert not problem.torn_tail and str(problem).startswith(f"{files[1]} at offset ")
    first = read_segment(files[0], 0)[-1].sequence
    assert v.last_sequence == first == recovered(tmp_path, repair=True).last_sequence


def last_frame(path: Path) -> tuple[int, int]:
    """The offset and the length of the last frame of ``path``."""
    data = path.read_bytes()
    offset = 0
    while True:
        length = int.from_bytes(data[offset:offset + 4], "little")
        if offset + 8 + length >= len(data):
            return offset, length
        offset += 8 + length


def test_a_last_frame_cut_short_is_a_torn_tail(tmp_path: Path) -> None:
    write(tmp_path)
    last = segments(tmp_path)[-1]
    records = read_segment(last, 0)
    os.truncate(last, last.stat().st_size - 3)
    v = checked(tmp_path)
    assert not v.damaged and v.worst is ProblemKind.TORN_TAIL
    [problem] = v.problems
    assert problem.torn_tail and problem.path == last and "recovery would cut" in problem.reason
    assert problem.reason.startswith("a frame cut short")
    assert v.last_sequence == records[-2].sequence == recovered(tmp_path).last_sequence


def test_a_flipped_bit_in_the_last_frame_of_the_last_segment_is_damage(tmp_path: Path) -> None:
    """The frame's bytes are all there: no write cut short leaves it so, and under ``always``
    its record may have been acknowledged. Recovery refuses it (a peer primes the replica
    again), a restarted cluster trusts a whole copy first, and ``repair`` cuts it, keeping
    the segment as ``*.corrupt``."""
    directory = partition_directory(tmp_path, 0)
    write(directory)
    last = segments(directory)[-1]
    records = read_segment(last, 0)
    assert held(tmp_path, 0) == Held(0, records[-1].sequence)
    _flip(last, last.stat().st_size - 3)
    v = checked(directory)
    assert v.damaged and v.worst is ProblemKind.DAMAGE
    [problem] = v.problems
    assert problem.path == last and problem.offset == last_frame(last)[0]
    assert problem.reason.startswith("checksum mismatch; it ends the journal, but a write cut short leaves no such")
    with pytest.raises(JournalCorrupt, match="checksum mismatch; it ends the journal"):
        recovered(directory)
    assert held(tmp_path, 0) == Held(-1, 0)
    repaired = recovered(directory, repair=True)
    assert v.last_sequence == records[-2].sequence == repaired.last_sequence
    assert (directory / (last.name + ".corrupt")).exists() and checked(directory).problems == ()


def test_a_last_frame_whose_length_went_bad_is_damage(tmp_path: Path) -> None:
    """Its length runs past the end of the file, as a frame cut short, but the bytes there match
    its checksum: they are the whole record, and its length field went bad."""
    write(tmp_path)
    last = segments(tmp_path)[-1]
    offset, length = last_frame(last)
    data = bytearray(last.read_bytes())
    data[offset:offset + 4] = (length + 64).to_bytes(4, "little")
    last.write_bytes(bytes(data))
    [problem] = checked(tmp_path).problems
    assert problem.kind is ProblemKind.DAMAGE and problem.offset == offset
    assert f"a frame length of {length + 64} bytes past the end of the file" in problem.reason


def test_zero_bytes_after_the_last_frame_are_a_torn_tail(tmp_path: Path) -> None:
    """What a file that grew before its bytes reached the disk reads as after a crash."""
    write(tmp_path)
    last = segments(tmp_path)[-1]
    size = last.stat().st_size
    os.truncate(last, size + 100)
    [problem] = checked(tmp_path).problems
    assert problem.torn_tail and problem.offset == size and problem.reason.startswith("100 zero bytes")


def test_a_segment_cut_short_in_the_middle_is_damage(tmp_path: Path) -> None:
    write(tmp_path)
    middle = segments(tmp_path)[1]
    os.truncate(middle, middle.stat().st_size // 2)
    v = checked(tmp_path)
    [problem] = v.problems
    assert problem.kind is ProblemKind.DAMAGE and problem.path == middle and "cut short" in problem.reason
    assert v.last_sequence == recovered(tmp_path, repair=True).last_sequence


def test_a_missing_segment_is_damage(tmp_path: Path) -> None:
    write(tmp_path)
    files = segments(tmp_path)
    files[1].unlink()
    [problem] = checked(tmp_path).problems
    assert problem.kind is ProblemKind.DAMAGE and problem.path == files[2] and problem.offset == 0
    assert "are missing before it" in problem.reason


def test_a_corrupt_snapshot_falls_back_to_the_older_one(tmp_path: Path) -> None:
    write(tmp_path, batches=10, snapshots=(3, 6), segment_bytes=10_000)
    older, newest = snapshots(tmp_path)
    _flip(newest, newest.stat().st_size // 2)
    v = checked(tmp_path)
    assert not v.damaged and v.worst is ProblemKind.SNAPSHOT
    [problem] = v.problems
    assert problem.path == newest and "starts from snapshot 12" in problem.reason
    assert v.snapshot == older and v.snapshot_sequence == 12 and v.last_sequence == 30
    recovery = recovered(tmp_path)
    assert (recovery.snapshot_sequence, recovery.last_sequence) == (12, 30)


def test_a_flip_in_a_snapshots_trailer(tmp_path: Path) -> None:
    write(tmp_path, batches=4, snapshots=(3,))
    [snapshot] = snapshots(tmp_path)
    data = snapshot.read_bytes()
    trailer = len(data) - 14  # [length][crc] msgpack ["end", 4]
    assert msgpack.unpackb(data[trailer + 8:]) == ["end", 4]
    _flip(snapshot, len(data) - 1)
    [problem] = checked(tmp_path).problems
    assert (problem.kind, problem.offset, problem.reason.split(";")[0]) == (
        ProblemKind.SNAPSHOT, trailer, "checksum mismatch")

    payload = msgpack.packb(["end", 5])  # a trailer whose checksum holds, with the wrong count
    snapshot.write_bytes(data[:trailer] + len(payload).to_bytes(4, "little")
                         + zlib.crc32(payload).to_bytes(4, "little") + payload)
    v = checked(tmp_path)
    [problem] = v.problems
    assert problem.offset == trailer and problem.reason.startswith("the trailer counts 5 topics, the file holds 4")
    assert v.snapshot is None and not v.damaged and v.last_sequence == 12  # every segment is still there


def test_an_older_snapshot_is_checked_too(tmp_path: Path) -> None:
    write(tmp_path, batches=10, snapshots=(3, 6), segment_bytes=10_000)
    older, newest = snapshots(tmp_path)
    _flip(older, 20)
    v = checked(tmp_path)
    [problem] = v.problems
    assert problem.kind is ProblemKind.SNAPSHOT and problem.path == older and "no fallback" in problem.reason
    assert v.snapshot == newest and not v.damaged


def test_no_snapshot_reaching_back_to_the_oldest_segment_is_damage(tmp_path: Path) -> None:
    write(tmp_path, batches=16, snapshots=(5, 10))
    assert segments(tmp_path)[0].name != "segment-00000000000000000001.log"  # the first segments went
    for snapshot in snapshots(tmp_path):
        _flip(snapshot, 20)
    v = checked(tmp_path)
    assert [p.kind for p in v.problems] == [ProblemKind.SNAPSHOT] * 2 + [ProblemKind.DAMAGE]
    assert "no snapshot covers them" in v.problems[-1].reason and v.snapshot is None
    with pytest.raises(JournalCorrupt, match="no snapshot covers them"):
        recovered(tmp_path)


def test_damage_in_a_segment_the_snapshot_covers(tmp_path: Path) -> None:
    write(tmp_path, batches=12, snapshots=(9,), keep_segment=lambda segment: True)
    first = segments(tmp_path)[0]
    _flip(first, 60)
    v = checked(tmp_path)
    [problem] = v.problems
    assert problem.kind is ProblemKind.COVERED and problem.path == first and not v.damaged
    assert "snapshot 30 covers it" in problem.reason
    assert recovered(tmp_path).last_sequence == v.last_sequence == 36  # recovery does not read it


def test_the_last_segment_may_be_left_unread(tmp_path: Path) -> None:
    write(tmp_path)
    files = segments(tmp_path)
    _flip(files[-1], files[-1].stat().st_size - 3)
    v = checked(tmp_path, skip_last_segment=True)
    assert v.problems == () and v.skipped == files[-1]
    assert v.last_sequence == int(files[-1].name[8:28]) - 1


def test_it_needs_no_lock_and_sees_no_damage_while_appends_go_on(tmp_path: Path) -> None:
    journal = open_journal(tmp_path, segment_bytes=3000)
    journal.recover()
    stop = threading.Event()
    appended = [0]

    def appends() -> None:  # rollovers, snapshots and the segments they let go
        while not stop.is_set():
            n = appended[0]
            journal.append(batch(n, 1 + n % 7), n)
            if n % 50 == 49:
                journal.write_snapshot(states(5), journal.last_sequence)
            appended[0] = n + 1

    writer = threading.Thread(target=appends)
    writer.start()
    try:
        checks = 0
        while checks < 40 or appended[0] < 300:
            v = verify(tmp_path, 0, skip_last_segment=bool(checks % 2))
            assert v.worst in (None, ProblemKind.TORN_TAIL), v.problems
            checks += 1
            assert checks < 100_000, "the writer made no progress"
    finally:
        stop.set()
        writer.join()
        journal.close()
    assert verify(tmp_path, 0).last_sequence == journal.last_sequence


# -- the oracle: recover() ----------------------------------------------------------------


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Snapshots after records 24 and 45; the segments after 24 (some covered by 45), up to 60."""
    directory = tmp_path_factory.mktemp("template")
    write(directory, batches=20, snapshots=(7, 14), segment_bytes=400)
    return directory


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_verify_says_what_recover_does(template: Path, data: st.DataObject) -> None:
    files = sorted(p.name for p in template.iterdir() if p.name.startswith(("segment-", "snapshot-")))
    name = data.draw(st.sampled_from(files), label="file")
    size = (template / name).stat().st_size
    damage = data.draw(st.sampled_from(["flip", "cut", "remove"]), label="damage")
    offset = data.draw(st.integers(0, size - 1), label="offset")
    with tempfile.TemporaryDirectory() as work:
        directory = Path(work) / "journal"
        shutil.copytree(template, directory)
        path = directory / name
        if damage == "flip":
            _flip(path, offset)
        elif damage == "cut":
            os.truncate(path, offset)
        else:
            path.unlink()
        v = checked(directory)
        try:
            recovery = recovered(directory)
        except JournalCorrupt as e:
            assert v.damaged and v.problems[-1].kind is ProblemKind.DAMAGE
            assert (v.problems[-1].path, v.problems[-1].offset) == (e.path, e.offset)
            recovery = recovered(directory, repair=True)
        else:
            assert not v.damaged
            torn = any(p.startswith("torn tail") for p in recovery.problems)
            assert torn == any(p.torn_tail for p in v.problems)
        assert (v.last_sequence, v.snapshot_sequence) == (recovery.last_sequence, recovery.snapshot_sequence)
        unreadable = sum("is unreadable" in p for p in recovery.problems)
        assert unreadable == sum(p.kind is ProblemKind.SNAPSHOT and "starts from" in p.reason for p in v.problems)
