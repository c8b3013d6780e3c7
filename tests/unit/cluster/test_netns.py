"""The simulated nodes' network namespaces (cluster/netns.py), without Ray: real namespaces, a
real bridge, real nftables rules and real delay lines (TUN devices), probed with TCP connections
and UDP datagrams made from inside each namespace (a socket belongs to the namespace its thread
was in when it was made)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from cluster import netns
from tests.conftest import wait_for

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

    def reached(node: str | None) -> None:
        """A connection gets through, within a deadline: a fresh namespace's first one waits for
        ARP, which a loaded machine can hold past one probe's half second."""
        wait_for(lambda: reaches(network, node, server), 10, f"a connection from {node or 'a client'} to node-1")

    with server:
        for node in ("node-2", "node-0", None):
            reached(node)
        # both ways, from everyone: the other nodes lose it, clients on the bridge do not
        network.partition("node-1")
        assert not reaches(network, "node-2", server) and not reaches(network, "node-0", server)
        reached(None)
        network.heal("node-1")
        reached("node-2")
        # one way: a connection needs both, so either direction cuts it
        for direction in ("in", "out"):
            network.partition("node-1", direction=direction)
            assert not reaches(network, "node-2", server), direction
            network.heal("node-1")
            reached("node-2")
        # from some peers only
        network.partition("node-1", peers=["node-2"])
        assert not reaches(network, "node-2", server)
        reached("node-0")
        with pytest.raises(netns.NetworkError, match="direction"):
            network.partition("node-1", direction="sideways")


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


# -- delays ----------------------------------------------------------------------------------------

DELAY_MS = 100


class Echo:
    """A TCP echo server in a node's namespace, a thread per connection."""

    def __init__(self, network: netns.Network, node: str) -> None:
        with network.entered(node) as address:
            self.server = socket.create_server((address, 0))
        self.address = self.server.getsockname()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._echo, args=(conn,), daemon=True).start()

    @staticmethod
    def _echo(conn: socket.socket) -> None:
        with conn:
            try:
                while data := conn.recv(65536):
                    conn.sendall(data)
            except OSError:
                pass

    def close(self) -> None:
        self.server.close()


def connect(network: netns.Network, node: str | None, echo: Echo) -> socket.socket:
    if node is None:
        conn = socket.socket()
    else:
        with network.entered(node):
            conn = socket.socket()
    conn.settimeout(5)
    conn.connect(echo.address)
    return conn


def round_trip(network: netns.Network, node: str | None, echo: Echo) -> float:
    """Seconds for a byte sent from ``node``'s namespace (None: the root namespace, the clients') to
    come back from ``echo``, on a connection of its own."""
    with connect(network, node, echo) as conn:
        start = time.monotonic()
        conn.sendall(b"x")
        assert conn.recv(1) == b"x"
        return time.monotonic() - start


def devices(network: netns.Network, node: str) -> list[str]:
    listed = subprocess.run(["ip", "-n", network.namespace(node), "-o", "link"], capture_output=True, text=True,
                            check=True).stdout
    return [line.split(":")[1].strip() for line in listed.splitlines() if f"{network.name}d" in line]


def routes(network: netns.Network, node: str) -> str:
    return subprocess.run(["ip", "-n", network.namespace(node), "route"], capture_output=True, text=True,
                          check=True).stdout


@pytest.mark.parametrize(("direction", "least"), [("both", 2 * DELAY_MS), ("in", DELAY_MS), ("out", DELAY_MS)])
def test_a_delay_holds_a_nodes_traffic_with_its_peers_and_goes(
        network: netns.Network, direction: str, least: int) -> None:
    for k in (0, 1, 2):
        network.add(f"node-{k}")
    echo = Echo(network, "node-1")
    try:
        plain = min(round_trip(network, "node-2", echo) for _ in range(3))
        assert plain < DELAY_MS / 4000, plain
        network.delay("node-1", peers=["node-2"], direction=direction, delay_ms=DELAY_MS)
        # never early: each probe's round trip is at least what the delay adds (one way or both)
        delayed = [round_trip(network, "node-2", echo) for _ in range(3)]
        print(f"[netns] round trip node-2 -> node-1 -> node-2: {plain * 1000:.2f} ms; with node-1's traffic "
              f"delayed {DELAY_MS} ms ({direction}): {', '.join(f'{d * 1000:.1f}' for d in delayed)} ms")
        assert min(delayed) >= least / 1000, (direction, delayed)
        # node-0 is no peer of the delay, and clients on the bridge never are
        assert round_trip(network, "node-0", echo) < DELAY_MS / 2000
        assert round_trip(network, None, echo) < DELAY_MS / 2000
        # TCP both ways through it, large packets too: a megabyte echoed back whole
        with connect(network, "node-2", echo) as conn:
            sent = os.urandom(1 << 20)
            conn.sendall(sent)
            back = bytearray()
            while len(back) < len(sent):
                back += conn.recv(1 << 20)
            assert back == sent
        assert devices(network, "node-1") == [f"{network.name}d1"] == devices(network, "node-2")
        assert not devices(network, "node-0")
        stats = network.heal("node-1")
        assert stats is not None and stats.forwarded > 0 and stats.dropped == 0, stats
        wait_for(lambda: round_trip(network, "node-2", echo) < DELAY_MS / 2000, 10, "the delay gone")
        assert not devices(network, "node-1") and not devices(network, "node-2")
        assert f"{network.name}d" not in routes(network, "node-1") + routes(network, "node-2")
        assert network.heal("node-1") is None  # nothing more to undo
    finally:
        echo.close()


