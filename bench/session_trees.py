"""Session trees: re-evaluation after a table change, with many connected sessions.

Starts a real ``canopy serve``, creates 10 branches of 10 topics
(``backend/tier<g>/item<i>``) and a branch mapping table that shows tier
``g``'s branch at ``market/`` to sessions with ``TIER is 'g'``. Then it
connects ``--sessions`` anonymous WebSocket sessions (10 property groups),
each subscribed to ``?market//`` (10 topics each), and replaces the table
with one that shifts every group to the next tier's branch. Printed:

* the time the gateway spent re-evaluating every session (measured inside
  the gateway around the regroup);
* the time from the ``put_table`` call until every session has received all
  its new values (10 unsubscriptions and 10 subscriptions each), as the
  clients see it;
* the same for a table change that no session's resolution depends on
  (a table no session matches), as the floor.

    .venv/bin/python bench/session_trees.py [--sessions 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import ADMIN, start_server, stop_server  # noqa: E402
from peers import free_port  # noqa: E402

import canopy  # noqa: E402

GROUPS, ITEMS = 10, 10
ADMIN_PASSWORD = ADMIN[1]


def table(shift: int) -> list[tuple[str, str]]:
    return [(f"TIER is '{g}'", f"backend/tier{(g + shift) % GROUPS}") for g in range(GROUPS)]


class Watcher:
    """Counts, per session, the subscribed events that show the expected tier."""

    def __init__(self) -> None:
        self.want = 0
        self.done = 0
        self.event = asyncio.Event()

    def reset(self, want: int) -> None:
        self.want, self.done = want, 0
        self.event.clear()

    def hit(self) -> None:
        self.done += 1
        if self.done >= self.want:
            self.event.set()


async def run(url: str, data_dir: str, sessions: int) -> dict[str, float]:
    import ray

    async with canopy.connect(url, "admin", ADMIN_PASSWORD) as admin:
        for g in range(GROUPS):
            await asyncio.gather(*(admin.topics.add_and_set(f"backend/tier{g}/item{i}", g) for i in range(ITEMS)))
        await admin.session_trees.put_table("market", table(0))

        watcher = Watcher()
        expected_tier: dict[int, int] = {}
        clients: list[Any] = []
        readers: list[asyncio.Task[None]] = []

        async def join(n: int) -> None:
            group = n % GROUPS
            session = await canopy.connect(url, properties={"TIER": str(group)}, timeout=120)
            clients.append(session)
            sub = await session.topics.subscribe("?market//")

            async def read() -> None:
                async for event in sub:
                    if event.kind == "subscribed" and event.value == expected_tier.get(group, group):
                        watcher.hit()

            readers.append(asyncio.ensure_future(read()))

        started = time.perf_counter()
        watcher.reset(sessions * ITEMS)
        for start in range(0, sessions, 200):
            await asyncio.gather(*(join(n) for n in range(start, min(start + 200, sessions))))
        await asyncio.wait_for(watcher.event.wait(), 600)
        connect_s = time.perf_counter() - started

        info = json.loads((Path(data_dir) / "server.json").read_text())
        ray.init(address=info["ray_address"], namespace="canopy", logging_level="ERROR", log_to_driver=False)
        trees_actor = ray.get_actor("session-trees")

        results: dict[str, float] = {"connect_and_subscribe_s": connect_s}
        for shift in (1, 2):
            for g in range(GROUPS):
                expected_tier[g] = (g + shift) % GROUPS
            watcher.reset(sessions * ITEMS)
            started = time.perf_counter()
            await admin.session_trees.put_table("market", table(shift))
            put_s = time.perf_counter() - started
            await asyncio.wait_for(watcher.event.wait(), 600)
            results[f"change{shift}_end_to_end_s"] = time.perf_counter() - started
            results[f"change{shift}_put_s"] = put_s
            results[f"change{shift}_gateway_s"] = ray.get(trees_actor.reevaluation_seconds.remote())

        started = time.perf_counter()
        await admin.session_trees.put_table("elsewhere", [("TIER is 'nobody'", "nowhere")])
        results["unrelated_put_s"] = time.perf_counter() - started
        results["unrelated_gateway_s"] = ray.get(trees_actor.reevaluation_seconds.remote())

        for task in readers:
            task.cancel()
        for start in range(0, len(clients), 500):
            await asyncio.gather(*(c.close() for c in clients[start : start + 500]))
        ray.shutdown()
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=10_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="canopy-trees-bench-") as data:
        port = free_port()
        # every session comes from 127.0.0.1: lift the per-address connection limit (1,000) above them
        proc = start_server(data, port, ["--queue-limit", "100000", "--max-connections-per-address",
                                         str(args.sessions + 10)])
        try:
            results = asyncio.run(run(f"ws://127.0.0.1:{port}", data, args.sessions))
        finally:
            stop_server(proc)
    n = args.sessions
    print(f"session trees: {n:,} WebSocket sessions in {GROUPS} property groups, each subscribed to "
          f"?market// ({ITEMS} topics, so {n * ITEMS:,} views)")
    print(f"  connect + subscribe all sessions            {results['connect_and_subscribe_s']:8.2f} s")
    for shift in (1, 2):
        print(f"  table change {shift}: gateway re-evaluation        {results[f'change{shift}_gateway_s'] * 1000:8.1f} ms")
        print(f"  table change {shift}: put_table returned after     {results[f'change{shift}_put_s'] * 1000:8.1f} ms")
        print(f"  table change {shift}: every session has new data   {results[f'change{shift}_end_to_end_s'] * 1000:8.1f} ms")
    print(f"  unrelated table (baseline): gateway            {results['unrelated_gateway_s'] * 1000:8.1f} ms")
    print(f"  unrelated table (baseline): put_table           {results['unrelated_put_s'] * 1000:8.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
