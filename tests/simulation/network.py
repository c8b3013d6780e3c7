"""The simulated network: paths between nodes, Ray-call messages and TCP-like streams.

Nodes are known by name. Each ordered pair of nodes is *up* or *cut* (a cut may be one way
only); a node may be isolated (every pair with it cut both ways) or powered off (isolated,
its stream ends gone without a word, its listeners closed). Faults count: two cuts of one
pair need two heals, and :meth:`Network.heal_all` ends them all.

Latency (:class:`Conditions`): 1 ms ± jitter between nodes, 50 µs within one, plus a
pair's slowdown (:meth:`Network.slow`) and, at ``spike_rate``, a spike of 50–2,000 ms.

Messages (Ray calls)
====================

``network.message(src, dst, channel, fn, *args)`` runs ``fn(*args)`` when the message
arrives. Messages of one ``channel`` (the caller's and callee's names) arrive in the order
they were sent; different channels are independent, and independent of streams, so a
``set_routes`` may overtake a frame or the other way round. A message across a cut waits
for the heal, then arrives (its sender's timeout, if any, runs on its own: a call may run
after its caller gave up); one to a node that is off arrives when it is on again, and its
receiver decides what a call for a process that died meanwhile comes to. At ``loss_rate`` a
message is lost: it never arrives.

Streams (TCP)
=============

``network.listen(node, name, accept)`` opens the address ``(node, name)``;
``network.connect(node, address, handler, connected, failed)`` dials it. Each side of a
stream is an :class:`End`; a :class:`Handler` gets ``on_message(end, message)`` and
``on_lost(end)`` (once, after which nothing more comes), the dialling side
``connected(end)`` first, or ``failed(reason)`` instead: after a round trip when nothing
listens there ("refused"), after a drawn delay (``connect_fail_ms``) across a cut or to a
node that is off ("timeout"). The handshake itself is not cut: a cut that starts during it
stalls the stream's first bytes instead, the server's ``SYNACK`` first of all; the dialler,
which is still sending its SYN while it waits for it, is told ``failed`` whenever that
``SYNACK`` will never come (its direction timed out, or went with a reset or a machine
that went), never left waiting for good.

* Delivery is ordered and lossless, each direction on its own.
* A cut stalls a direction with bytes in flight; healed before its retransmission timeout
  (drawn, ``rto_ms``, 1–30 s) it resumes in order, else the stream breaks: the sending end
  gets ``on_lost``; the other end learns only when it next sends (a reset comes back, or
  its own timeout).
* :meth:`Stream.reset` (a fault): a random prefix of each direction's bytes in flight
  arrives, then each end gets ``on_lost`` at its own time.
* :meth:`End.close`: what was sent still arrives, then the peer's ``on_lost``; the closer's
  own ``on_lost`` comes at once (as asyncio's ``connection_lost`` does).
  :meth:`End.abort`: a prefix of what this end sent arrives, then a reset; nothing more
  arrives here; the aborter's ``on_lost`` comes at once.
* :meth:`End.kill` (its process died, the operating system closes the socket): as
  ``close`` without a callback here. :meth:`End.vanish` (the machine went): nothing more
  leaves it, and what arrives for it later is answered by a reset, once the path is up.
* Bytes that reach an end closed already are answered by a reset: the sender's end is lost
  a latency later (the reset is not held up by cuts).

Nothing here iterates over a ``set``: the order of everything is the order of calls, so a
seed gives the same run under any ``PYTHONHASHSEED``.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from tests.simulation.world import MS, Timer, World

__all__ = ["Address", "Conditions", "End", "Handler", "Network", "Stream"]

Address = tuple[str, str]
"""(node, name) of a listening stream endpoint."""


@dataclass(frozen=True)
class Conditions:
    """How the network behaves; a schedule picks the rates."""

    latency_ns: int = 1 * MS
    jitter_ns: int = 300_000  # latency_ns ± this, uniform
    local_ns: int = 50_000  # within one node
    spike_rate: float = 0.0  # the share of messages and stream bytes that take a spike
    spike_ms: tuple[int, int] = (50, 2_000)
    loss_rate: float = 0.0  # the share of Ray-call messages lost
    rto_ms: tuple[int, int] = (1_000, 30_000)  # a stalled stream's retransmission timeout
    connect_fail_ms: tuple[int, int] = (1_000, 30_000)  # a connect across a cut fails after this


class Handler(Protocol):
    """What an end of a stream calls: the state machines' shells implement it."""

    def on_message(self, end: End, message: Any) -> None: ...

    def on_lost(self, end: End) -> None: ...


