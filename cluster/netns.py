"""A network namespace per simulated node (``canopy serve --local-nodes N --node-namespaces``),
so that ``canopy cluster partition`` can cut nodes off each other as a network would.

The layout, all made by serve and removed when it stops (root only; every name starts with
``cnp`` and the instance's tag, so :func:`teardown` finds what a killed serve left)::

    root namespace     bridge cnp<tag>br = 10.213.X.1/24: the clients' way in (gateway URLs)
    netns cnp<tag>-node-k   eth0 = 10.213.X.(10 + k)/24, the peer of veth cnp<tag>v<k> on the bridge

node-0, the head, has a namespace too: Ray binds its GCS, raylets and workers' gRPC servers
on every address of their namespace when the node's address is not loopback, so nothing of
the instance listens in the root namespace but through the bridge. The namespaces have no
default route (they reach the bridge's subnet and their own loopback only), and a table of
the root namespace (``inet cnp<tag>g``) drops what another interface sends to the subnet and
every packet routed into or out of the bridge.

A process is put in a namespace by the thread that starts it: :func:`Network.entered` moves
the calling thread there for a block (``setns``; Ray's ``Node`` must be made on the main
thread, and its raylet dies with the thread that forked it, so no helper thread).

A partition is a table (``inet cnp<tag>cut``) in the cut node's namespace that drops what it
sends to, or receives from, the given peers (every other node by default; clients on the
bridge address still reach it, as clients of a minority side would): both ways, or one way.
:meth:`Network.heal` deletes it.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import subprocess
from collections.abc import Iterable, Iterator

PREFIX = "cnp"
SUBNET = "10.213"
#: node-k's address is SUBNET.X.(HOST_OFFSET + k); the bridge's is SUBNET.X.1
HOST_OFFSET = 10
CLONE_NEWNET = 0x40000000
DIRECTIONS = ("both", "in", "out")


class NetworkError(RuntimeError):
    """A namespace, link or rule could not be made; the message has the command's error."""


