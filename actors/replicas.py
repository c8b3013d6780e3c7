"""The controller's partition replicas: placement carried out on the cluster (:mod:`actors.cluster`).

:class:`ReplicaSet` holds the partition map (one
:class:`~replication.placement.Placement` per partition: primary node, backup
node, epoch) and the :class:`~actors.partition.PartitionActor` replica on
each of those nodes, and carries out what the pure functions of
:mod:`replication.placement` decide:

* at start, each partition on the nodes that hold its journal (the newest
  epoch first; a node's epochs are read from its data directory by a task held
  to that node: :meth:`~actors.cluster.Cluster.held`), the rest spread evenly; the backup is made to follow first,
  then the primary is told to take over and prime it;
* Ray's head node (:attr:`~replication.nodes.Node.head`) holds no replica
  while two other nodes are alive, and rebalancing moves replicas off it (see
  :mod:`replication.placement`);
* when a node is lost, a partition whose primary was there is taken over by its
  backup (epoch + 1) and gets a new backup on another node, primed from the new
  primary before it answers anything more; a partition that lost its backup gets
  a new one the same way;
* when a node joins, partitions without a backup get one there, and then one
  rebalancing step per call of :meth:`ReplicaSet.rebalance` moves a backup or
  hands a primary over to its caught-up backup (the old primary stops applying,
  drains what waits for the backup, then follows the new one: links are told
  ``MOVED`` and send their operations again to the new primary, nothing lost or
  reordered);
* when Ray restarts a replica's process (it comes back idle, with its journal),
  a primary with a backup is replaced by the backup and follows it; a primary
  without one takes over again from its journal; a backup follows again;
* a backup is promoted only from a placement that took
  (:func:`~replication.placement.repaired`,
  :func:`~replication.placement.promotable`): a partition whose last placement
  failed partway, or with a node back, is *unsettled*, and is placed again from
  its replicas' positions and the journals on the alive nodes
  (:meth:`ReplicaSet._replan`, :func:`~replication.placement.leader`), where a
  copy that may have lost its unsynced tail does not lead while a node of the
  last placement that took is absent: the partition waits for it.

Every change bumps the partition's epoch, which each replica keeps durably
beside its journal (see :class:`~actors.partition.Partition` for the fencing).
Replicas are named ``partition-<i>@<node>#<n>`` (unique: a replica that died
for good is replaced by a new actor).

Links find a partition's primary with :meth:`ReplicaSet.route` (the
controller's ``route``), and the controller pushes :meth:`ReplicaSet.routes`
to gateways and the view evaluator after every change.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from typing import Any

from actors.cluster import Cluster, ControlEvent, NodeGone, get, one
from actors.link import Route
from actors.settings import InstanceSettings
from replication.nodes import Node, head_of
from replication.replica import Role
from replication.placement import (
    Placement,
    Placements,
    Standing,
    fill_backups,
    from_replicas,
    initial,
    leader,
    promotable,
    rebalance_step,
    repaired,
)

log = logging.getLogger("canopy.replicas")
CALL_TIMEOUT = 20.0  # a placement step; serve gives up on a controller silent for 30 s
PROBE_TIMEOUT = 2.0
DRIFT_TIMEOUT = 0.5
#: the replicas a start makes, side by side: a few dozen processes to start on a busy machine
READY_TIMEOUT = 120.0
HELD_TIMEOUT = 300.0  # every node reads its journals back at start (as recovery will): bounded, not short


class ReplicaError(RuntimeError):
    pass


class NodeLeft(ReplicaError):
    """A node given to :meth:`ReplicaSet.start` left before its journals were read: the
    caller reads Ray's nodes again and starts over (nothing was placed yet)."""


def held_epochs(directory: str, count: int) -> dict[int, tuple[int, int]]:
    """The partitions whose journal is in ``directory``, each with the epoch it was last
    given and the last record it gives back, every file read back first
    (:func:`replication.journal.held`: a damaged journal says epoch -1)."""
    from replication.journal import held

    found = {i: held(directory, i) for i in range(count)}
    return {i: (h.epoch, h.sequence) for i, h in found.items() if h is not None}


