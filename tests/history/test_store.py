"""Journal segments to Parquet (history/store.py): rows, idempotence, failover, gaps, retention."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

import pyarrow.parquet as pq

from history.store import Exporter, updates_directory
from replication.journal import Journal
from topics.changes import EventAppended, TopicAdded, TopicRemoved, ValueSet
from topics.timeseries import Event
from topics.types import TopicType, encode
from tests.conftest import Hopeless, free_port, wait_for
from tests.history.conftest import T0, export_all, journal, write


def rows(location: Path) -> list[dict]:
    files = sorted(updates_directory(location).glob("date=*/[!.]*.parquet"))  # as Spark: no .tmp-*
    out = []
    for f in files:
        day = f.parent.name[5:]
        for row in pq.read_table(f).to_pylist():
            row["date"] = day
            out.append(row)
    return sorted(out, key=lambda r: (r["partition"], r["sequence"]))


def sets(n: int, path: str = "a/b", start: int = T0, step: int = 1000) -> list[tuple[int, list]]:
    return [(start + i * step, [ValueSet(path, "STRING", encode(TopicType.STRING, f"v{i}"))]) for i in range(n)]


def test_every_record_becomes_one_row_with_its_columns(tmp_path: Path) -> None:
    j = journal(tmp_path / "data")
    props = [["TIME_SERIES_EVENT_VALUE_TYPE", "INT64"]]
    write(j, [
        (T0, [TopicAdded("a/b", "STRING", [], encode(TopicType.STRING, "x")),
              TopicAdded("a/j", "JSON", [], encode(TopicType.JSON, {"k": [1, 2]}))]),
        (T0 + 1, [ValueSet("a/b", "STRING", encode(TopicType.STRING, "y"))]),
        (T0 + 2, [TopicAdded("a/ts", "TIME_SERIES", props, None)]),
        (T0 + 3, [EventAppended("a/ts", "INT64", Event(0, T0 + 3, "me", encode(TopicType.INT64, 7)))]),
        (T0 + 4, [EventAppended("a/ts", "INT64", Event(1, T0 + 4, "ed", encode(TopicType.INT64, 8), 0, T0 + 3, "me"))]),
        (T0 + 5, [ValueSet("a/bin", "BINARY", b"\x00\xff")]),
        (T0 + 6, [TopicRemoved("a/b")]),
    ])
    report = export_all(j, tmp_path / "history")
    got = rows(tmp_path / "history")
    assert report.rows == 8 and report.exported == 8 == j.last_sequence, report
    assert [r["sequence"] for r in got] == list(range(1, 9))
    assert [r["op"] for r in got] == ["add", "add", "set", "add", "append", "edit", "set", "remove"]
    assert [r["value_json"] for r in got] == ['"x"', '{"k":[1,2]}', '"y"', None, "7", "8", None, None]
    assert got[3]["properties"] == [("TIME_SERIES_EVENT_VALUE_TYPE", "INT64")] and got[3]["type"] == "TIME_SERIES"
    edit = got[5]
    assert (edit["type"], edit["author"], edit["event_sequence"], edit["original_sequence"], edit["original_timestamp"],
            edit["original_author"]) == ("INT64", "ed", 1, 0, T0 + 3, "me")
    assert got[6]["value"] == b"\x00\xff" and got[6]["type"] == "BINARY"
    assert {r["date"] for r in got} == {"2025-11-24"} and all(r["partition"] == 0 for r in got)
    assert got[0]["timestamp"] == T0 and got[-1]["timestamp"] == T0 + 6


def test_rows_are_split_by_utc_day(tmp_path: Path) -> None:
    j = journal(tmp_path / "data", segment_bytes=1 << 20)
    midnight = int(dt.datetime(2025, 11, 25, tzinfo=dt.timezone.utc).timestamp() * 1000)
    write(j, sets(6, start=midnight - 3000))
    report = export_all(j, tmp_path / "history")
    got = rows(tmp_path / "history")
    assert len(report.files) == 2, report.files
    assert [r["date"] for r in got] == ["2025-11-24"] * 3 + ["2025-11-25"] * 3


def test_exporting_again_writes_nothing_twice(tmp_path: Path) -> None:
    j = journal(tmp_path / "data")
    write(j, sets(300))
    first = export_all(j, tmp_path / "history")
    assert first.rows == 300 and len(first.files) > 1
    assert export_all(j, tmp_path / "history").rows == 0
    write(j, sets(50, start=T0 + 400_000))
    assert export_all(j, tmp_path / "history").rows == 50
    # a crash after a file was renamed into place but before the manifest said so
    (tmp_path / "history" / "_canopy" / "partition-0000.json").unlink()
    assert export_all(j, tmp_path / "history").rows == 0
    got = rows(tmp_path / "history")
    assert [r["sequence"] for r in got] == list(range(1, 351))


def test_only_acknowledged_records_are_exported(tmp_path: Path) -> None:
    j = journal(tmp_path / "data")
    write(j, sets(100))
    j.roll()
    exporter = Exporter(tmp_path / "history", 0)
    assert exporter.export(j.closed_segments(), 60).exported == 60
    assert max(r["sequence"] for r in rows(tmp_path / "history")) == 60
    assert exporter.export(j.closed_segments(), 100).rows == 40


def test_a_new_primary_continues_where_the_old_one_stopped(tmp_path: Path) -> None:
    """Primary and backup journal the same records under the same numbers but close their
    segments at different places; the primary exports part, dies, the backup takes over."""
    primary = journal(tmp_path / "node-1", segment_bytes=2048)
    backup = journal(tmp_path / "node-2", segment_bytes=8192)
    batches = sets(400)
    for timestamp, changes in batches[:250]:
        primary.append(changes, timestamp)
        backup.append(changes, timestamp, first=backup.last_sequence + 1)
    location = tmp_path / "history"
    old = Exporter(location, 0)
    segments = primary.closed_segments()  # the active segment died with the primary
    assert old.export(segments, primary.last_sequence).exported < 250
    primary.close()
    for timestamp, changes in batches[250:]:  # the promoted backup goes on
        backup.append(changes, timestamp)
    new = Exporter(location, 0)
    assert backup.closed_segments()[0].first_sequence == 1
    assert new.watermark() == old.watermark() > 0
    export_all(backup, location)
    got = rows(location)
    assert [r["sequence"] for r in got] == list(range(1, 401))
    assert [r["value_json"] for r in got] == [f'"v{i}"' for i in range(400)]


def test_an_exporter_killed_before_its_rename_leaves_nothing_a_reader_counts(tmp_path: Path) -> None:
    """A primary killed between writing a file and renaming it leaves its temporary file; the
    next export (under the partition's lock, so nobody else is writing) removes it, and the
    records are exported once."""
    j = journal(tmp_path / "data")
    write(j, sets(10))
    location = tmp_path / "history"
    export_all(j, location)
    day = next(updates_directory(location).glob("date=*"))
    stale = day / ".tmp-99999-p0000-00000000000000000011-00000000000000000020.parquet"
    stale.write_bytes((next(day.glob("p0000-*.parquet"))).read_bytes())
    other = day / ".tmp-99999-p0001-00000000000000000001-00000000000000000002.parquet"
    other.write_bytes(b"another partition's: not this exporter's to remove")
    write(j, sets(10, start=T0 + 20_000))
    export_all(j, location)
    assert not stale.exists() and other.exists()
    assert [r["sequence"] for r in rows(location)] == list(range(1, 21))


def test_records_no_journal_holds_are_a_recorded_gap(tmp_path: Path) -> None:
    j = journal(tmp_path / "data")
    write(j, sets(10))
    export_all(j, tmp_path / "history")
    # a replica primed from its primary's state at record 30 (records 11-30 are in no journal here)
    primed = Journal.for_partition(tmp_path / "other", 0, segment_bytes=4096)
    primed.recover()
    primed.reset([], 30)
    write(primed, sets(5, start=T0 + 100_000))
    report = export_all(primed, tmp_path / "history")
    assert report.gaps == [(11, 30)] and report.rows == 5, report
    manifest = json.loads((tmp_path / "history" / "_canopy" / "partition-0000.json").read_text())
    assert manifest == {"exported": 35, "gaps": [[11, 30]]}
    assert [r["sequence"] for r in rows(tmp_path / "history")] == list(range(1, 11)) + list(range(31, 36))


def test_segments_stay_in_the_journal_until_exported(tmp_path: Path) -> None:
    location = tmp_path / "history"
    exporter = Exporter(location, 0)
    j = Journal.for_partition(tmp_path / "data", 0, segment_bytes=2048, keep_segment=exporter.keeps)
    j.recover()
    write(j, sets(200))
    j.write_snapshot([], j.last_sequence)
    write(j, sets(10, start=T0 + 300_000))
    j.write_snapshot([], j.last_sequence)  # both snapshots cover every segment: only the history keeps them
    assert j.closed_segments()[0].first_sequence == 1
    j.roll()
    exporter.export(j.closed_segments(), j.last_sequence)
    write(j, sets(10, start=T0 + 400_000))
    j.write_snapshot([], j.last_sequence)
    assert j.closed_segments()[0].first_sequence > 200  # exported: compaction may remove them now
    assert [r["sequence"] for r in rows(location)] == list(range(1, 211))


def test_retention_removes_old_days(tmp_path: Path) -> None:
    location = tmp_path / "history"
    today = int(dt.datetime.now(dt.timezone.utc).timestamp() * 1000)
    j = journal(tmp_path / "data", segment_bytes=1 << 20)
    write(j, sets(3, start=today - 10 * 86_400_000, step=86_400_000))  # 10, 9 and 8 days ago
    write(j, sets(2, start=today - 1000))
    j.roll()
    report = Exporter(location, 0, retention_days=9).export(j.closed_segments(), j.last_sequence)
    kept = sorted(p.name for p in updates_directory(location).iterdir())
    assert len(report.removed_days) == 1 and len(kept) == 3, (report.removed_days, kept)
    assert Exporter(location, 0).watermark() == 5  # the manifest remembers what retention removed
    shutil.rmtree(updates_directory(location))
    assert Exporter(location, 0).export(j.closed_segments(), j.last_sequence).rows == 0


@pytest.fixture
def s3(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A real S3 endpoint on loopback (moto's server); yields the base URI pyarrow writes to."""
    import pyarrow.fs as pafs

    port = free_port()
    log = open(tmp_path / "moto.log", "w")
    server = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
                              stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "test")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "test")
    try:
        def up() -> bool:
            if server.poll() is not None:
                raise Hopeless(f"moto_server exited: {(tmp_path / 'moto.log').read_text()}")
            with socket.socket() as s:
                return s.connect_ex(("127.0.0.1", port)) == 0

        wait_for(up, 30, "the S3 endpoint to listen")
        options = f"endpoint_override=127.0.0.1:{port}&scheme=http&region=us-east-1"
        fs, _ = pafs.FileSystem.from_uri(f"s3://history?{options}&allow_bucket_creation=true")
        fs.create_dir("history")
        yield f"s3://history/h?{options}"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)
        log.close()


def test_an_object_store_location_holds_the_same_history(tmp_path: Path, s3: str) -> None:
    import pyarrow.fs as pafs

    j = journal(tmp_path / "data")
    write(j, sets(300))
    first = export_all(j, s3)
    assert first.rows == 300 and first.files[0].startswith("s3://history/h/updates/date=2025-11-24/p0000-"), first
    assert export_all(j, s3).rows == 0
    assert Exporter(s3, 0).watermark() == 300
    fs, root = pafs.FileSystem.from_uri(s3)
    files = [i.path for i in fs.get_file_info(pafs.FileSelector(root, recursive=True)) if i.path.endswith(".parquet")]
    got = pq.ParquetDataset(files, filesystem=fs).read().to_pylist()
    assert sorted(r["sequence"] for r in got) == list(range(1, 301))
    assert json.loads(fs.open_input_stream(f"{root}/_canopy/partition-0000.json").read()) == {"exported": 300, "gaps": []}
