"""``canopy journal``: check and repair the journals in a data directory (a :data:`canopy.cli.Extension`).

::

    canopy journal check  [--data-dir DIR] [--partition N] [--json]
    canopy journal repair [--data-dir DIR] [--partition N] [--json]

``DIR`` is the data directory ``canopy serve`` uses (default ``$CANOPY_DATA_DIR``,
else ``data``). Both commands act on every journal under it:
``<DIR>/journal/partition-<i>/`` for the node a server runs on, and
``<DIR>/nodes/<name>/journal/partition-<i>/`` for labelled and simulated nodes.
``--partition`` limits them to one partition.

``check`` runs :func:`replication.journal.verify`. It changes nothing and takes
no lock, so it can run beside a serving server. For each journal it prints the
state (``OK``, ``torn tail``, ``unreadable snapshot``, ``damaged covered segment``
or ``damaged``), one line per problem with file, offset and reason, the last
good record, and a journal's ``DAMAGED`` mark: its files set aside
(:meth:`Journal.set_aside <replication.journal.Journal.set_aside>`), or a
backup that awaits its prime (:meth:`Journal.await_prime
<replication.journal.Journal.await_prime>`). Only a frame cut short at the end
of a journal is a torn tail; a whole frame there that fails its checks is
damage. Then it compares the copies of each partition across nodes
(:mod:`replication.journal_agreement`): every record names the epoch of the
primary that journaled it, and one epoch has one primary, so two copies that
hold different records at one epoch and sequence mean that two primaries
acknowledged writes in that epoch. For each partition whose records name an
epoch it prints the copies (nodes), the epochs, how many records were compared
(held by two copies or more), and each disagreement with its partition, epoch
and sequence. A backup behind its primary, or an old primary's tail its
successor numbered again in a later epoch, is no disagreement. Exit status: 0
when no journal is damaged and the copies agree; recovery copes with a torn
tail, an unreadable snapshot or a damaged covered segment, and those are still
reported. 1 when a journal is damaged (recovery would refuse it) or cannot be
read. 3 when copies disagree (checked first: it says more than damage).

``repair`` takes each journal's lock and runs
``Journal.recover(repair=True)``. A torn tail is cut. At damage, the journal is
cut and the damaged and later segments are kept as ``*.corrupt``. It prints what
was cut or set aside. A journal a running server holds is refused ("stop the
server first"). Exit status: 0, or 1 when a journal was refused or could not be
read.

``--json`` prints one JSON object per journal and line, then one per partition compared
(``{"partition": ..., "agreement": {...}}``). Usage errors (no such
directory, no journal in it) exit with status 2. Every error is one line on
stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:  # the journal is imported when a command runs, not by ``canopy --help``
    from replication.journal import Verification
    from replication.journal_agreement import Agreement

__all__ = ["JournalDirectory", "add_journal", "agreements", "find_journals", "node_of"]

#: ``canopy journal check``'s exit status when copies of a partition disagree
DISAGREE = 3

_PARTITION = re.compile(r"partition-(\d+)")


class JournalDirectory(NamedTuple):
    path: Path
    partition: int


def find_journals(data_dir: Path) -> list[JournalDirectory]:
    """Every journal directory under a ``canopy serve`` data directory: its own node's first,
    then each labelled node's (``nodes/<name>/``), each in partition order."""
    homes = [data_dir] + sorted(p for p in (data_dir / "nodes").glob("*") if p.is_dir())
    found: list[JournalDirectory] = []
    for home in homes:
        here = []
        for directory in (home / "journal").glob("partition-*"):
            m = _PARTITION.fullmatch(directory.name)
            if m is not None and directory.is_dir():
                here.append(JournalDirectory(directory, int(m.group(1))))
        found.extend(sorted(here, key=lambda j: j.partition))
    return found


def node_of(data_dir: Path, journal: JournalDirectory) -> str:
    """The node whose copy ``journal`` is: ``<name>`` under ``nodes/<name>/``, ``.`` for the data directory's own."""
    home = journal.path.parent.parent
    return "." if home == data_dir else home.name


