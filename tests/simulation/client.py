"""SimLink: a gateway's writes to the partitions' primaries, by the rules of ``actors/link.py``.

One channel per partition. A channel asks the controller for the partition's route (``route``:
the epoch since which its primary is the primary, and the replica), asks that replica to
``attach`` (a replica that is not the primary refuses: ask again), connects, says
:class:`~topics.protocol.Hello` with that epoch, then sends each write as a
:class:`~topics.protocol.Batch` of one, at most :data:`IN_FLIGHT` unanswered. Answers:

* ``ok``: done (the checker counted the write acknowledged when the primary released it);
* ``MOVED`` for every batch in flight: none was applied; once they are all back the stream
  closes and they go first, again, to the primary the controller names next;
* the stream lost: what was in flight has an unknown fate (:attr:`SimLink.unknown`), what
  waits goes on waiting; ask the route again every :data:`RECONNECT_MS`. After
  :data:`HOLD_MS` without a primary, what waits fails (never sent: never applied), and so does
  every later write until the partition is back.

A crash of the gateway's process loses what it had: in flight (unknown) and waiting (failed).
Pushed routes (``set_routes``) are not modelled here: a link learns of a new primary from a
``MOVED``, a refused ``attach`` or a stream that breaks.
"""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any

from tests.simulation.network import End, Network
from tests.simulation.processes import Calls, Process, SimNode
from tests.simulation.replica import MOVED, Address, SimReplica
from topics.protocol import Batch, Done, Hello

if TYPE_CHECKING:
    from tests.simulation.controller import Controller
    from tests.simulation.managed import ManagedController

__all__ = ["SimLink"]

IN_FLIGHT = 2
RECONNECT_MS = 200
HOLD_MS = 10_000
ATTACH_MS = 10_000
MS = 1_000_000

Write = tuple[int, str]  # (write id, key)


class _Channel:
    __slots__ = ("index", "end", "epoch", "queue", "in_flight", "moved", "sequence", "connecting", "hold",
                 "failing")

    def __init__(self, index: int) -> None:
        self.index = index
        self.end: End | None = None
        self.epoch = 0
        self.queue: deque[Write] = deque()
        self.in_flight: deque[tuple[int, Write]] = deque()
        self.moved: list[Write] = []
        self.sequence = 0
        self.connecting = False
        self.hold: Any = None
        self.failing = False


class _Stream:
    """The link's end of a stream to a primary."""

    __slots__ = ("link", "channel", "incarnation")

    def __init__(self, link: SimLink, channel: _Channel) -> None:
        self.link = link
        self.channel = channel
        self.incarnation = link.incarnation

    def on_message(self, end: End, message: Any) -> None:
        link = self.link
        if not link.node.deferred(self.on_message, end, message) and link.current(self.incarnation):
            link.answered(self.channel, end, message)

    def on_lost(self, end: End) -> None:
        link = self.link
        if not link.node.deferred(self.on_lost, end) and link.current(self.incarnation):
            link.lost(self.channel, end)


