"""SimReplica: the real :class:`~replication.replica.ReplicaState` in a shell like ``Partition``'s.

The shell owns what ``actors.partition.Partition`` owns, as models: the store (key -> the ids of
every write to it, in order: the full history, so "write ``w`` is held" is a set lookup and a
prime copies histories), the journal (a :class:`~tests.simulation.disk.SimJournal`, used as the
partition uses its :class:`~replication.journal.Journal`), the streams (the network's ends; the
frames are ``topics.protocol``'s NamedTuples, not encoded) and the timers. It feeds the state
machine what happens and carries out its effects in order, as ``Partition._run`` does; the
commands are ``PartitionActor``'s (``become_primary``, ``become_backup``, ``set_backup``,
``handover``, ``position``, ``attach``), answered over :class:`~tests.simulation.processes.Calls`.
``become_primary`` takes a third argument, which ``PartitionActor``'s does not have yet: what
the controller weighed this replica's journal at (``held``) when it placed the partition from
every node's journal and found none newer. A replica whose journal awaits a prime (or was set
aside: then no copy holds anything) takes over all the same, from what it holds, while its
journal is still as weighed.

A link's batch holds one write ``[key, write id]``; its :class:`~topics.protocol.Done` says
``ok`` or ``MOVED``. A write is acknowledged when the primary's shell releases its ``ok``
(:meth:`~tests.simulation.invariants.Checker.acknowledged`), whether or not it then reaches the
client.

A crash kills the process (the operating system keeps the journal's bytes; the sockets close;
the store goes with the memory); at its next start the replica recovers the store from the
journal, setting a damaged journal aside (it starts empty and cannot lead), and comes back
idle at the journal's epoch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from replication.journal import JournalBusy, JournalCorrupt, JournalGap
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
)
from tests.simulation.disk import SimJournal
from tests.simulation.invariants import Checker
from tests.simulation.network import End, Network
from tests.simulation.processes import Done as Reply
from tests.simulation.processes import ActorUnavailable, Process, SimNode
from topics.protocol import Batch, Done, Follow, Hello, ProtocolError, Replicate, Replicated, Superseded

__all__ = ["MOVED", "OK", "Address", "NotPrimary", "Position", "SimReplica"]

OK = ["ok"]
MOVED = ["MOVED"]
PRIME_CHUNK = 3  # states per prime frame: several frames for most primes
SNAPSHOT_EVERY = 8  # journal records between two snapshots
MS = 1_000_000
HANDOVER_MS = 30_000  # PartitionActor.handover's own bound (30 s)

#: what waits in the outbox: the link's end, the answer, the write id (None: a MOVED answer)
Answer = tuple[End, Done, int | None, str]


class NotPrimary(Exception):
    """``attach`` to a replica that is not the partition's primary."""


class Position(NamedTuple):
    """What ``position()`` answers (the partition's dict, and the process's incarnation)."""

    incarnation: int
    role: Role
    epoch: int
    primed: bool
    caught_up: bool
    sequence: int
    since: int
    handing_over: bool
    damaged: bool
    address: str
    backup: str | None


def where(address: Address) -> str:
    return f"{address.host}:{address.port}"


class _Peer:
    """The accepting side of a stream into a replica: a link's (a hello, then batches) or a
    primary's (a follow, then primes and replicated batches)."""

    __slots__ = ("replica", "incarnation", "link", "follow_epoch", "ignoring")

    def __init__(self, replica: SimReplica) -> None:
        self.replica = replica
        self.incarnation = replica.incarnation
        self.link: str | None = None
        self.follow_epoch: int | None = None
        self.ignoring = False

    def on_message(self, end: End, message: Any) -> None:
        replica = self.replica
        if replica.node.deferred(self.on_message, end, message) or not replica.current(self.incarnation):
            return
        if self.ignoring:
            return
        if self.follow_epoch is not None:
            replica.from_primary(self, end, message)
        elif self.link is not None:
            replica.batch(end, message)
        elif type(message) is Follow:
            replica.follow(self, end, message)
        elif type(message) is Hello and message.secret == replica.address.secret:
            replica.hello(self, end, message.link)
        else:
            end.abort()

    def on_lost(self, end: End) -> None:
        replica = self.replica
        if replica.node.deferred(self.on_lost, end) or not replica.current(self.incarnation):
            return
        replica.ends.pop(end, None)
        if self.follow_epoch is not None:
            replica.state.follower_lost(end)
        elif self.link is not None and replica.links.get(self.link) is end:
            del replica.links[self.link]


