"""A delay line between simulated nodes (``canopy cluster partition NODE --delay-ms MS``): what
a node sends its peers, or receives from them, arrives ``MS`` later, as ``tc qdisc ... netem
delay`` would do on a kernel that has netem (this project's test machines have neither netem nor
nfnetlink_queue, but they have TUN devices).

How a packet goes (made by :meth:`cluster.netns.Network.delay`)::

    node A's namespace                                         node P's namespace
    A's socket -> route P/32 dev cnp<tag>d<a> ----+    +----> cnp<tag>d<a> -> P's socket
                                                  |    |      (the kernel takes it as received)
                             this process: read, hold MS in a FIFO, write into the TUN of the
                             namespace that owns the packet's IPv4 destination

Every namespace involved (the delayed node's and each peer's) has a TUN device of the delayed
node's name; /32 routes send the delayed direction(s) into them, the other direction keeps its
veth. The TUN devices are not persistent: they, and the routes through them, exist while this
process holds their file descriptors, so however it ends (stopped, killed, its parent killed)
nothing is left behind.

It is a process of its own, not a thread of serve: serve's interpreter is shared with its Ray
driver's threads, whose GIL would add its own jitter to every packet, and a process is what
:func:`cluster.netns.teardown` already finds and kills in a namespace (it runs in the delayed
node's). It exits by itself within :data:`PARENT_CHECK` seconds of losing its parent.

The line is one FIFO with one fixed delay, so packets leave in the order they came (no flow is
reordered); it holds at most ``queue_bytes`` and drops what comes beyond, counting it
(:class:`Stats`, printed as the process's last line of output when it is stopped with SIGTERM).

Run as ``python -m cluster.delayline SPEC`` with the TUN file descriptors inherited; SPEC is a
:class:`Spec`'s :meth:`~Spec.encode`. It prints ``{"ready": true}`` once it reads them.
"""

from __future__ import annotations

import collections
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass

TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
#: the TUN devices' MTU: large, so that TCP sends few, large packets through the line
MTU = 65000
#: the most bytes the line holds by default (what comes beyond is dropped)
QUEUE_BYTES = 16 * 1024 * 1024
#: how often (seconds) the process checks that its parent is still there
PARENT_CHECK = 0.5
#: packets read from one device before the others get their turn
BURST = 64


def open_tun(name: str) -> int:
    """A non-persistent TUN device ``name`` (IP packets, no header) in the calling thread's network
    namespace; it goes when the returned descriptor (non-blocking, close-on-exec) is closed."""
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH22x", name.encode(), IFF_TUN | IFF_NO_PI))
    except BaseException:
        os.close(fd)
        raise
    return fd


@dataclass(frozen=True)
class Spec:
    """What a delay line is given: the delay, its bound, and for each IPv4 address the
    inherited TUN descriptor of the namespace that owns it."""

    delay_ms: int
    queue_bytes: int
    devices: dict[str, int]  # address -> TUN file descriptor

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> Spec:
        raw = json.loads(text)
        return cls(int(raw["delay_ms"]), int(raw["queue_bytes"]), {str(a): int(fd) for a, fd in raw["devices"].items()})


