"""Where a new gateway listens: a rejoining node gets its old port back."""

from __future__ import annotations

from actors.controller import gateway_port


def gw(port: int, lost: bool = False) -> dict[str, object]:
    return {"url": f"ws://127.0.0.1:{port}", "lost": lost}


def test_a_node_that_rejoins_gets_its_gateways_port_back() -> None:
    info, nodes = [gw(8080), gw(8081, lost=True), gw(8082)], ["node-0", "node-1", "node-2"]
    assert gateway_port(8080, info, nodes, "node-1") == 8081


def test_a_new_node_takes_a_port_no_gateway_ever_had() -> None:
    info, nodes = [gw(8080), gw(8081, lost=True), gw(8082)], ["node-0", "node-1", "node-2"]
    assert gateway_port(8080, info, nodes, "node-3") == 8083  # not node-1's: it may come back


def test_the_newest_lost_gateway_of_the_node_counts_and_a_taken_port_is_never_given_twice() -> None:
    info = [gw(8080), gw(8081, lost=True), gw(8082), gw(8083, lost=True)]
    nodes = ["node-0", "node-1", "node-2", "node-1"]
    assert gateway_port(8080, info, nodes, "node-1") == 8083
    info = [gw(8080), gw(8081, lost=True), gw(8081)]  # node-1's port is served by node-2 now
    assert gateway_port(8080, info, ["node-0", "node-1", "node-2"], "node-1") == 8082


def test_port_zero_and_unknown_urls() -> None:
    assert gateway_port(0, [gw(40000)], ["node-0"], "node-1") == 0
    info = [gw(8080), {"url": None, "lost": True}]  # a gateway the restarted controller could not reach
    assert gateway_port(8080, info, ["node-0", ""], "node-1") == 8081


def test_same_port_on_every_node_when_nodes_have_addresses_of_their_own() -> None:
    info = [{"url": "ws://10.0.0.1:8080"}, {"url": "ws://10.0.0.2:8080", "lost": True}]
    assert gateway_port(8080, info, ["a", "b"], "c", same=True) == 8080
    assert gateway_port(0, info, ["a", "b"], "c", same=True) == 0
