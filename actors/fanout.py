"""FanoutLinkActor: one fan-out connection of this (secondary) server to its primary.

The actor opens an ordinary client session to the primary (:func:`canopy.connect`,
with the connection's URLs, principal, retry delay and reconnect timeout),
subscribes to each link's selector, and turns what the subscriptions say
into replica claims on the local partitions (:class:`fanout.mirror.Mirror`),
sent over its own :class:`~actors.link.PartitionLink`, as the view evaluator
sends reference topics.

* While the session reconnects, the replicas stay with their last values;
  once it is back the client library has brought each subscription up to
  date: topics removed on the primary meanwhile are announced gone, new ones
  appear, values are current (the resynchronisation).
* When the session ends for good (the reconnect timeout passed, or the
  primary refused it), every replica of the connection goes, and the actor
  connects again every retry delay; a new session brings them back.
* When a partition of this server restarts, claims are not journaled: the
  actor claims its replicas there again from what it holds.

The controller makes one actor per connection (``fanout-<name>``), restarted
by Ray; :meth:`FanoutLinkActor.ensure` (called at every controller check)
starts a restarted one.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from typing import Any

import ray

from actors import routes
from actors.link import PartitionLink
from actors.settings import InstanceSettings
from actors.supervision import announce_start, new_incarnation
from fanout.config import FanoutConnection
from fanout.mirror import Mirror, claim_name, precedence
from sessions.incidents import IncidentLog
from sessions.missing_topics import CANCEL, PROCEED
from topics.protocol import Ok, Operation, RefPut, Result, TopicEvent

log = logging.getLogger("canopy.fanout")
#: one warning a minute per connection about missing-topic requests the primary did not answer
UNANSWERED = IncidentLog(60.0, max_keys=1000)
#: seconds between two timed claims (the apply part of the lag)
PROBE_EVERY = 0.1
#: seconds between two round trips to the primary (the rest of the lag)
RTT_EVERY = 2.0
#: seconds to wait for the partitions to drop a connection's claims
DROP_TIMEOUT = 10.0


class FanoutLink:
    """The work of one connection (a plain object; see :class:`FanoutLinkActor`)."""

    def __init__(
        self, connection: FanoutConnection, ordinal: int, partitions: list[Any], config: InstanceSettings
    ) -> None:
        self.connection = connection
        self.mirrors = [
            Mirror(precedence(ordinal + k), claim_name(connection.name, selector))
            for k, selector in enumerate(connection.links)
        ]
        self.link = PartitionLink(
            f"fanout-{connection.name}", partitions, self._on_events, resolve=routes.from_controller(),
            max_in_flight=config.max_in_flight, max_batch=config.max_batch,
            on_resynced=self._partition_back,
        )
        self.session: Any = None
        #: missing-topic notifications passed on to the primary
        self.forwarded = 0
        self.state = "starting"
        self.error = ""
        self.sessions = 0
        #: lag figures (see stats): the primary's round trip, and update received -> applied here
        self.rtt_ms: float | None = None
        self.apply_ms: float | None = None
        self.apply_max_ms = 0.0
        self.last_update: float | None = None
        self._probe_at = 0.0
        self._task: asyncio.Task[None] | None = None
        self._stopping = False

    async def start(self) -> None:
        if self._task is None:
            await self.link.attach()
            # claims this connection's earlier process made (before a restart or a move) go
            # first: the new session claims again what the primary still has
            await self._drop_all()
            self._task = asyncio.ensure_future(self._run())
            self._probe = asyncio.ensure_future(self._round_trips())

    async def stop(self) -> None:
        self._stopping = True
        if self._task is not None:
            self._probe.cancel()
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task
        if self.session is not None:
            with contextlib.suppress(Exception):
                await self.session.close()
        await self._drop_all()
        self.link.close()

    async def _drop_all(self) -> None:
        """Drop every claim of this connection on every partition, and wait for the answers."""
        loop = asyncio.get_running_loop()
        answers: list[asyncio.Future[Any]] = []
        for mirror in self.mirrors:
            drop = mirror.clear()
            for i in range(self.link.count):
                answer: asyncio.Future[Any] = loop.create_future()
                self.link.submit(i, drop, functools.partial(_settle, answer))
                answers.append(answer)
        self.link.flush()
        if answers:
            await asyncio.wait(answers, timeout=DROP_TIMEOUT)

    def _on_events(self, partition: int, events: list[TopicEvent]) -> None:
        pass  # the link registers no selectors: it only claims

    def _partition_back(self, partition: int) -> None:
        owned = self.link.owned_by(partition)
        for mirror in self.mirrors:
            for path in [p for p in mirror.topics if owned(p)]:
                self._submit(path, mirror.reclaim(path))

    def _submit(self, path: str | None, operation: Operation | None, mirror: Mirror | None = None) -> None:
        if operation is None:
            return
        if path is None:
            for i in range(self.link.count):
                self.link.submit(i, operation)
        elif mirror is not None and isinstance(operation, RefPut) and path not in mirror.contested:
            self.link.route(path, operation, functools.partial(self._claimed, mirror, path))
        else:
            self.link.route(path, operation)

    def _applied(self, received: float, result: Result) -> None:
        took = (time.monotonic() - received) * 1000
        self.apply_ms = took
        self.apply_max_ms = max(self.apply_max_ms, took)

    async def _round_trips(self) -> None:
        """Every few seconds, time a request the primary answers at once (unsubscribing a
        selector this session never subscribed to: it changes nothing)."""
        while True:
            await asyncio.sleep(RTT_EVERY)
            session = self.session
            if session is None or not session.connected:
                continue
            started = time.monotonic()
            try:
                await session._call("unsubscribe", ">canopy/fanout-probe")
            except Exception:
                continue
            self.rtt_ms = (time.monotonic() - started) * 1000

    def _claimed(self, mirror: Mirror, path: str, result: Result) -> None:
        """A partition's answer to a claim: another link mirrors the path too (reported once)."""
        if isinstance(result, Ok) and result.value is True and path in mirror.topics and path not in mirror.contested:
            mirror.contested.add(path)
            log.warning("fan-out %s: %s is mirrored by another link too (%s); the link configured first holds it",
                        self.connection.name, path, mirror.name)

    async def _run(self) -> None:
        import canopy

        c = self.connection
        while not self._stopping:
            self.state = "connecting"
            try:
                self.session = await canopy.connect(
                    list(c.primaries), c.principal, c.password, {"FanoutConnection": c.name},
                    reconnect_timeout=c.reconnect_timeout, retry_delay=c.retry_delay,
                )
            except Exception as e:  # the primary is not there (yet), or refused us
                self.state, self.error = "retrying", f"{type(e).__name__}: {e}"
                log.warning("fan-out %s: cannot connect to %s (%s); again in %.3g s", c.name, ", ".join(c.primaries),
                            self.error, c.retry_delay)
                await asyncio.sleep(c.retry_delay)
                continue
            self.sessions += 1
            self.state, self.error = "connected", ""
            log.info("fan-out %s: connected to %s (session %s)", c.name, ", ".join(c.primaries),
                     self.session.session_id)
            ended = asyncio.Event()
            follows = [asyncio.ensure_future(self._follow(mirror, selector, ended))
                       for mirror, selector in zip(self.mirrors, c.links)]
            await ended.wait()
            for task in follows:  # none may claim anything once the replicas are dropped
                task.cancel()
            await asyncio.gather(*follows, return_exceptions=True)
            reason = self.session.close_reason
            self.error = str(reason) if reason is not None else "the session ended"
            log.warning("fan-out %s: the session to the primary ended (%s); its replicas go", c.name, self.error)
            with contextlib.suppress(Exception):
                await self.session.close()
            self.session = None
            await self._drop_all()
            if not self._stopping:
                self.state = "retrying"
                await asyncio.sleep(c.retry_delay)

    async def _follow(self, mirror: Mirror, selector: str, ended: asyncio.Event) -> None:
        """Mirror one link while the session lasts; a link the primary refuses (a permission
        it lacks) is tried again every retry delay, without disturbing the others."""
        session = self.session
        while not session.closed:
            try:
                await self._mirror(session, mirror, selector)
                why = "its subscription ended"
            except asyncio.CancelledError:
                raise
            except Exception as e:
                why = str(e)
            if session.closed:
                break
            log.warning("fan-out %s: link %s: %s; again in %.3g s", self.connection.name, selector, why,
                        self.connection.retry_delay)
            await asyncio.sleep(self.connection.retry_delay)
        ended.set()

    async def _mirror(self, session: Any, mirror: Mirror, selector: str) -> None:
        subscription = await session.topics.subscribe(selector)
        async for event in subscription:
            kind = event.kind
            if kind == "subscribed":
                self._submit(event.path, mirror.announced(event.path, event.specification, event.value), mirror)
            elif kind == "value":
                ts = event.event
                operation = mirror.value(
                    event.path, event.value, (ts.value, ts.timestamp, ts.author) if ts is not None else None,
                    retained=event.retained)
                now = time.monotonic()
                self.last_update = time.time()
                if operation is not None and now - self._probe_at >= PROBE_EVERY:
                    self._probe_at = now
                    self.link.route(event.path, operation, functools.partial(self._applied, now))
                else:
                    self._submit(event.path, operation)
            elif kind == "unsubscribed":
                self._submit(event.path, mirror.removed(event.path))
            elif kind == "disconnected":
                self.state = "reconnecting"
            elif kind == "reconnected":
                self.state = "connected"
            # no flush here: the link sends what this loop turn submitted as one batch

    async def missing(self, selector: str, session_id: str, properties: dict[str, str], servers: list[str],
                      hops: list[str]) -> str:
        """A request on this server that the missing-topic propagation conditions on this side
        let through (the request crosses a link and no replica matches it: the gateway decided,
        :func:`fanout.mirror.propagates`) is offered here: with a live session to the primary
        it is forwarded, and the primary answers what its handlers answered (it checks the
        rest: no topic of its own matches, and a handler is registered there). A session lost while it is out counts as
        proceed, with a warning."""
        session = self.session
        if session is None or not session.connected or self.state != "connected":
            return PROCEED  # no session to the primary: nothing is propagated
        try:
            answer = await session._call("missing_topic_fwd", selector, session_id, properties, servers, hops)
        except Exception as e:  # e.g. PERMISSION_DENIED: the link's principal lacks SERVER_LINK there
            held = UNANSWERED.record(self.connection.name, time.monotonic())
            if held is not None:
                log.warning("fan-out %s: the missing-topic notification for %s got no answer from the primary (%s); "
                            "proceeding%s", self.connection.name, selector, e, held)
            return PROCEED
        self.forwarded += 1
        return CANCEL if answer == CANCEL else PROCEED

    def _take_max(self) -> float:
        most, self.apply_max_ms = self.apply_max_ms, 0.0
        return most

    def replicas(self, candidates: list[str]) -> list[str]:
        """Which of ``candidates`` this connection holds as replicas."""
        return [p for p in candidates if any(p in m.topics for m in self.mirrors)]

    def stats(self, take: bool = True) -> dict[str, Any]:
        """The connection's state and figures; ``apply_max_ms`` is the greatest apply time
        since the last call that took it (``take``; a scrape of /metrics does not)."""
        c = self.connection
        return {
            "name": c.name, "primaries": list(c.primaries), "state": self.state, "error": self.error,
            "sessions": self.sessions, "forwarded": self.forwarded,
            # lag: half the primary's round trip plus the time from an update's arrival to its
            # application here (sampled every PROBE_EVERY s); max since the last listing
            "lag_ms": _rounded((self.rtt_ms or 0) / 2 + (self.apply_ms or 0)) if self.rtt_ms is not None else None,
            "rtt_ms": _rounded(self.rtt_ms), "apply_ms": _rounded(self.apply_ms),
            "apply_max_ms": _rounded(self._take_max() if take else self.apply_max_ms),
            "last_update_s": _rounded(time.time() - self.last_update) if self.last_update is not None else None,
            "session": self.session.session_id if self.session is not None else None,
            "links": [
                {"selector": selector, "topics": len(m.topics), "updates": m.updates, "contested": sorted(m.contested)}
                for selector, m in zip(c.links, self.mirrors)
            ],
        }


