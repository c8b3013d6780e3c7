"""Journal cost: append per batch under each fsync policy; snapshot and recovery of 100,000 topics.

Appends batches of 1, 10 and 100 value changes (~50-byte CBOR strings) to a
:class:`~replication.journal.Journal` on this machine's disk, under ``always``,
``interval:100`` and ``never``. Baselines in the same run: applying the same
batch to a :class:`~topics.store.TopicStore` (what the partition spends anyway)
and the named peer SQLite (WAL mode, one transaction per batch, with
``synchronous`` FULL / NORMAL / OFF as the counterparts of the three policies).
Under ``interval`` a thread calls ``tick`` every 10 ms, as the partition will.

Then: ``TopicStore.state()`` and ``write_snapshot`` of 100,000 topics,
``recover()`` + ``load()`` of that snapshot, and ``recover()`` + ``replay()``
of the same 100,000 topics from segments alone; the baseline is building the
store through ``TopicStore.apply``.

    .venv/bin/python bench/journal.py [--topics 100000] [--seconds 1.5] [--dir /path/on/the/data/disk]
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import cbor2  # noqa: E402

from replication.journal import FsyncPolicy, Journal  # noqa: E402
from topics.changes import Change  # noqa: E402
from topics.protocol import AddTopic, Operation, SetValue  # noqa: E402
from topics.store import TopicStore  # noqa: E402

POLICIES = ("always", "interval:100", "never")
SIZES = (1, 10, 100)
SQLITE_SYNC = {"always": "FULL", "interval:100": "NORMAL", "never": "OFF"}


def value(i: int) -> bytes:
    return bytes(cbor2.dumps(f"v{i:08d}-" + "x" * 38))  # 50 bytes


def timed(seconds: float, max_batches: int, run: Callable[[int], object]) -> list[float]:
    """Call ``run(i)`` until ``seconds`` passed (at least 20 times); the µs each call took."""
    samples: list[float] = []
    deadline = time.perf_counter() + seconds
    i = 0
    while i < max_batches and (i < 20 or time.perf_counter() < deadline):
        started = time.perf_counter_ns()
        run(i)
        samples.append((time.perf_counter_ns() - started) / 1000)
        i += 1
    return samples


def summary(samples: list[float], size: int) -> str:
    ordered = sorted(samples)
    p50 = statistics.median(ordered)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{p50:9.1f} {p99:9.1f} {ordered[-1]:9.0f} {statistics.fmean(ordered) / size:10.2f} {len(samples):8d}"


def ticks(journal: Journal, stop: threading.Event) -> None:
    while not stop.wait(0.01):
        journal.tick(time.time_ns() // 1_000_000)


def append_costs(base: Path, seconds: float) -> None:
    topics = [f"bench/{i}" for i in range(1000)]
    print("append per batch (µs): p50, p99, max, mean per change, batches")
    print(f"{'':48} {'p50':>9} {'p99':>9} {'max':>9} {'per chg':>10} {'batches':>8}")
    for size in SIZES:
        store = TopicStore(clock=lambda: 0, record_changes=True)
        store.apply("bench", [AddTopic(p, "STRING") for p in topics])
        store.drain_changes()

        def ops(i: int) -> list[Operation]:
            return [SetValue(topics[(i * size + k) % 1000], value(i * size + k), False) for k in range(size)]

        batches = [ops(i) for i in range(200)]
        samples = timed(seconds / 2, 100_000, lambda i: (store.apply("bench", batches[i % 200]), store.drain_changes()))
        print(f"  batch {size:3d}: {'store.apply (baseline)':<36} {summary(samples, size)}")
        store.apply("bench", batches[0])
        changes: list[list[Change]] = []
        for i in range(200):
            store.apply("bench", batches[i])
            changes.append(store.drain_changes())
        for policy in POLICIES:
            with tempfile.TemporaryDirectory(dir=base) as directory:
                journal = Journal(directory, policy=FsyncPolicy.parse(policy))
                journal.recover()
                stop = threading.Event()
                timer = threading.Thread(target=ticks, args=(journal, stop))
                timer.start()  # as the partition will: the interval's fsyncs on another thread
                samples = timed(seconds, 200_000,
                                lambda i: journal.append(changes[i % 200], time.time_ns() // 1_000_000))
                stop.set()
                timer.join()
                journal.close()
            print(f"  batch {size:3d}: {'journal ' + policy:<36} {summary(samples, size)}")
        for policy in POLICIES:
            with tempfile.TemporaryDirectory(dir=base) as directory:
                db = sqlite3.connect(Path(directory) / "peer.db", isolation_level=None)
                db.execute("PRAGMA journal_mode=WAL")
                db.execute(f"PRAGMA synchronous={SQLITE_SYNC[policy]}")
                db.execute("CREATE TABLE journal (sequence INTEGER PRIMARY KEY, timestamp INTEGER, path TEXT, "
                           "operation TEXT, type TEXT, value BLOB)")
                sequence = [0]

                def insert(i: int) -> None:
                    rows = []
                    now = time.time_ns() // 1_000_000
                    for change in changes[i % 200]:
                        sequence[0] += 1
                        rows.append((sequence[0], now, change.path, "set", "STRING", change.value))  # type: ignore[union-attr]
                    db.execute("BEGIN")
                    db.executemany("INSERT INTO journal VALUES (?, ?, ?, ?, ?, ?)", rows)
                    db.execute("COMMIT")

                samples = timed(seconds, 200_000, insert)
                db.close()
            label = f"sqlite WAL synchronous={SQLITE_SYNC[policy]} (peer)"
            print(f"  batch {size:3d}: {label:<36} {summary(samples, size)}")


def snapshot_costs(base: Path, n: int) -> None:
    print(f"\nsnapshot and recovery, {n:,} STRING topics with 50-byte values (s)")
    ops: list[Operation] = [SetValue(f"bench/{i // 1000}/{i}", value(i), False, None, True) for i in range(n)]
    started = time.perf_counter()
    store = TopicStore(record_changes=True)
    store.apply("bench", ops)
    built = time.perf_counter() - started
    changes = store.drain_changes()
    print(f"  build the store with apply (baseline)         {built:7.3f}")
    with tempfile.TemporaryDirectory(dir=base) as directory:
        journal = Journal(directory, policy=FsyncPolicy.parse("always"))
        journal.recover()
        started = time.perf_counter()
        for i in range(0, n, 1000):
            journal.append(changes[i:i + 1000], 0)
        print(f"  append {n:,} changes in batches of 1,000       {time.perf_counter() - started:7.3f}")
        started = time.perf_counter()
        states = store.state()
        taken = time.perf_counter() - started
        started = time.perf_counter()
        path = journal.write_snapshot(states, journal.last_sequence)
        written = time.perf_counter() - started
        journal.close()
        print(f"  store.state()                                 {taken:7.3f}")
        print(f"  write_snapshot (fsync, rename)                {written:7.3f}   {path.stat().st_size / 1e6:.1f} MB")
        del states
        started = time.perf_counter()
        journal = Journal(directory)
        recovery = journal.recover()
        read = time.perf_counter() - started
        journal.close()
        started = time.perf_counter()
        restored = TopicStore()
        restored.load(recovery.states)
        loaded = time.perf_counter() - started
        assert len(restored.tree) == n and recovery.changes == []
        print(f"  recover() of the snapshot                     {read:7.3f}")
        print(f"  load() into a fresh store                     {loaded:7.3f}   snapshot restart {read + loaded:.3f}")
    with tempfile.TemporaryDirectory(dir=base) as directory:
        journal = Journal(directory, policy=FsyncPolicy.parse("never"))
        journal.recover()
        for i in range(0, n, 1000):
            journal.append(changes[i:i + 1000], 0)
        journal.close()
        started = time.perf_counter()
        journal = Journal(directory)
        recovery = journal.recover()
        read = time.perf_counter() - started
        journal.close()
        started = time.perf_counter()
        restored = TopicStore()
        skipped = restored.replay(recovery.changes)
        replayed = time.perf_counter() - started
        assert len(restored.tree) == n and skipped == 0
        print(f"  recover() of {n:,} changes from segments      {read:7.3f}")
        print(f"  replay() into a fresh store                   {replayed:7.3f}   journal restart {read + replayed:.3f}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--topics", type=int, default=100_000)
    parser.add_argument("--seconds", type=float, default=1.5, help="time per append row")
    parser.add_argument("--dir", default=None, help="where to write (default: the system's temporary directory)")
    args = parser.parse_args()
    base = Path(args.dir or tempfile.gettempdir())
    print(f"journal benchmark in {base}")
    append_costs(base, args.seconds)
    snapshot_costs(base, args.topics)
    return 0


if __name__ == "__main__":
    sys.exit(main())
