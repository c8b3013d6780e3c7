"""History cost: journal generation, journal -> Parquet export, and the Spark jobs over it.

Writes ``--updates`` journaled changes (default 10,000,000) to ``--partitions``
journals (default 4): ``--topics`` JSON topics ``bench/s<k>`` (default 10,000;
topic k lives in partition k mod P), each added first, then set to small JSON
values ``{"v": i, "k": k}``, appended ``--batch`` changes at a time with
timestamps rising over 36 hours from 2026-11-25T00:00Z (so two dates). Then,
printing figures only (no asserts):

1. generation rate (TopicStore not involved: encode + ``Journal.append``);
2. ``Exporter.export`` of every partition's closed segments: rows/s, files, MB;
3. the first ``history.spark.session("local[*]")`` of the process;
4. ``History.replay_view("map ?bench// to views/<path(1)>")`` over every row
   (the call itself, which already runs the replay, then a ``noop`` write);
5. ``History.query("?bench/s1//").count()`` and ``History.stats(by="branch")``;
6. when ``canopy history query`` exists: the same query through the CLI on
   ``local[*]`` and, with ``--standalone``, on a standalone Spark cluster
   started here from the PySpark installation (master + one worker).

    .venv/bin/python bench/history.py [--updates 10000000] [--dir /path/on/the/data/disk]
                                      [--standalone] [--driver-memory 4g] [--keep]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from history.store import Exporter  # noqa: E402
from replication.journal import Journal  # noqa: E402
from topics.changes import TopicAdded, ValueSet  # noqa: E402
from topics.types import TopicType, encode  # noqa: E402

START_MS = 1_795_564_800_000  # 2026-11-25T00:00:00Z
SPAN_MS = 36 * 3600 * 1000
CANOPY = ROOT / ".venv" / "bin" / "canopy"
SELECTOR = "?bench/s1//"
VIEW = "map ?bench// to views/<path(1)>"


def say(text: str) -> None:
    print(text, flush=True)


def rate(what: str, count: int, seconds: float, unit: str = "rows") -> None:
    say(f"{what}: {count:,} {unit} in {seconds:.1f} s = {count / max(seconds, 1e-9):,.0f} {unit}/s")


def generate(data_dir: Path, updates: int, topics: int, partitions: int, batch: int, segment_mb: int) -> list[Journal]:
    """Step 1: the journals, ``updates`` records in all."""
    journals = [Journal.for_partition(data_dir, p, segment_bytes=segment_mb << 20) for p in range(partitions)]
    for journal in journals:
        journal.recover()
    pending: list[list[Any]] = [[] for _ in range(partitions)]
    json_type = TopicType.JSON.value
    started = time.perf_counter()
    for i in range(updates):
        k = i % topics
        value = encode(TopicType.JSON, {"v": i, "k": k})
        p = k % partitions
        path = f"bench/s{k}"
        pending[p].append(TopicAdded(path, json_type, [], value) if i < topics else ValueSet(path, json_type, value))
        if len(pending[p]) >= batch:
            journals[p].append(pending[p], START_MS + i * SPAN_MS // updates)
            pending[p] = []
    for p, changes in enumerate(pending):
        if changes:
            journals[p].append(changes, START_MS + SPAN_MS)
    for journal in journals:
        journal.roll()
    seconds = time.perf_counter() - started
    size = sum(f.stat().st_size for f in data_dir.glob("journal/*/*") if f.is_file())
    segments = sum(len(j.closed_segments()) for j in journals)
    rate("generate journals", updates, seconds, "updates")
    say(f"  {partitions} partitions, {segments} closed segments, {size / 1e6:,.1f} MB of journal")
    return journals


def export(journals: list[Journal], location: Path) -> None:
    """Step 2: journal -> Parquet."""
    rows = files = 0
    written = 0
    started = time.perf_counter()
    for journal in journals:
        report = Exporter(location, journal.partition).export(journal.closed_segments(), journal.last_sequence)
        rows += report.rows
        files += len(report.files)
        written += sum(os.path.getsize(f) for f in report.files)
        say(f"  partition {journal.partition}: {report.rows:,} rows, {len(report.files)} files, {report.seconds:.1f} s")
    seconds = time.perf_counter() - started
    rate("journal -> parquet", rows, seconds)
    say(f"  {files} files, {written / 1e6:,.1f} MB of Parquet")


def start_spark(driver_memory: str) -> Any:
    """Step 3: the first session of this process."""
    from history.spark import session

    started = time.perf_counter()
    spark = session("local[*]", conf={"spark.driver.memory": driver_memory})
    say(f"spark session start (local[*], driver memory {driver_memory}): {time.perf_counter() - started:.1f} s")
    return spark


def replay_view(history: Any, updates: int) -> None:
    """Step 4: the view replay over every row."""
    started = time.perf_counter()
    result = history.replay_view(VIEW)
    built = time.perf_counter() - started
    say(f"replay_view({VIEW!r}) call (runs the replay and caches it): {built:.1f} s")
    result.write.format("noop").mode("overwrite").save()
    total = time.perf_counter() - started
    say(f"  noop write of the result after the call: {total - built:.1f} s")
    rate("replay view (call + write)", updates, total, "source rows")
    say(f"  {result.count():,} reference topic changes out")
    result.unpersist()


def query_and_stats(history: Any) -> None:
    """Step 5: a one-topic query and per-branch statistics."""
    started = time.perf_counter()
    rows = history.query(SELECTOR).count()
    say(f"query({SELECTOR!r}).count(): {rows:,} rows in {time.perf_counter() - started:.1f} s")
    started = time.perf_counter()
    stats = history.stats(by="branch").collect()
    say(f"stats(by='branch').collect(): {len(stats)} rows in {time.perf_counter() - started:.1f} s")
    for row in stats:
        say(f"  {row.asDict()}")


def cli_exists() -> bool:
    try:
        done = subprocess.run([str(CANOPY), "history", "query", "--help"], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


def cli_query(location: Path, work: Path, master: str) -> None:
    """Step 6: ``canopy history query`` as a user runs it (stdout to a file)."""
    out = work / "cli-query.jsonl"
    command = [str(CANOPY), "history", "query", SELECTOR, "--history-dir", str(location), "--master", master, "--json"]
    started = time.perf_counter()
    with open(out, "wb") as f:
        done = subprocess.run(command, stdout=f, stderr=subprocess.PIPE, timeout=3600)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        say(f"CLI query on {master}: exit {done.returncode} after {seconds:.1f} s\n{done.stderr.decode()[-3000:]}")
        return
    lines = sum(1 for _ in open(out, "rb"))
    say(f"CLI query on {master}: {seconds:.1f} s (whole process), {lines:,} lines, {out.stat().st_size / 1e6:,.1f} MB out")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(20)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@contextlib.contextmanager
def standalone_cluster(work: Path) -> Iterator[str]:
    """A standalone master and one worker on 127.0.0.1 (killed on the way out); yields the master URL."""
    import pyspark

    spark_class = Path(pyspark.__file__).parent / "bin" / "spark-class"
    port, ui, worker_ui = free_port(), free_port(), free_port()
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
    url = f"spark://127.0.0.1:{port}"
    commands = {
        "master": [str(spark_class), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                   "--port", str(port), "--webui-port", str(ui)],
        "worker": [str(spark_class), "org.apache.spark.deploy.worker.Worker", "--webui-port", str(worker_ui),
                   "--work-dir", str(work / "spark-worker"), url],
    }
    processes: list[subprocess.Popen[bytes]] = []
    started = time.perf_counter()
    try:
        for name, command in commands.items():
            with open(work / f"spark-{name}.log", "wb") as log:
                processes.append(subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                                  start_new_session=True))
        deadline = time.monotonic() + 120
        while True:
            with contextlib.suppress(OSError, ValueError):
                with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=2) as answer:
                    if json.load(answer).get("aliveworkers", 0) >= 1:
                        break
            if time.monotonic() > deadline or any(p.poll() is not None for p in processes):
                raise RuntimeError(f"the standalone cluster did not come up: see {work}/spark-*.log")
            time.sleep(0.5)
        say(f"standalone cluster up (master + 1 worker) in {time.perf_counter() - started:.1f} s: {url}")
        yield url
    finally:
        for process in reversed(processes):
            stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--updates", type=int, default=10_000_000)
    parser.add_argument("--topics", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--batch", type=int, default=1_000, help="changes per Journal.append")
    parser.add_argument("--segment-mb", type=int, default=64, help="journal segment size")
    parser.add_argument("--dir", help="where the temporary data directory goes (default: the system's temp)")
    parser.add_argument("--driver-memory", default="4g")
    parser.add_argument("--standalone", action="store_true", help="also run the CLI query on a standalone cluster")
    parser.add_argument("--keep", action="store_true", help="keep the data directory")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="canopy-history-bench-", dir=args.dir))
    location = work / "history"
    say(f"data in {work}; {args.updates:,} updates, {min(args.topics, args.updates):,} topics, "
        f"{args.partitions} partitions, {args.batch:,} changes per append")
    say(f"load average at start: {os.getloadavg()[0]:.2f} ({os.cpu_count()} cores)")
    try:
        journals = generate(work / "data", args.updates, args.topics, args.partitions, args.batch, args.segment_mb)
        export(journals, location)
        for journal in journals:
            journal.close()
        spark = start_spark(args.driver_memory)
        from history.jobs import History

        history = History(spark, location)
        replay_view(history, args.updates)
        query_and_stats(history)
        spark.stop()
        if not cli_exists():
            say("CLI query: skipped (`canopy history query --help` does not work yet)")
            return
        cli_query(location, work, "local[*]")
        if args.standalone:
            with standalone_cluster(work) as url:
                cli_query(location, work, url)
    finally:
        say(f"load average at the end: {os.getloadavg()[0]:.2f}")
        if args.keep:
            say(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
