"""A partition's journal and snapshots on local disk.

Each partition replica journals the changes its :class:`~topics.store.TopicStore`
records (:mod:`topics.changes`) in its own directory,
``<data_dir>/journal/partition-<i>/`` (:meth:`Journal.for_partition`)::

    LOCK                                  flock'ed by the one process that owns the journal
    segment-00000000000000000001.log      records 1 ... (named by the first sequence it holds)
    segment-00000000000000052174.log      the active segment: appends go here
    EPOCH                                 {"epoch": 7}: the last partition map epoch this replica was given
    snapshot-00000000000000050000.snap    topic states after record 50000 (the previous snapshot)
    snapshot-00000000000000052173.snap    topic states after record 52173 (the newest)

Using it (the partition actor)::

    journal = Journal.for_partition(data_dir, index, policy=FsyncPolicy.parse("interval:100"))
    recovery = journal.recover()                  # once, first: locks, reads, repairs the tail
    store.load(recovery.states); store.replay(recovery.changes)
    ...after each batch, before answering it:
    journal.append(store.drain_changes(), now_ms)
    ...interval policy: at journal.next_sync_ms, on a worker thread: journal.tick(now_ms)
    ...now and then: states, sequence = store.state(), journal.last_sequence   (together, between batches)
                     journal.write_snapshot(states, sequence)                 (may run on a worker thread)
    journal.close()

Files
=====

Every file is a sequence of *frames*, back to back::

    [length: u32 little-endian][crc32 of the payload: u32 little-endian][payload: length bytes]

``length`` is 1 .. :data:`MAX_RECORD`; the payload is one msgpack value. The
first frame of a file is its header.

A *segment* holds the partition's records in sequence order, sequences
1, 2, 3, ... with no gaps across segments::

    header   ["canopy-journal", 1, partition, first_sequence]
    record   [sequence, timestamp_ms, change]      change: topics.changes.encode_change
                                                   e.g. [2, path, type, value]

A batch's records (and, for a new segment, its header) reach the file in one
``os.write``. A segment is closed when the next batch would take it past
``segment_bytes`` (a batch is never split) and when a snapshot covers its
records; then a new one is opened. Closed segments never change again: the
history side can turn each into one Parquet file, one row per record, with
the columns of :func:`record_row` (sequence, timestamp, partition, path,
operation, type, properties, value, event_sequence, event_timestamp,
author, original_sequence, original_timestamp, original_author) —
self-contained, as every record names its path and value type.

A *snapshot* holds the persistent topics after one record::

    header   ["canopy-snapshot", 1, partition, sequence]
    state    topics.changes.encode_state   (one frame per topic)
    ...
    trailer  ["end", number_of_states]

It is written to a temporary file, fsynced, renamed into place, and the
directory fsynced (whatever the fsync policy: a snapshot lets segments go).
It is encoded one topic at a time, never as one big value.

Durability
==========

:class:`FsyncPolicy`: ``always`` (fsync before :meth:`Journal.append`
returns), ``interval:<ms>``, ``never`` (the operating system decides; still
on snapshots). Under ``interval`` the owner calls :meth:`Journal.tick` when
:attr:`Journal.next_sync_ms` comes (once a byte has waited ``<ms>``), best
on a worker thread, so its event loop never waits for an fsync; ``append``
itself fsyncs only when a byte has waited twice that long (a late or
missing timer); rollover and close fsync too. Under every policy ``append``
returns only after the bytes are in the operating system, so the owner
acknowledges a batch after ``append`` and a ``kill -9`` of any process loses
nothing acknowledged. The default is ``interval:100``: an fsync costs
0.2-10 ms here, which ``always`` adds to every batch (``bench/journal.py``),
while a power cut or kernel crash loses at most the last ~100 ms of
acknowledged updates (plus the timer's lateness).

Keeping segments for a fallback: after a snapshot is written, segments are
removed only when the *previous* snapshot covers them, and only the newest
two snapshots are kept. So if the newest snapshot turns out unreadable,
recovery falls back to the previous one and still finds every record after
it. ``keep_segment`` (history retention) can keep covered segments longer.

Recovery
========

:meth:`Journal.recover` takes the newest snapshot that reads back whole (an
unreadable one is logged and renamed ``*.corrupt``) and every record after
it, checking each frame's length, checksum, decoding and sequence:

* A bad frame in the *last* segment with no valid frame after it is a torn
  tail (a write cut short by a crash): logged with file and offset, and the
  segment truncated at the last good record. Its batch was never
  acknowledged under ``always``; under the other policies only a power cut
  tears a segment, and it may lose what the policy says.
* Anything else (a bad frame in an older segment, one followed by valid
  records, a gap or overlap between segments, no snapshot reaching back to
  the oldest segment) would lose later records silently if cut: it raises
  :class:`JournalCorrupt` naming the file and offset, and changes nothing.
  ``recover(repair=True)`` cuts there instead: the damaged segment is copied
  to ``<name>.corrupt`` and truncated, every later segment renamed
  ``*.corrupt``, and the cut reported in :attr:`Recovery.problems`.

A replica whose peer holds the partition does not cut: :meth:`Journal.set_aside`
moves every file into ``damaged-<ms>/`` and marks the directory ``DAMAGED``; the
replica starts empty, may not become a primary, and is whole again when its peer
primes it (:meth:`Journal.reset` removes the mark). :func:`held_epoch` says
:data:`DAMAGED_EPOCH` for it, so a restarted cluster trusts any whole replica
first, and refuses to start the partition, naming the damage, when there is none.

Errors::

    JournalError              a journal cannot be used as asked
    ├── JournalCorrupt        bytes fail their checks where later records depend on them
    ├── JournalBusy           another process holds the journal's lock
    ├── JournalGap            a backup's records would not follow its last one
    └── JournalWriteError     the operating system refused a write or an fsync

Verification
============

:func:`verify` reads a journal directory as :meth:`Journal.recover` would, and
also the snapshots and segments recovery skips. It changes nothing and does
not need the lock, so it can run beside the process that appends. It returns a
:class:`Verification`: the last good record, the snapshot recovery would
start from, and each :class:`Problem` with its file, offset, reason and
:class:`ProblemKind`. A partly written batch at the end of the last segment
counts as a torn tail, not as damage. ``canopy journal check`` and
``canopy journal repair`` (:mod:`replication.cli`) run :func:`verify` and
``recover(repair=True)`` on every journal in a data directory.

Replicas
========

A partition's backup journals what its primary sends under the primary's
numbers (``append(changes, now, first=...)``), and starts over from the
primary's state with :meth:`Journal.reset` (a snapshot after the primary's
last record, every older file gone). ``EPOCH`` holds the partition map epoch
the replica was last given (:meth:`Journal.set_epoch`): after a full restart
the replica with the newest epoch, then the longest journal, is the one to
trust.
"""

from __future__ import annotations

import enum
import fcntl
import json
import logging
import mmap
import os
import re
import shutil
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import msgpack

from topics.changes import (
    Change,
    ChangeFormatError,
    EventAppended,
    TopicAdded,
    TopicState,
    ValueSet,
    decode_change,
    decode_state,
    encode_change,
    encode_state,
    operation_name,
)

