"""Reading a journal back without changing it: :func:`verify` (``canopy journal check``, the
server's periodic scrub, a restarted cluster's choice of replicas), what a data directory
holds (:func:`held`, :func:`held_epoch`, the ``DAMAGED`` mark), and a copy's records for the
comparison of a partition's copies across nodes (:func:`read_copy`)."""

from __future__ import annotations

import enum
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import msgpack

from replication.journal_agreement import Copy, Stamp
from replication.journal_format import (
    DAMAGED_EPOCH, DAMAGED_FILE, EPOCH_FILE, JournalError, _Bad, _find_base, _list_files,
    _read_data, _read_snapshot, _scan_segment, _segment_name, _snapshot_name, _walk_segments, record_payload,
)
from topics.changes import encode_change, operation_name


# -- verification ----------------------------------------------------------------------


class ProblemKind(enum.Enum):
    """What :func:`verify` found wrong, from the least serious to the most."""

    #: a frame cut short (its bytes run out) at the very end of the last segment, with
    #: nothing valid after it: a write cut short by a crash, or one still under way;
    #: recovery cuts it (a whole frame that fails its checks there is damage)
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
    A batch still being written at its end counts as a torn tail, never as damage
    (the file holds a prefix of its bytes: a frame cut short).
    ``skip_last_segment`` leaves that segment unread, which suits a periodic check
    of a journal in use. A covered segment or an older snapshot that goes meanwhile
    (a newer snapshot let it go) is left out; if a file recovery reads goes, the
    check starts over. Raises :class:`JournalError` when ``directory`` is not
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
            except FileNotFoundError:  # a newer snapshot than the listing's let it go: no fallback needs it
                continue
            except _Bad as e:
                problems.append(Problem(ProblemKind.SNAPSHOT, path, e.offset, f"{e.reason}; no fallback if "
                                        f"snapshot {found.sequence} fails"))
    walk = _walk_segments(directory, partition, segments, base, keep=False, skip_last=skip_last, opener=_read_data)
    for i in range(walk.start):  # covered by the snapshot: the history export and a fallback read them
        path = directory / _segment_name(segments[i])
        try:
            scan = _scan_segment(path, partition, segments[i], 0, _read_data, keep=False)
        except FileNotFoundError:  # a snapshot newer than ``base`` let it go (the oldest go first)
            continue
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
    """The ``DAMAGED`` mark of a journal directory (:meth:`Journal.set_aside`,
    :meth:`Journal.await_prime`), or ``None``."""
    try:
        found = json.loads((directory / DAMAGED_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {"reason": "an unreadable DAMAGED mark"}
    return found if isinstance(found, dict) else {"reason": "an unreadable DAMAGED mark"}


def awaiting_prime(damage: dict[str, Any] | None) -> bool:
    """Whether a ``DAMAGED`` mark only says that its replica awaits its prime
    (:meth:`Journal.await_prime`): the files are the replica's own, of the epoch ``EPOCH``
    keeps, and may lack what its primaries acknowledged since."""
    return damage is not None and "awaiting_prime" in damage and "files" not in damage


def held_epoch(data_dir: str | os.PathLike[str], partition: int) -> int | None:
    """The epoch whose state the journal of ``partition`` under ``data_dir`` holds, as its
    ``EPOCH`` keeps it: the epoch its replica was last given as a primary, or was primed at
    as a backup (0: none recorded). A journal that awaits its prime (:func:`awaiting_prime`)
    says so too: its records are that epoch's, if older than what was acknowledged since.
    :data:`DAMAGED_EPOCH` for any other journal marked ``DAMAGED`` that held the partition
    (its files, or files set aside: it holds nothing to trust, but the partition was there);
    ``None`` when there is no journal there (a mark on nothing, as a new backup that was
    never primed leaves, holds nothing either way). Reads only."""
    directory = partition_directory(data_dir, partition)
    try:
        names = [f.name for f in directory.iterdir()]
    except OSError:
        return None
    held = any(name.startswith(("segment-", "snapshot-")) for name in names)
    damage = damage_of(directory)
    if damage is not None and not awaiting_prime(damage):  # "files": set aside, so the partition was here
        return DAMAGED_EPOCH if held or "files" in damage or any(n.startswith("damaged-") for n in names) else None
    if not held:
        return None
    try:
        return int(json.loads((directory / EPOCH_FILE).read_text(encoding="utf-8"))["epoch"])
    except (OSError, ValueError, KeyError, TypeError):
        return 0


class Held(NamedTuple):
    """What a replica's journal holds, as a restarted cluster weighs it: the epoch whose
    state it holds (:func:`held_epoch`; :data:`DAMAGED_EPOCH` when its files fail their
    checks where recovery would refuse them, or were set aside) and the last record
    recovery would give back."""

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




# -- a copy's records, for comparing a partition's copies (replication.journal_agreement) ----


def read_copy(directory: str | os.PathLike[str], partition: int, node: str) -> Copy:
    """Every record the segments in ``directory`` hold, as :func:`~replication.journal_agreement.compare`
    takes them, under the name ``node``: those the snapshot covers too, each segment up to its
    first bad frame (:func:`verify` says why), and a sequence held twice once. Reads only, without
    the lock; files set aside (``damaged-*/``, ``*.corrupt``) are not read. A segment that goes
    meanwhile (a snapshot let it go) is left out."""
    directory = Path(directory)
    stamps: list[Stamp] = []
    last = 0
    packer = msgpack.Packer(use_bin_type=True)
    for first in _list_files(directory).segments:
        try:
            scan = _scan_segment(directory / _segment_name(first), partition, first, 0, _read_data)
        except FileNotFoundError:
            continue
        for record in scan.records:
            if record.sequence <= last:
                continue
            last = record.sequence
            encoded = packer.pack(record_payload(record.sequence, record.timestamp, encode_change(record.change),
                                                 record.epoch))
            digest = hashlib.blake2b(encoded, digest_size=16).digest()
            stamps.append(Stamp(record.sequence, record.epoch, digest, f"{operation_name(record.change)} "
                                f"{record.change.path} at {record.timestamp}, record #{digest[:4].hex()}"))
    return Copy(node, stamps)
