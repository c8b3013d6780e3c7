"""A scripted controller: the partition map, placed by the real pure placement functions.

The runs use the real managers (:mod:`tests.simulation.managed`); this small driver stays for
the regressions that must run without the safeguards the real ``ReplicaSet`` shares with it
(``careful = False``: what the replicas and their journals must refuse by themselves). It runs
on the head as a synchronous actor would: one job at a time (a generator that yields Ray calls
and gets their outcomes), ``route`` calls waiting while a job runs.

* **Start** (and after a whole restart), once every node is alive:
  :func:`~replication.placement.initial` from what the nodes' journals hold (``held``); the
  primary takes over from its journal even if that awaits a prime (``become_primary``'s
  third argument: the journal as the controller weighed it, none being newer), which
  ``ReplicaSet.start`` does not say yet.
* **Every second** (a job, unless one runs), with a ``position`` probe of every replica in
  flight: nodes the failure detector lost, or that came back with a new id ->
  :func:`~replication.placement.after_loss` then :func:`~replication.placement.fill_backups`,
  but for a partition with a node back (its replica there is a new process, whose journal
  may have lost its tail) or whose last step failed (its map may name a backup that never
  heard of it): those are placed again from their replicas' positions
  (:meth:`Controller._replan`), as is one with a node alive but no replica there; a replica
  whose process restarted (the probe says a new incarnation) -> as ``ReplicaSet.restarted``:
  a primary swaps with its backup (only one the last probe saw primed), anyone else is
  placed again at a new epoch; on a quiet tick, one
  :func:`~replication.placement.rebalance_step` with ``caught_up`` from the probes (a
  handover: ``handover``, ``become_backup``, ``become_primary``).
* **Carrying a placement out** as ``ReplicaSet._place``: the map records it, the backup
  ``become_backup`` first, then the primary ``become_primary`` with the backup's address;
  then the replicas on nodes it left are killed (a new replica on such a node starts once
  the old one is dead: ``Sim.make_replica``). A step that fails leaves the partition
  *unsettled*, placed again on the next tick (as ``PartitionManager.settle`` does).
* **A crash**: Ray restarts the controller, which adopts the map from the replicas' positions
  (:func:`~replication.placement.from_replicas`, per partition; one it cannot adopt waits for
  every node, then is placed from the journals, as at start), then fills in lost backups.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Any

from replication.placement import Placement, Placements, Standing, fill_backups, from_replicas, initial, leader
from replication.placement import promotable, rebalance_step, repaired
from replication.journal import JournalBusy
from replication.replica import NotCaughtUp, Role, StaleEpoch
from tests.simulation.processes import CallError, Calls, Process, SimNode
from tests.simulation.replica import Position, SimReplica

if TYPE_CHECKING:
    from tests.simulation.run import Sim

__all__ = ["Controller"]

SECOND_MS = 1_000
CALL_MS = 20_000  # a placement step (replicas.CALL_TIMEOUT)
PROBE_MS = 2_000
HANDOVER_MS = 5_000
TICK_NS = 1_000_000_000
UNPLACED = ""  # the primary of a partition a restarted controller could not adopt (placed once every node is back)

Call = tuple[Process, str, tuple[Any, ...], int]
Outcome = tuple[Any, "BaseException | None"]
Job = Generator[list[Call], list[Outcome], None]


class Controller(Process):
    #: False: without the safeguards against copies that lost their tail, which ``ReplicaSet``
    #: shares (:func:`~replication.placement.repaired` is given no unsettled partition and
    #: :func:`~replication.placement.leader` no absent node and no journal: a map's partition
    #: with a node back, or unsettled, goes through ``after_loss``; the holder leads whatever
    #: the other journals say): what the replicas and their journals must then refuse by
    #: themselves (``test_regressions.py``)
    careful = True

    def __init__(self, sim: Sim, head: SimNode, count: int) -> None:
        super().__init__(sim.world, "controller", head)
        self.sim = sim
        self.calls: Calls = sim.calls
        self.count = count
        self.head = head.name
        self.fresh = True  # start from the journals (else adopt the replicas)
        self.placements: Placements = ()
        self.since: list[int] = []
        self.nodes: dict[str, int] = {}
        self.replicas: dict[tuple[int, str], SimReplica] = {}
        self.unsettled: set[int] = set()
        #: per partition: the node of the primary the last settled placement named
        self.holder: dict[int, str] = {}
        #: per partition: the nodes of that placement (whose journals hold what it acknowledged)
        self.copies: dict[int, tuple[str, ...]] = {}
        self.failovers = 0
        self.handovers = 0
        self.busy = False
        self._made = 0
        self._mailbox: list[tuple[str, tuple[Any, ...], Callable[[Any, BaseException | None], None]]] = []
        self._seen: dict[str, int] = {}  # replica name -> the incarnation last seen
        self._probing: set[str] = set()
        self._positions: dict[str, Position] = {}
        self._restarted: list[str] = []
        self._timer: Any = None

    # -- the process -----------------------------------------------------------------------------

    def start(self) -> None:
        self.busy = False
        self._mailbox = []
        self._probing = set()
        self._restarted = []
        self._run(self._initial() if self.fresh else self._adopt())
        self._timer = self.world.at(TICK_NS, self._tick, self.incarnation)

    def stop(self, clean: bool) -> None:
        self.busy = False
        self.placements = ()
        if self._timer is not None:
            self.world.cancel(self._timer)

    def handle(self, method: str, args: tuple[Any, ...], reply: Callable[[Any, BaseException | None], None]) -> None:
        if self.busy:  # a synchronous actor: one call at a time
            self._mailbox.append((method, args, reply))
            return
        assert method == "route", method
        index = args[0]
        if not self.placements:
            reply(None, CallError("no partition map yet"))
            return
        p = self.placements[index]
        reply((self.since[index], self.replicas.get((index, p.primary))), None)

    def replica_at(self, index: int, node: str) -> SimReplica | None:
        return self.replicas.get((index, node))

    # -- jobs ------------------------------------------------------------------------------------

    def _run(self, job: Job) -> None:
        self.busy = True
        self._step(job, self.incarnation, None)

    def _step(self, job: Job, incarnation: int, outcomes: list[Outcome] | None) -> None:
        if not self.current(incarnation):
            return
        try:
            calls = job.send(outcomes) if outcomes is not None else next(job)
            while not calls:
                calls = job.send([])
        except StopIteration:
            self.busy = False
            mailbox, self._mailbox = self._mailbox, []
            for method, args, reply in mailbox:
                self.handle(method, args, reply)
            return
        results: list[Outcome | None] = [None] * len(calls)

        def done(i: int, result: Any, error: BaseException | None) -> None:
            results[i] = (result, error)
            if all(r is not None for r in results):
                self._step(job, incarnation, [r for r in results if r is not None])

        for i, (target, method, args, timeout_ms) in enumerate(calls):
            self.calls.call(self, target, method, args, timeout_ms, functools.partial(done, i))

    def _ask(self, target: Process, method: str, *args: Any, timeout_ms: int = CALL_MS) -> Generator[
            list[Call], list[Outcome], Any]:
        [(result, error)] = yield [(target, method, args, timeout_ms)]
        if error is not None:
            raise error
        return result

    def _tick(self, incarnation: int) -> None:
        if self.node.deferred(self._tick, incarnation) or not self.current(incarnation):
            return
        self._timer = self.world.at(TICK_NS, self._tick, incarnation)
        self._probe()
        if not self.busy:
            self._run(self._check())

    # -- liveness: one position probe in flight per replica --------------------------------------

    def _probe(self) -> None:
        for replica in list(self.replicas.values()):
            if replica.name in self._probing:
                continue
            self._probing.add(replica.name)
            self.calls.call(self, replica, "position", (), 5 * SECOND_MS, functools.partial(self._probed, replica))

    def _probed(self, replica: SimReplica, position: Position | None, error: BaseException | None) -> None:
        self._probing.discard(replica.name)
        if position is None:  # crashed (restarting), or out of reach: what it said before is stale
            self._positions.pop(replica.name, None)
            return
        self._positions[replica.name] = position
        before = self._seen.get(replica.name)
        self._seen[replica.name] = position.incarnation
        if before is not None and before != position.incarnation:
            self._restarted.append(replica.name)

    # -- start and adoption ----------------------------------------------------------------------

    def _initial(self) -> Job:
        """Place every partition from the journals, once every node is alive (a journal on a
        node not back yet would otherwise be taken for none: its partition placed empty)."""
        self.nodes = self.sim.alive()
        if not self._everyone():
            return
        self.fresh = False
        self.holder, self.copies = {}, {}
        self.replicas = {}
        held: dict[int, dict[str, tuple[int, int]]] = {}
        for name in sorted(self.nodes):
            for i in range(self.count):
                h = self.sim.disks[name].held(i)
                if h is not None:
                    held.setdefault(i, {})[name] = (h.epoch, h.sequence)
        self.placements = initial(self.count, sorted(self.nodes), held, self.head)
        self.since = [p.epoch for p in self.placements]
        for p in self.placements:
            yield from self._place(p, None, held.get(p.partition, {}).get(p.primary, ()))

    def _adopt(self) -> Job:
        self.nodes = self.sim.alive()
        self.holder, self.copies = {}, {}
        found = [r for r in self.sim.replicas if not r.dead and r.node.name in self.nodes]
        self._made = max((int(r.name.rpartition("#")[2]) for r in self.sim.replicas), default=0)
        outcomes = yield [(r, "position", (), CALL_MS) for r in found]
        standing: dict[int, list[Standing]] = {}
        replicas: dict[str, SimReplica] = {}
        for r, (pos, _) in zip(found, outcomes):
            if pos is None:
                self.sim.kill(r)
                continue
            self._seen[r.name] = pos.incarnation
            replicas[r.name] = r
            standing.setdefault(r.index, []).append(_standing(r, pos))
        placements: list[Placement] = []
        again: list[Placement] = []
        self.replicas, self.since = {}, []
        for i in range(self.count):
            mine = standing.get(i, [])
            try:
                [adoption] = from_replicas(1, {0: mine})
            except ValueError:  # nothing to adopt: from the journals, as at start, once every node is alive
                top = max((s.epoch for s in mine), default=0)
                for s in mine:
                    self.sim.kill(replicas[s.name])
                placements.append(Placement(i, UNPLACED, None, top))
                self.since.append(top)
                continue
            placements.append(adoption.placement._replace(partition=i))
            self.since.append(adoption.since)
            self._hold((adoption.again or adoption.placement)._replace(partition=i))
            for s in mine:
                if s.name in adoption.keep:
                    self.replicas[(i, s.node)] = replicas[s.name]
                else:
                    replicas[s.name].kill()
            if adoption.again is not None:
                again.append(adoption.again._replace(partition=i))
        self.placements = tuple(placements)
        for p in again:
            yield from self._place(p, self.placements[p.partition])
        yield from self._after_loss()

    def _after_loss(self) -> Job:
        """Lost replicas replaced, and every partition given a backup (``ReplicaSet._after_loss``),
        but an unsettled one: its map may name a backup that never heard of its placement
        (``become_backup`` failed, or never got there), whose journal, never marked, may be an
        old one; :meth:`_replan` places it from what its replicas say instead."""
        before = self.placements
        after = repaired(before, sorted(self.nodes), self.head, self.unsettled if self.careful else ())
        for old, new in zip(before, after):
            if old != new:
                yield from self._place(new, old)

    def _everyone(self) -> bool:
        return len(self.nodes) == len(self.sim.nodes)

    def _weigh(self, p: Placement) -> tuple[int, ...]:
        """What the journal of ``p``'s primary holds, as ``held`` says now (``()``: no journal)."""
        return self.sim.disks[p.primary].held(p.partition) or ()

    def _from_journals(self, index: int) -> Placement:
        return initial(1, sorted(self.nodes), {0: self._held(index)}, self.head)[0]._replace(partition=index)

    # -- the tick --------------------------------------------------------------------------------

    def _check(self) -> Job:
        if self.fresh:
            yield from self._initial()
            return
        alive = self.sim.alive()
        lost = [n for n in self.nodes if alive.get(n) != self.nodes[n]]
        joined = [n for n in alive if self.nodes.get(n) != alive[n]]
        quiet = True
        if lost or joined:
            quiet = False
            for key in [k for k in self.replicas if k[1] in lost]:
                self._forget(*key)
            self.nodes = alive
            for p in self.placements:  # a node of it is back: a new process, whose journal may have lost its tail
                if self.careful and any(n in joined for n in p.nodes()):
                    self.unsettled.add(p.partition)
            yield from self._after_loss()
        restarted, self._restarted = self._restarted, []
        for name in restarted:
            quiet = False
            yield from self._after_restart(name)
        for i in range(self.count):
            p = self.placements[i]
            if p.primary == UNPLACED:
                quiet = False
                if self._everyone():
                    new = self._from_journals(i)
                    self._hold(new)
                    yield from self._place(new._replace(epoch=max(new.epoch, p.epoch + 1)), p, self._weigh(new))
                continue
            if i in self.unsettled or any(n in self.nodes and (i, n) not in self.replicas for n in p.nodes()):
                quiet = False
                yield from self._replan(i)
        if quiet and not self.unsettled:
            yield from self._rebalance()

    def _forget(self, index: int, node: str) -> None:
        replica = self.replicas.pop((index, node), None)
        if replica is not None:
            self._seen.pop(replica.name, None)
            self._positions.pop(replica.name, None)
            self.sim.kill(replica)

    def _replica(self, index: int, node: str) -> SimReplica:
        replica = self.replicas.get((index, node))
        if replica is None or replica.dead:
            self._made += 1
            replica = self.sim.make_replica(f"partition-{index}@{node}#{self._made}", index, node)
            self.replicas[(index, node)] = replica
            self._seen[replica.name] = max(replica.incarnation, 1)  # 0: it waits to start (Sim.make_replica)
        return replica

    def _place(self, p: Placement, before: Placement | None, weighed: tuple[int, ...] | None = None) -> Job:
        """Carry out ``p`` (``before``: the one it replaces), as ``ReplicaSet._place``.
        ``weighed``: ``p`` was placed from every node's journal, its primary on the newest
        copy (:func:`~replication.placement.initial`), whose journal the controller weighed
        so (``held``; ``()``: none): it takes over from that journal even when it awaits a
        prime, or was set aside (no copy holds more), unless it changed since."""
        i = p.partition
        self.placements = tuple(p if q.partition == i else q for q in self.placements)
        self.world.note("place", i, p.primary, p.backup, p.epoch)
        try:
            address = None
            if p.backup is not None:
                address = yield from self._ask(self._replica(i, p.backup), "become_backup", p.epoch)
            yield from self._ask(self._replica(i, p.primary), "become_primary", p.epoch, address, weighed)
        except (CallError, StaleEpoch, NotCaughtUp, TimeoutError, JournalBusy) as e:
            self.world.note("place failed", i, type(e).__name__, str(e))
            self.unsettled.add(i)
            return
        self.unsettled.discard(i)
        self._hold(p)
        for key in [k for k in self.replicas if k[0] == i and k[1] not in p.nodes()]:
            self._forget(*key)
        if before is None or before.primary != p.primary:
            self.since[i] = p.epoch
            if before is not None:
                self.failovers += 1

    def _after_restart(self, name: str) -> Job:
        """A replica of a placement restarted (it came back idle, with its journal), as
        ``ReplicaSet.restarted``: a primary with a backup swaps with it, anyone else is placed
        again at a new epoch (a backup follows before its primary primes it again). The swap
        only when the last probe saw the backup primed at the map's epoch
        (:func:`~replication.placement.promotable`; ``ReplicaSet`` asks the backup then: a
        backup that restarted too is idle, with a journal that may lack what its recovery
        cut), else the partition is placed again from its positions, as an
        unsettled one always is (its map may be one that never took, or lack a backup that
        :meth:`_after_loss` left to :meth:`_replan`)."""
        key = next((k for k, r in self.replicas.items() if r.name == name), None)
        if key is None:
            return
        i, node = key
        p = self.placements[i]
        if i in self.unsettled:
            yield from self._replan(i)
        elif node == p.primary and p.backup is not None:
            backup = self.replicas.get((i, p.backup))
            pos = self._positions.get(backup.name) if backup is not None else None
            said = (_standing(backup, pos) if backup is not None and pos is not None
                    and pos.incarnation == self._seen.get(backup.name) else None)
            if promotable(p, self.unsettled, said):
                yield from self._place(Placement(i, p.backup, p.primary, p.epoch + 1), p)
            else:
                yield from self._replan(i)
        elif node in p.nodes():
            yield from self._place(p._replace(epoch=p.epoch + 1), p)

    def _replan(self, i: int) -> Job:
        """Place partition ``i`` again from the positions of its replicas: those on the map's
        nodes and on the nodes of the last settled placement (its primary is the *holder*).
        Who leads is :func:`~replication.placement.leader`'s choice, as ``ReplicaSet``'s (every
        journal on an alive node weighed, :meth:`_held`):

        * a primary or a primed backup (the newest epoch first, the map's primary among equals);
        * the holder, back idle with its journal, unless an idle copy at its epoch or a newer
          one has a longer journal, a node of its placement is not alive, or a journal on
          another node is newer or longer: the holder's may have lost its tail to a power cut,
          and a copy the map no longer names may hold it;
        * with no holder known (a placement from the journals that did not take), the idle
          replica with the newest epoch and the longest journal, once every node is alive
          and no journal is newer, as :func:`~replication.placement.initial` ranks them.

        A copy whose journal awaits a prime (a backup never primed, restarted) cannot lead
        here: what it holds may lack what was acknowledged since. When none of them can lead
        (the holder became a backup never primed again: a handover cut off between its two
        steps), the partition waits until every node is alive, then starts over from the
        journals, as at start: its backups are killed (their successors come back idle), and
        it is placed by :func:`~replication.placement.initial` (the journal of the newest
        state, then the longest), its primary taking over from its journal even if that
        awaits a prime (no copy holds more)."""
        p = self.placements[i]
        holder = self.holder.get(i)
        nodes = [n for n in p.nodes() if n in self.nodes]
        for n in self.copies.get(i, ()):
            if n in self.nodes and n not in nodes:
                nodes.append(n)
        if not nodes:
            return  # every node that holds it is lost: it waits for one to come back
        replicas = [self._replica(i, n) for n in nodes]
        outcomes = yield [(r, "position", (), PROBE_MS) for r in replicas]
        positions = {r.node.name: pos for r, (pos, _) in zip(replicas, outcomes) if pos is not None}
        if len(positions) < len(nodes):
            self.unsettled.add(i)  # not every replica answered: wait for it
            return
        top = max([p.epoch] + [pos.epoch for pos in positions.values()])
        standing = [_standing(r, positions[r.node.name]) for r in replicas]
        if self.careful:
            lead = leader(standing, holder, self.copies.get(i, ()), [n for n in self.sim.nodes if n not in self.nodes],
                          self._held(i))
        else:
            lead = leader(standing, holder, (), (), {})
        if lead is None:
            self.unsettled.add(i)
            if self._everyone():
                self.world.note("from the journals", i)
                for node in nodes:
                    if positions[node].role is not Role.IDLE:
                        self._forget(i, node)
                new = self._from_journals(i)
                yield from self._place(new._replace(epoch=max(new.epoch, top + 1)), p, self._weigh(new))
            return
        others = [n for n in nodes if n != lead]
        new = Placement(i, lead, others[0] if others else None, top + 1)
        if new.backup is None:
            names = sorted(self.nodes)
            new = fill_backups(self.placements[:i] + (new,) + self.placements[i + 1:], names, self.head)[i]
        yield from self._place(new, p)

    def _hold(self, p: Placement) -> None:
        """``p`` took (or is the one to take): its primary is the partition's holder."""
        self.holder[p.partition] = p.primary
        self.copies[p.partition] = p.nodes()

    def _held(self, index: int) -> dict[str, tuple[int, int]]:
        """What the journal of partition ``index`` on each alive node holds now (epoch, last
        record), as ``held`` reads it: a copy the map no longer names (a backup replaced
        meanwhile) or one that cannot lead (a backup never primed since) may hold what a holder
        back from a power cut lost from its tail."""
        return {n: (h.epoch, h.sequence) for n in sorted(self.nodes) if (h := self.sim.disks[n].held(index))}

    def _rebalance(self) -> Job:
        caught_up = []
        for p in self.placements:
            replica = self.replicas.get((p.partition, p.primary))
            pos = self._positions.get(replica.name) if replica is not None else None
            if pos is not None and p.backup is not None and pos.caught_up and pos.epoch == p.epoch:
                caught_up.append(p.partition)
        before = self.placements
        after = rebalance_step(before, sorted(self.nodes), caught_up, self.head)
        changed = [(a, b) for a, b in zip(before, after) if a != b]
        if not changed:
            return
        [(old, new)] = changed
        if new.primary == old.primary:
            yield from self._place(new, old)
            return
        self.world.note("handover", new.partition, old.primary, new.primary, new.epoch)
        self.placements = after
        try:
            yield from self._ask(self._replica(old.partition, old.primary), "handover", HANDOVER_MS,
                                 timeout_ms=HANDOVER_MS + CALL_MS)
            address = yield from self._ask(self._replica(old.partition, old.primary), "become_backup", new.epoch)
            yield from self._ask(self._replica(new.partition, new.primary), "become_primary", new.epoch, address, None)
        except (CallError, StaleEpoch, NotCaughtUp, TimeoutError, JournalBusy) as e:
            self.world.note("handover failed", new.partition, type(e).__name__, str(e))
            self.unsettled.add(new.partition)
            return
        self.since[new.partition] = new.epoch
        self._hold(new)
        self.handovers += 1


def _standing(replica: SimReplica, position: Position) -> Standing:
    """What ``replica`` says of itself, as the real controller reads ``position()``."""
    return Standing(replica.name, replica.node.name, position.role, position.epoch, position.primed,
                    position.handing_over, position.since, position.address, position.backup, position.sequence,
                    position.damaged)
