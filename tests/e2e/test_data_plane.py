"""The data plane under load, checked: every acknowledged update reaches every
subscriber, once, in order.

Publishers pipeline sets of increasing numbers to their own topics (CONFLATION
off, so nothing may be merged away) while subscribers, one of them joining late,
record what they receive. A checker then compares, per subscriber and topic,
what arrived with what was acknowledged: an early subscriber must have exactly
the acknowledged sequence; the late one a snapshot followed by exactly the rest.
The short variant runs with every ``make test``; ``make soak`` runs the long one.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

import canopy
from tests.e2e.conftest import ADMIN, Server, serving

WINDOW = 200  # sets outstanding per publisher


@pytest.fixture(scope="module")
def roomy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose queues hold a burst (the checker wants every update delivered)."""
    yield from serving(tmp_path_factory, "data", "--partitions", "2", "--queue-limit", "200000")


class Subscriber:
    def __init__(self, session: Any) -> None:
        self.session = session
        self.seen: dict[str, list[int]] = defaultdict(list)
        self.task: asyncio.Task[None] | None = None

    async def start(self, selector: str) -> None:
        subscription = await self.session.topics.subscribe(selector)

        async def read() -> None:
            async for event in subscription:
                if event.kind in ("subscribed", "value") and event.value is not None:
                    self.seen[event.path].append(event.value)

        self.task = asyncio.ensure_future(read())


async def publish(session: Any, paths: list[str], seconds: float, acked: dict[str, list[int]]) -> None:
    """Set 1, 2, 3, ... on each path in turn until ``seconds`` pass; note what was acknowledged."""
    outstanding: list[tuple[str, int, asyncio.Future[None]]] = []
    end = time.monotonic() + seconds
    n = 0
    while time.monotonic() < end:
        n += 1
        for path in paths:
            outstanding.append((path, n, session.topics.set(path, n)))
        if len(outstanding) >= WINDOW:
            await settle(outstanding[: len(outstanding) // 2], acked)
            del outstanding[: len(outstanding) // 2]
    await settle(outstanding, acked)


async def settle(pending: list[tuple[str, int, asyncio.Future[None]]], acked: dict[str, list[int]]) -> None:
    for path, n, future in pending:
        await future  # a failed set fails the test: nothing here may be refused
        acked[path].append(n)


async def run(url: str, seconds: float, publishers: int, topics: int, subscribers: int, branch: str) -> None:
    async with canopy.connect(url, *ADMIN) as admin:
        for p in range(publishers):
            for t in range(topics):
                await admin.topics.add(f"{branch}/p{p}/t{t}", "INT64", {"CONFLATION": "off"})
    sessions = [await canopy.connect(url, *ADMIN) for _ in range(publishers + subscribers + 1)]
    try:
        early = [Subscriber(s) for s in sessions[publishers : publishers + subscribers]]
        for sub in early:
            await sub.start(f"?{branch}//")
        late = Subscriber(sessions[-1])
        acked: dict[str, list[int]] = defaultdict(list)
        paths = [[f"{branch}/p{p}/t{t}" for t in range(topics)] for p in range(publishers)]
        work = [asyncio.ensure_future(publish(sessions[p], paths[p], seconds, acked)) for p in range(publishers)]
        await asyncio.sleep(seconds / 2)
        await late.start(f"?{branch}//")
        await asyncio.gather(*work)
        everything = [path for group in paths for path in group]
        assert sum(len(acked[p]) for p in everything) > 0

        def caught_up(sub: Subscriber) -> bool:
            return all(sub.seen.get(p, [None])[-1] == acked[p][-1] for p in everything)

        deadline = time.monotonic() + 60
        while not all(caught_up(s) for s in [*early, late]):
            if time.monotonic() > deadline:
                behind = {p: (acked[p][-1], s.seen.get(p, [None])[-1]) for s in [*early, late] for p in everything
                          if s.seen.get(p, [None])[-1] != acked[p][-1]}
                raise AssertionError(f"subscribers did not catch up (topic: acknowledged, last seen): {behind}")
            await asyncio.sleep(0.05)
        for i, sub in enumerate(early):
            for path in everything:
                assert sub.seen[path] == acked[path], f"early subscriber {i}, {path}: gap, repeat or reorder"
        for path in everything:
            got = late.seen[path]
            start = acked[path].index(got[0])  # the snapshot: an acknowledged value ...
            assert got == acked[path][start:], f"late subscriber, {path}: not the snapshot and then every update"
    finally:
        for session in sessions:
            await session.close()


async def test_every_acknowledged_update_arrives_once_in_order(roomy: Server) -> None:
    await run(roomy.url, seconds=4, publishers=2, topics=10, subscribers=3, branch="check")


@pytest.mark.soak
async def test_soak_every_acknowledged_update_arrives_once_in_order(roomy: Server) -> None:
    await run(roomy.url, seconds=120, publishers=4, topics=25, subscribers=8, branch="soak")

