"""Failover time: how long a node crash interrupts writes and deliveries.

A real ``canopy serve --local-nodes 3 --partitions 4`` (three Ray nodes on this
machine). A publisher on node-0's gateway sets 32 INT64 topics every few
milliseconds and a subscriber there receives them. Then the node holding the
primary of some partitions is crashed (``kill_node``: SIGKILL of its raylet and
every process it started) and the script measures, from the moment the raylet
is gone:

* **publish**: until the first acknowledged set, *sent after the crash*, to a
  topic whose primary was on the crashed node;
* **delivery**: until the subscriber receives the first such value;
* **healthy**: until ``cluster_status`` says healthy again (every partition with
  a caught-up backup).

It also counts acknowledged sets whose value is missing at the end (must be 0).
After each run the node is started again (``add_node``) and the cluster is left
to rebalance before the next crash.

    .venv/bin/python bench/failover.py [--runs 3]

Ray declares a simulated node dead after ~5 s of missed health checks here
(canopy serve's ``--local-nodes`` settings); that detection is most of the
figure. Two cores run three nodes, the publisher and the subscriber.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import ADMIN, start_server, stop_server  # noqa: E402
from peers import free_port  # noqa: E402

import canopy  # noqa: E402
from actors import processes  # noqa: E402
from topics.partitioning import partition_of  # noqa: E402

PARTITIONS = 4
TOPICS = [f"failover/t{i}" for i in range(32)]


async def until(check: Any, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = await check()
            if last:
                return last
        except canopy.CanopyError as e:
            last = e
        await asyncio.sleep(0.1)
    raise RuntimeError(f"timed out waiting for {what}; last: {last!r}")


async def one_run(session: Any, data_dir: Path, run: int) -> dict[str, float | int]:
    status = await session.server.cluster_status()
    victim = next(p["primary"] for p in status["partitions"] if p["primary"] != "node-0")
    affected = {t for t in TOPICS if status["partitions"][partition_of(t, PARTITIONS)]["primary"] == victim}
    info = json.loads((data_dir / "server.json").read_text())
    raylet = next(n["raylet_pid"] for n in info["local_nodes"] if n["name"] == victim)

    acked: dict[str, int] = {}
    first_ack: list[float] = []
    first_delivery: list[float] = []
    crashed_at: list[float] = []
    sent_after: dict[str, int] = {}  # topic -> first value sent after the crash

    def on_event(event: Any) -> None:
        if event.path in affected and crashed_at and isinstance(event.value, int):
            if event.value >= sent_after.get(event.path, 1 << 62) and not first_delivery:
                first_delivery.append(time.monotonic())

    subscriber = await canopy.connect(URL, *ADMIN)
    await subscriber.topics.subscribe("?failover//", callback=on_event)
    stop = asyncio.Event()

    async def publish() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            now_crashed = bool(crashed_at)
            sets = []
            for t in TOPICS:
                if now_crashed and t not in sent_after:
                    sent_after[t] = n
                sets.append((t, n, session.topics.set(t, n)))
            for t, value, future in sets:
                try:
                    await future
                    acked[t] = value
                    if t in affected and value >= sent_after.get(t, 1 << 62) and not first_ack:
                        first_ack.append(time.monotonic())
                except canopy.CanopyError:
                    pass
            await asyncio.sleep(0.005)

    publisher = asyncio.ensure_future(publish())
    await asyncio.sleep(2)
    await session.server.kill_node(victim)
    while processes.alive(raylet):
        await asyncio.sleep(0.01)
    crashed_at.append(time.monotonic())
    healthy = await until(lambda: _healthy_without(session, victim), 120, "a healthy cluster")
    healthy_at = time.monotonic()
    await until(lambda: _true(bool(first_ack and first_delivery)), 60, "a write and a delivery to a moved topic")
    stop.set()
    await publisher
    rows = {r.path: r.value for r in await session.topics.fetch("?failover//")}
    lost = sum(1 for t, v in acked.items() if rows.get(t) is None or rows[t] < v)
    await subscriber.close()
    figures = {
        "publish_s": first_ack[0] - crashed_at[0], "delivery_s": first_delivery[0] - crashed_at[0],
        "healthy_s": healthy_at - crashed_at[0], "lost": lost, "affected": len(affected),
    }
    print(f"run {run}: crashed {victim} ({len(affected)} of {len(TOPICS)} topics had their primary there): "
          f"first publish after {figures['publish_s']:.2f} s, first delivery after {figures['delivery_s']:.2f} s, "
          f"healthy after {figures['healthy_s']:.2f} s, lost {lost}; epochs "
          f"{[p['epoch'] for p in healthy['partitions']]}", flush=True)
    await session.server.add_node(victim)
    await until(lambda: _rejoined(session, victim), 120, f"{victim} back and the cluster balanced")
    return figures


async def _true(value: bool) -> bool:
    return value


async def _healthy_without(session: Any, victim: str) -> Any:
    s = await session.server.cluster_status()
    ok = s["healthy"] and all(victim not in (p["primary"], p["backup"]) for p in s["partitions"])
    return s if ok else False


async def _rejoined(session: Any, victim: str) -> bool:
    s = await session.server.cluster_status()
    return bool(s["healthy"] and s["balanced"] and any(victim in (p["primary"], p["backup"]) for p in s["partitions"]))


URL = ""


async def main_async(runs: int) -> None:
    global URL
    port = free_port()
    while any(free_port() == port + k for k in (1, 2)):
        port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        data_dir = Path(tmp) / "data"
        t0 = time.monotonic()
        proc = start_server(str(data_dir), port, ["--local-nodes", "3", "--partitions", str(PARTITIONS)])
        print(f"canopy serve --local-nodes 3 --partitions {PARTITIONS} started in {time.monotonic() - t0:.1f} s",
              flush=True)
        drain = threading.Thread(target=lambda: [None for _ in proc.stdout or []], daemon=True)
        drain.start()  # serve prints every cluster event: never let its pipe fill
        URL = f"ws://127.0.0.1:{port}"
        try:
            session = await canopy.connect(URL, *ADMIN)
            for t in TOPICS:
                await session.topics.add(t, "INT64", {"CONFLATION": "off"})
            await until(lambda: session.server.cluster_status(), 60, "status")
            # node-1 holds partitions once balanced (node-0, the head, holds none while both workers are up)
            await until(lambda: _rejoined(session, "node-1"), 120, "a healthy, balanced cluster")
            results = [await one_run(session, data_dir, k) for k in range(1, runs + 1)]
            await session.close()
        finally:
            stop_server(proc)
    for key, label in (("publish_s", "first publish"), ("delivery_s", "first delivery"), ("healthy_s", "healthy")):
        values = [r[key] for r in results]
        print(f"{label:>15}: median {statistics.median(values):.2f} s, max {max(values):.2f} s over {runs} crashes")
    print(f"{'lost':>15}: {sum(int(r['lost']) for r in results)} acknowledged writes")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main_async(args.runs))


if __name__ == "__main__":
    main()
