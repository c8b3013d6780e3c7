"""A gateway's pipelined, batching channel to one partition.

Operations are queued as they arrive. At the end of the current event-loop
turn (so everything one client frame carried, and everything other sessions
sent in the same turn, travels together), and while fewer than
``max_in_flight`` calls are outstanding, the queue (up to ``max_batch``
operations) leaves as one ``apply`` call; otherwise it waits for a call to
return. At low load an operation leaves within one loop turn; under load
the batches grow by themselves to what accumulates during one round trip,
so no timer is needed and the data plane never makes one Ray call per
message.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack


class PartitionUnavailable(Exception):
    code = "UNAVAILABLE"


class PartitionChannel:
    def __init__(
        self,
        index: int,
        handle: Any,
        gateway_id: str,
        max_in_flight: int = 4,
        max_batch: int = 2000,
        window: float = 0.0,
    ) -> None:
        self.index = index
        self.window = window
        self._last_send = 0.0
        self.handle = handle
        self.gateway_id = gateway_id
        self.max_in_flight = max_in_flight
        self.max_batch = max_batch
        self._queue: list[tuple[list[Any], asyncio.Future[list[Any]]]] = []
        self._in_flight = 0
        self._scheduled = False
        self.calls = 0
        self.operations = 0

    def submit(self, operation: list[Any]) -> asyncio.Future[list[Any]]:
        """Queue an operation; the future resolves to its ``[status, ...]`` result."""
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queue.append((operation, future))
        if not self._scheduled and self._in_flight < self.max_in_flight:
            self._schedule()
        return future

    def _schedule(self) -> None:
        self._scheduled = True
        loop = asyncio.get_running_loop()
        wait = self._last_send + self.window - loop.time()
        if wait > 0 and len(self._queue) < self.max_batch:
            loop.call_later(wait, self._flush)
        else:
            loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._scheduled = False
        while self._queue and self._in_flight < self.max_in_flight:
            self._send()

    def _send(self) -> None:
        batch, self._queue = self._queue[: self.max_batch], self._queue[self.max_batch :]
        if not batch:
            return
        self._last_send = asyncio.get_running_loop().time()
        self._in_flight += 1
        self.calls += 1
        self.operations += len(batch)
        blob = msgpack.packb([op for op, _ in batch], use_bin_type=True)
        ref = self.handle.apply.remote(self.gateway_id, blob)
        asyncio.ensure_future(self._complete(ref, [f for _, f in batch]))

    async def _complete(self, ref: Any, futures: list[asyncio.Future[list[Any]]]) -> None:
        try:
            results = msgpack.unpackb(await ref, raw=False, use_list=True)
        except Exception as e:  # a Ray error: the partition is gone or failed
            error = PartitionUnavailable(f"partition {self.index} is unavailable: {type(e).__name__}: {e}")
            for f in futures:
                if not f.done():
                    f.set_exception(error)
        else:
            for f, result in zip(futures, results):
                if not f.done():
                    f.set_result(result)
        finally:
            self._in_flight -= 1
            if self._queue and self._in_flight < self.max_in_flight and not self._scheduled:
                self._schedule()


class Resequencer:
    """Restores the order of numbered batches from each partition.

    Partitions number their ``deliver`` calls per receiver from 1; an async
    actor may start them out of order, so a batch that arrives early is held
    until the gap before it is filled.
    """

    def __init__(self, partitions: int) -> None:
        self._next = [1] * partitions
        self._held: dict[tuple[int, int], bytes] = {}

    def accept(self, partition: int, sequence: int, blob: bytes) -> list[bytes]:
        """The batches that are now in order (possibly none), oldest first."""
        expected = self._next[partition]
        if sequence != expected:
            self._held[(partition, sequence)] = blob
            return []
        ready = [blob]
        expected += 1
        while (held := self._held.pop((partition, expected), None)) is not None:
            ready.append(held)
            expected += 1
        self._next[partition] = expected
        return ready
