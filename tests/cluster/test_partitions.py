"""Network partitions: `canopy serve --local-nodes 3 --node-namespaces` puts each simulated node in a
network namespace of its own, and `canopy cluster partition` cuts one off the others' network.

Publishers and subscribers on both sides run the checker (:mod:`tests.checking`): on the majority
side (node-0 and node-2's gateways) and on the minority side (node-1's gateway, which clients
still reach, as they would a cut-off machine). Expected: the cut-off node acknowledges nothing it
cannot replicate (its primaries' backups are across the cut), the majority side fails its
partitions over, the healed node (declared dead by Ray meanwhile) is started again and rejoins as
a backup, and nothing acknowledged on either side is lost, arrives twice or out of order. Then a
one-way cut (node-2 sends nothing) does the same. Then a delay instead of a cut (node-1's traffic
with the other nodes 100 ms late both ways for 8 s): writes through a surviving gateway (node-0's)
wait for the delayed replication, and nothing is lost or reordered.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import canopy
from tests.checking import Workload, check, check_journals, finish, progressed
from tests.cluster.test_failover import FAILOVER, gateway_url
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, Server, cli

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None,
    reason="NETWORK PARTITIONS NEED ROOT AND iproute2 + nftables (apt-get install iproute2 nftables): "
           "the simulated nodes live in network namespaces")


class Cluster:
    """The cluster's gateways on the nodes' own addresses (serve's URL on 127.0.0.1 is not one)."""

    def __init__(self, srv: Server) -> None:
        self.srv = srv
        self.urls: list[str] = []

    def status(self) -> dict[str, Any]:
        if not self.urls:  # serve printed them
            line = next(line for line in self.srv.lines if line.startswith("canopy serving "))
            self.urls = [u.strip(",") for u in line.split() if u.startswith("ws://")]
        result = cli("cluster", "status", "--json", url=",".join(self.urls))
        assert result.returncode in (0, 2), result.stderr
        answer: dict[str, Any] = json.loads(result.stdout)
        self.urls = [g["url"] for g in answer["gateways"] if g.get("url") and not g.get("lost")] or self.urls
        return answer

    def cli(self, *args: str) -> Any:
        return cli("cluster", *args, url=",".join(self.urls))


def holds(now: dict[str, Any], node: str) -> bool:
    return any(node in (p["primary"], p["backup"]) for p in now["partitions"])


def rejoined(cluster: Cluster, node: str, after: int) -> Any:
    """The cluster healthy and balanced with ``node`` holding partitions again, once serve said
    (its ``after``-th such line) that it started the node again."""
    def check_() -> Any:
        restarted = sum(f"{node} was declared dead while cut off" in line for line in cluster.srv.lines)
        s = cluster.status()
        return s if restarted > after and s["healthy"] and s["balanced"] and holds(s, node) else False
    return check_


async def write_stalls(url: str, until: asyncio.Event, writes: list[tuple[float, float]]) -> None:
    """One write at a time through the gateway at ``url``, round topics of every partition, until
    ``until`` is set: (when it was sent, seconds until acknowledged) of each, into ``writes``."""
    async with canopy.connect([url], *ADMIN, reconnect_timeout=30) as session:
        paths = [f"probe/t{k}" for k in range(8)]
        for path in paths:
            await session.topics.add(path, "INT64", {"CONFLATION": "off"})
        while not until.is_set():
            sent = time.monotonic()
            await session.topics.set(paths[len(writes) % len(paths)], len(writes))
            writes.append((sent, time.monotonic() - sent))


async def test_a_node_cut_off_acknowledges_nothing_alone_and_rejoins(tmp_path: Path) -> None:
    loop = asyncio.get_running_loop()
    srv = Server(tmp_path / "data", "--local-nodes", "3", "--node-namespaces", "--partitions", "4",
                 "--health-check-period-ms", "400", "--health-check-failures", "4", own_session=True)
    works: list[Workload] = []
    try:
        srv.wait_ready(180)
        cluster = Cluster(srv)
        now = wait_for(lambda: (s := cluster.status())["healthy"] and s, 60, "a healthy cluster")
        assert holds(now, "node-1") and all(g["url"].startswith("ws://10.213.") for g in now["gateways"]), now
        majority = [gateway_url(now, "node-0"), gateway_url(now, "node-2")]
        minority = [gateway_url(now, "node-1")]
        works = [Workload(majority, ADMIN, publishers=2, topics=12, subscribers=2, branch="major"),
                 Workload(minority, ADMIN, publishers=1, topics=12, subscribers=1, branch="minor")]
        for work in works:
            await work.start()
        await progressed(*works)

        # both ways: node-1 (primaries and backups) cut off from node-0 and node-2 for 10 s
        asked = cli("cluster", "partition", "node-1", "--seconds", "10", url=majority[0])
        assert asked.returncode == 0 and "being cut off from every other node" in asked.stdout, asked
        cut_at = time.monotonic()
        failed_over = await loop.run_in_executor(None, lambda: wait_for(
            lambda: (s := cluster.status())["healthy"] and not holds(s, "node-1") and s, FAILOVER,
            "node-1's partitions failed over to the majority side"))
        failover_s = time.monotonic() - cut_at
        assert all(p["epoch"] > 1 for p in failed_over["partitions"] if p["failovers"]), failed_over
        await progressed(works[0])  # the majority side acknowledges on
        healed = await loop.run_in_executor(None, lambda: wait_for(
            lambda: next((t for t, line in srv.timed_lines if "partition healed: node-1" in line), None), 60,
            "the heal"))
        back = await loop.run_in_executor(None, lambda: wait_for(
            rejoined(cluster, "node-1", 0), FAILOVER, "node-1 started again, holding partitions"))
        both_ways_s = time.monotonic() - healed
        await progressed(*works, timeout=FAILOVER)

        # one way: node-2 sends nothing to the other nodes for 8 s (it still hears them)
        asked = cluster.cli("partition", "node-2", "--one-way", "out", "--seconds", "8")
        assert asked.returncode == 0 and "what it sends only" in asked.stdout, asked
        await loop.run_in_executor(None, lambda: wait_for(
            lambda: next((t for t, line in srv.timed_lines if "partition healed: node-2" in line), None), 60,
            "the one-way cut's heal"))
        healed = time.monotonic()
        await loop.run_in_executor(None, lambda: wait_for(
            lambda: (s := cluster.status())["healthy"] and s["balanced"] and holds(s, "node-2") and all(
                p["backup"] for p in s["partitions"]) and s, FAILOVER * 2, "node-2 back after the one-way cut"))
        one_way_s = time.monotonic() - healed
        await progressed(*works, timeout=FAILOVER)

        # a delay, not a cut: node-1's traffic with node-0 and node-2 100 ms late both ways for 8 s
        # (200 ms would pass the health checks' 400 ms timeout: Ray would declare node-1 dead)
        delay_phase = time.monotonic()
        probe_done = asyncio.Event()
        writes: list[tuple[float, float]] = []
        probe = asyncio.ensure_future(write_stalls(majority[0], probe_done, writes))
        await loop.run_in_executor(None, lambda: wait_for(
            lambda: len(writes) >= 20 or probe.done(), 30, "a baseline of the probe's writes"))
        epochs = {p["partition"]: p["epoch"] for p in cluster.status()["partitions"]}
        asked = cluster.cli("partition", "node-1", "--delay-ms", "100", "--seconds", "8")
        assert asked.returncode == 0 and "being delayed by 100 ms" in asked.stdout, asked
        delay_asked = time.monotonic()
        delay_made = await loop.run_in_executor(None, lambda: wait_for(
            lambda: next((t for t, line in srv.timed_lines if "network delay: node-1 delayed by 100 ms" in line), None),
            30, "serve to make the delay"))
        await progressed(*works, writes=5, timeout=FAILOVER)  # late, not stopped
        delay_removed, delay_said = await loop.run_in_executor(None, lambda: wait_for(
            lambda: next(((t, line) for t, line in srv.timed_lines if "network delay removed: node-1" in line), None),
            60, "the delay's removal"))
        probe_done.set()
        await probe
        during = [s for t, s in writes if delay_made < t < delay_removed]
        before = [s for t, s in writes if t < delay_asked]
        after_delay = await loop.run_in_executor(None, lambda: wait_for(
            lambda: (s := cluster.status())["healthy"] and s["balanced"] and holds(s, "node-1") and s, FAILOVER * 2,
            "the cluster whole after the delay"))
        failovers = sum(p["epoch"] != epochs.get(p["partition"]) for p in after_delay["partitions"])
        await progressed(*works, timeout=FAILOVER)
        delay_phase_s = time.monotonic() - delay_phase
        for work, urls in zip(works, (majority, minority)):
            await finish(work, urls=urls + [u for u in majority if u not in urls])
    finally:
        for work in works:
            await work.close()
        code = srv.stop()
    reports = [check(work.history) for work in works]
    print(f"[cluster] node-1 cut off both ways for 10 s: its partitions failed over {failover_s:.1f} s after the "
          f"cut; healthy with node-1 back {both_ways_s:.1f} s after healing ({back['partitions']}); node-2 cut "
          f"off one way (sends nothing) for 8 s: healthy {one_way_s:.1f} s after healing; majority side: "
          f"{reports[0]}; minority side: {reports[1]}")
    print(f"[cluster] node-1 delayed 100 ms both ways for 8 s: {len(during)} probe writes through node-0's gateway, "
          f"the longest stall {max(during, default=0):.3f} s (before: {max(before, default=0):.3f} s over "
          f"{len(before)}); {failovers} partitions changed epoch; the phase took {delay_phase_s:.1f} s; serve: "
          f"{delay_said.split('canopy: ')[-1]}")
    # every partition has a replica on node-1 (the head holds none): each write waits for a delayed round trip
    assert during and min(during) >= 0.2, (min(during, default=None), len(during))
    for report in reports:
        assert report.valid, report
    assert reports[0].acknowledged > 100 and not works[0].ended, (reports[0], works[0].ended)
    assert code == 0, srv.output
    journals = check_journals(srv.data_dir)
    print(f"[cluster] journals after the cuts: {journals}")
    assert journals.valid, f"acknowledged in two primaries of one epoch: {journals}"
    assert journals.compared > 0, journals
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert not [ns for ns in listed.split() if ns.startswith("cnp")], f"serve left namespaces: {listed}"
