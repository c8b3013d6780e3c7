"""A checker in the style of Jepsen's, for canopy's durability and recovery tests.

Publishers write increasing counters (1, 2, 3, ...) to topics of their own and
record, for every write, whether it was acknowledged, refused, or ended with an
unknown outcome (the connection or the partition went away before the answer).
Subscribers record every value they see per topic. After the faults, a final
read gives each topic's value. :func:`check` then reports:

* **lost** -- a topic whose final value is below its last acknowledged write:
  an acknowledged write was lost (a later value overwrites an earlier one, so
  the final value must be at least the last acknowledged one);
* **unexpected** -- a value a subscriber saw, or the final read returned,
  that no publisher ever sent;
* **out of order** -- a subscriber saw a topic's values go backwards (seeing
  the same value again, as after a reconnection, is not out of order);
* **recovered** -- writes with an unknown outcome that the final value
  covers (it is at least theirs: applied, or overwritten by a later write):
  informative, not an error.

After the server stops, :func:`check_journals` reads every node's copy of
each partition's journal (``canopy journal check``'s comparison,
:mod:`replication.journal_agreement`): **acknowledged in two primaries of one
epoch** -- two copies hold different records at one epoch and sequence.

:class:`Workload` drives publishers and subscribers against a broker while a
test does its damage, and collects the :class:`History`.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import canopy
from canopy import errors
from tests.conftest import wait_for


@dataclass
class History:
    #: topic -> values whose set was acknowledged, in the order sent
    acknowledged: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    #: topic -> values whose set ended with an unknown outcome
    indeterminate: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    #: topic -> every value sent
    sent: dict[str, set[int]] = field(default_factory=lambda: defaultdict(set))
    #: subscriber -> topic -> values seen, in order
    observed: dict[int, dict[str, list[int]]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))
    #: topic -> value read at the end (None: the topic was not there)
    final: dict[str, int | None] = field(default_factory=dict)
    refused: int = 0


@dataclass
class Report:
    topics: int
    acknowledged: int
    indeterminate: int
    lost: dict[str, tuple[int, int | None]]  # topic -> (last acknowledged, final)
    unexpected: list[tuple[str, int]]
    out_of_order: list[tuple[int, str, int, int]]  # (subscriber, topic, value, after)
    recovered: int

    @property
    def valid(self) -> bool:
        return not self.lost and not self.unexpected and not self.out_of_order

    def __str__(self) -> str:
        return (
            f"{self.topics} topics, {self.acknowledged} acknowledged writes, {self.indeterminate} with an unknown "
            f"outcome ({self.recovered} of them applied); lost {len(self.lost)} {dict(list(self.lost.items())[:5])}, "
            f"unexpected {len(self.unexpected)} {self.unexpected[:5]}, "
            f"out of order {len(self.out_of_order)} {self.out_of_order[:5]}"
        )


def check(history: History) -> Report:
    lost: dict[str, tuple[int, int | None]] = {}
    unexpected: list[tuple[str, int]] = []
    recovered = 0
    topics = set(history.sent)
    for topic in topics:
        final = history.final.get(topic)
        acked = history.acknowledged.get(topic, [])
        if acked and (final is None or final < max(acked)):
            lost[topic] = (max(acked), final)
        if final is not None and final not in history.sent[topic]:
            unexpected.append((topic, final))
        if final is not None:
            recovered += sum(1 for v in history.indeterminate.get(topic, []) if v <= final)
    out_of_order = []
    for subscriber, seen in history.observed.items():
        for topic, values in seen.items():
            sent = history.sent.get(topic, set())
            unexpected += [(topic, v) for v in values if v not in sent]
            for before, after in zip(values, values[1:]):
                if after < before:
                    out_of_order.append((subscriber, topic, after, before))
    return Report(
        topics=len(topics),
        acknowledged=sum(len(v) for v in history.acknowledged.values()),
        indeterminate=sum(len(v) for v in history.indeterminate.values()),
        lost=lost,
        unexpected=unexpected,
        out_of_order=out_of_order,
        recovered=recovered,
    )


@dataclass
class JournalReport:
    """What :func:`check_journals` compared: each partition's :class:`~replication.journal_agreement.Agreement`."""

    agreements: list[Any]

    @property
    def compared(self) -> int:
        """(epoch, sequence) pairs held by two copies or more, over every partition."""
        return sum(a.compared for a in self.agreements)

    @property
    def valid(self) -> bool:
        """No two primaries acknowledged in one epoch (and no copy went back an epoch)."""
        return all(a.agree for a in self.agreements)

    def __str__(self) -> str:
        findings = [str(f) for a in self.agreements for f in (*a.divergences, *a.regressions)]
        epochs = sorted({e for a in self.agreements for e in a.epochs}) or ["-"]
        head = (f"{len(self.agreements)} partitions, epochs {epochs[0]}..{epochs[-1]}, "
                f"{sum(a.records for a in self.agreements)} records in {sum(len(a.nodes) for a in self.agreements)} "
                f"copies, {self.compared} held by two copies or more compared: "
                + ("no two primaries acknowledged in one epoch" if self.valid else f"{len(findings)} finding(s)"))
        return "\n".join([head, *(f"  {a}" for a in self.agreements), *(f"  {f}" for f in findings)])