class SimLink(Process):
    """The writes of the gateway on ``node`` (``partition_of`` names each key's partition)."""

    def __init__(self, node: SimNode, count: int, network: Network, calls: Calls, controller: Controller | ManagedController) -> None:
        super().__init__(network.world, f"gateway@{node.name}", node)
        self.count = count
        self.network = network
        self.calls = calls
        self.controller = controller
        self.channels: list[_Channel] = []
        self.unknown = 0  # in flight on a stream that broke, or when the process died
        self.failed = 0  # never sent
        self.done = 0  # answered ok

    def start(self) -> None:
        self.channels = [_Channel(i) for i in range(self.count)]

    def stop(self, clean: bool) -> None:
        for channel in self.channels:
            self.unknown += len(channel.in_flight)
            self.failed += len(channel.queue) + len(channel.moved)
            if channel.end is not None:
                channel.end.kill()
            if channel.hold is not None:
                self.world.cancel(channel.hold)
        self.channels = []

    def submit(self, index: int, wid: int, key: str) -> None:
        if not self.running or self.node.paused_until > self.world.now_ns:
            self.failed += 1  # no gateway takes it now
            return
        channel = self.channels[index]
        if channel.failing:
            self.failed += 1
            return
        channel.queue.append((wid, key))
        if channel.end is None:
            self._connect(channel)
        else:
            self._flush(channel)

    def _flush(self, channel: _Channel) -> None:
        end = channel.end
        while end is not None and channel.queue and len(channel.in_flight) < IN_FLIGHT and not channel.moved:
            write = channel.queue.popleft()
            channel.sequence += 1
            channel.in_flight.append((channel.sequence, write))
            end.send(Batch(channel.sequence, [[write[1], write[0]]]))

    # -- reaching the primary ------------------------------------------------------------------

    def _connect(self, channel: _Channel) -> None:
        if channel.connecting:
            return
        channel.connecting = True
        self.calls.call(self, self.controller, "route", (channel.index,), ATTACH_MS,
                        lambda route, error: self._routed(channel, route))

    def _retry(self, channel: _Channel) -> None:
        self.world.at(RECONNECT_MS * MS, self._again, channel, self.incarnation)

    def _again(self, channel: _Channel, incarnation: int) -> None:
        if self.node.deferred(self._again, channel, incarnation) or not self.current(incarnation):
            return
        channel.connecting = False
        self._connect(channel)

    def _routed(self, channel: _Channel, route: tuple[int, SimReplica | None] | None) -> None:
        replica = route[1] if route is not None else None
        if route is None or replica is None:
            self._retry(channel)
            return
        epoch = route[0]
        self.calls.call(self, replica, "attach", (self.name, epoch), ATTACH_MS,
                        lambda address, error: self._attached(channel, replica, epoch, address))

    def _attached(self, channel: _Channel, replica: SimReplica, epoch: int, address: Address | None) -> None:
        if address is None:
            self._retry(channel)
            return
        incarnation = self.incarnation

        def connected(end: End) -> None:
            if self.node.deferred(connected, end):
                return
            if not self.current(incarnation):
                end.kill()
                return
            channel.connecting = False
            channel.end = end
            channel.epoch = epoch
            channel.failing = False
            if channel.hold is not None:
                self.world.cancel(channel.hold)
                channel.hold = None
            end.send(Hello(self.name, address.secret, epoch))
            self._flush(channel)

        def failed(reason: str) -> None:
            if not self.node.deferred(failed, reason) and self.current(incarnation):
                self._retry(channel)

        self.network.connect(self.node.name, (address.host, f"partition-{channel.index}:{address.port}"),
                             _Stream(self, channel), connected, failed)

    # -- answers ---------------------------------------------------------------------------------

    def answered(self, channel: _Channel, end: End, done: Done) -> None:
        if end is not channel.end or not channel.in_flight or channel.in_flight[0][0] != done.sequence:
            end.abort()  # a protocol error: the stream drops
            return
        _, write = channel.in_flight.popleft()
        if done.results[0] == MOVED:
            channel.moved.append(write)  # not applied: it goes again, first, to the new primary
            if not channel.in_flight:
                channel.queue.extendleft(reversed(channel.moved))
                channel.moved = []
                channel.end = None
                end.close()
                self._connect(channel)
            return
        self.done += 1
        self._flush(channel)

    def lost(self, channel: _Channel, end: End) -> None:
        if end is not channel.end:
            return
        channel.end = None
        self.unknown += len(channel.in_flight)
        channel.in_flight.clear()
        channel.queue.extendleft(reversed(channel.moved))
        channel.moved = []
        if channel.hold is None and not channel.failing:
            channel.hold = self.world.at(HOLD_MS * MS, self._give_up, channel, self.incarnation)
        self._connect(channel)

    def _give_up(self, channel: _Channel, incarnation: int) -> None:
        if self.node.deferred(self._give_up, channel, incarnation) or not self.current(incarnation):
            return
        channel.hold = None
        if channel.end is None:
            channel.failing = True
            self.failed += len(channel.queue)
            channel.queue.clear()
