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
from collections.abc import Sequence
from typing import Any

import ray

from actors.link import FrameStream
from actors.settings import InstanceSettings
from actors.supervision import announce_start, new_incarnation
from topics.changes import decode_change, decode_state, encode_change, encode_state, persistent_only
from topics.protocol import (
    MOVED,
    Batch,
    Done,
    Events,
    Failed,
    Follow,
    Hello,
    ProtocolError,
    ReadRecent,
    Replicate,
    Replicated,
    Superseded,
    TopicEvent,
    decode_event,
    decode_operation,
    encode_event,
    encode_frame,
    encode_result,
)
from history import export_worker
from history.store import Exporter, history_location
from replication.journal import FsyncPolicy, Journal, JournalCorrupt, JournalError, JournalGap
from replication.replica import (
    Abort,
    Address,
    AwaitPrime,
    Connect,
    DropLinks,
    Effect,
    Image,
    NotCaughtUp,
    Refuse,
    Release,
    ReplicaState,
    Role,
    SaveEpoch,
    Send,
    StaleEpoch,
    StopConnecting,
)
from topics.store import RECENT, TopicStore

__all__ = ["BACKUP", "IDLE", "PRIMARY", "NotCaughtUp", "NotPrimary", "Partition", "PartitionActor", "StaleEpoch",
           "remote_class"]

log = logging.getLogger("canopy.partition")
#: how long a primary waits for its backup's connect before it tries again (the replica state machine's
#: back-off); the kernel's own SYN retries would wait about 30 s after a long cut
BACKUP_CONNECT_TIMEOUT = 3.0


#: the roles as plain strings (what position() and stats() answer, and the controller says)
PRIMARY, BACKUP, IDLE = Role.PRIMARY.value, Role.BACKUP.value, Role.IDLE.value
#: a batch's answer and events: each to its stream, in order
Writes = list[tuple["_Peer", bytes]]


