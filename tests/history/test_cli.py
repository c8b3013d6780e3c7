"""`canopy history` from the command line: export, outputs, progress, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest

from history.spark import Progress
from topics.changes import TopicAdded, ValueSet
from topics.types import TopicType, encode
from tests.history.conftest import T0, journal, write

BIN = Path(sys.executable).parent


def canopy(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(BIN / "canopy"), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A stopped server's data directory: two partitions, one in a node's directory (as --local-nodes keeps it)."""
    root = tmp_path_factory.mktemp("served")
    a = journal(root, 0)
    write(a, [(T0, [TopicAdded("m/a", "JSON", [], encode(TopicType.JSON, {"n": 0}))])])
    write(a, [(T0 + i, [ValueSet("m/a", "JSON", encode(TopicType.JSON, {"n": i}))]) for i in range(1, 40)])
    a.close()
    b = journal(root / "nodes" / "node-1", 1)
    write(b, [(T0, [TopicAdded("m/b", "STRING", [], encode(TopicType.STRING, "b"))])])
    write(b, [(T0 + 5, [ValueSet("m/b", "BINARY", b"\x01\x02")])])
    b.close()
    return root


def test_export_writes_a_stopped_servers_journals_once(data: Path) -> None:
    first = canopy("history", "export", "--data-dir", str(data))
    assert first.returncode == 0, first.stderr
    assert "partition 0: 40 rows" in first.stdout and "partition 1: 2 rows" in first.stdout, first.stdout
    again = canopy("history", "export", "--data-dir", str(data))
    assert again.returncode == 0 and "partition 0: 0 rows" in again.stdout, again
    missing = canopy("history", "export", "--data-dir", str(data / "nowhere"))
    assert missing.returncode == 1 and "no data directory" in missing.stderr, missing


def test_outputs_json_lines_table_and_files(data: Path, tmp_path: Path) -> None:
    canopy("history", "export", "--data-dir", str(data))
    where = ["--history-dir", str(data / "history")]
    lines = canopy("history", "query", "?m//", "--json", "--from", "2025-11-24T16:00:00Z", *where)
    assert lines.returncode == 0, lines.stderr
    rows = [json.loads(line) for line in lines.stdout.splitlines()]
    assert [r["path"] for r in rows] == ["m/a"] * 40 + ["m/b"] * 2
    assert rows[39]["value"] == {"n": 39} and rows[-1]["value_base64"] == "AQI=" and rows[-2]["value"] == "b"
    assert rows[0] == {"path": "m/a", "timestamp": T0, "sequence": 1, "partition": 0, "op": "add", "type": "JSON",
                       "value": {"n": 0}}
    out = tmp_path / "stats.csv"
    stats = canopy("history", "stats", "--by", "branch", "--out", str(out), "--progress", *where)
    assert stats.returncode == 0, stats.stderr
    assert "spark session ready" in stats.stderr and "wrote" in stats.stderr, stats.stderr
    text = "".join(p.read_text() for p in sorted(out.glob("part-*.csv")))
    assert text.splitlines()[0].startswith("branch,changes,bytes") and "\nm,42," in "\n" + text, text
    table = canopy("history", "replay-view", "map ?m// to r/<path(1)>", "--limit", "3", *where)
    assert table.returncode == 0, table.stderr
    shown = table.stdout.splitlines()
    assert shown[0].split() == ["path", "timestamp", "op", "type", "value", "source_path", "source_sequence"], shown
    assert shown[1].split()[0] == "r/a" and '{"n":0}' in shown[1] and len(shown) == 5, shown
    assert shown[-1] == "... 39 more rows (--limit, --json or --out for all)", shown


def test_bad_input_is_a_clear_error(data: Path) -> None:
    where = ["--history-dir", str(data / "history")]
    when = canopy("history", "query", "?m//", "--from", "last tuesday", *where)
    assert when.returncode == 2 and "--from 'last tuesday' is neither milliseconds" in when.stderr, when
    spec = canopy("history", "replay-view", "map ?m// to", *where)
    assert spec.returncode == 2 and "canopy history: view specification" in spec.stderr, spec
    assert "Traceback" not in spec.stderr
    selector = canopy("history", "query", "?m/[", *where)
    assert selector.returncode == 2 and "canopy history: selector '?m/['" in selector.stderr, selector
    master = canopy("history", "stats", "--master", "nonsense", *where)
    assert master.returncode == 2 and "canopy history: Spark did not start (--master nonsense)" in master.stderr, master
    assert "Traceback" not in master.stderr
    choice = canopy("history", "stats", "--by", "leaf", *where)
    assert choice.returncode == 2 and "invalid choice" in choice.stderr, choice


def test_progress_shows_stage_and_task_counts(spark: Any) -> None:
    lines: list[str] = []
    done = threading.Event()

    def job() -> None:
        try:
            spark.range(0, 4_000_000, numPartitions=16).selectExpr("sum(id % 7) as s").collect()
        finally:
            done.set()

    with Progress(spark, lines.append, every=0.02):
        worker = threading.Thread(target=job)
        worker.start()
        worker.join(120)
    assert done.is_set()
    assert any("tasks" in line and "stage" in line for line in lines), lines
