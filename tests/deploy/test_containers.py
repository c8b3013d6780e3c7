"""canopy in containers: the image, and the compose files of deploy/compose/, as written.

* A 3-node cluster (deploy/compose/cluster.yml: Ray's head and two workers, one container
  each, on the host's network with ports of their own): publishers and subscribers run the
  cluster tests' checker (:mod:`tests.checking`) while the container holding a partition's
  primary is ``docker kill``-ed; nothing acknowledged is lost, nothing arrives out of order,
  and the container, started again on its volume, rejoins and takes partitions back.
* Fan-out between two clusters (deploy/compose/fanout.yml: a primary cluster of two nodes, a
  secondary whose connection comes from secondary.toml): both of the primary's containers are
  killed and started again; its topics survive on their volumes and the secondary's replicas
  come up to date with what changed after. The primary's history, exported when it stops, is
  queried with Spark in a one-off container.

Figures (cluster start, failover and resync times, lost updates) are printed with the
``[deploy]`` prefix: ``pytest -s tests/deploy`` shows them, bench/deploy.py repeats them.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest

import canopy
from canopy import errors
from tests.checking import Workload, check, finish, progressed
from tests.cluster.test_gcs_fault_tolerance import Acknowledgements, acknowledged
from tests.conftest import free_port
from tests.deploy.compose import Project

T = TypeVar("T")
COMPOSE = Path(__file__).resolve().parents[2] / "deploy" / "compose"
ADMIN = ("admin", "deploy-admin-password")

pytestmark = pytest.mark.timeout(900)


async def settle(
    project: Project, check_: Callable[[], Awaitable[T]], timeout: float, what: str
) -> T:
    """Poll ``check_`` until it returns something truthy; fail at once, with the logs, when a
    container of the project exited, and with the last observation when time runs out."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        for service, container in project.containers.items():
            wrapped = container.get_wrapped_container()
            wrapped.reload()
            if wrapped.status == "exited" and service not in project.down_on_purpose:
                raise AssertionError(f"{service} exited while waiting for {what}:\n{project.logs(service)[-4000:]}")
        try:
            last = await check_()
            if last:
                return last
        except (errors.CanopyError, OSError, asyncio.TimeoutError) as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last observation: {last!r}")
        await asyncio.sleep(0.5)


async def status(url: str) -> dict[str, Any]:
    async with canopy.connect(url, *ADMIN, reconnect_timeout=0) as session:
        return await asyncio.wait_for(session.server.cluster_status(), 20)


def holding(now: dict[str, Any], node: str) -> bool:
    return any(node in (p["primary"], p["backup"]) for p in now["partitions"])


def _grown(work: Workload, more: int) -> Callable[[], Awaitable[bool]]:
    """A check for :func:`settle`: ``work`` has ``more`` acknowledged writes than now."""
    goal = acknowledged(work) + more

    async def reached() -> bool:
        return acknowledged(work) >= goal

    return reached


