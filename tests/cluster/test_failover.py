"""A real multi-node cluster: `canopy serve --local-nodes 3` (three Ray nodes on
this machine, each with its own raylet, workers, data directory and gateway),
nodes crashed by SIGKILL of their raylet and every worker process it started.

What was acknowledged is checked against what is read back afterwards
(:mod:`tests.checking`), never by eye.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.checking import Workload, check
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, Server, cli
from tests.e2e.test_supervision import _descendants

FAILOVER = 90.0  # seconds: Ray declares a node dead in ~5 s here; two busy cores make the rest slow


@pytest.fixture
def cluster(tmp_path: Path) -> Iterator[Server]:
    srv = Server(tmp_path / "data", "--local-nodes", "3", "--partitions", "4", own_session=True)
    try:
        yield srv.wait_ready(180)
    finally:
        code = srv.stop()
    assert code == 0, srv.output


def status(srv: Server) -> dict[str, Any]:
    result = cli("cluster", "status", "--json", url=srv.url)
    assert result.returncode in (0, 2), result.stderr
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def crash_node(srv: Server, name: str) -> None:
    """SIGKILL the node's raylet and every process it started (its workers: the actors on it)."""
    info = json.loads((srv.data_dir / "server.json").read_text())
    (node,) = [n for n in info["local_nodes"] if n["name"] == name]
    raylet = node["raylet_pid"]
    for pid in [raylet, *_descendants(raylet)]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    wait_for(lambda: not os.path.exists(f"/proc/{raylet}") or _zombie(raylet), 10, "the raylet to die")


def _zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def healthy_without(name: str) -> Any:
    def check_status(srv: Server) -> Any:
        now = status(srv)
        parts = now["partitions"]
        ok = now["healthy"] and all(name not in (p["primary"], p["backup"]) for p in parts) and all(
            p["backup"] is not None for p in parts)
        return now if ok else False

    return check_status


def test_every_partition_has_a_primary_and_a_backup_on_different_nodes(cluster: Server) -> None:
    now = wait_for(lambda: (s := status(cluster))["healthy"] and s, 60, "a healthy cluster")
    assert sorted(n["name"] for n in now["nodes"] if n["alive"]) == ["node-0", "node-1", "node-2"]
    assert len(now["partitions"]) == 4
    for p in now["partitions"]:
        assert p["backup"] is not None and p["backup"] != p["primary"], p
    primaries = sorted(p["primary"] for p in now["partitions"])
    assert len(set(primaries)) >= 2, primaries  # spread, not all on one node
    assert sorted(g["node"] for g in now["gateways"]) == ["node-0", "node-1", "node-2"]
    text = cli("cluster", "status", url=cluster.url)
    assert text.returncode == 0 and "node-2" in text.stdout and "healthy" in text.stdout, text


async def test_a_crashed_node_loses_nothing_acknowledged(cluster: Server) -> None:
    """Publishers and subscribers on node-0's gateway; node-1 (primaries and backups
    of some partitions, a gateway) is crashed while they write."""
    wait_for(lambda: status(cluster)["healthy"], 60, "a healthy cluster")
    work = Workload([cluster.url], ADMIN, publishers=2, topics=12, subscribers=2)
    await work.start()
    try:
        await asyncio.sleep(3)
        await asyncio.get_running_loop().run_in_executor(None, crash_node, cluster, "node-1")
        after = await asyncio.get_running_loop().run_in_executor(
            None, lambda: wait_for(lambda: healthy_without("node-1")(cluster), FAILOVER,
                                   "every partition on node-0 and node-2, with a backup"))
        await asyncio.sleep(3)
        await work.stop()
        await work.read_final()
    finally:
        await work.close()
    report = check(work.history)
    print(f"[cluster] node-1 crashed: {report}; then {after['partitions']}")
    assert report.valid, report
    assert report.acknowledged > 100, report
    assert not work.ended, work.ended
    assert any("took over" in line for line in cluster.lines), cluster.output
    assert not any(n["alive"] for n in after["nodes"] if n["name"] == "node-1")


def test_the_pid_of_a_node_is_recorded(cluster: Server) -> None:
    info = json.loads((cluster.data_dir / "server.json").read_text())
    names = sorted(n["name"] for n in info["local_nodes"])
    assert names == ["node-0", "node-1", "node-2"]
    assert all(os.path.exists(f"/proc/{n['raylet_pid']}") for n in info["local_nodes"])
    assert os.path.isdir(cluster.data_dir / "nodes" / "node-1")