__all__ = [
    "DEFAULT_FSYNC", "FsyncMode", "FsyncPolicy", "Journal", "JournalBusy", "JournalCorrupt", "JournalError", "JournalGap",
    "JournalWriteError", "Problem", "ProblemKind", "Record", "Recovery", "Segment", "Verification", "read_segment",
    "record_row", "verify",
]

log = logging.getLogger("canopy.journal")

FORMAT = 1
SEGMENT_MAGIC = "canopy-journal"
SNAPSHOT_MAGIC = "canopy-snapshot"
#: the largest payload a frame may announce (a change carries one value)
MAX_RECORD = 512 * 1024 * 1024
SEGMENT_BYTES = 64 * 1024 * 1024
EPOCH_FILE = "EPOCH"
#: the mark of a journal whose files were set aside (:meth:`Journal.set_aside`)
DAMAGED_FILE = "DAMAGED"
#: what :func:`held_epoch` says of such a journal: older than any epoch, so a whole replica is preferred
DAMAGED_EPOCH = -1
_FRAME = struct.Struct("<II")
_SEGMENT_NAME = re.compile(r"segment-(\d{20})\.log")
_SNAPSHOT_NAME = re.compile(r"snapshot-(\d{20})\.snap")
_RECORD_START = 0x93  # a record payload is a msgpack array of 3
_SEARCH_BUDGET = 256 * 1024 * 1024
_UNPACK_ERRORS = (ValueError, TypeError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError)


class JournalError(Exception):
    """A journal cannot be used as asked."""


class JournalCorrupt(JournalError):
    """Bytes of ``path`` at ``offset`` fail their checks where later records depend on them."""

    def __init__(self, path: Path, offset: int, reason: str, detail: str = "") -> None:
        self.path = path
        self.offset = offset
        self.reason = reason
        super().__init__(
            f"journal file {path} is corrupt at offset {offset}: {reason}{detail}. Nothing was changed; "
            "recover(repair=True) cuts the journal there (the damaged and later segments are kept as *.corrupt)"
        )


class JournalBusy(JournalError):
    """Another process holds the journal's lock."""


class JournalGap(JournalError):
    """Records that would not follow the journal's last one."""


class JournalWriteError(JournalError):
    """The operating system refused a write or an fsync (the OSError is the cause)."""


# -- policy ----------------------------------------------------------------------------


class FsyncMode(enum.Enum):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


@dataclass(frozen=True)
class FsyncPolicy:
    """When appended bytes are forced to disk: ``always``, ``interval:<ms>`` or ``never``."""

    mode: FsyncMode
    interval_ms: int = 0

    def __post_init__(self) -> None:
        if self.mode is FsyncMode.INTERVAL and self.interval_ms <= 0:
            raise ValueError(f"an fsync interval is a positive number of milliseconds, got {self.interval_ms}")

    @classmethod
    def parse(cls, text: str) -> FsyncPolicy:
        """``always``, ``never``, ``interval`` (100 ms) or ``interval:<ms>``."""
        word, _, ms = text.strip().lower().partition(":")
        try:
            mode = FsyncMode(word)
        except ValueError:
            raise ValueError(f"unknown fsync policy {text!r}: use always, interval:<ms> or never") from None
        if mode is not FsyncMode.INTERVAL:
            if ms:
                raise ValueError(f"fsync policy {word} takes no interval, got {text!r}")
            return cls(mode)
        if not ms:
            return DEFAULT_FSYNC
        if not ms.isdigit():
            raise ValueError(f"an fsync interval is a number of milliseconds, got {text!r}")
        return cls(mode, int(ms))

    def __str__(self) -> str:
        return f"interval:{self.interval_ms}" if self.mode is FsyncMode.INTERVAL else self.mode.value


DEFAULT_FSYNC = FsyncPolicy(FsyncMode.INTERVAL, 100)


# -- records ---------------------------------------------------------------------------


class Record(NamedTuple):
    """One journaled change: its sequence in the partition and when it was appended."""

    sequence: int
    timestamp: int
    change: Change


class Segment(NamedTuple):
    """A closed segment file and the sequences it holds."""

    path: Path
    first_sequence: int
    last_sequence: int


@dataclass(frozen=True)
class Recovery:
    """What :meth:`Journal.recover` found: load ``states``, then replay ``changes``."""

    states: list[TopicState]
    changes: list[Change]
    snapshot_sequence: int  # 0: no snapshot
    last_sequence: int
    problems: tuple[str, ...] = ()  # what was cut, skipped or set aside (each also logged)
    #: when each of ``changes`` was journaled (ms since the epoch), in the same order
    times: list[int] = field(default_factory=list)


ROW_COLUMNS = (
    "sequence", "timestamp", "partition", "path", "operation", "type", "properties", "value",
    "event_sequence", "event_timestamp", "author", "original_sequence", "original_timestamp", "original_author",
)


def record_row(partition: int, record: Record) -> dict[str, Any]:
    """A record as one row of the history tables (:data:`ROW_COLUMNS`; ``None`` where a column does not apply)."""
    change = record.change
    row: dict[str, Any] = dict.fromkeys(ROW_COLUMNS)
    row.update(sequence=record.sequence, timestamp=record.timestamp, partition=partition, path=change.path,
               operation=operation_name(change))
    if isinstance(change, ValueSet):
        row.update(type=change.type, value=change.value)
    elif isinstance(change, EventAppended):
        e = change.event
        row.update(type=change.type, value=e.value, event_sequence=e.sequence, event_timestamp=e.timestamp,
                   author=e.author, original_sequence=e.original_sequence,
                   original_timestamp=e.original_timestamp, original_author=e.original_author)
    elif isinstance(change, TopicAdded):
        row.update(type=change.type, properties=change.properties, value=change.value)
    return row


def _frame(payload: bytes) -> bytes:
    return _FRAME.pack(len(payload), zlib.crc32(payload)) + payload


def _segment_name(first: int) -> str:
    return f"segment-{first:020d}.log"


def _snapshot_name(sequence: int) -> str:
    return f"snapshot-{sequence:020d}.snap"


class _Bad(Exception):
    """A frame that fails its checks (internal: turned into a torn tail or :class:`JournalCorrupt`)."""

    def __init__(self, offset: int, reason: str) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason


class _Frames:
    """The frames of a file's bytes from ``offset``; stops at the first bad one,
    leaving :attr:`offset` at its start and :attr:`problem` saying why."""

    def __init__(self, data: Any, offset: int = 0) -> None:
        self.data = data
        self.offset = offset
        self.problem: str | None = None

    def __iter__(self) -> Iterator[bytes]:
        data, size = self.data, len(self.data)
        offset = self.offset
        while offset < size:
            problem = _check_frame(data, offset, size)
            if problem is not None:
                self.problem = problem
                return
            length, _ = _FRAME.unpack_from(data, offset)
            end = offset + 8 + length
            yield data[offset + 8:end]
            offset = self.offset = end

    def bad(self, reason: str) -> _Bad:
        """The error for the frame at :attr:`offset`."""
        return _Bad(self.offset, reason)


