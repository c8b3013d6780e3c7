"""The history location and how closed journal segments become Parquet files
(pyarrow only: no Spark, no Ray; a partition actor runs it on a worker thread).

Layout under the history location (``history_dir``, default ``<data_dir>/history``)::

    updates/date=2026-11-25/p0003-00000000000000000001-00000000000000052173.parquet
    updates/date=2026-11-26/p0003-00000000000000052174-00000000000000052180.parquet
    _canopy/partition-0003.json    {"exported": 52180, "gaps": [[a, b], ...]}
    _canopy/partition-0003.lock    flock'ed while partition 3's rows are written

One row per journal record (:func:`schema`): ``partition``, ``sequence``
(the partition's record number: unique per partition, no gaps),
``timestamp`` (ms since the epoch, when the batch was journaled), ``path``,
``op`` (add, set, remove, append, edit), ``type`` (the topic type; for
append and edit the event value type), ``properties`` (on add), ``value``
(the stored bytes), ``value_json`` (the value decoded, as JSON text, for
STRING, INT64, DOUBLE and JSON values), and for time series events
``author``, ``event_sequence``, ``event_timestamp`` and the ``original_*``
fields of an edit. The ``date`` (UTC, of ``timestamp``) is the directory:
Spark prunes by it.

Only the partition's *primary* exports, and only records its backup has
acknowledged (a replaced primary's unacknowledged tail never reaches
history). Each file is named by the sequences it holds, written under a
temporary name (``.tmp-*``: Spark skips it) and renamed into place, then
the manifest records the last sequence exported: a new primary after a
failover (whose journal holds the same records under the same numbers)
continues at the next sequence, so there are no duplicates and no gaps.
The watermark is the larger of the manifest and the newest file name, so a
crash between the two does not export a range twice. The lock file keeps a
replaced primary that still runs from writing beside its successor (on one
machine, or a shared file system with POSIX locks); the temporary file of an exporter
killed before its rename is removed by the next export, under that lock. Records no replica's
journal holds any more (a backup primed from its primary's state, then
promoted before the primary's segment closed) are a gap: logged, and listed
in the manifest.

Journals keep every segment that is not exported yet (:meth:`Exporter.keeps`,
the journal's ``keep_segment``), backups too (they read the watermark now and
then, :meth:`Exporter.watermark`), so a promoted backup has what its primary
had not exported.

The location is a directory (``file://`` too) or a URI pyarrow writes
(``s3://bucket/prefix?endpoint_override=...``, ``gs://``, ``hdfs://``): there
each file is written whole as one object (no reader sees part of one) and
there is no lock, so only the primary role keeps two exporters of a
partition apart. Spark reads the same place by its own scheme (``s3a://``).

Retention: with ``retention_days`` > 0 the date directories older than that
many days are removed (by any exporter, at most once an hour).
"""

from __future__ import annotations

import contextlib
import datetime as dt
import fcntl
import functools
import json
import logging
import math
import os
import re
import shutil
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import cbor2

from replication.journal import Record, Segment, read_segment
from topics.changes import EventAppended, TopicAdded, ValueSet, operation_name
from topics.types import TopicType

__all__ = ["COLUMNS", "ExportReport", "Exporter", "schema", "history_location", "rows_table", "updates_directory"]

log = logging.getLogger("canopy.history")

UPDATES = "updates"
META = "_canopy"
_FILE = re.compile(r"p(\d{4})-(\d{20})-(\d{20})\.parquet")
_DECODED = {t.value for t in (TopicType.STRING, TopicType.INT64, TopicType.DOUBLE, TopicType.JSON)}
_RETENTION_EVERY = 3600.0

COLUMNS = (
    "partition", "sequence", "timestamp", "path", "op", "type", "properties", "value", "value_json", "author",
    "event_sequence", "event_timestamp", "original_sequence", "original_timestamp", "original_author",
)


@functools.cache
def schema() -> Any:
    """The Arrow schema of the history rows (pyarrow is imported when first needed: a
    partition that never exports does not load it)."""
    import pyarrow as pa

    return pa.schema([
        ("partition", pa.int32()), ("sequence", pa.int64()), ("timestamp", pa.int64()), ("path", pa.string()),
        ("op", pa.string()), ("type", pa.string()), ("properties", pa.map_(pa.string(), pa.string())),
        ("value", pa.binary()), ("value_json", pa.string()), ("author", pa.string()),
        ("event_sequence", pa.int64()), ("event_timestamp", pa.int64()), ("original_sequence", pa.int64()),
        ("original_timestamp", pa.int64()), ("original_author", pa.string()),
    ])