def agreements(data_dir: str | os.PathLike[str], partition: int | None = None) -> list[Agreement]:
    """Each partition's copies under ``data_dir`` (every node's, :func:`find_journals`) compared
    (:func:`replication.journal_agreement.compare`), in partition order; ``partition``: only that one."""
    from replication.journal_agreement import compare
    from replication.journal_check import read_copy

    data_dir = Path(data_dir)
    by_partition: dict[int, list[JournalDirectory]] = {}
    for journal in find_journals(data_dir):
        if partition is None or journal.partition == partition:
            by_partition.setdefault(journal.partition, []).append(journal)
    return [compare(p, [read_copy(j.path, p, node_of(data_dir, j)) for j in journals])
            for p, journals in sorted(by_partition.items())]


def add_journal(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add ``journal check`` and ``journal repair`` to the ``canopy`` subcommands."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--data-dir", default=os.environ.get("CANOPY_DATA_DIR") or "data", metavar="DIR",
                        help="the server's data directory (default: $CANOPY_DATA_DIR, else data)")
    common.add_argument("--partition", type=int, default=None, metavar="N", help="only partition N's journals")
    common.add_argument("--json", action="store_true", help="one JSON object per journal and line")
    journal = commands.add_parser("journal", help="check or repair a server's journals on this machine")
    actions = journal.add_subparsers(dest="action", required=True)
    actions.add_parser(
        "check", parents=[common],
        help="read every journal and report damage; changes nothing, may run beside a server",
    ).set_defaults(run=_check)
    actions.add_parser(
        "repair", parents=[common],
        help="cut each journal at its damage, keeping what is cut as *.corrupt (stop the server first)",
    ).set_defaults(run=_repair)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _journals(args: argparse.Namespace) -> list[JournalDirectory] | None:
    """The journals the command acts on, or ``None`` after saying why there are none."""
    data_dir = Path(args.data_dir)
    if not data_dir.is_dir():
        _err(f"canopy journal {args.action}: no data directory {data_dir}")
        return None
    try:
        found = find_journals(data_dir)
    except OSError as e:
        _err(f"canopy journal {args.action}: cannot read {data_dir}: {e}")
        return None
    if args.partition is not None:
        found = [j for j in found if j.partition == args.partition]
    if not found:
        which = "" if args.partition is None else f" of partition {args.partition}"
        _err(f"canopy journal {args.action}: no journal{which} in {data_dir} "
             "(looked in journal/partition-<i>/ and nodes/<name>/journal/partition-<i>/)")
        return None
    return found


def _quiet_recovery_log() -> None:
    """Recovery logs what it reports; this command prints it, once."""
    logger = logging.getLogger("canopy.journal")
    if not logger.handlers:
        logger.addHandler(logging.NullHandler())


def _mark_note(mark: dict[str, Any] | None, awaited: int | None) -> str | None:
    """What a ``DAMAGED`` mark says: files set aside, or (``awaited``) a backup awaiting its prime."""
    if mark is None:
        return None
    if awaited is not None:
        return (f"a backup awaiting its prime at epoch {awaited}: its records are an older state of the "
                "partition, kept; its replica leads from them only when no copy is newer")
    files = f" (its files are in {mark['files']}/)" if mark.get("files") else ""
    return f"set aside as damaged: {mark.get('reason', 'no reason given')}{files}; the replica waits for its peer"


