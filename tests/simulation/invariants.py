"""What must hold in every run, checked as it happens: a failure raises :class:`Violation`.

1. **One acknowledging primary per partition and epoch**: every acknowledgement a replica
   releases at epoch ``e`` of partition ``p`` comes from the same process.
2. **No acknowledged write lost**: when a replica becomes the primary, when it first applies a
   batch as such, and at every acknowledgement it releases, its store holds every write
   acknowledged so far for its partition (at an acknowledgement, every one acknowledged at its
   epoch or before: a primary whose backup confirmed a write just before its promotion may hear
   so after the new primary acknowledged writes of its own; that late acknowledgement is sound
   when the newer primary holds the write, which is checked then, and the convergence below
   requires the final primary to hold every acknowledged write). Excused only: writes no copy holds any more (no
   running replica's store, no journal's records or snapshot on any disk) after a power cut
   while the policy was ``interval`` (at that cut, or at a later loss of a copy: a damaged
   journal set aside); and, under any policy, writes that a damaged journal set aside was
   the only copy of (:data:`ONLY_COPY`: a partition that ran without a backup, its only
   node alive, then a bad record on that node's disk; recovery never reads past damage and
   sets the journal aside whole, its repair being an operator's). Nothing else is excused,
   under ``always`` nothing at all.
   A lost write says its *cause* when the checker can tell (:meth:`Checker.cause`): the
   replica's journal never held the partition at the epochs its missing writes were
   acknowledged at (:data:`STALE`), or it held them and lost them from its tail, to a record
   recovery cut off as torn or to a power cut under ``interval``, while another copy kept
   them (:data:`SHORT`).
3. **Epochs never go back**: every epoch a replica saves on its disk is at least the last one
   saved there (a journal set aside starts over), and a backup applies a frame only from a
   stream whose ``Follow`` epoch is at least its own (F4 of the design).
4. **Convergence** (:meth:`Checker.unconverged`, asked by the runner after the faults end):
   every partition's primary in the controller's map is a running replica that is the primary
   at the map's epoch and not handing over; with two hosts alive, its backup too, primed at
   that epoch and caught up; both hold every acknowledged write.

The checker knows the replicas and disks by the registrations of :mod:`~tests.simulation.run`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from replication.placement import hosts
from replication.replica import Role
from tests.simulation.disk import NodeDisk
from tests.simulation.world import MS, World

if TYPE_CHECKING:
    from tests.simulation.controller import Controller
    from tests.simulation.managed import ManagedController
    from tests.simulation.replica import SimReplica

__all__ = ["Checker", "Violation"]


#: causes :meth:`Checker.cause` diagnoses for a lost write (``Violation.cause``)
STALE = "a copy that never held the partition at the epochs its missing writes were acknowledged at"
SHORT = "a copy that lost its tail (a record cut as torn, or a power cut) while another copy kept it"
#: why the loss of writes a damaged journal alone held is excused (:meth:`Checker.set_aside`)
ONLY_COPY = "a damaged journal set aside, the only copy of them"


class Violation(BaseException):
    """An invariant broke: ``kind`` (which), ``detail`` (how), ``time_ns`` (when), and for a
    lost write the ``cause`` the checker diagnosed (:data:`STALE`, :data:`SHORT`), if any.
    A ``BaseException``: the control plane's code, which the checker may interrupt from inside
    a simulated call, catches ``Exception`` and must not swallow it."""

    def __init__(self, kind: str, detail: str, time_ns: int, cause: str | None = None) -> None:
        super().__init__(kind, detail, time_ns)
        self.kind = kind
        self.detail = detail
        self.time_ns = time_ns
        self.cause = cause

    def __str__(self) -> str:
        because = f" (through {self.cause})" if self.cause is not None else ""
        return f"{self.kind} at {self.time_ns / MS:.3f} ms: {self.detail}{because}"


class Checker:
    def __init__(self, world: World, partitions: int, disks: Sequence[NodeDisk]) -> None:
        self.world = world
        self.disks = disks
        #: per partition: write id -> key, every write acknowledged (released by a primary)
        self.acked: list[dict[int, str]] = [{} for _ in range(partitions)]
        #: (partition, epoch) -> the process that acknowledged there
        self.ackers: dict[tuple[int, int], str] = {}
        #: write id -> why its loss is excused
        self.excused: dict[int, str] = {}
        #: (node, partition) -> the last epoch saved on that disk
        self.saved: dict[tuple[str, int], int] = {}
        self.replicas: list[SimReplica] = []
        #: write id -> the epoch it was acknowledged at
        self.ack_epoch: dict[int, int] = {}
        #: journal (node, partition) -> the newest epoch at which it held the whole partition
        self.whole: dict[tuple[str, int], int] = {}
        #: journal (node, partition) -> the writes it lost from its tail (cut as torn, power cut)
        self.truncated: dict[tuple[str, int], set[int]] = {}
        self.lossy: str | None = None  # the first power cut under an interval policy

    def fail(self, kind: str, detail: str, cause: str | None = None) -> Violation:
        self.world.note("VIOLATION", kind, detail, cause)
        return Violation(kind, detail, self.world.now_ns, cause)

    # -- 1 and 2 ---------------------------------------------------------------------------------

    def acknowledged(self, replica: SimReplica, wid: int, key: str) -> None:
        """``replica`` releases the acknowledgement of write ``wid`` (to ``key``)."""
        index, epoch = replica.index, replica.state.epoch
        who = repr(replica)
        first = self.ackers.setdefault((index, epoch), who)
        if first != who:
            raise self.fail("two primaries", f"partition {index} epoch {epoch}: {who} acknowledges write {wid}, "
                                             f"{first} acknowledged before")
        self.acked[index][wid] = key
        self.ack_epoch[wid] = epoch
        self.holds(replica, f"acknowledging write {wid}", upto=epoch)
        self.held_by_newer(replica, wid)
        self.holds_whole(replica, epoch)

    def held_by_newer(self, replica: SimReplica, wid: int) -> None:
        """A late acknowledgement: ``replica``'s backup confirmed write ``wid`` before it was
        promoted, and the confirmation reached the old primary after the new one acknowledged
        writes of its own. The write must then be in the newer lineage: the newest primary that
        acknowledged, while it runs, holds it (else it is lost)."""
        index, epoch = replica.index, replica.state.epoch
        newer = [e for (i, e) in self.ackers if i == index and e > epoch]
        if not newer:
            return
        name = self.ackers[(index, max(newer))]
        primary = next((r for r in self.replicas if repr(r) == name and r.running), None)
        if primary is not None and wid not in primary.held and wid not in self.excused:
            raise self.fail("lost write", f"{replica} (partition {index}, epoch {epoch}) acknowledges write {wid} "
                                          f"late, which the newer primary {primary} (epoch {max(newer)}) lacks")

    def holds(self, replica: SimReplica, when: str, upto: int | None = None) -> None:
        """``replica`` holds every write acknowledged (at ``upto`` or an older epoch, if given)."""
        missing = self.missing(replica)
        if upto is not None:
            missing = [w for w in missing if self.ack_epoch[w] <= upto]
        if missing:
            raise self.fail("lost write", f"{replica} (partition {replica.index}, epoch {replica.state.epoch}) "
                                          f"{when} lacks acknowledged writes {missing[:8]}",
                            self.cause(replica, missing))

    def cause(self, replica: SimReplica, missing: list[int]) -> str | None:
        """Why ``replica`` lacks the acknowledged writes ``missing``, when its journal's history
        says: :data:`STALE` or :data:`SHORT` (None: a bug of another kind)."""
        key = (replica.node.name, replica.index)
        whole = self.whole.get(key, 0)
        if all(self.ack_epoch[w] > whole for w in missing):
            return STALE
        if set(missing) <= self.truncated.get(key, set()):
            return SHORT
        return None

    def missing(self, replica: SimReplica) -> list[int]:
        held, excused = replica.held, self.excused
        return [w for w in self.acked[replica.index] if w not in held and w not in excused]

    # -- what each journal went through (for the causes) -----------------------------------------

    def holds_whole(self, replica: SimReplica, epoch: int) -> None:
        """``replica``'s journal holds the whole partition at ``epoch`` (it was primed by a
        primary of that epoch, or it is the primary)."""
        key = (replica.node.name, replica.index)
        if self.whole.get(key, 0) < epoch:
            self.whole[key] = epoch

    def primed(self, replica: SimReplica, epoch: int) -> None:
        """A prime from a primary of ``epoch`` replaced ``replica``'s journal."""
        self.truncated.pop((replica.node.name, replica.index), None)
        self.holds_whole(replica, epoch)

    def lost_tail(self, node: str, partition: int, writes: set[int]) -> None:
        """The journal of ``partition`` on ``node`` lost ``writes`` from its tail."""
        if writes:
            self.truncated.setdefault((node, partition), set()).update(writes)

    # -- 3 ---------------------------------------------------------------------------------------

    def saved_epoch(self, replica: SimReplica, epoch: int) -> None:
        key = (replica.node.name, replica.index)
        before = self.saved.get(key, 0)
        if epoch < before:
            raise self.fail("epoch went back", f"{replica} saves epoch {epoch} after {before}")
        self.saved[key] = epoch

    def frame_applied(self, replica: SimReplica, follow_epoch: int) -> None:
        if follow_epoch < replica.state.epoch:
            raise self.fail("stale frame", f"{replica}, a backup at epoch {replica.state.epoch}, applies a frame "
                                           f"from a primary that followed at epoch {follow_epoch}")

    # -- losses the policy allows ----------------------------------------------------------------

    def power_cut(self, node: str, interval: bool) -> None:
        if interval and self.lossy is None:
            self.lossy = f"a power cut of {node} under an interval policy"
        self._excuse()

    def set_aside(self, replica: SimReplica, kept: set[int]) -> None:
        """``replica``'s journal was damaged and set aside (its saved epoch starts over); it
        kept the writes ``kept`` (records and snapshot). Those no other copy holds are gone
        with it, and excused (:data:`ONLY_COPY`): a partition alone on one node (no other
        alive) acknowledges writes that only that node's disk holds, which no protocol keeps
        through a bad record there; recovery sets the whole journal aside rather than read
        past the damage. Writes no copy held even before are not excused: another bug lost them."""
        key = (replica.node.name, replica.index)
        self.saved[key] = 0
        self.whole.pop(key, None)
        self.truncated.pop(key, None)
        elsewhere = self._held_anywhere(replica.index)
        for wid in self.acked[replica.index]:
            if wid in kept and wid not in elsewhere and wid not in self.excused:
                self.excused[wid] = ONLY_COPY
                self.world.note("excused", wid, ONLY_COPY)
        self._excuse()

    def _excuse(self) -> None:
        if self.lossy is None:
            return
        for index, acked in enumerate(self.acked):
            held = self._held_anywhere(index)
            for wid in acked:
                if wid not in held and wid not in self.excused:
                    self.excused[wid] = self.lossy
                    self.world.note("excused", wid, self.lossy)

    def _held_anywhere(self, index: int) -> set[int]:
        held: set[int] = set()
        for replica in self.replicas:
            if replica.index == index and replica.running:
                held |= replica.held
        for disk in self.disks:
            journal = disk.journals.get(index)
            if journal is None:
                continue
            held.update(change[1] for _, _, change in journal.records)
            if journal.snapshot is not None:
                for _, wids in journal.snapshot[1]:
                    held.update(wids)
        return held

    # -- 4 ---------------------------------------------------------------------------------------

    def unconverged(self, controller: Controller | ManagedController, alive: Iterable[str]) -> str | None:
        """Why the cluster has not converged yet, or None when it has."""
        if not controller.running or not controller.placements:
            return "the controller is not running"
        if controller.busy or controller.unsettled:
            return f"the controller is busy (partitions {sorted(controller.unsettled)} unsettled)"
        two = len(hosts(alive, controller.head)) >= 2
        for p in controller.placements:
            primary = controller.replica_at(p.partition, p.primary)
            if primary is None or not primary.running or not primary.opened:
                return f"partition {p.partition}: no running primary on {p.primary}"
            state = primary.state
            if state.role is not Role.PRIMARY or state.epoch != p.epoch or state.handing_over:
                return f"partition {p.partition}: {primary} is {state.role} at {state.epoch}, not the primary at {p.epoch}"
            missing = self.missing(primary)
            if missing:
                return f"partition {p.partition}: the primary {primary} lacks {missing[:8]}"
            if not two:
                continue
            backup = controller.replica_at(p.partition, p.backup) if p.backup is not None else None
            if backup is None or not backup.running or not backup.opened:
                return f"partition {p.partition}: no running backup"
            if backup.state.role is not Role.BACKUP or not backup.state.primed or backup.state.epoch != p.epoch:
                return f"partition {p.partition}: the backup {backup} is not primed at {p.epoch}"
            if not state.caught_up or state.backup != backup.address:
                return f"partition {p.partition}: the backup {backup} has not caught up"
            missing = self.missing(backup)
            if missing:
                return f"partition {p.partition}: the backup {backup} lacks {missing[:8]}"
        return None