def _run(*command: str, namespace: str | None = None, stdin: str | None = None, check: bool = True) -> str:
    argv = ["ip", "netns", "exec", namespace, *command] if namespace else list(command)
    done = subprocess.run(argv, capture_output=True, text=True, input=stdin, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _setns(path: str) -> None:
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:
            e = ctypes.get_errno()
            raise NetworkError(f"setns({path}): {os.strerror(e)}")
    finally:
        os.close(fd)


def index(node: str) -> int:
    """k of ``node-k`` (the simulated nodes' names)."""
    found = re.fullmatch(r"node-(\d+)", node)
    if found is None or int(found.group(1)) > 200:
        raise NetworkError(f"{node!r}: simulated nodes in namespaces are named node-0 ... node-200")
    return int(found.group(1))


def namespaces() -> list[str]:
    return [line.split()[0] for line in _run("ip", "netns", "list", check=False).splitlines() if line.strip()]


class Network:
    """One instance's bridge and namespaces."""

    def __init__(self, tag: str, subnet: int) -> None:
        self.tag = tag
        self.subnet = subnet
        self.name = f"{PREFIX}{tag}"
        self.bridge = f"{self.name}br"
        self.nodes: dict[str, str] = {}  # name -> address

    @classmethod
    def create(cls) -> Network:
        """A bridge on a /24 of 10.213.0.0/16 that no address of this machine is in."""
        if os.geteuid() != 0:
            raise NetworkError("node_namespaces makes network namespaces and a bridge: run canopy serve as root")
        used = set(re.findall(rf"inet {re.escape(SUBNET)}\.(\d+)\.", _run("ip", "-o", "-4", "addr", "show")))
        free = [x for x in range(1, 255) if str(x) not in used]
        if not free:
            raise NetworkError(f"no free /24 left in {SUBNET}.0.0/16 for the simulated nodes")
        network = cls(secrets.token_hex(2), free[secrets.randbelow(len(free))])
        try:
            network._make_bridge()
        except BaseException:
            network.close()
            raise
        return network

    @property
    def client_address(self) -> str:
        """The root namespace's address on the bridge (where clients come from)."""
        return f"{SUBNET}.{self.subnet}.1"

    def address(self, node: str) -> str:
        return f"{SUBNET}.{self.subnet}.{HOST_OFFSET + index(node)}"

    def namespace(self, node: str) -> str:
        return f"{self.name}-{node}"

    def _make_bridge(self) -> None:
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.client_address}/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        net = f"{SUBNET}.{self.subnet}.0/24"
        _run("nft", "-f", "-", stdin=f"""
table inet {self.name}g {{
  chain input {{ type filter hook input priority 0; policy accept;
    iifname != {{ "lo", "{self.bridge}" }} ip daddr {net} drop
  }}
  chain forward {{ type filter hook forward priority 0; policy accept;
    iifname "{self.bridge}" oifname != "{self.bridge}" drop
    oifname "{self.bridge}" iifname != "{self.bridge}" drop
  }}
}}
""")

    def add(self, node: str) -> str:
        """Make ``node``'s namespace (again: a node started anew under its name keeps it); return
        its address."""
        k, namespace = index(node), self.namespace(node)
        address = self.address(node)
        if namespace not in namespaces():
            _run("ip", "netns", "add", namespace)
            veth, peer = f"{self.name}v{k}", f"{self.name}p{k}"
            _run("ip", "link", "add", veth, "type", "veth", "peer", "name", peer)
            _run("ip", "link", "set", peer, "netns", namespace)
            _run("ip", "-n", namespace, "link", "set", peer, "name", "eth0")
            _run("ip", "-n", namespace, "addr", "add", f"{address}/24", "dev", "eth0")
            _run("ip", "-n", namespace, "link", "set", "lo", "up")
            _run("ip", "-n", namespace, "link", "set", "eth0", "up")
            _run("ip", "link", "set", veth, "master", self.bridge, "up")
        self.nodes[node] = address
        return address

    @contextlib.contextmanager
    def entered(self, node: str) -> Iterator[str]:
        """The calling thread in ``node``'s namespace for the block (what it starts is born
        there), back in its own after; yields the node's address."""
        home = os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            _setns(f"/run/netns/{self.namespace(node)}")
            try:
                yield self.address(node)
            finally:
                if ctypes.CDLL("libc.so.6", use_errno=True).setns(home, CLONE_NEWNET) != 0:
                    raise NetworkError(f"setns back from {self.namespace(node)}: {os.strerror(ctypes.get_errno())}")
        finally:
            os.close(home)

    def partition(self, node: str, peers: Iterable[str] | None = None, direction: str = "both") -> None:
        """Drop what ``node`` sends to (``out``), or receives from (``in``), the nodes ``peers``
        (every other node when None), or both; replaces a partition it had."""
        if direction not in DIRECTIONS:
            raise NetworkError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
        others = sorted(self.address(p) for p in (peers if peers is not None else self.nodes) if p != node)
        if not others:
            raise NetworkError(f"cutting {node} off: no other node")
        group = "{ " + ", ".join(others) + " }"
        receive = f"ip saddr {group} drop" if direction in ("both", "in") else ""
        send = f"ip daddr {group} drop" if direction in ("both", "out") else ""
        _run("nft", "-f", "-", namespace=self.namespace(node), stdin=f"""
table inet {self.name}cut {{}}
delete table inet {self.name}cut
table inet {self.name}cut {{
  chain input {{ type filter hook input priority -10; policy accept;
    {receive}
  }}
  chain output {{ type filter hook output priority -10; policy accept;
    {send}
  }}
}}
""")

    def heal(self, node: str) -> None:
        """Undo :meth:`partition` on ``node``."""
        _run("nft", "delete", "table", "inet", f"{self.name}cut", namespace=self.namespace(node), check=False)

    def close(self) -> list[str]:
        return teardown(self.name)


def teardown(name: str) -> list[str]:
    """Remove the namespaces, links and tables named ``name`` (``cnp<tag>``), killing what still runs in
    the namespaces; idempotent. Says what it removed."""
    done = []
    for namespace in namespaces():
        if not namespace.startswith(f"{name}-"):
            continue
        pids = [int(p) for p in _run("ip", "netns", "pids", namespace, check=False).split()]
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, 9)
        # the veth now, with its peer (a namespace's devices go some time after `netns del`)
        _run("ip", "-n", namespace, "link", "del", "eth0", check=False)
        _run("ip", "netns", "del", namespace, check=False)
        done.append(namespace + (f" ({len(pids)} processes killed)" if pids else ""))
    for line in _run("ip", "-o", "link", "show", check=False).splitlines():
        link = line.split(":")[1].strip().split("@")[0]
        if link.startswith(name):
            _run("ip", "link", "del", link, check=False)
            done.append(link)
    if _run("nft", "list", "table", "inet", f"{name}g", check=False):
        _run("nft", "delete", "table", "inet", f"{name}g", check=False)
        done.append(f"inet {name}g")
    return done
