"""ReplicaSet's safeguards (actors/replicas.py), driven without Ray: replicas, journals and
``ray.get`` are fakes, so what is checked is which replica the controller asks to lead.

The decisions are :mod:`replication.placement`'s (tested there); these check that
``ReplicaSet`` asks them where it would otherwise promote a backup or let a copy lead."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from actors import replicas
from actors.replicas import ReplicaSet
from replication.nodes import Node
from replication.placement import Placement


class Refused(Exception):
    pass


class Ref:
    """What a call answered (an exception: what it raised), for ``ray.get``."""

    def __init__(self, value: Any) -> None:
        self.value = value


class Method:
    def __init__(self, call: Any) -> None:
        self.call = call

    def remote(self, *args: Any) -> Ref:
        try:
            return Ref(self.call(*args))
        except Exception as e:
            return Ref(e)


class FakeReplica:
    """A replica as the controller sees it: its role, epoch and journal (``sequence``)."""

    def __init__(self, node: str, epoch: int = 0, sequence: int = 0, role: str = "idle", primed: bool = False) -> None:
        self.node, self.epoch, self.sequence, self.role, self.primed = node, epoch, sequence, role, primed
        self.refuse = False
        self.become_backup = Method(self._become_backup)
        self.become_primary = Method(self._become_primary)
        self.position = Method(self._position)

    def _become_backup(self, epoch: int) -> dict[str, Any]:
        if self.refuse:
            raise Refused(f"{self.node} is out of reach")
        self.role, self.primed = "backup", False
        return {"host": self.node, "port": 1}

    def _become_primary(self, epoch: int, backup: Any) -> dict[str, Any]:
        if self.role == "backup" and not self.primed:
            raise Refused(f"{self.node}'s backup was never primed")
        self.role, self.epoch = "primary", epoch
        return self._position()

    def _position(self) -> dict[str, Any]:
        return {"role": self.role, "epoch": self.epoch, "primed": self.primed, "caught_up": False,
                "sequence": self.sequence, "since": 0, "handing_over": False, "damaged": False,
                "address": self.node, "backup": None}


class Cluster:
    """The fakes: a replica per (partition, node), made on demand as ``ReplicaSet._replica``
    would (a new process recovers its node's journal: ``disks``)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.disks: dict[str, tuple[int, int]] = {}  # node -> what partition 0's journal there holds
        self.made: dict[str, FakeReplica] = {}

        def get(ref: Any, timeout: float | None = None) -> Any:
            if isinstance(ref, list):
                return [get(r) for r in ref]
            if isinstance(ref.value, Exception):
                raise ref.value
            return ref.value

        fake_ray = SimpleNamespace(get=get, wait=lambda refs, num_returns, timeout: (refs, []), kill=lambda *a, **k: None)
        monkeypatch.setattr(replicas, "ray", fake_ray)
        monkeypatch.setattr(replicas, "_held_of_task", SimpleNamespace(options=lambda **_: SimpleNamespace(
            remote=lambda directory, index: Ref(self.disks.get(directory.rpartition("/")[2])))))
        monkeypatch.setattr(replicas, "NodeAffinitySchedulingStrategy", lambda *a, **k: None)
        cluster = self

        class Set(ReplicaSet):
            def _replica(self, index: int, node: str) -> Any:
                found = self.replicas.get((index, node))
                if found is not None and found[0] not in self.dead:
                    return found[1]
                epoch, sequence = cluster.disks.get(node, (0, 0))
                replica = cluster.made[node] = FakeReplica(node, epoch, sequence)
                self._made += 1
                self.replicas[(index, node)] = (f"partition-{index}@{node}#{self._made}", replica)
                return replica

        self.set = Set({"data_dir": "/data"}, 1)

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
def cluster(monkeypatch: pytest.MonkeyPatch) -> Cluster:
    return Cluster(monkeypatch)


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