async def test_a_killed_node_container_loses_nothing_acknowledged_and_rejoins(canopy_image: str) -> None:
    port, ray_port, agents = free_port(), free_port(), free_port()
    env = {
        "CANOPY_IMAGE": canopy_image, "RAY_AUTH_TOKEN": secrets.token_hex(32), "CANOPY_ADMIN_PASSWORD": ADMIN[1],
        "CANOPY_PORT": str(port), "CANOPY_RAY_PORT": str(ray_port),
        **{f"CANOPY_AGENT_PORT_{k}": str(agents + k) for k in range(3)},
    }
    project = Project(COMPOSE / "cluster.yml", env)
    urls = [f"ws://127.0.0.1:{port + k}" for k in range(3)]
    work = roaming = None
    try:
        started = time.monotonic()
        project.up()

        async def formed() -> Any:
            now = await status(urls[0])
            alive = {n["name"] for n in now["nodes"] if n["alive"]}
            ok = (now["healthy"] and now["balanced"] and alive == {"node-0", "node-1", "node-2"}
                  and len(now["gateways"]) == 3 and holding(now, "node-1") and holding(now, "node-2")
                  and not holding(now, "node-0"))  # the head holds no data while both workers are up
            return now if ok else False

        now = await settle(project, formed, 300, "3 nodes, healthy and balanced, a gateway on each")
        start_time = time.monotonic() - started

        async def healthy() -> Any:  # the image's HEALTHCHECK: serving on the head, a raylet on workers
            states = {s: project.health(s) for s in project.containers}
            return states if set(states.values()) == {"healthy"} else False

        await settle(project, healthy, 60, "docker's health check passing on every node")
        victim = next(p["primary"] for p in now["partitions"] if p["primary"] != "node-0")
        # gateway k of the nodes in the order they joined listens on port + k
        gateway = {g["node"]: g["url"].replace("0.0.0.0", "127.0.0.1") for g in now["gateways"]}
        assert sorted(gateway.values()) == urls, gateway
        home = gateway["node-0"]
        others = [gateway[n] for n in ("node-1", "node-2") if n != victim]
        work = Workload([home], ADMIN, publishers=2, topics=8, subscribers=2)
        roaming = Workload([gateway[victim], *others], ADMIN, publishers=1, topics=4, subscribers=1, branch="roaming")
        await work.start()
        await roaming.start()

        def acknowledged() -> int:
            assert work is not None and roaming is not None
            return sum(map(len, work.history.acknowledged.values())) + sum(
                map(len, roaming.history.acknowledged.values()))

        async def under_load(more: int) -> Callable[[], Awaitable[bool]]:
            goal = acknowledged() + more

            async def reached() -> bool:
                return acknowledged() >= goal

            return reached

        await settle(project, await under_load(500), 60, "500 acknowledged writes before the kill")
        project.down_on_purpose.add(victim)
        killed = time.monotonic()
        project.kill(victim)

        async def failed_over() -> Any:
            now = await status(urls[0])
            ok = now["healthy"] and not holding(now, victim) and all(p["backup"] for p in now["partitions"])
            return now if ok else False

        await settle(project, failed_over, 120, f"every partition off {victim}, each with a backup")
        failover = time.monotonic() - killed
        await settle(project, await under_load(500), 60, "500 more acknowledged writes after the failover")
        restarted = time.monotonic()
        project.restart(victim)
        project.down_on_purpose.discard(victim)

        async def rejoined() -> Any:
            now = await status(urls[0])
            alive = {n["name"] for n in now["nodes"] if n["alive"]}
            ok = now["healthy"] and now["balanced"] and victim in alive and holding(now, victim) and any(
                g["node"] == victim and g["url"].replace("0.0.0.0", "127.0.0.1") == gateway[victim]
                and not g.get("lost") for g in now["gateways"])
            return now if ok else False

        back = await settle(project, rejoined, 300, f"{victim} back, holding partitions, its gateway at its port")
        rejoin = time.monotonic() - restarted
        await settle(project, await under_load(300), 60, "300 more acknowledged writes after the rejoin")
        await finish(work, roaming, urls=[home])
        head_log = project.logs("node-0")
        await work.close()
        await roaming.close()

        # the head's loss: Ray's GCS, serve, the controller and node-0's gateway go with its container;
        # the workers' gateways and partitions serve on (the GCS's tables are in the redis service)
        workers = [gateway["node-1"], gateway["node-2"]]
        headless = Workload(workers, ADMIN, publishers=2, topics=6, subscribers=1, branch="headless")
        await headless.start()
        sampler = Acknowledgements(headless)
        try:
            await progressed(headless)
            project.down_on_purpose.add("node-0")
            lost_at = time.monotonic()
            project.kill("node-0")
            await settle(project, _grown(headless, 200), 60, "200 acknowledged writes without the head")
            headless_stall = sampler.longest_stall(lost_at, time.monotonic())
            project.restart("node-0")
            project.down_on_purpose.discard("node-0")
            restarted = time.monotonic()

            async def whole_again() -> Any:
                now = await status(workers[0])
                alive = {n["name"] for n in now["nodes"] if n["alive"]}
                serving = {g["node"] for g in now["gateways"] if not g.get("lost")}  # the head's: a new one
                ok = now["healthy"] and alive == serving == {"node-0", "node-1", "node-2"}
                return now if ok else False

            await settle(project, whole_again, 240, "the head back, the instance whole, a gateway on each node")
            head_back = time.monotonic() - restarted
            assert "supervising it" in project.logs("node-0"), project.logs("node-0")[-3000:]
            await progressed(headless)
            await finish(headless, urls=workers)
        finally:
            sampler.stop()
            await headless.close()
        headless_report = check(headless.history)
    except BaseException:
        for service in project.containers:
            print(f"--- {service} ---\n{project.logs(service)[-3000:]}")
        raise
    finally:
        if work is not None:
            await work.close()
        if roaming is not None:
            await roaming.close()
        project.down()
    report, moved = check(work.history), check(roaming.history)
    print(f"[deploy] 3-node cluster in containers formed in {start_time:.1f} s; {victim} killed: "
          f"failover in {failover:.1f} s, rejoined in {rejoin:.1f} s after docker start; "
          f"node-0's clients: {report}; {victim}'s gateway's clients: {moved}; then {back['partitions']}; "
          f"the head's container killed: longest write stall through node-1's and node-2's gateways "
          f"{headless_stall:.2f} s, whole again {head_back:.1f} s after docker start; their clients: {headless_report}")
    assert headless_report.valid and not headless_report.lost, headless_report
    assert report.valid, report
    assert moved.valid, moved
    assert not report.lost and not moved.lost
    assert report.acknowledged > 500 and moved.acknowledged > 100, (report, moved)
    assert not work.ended and not roaming.ended, (work.ended, roaming.ended)
    # the nodes share one history volume: a partition handed over exports where its successor looks
    assert "are a gap" not in head_log, head_log[-3000:]


