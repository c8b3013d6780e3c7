"""The simulated disk: a partition replica's journal as its partition uses it, and a node's disk.

:class:`SimJournal` stands for :class:`replication.journal.Journal` *and* the files under it:
what a process may call (``recover``, ``append`` with :class:`JournalGap`, ``reset``,
``write_snapshot``, ``set_epoch``/``epoch``, ``next_sync_ms``/``tick``, ``set_aside``,
``await_prime``, ``trust``, ``damaged``, ``close``) and what a fault does to the files (``kill``, ``power_cut``,
``corrupt``). It raises the real exception types and returns the real
:class:`~replication.journal.Recovery` and :class:`~replication.journal.Held`.
``test_models.py`` runs the same random scripts against it and the real journal.

The files, as the model keeps them:

* ``records``: every record written, ``(sequence, timestamp_ms, change)``, after the
  newest snapshot; each durable or not (``synced``: how many in a row from the first are).
  ``always``: durable when ``append`` returns; ``interval:<ms>``: at the :meth:`tick` due
  ``<ms>`` after the oldest waiting byte, or at an ``append`` twice that late, or at
  ``close``; ``never``: only snapshots are. A process syncs only what *it* wrote (the
  real journal appends to a new segment after a restart and never fsyncs the old one), so
  a killed process's unsynced tail can stay undurable while later records are: a power
  cut then leaves a hole, and recovery raises :class:`JournalCorrupt` as the real one does.
* ``snapshot``: ``(sequence, states)``, durable when written (``reset``, ``write_snapshot``).
* ``epoch``: durable when set (``set_epoch`` fsyncs, and ``reset`` the epoch a mark of
  ``await_prime`` awaited); moved aside with the rest by ``set_aside``.
* ``damage``: the ``DAMAGED`` mark of ``set_aside`` or ``await_prime``, until a ``reset`` or ``trust``.

Faults: :meth:`SimJournal.kill` (the process dies; the operating system keeps every byte),
:meth:`SimJournal.power_cut` (what was not durable goes; with an ``rng``, writeback may
have kept some of the unsynced tail, whole records: a frame cut short is a record not kept),
:meth:`SimJournal.corrupt` (a durable record's bytes go bad: recovery raises
:class:`JournalCorrupt` wherever it is, the last record too, as the real journal does for a
whole frame that fails its checksum).

Not modelled: segments and their rollover (the real journal also fsyncs a segment it
closes, so under ``interval`` it keeps at least what the model keeps), snapshots that do not
read back, ``repair``, scrubbing.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from replication.journal import (
    DAMAGED_EPOCH,
    FsyncMode,
    FsyncPolicy,
    Held,
    JournalCorrupt,
    JournalError,
    JournalGap,
    Recovery,
    awaiting_prime,
)

__all__ = ["NodeDisk", "SimJournal"]

Record = tuple[int, int, Any]


class SimJournal:
    """One replica's journal on one node (see the module docstring)."""

    def __init__(self, node: str, partition: int, policy: FsyncPolicy | str = "always") -> None:
        self.node = node
        self.partition = partition
        self.policy = FsyncPolicy.parse(policy) if isinstance(policy, str) else policy
        # -- the files
        self.records: list[Record] = []
        self._durable: list[bool] = []  # one per record
        self.snapshot: tuple[int, list[Any]] | None = None
        self._epoch = 0
        self.damage: dict[str, Any] | None = None
        self._bad: set[int] = set()  # sequences of records whose bytes went bad (membership only)
        self._hole = False  # a power cut took records that later durable ones follow
        self._segments = False  # a segment file exists (even one whose records all went)
        # -- the process that has it open
        self.recovered = False
        self._last = 0
        # index of the first record this process wrote and did not sync (recovery synced the earlier ones)
        self._unsynced = 0
        self._dirty_since: int | None = None

    def __repr__(self) -> str:
        return f"SimJournal({self.node!r}, {self.partition})"

    @property
    def directory(self) -> PurePosixPath:
        return PurePosixPath(self.node, "journal", f"partition-{self.partition}")

    # -- what the partition reads --------------------------------------------------------------

    @property
    def last_sequence(self) -> int:
        return self._last

    @property
    def snapshot_sequence(self) -> int:
        return self.snapshot[0] if self.snapshot is not None else 0

    @property
    def synced(self) -> int:
        """How many records, from the first, are durable."""
        for i, durable in enumerate(self._durable):
            if not durable:
                return i
        return len(self._durable)

    @property
    def next_sync_ms(self) -> int | None:
        if self._dirty_since is None or self.policy.mode is not FsyncMode.INTERVAL:
            return None
        return self._dirty_since + self.policy.interval_ms

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def damaged(self) -> dict[str, Any] | None:
        return self.damage

    def held(self) -> Held | None:
        """What ``replication.journal.held`` says of these files (any process, even none, may have them)."""
        files = bool(self.records or self.snapshot is not None or self._segments)
        if self.damage is not None and not awaiting_prime(self.damage):  # a mark on nothing holds nothing
            return Held(DAMAGED_EPOCH, 0) if files or "files" in self.damage else None
        if not files:
            return None
        if self._hole or self._first_bad() is not None:
            return Held(DAMAGED_EPOCH, 0)
        return Held(self._epoch, self.records[-1][0] if self.records else self.snapshot_sequence)

    # -- what the partition calls ----------------------------------------------------------------

    def recover(self) -> Recovery:
        """Read the snapshot and the records after it; :class:`JournalCorrupt` (changing
        nothing) for a hole or a bad record. (No frame is ever cut short here: the real
        journal's torn tail is a record the model never kept.)"""
        if self.recovered:
            raise JournalError("recover() runs once, before anything else")
        base = self.snapshot_sequence
        if self._hole:
            raise JournalCorrupt(self._path("segment"), 0, "records are missing before it")
        bad = self._first_bad()
        if bad is not None:
            raise JournalCorrupt(self._path(f"record-{self.records[bad][0]}"), 0, "checksum mismatch")
        self.recovered = True
        self._last = self.records[-1][0] if self.records else base
        if self.policy.mode is not FsyncMode.NEVER:  # as the journal: it syncs what it recovered
            self._durable = [True] * len(self.records)
        self._unsynced = len(self.records)
        self._dirty_since = None
        states = list(self.snapshot[1]) if self.snapshot is not None else []
        return Recovery(states, [r[2] for r in self.records], base, self._last, (), [r[1] for r in self.records])

    def append(self, changes: Sequence[Any], now_ms: int, first: int | None = None) -> int:
        if not changes:
            return self._last
        if first is not None and first != self._last + 1:
            raise JournalGap(f"record {first} follows record {self._last} in {self.directory}")
        self._check_usable()
        sequence = self._last
        records = self.records
        for change in changes:
            sequence += 1
            records.append((sequence, now_ms, change))
        self._last = sequence
        self._segments = True
        mode = self.policy.mode
        if mode is FsyncMode.ALWAYS:
            self._durable.extend([True] * len(changes))
            self._unsynced = len(records)
        else:
            self._durable.extend([False] * len(changes))
            if mode is FsyncMode.INTERVAL:
                if self._dirty_since is None:
                    self._dirty_since = now_ms
                elif now_ms - self._dirty_since >= 2 * self.policy.interval_ms:  # the timer is late
                    self._dirty_since = None
                    self._sync()
        return sequence

    def tick(self, now_ms: int) -> bool:
        due = self.next_sync_ms
        if due is None or now_ms < due or not self.recovered:
            return False
        self._dirty_since = None
        self._sync()
        return True

    def write_snapshot(self, states: Iterable[Any], sequence: int) -> None:
        """The states after record ``sequence`` (at most the last), durable; the records it covers go."""
        self._check_usable()
        if not 0 <= sequence <= self._last:
            raise JournalError(f"a snapshot after record {sequence}, but the journal ends at {self._last}")
        if sequence == self._last and self.policy.mode is not FsyncMode.NEVER:
            self._dirty_since = None  # the active segment is closed, and synced
            self._sync()
        covered = sum(1 for r in self.records if r[0] <= sequence)
        self._drop_first(covered)
        self.snapshot = (sequence, list(states))

    def reset(self, states: Iterable[Any], sequence: int) -> None:
        """Start over from ``states`` after record ``sequence`` (durable at once); whole again if
        damaged, at the epoch it awaited if it did."""
        self._check_usable()
        if self.damage is not None and "awaiting_prime" in self.damage:
            self._epoch = self.damage["awaiting_prime"]
        self.snapshot = (sequence, list(states))
        self.records = []
        self._durable = []
        self._bad.clear()
        self._hole = False
        self._segments = False
        self._last = sequence
        self._unsynced = 0
        self._dirty_since = None
        self.damage = None

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def await_prime(self, epoch: int) -> None:
        """Mark the journal as awaiting a prime at ``epoch`` (a mark already there stays, awaiting it)."""
        self.damage = {**(self.damage or {"reason": "awaiting a prime"}), "awaiting_prime": epoch}

    def trust(self) -> None:
        """Lift the mark: the replica takes over from what the journal holds."""
        self.damage = None

    def set_aside(self, reason: str, now_ms: int) -> None:
        """Move every file aside and mark the journal damaged (before :meth:`recover`, or after it raised)."""
        if self.recovered:
            raise JournalError("set_aside() runs before recover(), or after it raised")
        self.records = []
        self._durable = []
        self.snapshot = None
        self._epoch = 0
        self._bad.clear()
        self._hole = False
        self._segments = False
        self.damage = {"reason": reason, "at_ms": now_ms, "files": f"damaged-{now_ms}"}

    def close(self) -> None:
        if self.recovered and self.policy.mode is not FsyncMode.NEVER:
            self._sync()
        self.recovered = False
        self._dirty_since = None

    # -- faults --------------------------------------------------------------------------------

    def kill(self) -> None:
        """The process that has the journal dies: nothing is lost; the next one must :meth:`recover`
        (until then it reads ``last_sequence`` 0, as a new :class:`Journal` does)."""
        self.recovered = False
        self._last = 0
        self._dirty_since = None

    def power_cut(self, rng: random.Random | None = None) -> None:
        """The node loses power: what was not durable goes (with ``rng``, writeback may have kept
        a prefix of the unsynced tail); the process is gone too."""
        self.kill()
        durable = self._durable
        if all(durable):
            return
        keep = [i for i, d in enumerate(durable) if d]
        tail = len(durable)
        while tail and not durable[tail - 1]:
            tail -= 1
        if rng is not None and rng.random() < 0.7:  # written back on its own: part of the tail
            keep.extend(range(tail, rng.randint(tail, len(durable))))
        if keep and keep[-1] + 1 != len(keep):  # a record kept after one lost
            self._hole = True
        self.records = [self.records[i] for i in keep]
        self._durable = [True] * len(keep)
        self._bad.intersection_update(r[0] for r in self.records)

    def corrupt(self, rng: random.Random, sequence: int | None = None) -> int | None:
        """Make a durable record after the snapshot bad (``sequence``, or one drawn, not bad
        already); its sequence, or ``None`` when there is none."""
        candidates = [i for i, d in enumerate(self._durable) if d and self.records[i][0] not in self._bad]
        if sequence is not None:
            candidates = [i for i in candidates if self.records[i][0] == sequence]
        if not candidates:
            return None
        chosen = self.records[rng.choice(candidates)][0]
        self._bad.add(chosen)
        return chosen

    # -- inside ------------------------------------------------------------------------------

    def _check_usable(self) -> None:
        if not self.recovered:
            raise JournalError("call recover() before appending")

    def _sync(self) -> None:
        durable = self._durable
        for i in range(self._unsynced, len(durable)):
            durable[i] = True
        self._unsynced = len(durable)

    def _drop_first(self, count: int) -> None:
        if count:
            for record in self.records[:count]:
                self._bad.discard(record[0])
            del self.records[:count]
            del self._durable[:count]
            self._unsynced = max(0, self._unsynced - count)

    def _first_bad(self) -> int | None:
        if not self._bad:
            return None
        for i, record in enumerate(self.records):
            if record[0] in self._bad:
                return i
        return None

    def _path(self, name: str) -> Path:
        return Path(str(self.directory / name))


class NodeDisk:
    """The journals on one node's disk, one per partition it has held."""

    def __init__(self, node: str, policy: FsyncPolicy | str = "always") -> None:
        self.node = node
        self.policy = FsyncPolicy.parse(policy) if isinstance(policy, str) else policy
        self.journals: dict[int, SimJournal] = {}

    def journal(self, partition: int) -> SimJournal:
        journal = self.journals.get(partition)
        if journal is None:
            journal = self.journals[partition] = SimJournal(self.node, partition, self.policy)
        return journal

    def set_policy(self, policy: FsyncPolicy | str) -> None:
        self.policy = FsyncPolicy.parse(policy) if isinstance(policy, str) else policy
        for journal in self.journals.values():
            journal.policy = self.policy

    def held(self, partition: int) -> Held | None:
        journal = self.journals.get(partition)
        return journal.held() if journal is not None else None

    def kill(self) -> None:
        for journal in self.journals.values():
            journal.kill()

    def power_cut(self, rng: random.Random | None = None) -> None:
        for journal in self.journals.values():
            journal.power_cut(rng)