def check_journals(data_dir: Any) -> JournalReport:
    """Compare every node's copy of each partition's journal under a stopped server's ``data_dir``."""
    from replication.cli import agreements

    return JournalReport(agreements(data_dir))


#: errors after which a write's outcome is unknown (it may or may not have been applied)
INDETERMINATE = (
    errors.UnavailableError, errors.ConnectionInterruptedError, errors.SessionClosedError, errors.ConnectError,
    TimeoutError,
)


#: rounds a second each publisher of a :class:`Workload` writes by default (a round sets each
#: of its topics once)
RATE = 20.0


class Workload:
    """Publishers and subscribers on ``urls`` (the client reconnects between them).

    Each publisher writes ``rate`` rounds a second (every one of its topics once a round; with
    10 topics, 200 writes a second), so that writes are in flight at every moment of a fault
    while the cluster and the two cores it shares with the other tests are not saturated:
    unpaced, two publishers kept one embedded serve at about 9,000 writes a second for the
    whole test, and its CPU went on that. ``rate=None`` writes as fast as answers come (the
    soak variants, where load is the point). A publisher that falls behind its pace goes on
    from where it is (no burst to catch up)."""

    def __init__(
        self, urls: list[str], admin: tuple[str, str], *, publishers: int = 2, topics: int = 10,
        subscribers: int = 2, branch: str = "check", window: int = 50, reconnect_timeout: float = 60.0,
        rate: float | None = RATE,
    ) -> None:
        if rate is not None and not rate > 0:
            raise ValueError(f"a workload's rate is rounds a second, above 0 (or None: unpaced), not {rate!r}")
        self.urls = urls
        self.rate = rate
        self.admin = admin
        self.branch = branch
        self.window = window
        self.reconnect_timeout = reconnect_timeout
        self.paths = [[f"{branch}/p{p}/t{t}" for t in range(topics)] for p in range(publishers)]
        self.subscriber_count = subscribers
        self.history = History()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._sessions: list[Any] = []
        #: why a publisher stopped before it was told to
        self.ended: list[str] = []

    async def _connect(self) -> Any:
        session = await canopy.connect(self.urls, *self.admin, reconnect_timeout=self.reconnect_timeout)
        self._sessions.append(session)
        return session

    async def start(self) -> None:
        admin = await self._connect()
        for group in self.paths:
            for path in group:
                await admin.topics.add(path, "INT64", {"CONFLATION": "off"})
        for i in range(self.subscriber_count):
            session = await self._connect()
            seen = self.history.observed[i]

            def on_event(event: Any, seen: dict[str, list[int]] = seen) -> None:
                if event.kind in ("subscribed", "value") and isinstance(event.value, int):
                    seen[event.path].append(event.value)

            await session.topics.subscribe(f"?{self.branch}//", callback=on_event)
        for group in self.paths:
            session = await self._connect()
            self._tasks.append(asyncio.ensure_future(self._publish(session, group)))

    async def _publish(self, session: Any, paths: list[str]) -> None:
        n = 0
        pending: list[tuple[str, int, asyncio.Future[None]]] = []
        loop = asyncio.get_running_loop()
        due = loop.time()
        while not self._stop.is_set():
            n += 1
            refused_now = False
            for path in paths:
                self.history.sent[path].add(n)
                try:
                    pending.append((path, n, session.topics.set(path, n)))
                except errors.CanopyError:  # refused before it left: the session is closed or closing
                    self.history.indeterminate[path].append(n)
                    refused_now = True
            if refused_now:
                if session.closed:
                    self.ended.append(f"a publisher's session ended: {session.close_reason}")
                    break
                await asyncio.sleep(0.05)  # never spin (and grow the history) while refused
            if len(pending) >= self.window:
                if await self._settle(pending):
                    # a partition failing over answers UNAVAILABLE at once until its new primary is
                    # reached: back off a little, as a client should, rather than spin
                    await asyncio.sleep(0.02)
                pending = []
            if self.rate is None:
                await asyncio.sleep(0)
                continue
            due = max(due + 1 / self.rate, loop.time())
            try:  # the next round's time, or at once when told to stop
                await asyncio.wait_for(self._stop.wait(), due - loop.time())
            except asyncio.TimeoutError:
                pass
        await self._settle(pending)

    async def _settle(self, pending: list[tuple[str, int, asyncio.Future[None]]]) -> int:
        """Wait for every answer; return how many had an unknown outcome."""
        unknown = 0
        for path, n, future in pending:
            try:
                await asyncio.wait_for(future, 60)
                self.history.acknowledged[path].append(n)
            except INDETERMINATE:
                self.history.indeterminate[path].append(n)
                unknown += 1
            except errors.CanopyError:
                self.history.refused += 1
        return unknown

    async def stop(self) -> None:
        """Stop publishing; wait until every answer is in (:func:`finish` then waits until the
        subscribers have every final value)."""
        self._stop.set()
        await asyncio.gather(*self._tasks)

    def acknowledged_per_topic(self) -> dict[str, int]:
        return {path: len(self.history.acknowledged.get(path, ())) for group in self.paths for path in group}

    async def read_final(self, urls: list[str] | None = None, deadline: float = 60.0) -> None:
        """Each topic's value now, from a fresh session (retried until the broker answers)."""
        end = time.monotonic() + deadline
        while True:
            try:
                async with canopy.connect(urls or self.urls, *self.admin, reconnect_timeout=0) as session:
                    rows = await session.topics.fetch(f"?{self.branch}//")
                    break
            except (errors.CanopyError, OSError):
                if time.monotonic() > end:
                    raise
                await asyncio.sleep(0.5)
        found = {row.path: row.value for row in rows}
        for group in self.paths:
            for path in group:
                self.history.final[path] = found.get(path)

    async def close(self) -> None:
        self._stop.set()  # a test that failed midway: no publisher goes on against closed sessions
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for session in self._sessions:
            try:
                await session.close()
            except Exception:
                pass