class _Signal:
    """An item a direction carries besides messages."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


_FIN = _Signal("FIN")  # the sender closed: the receiver's on_lost
_RST = _Signal("RST")  # a reset: the receiver's on_lost
_SYNACK = _Signal("SYNACK")  # the dialler's connected()


class _Stalls(Protocol):
    src: str
    dst: str

    def resume(self) -> None: ...


class Network:
    """The paths between a world's nodes, and what travels on them."""

    def __init__(self, world: World, nodes: Iterable[str] = (),
                 conditions: Conditions = Conditions()) -> None:
        self.world = world
        self.conditions = conditions
        self.rng = world.rng("network")
        self.nodes: list[str] = []
        self._cuts: dict[tuple[str, str], int] = {}  # pair -> how many cuts hold it
        self._isolated: dict[str, int] = {}  # node -> how many isolations (power-offs count) hold it
        self._off: dict[str, int] = {}
        self._slow: dict[tuple[str, str], int] = {}  # pair -> extra ns
        self._stalled: list[_Stalls] = []  # channels and directions waiting for a heal
        self._channels: dict[tuple[str, str, Hashable], _Channel] = {}
        self._listeners: dict[Address, Callable[[End], Handler]] = {}
        self._ends: list[End] = []  # open ends, for power_off (pruned as they close)
        self._stream_ids = itertools.count(1)
        self.sent = 0  # messages and stream items handed to the network
        for node in nodes:
            self.add_node(node)

    def add_node(self, node: str) -> None:
        if node not in self.nodes:
            self.nodes.append(node)

    # -- paths -------------------------------------------------------------------------------

    def up(self, a: str, b: str) -> bool:
        """Whether bytes from node ``a`` reach node ``b`` now."""
        if a == b:
            return not self._off.get(a)
        if not self._cuts and not self._isolated:
            return True
        return not self._cuts.get((a, b)) and not self._isolated.get(a) and not self._isolated.get(b)

    def cut(self, a: str, b: str, *, both_ways: bool = True) -> None:
        self._count(self._cuts, (a, b), +1)
        if both_ways:
            self._count(self._cuts, (b, a), +1)
        self.world.note("cut", a, b, both_ways)

    def heal(self, a: str, b: str, *, both_ways: bool = True) -> None:
        """End one :meth:`cut` of the pair (of both pairs when ``both_ways``)."""
        self._count(self._cuts, (a, b), -1)
        if both_ways:
            self._count(self._cuts, (b, a), -1)
        self.world.note("heal", a, b, both_ways)
        self._resume()

    def isolate(self, node: str) -> None:
        self._count(self._isolated, node, +1)
        self.world.note("isolate", node)

    def reconnect(self, node: str) -> None:
        """End one :meth:`isolate` of ``node``."""
        self._count(self._isolated, node, -1)
        self.world.note("reconnect", node)
        self._resume()

    def slow(self, a: str, b: str, extra_ns: int, *, both_ways: bool = True) -> None:
        """Add ``extra_ns`` to every latency between ``a`` and ``b`` (0: as before)."""
        for pair in ((a, b), (b, a)) if both_ways else ((a, b),):
            if extra_ns:
                self._slow[pair] = extra_ns
            else:
                self._slow.pop(pair, None)
        self.world.note("slow", a, b, extra_ns)

    def power_off(self, node: str) -> None:
        """The machine goes: isolated, its ends gone without a word, its listeners closed."""
        self._count(self._off, node, +1)
        self._count(self._isolated, node, +1)
        for address in [a for a in self._listeners if a[0] == node]:
            del self._listeners[address]
        for end in [e for e in self._ends if e.node == node]:
            end.vanish()
        self.world.note("power off", node)

    def power_on(self, node: str) -> None:
        self._count(self._off, node, -1)
        self._count(self._isolated, node, -1)
        self.world.note("power on", node)
        self._resume()

    def is_off(self, node: str) -> bool:
        return bool(self._off.get(node))

    def heal_all(self) -> None:
        """End every cut, isolation and slowdown (not a power-off)."""
        self._cuts.clear()
        self._isolated = dict(self._off)
        self._slow.clear()
        self.world.note("heal all")
        self._resume()

    @staticmethod
    def _count(counts: dict[Any, int], key: Any, step: int) -> None:
        value = counts.get(key, 0) + step
        if value < 0:
            raise ValueError(f"{key!r} healed more often than it was cut")
        if value:
            counts[key] = value
        else:
            counts.pop(key, None)

    def _resume(self) -> None:
        stalled, self._stalled = self._stalled, []
        for item in stalled:
            if self.up(item.src, item.dst):
                item.resume()
            else:
                self._stalled.append(item)

    def latency(self, a: str, b: str) -> int:
        """A drawn one-way latency from ``a`` to ``b``, in ns."""
        c = self.conditions
        if a == b:
            return c.local_ns
        random = self.rng.random
        ns = c.latency_ns + int((2 * random() - 1) * c.jitter_ns)
        if c.spike_rate and random() < c.spike_rate:
            ns += self.rng.randint(*c.spike_ms) * MS
        return ns + self._slow.get((a, b), 0) if self._slow else ns

    def draw_ms(self, bounds: tuple[int, int]) -> int:
        return self.rng.randint(*bounds) * MS

    # -- messages (Ray calls) ----------------------------------------------------------------

    def message(self, src: str, dst: str, channel: Hashable, fn: Callable[..., object], *args: Any) -> bool:
        """Send a message from node ``src`` to node ``dst``: ``fn(*args)`` runs when it arrives,
        after every earlier message of ``channel``. False when it is lost (it never arrives)."""
        self.sent += 1
        if self.conditions.loss_rate and self.rng.random() < self.conditions.loss_rate:
            if self.world.tracing:
                self.world.note("lose", src, dst, channel)
            return False
        key = (src, dst, channel)
        queue = self._channels.get(key)
        if queue is None:
            queue = self._channels[key] = _Channel(self, src, dst, channel)
        queue.send(fn, args)
        return True

    # -- streams -----------------------------------------------------------------------------

    def listen(self, node: str, name: str, accept: Callable[[End], Handler]) -> Address:
        """Accept streams at ``(node, name)``: ``accept(end)`` gives each its handler."""
        address = (node, name)
        if address in self._listeners:
            raise ValueError(f"{address} is listened on already")
        self._listeners[address] = accept
        return address

    def unlisten(self, address: Address) -> None:
        self._listeners.pop(address, None)

    def connect(self, node: str, address: Address, handler: Handler, connected: Callable[[End], object],
                failed: Callable[[str], object]) -> None:
        """Dial ``address`` from ``node``: ``connected(end)`` once the handshake is done (before
        anything the other side sends), or ``failed(reason)``."""
        self.sent += 1
        dst = address[0]
        world = self.world
        if not (self.up(node, dst) and self.up(dst, node)):
            world.at(self.draw_ms(self.conditions.connect_fail_ms), self._failed, node, address, "timeout", failed)
            return
        world.at(self.latency(node, dst), self._syn, node, address, handler, connected, failed)

    def _failed(self, node: str, address: Address, reason: str, failed: Callable[[str], object]) -> None:
        self.world.note("connect failed", node, address, reason)
        failed(reason)

    def _syn(self, node: str, address: Address, handler: Handler, connected: Callable[[End], object],
             failed: Callable[[str], object]) -> None:
        if not self.up(node, address[0]):  # cut (or off) while the SYN travelled: it is retried in vain
            self.world.at(self.draw_ms(self.conditions.connect_fail_ms), self._failed, node, address, "timeout", failed)
            return
        accept = self._listeners.get(address)
        if accept is None:
            self.world.at(self.latency(address[0], node), self._failed, node, address, "refused", failed)
            return
        stream = Stream(self, next(self._stream_ids), node, address, handler, connected, failed)
        self.world.note("accept", stream.id, node, address)
        server = stream.server
        server._out.send(_SYNACK)  # first: the dialler is connected before anything the server sends
        server.handler = accept(server)