def test_delays_replace_cuts_and_do_not_overlap(network: netns.Network) -> None:
    for k in (0, 1, 2):
        network.add(f"node-{k}")
    echo = Echo(network, "node-1")
    try:
        network.partition("node-1")
        network.delay("node-1", delay_ms=DELAY_MS)  # replaces the cut: node-2 reaches node-1, late
        assert round_trip(network, "node-2", echo) >= 2 * DELAY_MS / 1000
        # node-2's delay would route what node-2 sends to node-1 as node-1's delay does already
        with pytest.raises(netns.NetworkError, match="delayed by node-1's delay already; heal node-1 first"):
            network.delay("node-2", delay_ms=DELAY_MS)
        network.delay("node-2", peers=["node-0"], delay_ms=DELAY_MS)  # another pair of nodes: no overlap
        network.partition("node-1", peers=["node-0"])  # replaces node-1's delay
        assert not devices(network, "node-1") or devices(network, "node-1") == [f"{network.name}d2"]
        wait_for(lambda: round_trip(network, "node-2", echo) < DELAY_MS / 2000, 10, "node-1's delay gone")
        with pytest.raises(netns.NetworkError, match="at least 1 ms"):
            network.delay("node-1", delay_ms=0)
    finally:
        echo.close()


def test_a_full_delay_line_drops_and_counts_and_keeps_the_order(network: netns.Network) -> None:
    for k in (1, 2):
        network.add(f"node-{k}")
    with network.entered("node-2") as address:
        receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with network.entered("node-1"):
        sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    with receiver, sender:
        receiver.bind((address, 0))
        receiver.settimeout(5)
        # room for 9 datagrams of 1000 bytes (1028 with their IP and UDP headers), held long enough
        # that the 40 are in before the first leaves
        network.delay("node-1", direction="out", delay_ms=3 * DELAY_MS, queue_bytes=10_000)
        sent_at = time.monotonic()
        for n in range(40):
            sender.sendto(n.to_bytes(4, "big") + bytes(996), receiver.getsockname())
        got = [int.from_bytes(receiver.recv(2000)[:4], "big")]
        first = time.monotonic() - sent_at
        receiver.settimeout(0.05)
        while True:
            try:
                got.append(int.from_bytes(receiver.recv(2000)[:4], "big"))
            except TimeoutError:
                break
        stats = network.heal("node-1")
    assert stats is not None and first >= 3 * DELAY_MS / 1000, (first, stats)
    assert got == sorted(got) and len(got) == 9, got  # the first 9, in order; the rest dropped
    assert stats.dropped == 31 and stats.dropped_bytes == 31 * 1028 and stats.peak_bytes == 9 * 1028, stats
    assert stats.forwarded == 9 and stats.discarded == 0, stats


def test_a_delay_is_torn_down_when_its_serve_was_killed(tmp_path: Path) -> None:
    """What the watchdog does when serve died with a delay on: the delay line exits by itself
    (its parent is gone), and :func:`netns.teardown` removes the rest; a line still running
    (teardown before it noticed) is killed with its namespace's processes."""
    script = (
        "import sys, time\n"
        "from cluster import netns\n"
        "network = netns.Network.create()\n"
        "for k in (0, 1, 2): network.add(f'node-{k}')\n"
        "network.delay('node-1', delay_ms=50)\n"
        "network.delay('node-2', peers=['node-0'], delay_ms=50)\n"
        "print(network.name, network.delays['node-1'].process.pid, network.delays['node-2'].process.pid, flush=True)\n"
        "time.sleep(600)\n"
    )
    serve = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                             cwd=Path(netns.__file__).resolve().parent.parent)
    assert serve.stdout is not None
    try:
        name, first, second = serve.stdout.readline().split()
    finally:
        serve.send_signal(signal.SIGKILL)
        serve.wait()
        serve.stdout.close()

    def gone(pid: str) -> bool:
        try:
            return Path(f"/proc/{pid}/status").read_text().split("State:")[1].split()[0] in ("Z", "X")
        except (FileNotFoundError, ProcessLookupError):
            return True

    lines = [first, second]
    try:
        assert all(not gone(pid) for pid in lines) and first != second
        os.kill(int(second), signal.SIGSTOP)  # one that cannot notice: teardown must kill it
        wait_for(lambda: gone(first), 10, "the delay line to exit once its parent was killed")
        assert not gone(second)
        removed = netns.teardown(name)
        assert any("node-2 (1 processes killed)" in line for line in removed), removed
        wait_for(lambda: gone(second), 10, "teardown to kill the stopped delay line")
    finally:
        netns.teardown(name)
    listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert name not in listed and name not in links
