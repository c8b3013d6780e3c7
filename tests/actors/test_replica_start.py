"""A node that leaves while the partitions start: :meth:`ReplicaSet.start` reads every node's
journals with a task held to that node; when Ray listed a node alive that is gone before its
task runs (a restarted cluster's worker can register once more and leave), start places
nothing and says so (:class:`NodeLeft`), and the controller reads the nodes again."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any

import pytest

from actors.cluster import RayCluster
from actors.replicas import NodeLeft, ReplicaSet
from cluster.config import InstanceConfig
from replication.nodes import alive_by_name, from_ray


def test_a_node_gone_before_its_journals_are_read_places_nothing(ray_node: Any, tmp_path: Path) -> None:
    alive = list(alive_by_name(from_ray(ray_node.nodes())).values())
    assert len(alive) == 1, alive
    ghost = alive[0]._replace(name="ghost", id=secrets.token_hex(28), head=False)
    # no history export process and no journal read-back: the test only places replicas
    config = InstanceConfig(data_dir=str(tmp_path), history_export_ms=0, journal_scrub_ms=0)
    replicas = ReplicaSet(config, 2, RayCluster(config))
    with pytest.raises(NodeLeft, match="left while the journals were read"):
        replicas.start({alive[0].name: alive[0], ghost.name: ghost})
    assert replicas.placements == () and replicas.replicas == {} and replicas.nodes == {}