def _check(args: argparse.Namespace) -> int:
    from replication.journal import JournalError, awaiting_prime, damage_of, verify

    found = _journals(args)
    if found is None:
        return 2
    failed = False
    for directory, partition in found:
        try:
            verification = verify(directory, partition)
        except (JournalError, OSError) as e:
            _err(f"canopy journal check: {directory}: {e}")
            failed = True
            continue
        failed |= verification.damaged
        mark = damage_of(directory)
        awaited = mark["awaiting_prime"] if mark is not None and awaiting_prime(mark) else None
        note = _mark_note(mark, awaited)
        if args.json:
            print(json.dumps(_verification_json(verification, None if awaited is not None else note, awaited)),
                  flush=True)
            continue
        worst = verification.worst
        snapshot = (f"snapshot {verification.snapshot_sequence}" if verification.snapshot is not None
                    else "no snapshot")
        print(f"{directory}: {'OK' if worst is None else worst.value}, "
              f"last good record {verification.last_sequence} ({snapshot})")
        for problem in verification.problems:
            print(f"  {problem.path.name} at offset {problem.offset}: {problem.kind.value}: {problem.reason}")
        if note is not None:
            print(f"  {note}")
    if failed and not args.json:
        print(f"canopy journal repair --data-dir {args.data_dir} cuts a damaged journal at the damage, keeping "
              "what it cuts as *.corrupt (stop the server first)")
    try:
        compared = agreements(args.data_dir, args.partition)
    except (JournalError, OSError) as e:
        _err(f"canopy journal check: comparing the copies of each partition: {e}")
        return 1
    findings: list[str] = []
    for agreement in compared:
        if not agreement.epochs and agreement.agree:
            continue  # records that name no epoch: nothing to compare
        findings.extend(map(str, (*agreement.divergences, *agreement.regressions)))
        if args.json:
            print(json.dumps({"partition": agreement.partition, "agreement": _agreement_json(agreement)}), flush=True)
            continue
        print(str(agreement))
        for finding in (*agreement.divergences, *agreement.regressions):
            print(f"  {finding}")
    if findings:
        more = f" (and {len(findings) - 1} more finding(s) above)" if len(findings) > 1 else ""
        _err(f"canopy journal check: copies disagree: {findings[0]}{more}")
        return DISAGREE
    return 1 if failed else 0


def _agreement_json(agreement: Agreement) -> dict[str, Any]:
    return {
        "agree": agreement.agree, "nodes": list(agreement.nodes), "epochs": list(agreement.epochs),
        "records": agreement.records, "compared": agreement.compared, "unstamped": agreement.unstamped,
        "divergences": [
            {"epoch": d.epoch, "sequence": d.sequence, "count": d.count,
             "held": [{"nodes": list(nodes), "record": summary} for nodes, summary in d.held], "message": str(d)}
            for d in agreement.divergences],
        "regressions": [
            {"node": r.node, "epoch": r.epoch, "sequence": r.sequence, "after": r.after, "message": str(r)}
            for r in agreement.regressions],
    }


def _verification_json(verification: Verification, set_aside: str | None, awaiting_prime: int | None) -> dict[str, Any]:
    worst = verification.worst
    return {
        "directory": str(verification.directory),
        "partition": verification.partition,
        "status": "ok" if worst is None else worst.name.lower(),
        "damaged": verification.damaged,
        "last_sequence": verification.last_sequence,
        "snapshot_sequence": verification.snapshot_sequence if verification.snapshot is not None else None,
        "problems": [
            {"kind": p.kind.name.lower(), "file": str(p.path), "offset": p.offset, "reason": p.reason}
            for p in verification.problems
        ],
        "set_aside": set_aside,
        "awaiting_prime": awaiting_prime,
    }


def _repair(args: argparse.Namespace) -> int:
    from replication.journal import Journal, JournalBusy, JournalError

    found = _journals(args)
    if found is None:
        return 2
    _quiet_recovery_log()
    failed = False
    for directory, partition in found:
        journal = Journal(directory, partition=partition)
        try:
            recovery = journal.recover(repair=True)
        except (JournalError, OSError) as e:
            failed = True
            error = (f"{directory} is in use by a running server (it holds the journal's LOCK): stop the server first"
                     if isinstance(e, JournalBusy) else f"{directory}: {e}")
            _err(f"canopy journal repair: {error}")
            if args.json:
                print(json.dumps({"directory": str(directory), "partition": partition, "error": error}), flush=True)
            continue
        journal.close()
        if args.json:
            print(json.dumps({
                "directory": str(directory), "partition": partition, "repaired": bool(recovery.problems),
                "last_sequence": recovery.last_sequence, "snapshot_sequence": recovery.snapshot_sequence,
                "problems": list(recovery.problems),
            }), flush=True)
            continue
        print(f"{directory}: {'repaired' if recovery.problems else 'OK, nothing to repair'}, "
              f"last record {recovery.last_sequence}")
        for problem in recovery.problems:
            print(f"  {problem}")
    return 1 if failed else 0