class _ToBackup:
    """The primary's stream to its backup: acknowledgements (or a fence) come back."""

    __slots__ = ("replica", "incarnation")

    def __init__(self, replica: SimReplica, incarnation: int) -> None:
        self.replica = replica
        self.incarnation = incarnation

    def on_message(self, end: End, message: Any) -> None:
        replica = self.replica
        if replica.node.deferred(self.on_message, end, message) or not replica.current(self.incarnation):
            return
        if type(message) is Superseded:
            replica.run(replica.state.superseded(end, message.epoch))
            return
        try:
            fresh = type(message) is Replicated and replica.state.acknowledged(end, message.id)
        except ProtocolError:
            end.abort()
            return
        if fresh:
            replica.release()

    def on_lost(self, end: End) -> None:
        replica = self.replica
        if replica.node.deferred(self.on_lost, end) or not replica.current(self.incarnation):
            return
        replica.ends.pop(end, None)
        replica.run(replica.state.backup_lost(end))


class SimReplica(Process):
    """The replica of partition ``index`` on ``node`` (see the module docstring)."""

    state: ReplicaState[End, Answer]

    def __init__(self, name: str, index: int, node: SimNode, journal: SimJournal, network: Network,
                 checker: Checker) -> None:
        super().__init__(network.world, name, node)
        self.index = index
        self.journal = journal
        self.network = network
        self.checker = checker
        self.store: dict[str, list[int]] = {}
        self.held: set[int] = set()
        self.ends: dict[End, None] = {}
        self.links: dict[str, End] = {}
        self.address = Address(node.name, 0, "")
        self.applying = False  # has applied a batch since it last became the primary
        self.opened = False  # its journal recovered: the state machine runs
        self._ports = 0
        self._connecting: Any = None
        self._sync: Any = None
        self._handover: tuple[Reply, Any] | None = None
        checker.replicas.append(self)

    # -- the process -----------------------------------------------------------------------------

    def start(self) -> None:
        self.opened = False
        self._open()

    def _open(self) -> bool:
        """Recover the store from the journal and serve: False while the journal is another
        process's (a replica made again on a node where the old one's kill is in flight:
        ``JournalBusy`` in production), tried again at every call, as ``PartitionActor._core``."""
        journal = self.journal
        if journal.recovered:
            return False
        before = {change[1] for _, _, change in journal.records}
        try:
            recovery = journal.recover()
        except JournalCorrupt as e:  # its peer holds the partition: start empty, to be primed again
            kept = before | {wid for _, wids in (journal.snapshot[1] if journal.snapshot is not None else ())
                             for wid in wids}
            journal.set_aside(str(e), self.world.now_ms)
            self.checker.set_aside(self, kept)
            recovery = journal.recover()
        states: list[Any] = list(recovery.states)  # (key, write ids), as _image and the prime wrote them
        changes: list[Any] = list(recovery.changes)  # (key, write id)
        store: dict[str, list[int]] = {key: list(wids) for key, wids in states}
        for key, wid in changes:
            store.setdefault(key, []).append(wid)
        self._load(store)
        if recovery.problems:  # a torn tail cut off: what it held is gone from this copy
            self.checker.lost_tail(self.node.name, self.index, before - self.held)
        self._ports += 1
        port = self.incarnation * 1000 + self._ports
        self.address = Address(self.node.name, port, f"secret-{self.name}-{port}")
        self.network.listen(self.node.name, self._where(self.address), self._accept)
        self.state = ReplicaState(self.name, role=Role.IDLE, epoch=journal.epoch, sequence=journal.last_sequence,
                                  journaled=True, image=self._image, prime_chunk=PRIME_CHUNK)
        self.applying = False
        self.opened = True
        return True

    def stop(self, clean: bool) -> None:
        self._load({})  # the process's memory goes with it: only the journal keeps its writes
        if not self.opened:
            return
        self.opened = False
        self.network.unlisten((self.node.name, self._where(self.address)))
        for end in list(self.ends):
            end.kill()
        self.ends.clear()
        self.links.clear()
        for timer in (self._connecting, self._sync):
            if timer is not None:
                self.world.cancel(timer)
        self._connecting = self._sync = None
        if self._handover is not None:  # Ray fails the call in flight
            reply, timer = self._handover
            self._handover = None
            self.world.cancel(timer)
            reply(None, ActorUnavailable(f"{self.name} died"))
        if clean:
            self.journal.close()
        self.journal.kill()
        self.world.note("journal closed" if clean else "journal dropped", self.name)

    def _where(self, address: Address) -> str:
        return f"partition-{self.index}:{address.port}"

    def _accept(self, end: End) -> _Peer:
        self.ends[end] = None
        return _Peer(self)

    def _load(self, store: dict[str, list[int]]) -> None:
        self.store = store
        self.held = {wid for wids in store.values() for wid in wids}

    def _image(self) -> Image:
        return Image([[key, list(wids)] for key, wids in sorted(self.store.items())], 0)

    # -- effects ---------------------------------------------------------------------------------

    def run(self, effects: Sequence[Effect[End]]) -> None:
        for effect in effects:
            if type(effect) is Send:
                for frame in effect.frames:
                    effect.stream.send(frame)
            elif type(effect) is Release:
                self.release()
            elif type(effect) is SaveEpoch:
                self.checker.saved_epoch(self, effect.epoch)
                self.journal.set_epoch(effect.epoch)
            elif type(effect) is AwaitPrime:
                self.journal.await_prime(effect.epoch)
            elif type(effect) is Connect:
                self._connecting = self.world.at(effect.delay_ms * MS, self._connect, effect, self.incarnation)
            elif type(effect) is Abort:
                effect.stream.abort()
            elif type(effect) is Refuse:
                handler = effect.stream.handler
                assert isinstance(handler, _Peer)
                handler.ignoring = True
                effect.stream.send(effect.answer)
                effect.stream.close()
            elif type(effect) is DropLinks:
                for end in list(self.links.values()):
                    end.abort()
            elif self._connecting is not None:  # StopConnecting: a stale attempt's outcome is refused by its number
                self.world.cancel(self._connecting)
                self._connecting = None

    def _connect(self, effect: Connect, incarnation: int) -> None:
        if self.node.deferred(self._connect, effect, incarnation) or not self.current(incarnation):
            return
        self._connecting = None
        address, attempt = effect.address, effect.attempt

        def connected(end: End) -> None:
            if self.node.deferred(connected, end):
                return
            if not self.current(incarnation):
                end.kill()
                return
            self.ends[end] = None
            self.run(self.state.connected(attempt, end))

        def failed(reason: str) -> None:
            if not self.node.deferred(failed, reason) and self.current(incarnation):
                self.run(self.state.connect_failed(attempt))

        self.network.connect(self.node.name, (address.host, self._where(address)), _ToBackup(self, incarnation),
                             connected, failed)

    def release(self) -> None:
        """Write what the backup's acknowledgements (or going on alone) released, in order."""
        state = self.state
        while (answer := state.release()) is not None:
            self._write(answer)
        if self._handover is not None and state.drained:
            reply, timer = self._handover
            self._handover = None
            self.world.cancel(timer)
            reply(self.position(), None)

    def _write(self, answer: Answer) -> None:
        end, done, wid, key = answer
        if wid is not None:
            self.checker.acknowledged(self, wid, key)
            self.world.note("ack", self.name, wid, self.state.epoch)
        end.send(done)

    # -- the primary's data path -----------------------------------------------------------------

    def hello(self, peer: _Peer, end: End, link: str) -> None:
        old = self.links.get(link)
        if old is not None and old is not end:
            old.abort()
        peer.link = link
        self.links[link] = end

    def batch(self, end: End, batch: Batch) -> None:
        state = self.state
        key, wid = batch.operations[0]
        if not state.accepts_batches():
            answer: Answer = (end, Done(batch.sequence, [MOVED], []), None, key)
        else:
            if not self.applying:
                self.applying = True
                self.checker.holds(self, "first applying as the primary")
            self.store.setdefault(key, []).append(wid)
            self.held.add(wid)
            changes = [[key, wid]]
            now = self.world.now_ms
            if state.replicating:
                frame = state.replicate(now, changes, [], [], 0, 1)
                self._journal(changes, now, None)  # before the backup or anyone hears of it
                if frame is not None:
                    assert state.stream is not None
                    state.stream.send(frame)
            else:
                self._journal(changes, now, None)
                state.appended(1)
            if state.sequence != self.journal.last_sequence:
                raise self.checker.fail("journal numbering", f"{self}: the state machine says record "
                                        f"{state.sequence}, the journal {self.journal.last_sequence}")
            answer = (end, Done(batch.sequence, [OK], []), wid, key)
        if not state.hold(answer):
            self._write(answer)

    def _journal(self, changes: list[list[Any]], now_ms: int, first: int | None) -> None:
        journal = self.journal
        journal.append([(key, wid) for key, wid in changes], now_ms, first)
        if journal.last_sequence - journal.snapshot_sequence >= SNAPSHOT_EVERY:
            journal.write_snapshot([(key, tuple(wids)) for key, wids in self.store.items()], journal.last_sequence)
        if self._sync is None and (due := journal.next_sync_ms) is not None:
            self._sync = self.world.at(max(0, due - now_ms) * MS, self._tick, self.incarnation)

    def _tick(self, incarnation: int) -> None:
        if self.node.deferred(self._tick, incarnation) or not self.current(incarnation):
            return
        self._sync = None
        self.journal.tick(self.world.now_ms)
        if (due := self.journal.next_sync_ms) is not None:
            self._sync = self.world.at(max(0, due - self.world.now_ms) * MS, self._tick, incarnation)

    # -- the backup's side -----------------------------------------------------------------------

    def follow(self, peer: _Peer, end: End, frame: Follow) -> None:
        if frame.secret != self.address.secret:
            end.abort()
            return
        try:
            effects = self.state.follow(end, frame.epoch)
        except ProtocolError:
            end.abort()
            return
        if self.state.follower is end:
            peer.follow_epoch = frame.epoch
        self.run(effects)

    def from_primary(self, peer: _Peer, end: End, frame: Any) -> None:
        state = self.state
        try:
            state.from_primary(end, frame)
        except ProtocolError:
            end.abort()
            return
        assert peer.follow_epoch is not None
        self.checker.frame_applied(self, peer.follow_epoch)
        if type(frame) is Replicate:
            for key, wid in frame.changes:
                self.store.setdefault(key, []).append(wid)
                self.held.add(wid)
            try:
                state.journal_from(frame.first, len(frame.changes))
                self._journal(frame.changes, frame.timestamp, frame.first)
            except (ProtocolError, JournalGap):
                end.abort()  # the primary primes again
                return
        else:
            primed = state.prime_part(frame, frame.states, frame.recent)
            if primed is not None:
                states = primed[0]
                self._load({key: list(wids) for key, wids in states})
                self.journal.reset([(key, tuple(wids)) for key, wids in states], frame.sequence)
                self.checker.saved_epoch(self, self.journal.epoch)  # the epoch it awaited
                state.primed_at(frame.sequence)
                self.checker.primed(self, peer.follow_epoch)
        end.send(Replicated(frame.id))

    # -- the controller's commands ---------------------------------------------------------------

    def position(self) -> Position:
        state = self.state
        return Position(self.incarnation, state.role, state.epoch, state.primed, state.caught_up, state.sequence,
                        state.since, state.handing_over, self.journal.damaged is not None, where(self.address),
                        where(state.backup) if state.backup is not None else None)

    def handle(self, method: str, args: tuple[Any, ...], reply: Reply) -> None:
        if method == "incarnation":  # the supervision token (``Liveness``): the process, not the partition
            reply(f"{self.name}/{self.incarnation}@{self.node.id}", None)
            return
        if not self.opened and not self._open():
            reply(None, JournalBusy(f"another process holds the journal in {self.journal.directory}"))
            return
        state = self.state
        try:
            if method == "position":
                reply(self.position(), None)
            elif method == "attach":
                if state.role is not Role.PRIMARY:
                    raise NotPrimary(f"{self} is the {state.role} at epoch {state.epoch}")
                reply(self.address, None)
            elif method == "become_backup":
                self.run(state.become_backup(args[0]))
                reply(self.address, None)
            elif method == "become_primary":  # (epoch, the backup's address, the journal as weighed, or None)
                was = state.role
                damage = self.journal.damaged
                weighed = args[2] if len(args) > 2 else None
                trusted = (damage is not None and weighed is not None and "files" not in damage  # never one set aside
                           and tuple(self.journal.held() or ()) == tuple(weighed))
                self.run(state.become_primary(args[0], args[1], None if damage is None or trusted
                                              else str(damage["reason"])))
                if trusted:  # no copy holds more: this journal's older state, or nothing
                    self.journal.trust()
                if was is not Role.PRIMARY:
                    self.applying = False
                    self.checker.holds(self, "becoming the primary")
                self.checker.holds_whole(self, state.epoch)
                reply(self.position(), None)
            elif method == "set_backup":
                self.run(state.set_backup(args[0], args[1]))
                reply(None, None)
            elif method == "handover":
                if state.handover():
                    timeout_ms = args[0] if args else HANDOVER_MS  # PartitionActor.handover's default
                    timer = self.world.at(timeout_ms * MS, self._handover_timeout, self.incarnation)
                    self._handover = (reply, timer)
                else:
                    reply(self.position(), None)
            else:
                raise AttributeError(method)
        except (StaleEpoch, NotCaughtUp, NotPrimary) as e:
            reply(None, e)

    def _handover_timeout(self, incarnation: int) -> None:
        if self.node.deferred(self._handover_timeout, incarnation) or not self.current(incarnation):
            return
        if self._handover is not None:
            reply, _ = self._handover
            self._handover = None
            reply(None, TimeoutError(f"{self}: the backup did not acknowledge what waited"))
