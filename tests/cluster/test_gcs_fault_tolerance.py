"""Scenario 7: Ray's head restarts with Redis-backed GCS fault tolerance.

`canopy serve --local-nodes 3 --gcs-redis-address HOST:PORT` against a real
`redis-server` (Debian's), and `canopy cluster restart-gcs`: the GCS process is
killed (SIGKILL) and started again; it reads its tables back from Redis. While
it is down and after, publishers and subscribers go on; afterwards the control
plane works again (a node crash is detected and failed over, a node joins, a
view is made), and the checker finds nothing acknowledged lost.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import canopy
from tests.checking import Workload, check, check_journals, progressed
from actors import processes
from canopy import errors
from tests.cluster.test_failover import (
    FAILOVER,
    crash_node,
    finish,
    gateway_url,
    healthy_without,
    local_node,
    node_cli,
    status,
)
from tests.conftest import free_port, wait_for
from tests.e2e.conftest import ADMIN, Server, cli


def _redis(address: str, *command: str) -> bytes:
    """One command's raw reply (RESP), over a socket of its own."""
    host, _, port = address.rpartition(":")
    frame = f"*{len(command)}\r\n".encode() + b"".join(f"${len(c)}\r\n{c}\r\n".encode() for c in command)
    with socket.create_connection((host, int(port)), timeout=5) as conn:
        conn.sendall(frame)
        return conn.recv(4096)


def keys(address: str) -> int:
    reply = _redis(address, "DBSIZE")
    assert reply.startswith(b":"), reply
    return int(reply[1:].strip())


@pytest.fixture
def redis(tmp_path: Path) -> Iterator[str]:
    """A redis-server of the test's own on a free loopback port, nothing saved to disk."""
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("REDIS-SERVER IS NOT INSTALLED (apt-get install redis-server; .ci/run installs it): "
                    "Ray's GCS fault tolerance keeps its tables there, so scenario 7 cannot run")
    port = free_port()
    log = (tmp_path / "redis.log").open("wb")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path), "--daemonize", "no"], stdout=log, stderr=subprocess.STDOUT)
    address = f"127.0.0.1:{port}"
    try:
        def answers() -> bool:
            try:
                return _redis(address, "PING").startswith(b"+PONG")
            except OSError:
                return proc.poll() is not None  # exited: stop polling, fail below
        wait_for(answers, 20, "redis-server to answer")
        assert proc.poll() is None, (tmp_path / "redis.log").read_text()
        yield address
    finally:
        proc.terminate()
        proc.wait(20)
        log.close()


def healthy_cluster(tmp_path: Path, redis: str) -> tuple[Server, dict[str, Any]]:
    """`canopy serve --local-nodes 3` with its GCS tables in ``redis``, once healthy, and its status
    (stopped again if it never gets there)."""
    srv = Server(tmp_path / "data", "--local-nodes", "3", "--partitions", "4", "--gcs-redis-address", redis,
                 "--health-check-period-ms", "400", "--health-check-failures", "4", own_session=True)
    try:
        srv.wait_ready(180)
        return srv, wait_for(lambda: (s := status(srv))["healthy"] and s, 60, "a healthy cluster")
    except BaseException:
        srv.stop()
        raise


def acknowledged(work: Workload) -> int:
    return sum(len(v) for v in work.history.acknowledged.values())


def test_a_gcs_restart_or_head_kill_is_refused_without_redis(tmp_path: Path) -> None:
    """Checked by the controller before anything is touched; the ``--local-nodes``
    cluster of the other cluster tests has no Redis (see test_node_actions_are_checked)."""
    from actors.node_control import NodeActionError, NodeControl

    for action in ("restart-gcs", "kill-head"):
        for control, words in [
            (NodeControl(3, None, gcs_redis=False), "keeps its tables in memory only"),
            (NodeControl(1, None, gcs_redis=True), "only a cluster started with --local-nodes"),
        ]:
            with pytest.raises(NodeActionError) as refused:
                control.act(action, None, 2.0, False, [])
            assert refused.value.code == "REFUSED" and words in str(refused.value), (action, refused.value)
    control = NodeControl(3, None, gcs_redis=True, gcs_reconnect_timeout=20)
    with pytest.raises(NodeActionError) as bad:
        control.act("restart-gcs", None, 11.0, False, [])
    assert bad.value.code == "INVALID_REQUEST" and "0 to 10 s" in str(bad.value), bad.value
    assert control.act("restart-gcs", None, 3.0, False, [])["seconds"] == 3.0
    with pytest.raises(NodeActionError, match="already asked for"):
        control.act("restart-gcs", None, 3.0, False, [])
    with pytest.raises(NodeActionError, match="already asked for"):  # one outage at a time
        control.act("kill-head", None, 3.0, False, [])
    assert control.take_gcs_restart() == 3.0 and control.take_gcs_restart() is None
    # the head's loss: bounded the same way, and serve is told apart
    control = NodeControl(3, None, gcs_redis=True, gcs_reconnect_timeout=20)
    with pytest.raises(NodeActionError, match="kill head: an outage of 0 to 10 s"):
        control.act("kill-head", None, float("nan"), False, [])
    assert control.act("kill-head", None, 4.0, False, []) == {"node": None, "action": "kill-head", "seconds": 4.0}
    assert control.take_gcs_restart() is None and control.take_head_kill() == 4.0 and control.take_head_kill() is None


