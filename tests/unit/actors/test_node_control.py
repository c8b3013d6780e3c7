"""What ``canopy cluster kill-node`` / ``pause-node`` / ``add-node`` refuse, and how
added nodes are named (the signals themselves: tests/cluster/test_failover.py)."""

from __future__ import annotations

import pytest

from actors.node_control import NodeActionError, NodeControl
from replication.nodes import Node


def node(name: str, alive: bool = True) -> Node:
    return Node(name, f"id-{name}-{alive}", "127.0.0.1", alive, True)


NODES = [node("node-0"), node("node-1", alive=False), node("node-1"), node("node-2", alive=False)]


def refused(control: NodeControl, *args: object) -> NodeActionError:
    with pytest.raises(NodeActionError) as caught:
        control.act(*args)  # type: ignore[arg-type]
    return caught.value


def test_kill_and_pause_are_refused_unless_the_cluster_is_local_or_it_is_forced() -> None:
    real = NodeControl(1, home_node="id-node-0-True")
    error = refused(real, "kill", "node-1", 0.0, False, NODES)
    assert error.code == "REFUSED" and "--local-nodes" in str(error)
    assert refused(real, "add", None, 0.0, False, NODES).code == "REFUSED"


def test_the_controllers_node_needs_force() -> None:
    local = NodeControl(3, home_node="id-node-0-True")
    error = refused(local, "pause", "node-0", 5.0, False, NODES)
    assert error.code == "REFUSED" and "controller" in str(error)


def test_unknown_or_dead_nodes_bad_pauses_and_actions() -> None:
    local = NodeControl(3, home_node="id-node-0-True")
    assert refused(local, "kill", "node-2", 0.0, False, NODES).code == "NO_SUCH_NODE"  # dead
    assert refused(local, "kill", "node-9", 0.0, False, NODES).code == "NO_SUCH_NODE"
    assert refused(local, "pause", "node-1", 0.0, False, NODES).code == "INVALID_REQUEST"
    assert refused(local, "pause", "node-1", 7200.0, False, NODES).code == "INVALID_REQUEST"
    assert refused(local, "kill", None, 0.0, False, NODES).code == "INVALID_REQUEST"
    assert refused(local, "reboot", "node-1", 0.0, False, NODES).code == "INVALID_REQUEST"


def test_added_nodes_get_the_next_free_name_or_rejoin_under_a_dead_ones() -> None:
    local = NodeControl(3, home_node="id-node-0-True")
    assert local.act("add", None, 0.0, False, NODES) == {"node": "node-3", "action": "add", "rejoins": False}
    assert local.act("add", None, 0.0, False, NODES)["node"] == "node-4"  # node-3 is being started
    assert local.act("add", "node-2", 0.0, False, NODES) == {"node": "node-2", "action": "add", "rejoins": True}
    assert refused(local, "add", "node-1", 0.0, False, NODES).code == "REFUSED"  # up
    assert refused(local, "add", "node-2", 0.0, False, NODES).code == "REFUSED"  # being started
    assert refused(local, "add", "../x", 0.0, False, NODES).code == "INVALID_REQUEST"
    assert local.take_requests() == ["node-3", "node-4", "node-2"] and local.take_requests() == []


def test_the_error_crosses_process_boundaries_with_its_code() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(NodeActionError("REFUSED", "why")))
    assert error.code == "REFUSED" and str(error) == "why"


def test_a_partition_is_checked_before_serve_is_asked() -> None:
    nodes = [node("node-0"), node("node-1"), node("node-2"), node("node-3", alive=False)]
    flat = NodeControl(3, None)  # no network namespaces: nothing to cut
    without = refused(flat, "partition", "node-1", 5.0, False, nodes)
    assert without.code == "REFUSED" and "--node-namespaces" in str(without)
    control = NodeControl(3, None, namespaces=True)
    for seconds in (0.0, -1.0, float("nan"), 3601.0):
        assert refused(control, "partition", "node-1", seconds, False, nodes).code == "INVALID_REQUEST"
    assert refused(control, "partition", "node-3", 5.0, False, nodes).code == "NO_SUCH_NODE"  # dead
    assert refused(control, "partition", None, 5.0, False, nodes).code == "NO_SUCH_NODE"
    for peers in ([], ["node-1"], ["node-3"], ["eu-1"]):  # none, itself, a dead one, an unknown one
        assert refused(control, "partition", "node-1", 5.0, False, nodes, {"peers": peers}).code == "INVALID_REQUEST"
    with pytest.raises(NodeActionError, match="direction 'sideways'"):
        control.act("partition", "node-1", 5.0, False, nodes, {"direction": "sideways"})
    assert control.take_partitions() == []  # nothing refused was queued
    done = control.act("partition", "node-1", 5.0, False, nodes, {"peers": ["node-2", "node-2"], "direction": "out"})
    assert done == {"action": "partition", "node": "node-1", "peers": ["node-2"], "direction": "out", "seconds": 5.0,
                    "delay_ms": None}
    control.act("partition", "node-2", 2.0, False, nodes)
    assert [c["node"] for c in control.take_partitions()] == ["node-1", "node-2"] and control.take_partitions() == []


def test_a_delay_is_whole_milliseconds_within_bounds() -> None:
    nodes = [node("node-0"), node("node-1"), node("node-2")]
    control = NodeControl(3, None, namespaces=True)
    for bad in (0, -5, 10_001, 1.5, 200.0, True, "200", [200]):
        error = refused(control, "partition", "node-1", 5.0, False, nodes, {"delay_ms": bad})
        assert error.code == "INVALID_REQUEST", bad
        # what is wrong and where: the option, its bounds, the value given
        assert "partition node-1: options.delay_ms is a whole number of milliseconds from 1 to 10000" in str(error)
        assert str(error).endswith(f"not {bad!r}"), str(error)
    assert control.take_partitions() == []
    for ms in (1, 200, 10_000):
        done = control.act("partition", "node-1", 8.0, False, nodes, {"delay_ms": ms, "direction": "in"})
        assert done["delay_ms"] == ms and done["direction"] == "in"
    assert [c["delay_ms"] for c in control.take_partitions()] == [1, 200, 10_000]
    # a cut is a partition without a delay
    assert control.act("partition", "node-1", 8.0, False, nodes, {"delay_ms": None})["delay_ms"] is None
