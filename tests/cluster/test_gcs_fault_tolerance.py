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
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import canopy
from tests.checking import Workload, check, progressed
from tests.cluster.test_failover import FAILOVER, crash_node, finish, gateway_url, healthy_without, node_cli, status
from tests.conftest import free_port, wait_for
from tests.e2e.conftest import ADMIN, Server


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


def acknowledged(work: Workload) -> int:
    return sum(len(v) for v in work.history.acknowledged.values())


def test_a_gcs_restart_is_refused_without_redis(tmp_path: Path) -> None:
    """Checked by the controller before anything is touched; the ``--local-nodes``
    cluster of the other cluster tests has no Redis (see test_node_actions_are_checked)."""
    from actors.node_control import NodeActionError, NodeControl

    for control, words in [
        (NodeControl(3, None, gcs_redis=False), "keeps its tables in memory only"),
        (NodeControl(1, None, gcs_redis=True), "only a cluster started with --local-nodes"),
    ]:
        with pytest.raises(NodeActionError) as refused:
            control.act("restart-gcs", None, 2.0, False, [])
        assert refused.value.code == "REFUSED" and words in str(refused.value), refused.value
    control = NodeControl(3, None, gcs_redis=True, gcs_reconnect_timeout=20)
    with pytest.raises(NodeActionError) as bad:
        control.act("restart-gcs", None, 11.0, False, [])
    assert bad.value.code == "INVALID_REQUEST" and "0 to 10 s" in str(bad.value), bad.value
    assert control.act("restart-gcs", None, 3.0, False, [])["seconds"] == 3.0
    with pytest.raises(NodeActionError, match="already asked for"):
        control.act("restart-gcs", None, 3.0, False, [])
    assert control.take_gcs_restart() == 3.0 and control.take_gcs_restart() is None


async def test_ray_gcs_restarts_from_redis_and_the_cluster_goes_on(tmp_path: Path, redis: str) -> None:
    loop = asyncio.get_running_loop()
    srv = Server(tmp_path / "data", "--local-nodes", "3", "--partitions", "4", "--gcs-redis-address", redis,
                 "--health-check-period-ms", "400", "--health-check-failures", "4", own_session=True)
    try:
        srv.wait_ready(180)
        now = wait_for(lambda: (s := status(srv))["healthy"] and s, 60, "a healthy cluster")
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
