"""ReplicaSet's safeguards (actors/replicas.py), driven without Ray: the cluster it is given
(:class:`actors.cluster.Cluster`: replicas, journals, calls) is a fake, so what is checked is which replica the controller asks to lead.

The decisions are :mod:`replication.placement`'s (tested there); these check that
``ReplicaSet`` asks them where it would otherwise promote a backup or let a copy lead."""

from __future__ import annotations

from typing import Any

import pytest

from actors import replicas
from actors.replicas import PartitionManager, ReplicaSet
from cluster.config import InstanceConfig
from replication.nodes import Node
from replication.placement import Placement


class Refused(Exception):
    pass


class Ref:
    """What a call answered (an exception: what it raised)."""

    def __init__(self, value: Any) -> None:
        self.value = value


class FakeReplica:
    """A replica as the controller sees it: its role, epoch and journal (``sequence``)."""

    def __init__(self, node: str, epoch: int = 0, sequence: int = 0, role: str = "idle", primed: bool = False) -> None:
        self.node, self.epoch, self.sequence, self.role, self.primed = node, epoch, sequence, role, primed
        self.refuse = False

    def become_backup(self, epoch: int) -> dict[str, Any]:
        if self.refuse:
            raise Refused(f"{self.node} is out of reach")
        self.role, self.primed = "backup", False
        return {"host": self.node, "port": 1}

    def become_primary(self, epoch: int, backup: Any, weighed: Any = None) -> dict[str, Any]:
        if self.role == "backup" and not self.primed:
            raise Refused(f"{self.node}'s backup was never primed")
        self.role, self.epoch = "primary", epoch
        return self.position()

    def position(self) -> dict[str, Any]:
        return {"role": self.role, "epoch": self.epoch, "primed": self.primed, "caught_up": False,
                "sequence": self.sequence, "since": 0, "handing_over": False, "damaged": False,
                "address": self.node, "backup": None}


class Cluster:
    """A fake of :class:`actors.cluster.Cluster`: a replica per (partition, node), made on
    demand (a new process recovers its node's journal: ``disks``); calls answer at once."""

    def __init__(self) -> None:
        self.disks: dict[str, tuple[int, int]] = {}  # node -> what partition 0's journal there holds
        self.made: dict[str, FakeReplica] = {}
        self.set = ReplicaSet(InstanceConfig(data_dir="/data"), 1, self)

    def make_replica(self, name: str, node: Node, index: int, count: int) -> FakeReplica:
        epoch, sequence = self.disks.get(node.name, (0, 0))
        replica = self.made[node.name] = FakeReplica(node.name, epoch, sequence)
        return replica

    def ready(self, handles: Any, timeout: float) -> None:
        pass  # a fake replica runs from the moment it is made

    def call(self, handle: FakeReplica, method: str, *args: Any) -> Ref:
        try:
            return Ref(getattr(handle, method)(*args))
        except Exception as e:
            return Ref(e)

    def held_of(self, node: Node, index: int) -> Ref:
        return Ref(self.disks.get(node.name))

    def outcomes(self, futures: list[Ref], timeout: float) -> list[tuple[Any, BaseException | None]]:
        return [(None, f.value) if isinstance(f.value, Exception) else (f.value, None) for f in futures]

    def kill(self, handle: Any) -> None:
        pass

    def unavailable(self, error: BaseException) -> bool:
        return False

    def nodes(self, *names: str, back: tuple[str, ...] = ()) -> dict[str, Node]:
        """The alive nodes; those ``back`` came back (a new Ray id)."""
        return {n: Node(n, f"{n}-{int(n in back)}", n, True, True) for n in names}

    def placed(self, p: Placement, nodes: dict[str, Node]) -> None:
        """``p`` placed and taken, its replicas serving."""
        s = self.set
        s.nodes, s.since, s.placements = dict(nodes), [p.epoch], (p,)
        for node in p.nodes():
            self.disks[node] = (p.epoch, 40)
        s._place(p, None)
        if p.backup is not None:
            s.replicas[(0, p.backup)][1].primed = True


@pytest.fixture
def cluster() -> Cluster:
    return Cluster()


def primary(c: Cluster) -> str:
    return c.set.placements[0].primary


def test_the_fakes_fail_over_a_settled_partition_to_its_backup(cluster: Cluster) -> None:
    cluster.placed(Placement(0, "n0", "n1", 2), cluster.nodes("n0", "n1", "n2"))
    cluster.set.nodes_changed(cluster.nodes("n1", "n2"))
    assert primary(cluster) == "n1" and cluster.set.placements[0].epoch == 3