class _Channel:
    """The messages of one channel from one node to another, in order."""

    __slots__ = ("network", "src", "dst", "channel", "queue", "scheduled", "stalled", "last_due")

    def __init__(self, network: Network, src: str, dst: str, channel: Hashable) -> None:
        self.network = network
        self.src = src
        self.dst = dst
        self.channel = channel
        self.queue: deque[tuple[int, Callable[..., object], tuple[Any, ...]]] = deque()
        self.scheduled = False
        self.stalled = False
        self.last_due = 0

    def send(self, fn: Callable[..., object], args: tuple[Any, ...]) -> None:
        world = self.network.world
        due = world.now_ns + self.network.latency(self.src, self.dst)
        if due < self.last_due:
            due = self.last_due
        self.last_due = due
        self.queue.append((due, fn, args))
        if not self.scheduled and not self.stalled:
            self.scheduled = True
            world.at(due - world.now_ns, self._pump)

    def _pump(self) -> None:
        self.scheduled = False
        network = self.network
        if not network.up(self.src, self.dst):
            self.stalled = True
            network._stalled.append(self)
            return
        world = network.world
        _, fn, args = self.queue.popleft()
        if world.tracing:
            world.note("message", self.src, self.dst, self.channel, getattr(fn, "__qualname__", "?"))
        fn(*args)
        if self.queue and not self.scheduled and not self.stalled:
            self.scheduled = True
            world.at(max(0, self.queue[0][0] - world.now_ns), self._pump)

    def resume(self) -> None:
        self.stalled = False
        if self.queue and not self.scheduled:
            self.scheduled = True
            self.network.world.at(self.network.latency(self.src, self.dst), self._pump)


