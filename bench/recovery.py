"""Recovery figures: a restart with many persistent topics, and a partition crash.

1. ``canopy serve`` (one partition) gets ``--topics`` persistent STRING topics
   of ~50-byte values, is stopped cleanly and started again on the same data
   directory: how long until it serves, and until a fetch returns them all.
2. The PartitionActor's process is killed (SIGKILL) with those topics in it:
   how long until a ``set`` succeeds again (Ray restarts it; it recovers from
   its snapshot and journal; the gateway's link reconnects).
3. The same again after the restart, from the journal alone.

    .venv/bin/python bench/recovery.py [--topics 100000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import broker  # noqa: E402
import peers  # noqa: E402
import profiling  # noqa: E402

import canopy  # noqa: E402


async def fill(url: str, count: int) -> float:
    started = time.perf_counter()
    async with canopy.connect(url, *broker.ADMIN) as s:
        window = []
        for i in range(count):
            window.append(s.topics.add_and_set(f"r/{i // 1000}/{i}", f"value {i:06d} " + "x" * 38))
            if len(window) >= 2000:
                await asyncio.gather(*window)
                window = []
        await asyncio.gather(*window)
    return time.perf_counter() - started


async def count_topics(url: str) -> int:
    async with canopy.connect(url, *broker.ADMIN, reconnect_timeout=0) as s:
        return len(await s.topics.fetch("?r//", with_values=False))


async def time_partition_crash(url: str, serve_pid: int) -> float:
    async with canopy.connect(url, *broker.ADMIN) as s:
        await s.topics.set("r/0/0", "before the crash")
        os.kill(profiling.find_actors(serve_pid)["PartitionActor"], signal.SIGKILL)
        killed = time.perf_counter()
        while True:
            try:
                await s.topics.set("r/0/0", "after the crash")
                return time.perf_counter() - killed
            except canopy.errors.CanopyError:
                await asyncio.sleep(0.05)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--topics", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="canopy-recovery-") as data:
        port = peers.free_port()
        url = f"ws://127.0.0.1:{port}"
        serve = ["--partitions", "1"]
        proc = broker.start_server(data, port, serve)
        try:
            filled = asyncio.run(fill(url, args.topics))
            crash_1 = asyncio.run(time_partition_crash(url, proc.pid))
            assert asyncio.run(count_topics(url)) == args.topics
        finally:
            broker.stop_server(proc)
        started = time.perf_counter()
        proc = broker.start_server(data, port, serve)
        serving = time.perf_counter() - started
        try:
            found = asyncio.run(count_topics(url))
            all_back = time.perf_counter() - started
            crash_2 = asyncio.run(time_partition_crash(url, proc.pid))
        finally:
            broker.stop_server(proc)
        journal = sum(f.stat().st_size for f in (Path(data) / "journal").rglob("*") if f.is_file())
    print(f"\n{args.topics:,} persistent STRING topics (~50-byte values), 1 partition:")
    print(f"  written in {filled:.1f} s ({args.topics / filled:,.0f} topics/s); journal + snapshots {journal / 1e6:.1f} MB")
    print(f"  partition killed (SIGKILL), a set succeeds again after {crash_1:.2f} s")
    print(f"  clean stop, then canopy serve serving after {serving:.1f} s; fetch returns all {found:,} "
          f"after {all_back:.1f} s")
    print(f"  partition killed again after the restart: a set succeeds after {crash_2:.2f} s")
    return 0 if found == args.topics else 1


if __name__ == "__main__":
    sys.exit(main())