def _check_frame(data: Any, offset: int, size: int) -> str | None:
    """Why the frame at ``offset`` is bad, or ``None``."""
    if size - offset < 8:
        return f"a frame header cut short ({size - offset} of 8 bytes)"
    length, crc = _FRAME.unpack_from(data, offset)
    if not 0 < length <= MAX_RECORD:
        return f"impossible frame length {length}"
    if offset + 8 + length > size:
        return f"a frame cut short ({size - offset - 8} of {length} bytes)"
    if zlib.crc32(data[offset + 8:offset + 8 + length]) != crc:
        return "checksum mismatch"
    return None


def _valid_record_after(data: Any, offset: int) -> int | None:
    """The offset of a valid record frame after ``offset``, if any (tells a
    corrupt middle from a torn tail). Past a budget of checksummed bytes
    (crafted values could make the search quadratic) it answers ``offset``:
    corrupt, the safe side."""
    size = len(data)
    start = offset + 1
    budget = _SEARCH_BUDGET
    marker = bytes([_RECORD_START])
    while start + 8 < size:
        i: int = data.find(marker, start + 8)
        if i < 0:
            return None
        candidate = i - 8
        length = _FRAME.unpack_from(data, candidate)[0]
        if 0 < length <= size - i:
            budget -= length
            if budget < 0:
                return offset
            if _check_frame(data, candidate, size) is None:
                return candidate
        start = candidate + 1
    return None


def _unpack(payload: bytes) -> Any:
    return msgpack.unpackb(payload, raw=False, use_list=True, strict_map_key=True)


def _open_data(path: Path) -> tuple[Any, Callable[[], None]]:
    """The bytes of ``path`` (mapped, not read into memory) and how to let go of them."""
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        if size == 0:
            return b"", lambda: None
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    return mapped, mapped.close


class _SegmentScan(NamedTuple):
    records: list[Record]  # those after ``after``
    last_sequence: int  # of the last good record (first - 1 when none)
    end: int  # the offset just past the last good record (0: not even the header)
    bad: _Bad | None
    valid_after_bad: int | None  # offset of a valid record after the bad one
    size: int  # of the bytes scanned


def _read_data(path: Path) -> tuple[Any, Callable[[], None]]:
    """The bytes of ``path``, read: a file another thread may change under a mapping would be a SIGBUS."""
    with open(path, "rb") as f:
        return f.read(), lambda: None


def _scan_segment(
    path: Path, partition: int, first: int, after: int,
    opener: Callable[[Path], tuple[Any, Callable[[], None]]] = _open_data, *, keep: bool = True,
) -> _SegmentScan:
    """Check ``path``'s frames, header and sequences, decode the records after
    ``after`` (and keep them unless not ``keep``); stop at the first bad frame."""
    data, release = opener(path)
    try:
        frames = _Frames(data)
        records: list[Record] = []
        expected = first
        end = 0
        bad: _Bad | None = None
        header_seen = False
        try:
            for payload in frames:
                try:
                    item = _unpack(payload)
                except _UNPACK_ERRORS as e:
                    raise frames.bad(f"a payload that is not msgpack ({e})") from None
                if not header_seen:
                    if item != [SEGMENT_MAGIC, FORMAT, partition, first]:
                        raise frames.bad(
                            f"not the header of partition {partition}'s segment from {first}: {item!r:.200}"
                        )
                    header_seen = True
                else:
                    if not (isinstance(item, list) and len(item) == 3 and item[0] == expected
                            and isinstance(item[1], int)):
                        raise frames.bad(f"not record {expected}: {item!r:.200}")
                    if expected > after:
                        try:
                            change = decode_change(item[2])
                        except ChangeFormatError as e:
                            raise frames.bad(f"record {expected}: {e}") from None
                        if keep:
                            records.append(Record(expected, item[1], change))
                    expected += 1
                end = frames.offset + 8 + len(payload)
            if frames.problem is not None:
                raise frames.bad(frames.problem)
        except _Bad as e:
            bad = e
        valid_after = _valid_record_after(data, bad.offset) if bad is not None else None
        return _SegmentScan(records, expected - 1, end, bad, valid_after, len(data))
    finally:
        release()


def read_segment(path: str | os.PathLike[str], partition: int) -> list[Record]:
    """Every record of a closed segment (for the history side); :class:`JournalCorrupt` if one fails its checks."""
    path = Path(path)
    match = _SEGMENT_NAME.fullmatch(path.name)
    if match is None:
        raise JournalError(f"{path} is not named like a journal segment (segment-<first sequence>.log)")
    scan = _scan_segment(path, partition, int(match.group(1)), 0)
    if scan.bad is not None:
        raise JournalCorrupt(path, scan.bad.offset, scan.bad.reason)
    return scan.records


def _read_snapshot(path: Path, partition: int, sequence: int, keep: bool = True) -> list[TopicState]:
    """The topic states of snapshot ``path`` (none kept unless ``keep``, every one
    decoded); :class:`_Bad` where it fails a check."""
    data, release = _open_data(path)
    try:
        frames = _Frames(data)
        states: list[TopicState] = []
        count = 0
        header: Any = None
        done = False
        for payload in frames:
            if done:
                raise frames.bad("bytes after the trailer")
            try:
                item = _unpack(payload)
            except _UNPACK_ERRORS as e:
                raise frames.bad(f"a payload that is not msgpack ({e})") from None
            if header is None:
                header = item
                if item != [SNAPSHOT_MAGIC, FORMAT, partition, sequence]:
                    raise frames.bad(f"not the header of partition {partition}'s snapshot {sequence}: {item!r:.200}")
            elif isinstance(item, list) and len(item) == 2 and item[0] == "end":
                if item[1] != count:
                    raise frames.bad(f"the trailer counts {item[1]!r} topics, the file holds {count}")
                done = True
            else:
                try:
                    state = decode_state(item)
                except ChangeFormatError as e:
                    raise frames.bad(str(e)) from None
                count += 1
                if keep:
                    states.append(state)
        if frames.problem is not None:
            raise frames.bad(frames.problem)
        if not done:
            raise frames.bad("no trailer: the snapshot is incomplete")
        return states
    finally:
        release()


# -- reading a journal's files (recovery and verification) -----------------------------


class _Listing(NamedTuple):
    segments: list[int]  # first sequences, ascending
    snapshots: list[int]  # sequences, ascending


def _list_files(directory: Path, remove_temporaries: bool = False) -> _Listing:
    """The segments and snapshots in ``directory``; ``remove_temporaries`` (the owner
    only): remove snapshots that were being written when their process ended."""
    segments: list[int] = []
    snapshots: list[int] = []
    for entry in directory.iterdir():
        if (m := _SEGMENT_NAME.fullmatch(entry.name)) is not None:
            segments.append(int(m.group(1)))
        elif (m := _SNAPSHOT_NAME.fullmatch(entry.name)) is not None:
            snapshots.append(int(m.group(1)))
        elif remove_temporaries and entry.name.startswith(".snapshot-") and entry.name.endswith(".tmp"):
            entry.unlink()
    segments.sort()
    snapshots.sort()
    return _Listing(segments, snapshots)