class Stream:
    """One TCP connection: :attr:`client` (the end that dialled) and :attr:`server`."""

    def __init__(self, network: Network, id: int, node: str, address: Address, handler: Handler,
                 connected: Callable[[End], object], failed: Callable[[str], object] = lambda reason: None) -> None:
        self.network = network
        self.id = id
        self.address = address
        self.client = End(self, "c", node, handler)
        self.server = End(self, "s", address[0], None)
        self.client.peer, self.server.peer = self.server, self.client
        self.client._out = _Direction(self.client, self.server)
        self.server._out = _Direction(self.server, self.client)
        self.client._in, self.server._in = self.server._out, self.client._out
        self._connected = connected
        self._failed = failed
        self.established = False  # the dialler has its SYNACK: connected() was called
        network._ends.append(self.client)
        network._ends.append(self.server)

    def __repr__(self) -> str:
        return f"stream {self.id} {self.client.node}->{self.address[0]}/{self.address[1]}"

    def established_at(self, end: End) -> None:
        """The ``SYNACK`` reached the dialler's ``end``: it is connected."""
        self.established = True
        self._connected(end)

    def never_established(self, reason: str, delay_ns: int = 0) -> None:
        """The dialler's ``SYNACK`` will never come: its connect fails after ``delay_ns`` (its
        own SYNs go unanswered until its timeout), its end gone without a callback (as TCP's
        in SYN_SENT, which no process holds yet)."""
        client = self.client
        if self.established or client.notified:
            return
        client.notified = True
        client.open = client.receiving = False
        client._out.discard()
        client._forget()
        self.network.world.at(delay_ns, self.network._failed, client.node, self.address, reason, self._failed)

    def reset(self) -> None:
        """A reset on the wire: a prefix of each direction's bytes in flight arrives, then each
        end's ``on_lost``, each at its own time; what either end sends meanwhile goes nowhere."""
        self.network.world.note("reset", self.id)
        for end in (self.client, self.server):
            if end.open:
                end._out.truncate()
                end._out.send(_RST)
                end.open = False


class End:
    """One side of a :class:`Stream`: send on it; its handler hears what arrives."""

    __slots__ = ("stream", "side", "node", "handler", "peer", "open", "receiving", "notified", "_out", "_in")

    peer: End
    _out: _Direction
    _in: _Direction

    def __init__(self, stream: Stream, side: str, node: str, handler: Handler | None) -> None:
        self.stream = stream
        self.side = side
        self.node = node
        self.handler = handler
        self.open = True  # this side may send
        self.receiving = True  # what arrives is handed to the handler (else a reset answers)
        self.notified = False  # on_lost called, or never to be (killed, vanished)

    def __repr__(self) -> str:
        return f"{self.stream.id}{self.side}"

    def send(self, message: Any) -> None:
        """Send ``message`` to the other end (nothing happens once this end is closed)."""
        if self.open:
            self._out.send(message)

    def close(self) -> None:
        """Close gracefully: what was sent arrives, then the peer's ``on_lost``; this end's
        ``on_lost`` comes at once."""
        self.receiving = False
        if self.open:
            self.open = False
            self._out.send(_FIN)
        self._lost_soon()

    def abort(self) -> None:
        """Reset the stream from this end: a prefix of what it sent arrives, then the peer's
        ``on_lost``; nothing more arrives here; this end's ``on_lost`` comes at once."""
        self.receiving = False
        if self.open:
            self.open = False
            self._out.truncate()
            self._out.send(_RST)
        self._lost_soon()

    def kill(self) -> None:
        """Its process died: the operating system closes the socket (as :meth:`close`); no callback here."""
        self.notified = True
        self.receiving = False
        if self.open:
            self.open = False
            self._out.send(_FIN)
        self._forget()

    def vanish(self) -> None:
        """Its machine went: nothing more leaves it, nothing is said; what arrives later for it is reset."""
        self.notified = True
        self.open = self.receiving = False
        self._out.discard()
        self._forget()
        stream = self.stream
        if self is stream.server and not stream.established:  # the dialler's SYNs go unanswered
            stream.never_established("timeout", stream.network.draw_ms(stream.network.conditions.connect_fail_ms))

    def _forget(self) -> None:
        try:
            self.stream.network._ends.remove(self)
        except ValueError:
            pass

    def _lost_soon(self) -> None:
        if not self.notified:
            self.stream.network.world.at(0, self._lose)

    def _lose(self) -> None:
        if self.notified:
            return
        stream = self.stream
        if self is stream.client and not stream.established:  # a reset before the SYNACK: the connect fails
            stream.never_established("reset")
            return
        self.notified = True
        self.open = self.receiving = False
        network = self.stream.network
        if network.world.tracing:
            network.world.note("lost", repr(self), self.node)
        self._forget()
        if self.handler is not None:
            self.handler.on_lost(self)


