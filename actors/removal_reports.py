"""A gateway's side of the partitions' removal policies (:mod:`topics.removal_tracker`).

About every :data:`INTERVAL` seconds, and soon after one of its sessions closes, the
gateway sends each partition a :class:`~topics.protocol.RemovalFacts` report answering the
interest that partition last gave it (:func:`sessions.removal_facts.gather`). The answer,
a :class:`~topics.protocol.RemovalWatch`, is the partition's interest now (a report that
answered an older one is sent again at once) and the ``remove`` clauses of due policies
it hands this gateway: each is carried out as a ``remove`` is, across partitions, removing
only the topics the creator's roles (at creation) may MODIFY_TOPIC.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Collection
from typing import Any

from actors.link import PartitionLink
from sessions.registry import SessionRegistry
from sessions.removal_facts import gather
from sessions.security import PathPermission
from topics.protocol import FetchTopics, Ok, RemovalWatch, RemoveTopics, Result
from topics.selectors import parse_selector

log = logging.getLogger("canopy.gateway")

#: seconds between two rounds of reports
INTERVAL = 1.0
#: seconds at least between two rounds (a burst of closing sessions makes one)
MIN_GAP = 0.1
#: topics removed per operation when a removal names each permitted topic
REMOVE_CHUNK = 500

_NOTHING = RemovalWatch(0, [], [], [], [])


class RemovalReports:
    """Reports to every partition of ``link`` on ``registry``'s sessions (``internal()``:
    the session ids the gateway runs for itself, not counted)."""

    def __init__(
        self, link: PartitionLink, registry: SessionRegistry, internal: Callable[[], Collection[str]],
    ) -> None:
        self.link = link
        self.registry = registry
        self.internal = internal
        self.watches: list[RemovalWatch] = [_NOTHING] * link.count
        self.removals = 0
        self._wake = asyncio.Event()
        self._task: asyncio.Future[None] | None = None

    def start(self) -> None:
        if self._task is None and self.link.count:
            self._task = asyncio.ensure_future(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def session_closed(self) -> None:
        """Report soon: a creator or a matching session may have gone."""
        self._wake.set()

    async def _run(self) -> None:
        while True:
            try:
                await self.report_all()
            except Exception as e:  # noqa: BLE001 - a partition away: the next round
                log.debug("removal facts not reported: %s", e)
            await asyncio.sleep(MIN_GAP)
            try:
                await asyncio.wait_for(self._wake.wait(), INTERVAL - MIN_GAP)
            except TimeoutError:
                pass
            self._wake.clear()

    async def report_all(self) -> None:
        """One round: a report to every partition, once more to those whose interest changed."""
        results = await asyncio.gather(*(self._report(i) for i in range(self.link.count)))
        again = [i for i, changed in enumerate(results) if changed]
        if again:
            await asyncio.gather(*(self._report(i) for i in again))

    async def _report(self, index: int) -> bool:
        """Report to partition ``index``; whether it answered a newer interest."""
        sent = self.watches[index]
        future = self.link.request(index, gather(self.registry, sent, self.internal()))
        self.link.flush()
        result: Result = await future
        if not isinstance(result, Ok) or not isinstance(result.value, RemovalWatch):
            return False
        watch = result.value
        self.watches[index] = watch
        for selector, roles in watch.removals:
            asyncio.ensure_future(self._remove(selector, roles))
        return watch.version != sent.version

    async def _remove(self, text: str, roles: list[str] | None) -> None:
        """A due ``remove`` clause, with the permissions the creator's ``roles`` give."""
        try:
            selector = parse_selector(text)
            if roles is None:
                paths = None
            else:
                rows = await self._all(self.link.everywhere(selector, FetchTopics(text, False, False)))
                permissions, held = self.registry.permissions, frozenset(roles)
                paths = [row.path for part in rows for row in part
                         if permissions.has(held, PathPermission.MODIFY_TOPIC, row.path)]
            if paths is None:
                await self._all(self.link.everywhere(selector, RemoveTopics(text)))
            for start in range(0, len(paths or ()), REMOVE_CHUNK):
                chunk = parse_selector("#" + "////".join(">" + p for p in (paths or [])[start:start + REMOVE_CHUNK]))
                await self._all(self.link.everywhere(chunk, RemoveTopics(str(chunk))))
            self.removals += 1
        except Exception as e:  # noqa: BLE001 - logged: nobody waits for it
            log.warning("a removal policy's remove %r failed: %s", text, e)

    async def _all(self, futures: list[asyncio.Future[Result]]) -> list[Any]:
        self.link.flush()
        out = []
        for result in await asyncio.gather(*futures):
            if not isinstance(result, Ok):
                raise RuntimeError(f"{result.code}: {result.message}")
            out.append(result.value)
        return out
