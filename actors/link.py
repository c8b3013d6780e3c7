"""The partition link: one process's streams to every partition.

Every actor that talks to partitions (a gateway, the view evaluator, later
a fan-out link) holds one :class:`PartitionLink`. Ray places and supervises
the partitions; the data plane does not go through Ray calls (each costs
about a millisecond of CPU here) but over one TCP stream per partition,
opened at :meth:`PartitionLink.attach` to the address and secret the
partition hands out (:meth:`~actors.partition.PartitionActor.attach`).

Operations are queued per partition as they are submitted. At the end of
the current event-loop turn (so everything one client frame carried, and
everything other sessions sent in the same turn, travels together), and
while fewer than ``max_in_flight`` batches are unanswered, the queue (up to
``max_batch`` operations) leaves as one :class:`~topics.protocol.Batch`
frame; otherwise it waits for an answer. At low load an operation leaves
within one loop turn; under load the batches grow to what accumulates
during one round trip. ``window`` (seconds) optionally spaces batches out.

A stream is ordered, so each partition's events arrive in the order the
partition made them, and a batch's own events before its results: after a
``set`` is answered, its update has already reached this link's sessions.
Events go to ``on_events(partition, events)`` as they arrive.

A stream that breaks fails every unanswered operation with
``Failed("UNAVAILABLE", ...)`` (its fate is unknown). Operations not sent yet,
and later ones, wait for the partition to be back, for up to ``hold``
seconds (:data:`HOLD`) from the break: a failover or a restart of the
partition (a few seconds) costs a publisher only what was in flight. Past
``hold`` they fail with ``UNAVAILABLE``, and so does every later one at once,
until the partition is back. What waits is bounded by the sessions' own
limits (``max_requests_in_flight`` each). The partition forgets the link's registrations when it sees the stream
close. The link then reconnects by itself (a crashed partition is restarted
by Ray and recovers its topics from its journal): it asks the partition for
its address again, opens a new stream, tells its owner ``on_reset(partition)``,
registers again every selector it had registered there (same tokens: the
snapshots come again), and tells ``on_resynced(partition)`` once their
answers are in, so that the owner can drop what did not come back.

In a cluster each partition has a primary and a backup, and the primary
moves (failover, rebalancing). The link knows each partition by a
:class:`Route`: the primary replica's actor handle and the partition map
epoch since which it is the primary; it says that epoch in its hello. To
reconnect it asks ``resolve(partition, failed_epoch)`` for the route to try
next (the owner asks the controller), and :meth:`PartitionLink.set_routes`
(the controller's push) moves a channel whose primary changed at once, which
matters when the old primary hangs rather than dies. A replica that is not
the primary (any more) answers a batch with ``MOVED`` for every operation,
applying none: the link stops sending, waits for the answers to what is in
flight, and sends those operations again, first, to the new primary. Only
operations whose fate is unknown (in flight on a stream that broke) fail
with ``UNAVAILABLE``.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

from topics.partitioning import partition_of, partitions_for
from topics.protocol import (
    MOVED,
    Batch,
    Done,
    Events,
    Failed,
    FrameReader,
    Hello,
    Operation,
    ProtocolError,
    Register,
    Result,
    TopicEvent,
    Unregister,
    decode_event,
    decode_result,
    encode_frame,
    encode_operation,
)
from topics.selectors import Selector

log = logging.getLogger("canopy.link")
UNAVAILABLE = "UNAVAILABLE"
ATTACH_TIMEOUT = 30.0

#: what is told a result; ``None`` when nobody waits for it
OnResult = Callable[[Result], None] | None
OnEvents = Callable[[int, list[TopicEvent]], None]
OnPartition = Callable[[int], None]
RECONNECT_DELAY = 0.2  # seconds between attempts to reach a partition again
#: how long operations that a replica answered MOVED wait for the new primary before they fail
MOVE_TIMEOUT = 30.0
#: how long operations wait for a partition whose stream broke before they fail (seconds from the break)
HOLD = 10.0


class Route(NamedTuple):
    """How to reach a partition's primary: its replica's actor handle
    (``attach.remote(link_id, epoch)``) and the epoch since which it is the primary."""

    epoch: int
    handle: Any
    node: str = ""


#: (partition, epoch of the route that failed) -> the route to try next (None: the one it had)
Resolve = Callable[[int, int], Awaitable[Route | None]]


class PartitionUnavailable(Exception):
    code = UNAVAILABLE


class FrameStream(asyncio.Protocol):
    """One end of a partition stream: bytes in, :meth:`on_frame` per frame.
    A frame that is not the protocol drops the connection (:meth:`refused`
    says why)."""

    def __init__(self) -> None:
        self.reader = FrameReader()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        sock = transport.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        try:
            self.reader.feed(data)
            for frame in self.reader.frames():
                self.on_frame(frame)
        except ProtocolError as e:
            self.refused(e)
            assert self.transport is not None
            self.transport.abort()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def on_frame(self, frame: Any) -> None:
        raise NotImplementedError

    def refused(self, error: ProtocolError) -> None:
        log.error("dropping a partition stream: %s", error)


class _Stream(FrameStream):
    """The link's end: frames to the channel."""

    def __init__(self, channel: _Channel) -> None:
        super().__init__()
        self.channel: _Channel | None = channel  # None once the channel left this stream

    def on_frame(self, frame: Any) -> None:
        if self.channel is not None:
            self.channel.on_frame(frame)

    def refused(self, error: ProtocolError) -> None:
        log.error("partition %s sent a bad frame: %s", self.channel and self.channel.index, error)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.channel is not None and self.channel.stream is self:
            self.channel.lost(exc)