def held_of(directory: str, index: int) -> tuple[int, int] | None:
    """What partition ``index``'s journal in ``directory`` holds (epoch, last record), read
    back without its lock (:func:`replication.journal.held`); ``None``: no journal."""
    from replication.journal import held

    found = held(directory, index)
    return None if found is None else (found.epoch, found.sequence)



class ReplicaSet:
    def __init__(self, config: InstanceSettings, count: int, cluster: Cluster) -> None:
        self.config = config
        self.cluster = cluster
        self.count = count
        self.placements: Placements = ()
        #: (partition, node name) -> the replica's name and actor handle
        self.replicas: dict[tuple[int, str], tuple[str, Any]] = {}
        #: replicas that died (with their node, or for good): replaced when placed again
        self.dead: set[str] = set()
        #: per partition: the epoch since which its primary is the primary
        self.since: list[int] = []
        self.nodes: dict[str, Node] = {}
        self._made = 0
        #: per partition: how often its backup took over since this controller started
        self.failovers = [0] * count
        #: partitions whose last placement failed partway, or with a node back: their map may
        #: name a backup that never heard of it (never promoted; placed again by :meth:`_replan`)
        self.unsettled: set[int] = set()
        #: per partition: the primary and the nodes of its last placement that took
        self.holder: dict[int, str] = {}
        self.copies: dict[int, tuple[str, ...]] = {}
        #: every node seen alive since this controller started (one absent may hold a partition)
        self.known: set[str] = set()

    # -- start ----------------------------------------------------------------

    def start(self, nodes: dict[str, Node], absent: Iterable[str] = ()) -> None:
        """Place every partition from the journals on ``nodes`` (:func:`~replication.placement.initial`).
        Its primary is told what the controller read of its journal (:func:`weighed`), so that a
        copy marked as awaiting a prime that no other copy outranks leads from what it holds --
        unless a node Ray knows is ``absent`` (it may hold more), or the copy was set aside as
        damaged (that waits for the operator: ``canopy journal repair``)."""
        held: dict[int, dict[str, tuple[int, int]]] = {}
        names = sorted(nodes)
        try:
            answers = get(self.cluster, [self.cluster.held(nodes[n], self.count) for n in names], HELD_TIMEOUT)
        except NodeGone as e:
            # a node Ray listed alive went before its task ran (a restarted cluster's worker whose
            # old raylet registered once more, then left): no journal of it was read, nothing placed
            raise NodeLeft(f"a node left while the journals were read: {e}") from e
        self.nodes = dict(nodes)
        for name, epochs in zip(names, answers):
            for i, epoch in epochs.items():
                held.setdefault(i, {})[name] = epoch
        self.placements = initial(self.count, names, held, self.head)
        self.since = [p.epoch for p in self.placements]
        absent = list(absent)
        # every replica is made first: each is a process of its own to start, and they start side by
        # side; the placements are then carried out one by one, each step with its own bound
        made = [self._replica(p.partition, node) for p in self.placements for node in p.nodes()]
        self.cluster.ready(made, READY_TIMEOUT)
        for p in self.placements:
            self._place(p, None, None if absent else weighed(held.get(p.partition, {}), p.primary))

    def _replica(self, index: int, node: str) -> Any:
        """The replica of partition ``index`` on ``node``, made if there is none alive."""
        found = self.replicas.get((index, node))
        if found is not None and found[0] not in self.dead:
            return found[1]
        self._made += 1
        name = f"partition-{index}@{node}#{self._made}"
        handle = self.cluster.make_replica(name, self.nodes[node], index, self.count)
        self.replicas[(index, node)] = (name, handle)
        return handle

    def _set(self, new: Placement) -> None:
        self.placements = tuple(new if q.partition == new.partition else q for q in self.placements)

    def _place(self, p: Placement, before: Placement | None, weighed: tuple[int, ...] | None = None) -> None:
        """Carry out placement ``p`` (``before``: the one it replaces): the backup
        follows first, then the primary takes over (or stays) and primes it; then the
        replicas of the partition on nodes ``p`` does not name are stopped. A step that
        raises leaves the partition unsettled (the map names ``p``, which may not have
        reached its backup); one that took makes ``p``'s primary its holder. ``weighed``:
        ``p`` was placed from every node's journal, its primary's being the newest, which held
        that (epoch, last record; ``()``: it had none) -- the primary takes over from it even
        when it awaits a prime, unless it changed since (``PartitionActor.become_primary``;
        :func:`weighed` gives none for a journal set aside as damaged)."""
        self._set(p)
        self.known.update(p.nodes())
        try:
            address = None
            if p.backup is not None:
                address = self._ask(self._replica(p.partition, p.backup), "become_backup", p.epoch)
            self._ask(self._replica(p.partition, p.primary), "become_primary", p.epoch, address, weighed)
        except BaseException:
            self.unsettled.add(p.partition)
            raise
        self._hold(p)
        if before is None or before.primary != p.primary:
            self.since[p.partition] = p.epoch
        for index, node in [k for k in self.replicas if k[0] == p.partition and k[1] not in p.nodes()]:
            self._drop(index, node)

    def _ask(self, handle: Any, method: str, *args: Any, timeout: float = CALL_TIMEOUT) -> Any:
        return one(self.cluster, self.cluster.call(handle, method, *args), timeout)

    def _positions(self, handles: list[Any], timeout: float = PROBE_TIMEOUT) -> list[dict[str, Any] | None]:
        """Each replica's ``position()`` (``None``: it did not answer in time, or failed)."""
        found = self.cluster.outcomes([self.cluster.call(h, "position") for h in handles], timeout)
        return [position if error is None else None for position, error in found]

    def _hold(self, p: Placement) -> None:
        """``p`` took: its partition is settled, and ``p``'s nodes hold what it acknowledges."""
        self.unsettled.discard(p.partition)
        self.holder[p.partition] = p.primary
        self.copies[p.partition] = p.nodes()

    def _drop(self, index: int, node: str) -> None:
        found = self.replicas.pop((index, node), None)
        if found is not None:
            self.dead.discard(found[0])
            self.cluster.kill(found[1])

    # -- a restarted controller ------------------------------------------------

    def adopt(self, nodes: dict[str, Node], found: dict[str, Any], absent: Iterable[str] = ()) -> list[str]:
        """The controller's process restarted: rebuild the partition map from the replicas
        that outlived it (``found``: every replica actor by name) and finish what its
        predecessor left half done; return what was done. ``absent``: the nodes Ray knows
        that are not alive (one may hold a partition's newest copy).

        Each partition's primary is its replica that says it is the primary at the newest
        epoch, and its backup the replica following that primary at that epoch. A partition
        whose replicas disagree (the old controller died between two steps of a change: a
        handover half made, a backup not yet followed) is placed again at an epoch above
        every one its replicas hold, with the replicas it has: the primary (or else the
        primed backup with the newest epoch) primes its backup again. Replicas no placement
        uses are stopped. A partition none of whose replicas answers, or none of which can
        take over (their nodes were lost meanwhile, say), is *unsettled*: it is placed again
        from its replicas and every alive node's journal (:meth:`_replan`), where it waits
        while an absent node may hold more, then again at every check until it is placed."""
        import re

        from actors.names import REPLICA_NAME

        self.nodes = dict(nodes)
        self.replicas, self.dead = {}, set()
        parsed = {name: m for name in found if (m := re.fullmatch(REPLICA_NAME, name))}
        self._made = max((int(m.group(3)) for m in parsed.values()), default=0)
        names = list(parsed)
        answers = self.cluster.outcomes([self.cluster.call(found[name], "position") for name in names], CALL_TIMEOUT)
        standing: dict[int, list[Standing]] = {}
        for name, (p, _) in zip(names, answers):
            m = parsed[name]
            index, node = int(m.group(1)), m.group(2)
            if p is None or node not in nodes or index >= self.count:
                self._stop(found[name])
                continue
            standing.setdefault(index, []).append(Standing.from_position(name, node, p))
        placements: list[Placement] = []
        self.since = []
        self.known = set(nodes) | set(absent)
        said = [f"the controller restarted: took over {len(found)} replica(s) of {self.count} partitions"]
        again: list[Placement] = []
        lost: list[int] = []
        for index in range(self.count):
            mine = standing.get(index, [])
            try:
                [a] = from_replicas(1, {0: mine})
            except ValueError as e:
                # none can take over as they stand: kept (the newest on each node) and placed again
                kept: dict[str, Standing] = {}
                for r in sorted(mine, key=lambda r: int(parsed[r.name].group(3))):
                    if r.node in kept:
                        self._stop(found[kept[r.node].name])
                    kept[r.node] = r
                on = sorted(kept) or [initial(1, sorted(nodes), {}, self.head)[0].primary]
                top = max((r.epoch for r in mine), default=0)
                placements.append(Placement(index, on[0], on[1] if len(on) > 1 else None, top))
                self.since.append(top)
                for node, r in kept.items():
                    self.replicas[(index, node)] = (r.name, found[r.name])
                self.unsettled.add(index)
                lost.append(index)
                said.append(f"{str(e).replace('partition 0', f'partition {index}')}: placed again from its replicas "
                            f"and the journals")
                continue
            placement = a.placement._replace(partition=index)
            placements.append(placement)
            self.since.append(a.since)
            taken = (a.again or a.placement)._replace(partition=index)
            self.holder[index], self.copies[index] = taken.primary, taken.nodes()
            for r in mine:
                if r.name in a.keep:
                    self.replicas[(index, r.node)] = (r.name, found[r.name])
                else:
                    self._stop(found[r.name])
            if a.again is not None:
                again.append(a.again._replace(partition=index))
        self.placements = tuple(placements)
        for p in again:
            said.append(f"partition {p.partition}: a change was cut off by the controller's restart; "
                        f"placed again at epoch {p.epoch}")
            try:
                self._place(p, None)
            except Exception as e:  # unsettled: placed again at the next check
                said.append(f"partition {p.partition}: could not be placed ({type(e).__name__}: {e})")
        before = self.placements
        said += self._apply(before, self._after_loss(before))
        for index in lost:
            said += self._replan(index)
        return said

    def _stop(self, handle: Any) -> None:
        self.cluster.kill(handle)

    # -- routes ---------------------------------------------------------------

    def route(self, index: int) -> Route:
        p = self.placements[index]
        found = self.replicas.get((index, p.primary))
        # none there (a placement that failed before it made one): an idle one, which refuses
        # links until the partition is placed again (on a lost node: none can be made, KeyError)
        handle = found[1] if found is not None else self._replica(index, p.primary)
        return Route(self.since[index], handle, p.primary)

    def routes(self) -> list[Route]:
        return [self.route(i) for i in range(self.count)]

    def serving(self) -> dict[str, Any]:
        """Every replica that should be alive, by name."""
        return {name: handle for name, handle in self.replicas.values() if name not in self.dead}

    def where(self, name: str) -> tuple[int, str] | None:
        for key, (n, _) in self.replicas.items():
            if n == name:
                return key
        return None

    # -- changes --------------------------------------------------------------

    def nodes_changed(self, nodes: dict[str, Node]) -> list[str]:
        """Nodes were lost or joined (``nodes``: the alive ones by name); what was done."""
        lost = sorted(n for n in self.nodes if n not in nodes or nodes[n].id != self.nodes[n].id)
        joined = sorted(n for n in nodes if n not in self.nodes or nodes[n].id != self.nodes[n].id)
        if not lost and not joined:
            return []
        said: list[str] = []
        if lost:
            said.append(f"lost node(s) {', '.join(lost)}")
            self.dead.update(name for (_, node), (name, _) in self.replicas.items() if node in lost)
        if joined:
            said.append(f"node(s) {', '.join(joined)} joined")
        self.known.update(self.nodes)
        self.nodes = dict(nodes)
        for p in self.placements:  # a node of it is back: a new process, whose journal may have lost its tail
            if any(n in joined for n in p.nodes()):
                self.unsettled.add(p.partition)
        before = self.placements
        after = self._after_loss(before)
        for old, new in zip(before, after):
            if old.nodes() and all(n in lost for n in old.nodes()):
                said.append(f"partition {old.partition} is unavailable: every node that holds it is lost")
        said += self._apply(before, after)
        for index in sorted(self.unsettled):
            said += self._replan(index)
        return said

    @property
    def head(self) -> str | None:
        """The name of Ray's head node, when it is alive."""
        return head_of(self.nodes.values())

    def _after_loss(self, before: Placements) -> Placements:
        """``before`` on the alive nodes: lost replicas replaced, and every partition given a
        backup, but an unsettled one (:func:`~replication.placement.repaired`)."""
        return repaired(before, list(self.nodes), self.head, self.unsettled)

    def _apply(self, before: Placements, after: Placements) -> list[str]:
        said = []
        for old, new in zip(before, after):
            if old == new:
                continue
            try:
                self._place(new, old)
            except Exception as e:
                said.append(f"partition {new.partition}: could not be placed ({type(e).__name__}: {e})")
                log.exception("placing partition %d failed", new.partition)
                continue
            if old.primary != new.primary:
                self.failovers[new.partition] += 1
                said.append(f"partition {new.partition}: the backup on {new.primary} took over (epoch {new.epoch})")
            if new.backup is not None and (new.backup != old.backup or old.primary != new.primary):
                said.append(f"partition {new.partition}: new backup on {new.backup} (epoch {new.epoch})")
        return said

    def restarted(self, name: str) -> list[str]:
        """Ray restarted the replica ``name`` (it came back idle, with its journal):
        a primary with a backup is replaced by it and follows it, when the backup says it
        is primed at the map's epoch (:func:`~replication.placement.promotable`); any
        other replica takes its place again (a primary alone from its journal, a backup
        primed anew). An unsettled partition, or one whose backup may not take over, is
        placed again from its replicas' positions (:meth:`_replan`)."""
        key = self.where(name)
        if key is None:
            return []
        index, node = key
        p = self.placements[index]
        if index in self.unsettled:
            return self._replan(index)
        if node == p.primary and p.backup is not None:
            if not promotable(p, self.unsettled, self._standing(index, p.backup)):
                return self._replan(index)
            return self._apply(self.placements, _with(self.placements, Placement(index, p.backup, p.primary, p.epoch + 1)))
        if node in p.nodes():
            self._place(Placement(index, p.primary, p.backup, p.epoch + 1), p)
            if node == p.primary:
                self.since[index] = p.epoch + 1
        return []

    def died(self, name: str) -> list[str] | None:
        """The replica ``name`` died for good while its node lives; what was done, or
        ``None`` when its partition cannot go on without it (a primary with no backup)."""
        key = self.where(name)
        if key is None or name in self.dead:
            return []
        index, node = key
        self.dead.add(name)
        p = self.placements[index]
        if node == p.primary and p.backup is None:
            return None
        if index in self.unsettled or node == p.primary and not promotable(
                p, self.unsettled, self._standing(index, p.backup)):
            return [f"partition {index}: replica {name} died"] + self._replan(index)
        if node == p.primary:
            assert p.backup is not None
            new = Placement(index, p.backup, node, p.epoch + 1)  # a new replica there follows
        elif node == p.backup:
            new = Placement(index, p.primary, node, p.epoch + 1)
        else:
            return []
        return [f"partition {index}: replica {name} died"] + self._apply(self.placements, _with(self.placements, new))

    def _replan(self, index: int) -> list[str]:
        """Place partition ``index`` again from what its replicas say (``position``) on the
        map's nodes and on those of its last placement that took, and from the journals of the
        partition on every alive node: who leads is :func:`~replication.placement.leader`'s
        choice, at an epoch above every one they hold. When none may lead and no node is absent,
        it is placed from the journals as at start (:func:`~replication.placement.initial`;
        its replicas that are not idle are replaced first: a backup never primed cannot take
        over). Else, or when a replica does not answer, it stays unsettled and waits; what was
        done or why it waits."""
        p = self.placements[index]
        self.unsettled.add(index)
        nodes = [n for n in p.nodes() if n in self.nodes]
        nodes += [n for n in self.copies.get(index, ()) if n in self.nodes and n not in nodes]
        if not nodes:
            return [f"partition {index} waits: every node that holds it is lost"]
        positions = self._positions([self._replica(index, n) for n in nodes])
        standing: list[Standing] = []
        for node, position in zip(nodes, positions):
            if position is None:
                return [f"partition {index} waits: its replica on {node} did not answer"]
            standing.append(Standing.from_position(self.replicas[(index, node)][0], node, position))
        held = self._held(index)
        if held is None:
            return [f"partition {index} waits: a node did not say what its journal holds"]
        absent = sorted((self.known | set(self.nodes)) - set(self.nodes))
        lead = leader(standing, self.holder.get(index), self.copies.get(index, ()), absent, held)
        top = max([p.epoch] + [s.epoch for s in standing])
        if lead is None:
            if absent:
                return [f"partition {index} waits for node(s) {', '.join(absent)}: no copy that is back may lead "
                        f"(one may have lost what it had not synced, which an absent node may hold)"]
            for s in standing:
                if s.role is not Role.IDLE:
                    self._drop(index, s.node)
            new = initial(1, sorted(self.nodes), {0: held}, self.head)[0]
            new = Placement(index, new.primary, new.backup, max(new.epoch, top + 1))
        else:
            others = [n for n in nodes if n != lead]
            new = Placement(index, lead, others[0] if others else None, top + 1)
            if new.backup is None:
                new = fill_backups(_with(self.placements, new), list(self.nodes), self.head)[index]
        try:
            self._place(new, p, weighed(held, new.primary) if lead is None else None)
        except Exception as e:
            log.exception("placing partition %d again failed", index)
            return [f"partition {index}: could not be placed again ({type(e).__name__}: {e})"]
        if new.primary != p.primary:
            self.failovers[index] += 1
        return [f"partition {index}: placed again from its replicas, primary on {new.primary}"
                + (f", backup on {new.backup}" if new.backup else "") + f" (epoch {new.epoch})"]

    def _standing(self, index: int, node: str | None) -> Standing | None:
        """What the replica of partition ``index`` on ``node`` says of itself (``None``: none
        there, or it did not answer in time)."""
        found = self.replicas.get((index, node)) if node is not None else None
        if found is None or node is None or found[0] in self.dead:
            return None
        [position] = self._positions([found[1]])
        return None if position is None else Standing.from_position(found[0], node, position)

    def _held(self, index: int) -> dict[str, tuple[int, int]] | None:
        """What the journal of partition ``index`` on each alive node holds (epoch, last record;
        a node without one is left out); ``None`` when a node did not answer in time."""
        names = sorted(self.nodes)
        try:
            answers = get(self.cluster, [self.cluster.held_of(self.nodes[n], index) for n in names], CALL_TIMEOUT)
        except Exception:
            log.exception("reading partition %d's journals back failed", index)
            return None
        return {n: (h[0], h[1]) for n, h in zip(names, answers) if h is not None}

    def drifted(self) -> list[str]:
        """The replicas the map names that say they are idle (or did not answer in time: left
        out): restarted without Liveness seeing it (before its baseline, say), to be brought
        back as :meth:`restarted` does."""
        named = [(p, node) for p in self.placements for node in p.nodes()
                 if p.partition not in self.unsettled and (p.partition, node) in self.replicas
                 and self.replicas[(p.partition, node)][0] not in self.dead]
        # briefly: a replica out of reach is the failure detector's, and the check must go on
        positions = self._positions([self.replicas[(p.partition, node)][1] for p, node in named], DRIFT_TIMEOUT)
        return [self.replicas[(p.partition, node)][0] for (p, node), position in zip(named, positions)
                if position is not None and position["role"] == Role.IDLE]

    def rebalance(self) -> list[str]:
        """One step towards an even spread (see :func:`~replication.placement.rebalance_step`)."""
        before = self.placements
        if self.balanced():
            return []
        after = rebalance_step(before, list(self.nodes), self._caught_up(), self.head)
        if after == before:
            return []
        (old, new), = [(a, b) for a, b in zip(before, after) if a != b]
        if new.primary == old.primary:
            return self._apply(before, after)
        assert new.backup == old.primary
        primary = self._replica(old.partition, old.primary)
        successor = self._replica(new.partition, new.primary)
        try:
            self._ask(primary, "handover")  # drained: the backup holds everything
            address = self._ask(primary, "become_backup", new.epoch)
            self._ask(successor, "become_primary", new.epoch, address)
        except BaseException:
            self.unsettled.add(new.partition)  # its map's primary may be a backup now
            raise
        self._set(new)
        self._hold(new)
        self.since[new.partition] = new.epoch
        return [f"partition {new.partition}: handed over from {old.primary} to {new.primary} (epoch {new.epoch})"]

    def balanced(self) -> bool:
        return rebalance_step(self.placements, list(self.nodes), range(self.count), self.head) == self.placements

    def _caught_up(self) -> list[int]:
        with_backup = [p for p in self.placements if p.backup is not None]
        if not with_backup:
            return []
        positions = self._positions([self.route(p.partition).handle for p in with_backup])
        # a replica that did not answer (going away, say): not now
        return [p.partition for p, position in zip(with_backup, positions) if position and position.get("caught_up")]

    # -- reporting and stopping -----------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        return [
            {"partition": p.partition, "primary": p.primary, "backup": p.backup, "epoch": p.epoch,
             "primary_since": self.since[p.partition], "failovers": self.failovers[p.partition]}
            for p in self.placements
        ]

    def stop(self, timeout: float) -> None:
        handles = [h for _, h in self.replicas.values()]
        # their journals get what waits for an fsync
        self.cluster.outcomes([self.cluster.call(h, "stop") for h in handles], timeout)

    def kill_all(self) -> None:
        for _, handle in list(self.replicas.values()):
            self.cluster.kill(handle)
        self.replicas = {}