def behind(work: Workload) -> list[tuple[int, str, int | None, int | None]]:
    """Subscribers whose last value of a topic is not its final value: (subscriber, topic, seen, final)."""
    out = []
    for k in range(work.subscriber_count):
        seen = work.history.observed[k]
        for path, final in work.history.final.items():
            last = seen[path][-1] if seen.get(path) else None
            if last != final:
                out.append((k, path, last, final))
    return out


async def progressed(*works: Workload, writes: int = 10, timeout: float = 60.0) -> None:
    """Wait until every topic of each workload has ``writes`` more acknowledged writes than
    it had when called: traffic flows on every topic (a condition with a deadline, not a
    sleep); fail with what each topic got meanwhile."""
    loop = asyncio.get_running_loop()
    before = [work.acknowledged_per_topic() for work in works]

    def short() -> dict[str, int]:
        return {path: n - was[path] for work, was in zip(works, before)
                for path, n in work.acknowledged_per_topic().items() if n < was[path] + writes}

    await loop.run_in_executor(None, lambda: wait_for(
        lambda: not short(), timeout, f"{writes} more acknowledged writes on every topic",
        describe=lambda: {**dict(list(short().items())[:6]),
                          **({"ended": [e for work in works for e in work.ended]} if any(w.ended for w in works)
                             else {})}))


async def finish(*works: Workload, urls: list[str]) -> None:
    """Stop publishing, read every topic's value, and wait until every subscriber has it."""
    loop = asyncio.get_running_loop()
    for work in works:
        await work.stop()
        await work.read_final(urls)
    for work in works:
        await loop.run_in_executor(None, lambda w=work: wait_for(  # type: ignore[misc]
            lambda: not behind(w), 30, f"the subscribers of {w.branch} to see every final value",
            describe=lambda: behind(w)[:5]))
