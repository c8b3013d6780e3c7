"""``canopy history export``: a stopped server's journals to its history, now.

A running server exports by itself (``history_export_ms``); this is for a
data directory served with export off, or before querying a server that was
stopped between exports. Each partition's journal is taken from the data
directory or, for a cluster started with ``--local-nodes``, from the node
whose replica has the newest epoch and then the longest journal (the rule
a restart follows). It needs the journals' locks: a serving directory is
refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from history.store import Exporter
from replication.journal import Journal, JournalError, held_epoch

__all__ = ["ExportError", "export_data_dir"]

_PARTITION = re.compile(r"partition-(\d+)")


class ExportError(Exception):
    """The data directory cannot be exported (missing, in use, or a journal fails its checks)."""


def _replicas(data_dir: Path) -> dict[int, list[Path]]:
    """Partition -> the node data directories holding a journal of it."""
    homes = [data_dir] + sorted(p for p in (data_dir / "nodes").glob("*") if p.is_dir())
    found: dict[int, list[Path]] = {}
    for home in homes:
        for directory in sorted((home / "journal").glob("partition-*")):
            m = _PARTITION.fullmatch(directory.name)
            if m is not None and held_epoch(home, int(m.group(1))) is not None:
                found.setdefault(int(m.group(1)), []).append(home)
    return found


def export_data_dir(data_dir: str | Path, location: str | Path) -> Iterator[str]:
    """Export every partition's records not exported yet; yields one line per partition."""
    data_dir = Path(data_dir)
    if not data_dir.is_dir():
        raise ExportError(f"no data directory {data_dir}")
    replicas = _replicas(data_dir)
    if not replicas:
        raise ExportError(f"{data_dir} holds no journal")
    for partition, homes in sorted(replicas.items()):
        best: tuple[int, int, Journal] | None = None
        for home in homes:
            journal = Journal.for_partition(home, partition)
            try:
                journal.recover()
            except JournalError as e:
                journal.close()
                raise ExportError(f"partition {partition} in {home}: {e}") from e
            rank = (journal.epoch, journal.last_sequence)
            if best is None or rank > best[:2]:
                if best is not None:
                    best[2].close()
                best = (*rank, journal)
            else:
                journal.close()
        assert best is not None
        journal = best[2]
        try:
            journal.roll()
            report = Exporter(location, partition).export(journal.closed_segments(), journal.last_sequence)
        finally:
            journal.close()
        line = (f"partition {partition}: {report.rows} rows in {len(report.files)} files ({report.seconds:.2f} s), "
                f"exported up to record {report.exported}")
        if report.gaps:
            line += f"; gaps (records in no journal): {report.gaps}"
        yield line