class _Peer(FrameStream):
    """A stream into this partition: a link's (a hello, then batches) or, on a
    backup, its primary's (a follow, then primes and replicated batches)."""

    def __init__(self, partition: Partition) -> None:
        super().__init__()
        self.partition = partition
        self.link: str | None = None
        self.follows = False
        #: a refused primary's stream, closing: what else it sent is dropped
        self.ignoring = False

    def on_frame(self, frame: Any) -> None:
        if self.ignoring:
            return
        if self.follows:
            self.partition.follow_frame(self, frame)
        elif self.link is not None:
            if not isinstance(frame, Batch):
                raise ProtocolError(f"a link does not send {type(frame).__name__} after its hello")
            self.partition.apply(self, frame)
        elif isinstance(frame, Follow):
            self.partition.follow(self, frame)
        else:
            self.partition.hello(self, frame)

    def refused(self, error: ProtocolError) -> None:
        log.error("partition %d: dropping %s: %s", self.partition.index,
                  "its primary" if self.follows else f"link {self.link}", error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.partition.forget(self)


class _ToBackup(FrameStream):
    """The primary's stream to its backup: primes and replicated batches out, acknowledgements in."""

    def __init__(self, partition: Partition) -> None:
        super().__init__()
        self.partition = partition

    def on_frame(self, frame: Any) -> None:
        if isinstance(frame, Superseded):
            self.partition.superseded(self, frame.epoch)
            return
        if not isinstance(frame, Replicated):
            raise ProtocolError(f"a backup does not send {type(frame).__name__}")
        self.partition.acknowledged(self, frame.id)

    def refused(self, error: ProtocolError) -> None:
        log.error("partition %d: dropping the stream to its backup: %s", self.partition.index, error)

    def connection_lost(self, exc: Exception | None) -> None:
        self.partition.backup_lost(self, exc)


class Partition:
    """The partition's work, in a plain object (Ray wraps every method of an
    actor class for tracing; the per-batch path here must not pay that).
    ``host``: the address to serve links on.

    With a ``journal``, the partition first recovers its topics from it (the
    newest snapshot, then every change after it); then every batch's changes
    to persistent topics are appended to it (one write) *before* the batch is
    answered, so nothing acknowledged is lost when a process dies. A snapshot
    is written (on a worker thread) every ``snapshot_every`` changes.

    Replicas. In a cluster each partition has a *primary* replica and a
    *backup* on another node (``replicated=True`` for both; ``role`` says which,
    ``idle`` until the controller says). Only the primary applies operations;
    any other replica answers every operation ``MOVED`` without applying it, so
    the link goes to the primary the partition map names. The primary sends
    every batch's changes (to persistent topics and the others; not reference
    topics, which views recompute) to its backup as one
    :class:`~topics.protocol.Replicate` frame, pipelined, and holds the batch's
    answer and the events it made in an ordered *outbox* until the backup has
    applied and journaled them (:class:`~topics.protocol.Replicated`): nothing is
    acknowledged, and no session sees a value, that only one node holds. A new
    backup first gets the primary's whole state (:class:`~topics.protocol.Prime`
    frames, taken between two batches) and continues the primary's journal
    sequence from it, so a promoted backup continues the partition's sequence
    with no gap and no duplicate.

    Fencing: a backup follows only a primary whose placement epoch is not older
    than its own, and a promoted backup drops its primary's stream. A primary
    that was replaced (it hung, or its node was cut off) therefore never gets
    another acknowledgement from its backup, and never answers a write again;
    it goes on alone only when the controller says its backup is gone
    (:meth:`set_backup` with ``None``, at a new epoch).

    Every replication decision (roles, epochs, frame ids, the outbox, the prime,
    fencing) is :attr:`replica`'s (:class:`~replication.replica.ReplicaState`);
    this object feeds it what happens and carries out its effects (:meth:`_run`)."""

    def __init__(
        self, index: int, host: str, journal: Journal | None = None, snapshot_every: int = 100_000,
        *, role: str = PRIMARY, replicated: bool = False, recent: int = RECENT,
    ) -> None:
        self.index = index
        #: messages kept for sessions taken up elsewhere (TopicStore.recent_since)
        self.recent = recent
        self.host = host
        self.replicated = replicated
        self.journal = journal
        self.store = self._new_store()
        self.snapshot_every = snapshot_every
        self._snapshotting = False
        self._sync_timer: asyncio.TimerHandle | None = None
        self._scrub_timer: asyncio.TimerHandle | None = None
        self._scrub_every_ms = 0
        #: journal files found damaged while running, and replaced (:meth:`start_scrub`)
        self.damaged_files = 0
        self.recovered = self._recover() if journal is not None else None
        self.secret = secrets.token_urlsafe(24)
        self.links: dict[str, _Peer] = {}
        self.server: asyncio.Server | None = None
        self.address: dict[str, Any] | None = None
        self.batches = 0
        self.operations = 0
        #: the replication state machine: this replica's role, epoch (durable in the journal
        #: directory), backup and outbox, or the primary it follows
        self.replica: ReplicaState[FrameStream, Writes] = ReplicaState(
            f"partition {index}", role=Role(role), epoch=journal.epoch if journal is not None else 0,
            sequence=journal.last_sequence if journal is not None else 0, journaled=journal is not None,
            image=self._image,
        )
        self._backup_task: asyncio.Task[None] | None = None  # the connection attempt to the backup
        self.exporter: Exporter | None = None
        self._exporting = False
        self._export_future: asyncio.Future[Any] | None = None
        self._export_process: export_worker.ExportProcess | None = None  # started with the first export
        self._export_timer: asyncio.TimerHandle | None = None
        self._drained: asyncio.Event | None = None  # set once nothing waits for the backup (a handover)
        self.replicas_applied = 0  # replicated batches applied as a backup
        # removal policies (the primary evaluates them: _schedule_removals)
        self._removal_timer: asyncio.TimerHandle | None = None
        self._removal_at = 0
        self.removed_by_policy = 0

    def _new_store(self) -> TopicStore:
        return TopicStore(
            clock=lambda: time.time_ns() // 1_000_000,
            record_changes=self.journal is not None,
            record_volatile=self.replicated,
            # a fresh numbering of messages, above every one an earlier replica handed out
            position=time.time_ns() // 1_000_000 * 1_000,
            recent=self.recent,
        )

    def _image(self) -> Image:
        """The whole state now (between two batches), for a new backup's prime."""
        store = self.store
        return Image([encode_state(state) for state in store.state(volatile=True)], store.position,
                     [encode_event(event) for event in store.recent])

    # -- what the state machine holds, read as attributes ------------------------------------

    @property
    def role(self) -> str:
        return self.replica.role.value

    @property
    def epoch(self) -> int:
        return self.replica.epoch

    @property
    def primary_since(self) -> int:
        return self.replica.since

    @property
    def handing_over(self) -> bool:
        return self.replica.handing_over

    @property
    def caught_up(self) -> bool:
        return self.replica.caught_up

    @property
    def primed(self) -> bool:
        return self.replica.primed

    @property
    def backup(self) -> FrameStream | None:
        """The stream to the backup, once connected."""
        return self.replica.stream

    @property
    def backup_address(self) -> dict[str, Any] | None:
        backup = self.replica.backup
        return backup._asdict() if backup is not None else None

    @property
    def follower(self) -> FrameStream | None:
        """The stream from the primary this backup follows."""
        return self.replica.follower

    @property
    def _outbox(self) -> Sequence[tuple[int, Writes]]:
        return self.replica.outbox

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
        try:
            recovery = journal.recover()
        except JournalCorrupt as e:
            if not self.replicated:
                raise JournalCorrupt(e.path, e.offset, e.reason, _REPAIR_HINT) from e
            # its peer holds the partition: start empty, to be primed again (never a primary before)
            journal.set_aside(str(e), time.time_ns() // 1_000_000)
            recovery = journal.recover()
        topics = self.store.load(recovery.states)
        skipped = self.store.replay(recovery.changes, recovery.times)
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
        if not self.replica.accepts_batches():
            moved = encode_result(Failed(MOVED, f"partition {self.index}'s primary is elsewhere; ask again"))
            done = Done(batch.sequence, [moved] * len(batch.operations), [], time.perf_counter_ns())
            self._answer([(peer, encode_frame(done))])
            return
        store = self.store
        results: list[Any] = []
        reads: list[tuple[int, ReadRecent]] = []
        for item in batch.operations:
            try:
                op = decode_operation(item)
            except ProtocolError as e:
                results.append(encode_result(Failed(e.code, str(e))))
                continue
            if type(op) is ReadRecent:
                # read once the whole batch is applied: every message whose event this Done
                # carries is then in the answer (the link hands events on before results)
                reads.append((len(results), op))
                results.append(None)
                continue
            results.append(encode_result(store.apply_one(peer.link, op)))
        for i, op in reads:
            results[i] = encode_result(store.apply_one(peer.link, op))
        self.batches += 1
        self.operations += len(results)
        encoded: dict[int, list[Any]] = {}
        self._settle(encoded)
        if self._removal_timer is None and store.removals.watched:
            self._schedule_removals()
        events = store.drain_events()
        own = events.pop(peer.link, None)
        position = store.position
        done = Done(batch.sequence, results, _encoded(own, encoded) if own else [], time.perf_counter_ns(), position)
        writes = [(peer, encode_frame(done))]
        for link, made in events.items():
            target = self.links.get(link)
            if target is not None:
                writes.append((target, encode_frame(Events(_encoded(made, encoded), position))))
        self._answer(writes)

    def _settle(self, encoded: dict[int, list[Any]]) -> None:
        """Journal and replicate what the store changed (before anything is answered)."""
        store = self.store
        if self.replica.replicating:
            self._replicate(encoded)
        elif self.journal is not None:
            changes = store.drain_changes()
            self._journal(changes)
            self.replica.appended(len(changes))
            store.drain_recent()
        elif self.replicated:
            store.drain_replicated()
            store.drain_recent()

    # -- removal policies (topics.removal_tracker) ---------------------------

    def _schedule_removals(self) -> None:
        """As the primary, look at the removal policies when the earliest may be due (at
        least every second while any is watched: gateways' reports come and go)."""
        if self.replica.role is not Role.PRIMARY:
            return
        now = time.time_ns() // 1_000_000
        at = self.store.removals.next_check_ms(now)
        if at is None:
            return
        if self._removal_timer is not None:
            if self._removal_at <= at:
                return
            self._removal_timer.cancel()
        self._removal_at = at
        self._removal_timer = asyncio.get_running_loop().call_later(max(at - now, 5) / 1000, self._expire)

    def _expire(self) -> None:
        """Remove what the due policies say, as a batch of its own: journaled, replicated,
        and its events to the links once the backup has it."""
        self._removal_timer = None
        if not self.replica.accepts_batches():
            return
        store = self.store
        self.removed_by_policy += store.expire(time.time_ns() // 1_000_000)
        encoded: dict[int, list[Any]] = {}
        self._settle(encoded)
        events = store.drain_events()
        if events:
            position = store.position
            writes = [(target, encode_frame(Events(_encoded(made, encoded), position)))
                      for link, made in events.items() if (target := self.links.get(link)) is not None]
            self._answer(writes)
        self._schedule_removals()

    def _replicate(self, encoded: dict[int, list[Any]]) -> None:
        """Journal the batch's changes here and send them all to the backup, with the
        batch's messages (``encoded``: the events encoded so far, by id)."""
        store = self.store
        changes, volatile = store.drain_replicated()
        recent = store.drain_recent()
        if not changes and not recent:
            return
        now = time.time_ns() // 1_000_000
        persistent = persistent_only(changes, volatile) if self.journal is not None and changes else None
        frame = self.replica.replicate(
            now, [encode_change(c) for c in changes], volatile, _encoded(recent, encoded) if recent else [],
            store.position, len(persistent) if persistent else 0,
        )
        if persistent:
            self._journal(persistent, now)  # before the backup or anyone hears of it
        if frame is not None:
            backup = self.replica.stream
            assert backup is not None
            backup.write(encode_frame(frame))

    def _answer(self, writes: Writes) -> None:
        """Write a batch's answer and events now, or once the backup has what they reveal."""
        if not self.replica.hold(writes):
            for target, data in writes:
                target.write(data)

    def _release(self) -> None:
        """Write what the backup's acknowledgements (or going on alone) released, in order."""
        replica = self.replica
        while (writes := replica.release()) is not None:
            for target, data in writes:
                target.write(data)
        if self._drained is not None and replica.drained:
            self._drained.set()

    def _run(self, effects: Sequence[Effect[FrameStream]]) -> None:
        """Carry out the state machine's effects in order. One that raises (the epoch's
        fsync) does not stop the others, as the state machine has moved on: the first
        exception is raised once they are done."""
        error: BaseException | None = None
        for effect in effects:
            try:
                self._effect(effect)
            except Exception as e:  # noqa: BLE001 - raised below
                error = error or e
        if error is not None:
            raise error

    def _effect(self, effect: Effect[FrameStream]) -> None:
        match effect:
            case SaveEpoch(epoch):
                if self.journal is not None:
                    self.journal.set_epoch(epoch)
            case AwaitPrime(epoch):
                if self.journal is not None:
                    self.journal.await_prime(epoch)
            case Connect(address, delay_ms, attempt):
                self._backup_task = asyncio.ensure_future(self._connect_backup(address, delay_ms, attempt))
            case StopConnecting():
                if self._backup_task is not None:
                    self._backup_task.cancel()
                    self._backup_task = None
            case Send(stream, frames):
                stream.write(b"".join(encode_frame(frame) for frame in frames))
            case Abort(stream):
                if stream.transport is not None:
                    stream.transport.abort()
            case Refuse(stream, answer):
                assert isinstance(stream, _Peer)
                stream.ignoring = True  # the primes and batches behind the follow
                stream.write(encode_frame(answer))
                if stream.transport is not None:
                    stream.transport.close()  # not abort: the answer must get there
            case Release():
                self._release()
            case DropLinks():
                for peer in list(self.links.values()):
                    if peer.transport is not None:
                        peer.transport.abort()

    def acknowledged(self, stream: _ToBackup, id: int) -> None:
        replica = self.replica
        caught_up = replica.caught_up
        if replica.acknowledged(stream, id):
            if replica.caught_up and not caught_up:
                log.info("partition %d: its backup has caught up", self.index)
            self._release()

    def backup_lost(self, stream: _ToBackup, exc: Exception | None) -> None:
        if stream is not self.replica.stream:
            return
        log.error("partition %d: the stream to its backup closed (%s); starting over with it",
                  self.index, exc or "closed")
        self._run(self.replica.backup_lost(stream))

    def superseded(self, stream: _ToBackup, epoch: int) -> None:
        """The backup refused to follow: it is at ``epoch``, newer than this primary's,
        under another primary (this one was paused or cut off meanwhile). Fenced: this
        replica stops replicating and answers nothing that waited for the backup; its
        links are dropped (what they had in flight has an unknown fate) and every later
        batch is answered MOVED."""
        effects = self.replica.superseded(stream, epoch)
        if effects:
            log.error("partition %d: superseded (epoch %d took over from this primary's %d); it stops serving",
                      self.index, epoch, self.epoch)
        self._run(effects)

    def set_backup(self, epoch: int, address: dict[str, Any] | None) -> None:
        """The controller's placement at ``epoch``: replicate to the replica at
        ``address`` (primed with the whole state first), or to none (answers that
        waited for the old backup go out now)."""
        self._run(self.replica.set_backup(epoch, _address(address)))

    async def _connect_backup(self, address: Address, delay_ms: int, attempt: int) -> None:
        if delay_ms:
            await asyncio.sleep(delay_ms / 1000)
        try:
            # bounded: after a long cut the kernel's SYN back-off alone would wait about 30 s
            _, stream = await asyncio.wait_for(asyncio.get_running_loop().create_connection(
                lambda: _ToBackup(self), address.host, address.port
            ), BACKUP_CONNECT_TIMEOUT)
        except (OSError, asyncio.TimeoutError) as e:
            (log.debug if delay_ms else log.warning)(
                "partition %d cannot reach its backup at %s:%s yet: %s", self.index, address.host, address.port, e,
            )
            self._backup_task = None
            self._run(self.replica.connect_failed(attempt))
            return
        self._backup_task = None
        self._run(self.replica.connected(attempt, stream))

    # -- the backup's side -------------------------------------------------

    def follow(self, peer: _Peer, frame: Follow) -> None:
        if not secrets.compare_digest(str(frame.secret), self.secret):
            raise ProtocolError("a follow must say this partition's secret")
        replica = self.replica
        effects = replica.follow(peer, frame.epoch)
        if replica.follower is peer:
            peer.follows = True
        else:  # fenced: the old primary learns it and stops retrying
            log.warning("partition %d: refusing a primary of epoch %d (this replica is at %d)",
                        self.index, frame.epoch, self.epoch)
        self._run(effects)

    def follow_frame(self, peer: _Peer, frame: Any) -> None:
        replica = self.replica
        replica.from_primary(peer, frame)
        if type(frame) is Replicate:
            changes = [decode_change(c) for c in frame.changes]
            self.store.replay(changes, frame.timestamp)
            self.store.drain_replicated()
            if frame.position:
                self.store.extend_recent([decode_event(e) for e in frame.recent], frame.position, frame.timestamp)
            persistent = persistent_only(changes, frame.volatile)
            if self.journal is not None and persistent:
                replica.journal_from(frame.first, len(persistent))
                try:
                    self.journal.append(persistent, frame.timestamp, first=frame.first,
                                        epoch=replica.follower_epoch)
                except JournalGap as e:
                    raise ProtocolError(str(e)) from e  # the stream drops; the primary primes again
                except JournalError:
                    log.exception("partition %d cannot write its journal; restarting", self.index)
                    os._exit(70)
                self._schedule_sync()
            self.replicas_applied += 1
        else:
            primed = replica.prime_part(frame, [decode_state(s) for s in frame.states],
                                        [decode_event(e) for e in frame.recent])
            if primed is not None:
                priming, recent = primed
                store = self._new_store()
                store.load(priming)
                if recent:  # the primary's window, numbered as it numbered it
                    store.extend_recent(recent, frame.position)
                store.position = frame.position or store.position
                self.store = store
                if self.journal is not None:
                    self.journal.reset([s for s in priming if s.specification().persistent], frame.sequence)
                replica.primed_at(frame.sequence)
                log.info("partition %d: primed as a backup with %d topics at record %d",
                         self.index, len(priming), frame.sequence)
        peer.write(encode_frame(Replicated(frame.id)))

    # -- roles (the controller's placement) --------------------------------

    def become_primary(self, epoch: int, backup: dict[str, Any] | None,
                       weighed: Sequence[int] | None = None) -> None:
        """Take over as the partition's primary at ``epoch`` (a backup must have been primed).

        ``weighed``: the controller placed the partition from every node's journal, this copy
        being the newest (``(epoch, last record)``, as :func:`~replication.journal_check.held`
        read it then; ``()``: it had none): a journal marked as awaiting a prime is then taken
        over after all (:meth:`Journal.trust`) when it still holds just that -- no copy
        holds more, and the prime it awaited will not come. Without it (or when the journal
        changed since) such a replica refuses, as a backup never primed does."""
        replica = self.replica
        was = replica.role
        damage = self._damage()
        set_aside = self.journal is not None and "files" in (self.journal.damaged or {})
        # a journal set aside as damaged is never trusted here: `canopy journal repair` saves what it held
        trusted = damage is not None and weighed is not None and not set_aside and self._holds(weighed)
        self._run(replica.become_primary(epoch, _address(backup), None if trusted else damage))
        if trusted:
            assert self.journal is not None
            log.warning("partition %d: no copy holds more than this journal (%s): it leads from it", self.index,
                        damage)
            self.journal.trust()
        if was is not Role.PRIMARY:
            log.info("partition %d: primary at epoch %d", self.index, epoch)
        self._schedule_removals()

    def _holds(self, weighed: Sequence[int]) -> bool:
        """Whether this replica's journal still holds what the controller weighed: the epoch its
        ``EPOCH`` keeps and the last record recovery gave back (as ``held`` read them, without
        reading the files again); ``()``: no record."""
        journal = self.journal
        if journal is None:
            return False
        if not weighed:
            return journal.last_sequence == 0
        return (journal.epoch, journal.last_sequence) == tuple(weighed)

    def _damage(self) -> str | None:
        """Why this replica's journal holds nothing to trust (its files were set aside), if so."""
        journal = self.journal
        damage = journal.damaged if journal is not None else None
        if journal is None or damage is None:
            return None
        return (f"this replica's journal was damaged ({damage.get('reason')}) and set aside in "
                f"{journal.directory / str(damage.get('files', ''))}; it holds nothing until its peer primes it, "
                f"and no other replica holds the partition. {_REPAIR_HINT}")

    def become_backup(self, epoch: int) -> None:
        """Follow the primary that will connect with ``epoch`` (or a newer one). A
        primary demoted without a :meth:`handover` drops its links (what they have in
        flight fails: its fate is unknown); after one, it tells them ``MOVED``."""
        self._run(self.replica.become_backup(epoch))

    async def handover(self, timeout: float) -> None:
        """Stop applying (batches are answered MOVED) and wait until every answer
        that waits for the backup has gone out: then the backup holds everything."""
        if self.replica.handover():
            self._drained = asyncio.Event()
            try:
                await asyncio.wait_for(self._drained.wait(), timeout)
            finally:
                self._drained = None
        await self.final_export(timeout)

    def position(self) -> dict[str, Any]:
        """Where this replica stands (a restarted controller rebuilds the partition map from it)."""
        replica = self.replica
        return {
            "role": self.role, "epoch": replica.epoch, "primed": replica.primed, "caught_up": replica.caught_up,
            "sequence": replica.sequence, "since": replica.since, "handing_over": replica.handing_over,
            "damaged": self.journal is not None and self.journal.damaged is not None,
            "address": _where(self.address), "backup": _where(self.backup_address),
        }

    # -- journal -------------------------------------------------------------

    def _journal(self, changes: list[Any], now_ms: int | None = None) -> None:
        """Journal a batch's changes before it is answered (the bytes reach the
        operating system; fsync per the policy)."""
        journal = self.journal
        assert journal is not None
        if not changes:
            return
        try:
            journal.append(changes, time.time_ns() // 1_000_000 if now_ms is None else now_ms,
                           epoch=self.replica.epoch)
        except JournalError:
            # applied but not journaled: never answer it; Ray restarts the partition
            # and it recovers what the journal holds
            log.exception("partition %d cannot write its journal; restarting", self.index)
            os._exit(70)
        self._schedule_sync()
        if not self._snapshotting and journal.last_sequence - journal.snapshot_sequence >= self.snapshot_every:
            self._snapshot()

    def _schedule_sync(self) -> None:
        journal = self.journal
        assert journal is not None
        due = journal.next_sync_ms
        if due is not None and self._sync_timer is None:
            delay = max(0.0, (due - time.time_ns() // 1_000_000) / 1000)
            self._sync_timer = asyncio.get_running_loop().call_later(delay, self._sync)

    def _sync(self) -> None:
        """The interval fsync, on a worker thread (it does not hold up appends). A rollover, a
        snapshot or an append's own fsync may have moved the due time on meanwhile (the tick then
        syncs nothing): the timer is set again for it, or the last bytes of a partition that went
        quiet would wait for no one."""
        self._sync_timer = None
        journal = self.journal
        if journal is not None:
            asyncio.get_running_loop().run_in_executor(None, journal.tick, time.time_ns() // 1_000_000) \
                .add_done_callback(self._synced)

    def _synced(self, future: asyncio.Future[bool]) -> None:
        if future.cancelled() or self.journal is None or self.journal.closed:
            return
        if future.exception() is not None:  # what waited may not be on disk, and may never be: as in _journal
            log.error("partition %d: the interval fsync failed (%s); restarting", self.index, future.exception())
            os._exit(70)
        self._schedule_sync()

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

    def start_scrub(self, every_ms: int) -> None:
        """Every ``every_ms`` (0: never), read the journal's files back on a worker thread
        and check every checksum. Damage found (a flipped bit, a cut file: the disk's
        doing, not canopy's) is made harmless at once: the replica's topics, which it
        holds in memory and its peer holds too, are written as a new snapshot after its
        last record, and the damaged files set aside (:meth:`Journal.replace_damaged`),
        so a restart never meets them."""
        self._scrub_every_ms = every_ms
        if self.journal is not None and every_ms > 0 and self._scrub_timer is None:
            self._scrub_timer = asyncio.get_running_loop().call_later(every_ms / 1000, self._scrub)

    def _scrub(self) -> None:
        self._scrub_timer = None
        journal = self.journal
        if journal is None:
            return
        asyncio.get_running_loop().run_in_executor(None, journal.scrub).add_done_callback(self._scrubbed)

    def _scrubbed(self, future: asyncio.Future[list[tuple[Any, str]]]) -> None:
        journal = self.journal
        if journal is None or future.cancelled():
            return
        if future.exception() is not None:
            log.error("partition %d: reading the journal back failed: %s", self.index, future.exception())
            damaged: list[tuple[Any, str]] = []
        else:
            damaged = future.result()
        loop = asyncio.get_running_loop()
        if damaged and self._snapshotting:  # a snapshot is being written: look again after it
            self._scrub_timer = loop.call_later(1.0, self._scrub)
            return
        if damaged:
            for path, why in damaged:
                log.error("partition %d: journal file %s is damaged (%s)", self.index, path, why)
            self.damaged_files += len(damaged)
            self._snapshotting = True
            states, sequence = self.store.state(), journal.last_sequence
            try:
                journal.roll()  # later records go to a segment of their own
            except JournalError as e:
                log.error("partition %d: cannot replace damaged journal files: %s", self.index, e)
                self._snapshotting = False
                return

            def replaced(done: asyncio.Future[Any]) -> None:
                self._snapshotting = False
                if done.exception() is not None:
                    log.error("partition %d: replacing damaged journal files failed: %s", self.index, done.exception())

            loop.run_in_executor(
                None, journal.replace_damaged, [p for p, _ in damaged], states, sequence, time.time_ns() // 1_000_000,
            ).add_done_callback(replaced)
        self.start_scrub(self._scrub_every_ms)

    # -- history ---------------------------------------------------------------

    def acknowledged_sequence(self) -> int:
        """The last journal sequence whose batch the backup acknowledged (every one, with no
        backup): what the history may export (a replaced primary's tail never gets there)."""
        return self.replica.acknowledged_sequence()

    def start_history(self, exporter: Exporter, every_ms: int) -> None:
        """Every ``every_ms``, as the primary: close the journal's segment and export the
        closed segments' acknowledged records on a worker thread (one export at a time)."""
        self.exporter = exporter
        loop = asyncio.get_running_loop()

        def tick() -> None:
            self._export_timer = loop.call_later(every_ms / 1000, tick)
            if self.replica.role is Role.PRIMARY:
                self.export_history()
            elif not self._exporting:  # a backup learns how far the history goes (its journal keeps the rest)
                self._exporting = True
                read = loop.run_in_executor(None, exporter.watermark)
                read.add_done_callback(lambda _: setattr(self, "_exporting", False))

        self._export_timer = loop.call_later(every_ms / 1000, tick)
        if self.replica.role is Role.PRIMARY:  # ready before the first export, or a clean stop's
            self._export_process = export_worker.ExportProcess(exporter)

            def started(future: asyncio.Future[Any]) -> None:
                error = None if future.cancelled() else future.exception()
                if error is not None:  # the first export starts it again
                    log.error("partition %d: starting its export process failed: %s", self.index, error)

            loop.run_in_executor(None, self._export_process.start).add_done_callback(started)

    def export_history(self, handing_over: bool = False) -> asyncio.Future[Any] | None:
        """Start an export (None: one runs, nothing is due, or this replica is not the primary;
        ``handing_over``: the last one, during a :meth:`handover`): a worker thread closes the
        journal segment and waits for a process of its own (:mod:`history.export_worker`) that
        writes the Parquet files, so the export never takes this process's interpreter lock."""
        journal, exporter = self.journal, self.exporter
        if journal is None or exporter is None or self._exporting or self.replica.role is not Role.PRIMARY:
            return None
        if self.replica.handing_over and not handing_over:
            return None
        upto = self.acknowledged_sequence()
        if upto <= exporter.exported:
            return None
        self._exporting = True

        if self._export_process is None:
            self._export_process = export_worker.ExportProcess(exporter)
        process = self._export_process

        def roll_and_export() -> Any:  # on a worker thread; the export runs in a process of its own
            journal.roll()
            return process.export(journal.closed_segments(), upto)

        def done(future: asyncio.Future[Any]) -> None:
            self._exporting = False
            error = None if future.cancelled() else future.exception()
            if error is not None:
                log.error("partition %d: exporting its history failed (it retries): %s", self.index, error)

        future = asyncio.get_running_loop().run_in_executor(None, roll_and_export)
        future.add_done_callback(done)
        self._export_future = future
        return future

    async def final_export(self, timeout: float) -> None:
        """Export what this primary holds: before a handover (its successor's journal may begin
        later, primed from this one's state) and when the server stops (nothing waits a minute)."""
        try:
            running = self._export_future
            if self._exporting and running is not None:
                await asyncio.wait_for(asyncio.shield(running), timeout)
            last = self.export_history(handing_over=True)
            if last is not None:
                await asyncio.wait_for(asyncio.shield(last), timeout)
        except TimeoutError:
            log.error("partition %d: exporting its history took longer than %.0f s; the history lacks its "
                      "newest changes until this partition's next primary exports them", self.index, timeout)
        except Exception as e:  # noqa: BLE001 - the handover or stop goes on; a successor logs any gap
            log.error("partition %d: exporting its history failed: %s: %s", self.index, type(e).__name__, e)

    def close(self) -> None:
        if self._removal_timer is not None:
            self._removal_timer.cancel()
        if self._export_timer is not None:
            self._export_timer.cancel()
        if self._export_process is not None:
            self._export_process.stop()
        if self._sync_timer is not None:
            self._sync_timer.cancel()
        if self._scrub_timer is not None:
            self._scrub_timer.cancel()
        self._run(self.replica.stop())
        if self.server is not None:
            self.server.close()
        if self.journal is not None:
            self.journal.close()

    def forget(self, peer: _Peer) -> None:
        if peer.follows:
            self.replica.follower_lost(peer)
            return
        if peer.link is not None and self.links.get(peer.link) is peer:
            del self.links[peer.link]
            self.store.drop_gateway(peer.link)

    def stats(self) -> dict[str, Any]:
        replica = self.replica
        return {
            "partition": self.index,
            "pid": os.getpid(),
            "address": self.address and {k: v for k, v in self.address.items() if k != "secret"},
            "role": self.role,
            "epoch": replica.epoch,
            "topics": len(self.store.tree),
            "registrations": len(self.store.index),
            "removal_policies": len(self.store.removals.watched),
            "removed_by_policy": self.removed_by_policy,
            "links": sorted(self.links),
            "batches": self.batches,
            "operations": self.operations,
            "journal": self.journal and {
                "sequence": self.journal.last_sequence, "snapshot": self.journal.snapshot_sequence,
                "policy": str(self.journal.policy), "damaged_files": self.damaged_files,
            },
            "backup": replica.backup and {
                "address": f"{replica.backup.host}:{replica.backup.port}",
                "connected": replica.stream is not None, "caught_up": replica.caught_up,
                "lag": replica.lag(), "waiting_answers": replica.waiting(),
            },
            "primed": replica.primed if replica.role is Role.BACKUP else None,
            "recovered": self.recovered,
            "history": self.exporter and {
                "exported": self.exporter.exported, "rows": self.exporter.rows,
                "acknowledged": self.acknowledged_sequence(),
            },
        }


def _where(address: dict[str, Any] | None) -> str | None:
    return f"{address['host']}:{address['port']}" if address else None


def _address(address: dict[str, Any] | None) -> Address | None:
    """A backup's address as :meth:`PartitionActor.become_backup` answered it."""
    return Address(address["host"], address["port"], address["secret"]) if address is not None else None


_REPAIR_HINT = (" `canopy journal check --data-dir DIR` says what is damaged; `canopy journal repair` cuts the "
                "journal at the damage (what follows it is lost), with serve stopped")


class PartitionActor:
    """The Ray shell. ``config``: the instance's settings (with them the partition
    journals its topics in the data directory, and recovers them first: also
    when Ray restarts it; without them it keeps its topics in memory only);
    ``host``: the address to serve links on (default: this Ray node's).
    ``role`` and ``replicated``: see :class:`Partition` (a replica the
    controller places starts ``idle``, also when Ray restarts it);
    ``directory``: the data directory of this replica's node, if not the configured one."""

    def __init__(
        self, index: int, count: int, config: InstanceSettings | None = None, host: str | None = None,
        role: str = PRIMARY, replicated: bool = False, directory: str | None = None,
    ) -> None:
        self.index = index
        self.count = count
        self._host = host
        self._role = role
        self._replicated = replicated
        journal = None
        self._exporter: Exporter | None = None
        if config is not None:
            if config.history_export_ms > 0:
                self._exporter = Exporter(
                    history_location(config.history_dir, config.data_dir), index, config.history_retention_days
                )
            journal = Journal.for_partition(
                directory or config.data_dir, index,
                policy=FsyncPolicy.parse(config.journal_fsync),
                segment_bytes=config.journal_segment_bytes,
                keep_segment=self._exporter.keeps if self._exporter is not None else None,
            )
        self._config = config
        self._journal = journal
        self.core: Partition | None = None
        self._starting = asyncio.Lock()
        self._incarnation = new_incarnation()
        announce_start()

    async def incarnation(self) -> str:
        """A token made when this process started: a new one means Ray restarted it."""
        return self._incarnation

    async def _core(self) -> Partition:
        async with self._starting:
            if self.core is None:
                config = self._config
                core = Partition(
                    self.index, self._host or ray.util.get_node_ip_address(), self._journal,
                    config.snapshot_every if config is not None else 100_000,
                    role=self._role, replicated=self._replicated,
                    recent=config.recent_messages if config is not None else RECENT,
                )
                await core.serve()
                core.start_scrub(config.journal_scrub_ms if config is not None else 0)
                if self._exporter is not None and config is not None:  # an exporter comes with settings
                    core.start_history(self._exporter, config.history_export_ms)
                self.core = core
                gc.freeze()  # what start-up made lives as long as the process: keep it out of every collection
            return self.core

    async def attach(self, link_id: str, epoch: int = 0) -> dict[str, Any]:
        """Where link ``link_id`` connects: host, port and the secret to say. A
        replica that is not the primary refuses (the link asks the controller again)."""
        core = await self._core()
        if core.role != PRIMARY:
            raise NotPrimary(f"partition {self.index}: this replica is the {core.role} at epoch {core.epoch}")
        assert core.address is not None
        return core.address

    async def follow_address(self) -> dict[str, Any]:
        """Where a primary connects to replicate to this replica."""
        core = await self._core()
        assert core.address is not None
        return core.address

    async def become_primary(self, epoch: int, backup: dict[str, Any] | None = None,
                             weighed: Sequence[int] | None = None) -> dict[str, Any]:
        core = await self._core()
        core.become_primary(epoch, backup, weighed)
        return core.position()

    async def become_backup(self, epoch: int) -> dict[str, Any]:
        """Demote or start following; returns where the primary connects."""
        core = await self._core()
        core.become_backup(epoch)
        assert core.address is not None
        return core.address

    async def set_backup(self, epoch: int, backup: dict[str, Any] | None) -> None:
        (await self._core()).set_backup(epoch, backup)

    async def handover(self, timeout: float = 30.0) -> dict[str, Any]:
        core = await self._core()
        await core.handover(timeout)
        return core.position()

    async def position(self) -> dict[str, Any]:
        return (await self._core()).position()

    async def stop(self) -> None:
        """Export what the history lacks (a primary, within 12 s) and close the journal cleanly
        (what waits for an fsync gets it)."""
        if self.core is not None:
            await self.core.final_export(12.0)
            self.core.close()
        elif self._journal is not None:
            self._journal.close()

    async def export_history(self) -> dict[str, Any] | None:
        """Export to the history now (as the primary); what was written, or None when nothing was due."""
        core = await self._core()
        future = core.export_history()
        if future is None:
            return None
        report = await future
        return {"files": len(report.files), "rows": report.rows, "exported": report.exported,
                "gaps": report.gaps, "seconds": round(report.seconds, 3)}

    async def stats(self) -> dict[str, Any]:
        if self.core is None:
            return {"partition": self.index, "pid": os.getpid(), "address": None, "role": self._role}
        return self.core.stats()


class NotPrimary(Exception):
    """The replica asked for is not the partition's primary."""


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
