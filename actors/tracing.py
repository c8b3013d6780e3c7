"""Sampled per-hop timing of updates through a gateway (``trace`` requests).

While tracing, every ``every``-th ``set`` the gateway receives is followed
through the data plane and recorded with the monotonic clock
(``time.perf_counter_ns``) at each hop::

    received   the gateway read the client's frame that carried it
    forwarded  the gateway handed the batch that carried it to the partition's socket
    applied    the partition had applied that batch
    returned   the gateway read the partition's answer (the update's events first)
    written    the gateway had written the update to every subscribed session

``applied`` is read on the partition's machine: the hops are comparable only
when the gateway and the partition share one (the benchmark's case). A
record also carries the topic path and the value as set, so that whoever
made the value can find its own send and receive times (``bench/broker.py``
puts its send time in the value).
"""

from __future__ import annotations

from canopy.protocol import TraceRecord

DEFAULT_LIMIT = 100_000
__all__ = ["DEFAULT_LIMIT", "TraceRecord", "Tracer"]


class Tracer:
    def __init__(self) -> None:
        self.every = 0
        self.limit = DEFAULT_LIMIT
        self._count = 0
        self.records: list[TraceRecord] = []
        #: records whose update is still to be written to the sessions
        self.unwritten: list[TraceRecord] = []

    def configure(self, every: int, limit: int) -> list[TraceRecord]:
        """Sample every ``every``-th set from now on (0: stop), keeping at most
        ``limit`` records; return (and forget) the records taken so far."""
        taken, self.records = self.records, []
        self.every, self.limit, self._count = every, limit, 0
        return taken

    def sample(self) -> bool:
        if self.every <= 0 or len(self.records) + len(self.unwritten) >= self.limit:
            return False
        self._count += 1
        if self._count < self.every:
            return False
        self._count = 0
        return True
