"""The simulated nodes' network namespaces (cluster/netns.py), without Ray: real namespaces, a
real bridge and real nftables rules, probed with TCP connections made from inside each namespace
(a socket belongs to the namespace its thread was in when it was made)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
from collections.abc import Iterator

import pytest

from cluster import netns

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("nft") is None or shutil.which("ip") is None,
    reason="NETWORK NAMESPACES NEED ROOT AND iproute2 + nftables (apt-get install iproute2 nftables)")


@pytest.fixture
def network() -> Iterator[netns.Network]:
    made = netns.Network.create()
    try:
        yield made
    finally:
        made.close()


def listen(network: netns.Network, node: str) -> socket.socket:
    with network.entered(node) as address:
        server = socket.create_server((address, 0))
    server.settimeout(5)
    return server


def reaches(network: netns.Network, node: str | None, server: socket.socket) -> bool:
    """Whether a connection from ``node``'s namespace (None: the root namespace, the clients')
    to ``server`` is accepted within half a second."""
    if node is None:
        conn = socket.socket()
    else:
        with network.entered(node):
            conn = socket.socket()
    conn.settimeout(0.5)
    with conn:
        try:
            conn.connect(server.getsockname())
        except OSError:
            return False
        server.accept()[0].close()
        return True


def test_nodes_reach_each_other_until_cut_off_and_clients_always(network: netns.Network) -> None:
    for k in (0, 1, 2):
        assert network.add(f"node-{k}") == f"10.213.{network.subnet}.{10 + k}"
    server = listen(network, "node-1")
    assert reaches(network, "node-2", server) and reaches(network, "node-0", server) and reaches(network, None, server)
    # both ways, from everyone: the other nodes lose it, clients on the bridge do not
    network.partition("node-1")
    assert not reaches(network, "node-2", server) and not reaches(network, "node-0", server)
    assert reaches(network, None, server)
    network.heal("node-1")
    assert reaches(network, "node-2", server)
    # one way: a connection needs both, so either direction cuts it
    for direction in ("in", "out"):
        network.partition("node-1", direction=direction)
        assert not reaches(network, "node-2", server), direction
        network.heal("node-1")
    # from some peers only
    network.partition("node-1", peers=["node-2"])
    assert not reaches(network, "node-2", server) and reaches(network, "node-0", server)
    with pytest.raises(netns.NetworkError, match="direction"):
        network.partition("node-1", direction="sideways")
    server.close()


def test_the_network_goes_whole_and_is_private(network: netns.Network) -> None:
    network.add("node-1")
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    assert network.namespace("node-1") in listed
    # a namespace reaches its subnet only: no default route out
    with network.entered("node-1"):
        conn = socket.socket()
    with conn, pytest.raises(OSError):
        conn.settimeout(0.5)
        conn.connect(("192.0.2.1", 9))
    removed = network.close()
    assert any(network.namespace("node-1") in line for line in removed), removed
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert network.name not in listed and network.name not in links
    assert network.close() == []  # again: nothing left


def test_names_outside_the_simulated_ones_are_refused() -> None:
    with pytest.raises(netns.NetworkError, match="node-0 ... node-200"):
        netns.index("eu-1")