class _Channel:
    """The batching, pipelined channel to one partition."""

    def __init__(self, link: PartitionLink, index: int) -> None:
        self.link = link
        self.index = index
        self.stream: _Stream | None = None
        self.broken: str | None = None
        #: the stream broke more than ``hold`` ago: operations fail at once until it is back
        self.failing = False
        self._hold_timer: asyncio.TimerHandle | None = None
        self._queue: list[tuple[Operation, OnResult]] = []
        #: (sequence, operations, when written) of every unanswered batch
        self._in_flight: deque[tuple[int, list[tuple[Operation, OnResult]], int]] = deque()
        self._sequence = 0
        self._scheduled = False
        self._last_send = 0.0
        #: the last answered batch's (write, partition apply, answer arrival) times, monotonic ns: tracing
        self.last_done = (0, 0, 0)
        self.batches = 0
        self.operations = 0
        #: the partition's newest message position as of the last frame handled: while a
        #: frame's events are handed on, a position below every message they carry
        self.position = 0
        #: what this link registered here ((selector, structure) -> token), to register again after a restart
        self.registered: dict[tuple[str, bool], int] = {}
        self.reconnecting: asyncio.Task[None] | None = None
        #: the epoch of the route the stream was opened with
        self.epoch = 0
        #: a replica answered MOVED: nothing more is sent until the stream is moved to the new primary
        self.moving = False
        self._moved: list[tuple[Operation, OnResult]] = []

    def submit(self, op: Operation, on_result: OnResult) -> None:
        kind = type(op)
        if kind is Register:
            self.registered[op.selector, op.structure] = op.token  # type: ignore[union-attr]
        elif kind is Unregister:
            self.registered.pop((op.selector, op.structure), None)  # type: ignore[union-attr]
        if self.failing:
            if on_result is not None:
                on_result(Failed(UNAVAILABLE, str(self.broken)))
            return
        self._queue.append((op, on_result))
        if not self._scheduled and len(self._in_flight) < self.link.max_in_flight:
            self._schedule()

    def _schedule(self) -> None:
        self._scheduled = True
        loop = asyncio.get_running_loop()
        wait = self._last_send + self.link.window - loop.time()
        if wait > 0 and len(self._queue) < self.link.max_batch:
            loop.call_later(wait, self._flush)
        else:
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        stream = self.stream
        if stream is None or stream.transport is None or self.broken is not None or self.moving:
            return
        limit = self.link.max_batch
        while self._queue and len(self._in_flight) < self.link.max_in_flight:
            batch, self._queue = self._queue[:limit], self._queue[limit:]
            self._sequence += 1
            self.batches += 1
            self.operations += len(batch)
            data = encode_frame(Batch(self._sequence, [encode_operation(op) for op, _ in batch]))
            self._in_flight.append((self._sequence, batch, time.perf_counter_ns()))
            stream.transport.write(data)
        self._last_send = asyncio.get_running_loop().time()

    def on_frame(self, frame: Any) -> None:
        if isinstance(frame, Done):
            arrived = time.perf_counter_ns()
            if frame.events:
                self._events(frame.events)
            if frame.position:
                self.position = frame.position
            if not self._in_flight or self._in_flight[0][0] != frame.sequence:
                raise ProtocolError(f"answer {frame.sequence} to a batch that is not the oldest unanswered")
            _, batch, written = self._in_flight.popleft()
            self.last_done = (written, frame.applied_ns, arrived)
            if len(batch) != len(frame.results):
                raise ProtocolError(f"answer {frame.sequence} has {len(frame.results)} results for {len(batch)}")
            if frame.results and _moved(frame.results[0]):
                self._moved.extend(batch)  # none applied: they go again to the new primary
                if not self.moving:
                    self.moving = True
                    log.warning("partition %d: its primary moved; sending to the new one", self.index)
                if not self._in_flight:
                    self._move()
                return
            for (op, on_result), item in zip(batch, frame.results):
                result = decode_result(op, item)
                if on_result is None:
                    if isinstance(result, Failed):
                        log.warning("partition %d: %s failed: %s", self.index, type(op).__name__, result.message)
                    continue
                try:
                    on_result(result)
                except Exception:  # the receiver's bug must not break the stream
                    log.exception("handling the result of %s failed", type(op).__name__)
            if self._queue and not self._scheduled:
                self._schedule()
        elif isinstance(frame, Events):
            self._events(frame.events)
            if frame.position:
                self.position = frame.position
        else:
            raise ProtocolError(f"a partition does not send {type(frame).__name__}")

    def _events(self, encoded: list[Any]) -> None:
        events = [decode_event(e) for e in encoded]
        try:
            self.link.on_events(self.index, events)
        except Exception:  # a bad batch must not stall the stream behind it
            log.exception("could not apply a batch of events from partition %d", self.index)

    def _move(self) -> None:
        """Every batch in flight came back MOVED: close this stream and open one to the
        new primary; the operations wait, first in the queue."""
        self._queue = self._moved + self._queue
        self._moved = []
        stream, self.stream = self.stream, None
        if stream is not None and stream.transport is not None:
            stream.channel = None  # its closing is no loss: nothing is in flight
            stream.transport.close()
        if not self.link.closing and self.reconnecting is None:
            self.reconnecting = asyncio.ensure_future(self._reconnect(moving=True))

    def lost(self, exc: Exception | None) -> None:
        if self.broken is None:
            self.broken = f"partition {self.index} is unavailable: " + (str(exc) if exc else "its stream closed")
            if not self.link.closing:
                log.error("%s", self.broken)
        self.stream = None
        unknown = [entry for _, batch, _ in self._in_flight for entry in batch]
        self._in_flight.clear()
        self._queue = self._moved + self._queue  # never applied: they wait for the partition
        self._moved = []
        self.moving = False
        for _, on_result in unknown:
            if on_result is not None:
                on_result(Failed(UNAVAILABLE, self.broken))
        if self.link.closing or self.link.hold <= 0:
            self._give_up()
        elif self._hold_timer is None and not self.failing:
            self._hold_timer = asyncio.get_running_loop().call_later(self.link.hold, self._give_up)
        if not self.link.closing and self.reconnecting is None:
            self.reconnecting = asyncio.ensure_future(self._reconnect())

    def _give_up(self) -> None:
        """Still unavailable ``hold`` after the break: what waits fails, and so does every
        later operation at once, until the partition is back."""
        self._hold_timer = None
        if self.broken is None:
            return
        self.failing = True
        waiting, self._queue = self._queue, []
        for _, on_result in waiting:
            if on_result is not None:
                on_result(Failed(UNAVAILABLE, self.broken))

    def reroute(self, route: Route) -> None:
        """The partition's primary changed: leave the old one now (it may hang rather than
        die); what is in flight there fails, as its fate is unknown."""
        if route.epoch == self.epoch or self.link.closing:
            return
        stream = self.stream
        if stream is not None and stream.transport is not None:
            stream.transport.abort()  # connection_lost -> lost() -> reconnect with the new route

    async def _reconnect(self, moving: bool = False) -> None:
        """Reach the partition's primary again (Ray restarts a crashed one; the controller
        names a new one after a failover), then replay the registrations."""
        failed = self.epoch
        deadline = asyncio.get_running_loop().time() + MOVE_TIMEOUT
        try:
            while not self.link.closing:
                try:
                    route = await asyncio.wait_for(self.link.resolve(self.index, failed), ATTACH_TIMEOUT)
                    address = await asyncio.wait_for(
                        route.handle.attach.remote(self.link.link_id, route.epoch), ATTACH_TIMEOUT
                    )
                    await self.link.connect(self, address, route.epoch)
                    break
                except Exception as e:  # not back yet: Ray is restarting it, or the map has not moved yet
                    log.debug("partition %d not reachable yet: %s", self.index, e)
                    if moving and asyncio.get_running_loop().time() > deadline:
                        self.lost(TimeoutError(f"no new primary within {MOVE_TIMEOUT:.0f} s"))
                        return
                    await asyncio.sleep(RECONNECT_DELAY)
            else:
                return
            log.warning("partition %d is back; registering %d selectors again", self.index, len(self.registered))
            self.broken = None
            self.failing = False
            if self._hold_timer is not None:
                self._hold_timer.cancel()
                self._hold_timer = None
            self.moving = False
            self.link.on_reset(self.index)
            waiting = {(op.selector, op.structure) for op, _ in self._queue if isinstance(op, Register)}
            registrations = [(s, t) for s, t in self.registered.items() if s not in waiting]
            if not registrations:
                if self._queue and not self._scheduled:
                    self._schedule()
                self.link.on_resynced(self.index)
                return
            left = len(registrations)

            def answered(result: Result) -> None:
                nonlocal left
                left -= 1
                if left == 0:
                    self.link.on_resynced(self.index)

            # ahead of the operations held while the partition was away: the events of those
            # writes must reach this link, so its registrations come first at the new primary
            self._queue[:0] = [
                (Register(selector, token, structure), answered) for (selector, structure), token in registrations
            ]
            if not self._scheduled and len(self._in_flight) < self.link.max_in_flight:
                self._schedule()
        finally:
            self.reconnecting = None


