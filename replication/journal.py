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
    record   [sequence, timestamp_ms, change, epoch]   change: topics.changes.encode_change
                                                       e.g. [2, path, type, value]

``epoch`` is the placement epoch of the primary that journaled the record:
the primary's own, and on its backup the epoch that primary followed at
(``append(..., epoch=...)``). A record written without one (0), as every
record was before records named their epoch, leaves it off; both shapes are
read. Within one epoch a partition has one primary, so every copy holds
the same record under one (epoch, sequence): :mod:`replication.journal_agreement`
compares the copies on that (``canopy journal check``). Older canopy
versions read a record that names its epoch as damage.

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

* A frame *cut short* at the end of the last segment (its header or payload
  runs past the end of the file, or zero bytes follow where the file grew
  before its bytes reached the disk) with no valid frame after it is a torn
  tail (a write cut short by a crash): logged with file and offset, and the
  segment truncated at the last good record. Its batch was never
  acknowledged under ``always``; under the other policies only a power cut
  tears a segment, and it may lose what the policy says.
* Anything else would lose records silently if cut: a bad frame in an older
  segment or one followed by valid records (later records depend on it), a
  gap or overlap between segments, no snapshot reaching back to the oldest
  segment, and a last frame whose bytes are all there but fail its checks.
  A write cut short leaves a prefix of its bytes (appends only grow a file),
  so such a frame was damaged after it was written, and under ``always`` its
  record may have been acknowledged. It raises :class:`JournalCorrupt`
  naming the file and offset, and changes nothing.
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
whose state the journal holds: the epoch its replica was last given as a
primary (:meth:`Journal.set_epoch`), or primed at as a backup. A replica told
to follow marks its journal ``DAMAGED`` first (:meth:`Journal.await_prime`:
its files are an older state, and it may not become a primary from them), and
the prime's :meth:`Journal.reset` records the epoch it awaited and lifts the
mark. After a full restart the journal with the newest epoch, then the longest
one, is the one to trust (:func:`held`).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import shutil
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

import msgpack

from topics.changes import (
    Change,
    TopicState,
    encode_change,
    encode_state,
)
from replication.journal_check import (
    Held, Problem, ProblemKind, Verification, awaiting_prime, damage_of, held, held_epoch, partition_directory,
    verify,
)
from replication.journal_format import (
    DAMAGED_EPOCH, DAMAGED_FILE, DEFAULT_FSYNC, EPOCH_FILE, FORMAT, FsyncMode, FsyncPolicy, JournalBusy,
    JournalCorrupt, JournalError, JournalGap, JournalWriteError, MAX_RECORD, Record, Recovery, SEGMENT_BYTES,
    SEGMENT_MAGIC, SNAPSHOT_MAGIC, Segment, _FRAME, _Frames, _SEGMENT_NAME, _SNAPSHOT_NAME, _UNPACK_ERRORS,
    _find_base, _frame, _list_files, _open_data, _read_data, _scan_segment, _segment_name, _snapshot_name,
    _unpack, _walk_segments, read_segment, record_payload, record_row,
)


__all__ = [
    "DAMAGED_EPOCH", "DAMAGED_FILE", "DEFAULT_FSYNC", "MAX_RECORD", "SEGMENT_BYTES", "FsyncMode", "FsyncPolicy", "Held",
    "Journal", "JournalBusy", "JournalCorrupt", "JournalError", "JournalGap", "JournalWriteError", "Problem",
    "ProblemKind", "Record", "Recovery", "Segment", "Verification", "awaiting_prime", "damage_of", "held", "held_epoch",
    "partition_directory", "read_segment", "record_row", "verify",
]