class _Direction:
    """The bytes in flight from one end to the other, in order."""

    __slots__ = ("network", "src_end", "dst_end", "src", "dst", "queue", "scheduled", "stalled", "last_due", "rto")

    def __init__(self, src_end: End, dst_end: End) -> None:
        self.network = src_end.stream.network
        self.src_end = src_end
        self.dst_end = dst_end
        self.src = src_end.node
        self.dst = dst_end.node
        self.queue: deque[tuple[int, Any]] = deque()
        self.scheduled = False
        self.stalled = False
        self.last_due = 0
        self.rto: Timer | None = None

    def send(self, item: Any) -> None:
        network = self.network
        network.sent += 1
        world = network.world
        due = world.now_ns + network.latency(self.src, self.dst)
        if due < self.last_due:
            due = self.last_due
        self.last_due = due
        self.queue.append((due, item))
        if not self.scheduled and not self.stalled:
            self.scheduled = True
            world.at(due - world.now_ns, self._pump)

    def truncate(self) -> None:
        """Keep a random prefix of what is in flight."""
        if self.queue:
            keep = self.network.rng.randint(0, len(self.queue))
            while len(self.queue) > keep:
                self.queue.pop()

    def discard(self) -> None:
        self.queue.clear()
        if self.rto is not None:
            World.cancel(self.rto)
            self.rto = None

    def _pump(self) -> None:
        self.scheduled = False
        if not self.queue:
            return
        network = self.network
        world = network.world
        due = self.queue[0][0]
        if due > world.now_ns:  # the head this pump was set for went in a reset
            self.scheduled = True
            world.at(due - world.now_ns, self._pump)
            return
        if not network.up(self.src, self.dst):
            self.stalled = True
            network._stalled.append(self)
            if self.rto is None:
                self.rto = world.at(network.draw_ms(network.conditions.rto_ms), self._timeout)
            return
        _, item = self.queue.popleft()
        self._deliver(item)
        if self.queue and not self.scheduled and not self.stalled:
            self.scheduled = True
            world.at(max(0, self.queue[0][0] - world.now_ns), self._pump)

    def _deliver(self, item: Any) -> None:
        dst = self.dst_end
        network = self.network
        world = network.world
        if world.tracing:
            world.note("deliver", repr(dst), self.src, self.dst, item)
        if item is _RST:
            self.queue.clear()
            dst._lose()
            return
        if not dst.receiving:  # its socket is closed: a reset answers (a FIN needs none: its sender closed)
            self.queue.clear()
            if item is not _FIN:
                world.at(network.latency(self.dst, self.src), self.src_end._lose)
            return
        if item is _FIN:
            dst._lose()
            return
        if item is _SYNACK:
            dst.stream.established_at(dst)
            return
        assert dst.handler is not None
        dst.handler.on_message(dst, item)

    def resume(self) -> None:
        self.stalled = False
        if self.rto is not None:
            World.cancel(self.rto)
            self.rto = None
        if self.queue and not self.scheduled:
            self.scheduled = True
            network = self.network
            network.world.at(network.latency(self.src, self.dst), self._pump)

    def _timeout(self) -> None:
        """The retransmission timeout: the stream breaks at the end whose bytes could not go."""
        self.rto = None
        if not self.stalled:
            return
        self.stalled = False  # it stays in the network's stalled list until a heal: harmless, it is empty
        self.queue.clear()
        self.network.world.note("rto", repr(self.src_end))
        self.src_end._lose()
        stream = self.src_end.stream
        if self.src_end is stream.server and not stream.established:  # its SYNACK went with it
            stream.never_established("timeout")