async def fetched(url: str, selector: str) -> dict[str, Any]:
    async with canopy.connect(url, *ADMIN, reconnect_timeout=0) as session:
        return {row.path: row.value for row in await asyncio.wait_for(session.topics.fetch(selector), 20)}


async def test_a_fanout_secondary_resynchronises_after_its_primary_cluster_restarts(
    canopy_image: str, tmp_path: Path
) -> None:
    primary_port, secondary_port, ray_port, agents = free_port(), free_port(), free_port(), free_port()
    config = tmp_path / "secondary.toml"  # the example, pointed at this run's primary gateways
    example = (COMPOSE / "secondary.toml").read_text()
    assert '["ws://127.0.0.1:8090", "ws://127.0.0.1:8091"]' in example
    config.write_text(example.replace("127.0.0.1:8090", f"127.0.0.1:{primary_port}").replace(
        "127.0.0.1:8091", f"127.0.0.1:{primary_port + 1}"))
    config.chmod(0o644)
    env = {"CANOPY_IMAGE": canopy_image, "CANOPY_ADMIN_PASSWORD": ADMIN[1], "RAY_AUTH_TOKEN": secrets.token_hex(32),
           "PRIMARY_PORT": str(primary_port), "PRIMARY_RAY_PORT": str(ray_port),
           "PRIMARY_AGENT_PORT_0": str(agents), "PRIMARY_AGENT_PORT_1": str(agents + 1),
           "SECONDARY_PORT": str(secondary_port), "SECONDARY_CONFIG": str(config)}
    project = Project(COMPOSE / "fanout.yml", env)
    primaries = [f"ws://127.0.0.1:{primary_port}", f"ws://127.0.0.1:{primary_port + 1}"]
    primary, secondary = primaries[0], f"ws://127.0.0.1:{secondary_port}"
    nodes = ("primary-0", "primary-1")
    seen: list[tuple[str, Any]] = []

    async def formed() -> Any:  # the primary cluster: both nodes, a gateway on each, balanced
        now = await status(primary)
        alive = {n["name"] for n in now["nodes"] if n["alive"]}
        ok = now["healthy"] and now["balanced"] and alive == set(nodes) and len(now["gateways"]) == 2
        return now if ok else False

    try:
        started = time.monotonic()
        project.up()
        await settle(project, formed, 300, "the primary cluster: 2 nodes, healthy and balanced")
        formed_in = time.monotonic() - started
        async with canopy.connect(primaries, *ADMIN) as up:
            await up.topics.add_and_set("prices/eur", 1)
            await up.topics.add_and_set("prices/usd", 2)
            await up.topics.add_and_set("other/x", 0)  # not linked: never mirrored

        async def mirrored(expected: dict[str, Any]) -> Callable[[], Awaitable[Any]]:
            async def probe() -> Any:
                return (await fetched(secondary, "?prices//")) == expected

            return probe

        await settle(project, await mirrored({"prices/eur": 1, "prices/usd": 2}), 180, "the replicas on the secondary")
        async with canopy.connect(secondary, *ADMIN, reconnect_timeout=0) as down:
            await down.topics.subscribe("?prices//", callback=lambda e: seen.append((e.path, e.value)))
            project.down_on_purpose.update(nodes)
            for node in reversed(nodes):  # the whole primary cluster: SIGKILL of every process of both nodes
                project.kill(node)
            assert await fetched(secondary, "?prices//") == {"prices/eur": 1, "prices/usd": 2}  # kept meanwhile
            for node in nodes:  # started again on their volumes, the head first
                project.restart(node)
            restarted = time.monotonic()
            project.down_on_purpose.difference_update(nodes)
            durable = await settle(project, lambda: fetched(primary, "?prices//"), 180, "the primary back")
            assert durable == {"prices/eur": 1, "prices/usd": 2}, durable  # from the nodes' journals
            async with canopy.connect(primaries, *ADMIN) as up:
                await up.topics.set("prices/eur", 3)
                await up.topics.remove("prices/usd")
                await up.topics.add_and_set("prices/gbp", 4)
            await settle(project, await mirrored({"prices/eur": 3, "prices/gbp": 4}), 120,
                         "the secondary's replicas brought up to date")
            resync = time.monotonic() - restarted
            await settle(project, _seen(seen, ("prices/eur", 3)), 30, "the secondary's subscriber told of eur = 3")
            assert await fetched(secondary, "?other//") == {}  # not linked: never mirrored
            await settle(project, formed, 180, "the primary cluster whole again")
        # the image's Java and Spark: a clean stop of the head exports the primary's history (shared
        # by its nodes), which a one-off container on the head's volumes queries with `canopy history`
        project.stop("primary-0")
        project.stop("primary-1")
        code, output = project.run("primary-0", "canopy", "history", "query", "?prices//", "--json",
                                   "--history-dir", "/history")
        assert code == 0, output
        rows = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
        assert [(r["path"], r["op"], r.get("value")) for r in rows] == [
            ("prices/eur", "add", 1), ("prices/eur", "set", 3), ("prices/gbp", "add", 4),
            ("prices/usd", "add", 2), ("prices/usd", "remove", None),
        ], output
    except BaseException:
        for service in project.containers:
            print(f"--- {service} ---\n{project.logs(service)[-3000:]}")
        raise
    finally:
        project.down()
    print(f"[deploy] fan-out: primary cluster of 2 nodes formed in {formed_in:.1f} s; both killed and started "
          f"again: secondary in step {resync:.1f} s after docker start; its subscriber saw {seen}")


def _seen(seen: list[tuple[str, Any]], event: tuple[str, Any]) -> Callable[[], Awaitable[bool]]:
    async def probe() -> bool:
        return event in seen

    return probe