def _rounded(value: float | None) -> float | None:
    return round(value, 2) if value is not None else None


class FanoutLinkActor:
    def __init__(
        self, connection: dict[str, Any], ordinal: int, partitions: list[Any], config: InstanceSettings
    ) -> None:
        self._incarnation = new_incarnation()
        announce_start()
        self.core = FanoutLink(FanoutConnection.from_dict(connection), ordinal, partitions, config)

    async def ensure(self) -> None:
        """Start (once; again in a process Ray restarted)."""
        await self.core.start()

    async def stop(self) -> None:
        await self.core.stop()

    async def set_routes(self, routes: list[Any]) -> None:
        """The controller's new partition map (see :meth:`actors.link.PartitionLink.set_routes`)."""
        self.core.link.set_routes(routes)

    async def incarnation(self) -> str:
        return self._incarnation

    async def stats(self, take: bool = True) -> dict[str, Any]:
        return self.core.stats(take)

    async def missing(self, selector: str, session_id: str, properties: dict[str, str], servers: list[str],
                      hops: list[str]) -> str:
        return await self.core.missing(selector, session_id, properties, servers, hops)

    async def replicas(self, candidates: list[str]) -> list[str]:
        return self.core.replicas(candidates)


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(FanoutLinkActor)


def _settle(answer: asyncio.Future[Any], result: Any) -> None:
    """Give ``answer`` its result, unless it has one already."""
    if not answer.done():
        answer.set_result(result)
