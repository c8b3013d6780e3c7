"""PartitionActor: the Ray shell around one :class:`~topics.store.TopicStore`.

Ray places and supervises the partition; the data plane reaches it over TCP
(:mod:`actors.link`). :meth:`PartitionActor.attach` starts, once, a stream
server on this node's address and hands out that address with a secret; a
link connects, says :class:`~topics.protocol.Hello` with the secret, and
then sends batches. Everything runs on the actor's one event loop, so
batches from all links apply one at a time, each in order.

For each batch the partition answers the sending link with one
:class:`~topics.protocol.Done` (its results, preceded by the events it made
for that link) and writes the events it made for every other link as one
:class:`~topics.protocol.Events` frame each; an event is encoded once
however many links it goes to. When a link's stream closes, the partition
forgets that link's registrations.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import secrets
import time
from typing import Any

import ray

from actors.link import FrameStream
from actors.supervision import announce_start
from topics.protocol import (
    Batch,
    Done,
    Events,
    Failed,
    Hello,
    ProtocolError,
    TopicEvent,
    decode_operation,
    encode_event,
    encode_frame,
    encode_result,
)
from replication.journal import FsyncPolicy, Journal, JournalError
from topics.store import TopicStore

log = logging.getLogger("canopy.partition")


class _Peer(FrameStream):
    """A link's stream into this partition: a hello, then batches."""

    def __init__(self, partition: Partition) -> None:
        super().__init__()
        self.partition = partition
        self.link: str | None = None

    def on_frame(self, frame: Any) -> None:
        if self.link is None:
            self.partition.hello(self, frame)
        elif isinstance(frame, Batch):
            self.partition.apply(self, frame)
        else:
            raise ProtocolError(f"a link does not send {type(frame).__name__} after its hello")

    def refused(self, error: ProtocolError) -> None:
        log.error("partition %d: dropping link %s: %s", self.partition.index, self.link, error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.partition.forget(self)


class Partition:
    """The partition's work, in a plain object (Ray wraps every method of an
    actor class for tracing; the per-batch path here must not pay that).
    ``host``: the address to serve links on.

    With a ``journal``, the partition first recovers its topics from it (the
    newest snapshot, then every change after it); then every batch's changes
    to persistent topics are appended to it (one write) *before* the batch is
    answered, so nothing acknowledged is lost when a process dies. A snapshot
    is written (on a worker thread) every ``snapshot_every`` changes."""

    def __init__(self, index: int, host: str, journal: Journal | None = None, snapshot_every: int = 100_000) -> None:
        self.index = index
        self.host = host
        self.store = TopicStore(clock=lambda: time.time_ns() // 1_000_000, record_changes=journal is not None)
        self.journal = journal
        self.snapshot_every = snapshot_every
        self._snapshotting = False
        self._sync_timer: asyncio.TimerHandle | None = None
        self.recovered = self._recover() if journal is not None else None
        self.secret = secrets.token_urlsafe(24)
        self.links: dict[str, _Peer] = {}
        self.server: asyncio.Server | None = None
        self.address: dict[str, Any] | None = None
        self.batches = 0
        self.operations = 0

    async def serve(self) -> dict[str, Any]:
        """Start the stream server (once); where links connect, with the secret."""
        if self.address is None:
            self.server = await asyncio.get_running_loop().create_server(
                lambda: _Peer(self), self.host, 0, reuse_address=True
            )
            port = self.server.sockets[0].getsockname()[1]
            self.address = {"host": self.host, "port": port, "secret": self.secret}
        return self.address

    def hello(self, peer: _Peer, frame: Any) -> None:
        if not isinstance(frame, Hello) or not secrets.compare_digest(str(frame.secret), self.secret):
            raise ProtocolError("the first frame must be a hello with this partition's secret")
        old = self.links.get(frame.link)
        if old is not None and old is not peer:
            self.forget(old)
            if old.transport is not None:
                old.transport.abort()
        peer.link = frame.link
        self.links[frame.link] = peer

    def _recover(self) -> dict[str, Any]:
        journal = self.journal
        assert journal is not None
        started = time.perf_counter()
        recovery = journal.recover()
        topics = self.store.load(recovery.states)
        skipped = self.store.replay(recovery.changes)
        report = {
            "topics": len(self.store.tree), "from_snapshot": topics, "changes": len(recovery.changes),
            "seconds": round(time.perf_counter() - started, 3), "problems": list(recovery.problems),
        }
        if skipped:
            log.error("partition %d: %d journaled changes did not apply", self.index, skipped)
        if recovery.states or recovery.changes:
            log.warning("partition %d recovered %d topics (%d from the snapshot, %d changes) in %.2f s",
                        self.index, report["topics"], topics, len(recovery.changes), report["seconds"])
        return report

    def apply(self, peer: _Peer, batch: Batch) -> None:
        assert peer.link is not None
        store = self.store
        results = []
        for item in batch.operations:
            try:
                op = decode_operation(item)
            except ProtocolError as e:
                results.append(encode_result(Failed(e.code, str(e))))
                continue
            results.append(encode_result(store.apply_one(peer.link, op)))
        self.batches += 1
        self.operations += len(results)
        if self.journal is not None:
            self._journal(store.drain_changes())
        events = store.drain_events()
        encoded: dict[int, list[Any]] = {}
        own = events.pop(peer.link, None)
        done = Done(batch.sequence, results, _encoded(own, encoded) if own else [], time.perf_counter_ns())
        peer.write(encode_frame(done))
        for link, made in events.items():
            target = self.links.get(link)
            if target is not None:
                target.write(encode_frame(Events(_encoded(made, encoded))))

    def _journal(self, changes: list[Any]) -> None:
        """Journal a batch's changes before it is answered (the bytes reach the
        operating system; fsync per the policy)."""
        journal = self.journal
        assert journal is not None
        if not changes:
            return
        try:
            journal.append(changes, time.time_ns() // 1_000_000)
        except JournalError:
            # applied but not journaled: never answer it; Ray restarts the partition
            # and it recovers what the journal holds
            log.exception("partition %d cannot write its journal; restarting", self.index)
            os._exit(70)
        due = journal.next_sync_ms
        if due is not None and self._sync_timer is None:
            delay = max(0.0, (due - time.time_ns() // 1_000_000) / 1000)
            self._sync_timer = asyncio.get_running_loop().call_later(delay, self._sync)
        if not self._snapshotting and journal.last_sequence - journal.snapshot_sequence >= self.snapshot_every:
            self._snapshot()

    def _sync(self) -> None:
        """The interval fsync, on a worker thread (it does not hold up appends)."""
        self._sync_timer = None
        journal = self.journal
        if journal is not None:
            asyncio.get_running_loop().run_in_executor(None, journal.tick, time.time_ns() // 1_000_000)

    def _snapshot(self) -> None:
        """Take the persistent topics now (between batches) and write them on a worker thread."""
        journal = self.journal
        assert journal is not None
        self._snapshotting = True
        states, sequence = self.store.state(), journal.last_sequence

        def done(future: asyncio.Future[Any]) -> None:
            self._snapshotting = False
            if future.exception() is not None:
                log.error("partition %d: a snapshot failed: %s", self.index, future.exception())

        asyncio.get_running_loop().run_in_executor(None, journal.write_snapshot, states, sequence).add_done_callback(done)

    def close(self) -> None:
        if self._sync_timer is not None:
            self._sync_timer.cancel()
        if self.server is not None:
            self.server.close()
        if self.journal is not None:
            self.journal.close()

    def forget(self, peer: _Peer) -> None:
        if peer.link is not None and self.links.get(peer.link) is peer:
            del self.links[peer.link]
            self.store.drop_gateway(peer.link)

    def stats(self) -> dict[str, Any]:
        return {
            "partition": self.index,
            "pid": os.getpid(),
            "address": self.address and {k: v for k, v in self.address.items() if k != "secret"},
            "topics": len(self.store.tree),
            "registrations": len(self.store.index),
            "links": sorted(self.links),
            "batches": self.batches,
            "operations": self.operations,
            "journal": self.journal and {
                "sequence": self.journal.last_sequence, "snapshot": self.journal.snapshot_sequence,
                "policy": str(self.journal.policy),
            },
            "recovered": self.recovered,
        }


class PartitionActor:
    """The Ray shell. ``config``: the server settings (with them the partition
    journals its topics in the data directory, and recovers them first: also
    when Ray restarts it); ``host``: the address to serve links on (default:
    this Ray node's)."""

    def __init__(self, index: int, count: int, config: dict[str, Any] | None = None, host: str | None = None) -> None:
        self.index = index
        self.count = count
        self._host = host
        journal = None
        if config is not None:
            journal = Journal.for_partition(
                config["data_dir"], index, policy=FsyncPolicy.parse(config.get("journal_fsync", "interval:100"))
            )
        self._config = config
        self._journal = journal
        self.core: Partition | None = None
        self._starting = asyncio.Lock()
        self._incarnation = secrets.token_hex(8)
        announce_start()

    async def incarnation(self) -> str:
        """A token made when this process started: a new one means Ray restarted it."""
        return self._incarnation

    async def attach(self, link_id: str) -> dict[str, Any]:
        """Where link ``link_id`` connects: host, port and the secret to say."""
        async with self._starting:
            if self.core is None:
                snapshot_every = int((self._config or {}).get("snapshot_every", 100_000))
                core = Partition(self.index, self._host or ray.util.get_node_ip_address(), self._journal, snapshot_every)
                await core.serve()
                self.core = core
                gc.freeze()  # what start-up made lives as long as the process: keep it out of every collection
            assert self.core.address is not None
            return self.core.address

    async def stop(self) -> None:
        """Close the journal cleanly (what waits for an fsync gets it)."""
        if self.core is not None:
            self.core.close()
        elif self._journal is not None:
            self._journal.close()

    async def stats(self) -> dict[str, Any]:
        if self.core is None:
            return {"partition": self.index, "pid": os.getpid(), "address": None}
        return self.core.stats()


def _encoded(events: list[TopicEvent], memo: dict[int, list[Any]]) -> list[Any]:
    """Encode ``events``, each once per batch however many links get it."""
    out = []
    for event in events:
        key = id(event)
        item = memo.get(key)
        if item is None:
            item = memo[key] = encode_event(event)
        out.append(item)
    return out


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(PartitionActor)