def test_a_backup_a_failed_placement_named_is_not_promoted_when_the_primary_is_lost(cluster: Cluster) -> None:
    everyone = cluster.nodes("n0", "n1", "n2")
    cluster.placed(Placement(0, "n0", "n2", 2), everyone)
    cluster.disks["n1"] = (1, 7)  # an old copy, never marked: n1 never heard of epoch 3
    cluster.set._replica(0, "n1").refuse = True
    said = cluster.set._apply(cluster.set.placements, (Placement(0, "n0", "n1", 3),))
    assert "could not be placed" in said[0] and cluster.set.unsettled == {0}
    cluster.made["n1"].refuse = False
    cluster.set.nodes_changed(cluster.nodes("n1", "n2"))
    # n2, primed at epoch 2, holds what was acknowledged; n1 would have led from epoch 1's journal
    assert primary(cluster) == "n2" and cluster.set.unsettled == set()


def test_a_restarted_primary_s_backup_never_primed_is_not_promoted(cluster: Cluster) -> None:
    cluster.placed(Placement(0, "n0", "n1", 2), cluster.nodes("n0", "n1"))
    cluster.set.replicas[(0, "n1")][1].primed = False
    restarted = cluster.set.replicas[(0, "n0")]
    restarted[1].role = "idle"
    cluster.set.restarted(restarted[0])
    assert primary(cluster) == "n0" and cluster.set.placements[0].epoch == 3


def test_a_holder_back_from_a_power_cut_waits_for_the_node_of_its_backup(cluster: Cluster) -> None:
    cluster.placed(Placement(0, "n0", "n1", 3), cluster.nodes("n0", "n1", "n2"))
    cluster.set.nodes_changed(cluster.nodes("n2"))  # both lost: unavailable
    cluster.disks.update({"n0": (3, 40), "n1": (3, 44)})  # n0 lost what it had not synced
    said = cluster.set.nodes_changed(cluster.nodes("n0", "n2", back=("n0",)))
    assert any("waits for node(s) n1" in line for line in said), said
    assert cluster.made["n0"].role == "idle" and 0 in cluster.set.unsettled
    cluster.set.nodes_changed(cluster.nodes("n0", "n1", "n2", back=("n0", "n1")))
    assert primary(cluster) == "n1" and cluster.set.placements[0].epoch == 4 and cluster.set.unsettled == set()


# -- the partition manager: isolated steps, the reconcile loop, the drift check --------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_step_that_raises_is_said_and_does_not_stop_the_check(cluster: Cluster,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    manager = PartitionManager(cluster.set, Clock())

    def broken(nodes: Any) -> list[str]:
        raise RuntimeError("the journals could not be read")

    monkeypatch.setattr(cluster.set, "nodes_changed", broken)
    [event] = manager.follow_nodes(cluster.nodes("n0"))
    assert event.event == "cluster" and "the partitions' nodes step failed" in event.reason, event
    assert "RuntimeError: the journals could not be read" in event.reason


def test_a_waiting_partition_is_placed_again_with_a_backoff_and_said_once(cluster: Cluster,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    manager = PartitionManager(cluster.set, clock)
    cluster.placed(Placement(0, "n0", "n1", 3), cluster.nodes("n0", "n1", "n2"))
    cluster.set.nodes_changed(cluster.nodes("n2"))
    cluster.disks.update({"n0": (3, 40), "n1": (3, 44)})  # n0 lost what it had not synced
    cluster.set.nodes_changed(cluster.nodes("n0", "n2", back=("n0",)))  # it waits for n1
    tries: list[float] = []
    replan = cluster.set._replan
    monkeypatch.setattr(cluster.set, "_replan", lambda index: tries.append(clock.now) or replan(index))
    said = []
    for _ in range(40):  # 20 s of checks, every half second
        said += manager.settle(quiet=True)
        clock.now += 0.5
    # the first try a second on (nodes_changed has just tried), then after 2, 4, 8 s
    assert [t - 100 for t in tries] == [1.0, 3.0, 7.0, 15.0], tries
    assert [e.reason for e in said] == ["partition 0 waits for node(s) n1: no copy that is back may lead (one may "
                                        "have lost what it had not synced, which an absent node may hold)"], said
    cluster.set.nodes_changed(cluster.nodes("n0", "n1", "n2", back=("n0", "n1")))
    assert primary(cluster) == "n1" and manager.unplaced() == [] and manager.settle(quiet=False) == []


def test_a_replica_that_restarted_unseen_is_brought_back_by_the_drift_check(cluster: Cluster) -> None:
    clock = Clock()
    manager = PartitionManager(cluster.set, clock)
    cluster.placed(Placement(0, "n0", "n1", 2), cluster.nodes("n0", "n1", "n2"))
    backup = cluster.set.replicas[(0, "n1")][1]
    backup.role, backup.primed = "idle", False  # restarted; Liveness never saw it
    assert manager.settle(quiet=False) == []  # not yet: every DRIFT_EVERY seconds
    clock.now += replicas.DRIFT_EVERY
    # seen idle once: a restart Liveness reports meanwhile is its event, not the drift check's
    assert manager.settle(quiet=False) == [] and backup.role == "idle"
    clock.now += replicas.DRIFT_EVERY
    said = [e.reason for e in manager.settle(quiet=False)]
    assert said and "is idle where the partition map names it" in said[0], said
    assert backup.role == "backup" and cluster.set.placements[0] == Placement(0, "n0", "n1", 3)
