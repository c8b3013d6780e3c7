"""Missing-topic notifications with fan-out, between real `canopy serve` processes.

Four servers: P and P2 are primaries; S is a secondary of both (and has a connection to P
whose password is wrong, so never a session); T is a secondary of S (three tiers).
Each of the five missing-topic propagation conditions (ARCHITECTURE.md) is shown necessary by a
request where it alone is false.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import canopy
from canopy import errors
from tests.conftest import wait_for
from tests.e2e.conftest import ADMIN, ADMIN_PASSWORD, Server
from topics.selectors import parse_selector

WAIT_MS = 30_000  # the secondaries' missing_topic_timeout_ms: a proceed by timeout would take this long


def connection(name: str, primary: Server, links: list[str], principal: str = "admin",
               password: str = ADMIN_PASSWORD, retry_delay: float = 0.2) -> str:
    return (f"[fanout.{name}]\nprimaries = [{json.dumps(primary.url)}]\nlinks = {json.dumps(links)}\n"
            f'principal = "{principal}"\npassword = "{password}"\nretry_delay = {retry_delay}\n'
            "reconnect_timeout = 5\n")


class Servers:
    def __init__(self, root: Path) -> None:
        self.p = Server(root / "p", "--partitions", "2", "--server-name", "P")
        self.p2 = Server(root / "p2", "--partitions", "1", "--server-name", "P2")
        s_config = root / "s.toml"
        s_config.write_text(
            f"missing_topic_timeout_ms = {WAIT_MS}\n"
            + connection("main", self.p, ["?A//", "?Q/L//", "?N//"])
            + connection("other", self.p2, ["?A/X2//"])
            # refused by P: a principal it does not know, trying once a minute (P's login guard
            # must not slow the tests' own logins from this address)
            + connection("broken", self.p, ["?W//"], principal="nobody", password="not-the-password",
                         retry_delay=60)
        )
        self.s = Server(root / "s", "--partitions", "2", "--server-name", "S", "--config", str(s_config))
        t_config = root / "t.toml"
        t_config.write_text(f"missing_topic_timeout_ms = {WAIT_MS}\n" + connection("up", self.s, ["?A//"]))
        self.t = Server(root / "t", "--partitions", "1", "--server-name", "T", "--config", str(t_config))
        self.all = [self.p, self.p2, self.s, self.t]

    def stop(self) -> None:
        for srv in self.all:
            srv.stop()


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    group = Servers(tmp_path_factory.mktemp("fanout-missing"))
    try:
        for srv in group.all:
            srv.wait_ready(180)
        _seed(group)
        yield group
    finally:
        group.stop()


def _seed(group: Servers) -> None:
    async def topics() -> None:
        async with canopy.connect(group.p.url, *ADMIN) as p, canopy.connect(group.p2.url, *ADMIN) as p2:
            for path in ("A", "A/B", "A/C", "Q/Z", "A/X2/dup"):
                await p.topics.add_and_set(path, path.lower())
            await p2.topics.add_and_set("A/X2", "from P2")
            await p2.topics.add_and_set("A/X2/dup", "from P2")

    asyncio.run(topics())
    everything = {"A", "A/B", "A/C", "A/X2", "A/X2/dup"}
    for url, want in ((group.s.url, everything), (group.t.url, everything)):
        wait_for(lambda u=url, w=want: set(asyncio.run(_paths(u, "?A//"))) == w, 60,  # type: ignore[misc]
                 f"{url} to mirror the A branch", describe=lambda u=url: asyncio.run(_paths(u, "?A//")))
    wait_for(lambda: _states(group.s.url) == {"main": "connected", "other": "connected", "broken": "retrying"}, 30,
             "S's connections", describe=lambda: _states(group.s.url))


async def _paths(url: str, selector: str) -> list[str]:
    async with canopy.connect(url) as s:
        return [t.path for t in await s.topics.fetch(selector)]


def _states(url: str) -> dict[str, str]:
    async def listed() -> list[dict[str, Any]]:
        async with canopy.connect(url, *ADMIN) as s:
            return await s.fanout.list()

    return {c["name"]: c["state"] for c in asyncio.run(listed())}


class Recorder:
    """A handler that records every notification and answers ``answer`` (creating the
    topic first when ``create``)."""

    def __init__(self, session: canopy.Session, answer: bool = True, create: bool = False) -> None:
        self.session, self.answer, self.create = session, answer, create
        self.heard: list[Any] = []

    async def __call__(self, notification: Any) -> bool:
        self.heard.append(notification)
        if self.create:
            path = parse_selector(notification.selector).path_prefix
            await self.session.topics.add_and_set(path, f"made on {notification.servers[-1]}")
        return self.answer

    def selectors(self) -> list[str]:
        return [n.selector for n in self.heard]


def test_the_missing_topic_propagation_flow(servers: Servers) -> None:
    """A, A/B, A/C on the primary; a subscription to A/D on the secondary; the primary's
    handler creates it; the secondary's subscriber receives it."""

    async def flow() -> None:
        async with (
            canopy.connect(servers.p.url, *ADMIN) as control,
            canopy.connect(servers.s.url, properties={"app": "propagation"}) as user,
        ):
            handler = Recorder(control, create=True)
            async with await control.missing_topics.add_handler("A", handler):
                sub = await user.topics.subscribe("A/D")
                event = await sub.next(timeout=20)
                assert (event.kind, event.path, event.value) == ("subscribed", "A/D", "made on P")
            [n] = handler.heard
            assert (n.selector, n.servers, n.session_id, n.path) == (">A/D", ("S", "P"), user.session_id, "A")
            assert n.properties["app"] == "propagation" and n.properties["$SessionId"] == user.session_id

    asyncio.run(flow())


