"""Stable node names out of ``ray.nodes()``."""

from __future__ import annotations

from pathlib import Path

import pytest

from replication.nodes import (
    HEAD_RESOURCE,
    LABEL,
    NodeError,
    alive_by_name,
    check_name,
    from_ray,
    head_of,
    node_data_dir,
)


def entry(
    node_id: str, address: str, alive: bool = True, label: str | None = None, head: bool = False
) -> dict[str, object]:
    resources = {"CPU": 2.0, f"node:{address}": 1.0, **({HEAD_RESOURCE: 1.0} if head else {})}
    return {"NodeID": node_id, "NodeManagerAddress": address, "Alive": alive,
            "Labels": {LABEL: label} if label else {}, "Resources": resources}


def test_a_labelled_node_is_named_by_its_label_and_keeps_the_name_across_restarts() -> None:
    nodes = from_ray([entry("aa", "10.0.0.1", False, "eu-1"), entry("bb", "10.0.0.1", True, "eu-1")])
    assert [(n.name, n.id, n.alive) for n in nodes] == [("eu-1", "bb", True), ("eu-1", "aa", False)]
    assert alive_by_name(nodes)["eu-1"].id == "bb"


def test_an_unlabelled_node_is_named_by_its_address() -> None:
    nodes = from_ray([entry("aa", "10.0.0.1"), entry("bb", "10.0.0.2")])
    assert sorted(alive_by_name(nodes)) == ["10.0.0.1", "10.0.0.2"]
    assert all(not n.labelled for n in nodes)


def test_two_unlabelled_nodes_on_one_address_are_told_apart() -> None:
    nodes = from_ray([entry("aaaaaaaa11", "127.0.0.1"), entry("bbbbbbbb22", "127.0.0.1")])
    assert sorted(alive_by_name(nodes)) == ["127.0.0.1-aaaaaaaa", "127.0.0.1-bbbbbbbb"]


def test_a_node_s_data_directory() -> None:
    nodes = alive_by_name(from_ray([entry("aa", "10.0.0.1", label="node-1"), entry("bb", "10.0.0.2")]))
    labelled, plain = nodes["node-1"], nodes["10.0.0.2"]
    assert labelled.data_dir("/data") == str(Path("/data/nodes/node-1"))
    assert plain.data_dir("/data") == "/data"
    assert node_data_dir("/data", None) == "/data"


def test_the_head_is_the_node_with_ray_s_head_resource() -> None:
    nodes = from_ray([entry("aa", "10.0.0.1", label="node-1"), entry("bb", "10.0.0.2", label="node-0", head=True),
                      {"NodeID": "cc", "NodeManagerAddress": "10.0.0.3", "Alive": False}])  # a dead one: no resources
    assert [(n.name, n.head) for n in nodes] == [("10.0.0.3", False), ("node-0", True), ("node-1", False)]
    assert head_of(nodes) == "node-0"
    assert head_of([n._replace(alive=False) if n.head else n for n in nodes]) is None  # only an alive head counts


@pytest.mark.parametrize("bad", ["", "../x", "a/b", "-x", "x" * 64, "a b"])
def test_a_label_that_cannot_name_a_directory_is_refused(bad: str) -> None:
    with pytest.raises(NodeError, match="node name"):
        check_name(bad)
    with pytest.raises(NodeError):
        from_ray([entry("aa", "10.0.0.1", label=bad)]) if bad else check_name(bad)
