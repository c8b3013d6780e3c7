"""Configuration commit latency: how long a configuration change takes to be
answered, now that it is committed to the replicated configuration log (stored
on a majority of the nodes' SQLite copies) before it is applied.

For each node count (1: the embedded single node; N > 1: ``canopy serve
--local-nodes N``), a client makes ``--changes`` changes of each kind one after
another and the script prints p50/p99 of their round trips:

* security: ``add_principal`` (the controller commits, then pushes to every gateway);
* branch mapping table: ``put_table`` (the session tree actor commits, then every
  gateway re-resolves its sessions);
* view: ``views.create`` of a view over one topic (the evaluator commits, then evaluates).

    .venv/bin/python bench/configuration.py [--nodes 1,3] [--changes 50]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from broker import ADMIN, start_server, stop_server  # noqa: E402
from peers import free_port  # noqa: E402

import canopy  # noqa: E402


def quantiles(samples: list[float]) -> str:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"p50 {statistics.median(ordered) * 1000:6.2f} ms  p99 {p99 * 1000:6.2f} ms"


async def measure(url: str, changes: int) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {"security": [], "table": [], "view": []}
    async with canopy.connect(url, *ADMIN) as s:
        await s.topics.add_and_set("bench-src/x", 1)
        for k in range(changes):
            t = time.perf_counter()
            await s.security.add_principal(f"user{k}", f"password-{k}-xyz", ["CLIENT"])
            out["security"].append(time.perf_counter() - t)
            t = time.perf_counter()
            await s.session_trees.put_table(f"tree{k}/", [("all", "bench-src/")])
            out["table"].append(time.perf_counter() - t)
            t = time.perf_counter()
            await s.views.create(f"view{k}", f"map ?bench-src// to bench-view{k}/<path(1)>")
            out["view"].append(time.perf_counter() - t)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", default="1,3")
    parser.add_argument("--changes", type=int, default=50)
    args = parser.parse_args()
    for nodes in [int(n) for n in args.nodes.split(",")]:
        with tempfile.TemporaryDirectory(prefix="canopy-bench-") as data:
            port = free_port()
            while nodes > 1 and any(free_port() == port + k for k in range(1, nodes)):
                port = free_port()
            proc = start_server(data, port, ["--local-nodes", str(nodes)] if nodes > 1 else [])
            try:
                found = asyncio.run(measure(f"ws://127.0.0.1:{port}", args.changes))
            finally:
                stop_server(proc)
        where = "embedded single node" if nodes == 1 else f"{nodes} simulated nodes (majority {nodes // 2 + 1})"
        for kind, samples in found.items():
            print(f"{where:<34} {kind:<9} {quantiles(samples)}  ({len(samples)} changes)", flush=True)


if __name__ == "__main__":
    main()