class PartitionLink:
    """Streams from one actor (``link_id``) to every partition (``routes``: one
    :class:`Route` per partition, or a bare actor handle for a partition that never
    moves). ``resolve`` finds a partition's primary again after its stream broke
    (default: the route it had)."""

    def __init__(
        self,
        link_id: str,
        routes: list[Any],
        on_events: OnEvents,
        *,
        resolve: Resolve | None = None,
        max_in_flight: int = 2,
        max_batch: int = 2000,
        window: float = 0.0,
        hold: float = HOLD,
        on_reset: OnPartition = lambda _: None,
        on_resynced: OnPartition = lambda _: None,
    ) -> None:
        self.link_id = link_id
        self.routes = [r if isinstance(r, Route) else Route(0, r) for r in routes]
        self._resolve = resolve
        self.on_events = on_events
        self.on_reset = on_reset
        self.on_resynced = on_resynced
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch
        self.window = window
        self.hold = hold
        self.closing = False
        self.channels = [_Channel(self, i) for i in range(len(self.routes))]

    @property
    def count(self) -> int:
        return len(self.channels)

    async def attach(self) -> None:
        """Open the stream to every partition's primary (each hands out its address)."""
        routes = list(self.routes)
        addresses = await asyncio.wait_for(
            asyncio.gather(*(r.handle.attach.remote(self.link_id, r.epoch) for r in routes)), ATTACH_TIMEOUT
        )
        for channel, address, route in zip(self.channels, addresses, routes):
            await self.connect(channel, address, route.epoch)

    async def resolve(self, index: int, failed: int) -> Route:
        route = None if self._resolve is None else await self._resolve(index, failed)
        if route is None:  # nobody to ask (a partition that never moves)
            return self.routes[index]
        self.routes[index] = route
        return route

    def set_routes(self, routes: list[Route]) -> None:
        """The controller's new partition map: channels whose primary changed move to it."""
        for channel, route in zip(self.channels, routes):
            if route.epoch > self.routes[channel.index].epoch:
                self.routes[channel.index] = route
            channel.reroute(self.routes[channel.index])

    async def connect(self, channel: _Channel, address: dict[str, Any], epoch: int = 0) -> None:
        transport, stream = await asyncio.get_running_loop().create_connection(
            lambda: _Stream(channel), address["host"], address["port"]
        )
        transport.write(encode_frame(Hello(self.link_id, address["secret"], epoch)))
        channel.stream = stream
        channel.epoch = epoch
        if channel._queue and not channel._scheduled:
            channel._schedule()

    def flush(self) -> None:
        """Send what is queued now, rather than at the end of the loop turn
        (a gateway calls it after each client frame: the batch leaves before
        the writes to sessions that may be waiting in the same turn)."""
        for channel in self.channels:
            if channel._queue and channel.link.window <= 0:
                channel._flush()

    def close(self) -> None:
        self.closing = True
        for channel in self.channels:
            if channel.reconnecting is not None:
                channel.reconnecting.cancel()
            if channel._hold_timer is not None:
                channel._hold_timer.cancel()
                channel._give_up()
            if channel.stream is not None and channel.stream.transport is not None:
                channel.stream.transport.close()

    # -- submitting ----------------------------------------------------------------------

    def submit(self, index: int, op: Operation, on_result: OnResult = None) -> None:
        self.channels[index].submit(op, on_result)

    def route(self, path: str, op: Operation, on_result: OnResult = None) -> None:
        """Send ``op`` to the partition that owns ``path``."""
        self.channels[partition_of(path, len(self.channels))].submit(op, on_result)

    def owned_by(self, index: int) -> Callable[[str], bool]:
        """Whether a path belongs to partition ``index``."""
        count = len(self.channels)
        return lambda path: partition_of(path, count) == index

    def partitions_for(self, selector: Selector) -> list[int]:
        """The partitions ``selector`` concerns."""
        return partitions_for(selector, len(self.channels))

    def everywhere(self, selector: Selector, op: Operation) -> list[asyncio.Future[Result]]:
        """Send ``op`` to every partition ``selector`` concerns; one future per partition."""
        return [self.request(i, op) for i in partitions_for(selector, len(self.channels))]

    def request(self, index: int, op: Operation) -> asyncio.Future[Result]:
        """Send ``op`` to partition ``index``; the future resolves to its result."""
        future: asyncio.Future[Result] = asyncio.get_running_loop().create_future()

        def resolve(result: Result) -> None:
            if not future.done():
                future.set_result(result)

        self.channels[index].submit(op, resolve)
        return future

    def last_done(self, path: str) -> tuple[int, int, int]:
        """When the last answered batch to the partition of ``path`` was
        written, applied and answered (monotonic ns)."""
        return self.channels[partition_of(path, len(self.channels))].last_done

    def request_route(self, path: str, op: Operation) -> asyncio.Future[Result]:
        return self.request(partition_of(path, len(self.channels)), op)

    def stats(self) -> dict[str, int]:
        return {
            "batches": sum(c.batches for c in self.channels),
            "operations": sum(c.operations for c in self.channels),
            "broken": sum(c.broken is not None for c in self.channels),
        }


def _moved(item: Any) -> bool:
    """Whether an encoded result is ``Failed(MOVED, ...)`` (see :func:`topics.protocol.encode_result`)."""
    return isinstance(item, list) and len(item) > 1 and item[1] == MOVED
