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
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import canopy
from canopy import errors
from replication.config_log import ConfigLogStore
from tests.checking import RATE, Workload, check, finish, progressed
from tests.conftest import free_port, wait_for
from tests.e2e.conftest import ADMIN, Server, cli
from actors import processes
from topics.partitioning import partition_of

#: seconds of no updates after which the failover test's policy topic goes
IDLE_S = 15
FAILOVER = 90.0  # seconds: Ray declares a node dead in ~5 s here; two busy cores make the rest slow


def _cluster(where: Path) -> Iterator[Server]:
    srv = Server(where / "data", "--local-nodes", "3", "--partitions", "4", "--history-export-ms", "500",
                 own_session=True)
    try:
        yield srv.wait_ready(180)
    finally:
        code = srv.stop()
    assert code == 0, srv.output


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A 3-node cluster for the tests that crash or pause nodes, one after the other (the crashed
    node rejoins before its test ends; the paused one leaves for good, last): each begins by waiting
    for a healthy cluster, and meets one that went through the faults before it."""
    yield from _cluster(tmp_path_factory.mktemp("faults"))


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[Server]:
    """A 3-node cluster of the test's own."""
    yield from _cluster(tmp_path)


def status(srv: Server) -> dict[str, Any]:
    result = cli("cluster", "status", "--json", url=srv.url)
    assert result.returncode in (0, 2), result.stderr
    answer: dict[str, Any] = json.loads(result.stdout)
    return answer


def node_cli(srv: Server, *args: str) -> Any:
    return cli("cluster", *args, url=srv.url)


def local_node(srv: Server, name: str) -> dict[str, Any]:
    info = json.loads((srv.data_dir / "server.json").read_text())
    (node,) = [n for n in info["local_nodes"] if n["name"] == name]
    return dict(node)


def crash_node(srv: Server, name: str) -> None:
    """``canopy cluster kill-node``: SIGKILL of the node's raylet and every process it started."""
    raylet = local_node(srv, name)["raylet_pid"]
    done = node_cli(srv, "kill-node", name)
    assert done.returncode == 0 and f"pid {raylet}" in done.stdout, (done.stdout, done.stderr)
    wait_for(lambda: not processes.alive(raylet), 10, "the raylet to die")


def gateway_url(now: dict[str, Any], node: str) -> str:
    (url,) = [g["url"] for g in now["gateways"] if g["node"] == node and not g.get("lost")]
    return str(url)


class Readiness:
    """A gateway's ``/readyz`` polled every 50 ms in a thread of its own (as a readiness probe
    would, more often), keeping each change of answer: ``(seconds since start, status, body)``."""

    def __init__(self, gateway: str) -> None:
        self.url = gateway.replace("ws://", "http://") + "/readyz"
        self.seen: list[tuple[float, int, str]] = []
        self._started = time.monotonic()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._stop.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=2) as answer:
                    now = (answer.status, answer.read().decode().strip())
            except urllib.error.HTTPError as e:
                with e:
                    now = (e.code, e.read().decode().strip())
            except OSError as e:
                now = (0, repr(e))
            if not self.seen or self.seen[-1][1:] != now:
                self.seen.append((round(time.monotonic() - self._started, 2), *now))
            self._stop.wait(0.05)

    def unready_then_ready(self, partitions: set[int]) -> Any:
        """The first answer naming unreachable partitions (only some of ``partitions``) and the
        first 200 after it, or False while there are not both."""
        for i, (_, status, body) in enumerate(self.seen):
            named = re.fullmatch(r"not ready: partitions ([\d, ]+) unreachable", body)
            if status == 503 and named:
                unreachable = {int(n) for n in named.group(1).split(", ")}
                assert unreachable <= partitions, (unreachable, partitions, self.seen)
                ready = next((seen for seen in self.seen[i + 1:] if seen[1] == 200), None)
                return (self.seen[i], ready) if ready is not None else False
        return False

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def history_holds(srv: Server, *histories: Any) -> Any:
    """The Parquet history of ``srv`` once it holds every acknowledged write of ``histories``
    (checked for duplicate or missing records first), else False."""
    import pyarrow.parquet as pq

    rows: list[dict[str, Any]] = []
    for f in sorted((srv.data_dir / "history" / "updates").glob("date=*/[!.]*.parquet")):  # as Spark: no .tmp-*
        rows += pq.read_table(f, columns=["partition", "sequence", "path", "op", "value_json"]).to_pylist()
    for partition in {r["partition"] for r in rows}:
        numbers = sorted(r["sequence"] for r in rows if r["partition"] == partition)
        assert numbers == list(range(1, len(numbers) + 1)), f"partition {partition}: duplicates or gaps in the history"
    written: dict[str, list[int]] = {}
    for r in sorted(rows, key=lambda r: (r["partition"], r["sequence"])):
        if r["op"] == "set":
            written.setdefault(r["path"], []).append(json.loads(r["value_json"]))
    for history in histories:
        for topic, values in history.acknowledged.items():
            if not set(values) <= set(written.get(topic, ())):
                return False
            assert set(written[topic]) <= history.sent[topic], f"{topic}: the history holds values never sent"
            assert written[topic] == sorted(written[topic]), f"{topic}: the history's values go backwards"
    return rows


def healthy_without(name: str) -> Any:
    def check_status(srv: Server) -> Any:
        now = status(srv)
        parts = now["partitions"]
        ok = now["healthy"] and all(name not in (p["primary"], p["backup"]) for p in parts) and all(
            p["backup"] is not None for p in parts)
        return now if ok else False

    return check_status