async def test_ray_gcs_restarts_from_redis_and_the_cluster_goes_on(tmp_path: Path, redis: str) -> None:
    loop = asyncio.get_running_loop()
    srv, now = healthy_cluster(tmp_path, redis)
    try:
        assert keys(redis) > 0, "Ray's GCS keeps nothing in Redis"
        home = [gateway_url(now, "node-0")]
        work = Workload(home, ADMIN, publishers=2, topics=12, subscribers=2)
        await work.start()
        try:
            async with canopy.connect(home, *ADMIN) as admin:
                await admin.topics.add_and_set("src/x", 1)
                await admin.views.create("mirror", "map ?src// to mirror/<path(1)>")
            await progressed(work)
            asked = node_cli(srv, "restart-gcs", "--seconds", "4")
            assert asked.returncode == 0 and "started again 4 s later" in asked.stdout, (asked.stdout, asked.stderr)

            def said(words: str) -> Any:
                return lambda: any(words in line for line in srv.lines) and acknowledged(work)

            at_kill = await loop.run_in_executor(None, lambda: wait_for(said("killing Ray's GCS"), 30, "the kill"))
            at_back = await loop.run_in_executor(None, lambda: wait_for(said("Ray's GCS is back"), 60, "the GCS"))
            # the data plane needs no GCS: updates were acknowledged while it was down
            assert at_back > at_kill, (at_kill, at_back, srv.output)
            # the control plane works again: a crash is detected and failed over ...
            await loop.run_in_executor(None, crash_node, srv, "node-2")
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: healthy_without("node-2")(srv), FAILOVER, "node-2's partitions failed over"))
            # ... a node joins (Ray registers it, canopy gives it partitions) ...
            added = node_cli(srv, "add-node", "node-3")
            assert added.returncode == 0, (added.stdout, added.stderr)

            def joined() -> Any:
                s = status(srv)
                ok = s["healthy"] and any("node-3" in (p["primary"], p["backup"]) for p in s["partitions"])
                return s if ok else False

            await loop.run_in_executor(None, lambda: wait_for(joined, FAILOVER, "node-3 holding partitions"))
            # ... and the configuration and the views go on
            async with canopy.connect(home, *ADMIN) as admin:
                await admin.topics.set("src/x", 2)
                await admin.views.create("mirror2", "map ?src// to mirror2/<path(1)>")

                async def mirrored() -> bool:
                    return [r.value for r in await admin.topics.fetch(">mirror2/x")] == [2]

                deadline = loop.time() + 60
                while not await mirrored():
                    assert loop.time() < deadline, "the new view never made its reference topic"
                    await asyncio.sleep(0.2)
            await finish(work, urls=home)
        finally:
            await work.close()
        report = check(work.history)
        back = next(line for line in srv.lines if "Ray's GCS is back" in line)
        print(f"[cluster] Ray's GCS restarted from Redis ({at_back - at_kill} writes acknowledged while it was "
              f"down; {back}), then node-2 crashed and node-3 joined: {report}")
        assert report.valid, report
        assert report.acknowledged > 100 and not work.ended, (report, work.ended)
    finally:
        code = srv.stop()
    assert code == 0, srv.output
    assert keys(redis) == 0, "serve left Ray's tables in Redis"


class Acknowledgements:
    """The workload's count of acknowledged writes sampled every 20 ms in a thread of its own:
    the longest time it stood still between two moments (a write stall a client saw)."""

    def __init__(self, work: Workload) -> None:
        self.work = work
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(0.02):
            self.samples.append((time.monotonic(), acknowledged(self.work)))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)

    def longest_stall(self, start: float, end: float) -> float:
        """The longest interval within [start, end] over which the count did not grow."""
        longest, since, last = 0.0, start, None
        for t, n in self.samples:
            if t < start or t > end:
                continue
            if last is not None and n > last:
                longest, since = max(longest, t - since), t
            last = n
        return max(longest, end - since)


