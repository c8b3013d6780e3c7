"""Whether the copies of a partition's journal agree, epoch by epoch (pure: no I/O, no Ray).

Every record names the placement epoch of the primary that journaled it (see
:mod:`replication.journal`), and a backup journals its primary's records under the
primary's numbers and epoch. A placement gives each epoch one primary, so every copy
of the partition's journal (the primary's, its backup's, a former replica's left on
another node) that holds a record of epoch ``E`` and sequence ``s`` holds the same one.
Two copies that hold different records at one ``(E, s)`` mean that two primaries
journaled, and so may have acknowledged, writes in the same epoch: a split brain the
fencing should have made impossible.

Copies differ legitimately, and are not reported:

* a backup behind its primary, or primed later, holds a part of its records;
* a snapshot lets older records go, and a prime starts a copy over;
* a primary cut off keeps a tail of records of epoch ``E`` its backup never acknowledged,
  while the backup, promoted at a later epoch, numbers its own records from there on:
  the same sequences under different epochs are never compared.

Records that name no epoch (0: journaled before records named theirs) are counted,
not compared. Within one copy, epochs only grow with the sequence; a record of an
older epoch after a newer one is reported too (:class:`Regression`).

Use it as ``compare(partition, [Copy(node, stamps), ...])``; reading the stamps from a
journal directory is :func:`replication.journal_check.read_copy`'s.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple

__all__ = ["Agreement", "Copy", "Divergence", "Regression", "Stamp", "compare"]


class Stamp(NamedTuple):
    """One record of a copy, as far as the comparison needs it."""

    sequence: int
    epoch: int  # 0: not recorded
    digest: bytes  # of the record's encoded bytes: equal digests, equal records
    summary: str  # what a user reads of it, e.g. "set a/b at 1700000000000"


@dataclass(frozen=True)
class Copy:
    """One node's copy of a partition's journal: its records in sequence order."""

    node: str
    stamps: Sequence[Stamp]


@dataclass(frozen=True)
class Divergence:
    """The copies disagree on the records of ``epoch`` from ``sequence`` on (``count``
    sequences of that epoch in all): two primaries journaled in that one epoch.
    ``held``: each distinct record at ``sequence`` with the nodes that hold it."""

    partition: int
    epoch: int
    sequence: int
    count: int
    held: tuple[tuple[tuple[str, ...], str], ...]

    def __str__(self) -> str:
        which = " and ".join(f"{', '.join(nodes)} ({summary})" for nodes, summary in self.held)
        more = f"; {self.count - 1} later record(s) of epoch {self.epoch} differ too" if self.count > 1 else ""
        return (f"partition {self.partition}, epoch {self.epoch}, sequence {self.sequence}: acknowledged in two "
                f"primaries of one epoch: {which}{more}")


@dataclass(frozen=True)
class Regression:
    """In ``node``'s copy, record ``sequence`` names epoch ``epoch`` after a record of the newer ``after``."""

    partition: int
    node: str
    sequence: int
    epoch: int
    after: int

    def __str__(self) -> str:
        return (f"partition {self.partition}, epoch {self.epoch}, sequence {self.sequence}: {self.node}'s copy goes "
                f"back from epoch {self.after} to {self.epoch}")


@dataclass(frozen=True)
class Agreement:
    """What :func:`compare` found for one partition."""

    partition: int
    nodes: tuple[str, ...]  # the copies compared
    epochs: tuple[int, ...]  # every epoch some copy's records name, ascending
    records: int  # in all copies
    #: (epoch, sequence) pairs held by two copies or more, each compared
    compared: int
    unstamped: int  # records that name no epoch: not compared
    divergences: tuple[Divergence, ...] = ()
    regressions: tuple[Regression, ...] = ()

    @property
    def agree(self) -> bool:
        return not self.divergences and not self.regressions

    def __str__(self) -> str:
        epochs = ", ".join(map(str, self.epochs)) or "none"
        unstamped = f", {self.unstamped} naming no epoch" if self.unstamped else ""
        state = "copies agree" if self.agree else "COPIES DISAGREE"
        return (f"partition {self.partition}: {state}: {len(self.nodes)} copies ({', '.join(self.nodes)}), "
                f"epochs {epochs}, {self.records} records{unstamped}, {self.compared} held by two copies or more "
                f"compared")


def compare(partition: int, copies: Iterable[Copy]) -> Agreement:
    """Compare the copies of ``partition``'s journal: see the module docstring."""
    copies = list(copies)
    held: dict[tuple[int, int], list[tuple[str, Stamp]]] = defaultdict(list)
    records = unstamped = 0
    regressions: list[Regression] = []
    for copy in copies:
        newest = 0
        for stamp in copy.stamps:
            records += 1
            if not stamp.epoch:
                unstamped += 1
                continue
            if stamp.epoch < newest:
                if not any(r.node == copy.node for r in regressions):  # the first one says it
                    regressions.append(Regression(partition, copy.node, stamp.sequence, stamp.epoch, newest))
            newest = max(newest, stamp.epoch)
            held[(stamp.epoch, stamp.sequence)].append((copy.node, stamp))
    compared = 0
    first: dict[int, Divergence] = {}
    for (epoch, sequence), holders in sorted(held.items()):
        if len(holders) < 2:
            continue
        compared += 1
        by_digest: dict[bytes, tuple[list[str], str]] = {}
        for node, stamp in holders:
            by_digest.setdefault(stamp.digest, ([], stamp.summary))[0].append(node)
        if len(by_digest) == 1:
            continue
        found = first.get(epoch)
        if found is None:
            first[epoch] = Divergence(partition, epoch, sequence, 1,
                                      tuple((tuple(nodes), summary) for nodes, summary in by_digest.values()))
        else:
            first[epoch] = Divergence(partition, epoch, found.sequence, found.count + 1, found.held)
    return Agreement(
        partition, tuple(c.node for c in copies), tuple(sorted({epoch for epoch, _ in held})), records, compared,
        unstamped, tuple(first[e] for e in sorted(first)), tuple(regressions),
    )