class TestAHealthyCluster:
    """Checks that leave the cluster as they found it share one 3-node cluster (class scope:
    it stops before the tests that crash nodes start clusters of their own), and last the
    killed controller's scenario, which ends by crashing a node."""

    @pytest.fixture(scope="class")
    @classmethod
    def healthy(cls, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
        yield from _cluster(tmp_path_factory.mktemp("healthy"))

    def test_every_partition_has_a_primary_and_a_backup_on_different_nodes(self, healthy: Server) -> None:
        now = wait_for(lambda: (s := status(healthy))["healthy"] and s, 60, "a healthy cluster")
        assert sorted(n["name"] for n in now["nodes"] if n["alive"]) == ["node-0", "node-1", "node-2"]
        assert len(now["partitions"]) == 4
        for p in now["partitions"]:
            assert p["backup"] is not None and p["backup"] != p["primary"], p
        primaries = sorted(p["primary"] for p in now["partitions"])
        assert len(set(primaries)) >= 2, primaries  # spread, not all on one node
        # the head holds no data: with two other nodes alive, no replica is on node-0, Ray's head
        assert [n["name"] for n in now["nodes"] if n["head"]] == ["node-0"], now["nodes"]
        assert all("node-0" not in (p["primary"], p["backup"]) for p in now["partitions"]), now["partitions"]
        assert sorted(g["node"] for g in now["gateways"]) == ["node-0", "node-1", "node-2"]
        log = now["configuration"]
        assert log["log_majority"] == 2 and sorted(log["log_copies"]) == ["node-0", "node-1", "node-2"], log
        assert set(log["log_copies"].values()) == {log["log_committed"]} and log["log_committed"] >= 1, log
        assert now["services"] == {"configuration-log": "node-0", "views": "node-1", "session-trees": "node-1"}, now
        text = cli("cluster", "status", url=healthy.url)
        assert text.returncode == 0 and "node-2" in text.stdout and "healthy" in text.stdout, text
        assert "views on node-1" in text.stdout, text.stdout
        asyncio.run(missing_topics_across_gateways(gateway_url(now, "node-1"), gateway_url(now, "node-2")))

    def test_node_actions_are_checked(self, healthy: Server) -> None:
        wait_for(lambda: status(healthy)["healthy"], 60, "a healthy cluster")
        head = node_cli(healthy, "kill-node", "node-0")
        assert head.returncode == 1 and "REFUSED" in head.stderr and "controller" in head.stderr, head
        unknown = node_cli(healthy, "pause-node", "node-9", "--seconds", "1")
        assert unknown.returncode == 1 and "NO_SUCH_NODE" in unknown.stderr, unknown
        forever = node_cli(healthy, "pause-node", "node-1", "--seconds", "99999")
        assert forever.returncode == 2 and "at most 3600" in forever.stderr, forever  # refused before it is sent
        taken = node_cli(healthy, "add-node", "node-2")
        assert taken.returncode == 1 and "already up" in taken.stderr, taken
        memory_only = node_cli(healthy, "restart-gcs")  # no gcs_redis_address: the cluster would be lost
        assert memory_only.returncode == 1 and "REFUSED" in memory_only.stderr and "Redis" in memory_only.stderr, memory_only
        assert all(processes.alive(local_node(healthy, f"node-{k}")["raylet_pid"]) for k in range(3))
        # the CLI takes a healthy's gateways as one comma-separated --url and uses the first that answers
        nobody = f"ws://127.0.0.1:{free_port()}"
        listed = cli("cluster", "status", url=f"{nobody},{healthy.url}")
        assert listed.returncode == 0 and "node-2" in listed.stdout, listed

    def test_the_pid_of_a_node_is_recorded(self, healthy: Server) -> None:
        info = json.loads((healthy.data_dir / "server.json").read_text())
        names = sorted(n["name"] for n in info["local_nodes"])
        assert names == ["node-0", "node-1", "node-2"]
        assert all(os.path.exists(f"/proc/{n['raylet_pid']}") for n in info["local_nodes"])
        assert os.path.isdir(healthy.data_dir / "nodes" / "node-1")

    def test_client_control_reaches_a_session_on_another_gateway(self, healthy: Server) -> None:
        now = wait_for(lambda: (s := status(healthy))["healthy"] and s, 60, "a healthy cluster")
        asyncio.run(client_control_across_gateways(gateway_url(now, "node-1"), gateway_url(now, "node-2")))

    def test_a_request_reaches_a_handler_on_another_gateway(self, healthy: Server) -> None:
        now = wait_for(lambda: (s := status(healthy))["healthy"] and s, 60, "a healthy cluster")
        asyncio.run(messaging_across_gateways(gateway_url(now, "node-1"), gateway_url(now, "node-2")))


    def test_a_session_lock_is_one_lock_across_gateways(self, healthy: Server) -> None:
        now = wait_for(lambda: (s := status(healthy))["healthy"] and s, 60, "a healthy cluster")
        asyncio.run(locks_across_gateways(gateway_url(now, "node-1"), gateway_url(now, "node-2")))

    def test_a_controller_ray_gave_up_is_made_again_and_takes_the_instance_over(self, healthy: Server) -> None:
        """Ray gives a detached actor up for good when it cannot restart it (the head's label is
        unknown when Ray declares the old head dead before the new one registers; here: killed
        with ``no_restart`` by another Ray driver). First the configuration log's writer alone: the
        controller makes it again on its node (the copies keep the log). Then the controller and,
        right after it, the writer: serve makes a new controller that adopts the instance, makes
        the writer again and hands it to the view evaluator and the session tree actor; changes
        through each of them are committed on every copy."""
        now = wait_for(lambda: (s := status(healthy))["healthy"] and s, 60, "a healthy cluster")
        committed = now["configuration"]["log_committed"]
        info = json.loads((healthy.data_dir / "server.json").read_text())

        def kill(*actors: str) -> None:
            killer = subprocess.run(
                [sys.executable, "-c", (
                    "import sys, ray\n"
                    "ray.init(address=sys.argv[1], namespace='canopy', logging_level='ERROR', log_to_driver=False)\n"
                    "for name in sys.argv[2:]:\n"
                    "    ray.kill(ray.get_actor(name), no_restart=True)\n"), info["ray_address"], *actors],
                capture_output=True, text=True, timeout=120,
                env={**os.environ, "RAY_AUTH_MODE": "token", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
            assert killer.returncode == 0, killer.stderr[-3000:]

        def said(text: str, since: int) -> Callable[[], bool]:
            return lambda: any(text in line for line in healthy.lines[since:])

        seen = len(healthy.lines)
        kill("configuration-log")
        wait_for(said("(ConfigLogActor) was given up by Ray", seen), 60, "the controller to make the writer again",
                 describe=lambda: healthy.lines[-20:])
        seen = len(healthy.lines)
        kill("controller", "configuration-log")
        wait_for(said("a new one takes the instance over", seen), 60, "serve to make a new controller",
                 describe=lambda: healthy.lines[-20:])
        wait_for(said("(ControllerActor) is back and serving", seen), FAILOVER, "the new controller to answer",
                 describe=lambda: healthy.lines[-20:])
        # said right after (serve prints the new controller's first check), or, when the writer's death
        # reached Ray only after the adoption found it still listed, by that check
        wait_for(lambda: said("configuration log's writer was gone; made again", seen)()
                 or said("(ConfigLogActor) was given up by Ray", seen)(), 30, "the writer to be made again",
                 describe=lambda: healthy.lines[seen:])
        # server.json names the new controller's process (what the next test kills)
        wait_for(lambda: (pid := json.loads((healthy.data_dir / "server.json").read_text())["controller_pid"])
                 != info["controller_pid"] and processes.alive(pid), 30, "server.json to name the new controller")

        async def changes() -> None:
            async with canopy.connect(healthy.url, *ADMIN) as s:
                await s.security.add_principal("after-revival", "secret-after", ["CLIENT"])  # the controller
                await s.views.create("revived", "map ?src// to revived/<path(1)>")  # the view evaluator
                assert "after-revival" in (await s.security.get())["principals"]
                await s.views.remove("revived")

        asyncio.run(changes())
        after = wait_for(lambda: (st := status(healthy))["healthy"] and st, 60, "a healthy cluster after the revival")
        log = after["configuration"]
        assert log["log_committed"] >= committed + 3 and set(log["log_copies"].values()) == {log["log_committed"]}, (
            now["configuration"], log)
        assert [p["primary"] for p in after["partitions"]] == [p["primary"] for p in now["partitions"]], (now, after)

    async def test_a_killed_controller_comes_back_and_every_change_was_made_or_refused(self, healthy: Server) -> None:
        """Scenario 4: the controller's process is SIGKILLed while views are created and
        principals added (a security change goes through the controller), and while clients
        publish. Ray restarts it and it takes the instance over from the actors, which
        outlive it. Afterwards exactly the answered changes exist (a refused one, even one
        cut off by the kill, was not made), nothing acknowledged is lost, and the cluster
        still fails over."""
        loop = asyncio.get_running_loop()
        now = wait_for(lambda: (s := status(healthy))["healthy"] and s, 60, "a healthy cluster")
        urls = [gateway_url(now, "node-0"), gateway_url(now, "node-1")]
        work = Workload(urls[:1], ADMIN, publishers=1, topics=6, subscribers=1)
        made: dict[str, list[str]] = {"views": [], "principals": []}
        refused: dict[str, list[str]] = {"views": [], "principals": []}
        await work.start()
        try:
            async with canopy.connect(urls, *ADMIN) as s:
                await s.topics.add_and_set("src/x", 1)
                stopping = asyncio.Event()

                async def change() -> None:
                    k = 0
                    while not stopping.is_set():
                        k += 1
                        for kind, name, call in (
                            ("views", f"v{k}", lambda: s.views.create(f"v{k}", f"map ?src// to v{k}/<path(1)>")),
                            ("principals", f"p{k}", lambda: s.security.add_principal(f"p{k}", f"secret-{k}", ["CLIENT"])),
                        ):
                            try:
                                await call()
                                made[kind].append(name)
                            except canopy.CanopyError:
                                refused[kind].append(name)
                                await asyncio.sleep(0.05)

                changing = asyncio.ensure_future(change())
                await loop.run_in_executor(None, lambda: wait_for(
                    lambda: len(made["principals"]) >= 3, 30, "security changes made before the kill",
                    describe=lambda: (made, refused)))
                info = json.loads((healthy.data_dir / "server.json").read_text())
                seen = sum("(ControllerActor) is back and serving" in line for line in healthy.lines)
                os.kill(info["controller_pid"], 9)
                await loop.run_in_executor(None, lambda: wait_for(
                    lambda: sum("(ControllerActor) is back and serving" in line for line in healthy.lines) > seen,
                    FAILOVER, "the controller to be back"))
                before = len(made["principals"])
                await loop.run_in_executor(None, lambda: wait_for(
                    lambda: len(made["principals"]) >= before + 3, 60, "security changes to be made again",
                    describe=lambda: refused["principals"][-3:]))
                stopping.set()
                await changing
                views = {v.name for v in await s.views.list()}
                principals = set((await s.security.get())["principals"])
                references = {r.path for r in await s.topics.fetch("?v.*//")}
            after = await loop.run_in_executor(None, lambda: wait_for(
                lambda: (st := status(healthy))["healthy"] and st, 60, "a healthy cluster after the restart"))
            await progressed(work)
            await finish(work, urls=urls[:1])
        finally:
            await work.close()
        assert views == set(made["views"]), (made, refused, views)
        assert principals & {f"p{k}" for k in range(1, 10_000)} == set(made["principals"]), (made, refused, principals)
        assert all(f"{v}/x" in references for v in views), (views, references)  # whole: evaluated too
        report = check(work.history)
        print(f"[cluster] controller killed: {len(made['views'])} views and {len(made['principals'])} principals made, "
              f"{len(refused['views'])} and {len(refused['principals'])} refused; publishing {report}")
        assert report.valid and report.acknowledged > 50, report
        assert any("the controller restarted: took over" in line for line in healthy.lines), healthy.output
        assert [p["primary"] for p in after["partitions"]] == [p["primary"] for p in now["partitions"]], (now, after)
        # and it still runs the cluster: a node lost now fails over
        await loop.run_in_executor(None, crash_node, healthy, "node-2")
        await loop.run_in_executor(None, lambda: wait_for(lambda: healthy_without("node-2")(healthy), FAILOVER,
                                                          "every partition on node-0 and node-1, with a backup"))


async def fanned(session: canopy.Session, value: int) -> None:
    """Wait until the fan-out replica F/a has ``value``."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + FAILOVER
    seen: Any = None
    while (seen := [t.value for t in await session.topics.fetch(">F/a")]) != [value]:
        assert loop.time() < deadline, f"the replica F/a never had {value}; last seen {seen}"
        await asyncio.sleep(0.2)


async def missing_topics_across_gateways(handler_url: str, user_url: str) -> None:
    """A handler on one gateway hears of a request made on another, its answer goes back,
    and its registration goes from every gateway with its session."""
    from topics.selectors import parse_selector

    async with canopy.connect(handler_url, *ADMIN) as control, canopy.connect(user_url) as user:

        async def create(notification: Any) -> bool:
            path = parse_selector(notification.selector).path_prefix
            await control.topics.add(path, "STRING")
            await control.topics.set(path, "from node-1")
            return True

        registration = await control.missing_topics.add_handler("across", create)
        await asyncio.get_running_loop().run_in_executor(None, lambda: wait_for(
            lambda: any(r[0] == registration.token for r in asyncio.run(_registrations(user_url))), 10,
            "the registration to reach node-2's gateway"))
        sub = await user.topics.subscribe("across/x")
        event = await sub.next(timeout=20)
        assert (event.kind, event.path, event.value) == ("subscribed", "across/x", "from node-1")
        await registration.close()
        started = asyncio.get_running_loop().time()
        assert await user.topics.fetch("across/y") == []  # nobody to wait for
        assert asyncio.get_running_loop().time() - started < 5


async def waiters(session: canopy.Session, name: str, count: int, timeout: float = 20) -> None:
    """Wait until lock ``name`` is held with ``count`` sessions waiting, as ``session``'s gateway knows it."""
    deadline = asyncio.get_running_loop().time() + timeout
    while (found := [lock["waiting"] for lock in await session.locks.list() if lock["name"] == name]) != [count]:
        assert asyncio.get_running_loop().time() < deadline, f"lock {name}: waiting {found}, not {count}"
        await asyncio.sleep(0.05)


async def locks_across_gateways(one: str, other: str) -> None:
    """Sessions on two gateways contend for one lock: the second waits until the first unlocks,
    then holds it at a higher sequence; each gateway decides an update constraint on it from
    the same table; the owner's session closing hands it to a waiter on the other gateway."""
    from canopy import constraints as c

    async with canopy.connect(one, *ADMIN) as a, canopy.connect(other, *ADMIN) as b:
        first = await a.locks.lock("cluster/lock")
        waiting = asyncio.ensure_future(b.locks.lock("cluster/lock"))
        await waiters(b, "cluster/lock", 1)
        await a.topics.add_and_set("cluster/fenced", "a", "STRING", constraint=c.locked(first))
        with pytest.raises(errors.UnsatisfiedConstraintError):
            await b.topics.set("cluster/fenced", "b", constraint=c.locked(first))
        assert await first.unlock()
        second = await asyncio.wait_for(waiting, 20)
        assert second.sequence > first.sequence
        await b.topics.set("cluster/fenced", "b", constraint=c.locked(second))
        with pytest.raises(errors.UnsatisfiedConstraintError):
            await a.topics.set("cluster/fenced", "a", constraint=c.locked(first))
        again = asyncio.ensure_future(a.locks.lock("cluster/lock"))
        await waiters(a, "cluster/lock", 1)
        await b.close()
        third = await asyncio.wait_for(again, 20)
        assert third.sequence > second.sequence and await third.unlock()


async def _registrations(url: str) -> list[tuple[str, str, str]]:
    async with canopy.connect(url, *ADMIN) as session:
        return await session.missing_topics.list()


def damage_journals(node_dir: Path) -> dict[int, Path]:
    """Flip one bit a third of the way into the longest segment of each partition journal under
    ``node_dir`` (records follow it: damage, not a torn tail); the segments flipped, by partition."""
    flipped: dict[int, Path] = {}
    for journal in sorted((node_dir / "journal").glob("partition-*")):
        segments = sorted(journal.glob("segment-*.log"), key=lambda f: f.stat().st_size)
        if not segments or segments[-1].stat().st_size < 4096:
            continue
        data = bytearray(segments[-1].read_bytes())
        data[len(data) // 3] ^= 0x04
        segments[-1].write_bytes(bytes(data))
        flipped[int(journal.name.split("-")[1])] = segments[-1]
    assert flipped, f"no journal under {node_dir} to damage"
    return flipped


def two_workloads(srv: Server, topics: int, rate: float | None = RATE) -> tuple[list[str], Workload, Workload]:
    """Once the cluster is healthy: node-0's gateway URL, a workload there (two publishers
    of ``2 * topics`` topics each, two subscribers) and a roaming one on node-1's and
    node-2's gateways (one publisher of ``topics`` topics, one subscriber), each publisher
    writing ``rate`` rounds a second (:class:`tests.checking.Workload`)."""
    now = wait_for(lambda: (s := status(srv))["healthy"] and s, 60, "a healthy cluster")
    home = [gateway_url(now, "node-0")]
    work = Workload(home, ADMIN, publishers=2, topics=2 * topics, subscribers=2, rate=rate)
    roaming = Workload([gateway_url(now, "node-1"), gateway_url(now, "node-2")], ADMIN, publishers=1, topics=topics,
                       subscribers=1, branch="roaming", rate=rate)
    return home, work, roaming


async def test_a_crashed_node_loses_nothing_acknowledged_and_rejoins(cluster: Server, tmp_path: Path) -> None:
    """Publishers and subscribers on node-0's gateway, and others on node-1's (they go
    on through node-2's when node-1 goes). node-1 (primaries, backups, a gateway) is
    crashed while they write; then started again on its data directory and given
    partitions back, while they still write. The cluster is also a fan-out secondary
    of another server: its link runs once, on node-1, and moves. node-0's gateway says
    it is not ready (``/readyz``: 503 naming node-1's partitions) until their backups took
    over, and ready again after. Session locks: one held on node-0's gateway is kept; one held
    on node-1's is released with its node, to a waiter on node-2's gateway, and node-1's
    session's wait for the first goes."""
    loop = asyncio.get_running_loop()
    primary = Server(tmp_path / "primary", "--partitions", "1")
    home, work, roaming = two_workloads(cluster, topics=6)
    await work.start()
    await roaming.start()
    lockers: list[canopy.Session] = []
    try:
        await loop.run_in_executor(None, primary.wait_ready)
        async with canopy.connect(primary.url, *ADMIN) as up:
            await up.topics.add_and_set("F/a", 1)
        async with canopy.connect(home, *ADMIN) as admin:  # the view evaluator and session trees run on node-1
            await admin.topics.add_and_set("src/x", 1)
            await admin.views.create("mirror", "map ?src// to mirror/<path(1)>")
            await admin.session_trees.put_table("tree", [("all", "src")])
            await admin.fanout.add("up", primary.url, "?F//", principal=ADMIN[0], password=ADMIN[1], retry_delay=0.2)
            await fanned(admin, 1)
        assert status(cluster)["services"]["fanout-up"] == "node-1"
        await progressed(work, roaming)
        spread = await loop.run_in_executor(None, lambda: wait_for(
            lambda: (s := status(cluster))["healthy"] and s["balanced"] and s, FAILOVER, "a balanced cluster"))
        held = {p["partition"] for p in spread["partitions"] if p["primary"] == "node-1"}
        assert held, spread["partitions"]  # balanced: 4 primaries on node-1 and node-2 (the head holds none)
        # a topic with a removal policy whose primary is on node-1: its backup takes the policy over
        count = len(spread["partitions"])
        idle = next(p for p in (f"removal/failover/{i}" for i in range(1000)) if partition_of(p, count) in held)
        async with canopy.connect(home, *ADMIN) as admin:
            await admin.topics.add(idle, "STRING", {"REMOVAL": f"when no updates for {IDLE_S}s"})
            updated = time.time()
            await admin.topics.set(idle, "the last update")
        keeper = await canopy.connect(home, *ADMIN)
        doomed = await canopy.connect(roaming.urls[0], *ADMIN, reconnect_timeout=0)  # on node-1: ends with it
        heir = await canopy.connect(roaming.urls[1], *ADMIN)
        lockers += [keeper, doomed, heir]
        kept = await keeper.locks.lock("failover/kept")
        lost = await doomed.locks.lock("failover/lost")
        inheriting = asyncio.ensure_future(heir.locks.lock("failover/lost"))
        hopeless = asyncio.ensure_future(doomed.locks.lock("failover/kept"))
        await waiters(keeper, "failover/kept", 1)
        await waiters(keeper, "failover/lost", 1)
        readiness = Readiness(home[0])  # node-0's gateway, which loses its streams to node-1's primaries
        try:
            await loop.run_in_executor(None, crash_node, cluster, "node-1")
            assert time.time() < updated + IDLE_S, "node-1 took too long to crash to test the removal's failover"
            after = await loop.run_in_executor(
                None, lambda: wait_for(lambda: healthy_without("node-1")(cluster), FAILOVER,
                                       "every partition on node-0 and node-2, with a backup"))
            # unready naming node-1's partitions while they had no primary to reach, ready again after failover
            unready, ready = await loop.run_in_executor(None, lambda: wait_for(
                lambda: readiness.unready_then_ready(held), 30,
                f"node-0's gateway's /readyz: 503 naming partitions of {sorted(held)}, then 200",
                describe=lambda: readiness.seen))
        finally:
            readiness.stop()
        print(f"[cluster] node-0's /readyz around the crash: {unready} ... {ready}")
        inherited = await asyncio.wait_for(inheriting, FAILOVER)
        assert inherited.sequence > lost.sequence and inherited.owned
        await waiters(keeper, "failover/kept", 0, FAILOVER)  # node-1's session waits no more
        assert [(lock["sequence"], lock["session_id"]) for lock in await keeper.locks.list()
                if lock["name"] == "failover/kept"] == [(kept.sequence, keeper.session_id)] and kept.owned
        with pytest.raises(canopy.CanopyError):
            await hopeless
        async with canopy.connect(home, *ADMIN) as admin:  # configuration changes without node-1
            await admin.security.add_principal("during-failover", "during-failover-1", ["CLIENT"])
            await admin.topics.set("src/x", 2)

            async def mirrored() -> Any:
                return [r.value for r in await admin.topics.fetch(">mirror/x")] == [2]

            deadline = loop.time() + FAILOVER
            while not await mirrored():  # the view evaluator came back on another node
                assert loop.time() < deadline, "the view's reference topic never followed its source"
                await asyncio.sleep(0.2)
            await admin.views.create("mirror2", "map ?src// to mirror2/<path(1)>")
            await admin.session_trees.put_table("tree2", [("all", "src")])
            assert {v.name for v in await admin.views.list()} == {"mirror", "mirror2"}
            assert set(await admin.session_trees.list_tables()) == {"tree", "tree2"}
        async with canopy.connect(primary.url, *ADMIN) as up:
            await up.topics.set("F/a", 2)
        async with canopy.connect(home, *ADMIN) as admin:
            await fanned(admin, 2)  # the fan-out link came back on another node
            deadline = loop.time() + FAILOVER
            while await admin.topics.fetch(">" + idle):  # the new primary evaluates the policy
                assert loop.time() < deadline, f"{idle} was never removed after the failover"
                await asyncio.sleep(0.2)
            assert time.time() >= updated + IDLE_S, "removed before its policy allowed"
        moved = status(cluster)["services"]
        assert moved["views"] in ("node-0", "node-2") and moved["session-trees"] in ("node-0", "node-2"), moved
        assert moved["fanout-up"] in ("node-0", "node-2"), moved
        await progressed(work, roaming)
        # the disk of the stopped node-1 flips a bit in each of its journals: found by checksum
        damaged = damage_journals(cluster.data_dir / "nodes" / "node-1")
        checked = cli("journal", "check", "--data-dir", str(cluster.data_dir / "nodes" / "node-1"))
        assert checked.returncode == 1 and all(f"{f.parent}: damaged" in checked.stdout for f in damaged.values()), (
            checked.stdout, checked.stderr)
        added = node_cli(cluster, "add-node", "node-1")
        assert added.returncode == 0 and "starting again" in added.stdout, (added.stdout, added.stderr)

        def rejoined() -> Any:
            s = status(cluster)
            ok = s["healthy"] and s["balanced"] and any("node-1" in (p["primary"], p["backup"]) for p in s["partitions"])
            log = s["configuration"]
            caught_up = log["log_copies"].get("node-1") == log["log_committed"]  # its copy of the log too
            return s if ok and caught_up else False

        def seen() -> Any:
            s = status(cluster)
            return {"healthy": s["healthy"], "balanced": s["balanced"], "configuration": s["configuration"],
                    "partitions": s["partitions"], "serve said": cluster.lines[-12:]}

        back = await loop.run_in_executor(None, lambda: wait_for(
            rejoined, FAILOVER, "node-1 back, holding partitions", describe=seen))
        for p in back["partitions"]:  # each replica placed on node-1 again set its damaged journal aside
            if "node-1" in (p["primary"], p["backup"]) and p["partition"] in damaged:
                segment = damaged[p["partition"]]
                assert list(segment.parent.glob(f"damaged-*/{segment.name}")), p
                assert not (segment.parent / "DAMAGED").exists(), p
        assert gateway_url(back, "node-1") == roaming.urls[0], back["gateways"]  # at the URL its clients know
        await progressed(work, roaming)
        await finish(work, roaming, urls=home)
    finally:
        await work.close()
        await roaming.close()
        for locker in lockers:
            await locker.close()
        await loop.run_in_executor(None, primary.stop)
    report, moved = check(work.history), check(roaming.history)
    print(f"[cluster] node-1 crashed and rejoined: {report}; its gateway's clients: {moved}; "
          f"then {back['partitions']}")
    assert report.valid, report
    assert moved.valid, moved
    assert report.acknowledged > 100 and moved.acknowledged > 50, (report, moved)
    assert not work.ended and not roaming.ended, (work.ended, roaming.ended)
    # the Parquet history, exported by primaries that failed over and handed over meanwhile
    exported = wait_for(lambda: history_holds(cluster, work.history, roaming.history), 60,
                        "every acknowledged write in the Parquet history")
    print(f"[cluster] history: {len(exported)} rows, no duplicates, no gaps, every acknowledged write")
    assert any("took over" in line for line in cluster.lines), cluster.output
    assert not any(n["alive"] for n in after["nodes"] if n["name"] == "node-1")
    assert any(line.startswith("canopy: started node node-1") for line in cluster.lines), cluster.output
    copy = ConfigLogStore(cluster.data_dir / "nodes" / "node-1")
    try:
        assert "during-failover" in copy.documents()["security"]["principals"]
    finally:
        copy.close()


async def test_a_paused_primary_acknowledges_nothing_after_its_successor_took_over(cluster: Server) -> None:
    """Fencing. The node holding a primary is frozen (SIGSTOP) past the failure detector:
    its backup takes over. When it resumes, its old primary, its gateway and the clients
    still connected there must not get a single write acknowledged that the new primary
    lacks; the node then leaves (its raylet and workers exit) and its clients move."""
    loop = asyncio.get_running_loop()
    now = wait_for(lambda: (s := status(cluster))["healthy"] and s, 60, "a healthy cluster")
    victim = next(p["primary"] for p in now["partitions"] if p["primary"] != "node-0")
    home = [gateway_url(now, "node-0")]
    work = Workload(home, ADMIN, publishers=2, topics=12, subscribers=1, branch="paused")
    stranded = Workload([gateway_url(now, victim), *home], ADMIN, publishers=1, topics=6, subscribers=1,
                        branch="stranded")
    raylet = local_node(cluster, victim)["raylet_pid"]
    frozen = processes.descendants(raylet) | {raylet}
    await work.start()
    await stranded.start()
    try:
        await progressed(work, stranded)
        paused = node_cli(cluster, "pause-node", victim, "--seconds", "12")
        assert paused.returncode == 0, (paused.stdout, paused.stderr)
        await loop.run_in_executor(
            None, lambda: wait_for(lambda: healthy_without(victim)(cluster), FAILOVER,
                                   f"every partition off the paused {victim}"))

        def left() -> list[tuple[int, list[str]]]:
            """The node's raylet and canopy's actors on it (Ray's idle pooled workers may linger)."""
            return [(pid, processes.arguments(pid)[:1]) for pid in frozen if processes.alive(pid) and (
                pid == raylet or processes.arguments(pid)[:1] != ["ray::IDLE"])]

        await loop.run_in_executor(None, lambda: wait_for(
            lambda: not left(), 60, f"{victim}'s raylet and canopy's actors there to exit once resumed",
            describe=left))
        await progressed(work, stranded)
        await finish(work, stranded, urls=home)
    finally:
        await work.close()
        await stranded.close()
    report, moved = check(work.history), check(stranded.history)
    print(f"[cluster] {victim} paused: {report}; its gateway's clients: {moved}")
    assert report.valid, report
    assert moved.valid, moved
    assert report.acknowledged > 100 and moved.acknowledged > 20, (report, moved)
    assert not work.ended and not stranded.ended, (work.ended, stranded.ended)


async def test_a_whole_cluster_restarts_from_its_data_directories(tmp_path: Path) -> None:
    """Stop a 3-node cluster after a failover (so the journals' epochs differ between
    nodes) and start it again on the same data directory: persistent topics, time
    series, views with their reference topics, branch mapping tables and the security
    store are all back, and each partition's primary is on a node holding its newest replica."""
    data = tmp_path / "data"
    first = Server(data, "--local-nodes", "3", "--partitions", "4", own_session=True)
    try:
        first.wait_ready(180)
        wait_for(lambda: status(first)["healthy"], 60, "a healthy cluster")
        async with canopy.connect(first.url, *ADMIN) as s:
            for k in range(20):
                await s.topics.add(f"src/t{k}", "INT64")
                await s.topics.set(f"src/t{k}", k)
            await s.topics.add("series/s", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64"})
            for v in range(5):
                await s.time_series.append("series/s", v * 10)
            await s.views.create("mirror", "map ?src// to ref/<path(1)>")
            await s.session_trees.put_table("tree/", [("$Country is 'FR'", "src/")])
            await s.security.add_principal("bob", "bob-password-1", ["CLIENT"])
        crash_node(first, "node-1")  # a failover: epochs move on, node-1's replicas fall behind
        wait_for(lambda: healthy_without("node-1")(first), FAILOVER, "every partition off node-1")
        async with canopy.connect(first.url, *ADMIN) as s:
            for k in range(20):
                await s.topics.set(f"src/t{k}", 100 + k)  # written after node-1 left: only on node-0 and node-2
    finally:
        assert first.stop() == 0, first.output
    # the disk of one of the two newest copies of each partition flips a bit (the first copy, then the
    # second, in turn): the restart must trust the whole one, and build the damaged one again from it
    flipped = []
    for i in range(4):
        copies = sorted((json.loads((d / "EPOCH").read_text())["epoch"], d) for d in data.glob(f"nodes/*/journal/partition-{i}")
                        if (d / "EPOCH").exists())
        newest = [d for epoch, d in copies if epoch == copies[-1][0]]
        assert len(newest) == 2, copies
        victim = max((f for f in newest[i % 2].iterdir() if f.name.startswith(("segment-", "snapshot-"))),
                     key=lambda f: f.stat().st_size)
        raw = bytearray(victim.read_bytes())
        raw[len(raw) // 3] ^= 0x08  # records follow: damage, not a torn tail
        victim.write_bytes(bytes(raw))
        flipped.append(victim)
    checked = cli("journal", "check", "--data-dir", str(data))
    assert checked.returncode == 1 and all(f"{f.parent}: damaged" in checked.stdout and f"{f.name} at offset" in
                                           checked.stdout for f in flipped), (checked.stdout, checked.stderr)

    again = Server(data, "--local-nodes", "3", "--partitions", "4", own_session=True)
    try:
        again.wait_ready(180)
        now = wait_for(lambda: (s := status(again))["healthy"] and s, 60, "a healthy cluster after the restart")
        async with canopy.connect(again.url, *ADMIN) as s:
            rows = {r.path: r.value for r in await s.topics.fetch("?src//")}
            assert rows == {f"src/t{k}": 100 + k for k in range(20)}, rows
            events = await s.time_series.range_query("series/s")
            assert [e.value for e in events.events] == [0, 10, 20, 30, 40], events

            def mirrored() -> Any:
                return {r.path: r.value for r in asyncio.run_coroutine_threadsafe(
                    s.topics.fetch("?ref//"), loop).result(10)}

            loop = asyncio.get_running_loop()
            refs = await loop.run_in_executor(None, lambda: wait_for(
                lambda: len(m := mirrored()) == 20 and m, 60, "the view's reference topics"))
            assert refs == {f"ref/t{k}": 100 + k for k in range(20)}, refs
            assert await s.session_trees.get_table("tree/") == [("$Country is 'FR'", "src")]
            await s.topics.set("src/t0", 7)
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: mirrored().get("ref/t0") == 7, 30, "the reference topic to follow its source"))
        async with canopy.connect(again.url, "bob", "bob-password-1") as bob:
            assert bob.session_id
    finally:
        assert again.stop() == 0, again.output
    assert all(p["backup"] is not None for p in now["partitions"]), now


@pytest.mark.soak
async def test_soak_nodes_crashed_and_paused_in_turn_lose_nothing_acknowledged(own_cluster: Server) -> None:
    """The long variant of scenarios 1, 2 and 3 (``make soak``): while clients publish
    through two gateways, node-1 and node-2 are crashed and started again in turn, and
    paused past the failure detector, round after round; after each round the cluster
    must be whole again (healthy, balanced, every node's copy of the log caught up)."""
    cluster = own_cluster
    loop = asyncio.get_running_loop()
    home, work, roaming = two_workloads(cluster, topics=10, rate=None)  # as fast as answers come

    def whole(expected: int) -> Any:
        s = status(cluster)
        log = s["configuration"]
        alive = sum(1 for n in s["nodes"] if n["alive"])
        caught_up = len(log["log_copies"]) == alive and set(log["log_copies"].values()) == {log["log_committed"]}
        return s if s["healthy"] and s["balanced"] and alive == expected and caught_up else False

    await work.start()
    await roaming.start()
    try:
        for round_ in range(6):
            name = ("node-1", "node-2")[round_ % 2]
            raylet = local_node(cluster, name)["raylet_pid"]
            if round_ % 3 == 2:
                paused = node_cli(cluster, "pause-node", name, "--seconds", "12")
                assert paused.returncode == 0, (paused.stdout, paused.stderr)
            else:
                await loop.run_in_executor(None, crash_node, cluster, name)
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: healthy_without(name)(cluster), FAILOVER, f"round {round_}: every partition off {name}"))
            await loop.run_in_executor(None, lambda: wait_for(  # a paused one exits once it resumes
                lambda: not processes.alive(raylet), 60, f"round {round_}: {name}'s raylet gone"))
            added = node_cli(cluster, "add-node", name)
            assert added.returncode == 0, (added.stdout, added.stderr)
            await loop.run_in_executor(None, lambda: wait_for(
                lambda: whole(3), FAILOVER, f"round {round_}: {name} back and the cluster whole",
                describe=lambda: status(cluster)))
        try:
            await finish(work, roaming, urls=home)
        except AssertionError as e:
            sessions = [(w.branch, s.session_id, s._url, s.closed, s.reconnects, s._reconnecting is not None,
                         [sub._down for sub in s._subscriptions]) for w in (work, roaming) for s in w._sessions]
            raise AssertionError(f"{e}; sessions {sessions}; gateways {status(cluster)['gateways']}") from None
    finally:
        await work.close()
        await roaming.close()
    report, moved = check(work.history), check(roaming.history)
    print(f"[cluster] soak, 6 rounds of node crashes and pauses: {report}; roaming clients: {moved}")
    assert report.valid and moved.valid, (report, moved)
    assert not work.ended and not roaming.ended, (work.ended, roaming.ended)


async def messaging_across_gateways(handler_url: str, sender_url: str) -> None:
    """A request made on one node's gateway reaches the handler registered on another's, by
    path and by session id, and the responses come back; the handler's session closing
    removes its handler there too."""
    async with canopy.connect(sender_url, *ADMIN) as sender:
        async with canopy.connect(handler_url, *ADMIN) as handler:
            await handler.messaging.add_request_handler("across-msg", lambda request, context: [request, context.path])
            handler.messaging.set_request_stream("direct", lambda request, context: request * 2)
            deadline = asyncio.get_running_loop().time() + 20
            while True:  # until the registration reached the sender's gateway
                try:
                    answer = await sender.messaging.send_request("across-msg/a", 1)
                    break
                except errors.UnhandledMessageError:
                    assert asyncio.get_running_loop().time() < deadline, "the handler never reached node-2's gateway"
                    await asyncio.sleep(0.05)
            assert answer == [1, "across-msg/a"]
            assert await sender.messaging.send_request_to_session(handler.session_id, "direct", 21) == 42
        deadline = asyncio.get_running_loop().time() + 20
        while True:  # its session closed: its handler goes from every gateway
            try:
                await sender.messaging.send_request("across-msg/a", 1, timeout=2)
            except errors.UnhandledMessageError:
                break
            except errors.CanopyError:
                pass
            assert asyncio.get_running_loop().time() < deadline, "the closed session's handler stayed"
            await asyncio.sleep(0.05)


async def client_control_across_gateways(control_url: str, target_url: str) -> None:
    """A session on one gateway hears of a session opened on another, subscribes it to a
    selector, and that session receives the topic's values."""
    async with canopy.connect(control_url, *ADMIN) as control:
        heard: list[Any] = []
        listener = await control.clients.listen(heard.append, "cc is 'across'")
        async with canopy.connect(target_url, properties={"cc": "across"}) as target:
            deadline = asyncio.get_running_loop().time() + 20
            while not any(e.is_open and e.session_id == target.session_id for e in heard):
                assert asyncio.get_running_loop().time() < deadline, f"no open event from the other gateway: {heard}"
                await asyncio.sleep(0.02)
            await control.topics.add_and_set("across-cc/a", "first", "STRING")
            caught = target.clients.unrequested()
            assert await control.clients.subscribe(target.session_id, "?across-cc//") == 1
            event = await caught.next(20)
            assert (event.kind, event.path, event.value) == ("subscribed", "across-cc/a", "first")
            await control.topics.set("across-cc/a", "second")
            event = await caught.next(20)
            assert (event.kind, event.value) == ("value", "second")
        await listener.close()