class _Base(NamedTuple):
    """The snapshot recovery starts from: the newest that reads back whole."""

    sequence: int | None  # None: no snapshot reads back whole
    states: list[TopicState]
    unreadable: list[tuple[int, _Bad]]  # the newer snapshots, newest first, and why each fails


def _find_base(directory: Path, partition: int, snapshots: list[int], keep: bool = True) -> _Base:
    unreadable: list[tuple[int, _Bad]] = []
    for sequence in reversed(snapshots):
        try:
            states = _read_snapshot(directory / _snapshot_name(sequence), partition, sequence, keep)
        except _Bad as e:
            unreadable.append((sequence, e))
            continue
        return _Base(sequence, states, unreadable)
    return _Base(None, [], unreadable)


class _Cut(NamedTuple):
    """Where the records stop short of the journal's end."""

    position: int  # of the segment in the listing
    offset: int
    reason: str
    detail: str  # what follows the bad bytes
    scan: _SegmentScan | None  # the segment's (None: the cut is before it, at a gap or an overlap)


class _Walk(NamedTuple):
    """The records after the base snapshot, read as :meth:`Journal.recover` reads them."""

    start: int  # index of the first segment read: the snapshot covers the segments before it
    kept: list[int]  # the segments that stay (the torn one, once cut, too)
    changes: list[Change]
    times: list[int]
    last: int  # the sequence of the last good record
    torn: _Cut | None  # a bad frame at the end of the last segment with nothing valid after it
    damage: _Cut | None  # anything else bad: later records depend on it (JournalCorrupt)


def _walk_segments(
    directory: Path, partition: int, segments: list[int], base: int, *, keep: bool = True, skip_last: bool = False,
    opener: Callable[[Path], tuple[Any, Callable[[], None]]] = _open_data,
) -> _Walk:
    """Read the records after record ``base`` (decoded; kept if ``keep``), checking
    that each segment follows the one before; stop at the first bad frame, gap or
    overlap. ``skip_last``: leave the last segment unread."""
    changes: list[Change] = []
    times: list[int] = []
    last = base
    # from the last segment starting at or before base + 1
    start = 0
    while start + 1 < len(segments) and segments[start + 1] <= base + 1:
        start += 1
    kept = segments[:start]
    for i in range(start, len(segments) - 1 if skip_last else len(segments)):
        first = segments[i]
        cut: _Cut | None = None
        if first > last + 1:
            cut = _Cut(i, 0, f"records {last + 1}..{first - 1} are missing before it"
                             + ("" if base or last else " (and no snapshot covers them)"), "", None)
        elif i > start and first <= last:
            cut = _Cut(i, 0, f"it starts at record {first}, which the segment before it holds already", "", None)
        if cut is not None:
            return _Walk(start, kept, changes, times, last, None, cut)
        scan = _scan_segment(directory / _segment_name(first), partition, first, base, opener, keep=keep)
        changes.extend(r.change for r in scan.records)
        times.extend(r.timestamp for r in scan.records)
        last = max(last, scan.last_sequence)
        if scan.bad is None:
            kept.append(first)
            continue
        if i == len(segments) - 1 and scan.valid_after_bad is None:
            kept.append(first)
            return _Walk(start, kept, changes, times, last, _Cut(i, scan.bad.offset, scan.bad.reason, "", scan), None)
        detail = (f"; a valid record follows at offset {scan.valid_after_bad}" if scan.valid_after_bad
                  is not None else f"; {len(segments) - 1 - i} later segment(s) follow")
        return _Walk(start, kept, changes, times, last, None, _Cut(i, scan.bad.offset, scan.bad.reason, detail, scan))
    return _Walk(start, kept, changes, times, last, None, None)


# -- verification ----------------------------------------------------------------------


class ProblemKind(enum.Enum):
    """What :func:`verify` found wrong, from the least serious to the most."""

    #: a bad frame at the very end of the last segment with nothing valid after it: a
    #: write cut short by a crash, or one still under way; recovery cuts it
    TORN_TAIL = "torn tail"
    #: a snapshot that does not read back whole: recovery sets it aside and starts from
    #: an older one (or none), or it is the older one a fallback would need
    SNAPSHOT = "unreadable snapshot"
    #: a bad frame, gap or overlap among the segments the snapshot covers: recovery does
    #: not read them, but the history export and a fallback to an older snapshot do
    COVERED = "damaged covered segment"
    #: what :meth:`Journal.recover` refuses (:class:`JournalCorrupt`) and ``recover(repair=True)`` cuts
    DAMAGE = "damaged"


@dataclass(frozen=True)
class Problem:
    """One thing wrong in ``path`` at ``offset``."""

    kind: ProblemKind
    path: Path
    offset: int
    reason: str

    @property
    def torn_tail(self) -> bool:
        return self.kind is ProblemKind.TORN_TAIL

    def __str__(self) -> str:
        return f"{self.path} at offset {self.offset}: {self.kind.value}: {self.reason}"


@dataclass(frozen=True)
class Verification:
    """What :func:`verify` found in a journal directory."""

    directory: Path
    partition: int
    #: the last good record: where :meth:`Journal.recover` ends (``recover(repair=True)`` when damaged)
    last_sequence: int
    #: the snapshot recovery starts from (``None``: none reads back whole) and its sequence (0: none)
    snapshot: Path | None
    snapshot_sequence: int
    problems: tuple[Problem, ...] = ()
    #: the last segment, left unread (``skip_last_segment``)
    skipped: Path | None = None

    @property
    def damaged(self) -> bool:
        """Whether :meth:`Journal.recover` would raise :class:`JournalCorrupt`."""
        return any(p.kind is ProblemKind.DAMAGE for p in self.problems)

    @property
    def worst(self) -> ProblemKind | None:
        """The most serious kind of problem found (``None``: none)."""
        order = list(ProblemKind)
        return max((p.kind for p in self.problems), key=order.index, default=None)


#: how many times :func:`verify` starts over when a file goes while it is read
_VERIFY_ATTEMPTS = 5


def verify(directory: str | os.PathLike[str], partition: int, *, skip_last_segment: bool = False) -> Verification:
    """Check the journal of ``partition`` in ``directory`` without changing anything
    and without its lock. It runs beside the process that owns the journal, on any
    thread.

    It checks every snapshot (header, frames, checksums, decoding, the trailer's
    count) and every segment (header, frames, checksums, the sequence of its
    records, decoding of the records recovery replays). It also checks that each
    segment follows the one before with no gap or overlap, and that the snapshot
    recovery starts from reaches back to the segments after it. What is found is
    classified as :meth:`Journal.recover` would treat it (:class:`ProblemKind`).

    Segments are read, not mapped, so the last one may grow or be cut meanwhile.
    A batch still being written at its end counts as a torn tail, never as damage.
    ``skip_last_segment`` leaves that segment unread, which suits a periodic check
    of a journal in use. If a file goes while it is read (a snapshot let it go),
    the check starts over. Raises :class:`JournalError` when ``directory`` is not
    a directory."""
    directory = Path(directory)
    for _ in range(_VERIFY_ATTEMPTS):
        if not directory.is_dir():
            raise JournalError(f"no journal directory {directory}")
        try:
            return _verify(directory, partition, skip_last_segment)
        except FileNotFoundError:
            continue
    raise JournalError(f"the files in {directory} kept going while they were read: try again")