async def test_the_head_node_is_lost_and_comes_back(tmp_path: Path, redis: str) -> None:
    """``canopy cluster kill-head``: node-0 (Ray's GCS, the head's raylet and every process on
    it: the controller, the configuration log's writer, a gateway) is killed and started again
    8 s later. No partition lives on it, so the other nodes' gateways go on acknowledging and
    delivering; what needs the controller is refused UNAVAILABLE meanwhile; a worker node
    crashed while the head is down fails over once it is back; the controller comes back on
    the new head and takes the instance over; nothing acknowledged is lost."""
    loop = asyncio.get_running_loop()
    srv, now = healthy_cluster(tmp_path, redis)
    try:
        assert all("node-0" not in (p["primary"], p["backup"]) for p in now["partitions"]), now["partitions"]
        workers = [gateway_url(now, "node-1"), gateway_url(now, "node-2")]
        survivor = [workers[0]]
        work = Workload(workers, ADMIN, publishers=2, topics=12, subscribers=2)
        await work.start()
        sampler = Acknowledgements(work)
        try:
            await progressed(work)
            asked = cli("cluster", "kill-head", "--seconds", "8", url=survivor[0])
            assert asked.returncode == 0 and "started again 8 s later" in asked.stdout, (asked.stdout, asked.stderr)

            def said(words: str) -> Any:
                return lambda: next((t for t, line in srv.timed_lines if words in line), None)

            killed_at = await loop.run_in_executor(None, lambda: wait_for(said("killing the head node"), 30, "the kill"))
            # while the head is down: the controller is away, and a request that needs it is refused
            # UNAVAILABLE (polled: until the kill has happened, the controller still answers)
            async with canopy.connect(survivor, *ADMIN, reconnect_timeout=0) as admin:
                deadline, answered = loop.time() + 20, None
                while True:
                    try:
                        answered = await admin.server.cluster_status()
                    except errors.UnavailableError:
                        break
                    assert loop.time() < deadline, f"cluster_status was never refused UNAVAILABLE: {answered}"
                    await asyncio.sleep(0.1)

            async def make_view() -> bool:
                """A configuration change (committed by the log's writer, on the head) is made whole once
                the writer is back, or refused UNAVAILABLE: never half-made, never left unanswered."""
                async with canopy.connect(survivor, *ADMIN, reconnect_timeout=0) as admin:
                    try:
                        await asyncio.wait_for(admin.views.create("during", "map ?src// to during/<path(1)>"), 90)
                        return True
                    except errors.UnavailableError:
                        return False

            making = asyncio.ensure_future(make_view())
            # ... the partitions serve on: writes are acknowledged through the surviving gateways; the
            # stall is measured over the outage's first 6 s (of 8), before node-2's crash below
            await progressed(work, timeout=8)
            window = killed_at + 6
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: sampler.samples and sampler.samples[-1][0] > window, 30, "6 s of the outage sampled"))
            stall = sampler.longest_stall(killed_at, window)
            assert not any("the head node is back" in line for line in srv.lines), "the outage ended early"
            # a worker node crashes while the head is down (its raylet and everything under it)
            raylet = local_node(srv, "node-2")["raylet_pid"]
            processes.crash(raylet)
            lately = lambda: srv.lines[-25:]  # noqa: E731
            back_at = await loop.run_in_executor(None, lambda: wait_for(
                said("the head node is back"), 60, "the head to come back", describe=lately))
            await loop.run_in_executor(None, lambda: wait_for(
                said("controller (ControllerActor) is back and serving"), 150, "the controller to take over",
                describe=lately))
            # node-2's partitions fail over once the controller is back, to node-1 with backups on the new head
            after = await loop.run_in_executor(None, lambda: wait_for(
                lambda: healthy_without("node-2")(srv), FAILOVER, "node-2's partitions failed over"))
            healthy_at = time.monotonic()
            assert any(g["node"] == "node-0" and not g.get("lost") for g in after["gateways"]), after["gateways"]
            view_made = await making
            async with canopy.connect(survivor, *ADMIN) as admin:
                views = {v.name for v in await admin.views.list()}
            assert ("during" in views) == view_made, (view_made, views)
            await progressed(work, timeout=FAILOVER)
            await finish(work, urls=survivor)
        finally:
            sampler.stop()
            await work.close()
        report = check(work.history)
        print(f"[cluster] head killed for 8 s (back after {back_at - killed_at:.1f} s): the longest write stall "
              f"through the surviving gateways in its first 6 s was {stall:.2f} s; healthy again {healthy_at - back_at:.1f} s after the "
              f"head was back (node-2 crashed meanwhile, failed over); a view asked for while it was down was "
              f"{'made' if view_made else 'refused UNAVAILABLE'}: {report}")
        assert report.valid, report
        assert report.acknowledged > 100 and not work.ended, (report, work.ended)
        assert stall <= 2.0, f"writes stalled {stall:.2f} s while the head was down"
    finally:
        code = srv.stop()
    assert code == 0, srv.output
    assert keys(redis) == 0, "serve left Ray's tables in Redis"
    journals = check_journals(srv.data_dir)
    print(f"[cluster] journals after the head's loss: {journals}")
    assert journals.valid, f"acknowledged in two primaries of one epoch: {journals}"
    assert journals.compared > 0, journals