log = logging.getLogger("canopy.journal")

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
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

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
            self._cut_segment(path, scan.end)
        elif (cut := walk.damage) is not None:
            path = self.directory / _segment_name(segments[cut.position])
            if not repair:
                raise JournalCorrupt(path, cut.offset, cut.reason, cut.detail)
            if cut.scan is not None:
                shutil.copyfile(path, path.with_name(path.name + ".corrupt"))
                self._cut_segment(path, cut.scan.end)
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
        # the first append opens a new segment: one a previous process wrote is closed for good,
        # and synced now (a killed process may have left bytes the system never wrote: a power
        # cut after this process's synced appends would make them a hole, not a tail)
        if kept and self.policy.mode is not FsyncMode.NEVER:
            self._sync_file(self.directory / _segment_name(kept[-1]))
        self._segments = kept
        self._snapshots = good_snapshots
        self._last = last
        if problems:
            log.warning("partition %d: recovered %d topics and %d changes up to record %d after %d problem(s)",
                        self.partition, len(states), len(changes), last, len(problems))
        return Recovery(states, changes, base, last, tuple(problems), times)

    def _sync_file(self, path: Path) -> None:
        fd = os.open(path, os.O_RDONLY)
        try:
            self._sync(fd)
        finally:
            os.close(fd)

    def _cut_segment(self, path: Path, end: int) -> None:
        """Truncate ``path`` at ``end`` and fsync it, whatever the policy: a cut the
        operating system still held could be undone by a power cut once later segments
        exist, and the torn frame would then be damage in the middle of the journal."""
        fd = os.open(path, os.O_WRONLY)
        try:
            os.ftruncate(fd, end)
            self._sync(fd)
        finally:
            os.close(fd)

    # -- appending ---------------------------------------------------------

    def append(self, changes: Sequence[Change], now_ms: int, first: int | None = None, *, epoch: int = 0) -> int:
        """Journal a batch's changes in one write; return the last sequence.
        When it returns the bytes are in the operating system (and on disk
        under ``always``). :class:`JournalWriteError` leaves the journal as it
        was before the batch. ``first``: the sequence the first change must get
        (a backup journals its primary's records under the primary's numbers);
        :class:`JournalGap` when it would get another. ``epoch``: the placement
        epoch of the primary whose records these are, kept in each (0: none)."""
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
                payload = pack(record_payload(sequence, now_ms, encode_change(change), epoch))
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
        self._sync_directory()  # the new name survives a power cut (under ``never`` too: see _close_active)

    def _close_active(self) -> None:
        """Close the active segment (fsynced unless the policy is ``never``): the next append opens a new one."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            # under ``never`` too: a closed segment whose bytes the system had not written while a
            # later one's had would be a gap in the middle after a power cut, not a torn tail
            if self._dirty_since is not None or self.policy.mode is FsyncMode.NEVER:
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
            dirty = self._dirty_since is not None or self.policy.mode is FsyncMode.NEVER  # as _close_active
            self._dirty_since = None
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
        primary's state (and numbering) this way. Every segment and snapshot goes first
        (what this replica held before is not the partition's history any more), newest
        first, and the directory is fsynced; only then is the snapshot written, and the
        next record is ``sequence + 1``. The other order could bring the old history back:
        its numbers may be higher than the primary's, and after a power cut (the unlinks
        not yet durable) or a kill between the unlinks recovery would take them for the
        newest. The directory is marked ``DAMAGED`` meanwhile (:attr:`damaged`): a crash
        anywhere in between leaves a replica that holds nothing to trust until it is primed.
        A journal that awaited its prime (:meth:`await_prime`) keeps that mark, and records
        the epoch it awaited in ``EPOCH`` before the mark goes: it holds that epoch's state."""
        with self._lock:
            self._check_usable()
            self._close_active()
            if not (self.directory / DAMAGED_FILE).exists():
                self._mark({"reason": f"a reset to its primary's state after record {sequence} was cut short"})
            for first in reversed(self._segments):
                (self.directory / _segment_name(first)).unlink(missing_ok=True)
            for old in reversed(self._snapshots):
                (self.directory / _snapshot_name(old)).unlink(missing_ok=True)
            self._segments = []
            self._snapshots = []
            self._last = 0
            self._dirty_since = None
            self._sync_directory()
        final = self._put_snapshot(states, sequence)
        awaited = (self.damaged or {}).get("awaiting_prime")
        if isinstance(awaited, int):
            self.set_epoch(awaited)
        with self._lock:
            self._snapshots = [sequence]
            self._last = sequence
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
        """Why this journal holds nothing to trust: its files were set aside
        (:meth:`set_aside`), or its replica awaits its prime (:meth:`await_prime`),
        until a :meth:`reset` gives the replica a whole state again; ``None`` otherwise."""
        return damage_of(self.directory)

    def await_prime(self, epoch: int) -> None:
        """Mark the journal ``DAMAGED``, durably, for a replica told to follow a primary of
        ``epoch``, before anything else of that command happens: until a prime's
        :meth:`reset` lifts the mark (and records ``epoch``), its files hold the partition
        as it was at the epoch ``EPOCH`` keeps, which may lack what was acknowledged since,
        so its replica may not become a primary from them. A restarted cluster weighs them
        at that older epoch (:func:`held`). A mark already there stays (one of
        :meth:`set_aside` still says the files went); only the epoch awaited changes."""
        damage = self.damaged
        if damage is not None and damage.get("awaiting_prime") == epoch:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        mark: dict[str, Any] = dict(damage) if damage is not None else {
            "reason": "it was told to follow a primary and has not been primed since"}
        mark["awaiting_prime"] = epoch
        self._mark(mark)

    def trust(self) -> None:
        """Lift the ``DAMAGED`` mark (durably): its replica takes over from what this journal
        holds after all, as a placement from every copy's journal found none newer (the prime
        it awaited will not come; files set aside leave it empty). It is the partition's now."""
        if (self.directory / DAMAGED_FILE).exists():
            (self.directory / DAMAGED_FILE).unlink()
            self._sync_directory()

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
            self._mark({"reason": reason, "at_ms": now_ms, "files": aside.name})
        finally:
            self._release_lock()
        log.error("partition %d: journal set aside in %s (%s); the replica starts empty until its peer primes it",
                  self.partition, aside, reason)
        return aside

    def scrub(self) -> list[tuple[Path, str]]:
        """Read every file of the journal back and check every frame (a running replica
        calls it now and then on a worker thread, while it appends): the damaged files,
        each with why. A frame cut short at the very end of the active segment, with nothing
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
            if scan.bad is None or (first == active and scan.valid_after_bad is None and scan.bad.short):
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

    def _mark(self, damage: dict[str, Any]) -> None:
        """Mark the directory ``DAMAGED`` (durably: written aside, renamed, the directory fsynced)."""
        marker = self.directory / f".{DAMAGED_FILE}.tmp"
        with open(marker, "w", encoding="utf-8") as f:  # its bytes durable before its name
            json.dump(damage, f)
            f.flush()
            self._sync(f.fileno())
        os.replace(marker, self.directory / DAMAGED_FILE)
        self._sync_directory()

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

