"""The history jobs on a real standalone Spark cluster (a master and one worker, started
from the PySpark install): ``canopy history query --master spark://...`` gives exactly
the rows local mode gives, and the cluster really ran the job."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Hopeless, free_port, wait_for

BIN = Path(sys.executable).parent
CANOPY = str(BIN / "canopy")
SELECTOR = "?a//"
APP = "canopy history"


def _selected(path: str) -> bool:
    """What ``?a//`` selects: ``a`` and everything below it (not ``ab``)."""
    return path == "a" or path.startswith("a/")


# -- a small history -----------------------------------------------------------


def _generate(data_dir: Path, history_dir: Path) -> list[dict[str, Any]]:
    """Journal changes in two partitions, export them, and return the JSON lines
    ``canopy history query ?a// --json`` must print, in its order (path, partition, sequence)."""
    from history.store import Exporter
    from replication.journal import Journal
    from topics.changes import TopicAdded, TopicRemoved, ValueSet
    from topics.types import TopicType, encode

    # the records straddle a UTC midnight, so the history has two date= directories
    t0 = int(dt.datetime(2026, 11, 25, 23, 59, 30, tzinfo=dt.timezone.utc).timestamp() * 1000)
    plan: dict[int, list[tuple[str, str, str | None, Any]]] = {  # partition: (op, path, type, value) ...
        0: [("add", "a/b", "STRING", "x"), ("add", "z/x", "STRING", "zx"), ("add", "a/c", "INT64", 0)]
        + [("set", "a/b", "STRING", f"v{i}") for i in range(12)]
        + [("set", "a/c", "INT64", i * 7) for i in range(8)]
        + [("set", "z/x", "STRING", f"z{i}") for i in range(6)]
        + [("remove", "a/c", None, None), ("add", "a/c", "STRING", "again"), ("set", "a/c", "STRING", "last")],
        1: [("add", "a/d/e", "BINARY", b"\x00\x01"), ("add", "ab/q", "STRING", "not a"), ("add", "z/y", "INT64", 1)]
        + [("set", "a/d/e", "BINARY", bytes([i, 255 - i])) for i in range(10)]
        + [("set", "ab/q", "STRING", f"q{i}") for i in range(5)]
        + [("set", "z/y", "INT64", i) for i in range(5)]
        + [("remove", "ab/q", None, None), ("add", "a", "STRING", "root")],
    }
    expected: list[dict[str, Any]] = []
    for partition, steps in plan.items():
        journal = Journal.for_partition(data_dir, partition, segment_bytes=512)
        journal.recover()
        try:
            for i in range(0, len(steps), 3):  # batches of three changes, 4 s apart
                batch = steps[i:i + 3]
                now = t0 + (i // 3) * 4000 + partition
                changes: list[Any] = []
                for op, path, kind, value in batch:
                    if kind is None:
                        changes.append(TopicRemoved(path))
                    elif op == "add":
                        changes.append(TopicAdded(path, kind, [], encode(TopicType[kind], value)))
                    else:
                        changes.append(ValueSet(path, kind, encode(TopicType[kind], value)))
                last = journal.append(changes, now)
                for k, (op, path, kind, value) in enumerate(batch):
                    if not _selected(path):
                        continue
                    row: dict[str, Any] = {"path": path, "timestamp": now, "sequence": last - len(batch) + 1 + k,
                                           "partition": partition, "op": op, "type": kind}
                    if isinstance(value, bytes):
                        row["value_base64"] = base64.b64encode(value).decode()
                    else:
                        row["value"] = value
                    expected.append(row)
            journal.roll()
            segments = journal.closed_segments()
            assert len(segments) > 1, "the journal should have rolled over several segments"
            report = Exporter(history_dir, partition).export(segments, journal.last_sequence)
            assert report.rows == len(steps), report
        finally:
            journal.close()
    days = sorted(p.name for p in (history_dir / "updates").iterdir())
    assert days == ["date=2026-11-25", "date=2026-11-26"], days
    expected.sort(key=lambda r: (r["path"], r["partition"], r["sequence"]))
    return expected


# -- a standalone cluster -------------------------------------------------------


@dataclass
class Cluster:
    master_url: str
    ui: str  # the master's web UI
    work_dir: Path

    def state(self) -> dict[str, Any]:
        with urllib.request.urlopen(f"{self.ui}/json/", timeout=5) as response:
            state: dict[str, Any] = json.loads(response.read())
        return state


def _tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError as e:
        return f"({path}: {e})"


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Kill the process's whole group (the JVM, executors and their Python workers)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            break
        try:
            process.wait(timeout=15)
            if sig is signal.SIGTERM:
                try:  # the executors the worker launched may outlive it: make sure
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            break
        except subprocess.TimeoutExpired:
            continue
    if process.poll() is None:
        process.wait(timeout=15)


@pytest.fixture
def spark_env(tmp_path: Path) -> dict[str, str]:
    import pyspark

    conf = tmp_path / "spark-conf"  # no spark-defaults or log4j settings from elsewhere
    conf.mkdir()
    # the master's, the worker's and the executor's JVMs as the drivers' (tests/conftest.py): the
    # JIT's first tier only, about 40 % less CPU for a short job on a small history
    java = os.environ.get("CANOPY_HISTORY_JAVA_OPTIONS", "")
    (conf / "spark-defaults.conf").write_text(f"spark.executor.extraJavaOptions {java}\n" if java else "")
    env = dict(os.environ)
    env.update(SPARK_HOME=os.path.dirname(pyspark.__file__), SPARK_LOCAL_IP="127.0.0.1", SPARK_CONF_DIR=str(conf),
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable, SPARK_DAEMON_JAVA_OPTS=java)
    env.pop("MASTER", None)
    env.pop("SPARK_MASTER", None)
    return env


@pytest.fixture
def cluster(tmp_path: Path, spark_env: dict[str, str]) -> Iterator[Cluster]:
    spark_class = os.path.join(spark_env["SPARK_HOME"], "bin", "spark-class")
    port, ui_port, worker_ui_port = free_port(), free_port(), free_port()
    master_url, ui = f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui_port}"
    work_dir = tmp_path / "work"
    work_dir.mkdir()
    logs = tmp_path / "spark-logs"
    logs.mkdir()
    commands = {
        "master": [spark_class, "org.apache.spark.deploy.master.Master",
                   "--host", "127.0.0.1", "--port", str(port), "--webui-port", str(ui_port)],
        "worker": [spark_class, "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
                   "--webui-port", str(worker_ui_port), "--cores", "1", "--memory", "1g",
                   "--work-dir", str(work_dir), master_url],
    }
    processes: dict[str, subprocess.Popen[bytes]] = {}
    this = Cluster(master_url, ui, work_dir)

    def running() -> None:
        for name, process in processes.items():
            if process.poll() is not None:
                raise Hopeless(f"the {name} exited ({process.returncode}):\n{_tail(logs / f'{name}.log')}")

    def describe() -> str:
        try:
            state: Any = this.state()
        except Exception as e:  # noqa: BLE001 - the observation is the error
            state = e
        return (f"master UI: {state!r}\n-- master log --\n{_tail(logs / 'master.log')}"
                f"\n-- worker log --\n{_tail(logs / 'worker.log')}")

    def master_alive() -> bool:
        running()
        return this.state().get("status") == "ALIVE"

    def alive_workers() -> list[Any]:
        running()
        return [w for w in this.state().get("workers", []) if w.get("state") == "ALIVE"]

    try:
        for name, command in commands.items():
            with open(logs / f"{name}.log", "wb") as log:
                processes[name] = subprocess.Popen(command, env=spark_env, stdin=subprocess.DEVNULL, stdout=log,
                                                   stderr=subprocess.STDOUT, start_new_session=True, cwd=tmp_path)
            if name == "master":
                wait_for(master_alive, 90, "the Spark master",
                         interval=0.2, describe=describe)
        workers = wait_for(alive_workers, 90, "an ALIVE worker in the master's UI", interval=0.2, describe=describe)
        assert len(workers) == 1 and workers[0]["cores"] == 1, workers
        yield this
    finally:
        for process in reversed(list(processes.values())):
            _stop(process)


