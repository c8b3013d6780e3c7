"""The simulated world: one event queue in integer nanoseconds, seeded randomness, a trace.

Everything the simulator runs happens in an event a :class:`World` pops from its queue:
``world.at(delay_ns, fn, *args)`` puts one in, ``run_until``/``run_for`` pop and run them in
time order, ties in the order they were put in. Time is an ``int`` of nanoseconds
(:attr:`World.now_ns`), never a float, so no run drifts from another. Randomness comes from
one :class:`random.Random` per concern (``world.rng("network")``), seeded with the string
``f"{seed}/{concern}"`` (hashed with SHA-512, independent of ``PYTHONHASHSEED``): changing
how the network draws leaves the schedule's draws as they were.

``run_until`` may be called from inside an event (a simulated ``Future.result()`` runs the
world until its answer comes): the queue is the world's, and time only moves forward.

What the models assume (the simulator proves things about its models, not about Ray or TCP;
each model is checked against the real thing where one exists, ``test_models.py``):

* a process kill loses nothing the process handed to the operating system; a power cut
  loses what was not fsynced (:mod:`tests.simulation.disk`);
* Ray calls are messages, FIFO per (caller, callee), independent across pairs; a call across
  a cut is delivered after the heal, while its caller's timeout runs on its own; a lost
  request or reply is gone for good (:mod:`tests.simulation.network`);
* TCP streams are ordered and lossless; they break only with bytes in flight (a
  retransmission timeout) or a reset, and a reset or close reaches each end at its own time.

The trace is a list of tuples ``(now_ns, kind, ...)``, kept only when ``tracing`` is on (it
costs), printed on failure (:meth:`World.trace_on_failure`) and compared, by its digest,
between runs of the same seed.
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["MS", "SECOND", "US", "SimClock", "Timer", "World"]

US = 1_000
MS = 1_000_000
SECOND = 1_000_000_000

#: an entry of the queue: [at_ns, seq, fn, args]; a list, so that cancelling is ``entry[2] = None``
Timer = list[Any]


class World:
    """The event queue, the clock, the per-concern random generators and the trace of one run."""

    def __init__(self, seed: int, *, tracing: bool = False) -> None:
        self.seed = seed
        self.now_ns = 0
        #: events run so far (cancelled ones not counted)
        self.events = 0
        self.tracing = tracing
        self.trace: list[tuple[Any, ...]] = []
        self.clock = SimClock(self)
        self._queue: list[Timer] = []
        self._seq = 0
        self._rngs: dict[str, random.Random] = {}

    @property
    def now_ms(self) -> int:
        return self.now_ns // MS

    def rng(self, concern: str) -> random.Random:
        """The random generator of ``concern`` ("schedule", "network", "disk", "ids", ...)."""
        rng = self._rngs.get(concern)
        if rng is None:
            rng = self._rngs[concern] = random.Random(f"{self.seed}/{concern}")
        return rng

    # -- the queue ---------------------------------------------------------------------------

    def at(self, delay_ns: int, fn: Callable[..., object], *args: Any) -> Timer:
        """Run ``fn(*args)`` ``delay_ns`` from now (after every event already due then)."""
        if delay_ns < 0:
            raise ValueError(f"an event {delay_ns} ns in the past")
        seq = self._seq
        self._seq = seq + 1
        timer = [self.now_ns + delay_ns, seq, fn, args]
        heapq.heappush(self._queue, timer)
        return timer

    @staticmethod
    def cancel(timer: Timer) -> None:
        """Forget an event not run yet (a no-op once it ran)."""
        timer[2] = None

    @property
    def pending(self) -> int:
        """Events in the queue, cancelled ones included."""
        return len(self._queue)

    def next_at(self) -> int | None:
        """When the next event is due (``None``: the queue is empty)."""
        queue = self._queue
        while queue and queue[0][2] is None:
            heapq.heappop(queue)
        return queue[0][0] if queue else None

    def run_until(self, predicate: Callable[[], bool], deadline_ns: int) -> bool:
        """Run events in order until ``predicate()`` holds (True, checked first and after each
        event) or the next one is due after ``deadline_ns`` (False; the clock then reads the
        deadline, or later when an outer run went past it)."""
        if predicate():
            return True
        queue = self._queue
        pop = heapq.heappop
        while queue and queue[0][0] <= deadline_ns:
            at, _, fn, args = pop(queue)
            if fn is None:
                continue
            self.now_ns = at
            self.events += 1
            fn(*args)
            if predicate():
                return True
        if deadline_ns > self.now_ns:
            self.now_ns = deadline_ns
        return False

    def run_for(self, ns: int) -> None:
        """Run every event due in the next ``ns``; the clock then reads ``now + ns``."""
        self.run_until(_never, self.now_ns + ns)

    # -- the trace ---------------------------------------------------------------------------

    def note(self, *entry: Any) -> None:
        """Append ``(now_ns, *entry)`` to the trace when tracing. In a hot path test
        :attr:`tracing` first, so that the entry is not even built. Entries hold strings,
        numbers and immutable values whose ``repr`` is the same in every run."""
        if self.tracing:
            self.trace.append((self.now_ns, *entry))

    def trace_digest(self) -> str:
        """A SHA-256 of the trace: the same seed gives the same digest, in any process."""
        digest = hashlib.sha256()
        for entry in self.trace:
            digest.update(repr(entry).encode())
            digest.update(b"\n")
        return digest.hexdigest()

    def format_trace(self, last: int | None = 200) -> str:
        entries = self.trace if last is None else self.trace[-last:]
        skipped = len(self.trace) - len(entries)
        lines = [f"trace of seed {self.seed}: {len(self.trace)} entries"
                 + (f", the last {len(entries)}" if skipped else "")]
        for at, *rest in entries:
            lines.append(f"{at / MS:14.6f} ms  " + " ".join(str(part) for part in rest))
        return "\n".join(lines)

    @contextlib.contextmanager
    def trace_on_failure(self, last: int | None = 200) -> Iterator[None]:
        """Print the trace's tail to stderr if the block raises (pytest shows it with the failure)."""
        try:
            yield
        except BaseException:
            print(self.format_trace(last), file=sys.stderr)
            raise


class SimClock:
    """The ``Clock`` of production code (``monotonic``, ``wall``, ``sleep``) on a world's time.
    ``sleep`` runs the world for that long: a synchronous actor's retry loop blocks as it would."""

    #: what the wall clock reads at ``now_ns == 0``: 2026-01-01T00:00:00Z
    WALL_START = 1_767_225_600.0

    def __init__(self, world: World) -> None:
        self._world = world

    def monotonic(self) -> float:
        return self._world.now_ns / SECOND

    def wall(self) -> float:
        return self.WALL_START + self._world.now_ns / SECOND

    def wall_ms(self) -> int:
        return int(self.WALL_START) * 1000 + self._world.now_ns // MS

    def sleep(self, seconds: float) -> None:
        self._world.run_for(round(seconds * SECOND))


def _never() -> bool:
    return False