def _verify(directory: Path, partition: int, skip_last: bool) -> Verification:
    segments, snapshots = _list_files(directory)
    problems: list[Problem] = []
    found = _find_base(directory, partition, snapshots, keep=False)
    base = found.sequence or 0
    for sequence, bad in found.unreadable:
        problems.append(Problem(ProblemKind.SNAPSHOT, directory / _snapshot_name(sequence), bad.offset, bad.reason
                                + "; recovery sets it aside and starts from "
                                + (f"snapshot {found.sequence}" if found.sequence is not None else "no snapshot")))
    for sequence in snapshots:
        if found.sequence is not None and sequence < found.sequence:
            path = directory / _snapshot_name(sequence)
            try:
                _read_snapshot(path, partition, sequence, keep=False)
            except _Bad as e:
                problems.append(Problem(ProblemKind.SNAPSHOT, path, e.offset, f"{e.reason}; no fallback if "
                                        f"snapshot {found.sequence} fails"))
    walk = _walk_segments(directory, partition, segments, base, keep=False, skip_last=skip_last, opener=_read_data)
    for i in range(walk.start):  # covered by the snapshot: the history export and a fallback read them
        path = directory / _segment_name(segments[i])
        scan = _scan_segment(path, partition, segments[i], 0, _read_data, keep=False)
        following = segments[i + 1]
        covered = f"; snapshot {base} covers them"
        if scan.bad is not None:
            problems.append(Problem(ProblemKind.COVERED, path, scan.bad.offset,
                                    f"{scan.bad.reason}; snapshot {base} covers it"))
        elif following > scan.last_sequence + 1:
            problems.append(Problem(ProblemKind.COVERED, directory / _segment_name(following), 0,
                                    f"records {scan.last_sequence + 1}..{following - 1} are missing before it"
                                    + covered))
        elif following <= scan.last_sequence:
            problems.append(Problem(ProblemKind.COVERED, directory / _segment_name(following), 0,
                                    f"it starts at record {following}, which the segment before it holds already"
                                    + covered))
    for cut, kind in ((walk.torn, ProblemKind.TORN_TAIL), (walk.damage, ProblemKind.DAMAGE)):
        if cut is None:
            continue
        reason = cut.reason + cut.detail
        if kind is ProblemKind.TORN_TAIL and cut.scan is not None:
            reason += (f": a write cut short, or still under way; recovery would cut the "
                       f"{cut.scan.size - cut.scan.end} bytes after record {cut.scan.last_sequence}")
        problems.append(Problem(kind, directory / _segment_name(segments[cut.position]), cut.offset, reason))
    return Verification(
        directory, partition, walk.last,
        directory / _snapshot_name(found.sequence) if found.sequence is not None else None, base,
        tuple(problems), directory / _segment_name(segments[-1]) if skip_last and segments else None,
    )


# -- the journal -----------------------------------------------------------------------


def partition_directory(data_dir: str | os.PathLike[str], partition: int) -> Path:
    return Path(data_dir) / "journal" / f"partition-{partition}"


