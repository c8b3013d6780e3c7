"""Recovery figures: a restart with many persistent topics, and a partition crash.

1. ``canopy serve`` (one partition) gets ``--topics`` persistent STRING topics
   of ~50-byte values, is stopped cleanly and started again on the same data
   directory: how long until it serves, and until a fetch returns them all.
2. The PartitionActor's process is killed (SIGKILL) with those topics in it:
   how long until a ``set`` succeeds again (Ray restarts it; it recovers from
   its snapshot and journal; the gateway's link reconnects).
3. The same again after the restart, from the journal alone.

With ``--local-nodes N`` the same runs on N simulated nodes (``--partitions 4``,
every partition on two nodes): the restart is timed until it serves, until a
fetch returns every topic, and until ``cluster_status`` is healthy (every backup
primed and caught up); the partition crashes are left out.

    .venv/bin/python bench/recovery.py [--topics 100000] [--local-nodes 3]
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


async def until_healthy(url: str, started: float) -> float:
    async with canopy.connect(url, *broker.ADMIN) as s:
        while not (await s.server.cluster_status())["healthy"]:
            await asyncio.sleep(0.2)
    return time.perf_counter() - started


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
    parser.add_argument("--local-nodes", type=int, default=1)
    args = parser.parse_args()
    cluster = args.local_nodes > 1
    with tempfile.TemporaryDirectory(prefix="canopy-recovery-") as data:
        port = peers.free_port()
        url = f"ws://127.0.0.1:{port}"
        serve = ["--partitions", "4", "--local-nodes", str(args.local_nodes)] if cluster else ["--partitions", "1"]
        while cluster and any(peers.free_port() == port + k for k in range(1, args.local_nodes)):
            port = peers.free_port()
            url = f"ws://127.0.0.1:{port}"
        proc = broker.start_server(data, port, serve)
        crash_1 = crash_2 = healthy = float("nan")
        try:
            filled = asyncio.run(fill(url, args.topics))
            if not cluster:
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
            if cluster:
                healthy = asyncio.run(until_healthy(url, started))
            else:
                crash_2 = asyncio.run(time_partition_crash(url, proc.pid))
        finally:
            broker.stop_server(proc)
        journal = sum(f.stat().st_size for d in Path(data).rglob("journal") for f in d.rglob("*") if f.is_file())
    where = (f"{args.local_nodes} simulated nodes, 4 partitions, each on 2 nodes" if cluster else "1 partition")
    print(f"\n{args.topics:,} persistent STRING topics (~50-byte values), {where}:")
    print(f"  written in {filled:.1f} s ({args.topics / filled:,.0f} topics/s); journal + snapshots {journal / 1e6:.1f} MB")
    if not cluster:
        print(f"  partition killed (SIGKILL), a set succeeds again after {crash_1:.2f} s")
    print(f"  clean stop, then canopy serve serving after {serving:.1f} s; fetch returns all {found:,} "
          f"after {all_back:.1f} s")
    if cluster:
        print(f"  healthy (every backup primed and caught up) after {healthy:.1f} s")
    else:
        print(f"  partition killed again after the restart: a set succeeds after {crash_2:.2f} s")
    return 0 if found == args.topics else 1


if __name__ == "__main__":
    sys.exit(main())
