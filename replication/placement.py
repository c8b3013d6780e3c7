"""Where each partition's primary and backup live: pure decisions.

A :class:`Placement` names, for one partition, the node of its primary, the
node of its backup (``None``: the partition runs without one, because only
one node is alive) and its *epoch*. Every change to a placement bumps the
epoch; a replica knows the epoch it was given, and a replica of an older
epoch can no longer have a write acknowledged (see :mod:`actors.partition`).
Nodes are named by their stable names (:mod:`replication.nodes`), never by Ray's
node ids, which change when a node restarts.

The controller calls these functions and carries out what changed:

* :func:`initial` — at start: each partition on the nodes that hold its data
  (newest epoch first), the rest spread evenly;
* :func:`after_loss` — nodes died: a backup whose primary died becomes the
  primary, and a partition that lost its backup gets a new one;
* :func:`fill_backups` — a partition without a backup gets one when a second
  node is alive;
* :func:`rebalance_step` — a node joined: one step towards an even spread
  (a primary handed to its caught-up backup, or a backup moved), repeated by
  the controller until nothing changes;
* :func:`freshest` — which of two recovered replicas to trust;
* :func:`from_replicas` — a restarted controller: the map as the replicas
  that outlived it say it is, and what to place again;
* :func:`repaired`, :func:`promotable` and :func:`leader` — the two
  safeguards below, applied where a backup would be promoted and where a
  partition is placed again from what its replicas say.

Every function that returns placements returns a new tuple and leaves the
ones it does not change exactly as they were (same epoch).

**The head holds no data.** Ray's head node (``head``, given to every
function that chooses nodes; :attr:`replication.nodes.Node.head`) runs what
the whole cluster needs (the GCS, ``canopy serve``), so it holds no partition
replica, primary or backup, while at least :data:`WORKERS` other nodes are
alive; with fewer (:func:`hosts`), it takes backups, and a primary only when
a failover leaves one there or it is the only node: new primaries go to a
worker, rebalancing hands a primary on the head to a caught-up backup on a
worker and spreads primaries over the workers alone (fewer handovers, each
of which costs a session taken up elsewhere the recent messages its new
primary was not primed with). So a 3-node
cluster keeps its replicas on its two workers; when one is lost, the backups
it held go to the head; when a worker is back, :func:`rebalance_step` moves
them off again, first of all: a primary on the head is handed to its backup,
and a backup on the head moves to the least loaded worker, each once the
partition's backup has caught up. Data decides before
the rule: at start, a partition whose newest journal is on the head is served
from there (its journal is the partition), and a copy there as new as the
primary's is kept as its backup, until rebalancing moves them; a backup on
the head whose primary is lost takes over there.

**Only a placement that took is trusted.** The controller keeps a partition
*unsettled* while its last placement failed partway (a step refused, timed
out, or its replica went meanwhile) and while a node of it came back (a new
process whose journal may have lost its unsynced tail). The map of an
unsettled partition may name a backup that never heard of it: it never
followed at that epoch, so its journal was never marked as awaiting a prime
and may be an old copy that passes for a whole one. Such a backup is never
promoted (:func:`repaired`, :func:`promotable`); the partition is placed again
from its replicas' positions instead (:func:`leader`).

**A copy that may have lost its tail does not lead while a fuller one is
away.** Under the ``interval`` fsync policy a replica back from a power cut
holds a prefix of what it acknowledged. The partition's *holder* (the primary
of its last placement that took) leads again from its journal only while
every node of that placement is alive and no journal on an alive node holds
more (a newer epoch, or the same and more records); with no holder known, an
idle copy leads only while no node the controller knows is absent. Else the
partition waits for the absent node (:func:`leader` says ``None``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from replication.replica import Role


class Placement(NamedTuple):
    partition: int
    primary: str
    backup: str | None
    epoch: int

    def nodes(self) -> tuple[str, ...]:
        return (self.primary,) if self.backup is None else (self.primary, self.backup)


Placements = tuple[Placement, ...]

#: while this many nodes other than the head are alive, the head takes no replica
WORKERS = 2


def hosts(alive: Iterable[str], head: str | None = None) -> list[str]:
    """The nodes that may take a replica: the alive ones but the head while at least
    :data:`WORKERS` others are alive, else every alive one (sorted)."""
    living = sorted(set(alive))
    workers = [node for node in living if node != head]
    return workers if len(workers) >= WORKERS else living


def _load(placements: Iterable[Placement], alive: Iterable[str]) -> Counter[str]:
    """How busy each node is: a primary counts 2, a backup 1 (a primary also serves every link)."""
    load: Counter[str] = Counter({node: 0 for node in alive})
    for p in placements:
        if p.primary in load:
            load[p.primary] += 2
        if p.backup is not None and p.backup in load:
            load[p.backup] += 1
    return load


def _least_loaded(load: Counter[str], exclude: Iterable[str] = ()) -> str | None:
    skip = set(exclude)
    candidates = [node for node in sorted(load) if node not in skip]
    if not candidates:
        return None
    return min(candidates, key=lambda node: (load[node], node))


def initial(
    count: int, alive: Sequence[str], held: Mapping[int, Mapping[str, int | tuple[int, int]]] | None = None,
    head: str | None = None,
) -> Placements:
    """Place ``count`` partitions on the ``alive`` nodes. ``held[i]`` maps a node
    holding partition ``i``'s journal to the epoch it was last given, or to that epoch
    and the last record its journal gives back (a longer journal of one epoch wins: a
    node that lost writes its disk never synced must not be trusted over its peer; a
    damaged journal says an epoch of -1): the newest
    holder becomes the primary (a host of :func:`hosts` first among equals), and the
    next newest holder that is a host, or as new as the primary (a second whole copy,
    kept wherever it is), the backup; other partitions go to the hosts where the load
    is least. Each epoch is one more than any held."""
    if not alive:
        raise ValueError("no node is alive to place partitions on")
    held = held or {}
    everyone = sorted(set(alive))
    nodes = hosts(everyone, head)
    out: list[Placement] = []
    load: Counter[str] = Counter({node: 0 for node in everyone})
    primaries: Counter[str] = Counter({node: 0 for node in everyone})
    backups: Counter[str] = Counter({node: 0 for node in everyone})
    for i in range(count):
        weighed = {node: (h, 0) if isinstance(h, int) else tuple(h) for node, h in held.get(i, {}).items()}
        holders = sorted(
            ((weight, node in nodes, node) for node, weight in weighed.items() if node in load), reverse=True
        )
        # the newest journal is the partition, wherever it is; an older one off the hosts is not worth keeping
        chosen = [node for _, _, node in holders[:1]]
        chosen += [node for weight, host, node in holders[1:] if host or weight[0] == holders[0][0][0]][:1]
        if not chosen:  # a new primary: on a worker, if there is one (see rebalance_step)
            chosen = [min([n for n in nodes if n != head] or nodes, key=lambda n: (primaries[n], load[n], n))]
        primaries[chosen[0]] += 1
        load[chosen[0]] += 2
        others = [n for n in nodes if n != chosen[0]]
        if len(chosen) < 2 and others:
            chosen.append(min(others, key=lambda n: (backups[n], load[n], n)))
        if len(chosen) == 2:
            load[chosen[1]] += 1
            backups[chosen[1]] += 1
        epoch = max((weight[0] for weight in weighed.values()), default=0) + 1
        out.append(Placement(i, chosen[0], chosen[1] if len(chosen) == 2 else None, epoch))
    return tuple(out)


def after_loss(placements: Placements, alive: Iterable[str], head: str | None = None) -> Placements:
    """What the placements become when every node not in ``alive`` is gone: a lost
    primary's backup takes over where it is, and a new backup goes to the least loaded
    of the :func:`hosts`. A partition whose primary and backup are both gone stays as
    it was: it is unavailable until one of them comes back (its journal is on that node)."""
    living = set(alive)
    out = list(placements)
    load = _load([p for p in placements if p.primary in living], hosts(living, head))
    for k, p in enumerate(placements):
        primary_ok = p.primary in living
        backup_ok = p.backup is not None and p.backup in living
        if primary_ok and (p.backup is None or backup_ok):
            continue
        if not primary_ok and not backup_ok:
            continue
        primary = p.primary if primary_ok else p.backup
        assert primary is not None
        if not primary_ok and primary in load:
            load[primary] += 1  # from backup (1) to primary (2)
        backup = _least_loaded(load, exclude=[primary])
        if backup is not None:
            load[backup] += 1
        out[k] = Placement(p.partition, primary, backup, p.epoch + 1)
    return tuple(out)


def fill_backups(placements: Placements, alive: Iterable[str], head: str | None = None) -> Placements:
    """Give a backup to every available partition that has none, on the host (:func:`hosts`)
    where the load is least."""
    living = set(alive)
    load = _load(placements, hosts(living, head))
    out = list(placements)
    for k, p in enumerate(placements):
        if p.backup is None and p.primary in living:
            backup = _least_loaded(load, exclude=[p.primary])
            if backup is not None:
                load[backup] += 1
                out[k] = Placement(p.partition, p.primary, backup, p.epoch + 1)
    return tuple(out)


def rebalance_step(
    placements: Placements, alive: Iterable[str], caught_up: Iterable[int] = (), head: str | None = None
) -> Placements:
    """One step towards an even spread over the hosts among the ``alive`` nodes
    (:func:`hosts`), changing at most one partition, in this order:

    0. while the head may take no replica, move one off it: hand a primary there to
       its caught-up backup, else move a caught-up backup there to the least loaded
       host, else give a primary there with no backup one on a host (to hand over later);
    1. hand a primary to its backup when the backup's node has at least two
       primaries fewer (only a backup in ``caught_up``, one that has acknowledged
       its primary's whole state, takes over);
    2. while primaries are uneven, move the backup of a partition on a node with
       the most primaries to the node with the fewest (so that step 1 can hand it
       over once it caught up); nothing while such a move waits for its catch-up;
    3. move a backup from the node with the most backups to the one with the fewest,
       when they differ by two or more.

    Unchanged when the spread is even, or nothing can move yet."""
    ready = set(caught_up)
    everyone = set(alive)
    living = set(hosts(everyone, head))
    if head is not None and head in everyone and head not in living:
        off = _off_the_head(placements, everyone, living, ready, head)
        if off is not None:
            return off
    usable = sorted((p for p in placements if p.primary in living), key=lambda p: p.partition)
    if len(living) < 2 or not usable:
        return placements
    # a head that takes replicas for want of workers takes backups, never a primary by choice: its
    # primaries go to a worker, and primaries are spread over the workers alone (fewer handovers
    # now and when a worker comes back; a primary newly primed has fewer recent messages to give)
    leaders = living - {head} if head in living and len(living) > 1 else living
    if head in living and head not in leaders:
        for p in usable:
            if p.primary == head and p.backup in leaders and p.partition in ready:
                return _replace(placements, Placement(p.partition, p.backup, head, p.epoch + 1))
    primaries: Counter[str] = Counter({node: 0 for node in leaders})
    primaries.update(p.primary for p in usable if p.primary in leaders)
    handovers = [
        p for p in usable
        if p.primary in leaders and p.backup in leaders and p.partition in ready
        and primaries[p.primary] - primaries[p.backup] >= 2
    ]
    if handovers:
        p = max(handovers, key=lambda p: primaries[p.primary] - primaries[p.backup or ""])
        assert p.backup is not None
        return _replace(placements, Placement(p.partition, p.backup, p.primary, p.epoch + 1))
    nodes = sorted(leaders)
    low = min(nodes, key=lambda n: (primaries[n], n))
    high = max(primaries.values())
    if high - primaries[low] >= 2:
        crowded = [p for p in usable if p.primary in leaders and primaries[p.primary] == high]
        if any(p.backup == low for p in crowded):
            return placements  # a handover to ``low`` waits for its backup to catch up
        p = crowded[0]
        return _replace(placements, Placement(p.partition, p.primary, low, p.epoch + 1))
    backups: Counter[str] = Counter({node: 0 for node in living})
    backups.update(p.backup for p in usable if p.backup in living)
    fewest = min(sorted(living), key=lambda n: (backups[n], n))
    most = max(sorted(living), key=lambda n: (backups[n], n))
    if backups[most] - backups[fewest] >= 2:
        for p in usable:
            if p.backup == most and p.primary != fewest:
                return _replace(placements, Placement(p.partition, p.primary, fewest, p.epoch + 1))
    return placements


def _off_the_head(
    placements: Placements, alive: set[str], living: set[str], ready: set[int], head: str
) -> Placements | None:
    """One replica moved off the ``head`` to the ``living`` hosts, or ``None`` when none can
    move yet. Only a partition in ``ready`` (its backup holds all its primary's state) gives
    up a replica on the head: a primary there is handed to its backup, else a backup there
    moves to the least loaded host. A primary on the head with no backup on a host gets one
    there (to be handed over once it caught up)."""
    load = _load(placements, living)
    on_head = sorted((p for p in placements if p.primary in alive and head in p.nodes()), key=lambda p: p.partition)
    for p in on_head:
        if p.primary == head and p.backup in living and p.partition in ready:
            return _replace(placements, Placement(p.partition, p.backup, head, p.epoch + 1))
    for p in on_head:
        if p.backup == head and p.partition in ready:
            target = _least_loaded(load, exclude=[p.primary])
            if target is not None:
                return _replace(placements, Placement(p.partition, p.primary, target, p.epoch + 1))
    for p in on_head:
        if p.primary == head and p.backup not in living:
            target = _least_loaded(load)
            if target is not None:
                return _replace(placements, Placement(p.partition, head, target, p.epoch + 1))
    return None


def _replace(placements: Placements, new: Placement) -> Placements:
    return tuple(new if p.partition == new.partition else p for p in placements)


def freshest(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Whether replica position ``a`` (epoch, last journal sequence) is at least as
    new as ``b``: the newer epoch wins (a replica of an older epoch may hold records
    its successor never acknowledged), then the longer journal."""
    return a >= b


class Standing(NamedTuple):
    """What one replica says of itself (``PartitionActor.position``) to a restarted controller."""

    name: str
    node: str
    role: Role  # a str: "primary", "backup" or "idle"
    epoch: int
    primed: bool = False
    handing_over: bool = False
    since: int = 0  # a primary: the epoch since which it is the primary
    address: str | None = None  # where it serves
    backup: str | None = None  # a primary: where its backup serves
    sequence: int = 0  # the last record its journal holds
    damaged: bool = False  # its journal was set aside or awaits a prime: it holds nothing to lead from

    @classmethod
    def from_position(cls, name: str, node: str, position: Mapping[str, Any]) -> Standing:
        """What replica ``name`` on ``node`` answered ``position()`` (``PartitionActor.position``)."""
        return cls(name, node, Role(position["role"]), position["epoch"], position["primed"],
                   position["handing_over"], position["since"], position["address"], position["backup"],
                   position["sequence"], position["damaged"])


class Adoption(NamedTuple):
    placement: Placement  # the partition as it stands
    since: int
    keep: tuple[str, ...]  # the replicas it keeps (the others are stopped)
    again: Placement | None  # a new placement when its replicas disagree


def from_replicas(count: int, standing: Mapping[int, Sequence[Standing]]) -> list[Adoption]:
    """The partition map rebuilt from what the replicas say, after the controller
    that made it died (its successor has no other record).

    A partition's primary is its replica that says it is the primary at the newest
    epoch; its backup is the replica that follows that primary (at the primary's
    address and epoch). When the replicas disagree, because the old controller died
    between two steps of a change (a handover half made, a backup not yet followed, a
    primary that lost its backup), the partition is placed ``again`` at an epoch above
    every one its replicas hold, with the replicas it has: its primary, or, when none
    can serve, its primed backup with the newest epoch. ``ValueError`` when a partition
    has no replica, or none that can take over: it cannot be served."""
    out: list[Adoption] = []
    for index in range(count):
        mine = list(standing.get(index, ()))
        if not mine:
            raise ValueError(f"partition {index}: no replica of it answers; it cannot be served")
        top = max(r.epoch for r in mine)
        primaries = sorted((r for r in mine if r.role is Role.PRIMARY), key=lambda r: r.epoch)
        primary = primaries[-1] if primaries else None
        backup = None
        if primary is not None:
            backup = next((r for r in mine if r.role is Role.BACKUP and r.node != primary.node
                           and r.address == primary.backup and r.epoch == primary.epoch), None)
        if primary is not None and not primary.handing_over and (backup is not None or primary.backup is None):
            keep = (primary.name,) + ((backup.name,) if backup is not None else ())
            out.append(Adoption(Placement(index, primary.node, backup.node if backup else None, primary.epoch),
                                primary.since, keep, None))
            continue
        if primary is None or primary.handing_over:
            primed = sorted((r for r in mine if r.role is Role.BACKUP and r.primed), key=lambda r: r.epoch)
            primary = primed[-1] if primed else primary
        if primary is None:
            raise ValueError(f"partition {index}: no replica of it can take over (none is primed)")
        chosen = primary
        others = sorted((r for r in mine if r.node != chosen.node), key=lambda r: (-r.epoch, r.name))
        keep = (chosen.name,) + ((others[0].name,) if others else ())
        again = Placement(index, chosen.node, others[0].node if others else None, top + 1)
        out.append(Adoption(Placement(index, chosen.node, None, top), top, keep, again))
    return out


def repaired(
    placements: Placements, alive: Iterable[str], head: str | None = None, unsettled: Collection[int] = ()
) -> Placements:
    """The placements on the ``alive`` nodes: :func:`after_loss` (a lost primary's backup
    promoted), then :func:`fill_backups`; but a partition in ``unsettled`` (its last placement
    failed partway, or a node of it came back) stays exactly as it is, whatever it lost: its
    map may name a backup that never heard of it, which must not be promoted. The controller
    places such a partition from its replicas' positions instead (:func:`leader`)."""
    names = list(alive)
    after = fill_backups(after_loss(placements, names, head), names, head)
    skip = set(unsettled)
    return tuple(old if old.partition in skip else new for old, new in zip(placements, after))


def promotable(p: Placement, unsettled: Collection[int], backup: Standing | None) -> bool:
    """Whether ``p``'s backup may take over from ``p``'s primary (whose replica restarted or
    died) as the map stands: only when ``p`` took (its partition is not in ``unsettled``) and
    the backup, asked (``backup``: what it says of itself; ``None``: it did not answer), is a
    primed backup at ``p``'s epoch. Else the partition is placed from its replicas' positions
    (:func:`leader`)."""
    if p.backup is None or p.partition in set(unsettled) or backup is None:
        return False
    return backup.node == p.backup and backup.role is Role.BACKUP and backup.primed and backup.epoch == p.epoch


def can_lead(s: Standing) -> bool:
    """Whether ``become_primary`` would take on this replica: a primary, a primed backup, or
    an idle replica whose journal holds something to lead from."""
    if s.role is Role.BACKUP:
        return s.primed
    return s.role is Role.PRIMARY or not s.damaged


def rank(s: Standing) -> tuple[int, int, int]:
    """The order in which replicas lead (the least first): a primary at the newest epoch, a
    primed backup, then an idle replica with the newest epoch and the longest journal (a torn
    tail cut off, or records its primary journaled that a backup never got, make them differ)."""
    if s.role is Role.PRIMARY:
        return (0, -s.epoch, 0)
    if s.role is Role.BACKUP:
        return (1, -s.epoch, 0)
    return (2, -s.epoch, -s.sequence)


def leader(
    standing: Sequence[Standing], holder: str | None, copies: Iterable[str], absent: Collection[str],
    held: Mapping[str, tuple[int, int]],
) -> str | None:
    """The node whose replica leads one partition placed again from its replicas' positions,
    or ``None``: it waits (for an absent node, or, with none absent, to be placed from the
    journals as at start).

    ``standing``: what its replicas say (on the map's nodes first, its primary first, then the
    other nodes of its last placement that took); ``holder``: the primary of that placement
    (``None``: unknown), ``copies``: its nodes; ``absent``: the nodes the controller knows that
    are not alive; ``held``: what the journal of the partition on each alive node holds now
    (epoch, last record). In this order:

    * a primary or a primed backup leads (the newest epoch first, the earlier in ``standing``
      among equals): it holds everything acknowledged;
    * else the holder, back idle with its journal, unless an idle copy at its epoch or a newer
      one has a longer journal (which then leads); and the holder only while no node of
      ``copies`` is absent and no journal in ``held`` holds more than its own: its journal
      may have lost its unsynced tail to a power cut, and a copy away or the map no longer
      names may hold it;
    * with no holder known, the first idle copy (the newest epoch, then the longest journal)
      while no node is absent and no journal holds more.

    A replica that cannot lead (:func:`can_lead`: a backup never primed, a journal set aside
    or awaiting a prime) never does here."""
    able = [s for s in standing if can_lead(s)]
    serving = sorted((s for s in able if s.role is not Role.IDLE), key=rank)
    if serving:
        return serving[0].node
    idle = sorted(able, key=rank)
    if holder is None:
        if not idle or absent or _holds_more(held, (idle[0].epoch, idle[0].sequence)):
            return None
        return idle[0].node
    mark = next((s for s in idle if s.node == holder), None)
    if mark is None:
        return None
    longer = [s for s in idle if s.epoch >= mark.epoch and s.sequence > mark.sequence]
    if longer:
        return max(longer, key=lambda s: s.sequence).node
    if any(n in absent for n in copies) or _holds_more(held, (mark.epoch, mark.sequence)):
        return None
    return holder


def _holds_more(held: Mapping[str, tuple[int, int]], mine: tuple[int, int]) -> bool:
    """Whether a journal in ``held`` holds more than ``mine`` (epoch, last record): a newer
    epoch, or the same and more records, as :func:`initial` ranks them."""
    return any(tuple(h) > mine for h in held.values())
