"""Durability and recovery on one node, checked: processes are killed with
SIGKILL while publishers write and subscribers read, and the checker
(tests/checking.py) compares what was acknowledged with what is there.

The short variants run with every ``make test``; ``make soak`` runs longer
ones with repeated faults.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import canopy
from tests.checking import Workload, check, finish, progressed
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, Server, cli, serving
from tests.e2e.test_supervision import _actor_pid, _descendants, _instance_gone, _session_dir

RECOVERY = 60.0  # seconds a recovery may take here (two busy cores)


def back(srv: Server, actor: str, seen: int) -> bool:
    """Whether serve has said ``actor`` is back more than ``seen`` times."""
    return sum(f"({actor}) is back and serving" in line for line in srv.lines) > seen


async def run_with(srv: Server, fault: object, writes: int, **shape: Any) -> Workload:
    """The workload writing, the fault, the workload writing again (``writes`` more acknowledged
    writes on every topic before the fault and after it), then every final value read and seen
    by the subscribers."""
    work = Workload([srv.url], ADMIN, **shape)  # type: ignore[arg-type]
    await work.start()
    try:
        await progressed(work, writes=writes)
        await asyncio.get_running_loop().run_in_executor(None, fault)  # type: ignore[arg-type]
        await progressed(work, writes=writes)
        await finish(work, urls=[srv.url])
    finally:
        await work.close()
    return work


def kill_actor(srv: Server, actor: str) -> None:
    seen = sum(f"({actor}) is back and serving" in line for line in srv.lines)
    os.kill(_actor_pid(srv.proc.pid, actor), signal.SIGKILL)
    wait_for(lambda: back(srv, actor, seen), RECOVERY, f"the {actor} to be back")


async def test_a_killed_serve_restarts_with_everything_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    first = Server(data, "--partitions", "2").wait_ready()
    port = first.port
    second: Server | None = None

    def kill_and_restart() -> None:
        nonlocal second
        known, session = _descendants(first.proc.pid), _session_dir(first.proc.pid)
        first.proc.send_signal(signal.SIGKILL)
        wait_for(lambda: _instance_gone(known, session), RECOVERY, "the killed instance's processes to go", 0.25)
        first.stop()
        second = Server(data, "--partitions", "2", port=port).wait_ready()

    try:
        # the clients wait for the instance to come back as long as it may take on a loaded machine
        # (the old one's processes go, then a whole start): past their reconnect timeout they give up
        work = await run_with(first, kill_and_restart, 20, publishers=2, topics=8, subscribers=2,
                              reconnect_timeout=180)
    finally:
        first.stop()
        if second is not None:
            assert second.stop() == 0, second.output
    assert second is not None and "found a stale server.json" in second.output
    report = check(work.history)
    print(f"[durability] canopy serve killed and restarted: {report}")
    assert report.valid, report
    assert report.acknowledged > 100, report


async def test_configuration_changes_are_made_whole_or_refused_when_the_log_writer_is_killed(
    tmp_path: Path,
) -> None:
    """Views created one after another while the configuration log's writer is killed
    (SIGKILL), then serve is killed and restarted: exactly the views whose creation was
    answered exist afterwards, each whole (listed and evaluated); a creation that failed,
    even one cut off by the kill, was not made."""
    data = tmp_path / "data"
    srv = Server(data, "--partitions", "2").wait_ready()
    answered: list[str] = []
    failed: list[str] = []
    try:
        async with canopy.connect(srv.url, *ADMIN, reconnect_timeout=0) as s:
            await s.topics.add_and_set("src/x", 1)
            k = 0

            async def create() -> None:
                nonlocal k
                k += 1
                try:
                    await s.views.create(f"v{k}", f"map ?src// to v{k}/<path(1)>")
                    answered.append(f"v{k}")
                except canopy.CanopyError:
                    failed.append(f"v{k}")
                    await asyncio.sleep(0.05)

            while len(answered) < 5:
                await create()
            killer = asyncio.get_running_loop().run_in_executor(None, kill_actor, srv, "ConfigLogActor")
            while not killer.done():
                await create()
            await killer
            while len(answered) < 10:  # and the log takes changes again
                await create()
    finally:
        known, session = _descendants(srv.proc.pid), _session_dir(srv.proc.pid)
        srv.proc.send_signal(signal.SIGKILL)  # and then the whole instance, with no goodbye
        wait_for(lambda: _instance_gone(known, session), RECOVERY, "the killed instance's processes to go", 0.25)
        srv.stop()
    again = Server(data, "--partitions", "2").wait_ready()
    try:
        async with canopy.connect(again.url, *ADMIN) as s:
            listed = {v.name for v in await s.views.list()}
            assert listed == set(answered), (answered, failed, listed)  # a refusal is never made later
            refs = await s.topics.fetch("?v.*//")
            paths = {r.path for r in refs}
            assert all(f"{name}/x" in paths for name in listed), (listed, paths)  # whole: evaluated too
    finally:
        assert again.stop() == 0, again.output
    print(f"[durability] log writer killed: {len(answered)} views answered, {len(failed)} refused")
    assert len(answered) >= 10, (answered, failed)


def test_a_torn_journal_tail_is_cut_at_the_last_good_record(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = Server(data, "--partitions", "1").wait_ready()
    try:
        for i in range(20):
            assert cli("topic", "add", f"keep/{i}", "--type", "STRING", url=srv.url).returncode == 0
        assert cli("topic", "set", "keep/0", "kept", url=srv.url).returncode == 0
    finally:
        assert srv.stop() == 0, srv.output
    segments = sorted((data / "journal" / "partition-0").glob("segment-*.log"))
    assert segments, list((data / "journal").rglob("*"))
    with open(segments[-1], "ab") as f:
        f.write(b"\x20\x00\x00\x00\xde\xad\xbe\xefhalf a record")  # a crash in the middle of a write
    again = Server(data, "--partitions", "1").wait_ready()
    try:
        fetched = cli("topic", "fetch", "?keep//", "--json", url=again.url)
        assert fetched.returncode == 0 and fetched.stdout.count("\n") == 20, fetched.stdout
        assert '"kept"' in fetched.stdout
    finally:
        assert again.stop() == 0, again.output
    assert any("cut" in line.lower() or "trunc" in line.lower() for line in again.lines), again.output


@pytest.mark.soak
async def test_soak_repeated_partition_kills_lose_nothing_acknowledged(tmp_path: Path) -> None:
    srv = Server(tmp_path / "data", "--partitions", "2").wait_ready()

    def kill_repeatedly() -> None:
        for _ in range(4):  # fewer than the crash-loop limit per minute
            kill_actor(srv, "PartitionActor")
            time.sleep(15)

    try:
        work = await run_with(srv, kill_repeatedly, 60, publishers=4, topics=25, subscribers=4, rate=None)
    finally:
        assert srv.stop() == 0, srv.output
    report = check(work.history)
    print(f"[durability] soak, 4 partition kills: {report}")
    assert report.valid, report


# one serve, its actors killed one after the other (kept last: the serve lives until the module ends)

@pytest.fixture(scope="module")
def killed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """One serve for the tests that kill one of its actors each: it is killed again and again, and
    must serve through every kill and still stop cleanly (status 0)."""
    yield from serving(tmp_path_factory, "killed", "--partitions", "2")


@pytest.mark.parametrize("actor", ["PartitionActor", "GatewayActor", "ControllerActor"])
async def test_a_killed_actor_loses_nothing_acknowledged(killed: Server, actor: str) -> None:
    srv = killed
    work = await run_with(srv, lambda: kill_actor(srv, actor), 20, publishers=2, topics=8, subscribers=2,
                          branch=f"check-{actor}")
    report = check(work.history)
    print(f"[durability] {actor} killed: {report}")
    assert report.valid, report
    assert report.acknowledged > 100, report  # it did publish, before and after the fault


async def test_reference_topics_come_back_after_the_evaluator_is_killed(killed: Server) -> None:
    srv = killed
    async with canopy.connect(srv.url, *ADMIN) as s:
        for i in range(5):
            await s.topics.add_and_set(f"src/{i}", {"v": i})
        await s.views.create("mirror", "map ?src// to ref/<path(1)>")

        async def refs() -> dict[str, object]:
            return {r.path: r.value for r in await s.topics.fetch("?ref//")}

        async def until(expected: dict[str, object]) -> None:
            end = time.monotonic() + RECOVERY
            while (found := await refs()) != expected:
                assert time.monotonic() < end, f"reference topics {found}, expected {expected}"
                await asyncio.sleep(0.2)

        await until({f"ref/{i}": {"v": i} for i in range(5)})
        await asyncio.get_running_loop().run_in_executor(None, kill_actor, srv, "ViewEvaluatorActor")
        await s.topics.set("src/0", {"v": 100})  # a change the restarted evaluator must see
        await until({"ref/0": {"v": 100}, **{f"ref/{i}": {"v": i} for i in range(1, 5)}})
