"""PartitionActor: the Ray shell around one :class:`~topics.store.TopicStore`.

A partition is a plain (single-threaded) actor, so the operations of one
gateway run in the order that gateway sent them. Each :meth:`apply` call
carries a msgpack batch of operations and returns a msgpack batch of
results; the events the batch produced leave in one ``deliver`` call per
interested gateway, numbered per gateway so the gateway can restore their
order (an async actor may start calls out of order).
"""

from __future__ import annotations

import os
import time
from typing import Any

import msgpack
import ray

from topics.store import TopicStore


class PartitionActor:
    def __init__(self, index: int, count: int) -> None:
        self.index = index
        self.count = count
        self.store = TopicStore(clock=lambda: time.time_ns() // 1_000_000)
        self._gateways: dict[str, Any] = {}
        self._sequence: dict[str, int] = {}
        self._batches = 0
        self._operations = 0

    def attach_gateway(self, gateway_id: str, handle: Any) -> None:
        self._gateways[gateway_id] = handle
        self._sequence.setdefault(gateway_id, 0)

    def detach_gateway(self, gateway_id: str) -> int:
        self._gateways.pop(gateway_id, None)
        self._sequence.pop(gateway_id, None)
        return self.store.drop_gateway(gateway_id)

    def apply(self, gateway_id: str, batch: bytes) -> bytes:
        operations = msgpack.unpackb(batch, raw=False, use_list=True)
        results = self.store.apply(gateway_id, operations)
        self._batches += 1
        self._operations += len(results)
        self._flush()
        return msgpack.packb(results, use_bin_type=True)  # type: ignore[no-any-return]

    def _flush(self) -> None:
        for gateway_id, events in self.store.drain_events().items():
            handle = self._gateways.get(gateway_id)
            if handle is None:
                continue
            self._sequence[gateway_id] += 1
            handle.deliver.remote(
                self.index, self._sequence[gateway_id], msgpack.packb(events, use_bin_type=True)
            )

    def stats(self) -> dict[str, Any]:
        return {
            "partition": self.index,
            "pid": os.getpid(),
            "topics": len(self.store.tree),
            "registrations": len(self.store.index),
            "gateways": sorted(self._gateways),
            "batches": self._batches,
            "operations": self._operations,
        }


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=0)(PartitionActor)