def weighed(held: dict[str, tuple[int, int]], node: str) -> tuple[int, ...] | None:
    """What the controller read of ``node``'s journal of a partition, for ``become_primary``:
    ``()`` when it has none; ``None`` (nothing to trust) when it was set aside as damaged."""
    found = held.get(node)
    if found is None:
        return ()
    return None if found[0] < 0 else found


def _with(placements: Placements, new: Placement) -> Placements:
    return tuple(new if q.partition == new.partition else q for q in placements)


#: how soon a partition that waits is placed again, at first and at most (doubling between)
RECONCILE_FIRST = 1.0
RECONCILE_MOST = 30.0
#: seconds of placing again per check, after which the rest waits for the next one
SETTLE_BUDGET = 10.0
#: how often every replica the map names is asked where it stands (:meth:`ReplicaSet.drifted`)
DRIFT_EVERY = 5.0
PARTITION_ACTOR = "PartitionActor"


class PartitionManager:
    """The controller's manager of the partition replicas: the steps of one check, each one
    isolated -- a step that raises is said (a ``cluster`` event naming the step and the error)
    and done again at the next check; it never stops serve.

    * :meth:`follow_nodes`: nodes lost or joined (:meth:`ReplicaSet.nodes_changed`);
    * :meth:`replica_event`: what :class:`~actors.liveness.Liveness` saw of a replica --
      ``restarted`` (:meth:`ReplicaSet.restarted`) or ``dead`` (:meth:`ReplicaSet.died`;
      a primary without a backup is dead for serve to report);
    * :meth:`settle`: the reconcile loop. Every partition that is unsettled (a placement
      that failed partway, a node of it back, one that waits for a node) or whose map names
      an alive node without a live replica there is placed again from its replicas and the
      journals (:meth:`ReplicaSet._replan`), at once and then, while it keeps waiting, after
      1 s, 2 s, ... at most 30 s (each try reads its journals on every alive node); a wait is
      said once, not at every check. Every :data:`DRIFT_EVERY` seconds, every replica the
      map names is asked where it stands, and one that says it is idle (it restarted before
      :class:`~actors.liveness.Liveness` knew it, or a probe was lost) is brought back as
      a restarted one is (:meth:`ReplicaSet.drifted`). When the check saw nothing else and
      every partition is settled, one rebalancing step.

    Time is read from ``clock`` (injected: the simulator runs the same steps on its time)."""

    def __init__(self, replicas: ReplicaSet, clock: Callable[[], float] = time.monotonic) -> None:
        self.replicas = replicas
        self.clock = clock
        self._due: dict[int, tuple[float, float]] = {}  # partition -> (next try, backoff)
        self._said: dict[int, str] = {}  # partition -> the last wait said
        #: handovers done by :meth:`settle` since this manager started
        self.handovers = 0
        self._drift_at = clock() + DRIFT_EVERY
        self._idle: set[str] = set()  # replicas the last drift check saw idle
        self._failing: dict[str, str] = {}  # steps failing now -> what they said

    def _drift(self) -> list[str]:
        """Bring back a replica seen idle where the map names it at two drift checks in a row (a
        restart Liveness reports within one is handled as its event, not twice)."""
        said: list[str] = []
        idle = set(self.replicas.drifted())
        seen, self._idle = self._idle, idle
        for name in sorted(idle & seen):
            said.append(f"{name} is idle where the partition map names it (it restarted unseen): brought back")
            said += self.replicas.restarted(name)
        self._idle -= seen
        return said

    def _step(self, step: str, run: Callable[[], list[str]]) -> list[ControlEvent]:
        try:
            said = run()
        except Exception as e:
            line = f"the partitions' {step} step failed ({type(e).__name__}: {e})"
            if self._failing.get(step) == line:
                return []  # said once while it fails alike
            self._failing[step] = line
            log.exception("the partitions' %s step failed", step)
            return [ControlEvent.cluster(line + "; the next check does what is due then")]
        self._failing.pop(step, None)
        return [ControlEvent.cluster(line) for line in said]

    def follow_nodes(self, alive: dict[str, Node]) -> list[ControlEvent]:
        return self._step("nodes", lambda: self.replicas.nodes_changed(alive))

    def replica_event(self, name: str, event: str, reason: str) -> list[ControlEvent]:
        replicas = self.replicas
        if name in replicas.dead:
            return []  # went with its node
        try:
            if event == "restarted":
                said = replicas.restarted(name)
                return ([ControlEvent(name, PARTITION_ACTOR, "recovered", "")]
                        + [ControlEvent.cluster(line) for line in said])
            if event == "dead":
                replaced = replicas.died(name)
                if replaced is None:
                    return [ControlEvent(name, PARTITION_ACTOR, "dead", reason)]
                return [ControlEvent.cluster(line) for line in replaced]
        except Exception as e:
            if replicas.cluster.unavailable(e):
                # it went down again while being brought back: Ray restarts it (a "restarted" event
                # comes) or gives up (a "dead" event comes); neither is a failure to bring it back
                return [ControlEvent(name, PARTITION_ACTOR, "crashed", f"down again while coming back: {e}")]
            return [ControlEvent(name, PARTITION_ACTOR, "failed", f"{type(e).__name__}: {e}")]
        return [ControlEvent(name, PARTITION_ACTOR, event, reason)]

    def unplaced(self) -> list[int]:
        """The partitions to place again: unsettled, or with an alive node of its map that has
        no live replica."""
        replicas = self.replicas
        found = set(replicas.unsettled)
        for p in replicas.placements:
            for node in p.nodes():
                if node in replicas.nodes:
                    held = replicas.replicas.get((p.partition, node))
                    if held is None or held[0] in replicas.dead:
                        found.add(p.partition)
        return sorted(found)

    def settle(self, quiet: bool) -> list[ControlEvent]:
        replicas = self.replicas
        now = self.clock()
        events: list[ControlEvent] = []
        due = self.unplaced()
        for index in list(self._due):
            if index not in due:
                del self._due[index]
                self._said.pop(index, None)
        for index in due:
            # newly due: the step that unsettled it has just tried to place it
            at, backoff = self._due.setdefault(index, (now + RECONCILE_FIRST, RECONCILE_FIRST))
            if at > now:
                continue
            if self.clock() - now > SETTLE_BUDGET:
                break  # the rest at the next check: serve gives up on a controller silent for 30 s
            said = self._step(f"placing of partition {index}", lambda: replicas._replan(index))
            if index in replicas.unsettled:
                backoff = min(backoff * 2, RECONCILE_MOST)
                self._due[index] = (now + backoff, backoff)
                reason = "; ".join(e.reason for e in said)
                if reason != self._said.get(index):
                    self._said[index] = reason
                    events += said
            else:
                self._due.pop(index, None)
                self._said.pop(index, None)
                events += said
        if now >= self._drift_at:
            self._drift_at = now + DRIFT_EVERY
            events += self._step("drift", self._drift)
        if quiet and not events and not replicas.unsettled and not due:
            try:
                moved = replicas.rebalance()
            except Exception as e:  # a replica that is going away: next time
                log.warning("a rebalancing step failed: %s", e)
                moved = []
            self.handovers += sum("handed over" in line for line in moved)
            events += [ControlEvent.cluster(line) for line in moved]
        return events