# -- the test -----------------------------------------------------------------


def _query(history_dir: Path, env: dict[str, str], cwd: Path, *extra: str) -> list[dict[str, Any]]:
    command = [CANOPY, "history", "query", SELECTOR, "--history-dir", str(history_dir), "--json", *extra]
    result = subprocess.run(command, env=env, cwd=cwd, capture_output=True, text=True, timeout=180,
                            stdin=subprocess.DEVNULL)
    assert result.returncode == 0, f"{command} exited {result.returncode}:\n{result.stderr[-5000:]}"
    return [json.loads(line) for line in result.stdout.splitlines() if line.strip()]


@pytest.mark.timeout(300)
def test_query_on_a_standalone_cluster_gives_the_local_rows(
    tmp_path: Path, spark_env: dict[str, str], cluster: Cluster
) -> None:
    history_dir = tmp_path / "history"
    expected = _generate(tmp_path / "data", history_dir)
    assert {r["partition"] for r in expected} == {0, 1} and len(expected) > 30

    local = _query(history_dir, spark_env, tmp_path)
    assert local == expected  # the same rows, the same order, the same values

    assert not cluster.state().get("completedapps") and not list(cluster.work_dir.iterdir())
    standalone = _query(history_dir, spark_env, tmp_path, "--master", cluster.master_url)
    assert len(standalone) == len(expected)
    assert standalone == local

    # the cluster ran it: the master lists the finished application, and its executor ran on the worker
    def finished() -> list[Any]:
        state = cluster.state()
        return [a for a in state.get("completedapps", []) if a.get("name") == APP] if not state.get("activeapps") else []

    apps = wait_for(finished, 60, f"{APP!r} among the master's completed applications", interval=0.2,
                    describe=cluster.state)
    assert len(apps) == 1 and apps[0]["state"] == "FINISHED", apps
    app_dirs = [p for p in cluster.work_dir.iterdir() if p.name.startswith("app-")]
    assert [p.name for p in app_dirs] == [apps[0]["id"]]
    assert any(app_dirs[0].iterdir()), "the worker launched no executor for the application"
