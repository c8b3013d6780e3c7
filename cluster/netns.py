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

A delay (:meth:`Network.delay`) is a delay line instead (:mod:`cluster.delayline`): a TUN device
``cnp<tag>d<k>`` (k: the delayed node's) in the delayed node's namespace and in each peer's, /32
routes into it for the delayed direction(s), and a process in the delayed node's namespace that
holds what it reads there for the asked time, then writes it into the TUN device of the
namespace that owns its destination. The devices and routes go with that process;
:meth:`Network.heal` stops it, and :func:`teardown` kills it with the namespace's other processes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import secrets
import selectors
import signal
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from cluster import delayline

PREFIX = "cnp"
SUBNET = "10.213"
#: node-k's address is SUBNET.X.(HOST_OFFSET + k); the bridge's is SUBNET.X.1
HOST_OFFSET = 10
CLONE_NEWNET = 0x40000000
DIRECTIONS = ("both", "in", "out")
#: how long a delay line may take to start (a Python interpreter, on a loaded machine)
DELAY_START_TIMEOUT = 30.0


class NetworkError(RuntimeError):
    """A namespace, link or rule could not be made; the message has the command's error."""


def _run(*command: str, namespace: str | None = None, stdin: str | None = None, check: bool = True) -> str:
    argv = ["ip", "netns", "exec", namespace, *command] if namespace else list(command)
    done = subprocess.run(argv, capture_output=True, text=True, input=stdin, timeout=30)
    if check and done.returncode != 0:
        raise NetworkError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


@dataclass(frozen=True)
class _Delay:
    """A running delay line and the routes into it: (namespace, destination, source address)."""

    process: subprocess.Popen[str]
    routes: tuple[tuple[str, str, str], ...]


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
        self.delays: dict[str, _Delay] = {}  # delayed node -> its delay line

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
        (every other node when None), or both; replaces a partition or delay it had."""
        if direction not in DIRECTIONS:
            raise NetworkError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
        others = sorted(self.address(p) for p in (peers if peers is not None else self.nodes) if p != node)
        if not others:
            raise NetworkError(f"cutting {node} off: no other node")
        self._stop_delay(node)
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

    def delay(self, node: str, peers: Iterable[str] | None = None, direction: str = "both", delay_ms: int = 100,
              queue_bytes: int = delayline.QUEUE_BYTES) -> None:
        """Hold what ``node`` sends to (``out``), or receives from (``in``), the nodes ``peers``
        (every other node when None), or both, ``delay_ms`` before it arrives, dropping what
        comes while ``queue_bytes`` are held; replaces a partition or delay it had. Its other
        traffic (clients', its own) goes as before. Refused when another node's delay already
        holds one of the same ways (both would route the same address)."""
        if direction not in DIRECTIONS:
            raise NetworkError(f"direction {direction!r}: one of {', '.join(DIRECTIONS)}")
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 1 or queue_bytes < 1:
            raise NetworkError(f"delaying {node}: a delay of at least 1 ms and a positive bound, not {delay_ms!r} ms "
                               f"and {queue_bytes!r} bytes")
        others = sorted(p for p in (peers if peers is not None else self.nodes) if p != node)
        if not others:
            raise NetworkError(f"delaying {node}: no other node")
        own = self.address(node)
        routes = ([(self.namespace(node), self.address(p), own) for p in others] if direction != "in" else []) + (
            [(self.namespace(p), own, self.address(p)) for p in others] if direction != "out" else [])
        held = {(ns, to): other for other, line in self.delays.items() if other != node for ns, to, _ in line.routes}
        for ns, to, _ in routes:
            if (ns, to) in held:
                raise NetworkError(f"delaying {node}: what {ns.removeprefix(self.name + '-')} sends to {to} is "
                                   f"delayed by {held[ns, to]}'s delay already; heal {held[ns, to]} first")
        self.heal(node)
        device = f"{self.name}d{index(node)}"
        fds: dict[str, int] = {}
        try:
            for end in [node, *others]:
                with self.entered(end) as address:  # /proc/sys/net is the calling thread's namespace's
                    fds[address] = delayline.open_tun(device)
                    # no reverse-path filtering there: a device without an address fails even the loose
                    # check, and the answers to what comes in by it may go out by eth0 (one way delayed)
                    Path("/proc/sys/net/ipv4/conf/all/rp_filter").write_text("0")
                    Path(f"/proc/sys/net/ipv4/conf/{device}/rp_filter").write_text("0")
                    with contextlib.suppress(OSError):  # no IPv6 chatter into the line
                        Path(f"/proc/sys/net/ipv6/conf/{device}/disable_ipv6").write_text("1")
                _run("ip", "-n", self.namespace(end), "link", "set", device, "mtu", str(delayline.MTU), "up")
            process = _start_delay_line(self.namespace(node), delayline.Spec(delay_ms, queue_bytes, fds))
        except OSError as e:
            raise NetworkError(f"delaying {node}: {e}") from e
        finally:
            for fd in fds.values():
                os.close(fd)  # the line holds them now: the devices go with it
        self.delays[node] = _Delay(process, tuple(routes))
        try:
            for ns, to, source in routes:
                _run("ip", "-n", ns, "route", "add", f"{to}/32", "dev", device, "src", source)
        except BaseException:
            self._stop_delay(node)
            raise

    def _stop_delay(self, node: str) -> delayline.Stats | None:
        line = self.delays.pop(node, None)
        if line is None:
            return None
        if line.process.poll() is None:
            line.process.send_signal(signal.SIGTERM)
        try:
            said, _ = line.process.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            line.process.kill()
            said, _ = line.process.communicate()
        last = (said or "").strip().splitlines()[-1:]
        try:
            return delayline.Stats.decode(last[0]) if last else None
        except (ValueError, TypeError, KeyError):
            return None

    def heal(self, node: str) -> delayline.Stats | None:
        """Undo :meth:`partition` or :meth:`delay` on ``node``; for a delay, say what it did."""
        _run("nft", "delete", "table", "inet", f"{self.name}cut", namespace=self.namespace(node), check=False)
        return self._stop_delay(node)

    def close(self) -> list[str]:
        for node in list(self.delays):
            self._stop_delay(node)
        return teardown(self.name)


def _start_delay_line(namespace: str, spec: delayline.Spec) -> subprocess.Popen[str]:
    """``python -m cluster.delayline`` in ``namespace`` (where :func:`teardown` finds it) on the
    spec's descriptors, once it said it reads them."""
    process = subprocess.Popen(
        ["ip", "netns", "exec", namespace, sys.executable, "-m", "cluster.delayline", spec.encode()],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, text=True, pass_fds=sorted(set(spec.devices.values())),
        cwd=Path(__file__).resolve().parent.parent)
    assert process.stdout is not None
    with selectors.DefaultSelector() as waiting:
        waiting.register(process.stdout, selectors.EVENT_READ)
        said = process.stdout.readline() if waiting.select(DELAY_START_TIMEOUT) else ""
    if '"ready"' not in said:
        process.kill()
        process.communicate()
        raise NetworkError(f"the delay line in {namespace} did not start (exit {process.returncode}; see its error above)")
    return process


def teardown(name: str) -> list[str]:
    """Remove the namespaces, links and tables named ``name`` (``cnp<tag>``), killing what still runs in
    the namespaces (delay lines too: their TUN devices and routes go with them); idempotent. Says
    what it removed."""
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
