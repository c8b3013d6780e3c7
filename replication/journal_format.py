"""The journal's files, as bytes: frames, segments and snapshots, and how they are read back.

The format is described in :mod:`replication.journal`, whose :class:`~replication.journal.Journal`
writes these files; this module holds what writing, recovery and verification
(:mod:`replication.journal_check`) share: the constants, the errors, the fsync policy, the
records, and the scanning of frames, segments and snapshots.
"""

from __future__ import annotations

import enum
import logging
import mmap
import os
import re
import struct
import zlib
from collections.abc import Callable, Iterator
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
    operation_name,
)

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
#: a record payload is a msgpack array of 3, or of 4 when it names its epoch
_RECORD_STARTS = (bytes([0x93]), bytes([0x94]))
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
    """One journaled change: its sequence in the partition, when it was appended, and the
    placement epoch of the primary that journaled it (0: not recorded, as in journals
    written before records named their epoch)."""

    sequence: int
    timestamp: int
    change: Change
    epoch: int = 0


def record_payload(sequence: int, timestamp: int, change: list[Any], epoch: int) -> list[Any]:
    """A record as its frame's payload holds it (``change`` encoded): ``[sequence, timestamp,
    change]``, with ``epoch`` after them when one is known (not 0)."""
    return [sequence, timestamp, change, epoch] if epoch else [sequence, timestamp, change]


def is_record(item: Any, sequence: int) -> bool:
    """Whether a decoded payload is record ``sequence`` (:func:`record_payload`)."""
    return (isinstance(item, list) and len(item) in (3, 4) and item[0] == sequence and isinstance(item[1], int)
            and (len(item) == 3 or (type(item[3]) is int and item[3] > 0)))


def record_epoch(item: list[Any]) -> int:
    """The epoch a record (checked by :func:`is_record`) names, 0 when it names none."""
    return item[3] if len(item) == 4 else 0


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
    """A frame that fails its checks (internal: turned into a torn tail or :class:`JournalCorrupt`).
    ``short``: its bytes run out before it ends, as a write cut short leaves it (see
    :func:`_check_frame`); any other bad frame is damage, wherever it is."""

    def __init__(self, offset: int, reason: str, short: bool = False) -> None:
        super().__init__(reason)
        self.offset = offset
        self.reason = reason
        self.short = short


class _Frames:
    """The frames of a file's bytes from ``offset``; stops at the first bad one,
    leaving :attr:`offset` at its start and :attr:`problem` saying why."""

    def __init__(self, data: Any, offset: int = 0) -> None:
        self.data = data
        self.offset = offset
        self.problem: str | None = None
        self.short = False  # the problem: a frame cut short (see _check_frame)

    def __iter__(self) -> Iterator[bytes]:
        data, size = self.data, len(self.data)
        offset = self.offset
        while offset < size:
            found = _check_frame(data, offset, size)
            if found is not None:
                self.problem, self.short = found
                return
            length, _ = _FRAME.unpack_from(data, offset)
            end = offset + 8 + length
            yield data[offset + 8:end]
            offset = self.offset = end

    def bad(self, reason: str, short: bool = False) -> _Bad:
        """The error for the frame at :attr:`offset`."""
        return _Bad(self.offset, reason, short)


def _check_frame(data: Any, offset: int, size: int) -> tuple[str, bool] | None:
    """Why the frame at ``offset`` is bad and whether it is *short*, or ``None``.

    A file grows by appends, and a write cut short (a crash, a power cut) leaves a prefix
    of its bytes: the last frame's header or payload then runs past the end of the file,
    or, where the file grew before its bytes reached the disk, zero bytes follow the last
    whole frame. Those are the only bad frames a cut write makes. One whose bytes are all
    there but fail their checksum, or whose length is impossible, was damaged after it was
    written (and under ``always`` its record may have been acknowledged); so was one that
    runs past the end of the file while the bytes there match its checksum (its length
    went bad)."""
    if size - offset < 8:
        return f"a frame header cut short ({size - offset} of 8 bytes)", True
    length, crc = _FRAME.unpack_from(data, offset)
    if not 0 < length <= MAX_RECORD:
        if not length and not crc and not any(data[offset + 8:size]):
            return f"{size - offset} zero bytes to the end of the file", True
        return f"impossible frame length {length}", False
    if offset + 8 + length > size:
        if size > offset + 8 and zlib.crc32(data[offset + 8:size]) == crc:
            return (f"a frame length of {length} bytes past the end of the file, whose {size - offset - 8} "
                    "bytes match the frame's checksum"), False
        return f"a frame cut short ({size - offset - 8} of {length} bytes)", True
    if zlib.crc32(data[offset + 8:offset + 8 + length]) != crc:
        return "checksum mismatch", False
    return None


def _valid_record_after(data: Any, offset: int) -> int | None:
    """The offset of a valid record frame after ``offset``, if any (tells a
    corrupt middle from a torn tail). Past a budget of checksummed bytes
    (crafted values could make the search quadratic) it answers ``offset``:
    corrupt, the safe side."""
    size = len(data)
    start = offset + 1
    budget = _SEARCH_BUDGET
    ahead = [-1] * len(_RECORD_STARTS)  # each marker's next place at or after start + 8 (size: none)
    while start + 8 < size:
        for k, marker in enumerate(_RECORD_STARTS):  # each byte is searched once per marker
            if ahead[k] < start + 8:
                found = data.find(marker, start + 8)
                ahead[k] = size if found < 0 else found
        i = min(ahead)
        if i >= size:
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
                    if not is_record(item, expected):
                        raise frames.bad(f"not record {expected}: {item!r:.200}")
                    if expected > after:
                        try:
                            change = decode_change(item[2])
                        except ChangeFormatError as e:
                            raise frames.bad(f"record {expected}: {e}") from None
                        if keep:
                            records.append(Record(expected, item[1], change, record_epoch(item)))
                    expected += 1
                end = frames.offset + 8 + len(payload)
            if frames.problem is not None:
                raise frames.bad(frames.problem, frames.short)
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
    torn: _Cut | None  # a frame cut short at the end of the last segment with nothing valid after it
    damage: _Cut | None  # anything else bad (JournalCorrupt): later records depend on it, or it was written whole


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
        final = i == len(segments) - 1 and scan.valid_after_bad is None
        if final and scan.bad.short:
            kept.append(first)
            return _Walk(start, kept, changes, times, last, _Cut(i, scan.bad.offset, scan.bad.reason, "", scan), None)
        if final:
            detail = ("; it ends the journal, but a write cut short leaves no such frame: it was damaged once "
                      "written, and its record may have been acknowledged")
        elif scan.valid_after_bad is not None:
            detail = f"; a valid record follows at offset {scan.valid_after_bad}"
        else:
            detail = f"; {len(segments) - 1 - i} later segment(s) follow"
        return _Walk(start, kept, changes, times, last, None, _Cut(i, scan.bad.offset, scan.bad.reason, detail, scan))
    return _Walk(start, kept, changes, times, last, None, None)