def test_each_missing_topic_propagation_condition_is_necessary(servers: Servers) -> None:
    async def conditions() -> None:
        async with canopy.connect(servers.p.url, *ADMIN) as control, canopy.connect(servers.s.url) as user:
            handler = Recorder(control)
            for path in ("A", "Q", "W", "R"):
                await control.missing_topics.add_handler(path, handler)

            async def asks(selector: str) -> bool:
                before = len(handler.heard)
                started = time.monotonic()
                await user.topics.fetch(selector)
                assert time.monotonic() - started < WAIT_MS / 1000 / 2, f"{selector} waited for a timeout"
                return handler.selectors()[before:] == [selector if selector[0] in "?*#>" else f">{selector}"]

            assert await asks("?Q/L//")  # every condition holds: the primary's handler hears of it
            assert not await asks("W/x")  # 1: no session to the primary (that connection is refused)
            assert not await asks("R/x")  # 2: no link intersects the selector
            assert not await asks("A/X2")  # 3: a replica (from P2) matches the selector and the link ?A//
            assert not await asks("?Q//")  # 4: the primary has Q/Z, which matches (not mirrored: outside ?Q/L//)
            forwarded = await _forwarded(servers.s.url)
            assert not await asks("N/x")  # 5: no handler on the primary for N ...
            assert await _forwarded(servers.s.url) == forwarded + 1  # ... though it was passed on
            assert await asks("A/fresh")  # and once more all hold

    asyncio.run(conditions())


def test_two_links_mirroring_one_topic_are_reported_and_the_first_configured_holds_it(servers: Servers) -> None:
    async def listed() -> list[dict[str, Any]]:
        async with canopy.connect(servers.s.url, *ADMIN) as s:
            return await s.fanout.list()

    def contested() -> dict[str, list[str]]:
        return {c["name"]: [p for link in c["links"] for p in link["contested"]] for c in asyncio.run(listed())}

    # whichever claimed second was told (the order the two arrive in is a race)
    wait_for(lambda: sorted((c := contested())["main"] + c["other"]) == ["A/X2/dup"] and c["broken"] == [], 30,
             "the second link to report the path", describe=contested)
    assert asyncio.run(_values(servers.s.url, ">A/X2/dup")) == ["a/x2/dup"]  # main (P) was configured first