@dataclass(frozen=True)
class Stats:
    """What a delay line did, from start to stop."""

    forwarded: int = 0
    forwarded_bytes: int = 0
    #: packets refused because the line held ``queue_bytes`` already
    dropped: int = 0
    dropped_bytes: int = 0
    #: the most bytes it held at once
    peak_bytes: int = 0
    #: packets still held when it stopped (never delivered)
    discarded: int = 0
    #: packets to no known address (IPv6, or an address no end has)
    stray: int = 0

    def encode(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def decode(cls, text: str) -> Stats:
        return cls(**{k: int(v) for k, v in json.loads(text).items()})

    def __str__(self) -> str:
        return (f"{self.forwarded} packets ({self.forwarded_bytes / 1e6:.1f} MB) delivered late, "
                f"{self.dropped} dropped beyond the queue's bound, at most {self.peak_bytes / 1024:.0f} KiB held, "
                f"{self.discarded} still held at the end")


class DelayQueue:
    """A FIFO that releases each packet ``delay`` seconds after it came, holding at most
    ``limit`` bytes. Time is passed in (``now``, seconds)."""

    def __init__(self, delay: float, limit: int) -> None:
        self.delay = delay
        self.limit = limit
        self._held: collections.deque[tuple[float, int, bytes]] = collections.deque()
        self.bytes = 0
        self.dropped = self.dropped_bytes = self.peak = 0

    def push(self, now: float, to: int, packet: bytes) -> bool:
        """Hold ``packet`` for ``to``; False (and counted) when it would pass the bound."""
        if self.bytes + len(packet) > self.limit:
            self.dropped += 1
            self.dropped_bytes += len(packet)
            return False
        self._held.append((now + self.delay, to, packet))
        self.bytes += len(packet)
        self.peak = max(self.peak, self.bytes)
        return True

    def due(self, now: float) -> Iterator[tuple[int, bytes]]:
        """The packets whose time has come, in the order they came."""
        while self._held and self._held[0][0] <= now:
            _, to, packet = self._held.popleft()
            self.bytes -= len(packet)
            yield to, packet

    def wait(self, now: float) -> float | None:
        """Seconds until the next packet is due (None: nothing held)."""
        return max(0.0, self._held[0][0] - now) if self._held else None

    def __len__(self) -> int:
        return len(self._held)


def destination(packet: bytes) -> bytes | None:
    """The IPv4 destination address (4 bytes) of an IP packet; None for anything else."""
    return packet[16:20] if len(packet) >= 20 and packet[0] >> 4 == 4 else None


def run(spec: Spec, ready: Callable[[], None] = lambda: None, clock: Callable[[], float] = time.monotonic) -> Stats:
    """Move packets between the spec's devices until SIGTERM or SIGINT, or until the parent is
    gone; return what was done."""
    queue = DelayQueue(spec.delay_ms / 1000, spec.queue_bytes)
    owner = {socket.inet_aton(address): fd for address, fd in spec.devices.items()}
    selector = selectors.DefaultSelector()
    for fd in set(owner.values()):
        selector.register(fd, selectors.EVENT_READ)
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    selector.register(wake_r, selectors.EVENT_READ)
    stopping: list[int] = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda number, frame: stopping.append(number))
    signal.set_wakeup_fd(wake_w)
    parent = os.getppid()
    stray = forwarded = forwarded_bytes = refused = 0
    ready()
    while not stopping and os.getppid() == parent:
        wait = queue.wait(clock())
        for key, _ in selector.select(PARENT_CHECK if wait is None else min(wait, PARENT_CHECK)):
            if key.fd == wake_r:
                continue
            now = clock()
            for _ in range(BURST):
                try:
                    packet = os.read(key.fd, MTU + 100)
                except BlockingIOError:
                    break
                to = owner.get(destination(packet) or b"")
                if to is None:
                    stray += 1
                else:
                    queue.push(now, to, packet)
        for to, packet in queue.due(clock()):
            try:
                os.write(to, packet)
                forwarded += 1
                forwarded_bytes += len(packet)
            except OSError:  # the receiving stack refused it (out of buffers): a loss, as on a wire
                refused += 1
    return Stats(forwarded, forwarded_bytes, queue.dropped + refused, queue.dropped_bytes, queue.peak,
                 len(queue), stray)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m cluster.delayline SPEC (run by cluster.netns.Network.delay)", file=sys.stderr)
        return 2
    stats = run(Spec.decode(argv[1]), ready=lambda: print(json.dumps({"ready": True}), flush=True))
    try:
        print(stats.encode(), flush=True)
    except BrokenPipeError:  # the parent is gone: nobody to tell
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nor at exit's flush
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