def damage_of(directory: Path) -> dict[str, Any] | None:
    """The ``DAMAGED`` mark of a journal directory (:meth:`Journal.set_aside`), or ``None``."""
    try:
        found = json.loads((directory / DAMAGED_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"reason": "an unreadable DAMAGED mark"}
    return found if isinstance(found, dict) else {"reason": "an unreadable DAMAGED mark"}


def held_epoch(data_dir: str | os.PathLike[str], partition: int) -> int | None:
    """The epoch a replica of ``partition`` whose journal is under ``data_dir`` was last
    given (0: none recorded), :data:`DAMAGED_EPOCH` for a journal set aside as damaged
    (it holds nothing to trust, but it did hold the partition), or ``None`` when there is
    no journal there. Reads only."""
    directory = partition_directory(data_dir, partition)
    if damage_of(directory) is not None:
        return DAMAGED_EPOCH
    try:
        if not any(f.name.startswith(("segment-", "snapshot-")) for f in directory.iterdir()):
            return None
    except OSError:
        return None
    try:
        return int(json.loads((directory / EPOCH_FILE).read_text(encoding="utf-8"))["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class Held(NamedTuple):
    """What a replica's journal holds, as a restarted cluster weighs it: the epoch it was
    last given (:data:`DAMAGED_EPOCH` when its files fail their checks where recovery
    would refuse them, or were set aside) and the last record recovery would give back."""

    epoch: int
    sequence: int


def held(data_dir: str | os.PathLike[str], partition: int) -> Held | None:
    """:func:`held_epoch`, with every file read back (:func:`verify`): a journal recovery
    would refuse counts as damaged, and a torn tail counts for the records before it.
    ``None`` when there is no journal there."""
    epoch = held_epoch(data_dir, partition)
    if epoch is None or epoch == DAMAGED_EPOCH:
        return None if epoch is None else Held(DAMAGED_EPOCH, 0)
    try:
        checked = verify(partition_directory(data_dir, partition), partition)
    except JournalError:
        return Held(DAMAGED_EPOCH, 0)
    return Held(DAMAGED_EPOCH, 0) if checked.damaged else Held(epoch, checked.last_sequence)


class Journal:
    """One partition's journal in ``directory``. Call :meth:`recover` once,
    first; then :meth:`append` after each batch, :meth:`tick` at
    :attr:`next_sync_ms` (interval policy), :meth:`write_snapshot` now and
    then (one at a time), :meth:`close` at the end. ``append``, ``tick``, ``write_snapshot`` and ``close`` may be
    called from different threads (``write_snapshot`` writes the file without
    holding up appends). ``fsync`` is called with a file descriptor for
    every fsync (tests count them). ``keep_segment`` says whether a segment a
    snapshot covers must stay all the same (history retention)."""

    def __init__(
        self,
        directory: str | os.PathLike[str],
        *,
        partition: int = 0,
        policy: FsyncPolicy = DEFAULT_FSYNC,
        segment_bytes: int = SEGMENT_BYTES,
        keep_segment: Callable[[Segment], bool] | None = None,
        fsync: Callable[[int], None] = os.fsync,
    ) -> None:
        self.directory = Path(directory)
        self.partition = partition
        self.policy = policy
        self.segment_bytes = segment_bytes
        self.keep_segment = keep_segment
        self._fsync = fsync
        self._lock = threading.Lock()
        self._lock_fd: int | None = None
        self._recovered = False
        self._closed = False
        self._last = 0
        self._segments: list[int] = []  # first sequences, ascending; the last may be active
        self._snapshots: list[int] = []  # sequences of readable snapshots, ascending
        self._fd: int | None = None  # the active segment, open for appending
        self._active_first = 0
        self._active_size = 0
        self._dirty_since: int | None = None  # ms of the oldest append not fsynced
        self._packer = msgpack.Packer(use_bin_type=True)

    @classmethod
    def for_partition(cls, data_dir: str | os.PathLike[str], partition: int, **options: Any) -> Journal:
        """The journal of partition ``partition`` in ``<data_dir>/journal/partition-<i>/``."""
        return cls(partition_directory(data_dir, partition), partition=partition, **options)

    @property
    def last_sequence(self) -> int:
        """The sequence of the newest record (0 when there is none)."""
        return self._last

    @property
    def snapshot_sequence(self) -> int:
        """The sequence the newest snapshot covers (0 when there is none)."""
        return self._snapshots[-1] if self._snapshots else 0

    @property
    def next_sync_ms(self) -> int | None:
        """When an fsync falls due under the interval policy (``None``: nothing waits for one)."""
        if self._dirty_since is None or self.policy.mode is not FsyncMode.INTERVAL:
            return None
        return self._dirty_since + self.policy.interval_ms

    # -- recovery ----------------------------------------------------------

    def recover(self, repair: bool = False) -> Recovery:
        """Lock the journal, read the newest readable snapshot and every record
        after it, cut a torn tail; see the module docstring for corruption."""
        if self._recovered:
            raise JournalError("recover() runs once, before anything else")
        self.directory.mkdir(parents=True, exist_ok=True)
        self._take_lock()
        try:
            recovery = self._recover(repair)
        except BaseException:
            self._release_lock()
            raise
        self._recovered = True
        return recovery

    def _take_lock(self) -> None:
        fd = os.open(self.directory / "LOCK", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise JournalBusy(f"another process holds the journal in {self.directory}") from None
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def _recover(self, repair: bool) -> Recovery:
        problems: list[str] = []

        def report(message: str, error: bool = False) -> None:
            (log.error if error else log.warning)("partition %d: %s", self.partition, message)
            problems.append(message)

        segments, snapshots = _list_files(self.directory, remove_temporaries=True)
        found = _find_base(self.directory, self.partition, snapshots)
        unreadable: list[Path] = []  # set aside once recovery succeeds (a JournalCorrupt changes nothing)
        for sequence, bad in found.unreadable:
            path = self.directory / _snapshot_name(sequence)
            report(f"snapshot {path} is unreadable at offset {bad.offset} ({bad.reason}): set aside as "
                   f"{path.name}.corrupt, recovering from an older one", error=True)
            unreadable.append(path)
        states = found.states
        base = found.sequence or 0
        good_snapshots = [s for s in snapshots if s <= base] if found.sequence is not None else []

        walk = _walk_segments(self.directory, self.partition, segments, base)
        kept, changes, times, last = walk.kept, walk.changes, walk.times, walk.last
        if walk.torn is not None and walk.torn.scan is not None:
            path = self.directory / _segment_name(segments[walk.torn.position])
            scan = walk.torn.scan
            size = path.stat().st_size
            report(f"torn tail of {path} at offset {walk.torn.offset} ({walk.torn.reason}): "
                   f"cut {size - scan.end} bytes after record {scan.last_sequence}")
            os.truncate(path, scan.end)
        elif (cut := walk.damage) is not None:
            path = self.directory / _segment_name(segments[cut.position])
            if not repair:
                raise JournalCorrupt(path, cut.offset, cut.reason, cut.detail)
            if cut.scan is not None:
                shutil.copyfile(path, path.with_name(path.name + ".corrupt"))
                os.truncate(path, cut.scan.end)
                kept.append(segments[cut.position])
                report(f"repair: {path} cut at offset {cut.offset} ({cut.reason}{cut.detail}) after "
                       f"record {cut.scan.last_sequence}; the whole file kept as {path.name}.corrupt", error=True)
                later = segments[cut.position + 1:]
            else:
                later = segments[cut.position:]
                report(f"repair: journal cut before {path}: {cut.reason}", error=True)
            for other in later:
                gone = self.directory / _segment_name(other)
                gone.rename(gone.with_name(gone.name + ".corrupt"))
                report(f"repair: {gone} set aside as {gone.name}.corrupt", error=True)

        for path in unreadable:
            path.rename(path.with_name(path.name + ".corrupt"))
        # the first append opens a new segment: one a previous process wrote is closed for good
        self._segments = kept
        self._snapshots = good_snapshots
        self._last = last
        if problems:
            log.warning("partition %d: recovered %d topics and %d changes up to record %d after %d problem(s)",
                        self.partition, len(states), len(changes), last, len(problems))
        return Recovery(states, changes, base, last, tuple(problems), times)

    # -- appending ---------------------------------------------------------

    def append(self, changes: Sequence[Change], now_ms: int, first: int | None = None) -> int:
        """Journal a batch's changes in one write; return the last sequence.
        When it returns the bytes are in the operating system (and on disk
        under ``always``). :class:`JournalWriteError` leaves the journal as it
        was before the batch. ``first``: the sequence the first change must get
        (a backup journals its primary's records under the primary's numbers);
        :class:`JournalGap` when it would get another."""
        if not changes:
            return self._last
        if first is not None and first != self._last + 1:
            raise JournalGap(f"record {first} follows record {self._last} in {self.directory}")
        pack = self._packer.pack
        crc32 = zlib.crc32
        frame = _FRAME.pack
        parts: list[bytes] = []
        with self._lock:
            self._check_usable()
            sequence = self._last
            for change in changes:
                sequence += 1
                payload = pack([sequence, now_ms, encode_change(change)])
                parts.append(frame(len(payload), crc32(payload)))
                parts.append(payload)
            data = b"".join(parts)
            if self._fd is not None and self._active_size and self._active_size + len(data) > self.segment_bytes:
                self._close_active()
            if self._fd is None:
                self._open_segment(self._last + 1)
            if self._active_size == 0:
                data = _frame(pack([SEGMENT_MAGIC, FORMAT, self.partition, self._active_first])) + data
            self._write(data)
            self._last = sequence
            mode = self.policy.mode
            if mode is FsyncMode.ALWAYS:
                self._sync(self._fd)
            elif mode is FsyncMode.INTERVAL:
                if self._dirty_since is None:
                    self._dirty_since = now_ms
                elif now_ms - self._dirty_since >= 2 * self.policy.interval_ms:  # the timer is late
                    self._dirty_since = None
                    self._sync(self._fd)
        return sequence

    def _check_usable(self) -> None:
        if not self._recovered:
            raise JournalError("call recover() before appending")
        if self._closed:
            raise JournalError("the journal is closed")

    def _write(self, data: bytes) -> None:
        fd = self._fd
        assert fd is not None
        view = memoryview(data)
        try:
            while view:
                written = os.write(fd, view)
                view = view[written:]
        except OSError as e:
            try:  # leave the segment ending at a record boundary
                os.ftruncate(fd, self._active_size)
            except OSError:
                log.exception("partition %d: cannot cut a failed write off segment %d",
                              self.partition, self._active_first)
            raise JournalWriteError(f"writing to the journal in {self.directory} failed: {e}") from e
        finally:
            view.release()
        self._active_size += len(data)

    def _sync(self, fd: int | None) -> None:
        if fd is None:
            return
        try:
            self._fsync(fd)
        except OSError as e:
            raise JournalWriteError(f"fsync of the journal in {self.directory} failed: {e}") from e

    def _sync_directory(self) -> None:
        fd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            self._sync(fd)
        finally:
            os.close(fd)

    def _open_segment(self, first: int) -> None:
        path = self.directory / _segment_name(first)
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._active_first = first
        self._active_size = os.fstat(self._fd).st_size
        if not self._segments or self._segments[-1] != first:
            self._segments.append(first)
        if self.policy.mode is not FsyncMode.NEVER:
            self._sync_directory()  # the new name survives a power cut

    def _close_active(self) -> None:
        """Close the active segment (fsynced unless the policy is ``never``): the next append opens a new one."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if self._dirty_since is not None:
                self._dirty_since = None
                self._sync(fd)
        finally:
            os.close(fd)

    def roll(self) -> bool:
        """Close the active segment if it holds a record (the history side exports closed
        segments only: a quiet partition's changes reach it too); the next append opens a new
        one. May run on a worker thread: its fsync does not hold up appends."""
        with self._lock:
            self._check_usable()
            fd = self._fd
            if fd is None or self._last < self._active_first:
                return False
            self._fd = None
            dirty, self._dirty_since = self._dirty_since is not None, None
        try:  # outside the lock: appends (to a new segment) need not wait for this fsync
            if dirty:
                self._sync(fd)
        finally:
            os.close(fd)
        return True

    def tick(self, now_ms: int) -> bool:
        """Under the interval policy, fsync if a byte has waited ``interval_ms``;
        True if it did. Call it on a timer (any thread; the fsync runs
        without holding up appends)."""
        with self._lock:
            due = self.next_sync_ms
            if due is None or now_ms < due or self._fd is None:
                return False
            self._dirty_since = None
            fd = os.dup(self._fd)
        try:
            self._sync(fd)
        finally:
            os.close(fd)
        return True

    def close(self) -> None:
        """fsync what waits for it (unless the policy is ``never``), close the files, release the lock."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self._close_active()
            finally:
                self._release_lock()

    # -- snapshots ---------------------------------------------------------

    def write_snapshot(self, states: Iterable[TopicState], sequence: int) -> Path:
        """Write the topic states after record ``sequence`` (take them with
        ``TopicStore.state()`` right after appending that record) as the
        newest snapshot, then let go of what it makes unnecessary: the
        active segment is closed if it holds records up to ``sequence``,
        segments the *previous* snapshot covers are removed (unless
        ``keep_segment``), and snapshots older than the previous one."""
        with self._lock:
            self._check_usable()
            if not 0 <= sequence <= self._last:
                raise JournalError(f"a snapshot after record {sequence}, but the journal ends at {self._last}")
            previous = next((s for s in reversed(self._snapshots) if s != sequence), None)
        final = self._put_snapshot(states, sequence)
        # the previous snapshot becomes the fallback: its segments go only if it still reads back whole
        problem = self._check_snapshot(previous) if previous is not None else None
        with self._lock:
            if self._closed:
                return final
            if problem is not None and previous is not None:
                path = self.directory / _snapshot_name(previous)
                log.error("partition %d: snapshot %s no longer reads back (%s): set aside as %s.corrupt; "
                          "keeping every segment", self.partition, path, problem, path.name)
                path.rename(path.with_name(path.name + ".corrupt"))
                self._snapshots = [s for s in self._snapshots if s != previous]
            if sequence not in self._snapshots:
                self._snapshots.append(sequence)
                self._snapshots.sort()
            if self._fd is not None and self._active_first <= sequence:
                self._close_active()
            if problem is None:
                self._compact()
        return final

    def reset(self, states: Iterable[TopicState], sequence: int) -> Path:
        """Start over from ``states`` after record ``sequence``: a backup takes its
        primary's state (and numbering) this way. The snapshot is written first; then
        every segment and every other snapshot goes (what this replica held before is
        not the partition's history any more), and the next record is ``sequence + 1``."""
        with self._lock:
            self._check_usable()
            self._close_active()
        final = self._put_snapshot(states, sequence)
        with self._lock:
            for first in self._segments:
                (self.directory / _segment_name(first)).unlink(missing_ok=True)
            for old in self._snapshots:
                if old != sequence:
                    (self.directory / _snapshot_name(old)).unlink(missing_ok=True)
            self._segments = []
            self._snapshots = [sequence]
            self._last = sequence
            self._dirty_since = None
            if (self.directory / DAMAGED_FILE).exists():  # whole again: it holds its primary's state
                (self.directory / DAMAGED_FILE).unlink()
                self._sync_directory()
        return final

    @property
    def epoch(self) -> int:
        """The partition map epoch this replica was last given (0: never); it
        survives restarts, so that a restarted cluster knows which replica of a
        partition is the newest."""
        try:
            return int(json.loads((self.directory / EPOCH_FILE).read_text(encoding="utf-8"))["epoch"])
        except (FileNotFoundError, ValueError, KeyError, TypeError):
            return 0

    def set_epoch(self, epoch: int) -> None:
        """Record ``epoch`` durably (written aside, fsynced, renamed)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        temporary = self.directory / f".{EPOCH_FILE}.{os.getpid()}.tmp"
        with open(temporary, "w", encoding="utf-8") as f:
            json.dump({"epoch": epoch}, f)
            f.flush()
            self._sync(f.fileno())
        os.replace(temporary, self.directory / EPOCH_FILE)
        self._sync_directory()

    # -- a damaged journal ----------------------------------------------------

    @property
    def damaged(self) -> dict[str, Any] | None:
        """Why this journal's files were set aside (:meth:`set_aside`), until a
        :meth:`reset` gives the replica a whole state again; ``None`` otherwise."""
        return damage_of(self.directory)

    def set_aside(self, reason: str, now_ms: int) -> Path:
        """Move every file of this journal (segments, snapshots, ``EPOCH``) into
        ``damaged-<now_ms>/`` beside them, kept for the operator, and mark the
        directory ``DAMAGED``: after :meth:`recover` raised :class:`JournalCorrupt`
        on a replica whose peer holds the partition, which primes it again. The
        mark says the replica holds nothing to trust (it may not become a primary)
        until that :meth:`reset`; it survives restarts. Call :meth:`recover`
        afterwards as usual (it finds an empty journal)."""
        if self._recovered:
            raise JournalError("set_aside() runs before recover(), or after it raised")
        self._take_lock()
        try:
            aside = self.directory / f"damaged-{now_ms}"
            aside.mkdir(exist_ok=True)
            for entry in sorted(self.directory.iterdir()):
                if entry.is_file() and (entry.name == EPOCH_FILE or _SEGMENT_NAME.fullmatch(entry.name)
                                        or _SNAPSHOT_NAME.fullmatch(entry.name) or entry.name.endswith(".corrupt")):
                    entry.rename(aside / entry.name)
            marker = self.directory / f".{DAMAGED_FILE}.tmp"
            marker.write_text(json.dumps({"reason": reason, "at_ms": now_ms, "files": aside.name}), encoding="utf-8")
            os.replace(marker, self.directory / DAMAGED_FILE)
            self._sync_directory()
        finally:
            self._release_lock()
        log.error("partition %d: journal set aside in %s (%s); the replica starts empty until its peer primes it",
                  self.partition, aside, reason)
        return aside

    def scrub(self) -> list[tuple[Path, str]]:
        """Read every file of the journal back and check every frame (a running replica
        calls it now and then on a worker thread, while it appends): the damaged files,
        each with why. A bad frame at the very end of the active segment, with nothing
        valid after it, is an append in progress, not damage; a file removed meanwhile
        (a snapshot let it go) is skipped. Files are read, never mapped."""
        with self._lock:
            if self._closed or not self._recovered:
                return []
            segments, snapshots = list(self._segments), list(self._snapshots)
            active = self._active_first if self._fd is not None else None
        damaged: list[tuple[Path, str]] = []
        for sequence in snapshots:
            problem = self._check_snapshot(sequence, _read_data)
            path = self.directory / _snapshot_name(sequence)
            if problem is not None and path.exists():
                damaged.append((path, problem))
        for first in segments:
            path = self.directory / _segment_name(first)
            try:
                scan = _scan_segment(path, self.partition, first, 1 << 62, _read_data)
            except FileNotFoundError:
                continue
            if scan.bad is None or (first == active and scan.valid_after_bad is None):
                continue
            damaged.append((path, f"offset {scan.bad.offset}: {scan.bad.reason}"))
        return damaged

    def replace_damaged(self, damaged: Sequence[Path], states: Iterable[TopicState], sequence: int,
                        now_ms: int) -> Path:
        """Make damaged files unnecessary, then set them aside in ``damaged-<now_ms>/``: a
        snapshot of ``states`` (the replica's topics, taken right after record ``sequence``,
        then the journal's last) is written first, so a restart needs none of them. It may
        run on a worker thread, as :meth:`write_snapshot`, if the thread that appends
        called :meth:`roll` when it took the states (the active segment may be damaged:
        later records must not go into it). What was set aside is returned."""
        with self._lock:
            self._check_usable()
            if not 0 <= sequence <= self._last:
                raise JournalError(f"a snapshot after record {sequence}, but the journal ends at {self._last}")
            if self._fd is not None and self._active_first <= sequence:
                if self._last != sequence:
                    raise JournalError("roll() the journal when taking the states: later records share its segment")
                self._close_active()
        final = self._put_snapshot(states, sequence)
        aside = self.directory / f"damaged-{now_ms}"
        with self._lock:
            aside.mkdir(exist_ok=True)
            for path in damaged:
                if path == final or not path.exists():
                    continue  # replaced in place by the new snapshot, or let go meanwhile
                path.rename(aside / path.name)
                if (m := _SEGMENT_NAME.fullmatch(path.name)) is not None:
                    self._segments = [s for s in self._segments if s != int(m.group(1))]
                elif (m := _SNAPSHOT_NAME.fullmatch(path.name)) is not None:
                    self._snapshots = [s for s in self._snapshots if s != int(m.group(1))]
            if sequence not in self._snapshots:
                self._snapshots.append(sequence)
                self._snapshots.sort()
            self._sync_directory()
        log.error("partition %d: damaged journal file(s) %s set aside in %s after a snapshot at record %d replaced them",
                  self.partition, ", ".join(p.name for p in damaged), aside, sequence)
        return aside

    def _put_snapshot(self, states: Iterable[TopicState], sequence: int) -> Path:
        """Write snapshot ``sequence`` aside, fsynced, rename it into place, fsync the directory."""
        final = self.directory / _snapshot_name(sequence)
        temporary = self.directory / f".snapshot-{sequence:020d}.{os.getpid()}.{threading.get_ident()}.tmp"
        try:
            self._write_snapshot_file(temporary, states, sequence)
            os.replace(temporary, final)
        except OSError as e:
            temporary.unlink(missing_ok=True)
            raise JournalWriteError(f"writing snapshot {final} failed: {e}") from e
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
        self._sync_directory()
        return final

    def _check_snapshot(
        self, sequence: int, opener: Callable[[Path], tuple[Any, Callable[[], None]]] = _open_data,
    ) -> str | None:
        """Why snapshot ``sequence`` does not read back whole (frames, checksums, header, trailer), or ``None``."""
        path = self.directory / _snapshot_name(sequence)
        try:
            data, release = opener(path)
        except OSError as e:
            return str(e)
        try:
            frames = _Frames(data)
            first: bytes | None = None
            last: bytes | None = None
            count = 0
            for payload in frames:
                if first is None:
                    first = payload
                last = payload
                count += 1
            if frames.problem is not None:
                return f"offset {frames.offset}: {frames.problem}"
            if first is None or last is None or _unpack(first) != [SNAPSHOT_MAGIC, FORMAT, self.partition, sequence]:
                return "no header"
            if _unpack(last) != ["end", count - 2]:
                return "no trailer: the snapshot is incomplete"
            return None
        except _UNPACK_ERRORS as e:
            return f"a payload that is not msgpack ({e})"
        finally:
            release()

    def _write_snapshot_file(self, path: Path, states: Iterable[TopicState], sequence: int) -> None:
        packer = msgpack.Packer(use_bin_type=True)
        crc32, frame = zlib.crc32, _FRAME.pack
        count = 0
        with open(path, "wb", buffering=1024 * 1024) as f:
            write = f.write
            write(_frame(packer.pack([SNAPSHOT_MAGIC, FORMAT, self.partition, sequence])))
            for state in states:
                payload = packer.pack(encode_state(state))
                write(frame(len(payload), crc32(payload)))
                write(payload)
                count += 1
            write(_frame(packer.pack(["end", count])))
            f.flush()
            self._sync(f.fileno())

    def _compact(self) -> None:
        """Remove segments and snapshots the two newest snapshots make unnecessary (under the lock)."""
        if len(self._snapshots) < 2:
            return
        previous = self._snapshots[-2]
        for old in self._snapshots[:-2]:
            (self.directory / _snapshot_name(old)).unlink(missing_ok=True)
        del self._snapshots[:-2]
        kept: list[int] = []
        for i, first in enumerate(self._segments):
            active = self._fd is not None and first == self._active_first
            last = self._segments[i + 1] - 1 if i + 1 < len(self._segments) else self._last
            segment = Segment(self.directory / _segment_name(first), first, last)
            if active or last > previous or (self.keep_segment is not None and self.keep_segment(segment)):
                kept.append(first)
            else:
                segment.path.unlink(missing_ok=True)
        self._segments = kept

    def closed_segments(self) -> list[Segment]:
        """The segments no longer appended to, oldest first (for the history side)."""
        with self._lock:
            out = []
            for i, first in enumerate(self._segments):
                if self._fd is not None and first == self._active_first:
                    continue
                last = self._segments[i + 1] - 1 if i + 1 < len(self._segments) else self._last
                out.append(Segment(self.directory / _segment_name(first), first, last))
            return out