async def _values(url: str, selector: str) -> list[Any]:
    async with canopy.connect(url) as s:
        return [t.value for t in await s.topics.fetch(selector)]


async def _forwarded(url: str) -> int:
    async with canopy.connect(url, *ADMIN) as s:
        (main,) = [c for c in await s.fanout.list() if c["name"] == "main"]
    return int(main["forwarded"])


def test_handlers_on_the_secondary_and_the_primary_are_both_asked_and_any_cancel_abandons(
    servers: Servers,
) -> None:
    async def both() -> None:
        async with (
            canopy.connect(servers.p.url, *ADMIN) as on_p,
            canopy.connect(servers.s.url, *ADMIN) as on_s,
            canopy.connect(servers.s.url) as user,
        ):
            primary, secondary = Recorder(on_p), Recorder(on_s)
            async with await on_p.missing_topics.add_handler("A/both", primary), \
                    await on_s.missing_topics.add_handler("A/both", secondary):
                assert await user.topics.fetch("A/both/x") == []
                assert primary.selectors() == secondary.selectors() == [">A/both/x"]
                assert secondary.heard[0].servers == ("S",) and primary.heard[0].servers == ("S", "P")
                secondary.answer = False
                with pytest.raises(errors.RequestCancelledError):
                    await user.topics.fetch("A/both/y")
                secondary.answer, primary.answer = True, False
                with pytest.raises(errors.RequestCancelledError):
                    await user.topics.subscribe("A/both/z")
                primary.answer = True
                # a topic of the secondary's own matches: its handler is not asked, the primary's is
                await on_s.topics.add_and_set("A/both/local", "only on S")
                assert [t.path for t in await user.topics.fetch("?A/both//")] == ["A/both/local"]
                assert primary.selectors()[-1] == "?A/both//" and secondary.selectors()[-1] != "?A/both//"

    asyncio.run(both())


def test_three_tiers_show_every_hop(servers: Servers) -> None:
    async def tiers() -> None:
        async with (
            canopy.connect(servers.p.url, *ADMIN) as on_p,
            canopy.connect(servers.s.url, *ADMIN) as on_s,
            canopy.connect(servers.t.url) as user,
        ):
            primary, middle = Recorder(on_p, create=True), Recorder(on_s)
            async with await on_p.missing_topics.add_handler("A/tier", primary), \
                    await on_s.missing_topics.add_handler("A/tier", middle):
                sub = await user.topics.subscribe("A/tier/x")
                event = await sub.next(timeout=30)
                assert (event.kind, event.path, event.value) == ("subscribed", "A/tier/x", "made on P")
            assert [n.servers for n in primary.heard] == [("T", "S", "P")]
            assert [n.servers for n in middle.heard] == [("T", "S")]
            assert primary.heard[0].session_id == user.session_id

    asyncio.run(tiers())


def test_a_link_lost_while_a_notification_is_out_completes_as_proceed(servers: Servers) -> None:
    """Last in the module: it kills the primary P."""

    async def lost() -> None:
        async with canopy.connect(servers.p.url, *ADMIN, reconnect_timeout=0) as on_p, \
                canopy.connect(servers.s.url) as user:
            asked = asyncio.Event()

            async def never(notification: Any) -> bool:
                asked.set()
                await asyncio.sleep(3600)
                return False

            await on_p.missing_topics.add_handler("A/lost", never)
            fetch = asyncio.ensure_future(user.topics.fetch("A/lost/x"))
            await asyncio.wait_for(asked.wait(), 20)
            started = time.monotonic()
            servers.p.proc.kill()  # canopy serve, SIGKILL: its watchdog takes its Ray with it
            assert await asyncio.wait_for(fetch, WAIT_MS / 1000) == []
            assert time.monotonic() - started < WAIT_MS / 1000 - 5, "it proceeded by the timeout, not the loss"

    asyncio.run(lost())
    wait_for(lambda: any("got no answer from the primary" in line for line in servers.s.lines), 30,
             "S to log the lost notification")