def history_location(history_dir: str | None, data_dir: str) -> str:
    """Where a server's history lives: the setting ``history_dir`` (a directory or a URI), else
    ``<data_dir>/history``."""
    return history_dir if history_dir else os.path.join(data_dir, "history")


def updates_directory(location: str | os.PathLike[str]) -> Path:
    return Path(location) / UPDATES


def value_json(type_name: str | None, value: bytes | None) -> str | None:
    """The value as JSON text, for the types whose values read as JSON; None otherwise or when
    undecodable. Stored values were checked when written, so the CBOR is read as it is
    (``cbor2.loads``, no second validation: this runs once per exported row). A DOUBLE that is
    not finite is the string ``"NaN"``, ``"Infinity"`` or ``"-Infinity"`` (as the CLI prints it)."""
    if value is None or type_name not in _DECODED:
        return None
    try:
        item = cbor2.loads(value)
        return json.dumps(item, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    except ValueError:
        if isinstance(item, float) and not math.isfinite(item):
            return '"NaN"' if math.isnan(item) else ('"Infinity"' if item > 0 else '"-Infinity"')
        return None
    except Exception:  # noqa: BLE001 - bytes that do not decode have no JSON form
        return None


def _day(timestamp_ms: int) -> str:
    return dt.datetime.fromtimestamp(timestamp_ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")


def rows_table(partition: int, records: Sequence[Record]) -> Any:
    """The records as one Arrow table of :func:`schema`."""
    import pyarrow as pa

    columns: dict[str, list[Any]] = {name: [] for name in COLUMNS}
    for record in records:
        change = record.change
        kind: str | None = None
        value: bytes | None = None
        properties: list[tuple[str, str]] | None = None
        event = None
        if isinstance(change, ValueSet):
            kind, value = change.type, change.value
        elif isinstance(change, EventAppended):
            kind, event = change.type, change.event
            value = event.value
        elif isinstance(change, TopicAdded):
            kind, value = change.type, change.value
            properties = [(str(k), str(v)) for k, v in change.properties]
        columns["partition"].append(partition)
        columns["sequence"].append(record.sequence)
        columns["timestamp"].append(record.timestamp)
        columns["path"].append(change.path)
        columns["op"].append(operation_name(change))
        columns["type"].append(kind)
        columns["properties"].append(properties)
        columns["value"].append(value)
        columns["value_json"].append(value_json(kind, value))
        columns["author"].append(event.author if event is not None else None)
        columns["event_sequence"].append(event.sequence if event is not None else None)
        columns["event_timestamp"].append(event.timestamp if event is not None else None)
        columns["original_sequence"].append(event.original_sequence if event is not None else None)
        columns["original_timestamp"].append(event.original_timestamp if event is not None else None)
        columns["original_author"].append(event.original_author if event is not None else None)
    return pa.Table.from_pydict(columns, schema=schema())


@dataclass
class ExportReport:
    files: list[str] = field(default_factory=list)
    rows: int = 0
    exported: int = 0  # the watermark after the export
    gaps: list[tuple[int, int]] = field(default_factory=list)
    seconds: float = 0.0
    removed_days: list[str] = field(default_factory=list)


class _Local:
    """A history location on this machine's file systems (a plain path or ``file://``): files
    are written under a temporary name, fsynced and renamed; a partition's exports hold an flock."""

    remote = False

    def __init__(self, root: Path) -> None:
        self.root = root

    def read_text(self, relative: str) -> str | None:
        try:
            return (self.root / relative).read_text()
        except FileNotFoundError:
            return None

    def write_text(self, relative: str, text: str) -> None:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".tmp-{os.getpid()}-{target.name}")
        temporary.write_text(text)
        os.replace(temporary, target)

    def listing(self, relative: str) -> dict[str, list[str]]:
        """Directory name -> file names, one level below ``relative``."""
        top = self.root / relative
        if not top.is_dir():
            return {}
        return {d.name: os.listdir(d) for d in top.iterdir() if d.is_dir()}

    def write_table(self, relative: str, table: Any) -> str:
        import pyarrow.parquet as pq

        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        temporary = target.with_name(f".tmp-{os.getpid()}-{target.name}")
        pq.write_table(table, temporary)
        with open(temporary, "rb") as f:
            os.fsync(f.fileno())
        os.replace(temporary, target)
        return str(target)

    def remove_tree(self, relative: str) -> None:
        shutil.rmtree(self.root / relative, ignore_errors=True)

    def remove_unfinished(self, prefix: str) -> int:
        """Remove the temporary files (``.tmp-<pid>-<name>``) of files named ``prefix...``
        that an exporter killed between writing and renaming left behind; called under the
        partition's lock, so no exporter is writing one now. How many."""
        removed = 0
        top = self.root / UPDATES
        if not top.is_dir():
            return 0
        for day in top.iterdir():
            if not day.is_dir():
                continue
            for name in os.listdir(day):
                if name.startswith(".tmp-") and name.split("-", 2)[-1].startswith(prefix):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(day / name)
                        removed += 1
        if removed:
            log.warning("history: removed %d file(s) %s... an exporter left unfinished", removed, prefix)
        return removed

    @contextlib.contextmanager
    def lock(self, relative: str) -> Iterator[None]:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        with open(target, "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            yield


class _Remote:
    """A location pyarrow reaches by URI (``s3://``, ``gs://``, ``hdfs://``, ...): objects are
    written whole (no reader sees a partial one); there is no lock (see the module docstring)."""

    remote = True

    def __init__(self, uri: str) -> None:
        import pyarrow.fs as pafs

        self.fs, root = pafs.FileSystem.from_uri(uri)
        self.root = root.rstrip("/")
        self.shown = uri.split("?", 1)[0].rstrip("/")  # without options such as endpoint_override

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    def read_text(self, relative: str) -> str | None:
        import pyarrow.fs as pafs

        if self.fs.get_file_info(self._path(relative)).type == pafs.FileType.NotFound:
            return None
        with self.fs.open_input_stream(self._path(relative)) as f:
            return bytes(f.read()).decode()

    def write_text(self, relative: str, text: str) -> None:
        with self.fs.open_output_stream(self._path(relative)) as f:
            f.write(text.encode())

    def listing(self, relative: str) -> dict[str, list[str]]:
        import pyarrow.fs as pafs

        found: dict[str, list[str]] = {}
        selector = pafs.FileSelector(self._path(relative), allow_not_found=True, recursive=True)
        for info in self.fs.get_file_info(selector):
            if info.type == pafs.FileType.File:
                parent, _, name = info.path.rpartition("/")
                found.setdefault(parent.rpartition("/")[2], []).append(name)
        return found

    def write_table(self, relative: str, table: Any) -> str:
        import pyarrow.parquet as pq

        pq.write_table(table, self._path(relative), filesystem=self.fs)
        return f"{self.shown}/{relative}"

    def remove_tree(self, relative: str) -> None:
        self.fs.delete_dir(self._path(relative))

    def remove_unfinished(self, prefix: str) -> int:
        return 0  # an object is written whole: none is ever left unfinished

    @contextlib.contextmanager
    def lock(self, relative: str) -> Iterator[None]:
        yield


def _storage(location: str | os.PathLike[str]) -> _Local | _Remote:
    text = os.fspath(location)
    if text.startswith("file://"):
        return _Local(Path(text[len("file://"):]))
    if "://" in text:
        return _Remote(text)
    return _Local(Path(text))


class Exporter:
    """Partition ``partition``'s side of the history location: a directory, or a URI pyarrow
    writes (``s3://bucket/prefix``: Spark then reads the same place by its own scheme, ``s3a://``)."""

    def __init__(self, location: str | os.PathLike[str], partition: int, retention_days: int = 0) -> None:
        self.location = os.fspath(location)
        self.storage = _storage(location)
        self.partition = partition
        self.retention_days = retention_days
        self._mark = 0
        self._retained_at = -_RETENTION_EVERY
        self.rows = 0  # exported by this process
        self.last: ExportReport | None = None

    @property
    def _manifest(self) -> str:
        return f"{META}/partition-{self.partition:04d}.json"

    def _read_manifest(self) -> dict[str, Any]:
        empty: dict[str, Any] = {"exported": 0, "gaps": []}
        try:
            text = self.storage.read_text(self._manifest)
            data = json.loads(text) if text is not None else empty
        except (OSError, ValueError) as e:
            log.error("history manifest %s in %s is unreadable (%s): the file names decide",
                      self._manifest, self.location, e)
            return empty
        return data if isinstance(data, dict) else empty

    def _scan(self) -> tuple[int, list[Any]]:
        """The last sequence exported (manifest or newest file, whichever is larger) and the gaps recorded."""
        manifest = self._read_manifest()
        mark = int(manifest.get("exported", 0))
        prefix = f"p{self.partition:04d}-"
        for day, names in self.storage.listing(UPDATES).items():
            if day.startswith("date="):
                for name in names:
                    m = _FILE.fullmatch(name) if name.startswith(prefix) else None
                    if m is not None:
                        mark = max(mark, int(m.group(3)))
        return mark, list(manifest.get("gaps", []))

    @property
    def exported(self) -> int:
        """The last sequence exported, as this process last knew it (no I/O: for event loops
        and the journal's lock)."""
        return self._mark

    def watermark(self) -> int:
        """The last sequence exported, read from the location (I/O: a worker thread's call)."""
        try:
            self._mark = max(self._mark, self._scan()[0])
        except OSError as e:
            log.warning("cannot read the history location %s: %s", self.location, e)
        return self._mark

    def keeps(self, segment: Segment) -> bool:
        """The journal's ``keep_segment`` (called under the journal's lock, so without I/O): a
        segment stays until its records are exported, as far as this process knows. A replica
        that never read the location keeps every segment."""
        return segment.last_sequence > self._mark

    def export(self, segments: Iterable[Segment], upto: int) -> ExportReport:
        """Write the records of ``segments`` after the watermark and up to ``upto`` (the last
        acknowledged sequence) as Parquet. Safe to call again after a crash at any point."""
        started = time.perf_counter()
        report = ExportReport()
        with self.storage.lock(f"{META}/partition-{self.partition:04d}.lock"):
            self.storage.remove_unfinished(f"p{self.partition:04d}-")
            mark, gaps = self._scan()
            for segment in sorted(segments, key=lambda s: s.first_sequence):
                if segment.last_sequence <= mark:
                    continue
                if mark >= upto:
                    break
                if segment.first_sequence > mark + 1:
                    gap = (mark + 1, segment.first_sequence - 1)
                    log.error("history of partition %d: records %d..%d are in no journal here; they are a gap",
                              self.partition, *gap)
                    gaps.append(list(gap))
                    report.gaps.append(gap)
                    mark = gap[1]
                    self._write_manifest(mark, gaps)
                records = [r for r in read_segment(segment.path, self.partition) if mark < r.sequence <= upto]
                for run in _runs_by_day(records):
                    name = f"p{self.partition:04d}-{run[0].sequence:020d}-{run[-1].sequence:020d}.parquet"
                    relative = f"{UPDATES}/date={_day(run[0].timestamp)}/{name}"
                    report.files.append(self.storage.write_table(relative, rows_table(self.partition, run)))
                    report.rows += len(run)
                    mark = run[-1].sequence
                    self._write_manifest(mark, gaps)
            report.exported = mark
        report.removed_days = self._retain()
        report.seconds = time.perf_counter() - started
        self.record(report)
        return report

    def record(self, report: ExportReport) -> None:
        """Take in what an export did (here, or in an export process: :mod:`history.export_worker`)."""
        self._mark = max(self._mark, report.exported)
        self.rows += report.rows
        self.last = report

    def _write_manifest(self, exported: int, gaps: list[Any]) -> None:
        self.storage.write_text(self._manifest, json.dumps({"exported": exported, "gaps": gaps}))

    def _retain(self) -> list[str]:
        now = time.monotonic()
        if self.retention_days <= 0 or now - self._retained_at < _RETENTION_EVERY:
            return []
        self._retained_at = now
        cutoff = (dt.datetime.now(dt.timezone.utc) - dt.timedelta(days=self.retention_days)).strftime("%Y-%m-%d")
        removed = []
        for day in sorted(self.storage.listing(UPDATES)):
            if day.startswith("date=") and day[5:] < cutoff:
                self.storage.remove_tree(f"{UPDATES}/{day}")
                removed.append(day[5:])
        if removed:
            log.info("history: removed the days before %s (retention %d days)", cutoff, self.retention_days)
        return removed


def _runs_by_day(records: list[Record]) -> list[list[Record]]:
    """Consecutive records grouped while their UTC day stays the same."""
    runs: list[list[Record]] = []
    current = ""
    for record in records:
        day = _day(record.timestamp)
        if not runs or day != current:
            runs.append([])
            current = day
        runs[-1].append(record)
    return runs
