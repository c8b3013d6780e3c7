"""``canopy cluster kill-node`` / ``pause-node`` / ``add-node``: failures on demand,
for users who want to watch failover happen (and for the cluster tests).

* ``kill``: the node's raylet and every process it started get SIGKILL (see
  :mod:`actors.processes`) — a crash, not a graceful removal; Ray notices by
  its health checks and the controller fails the node's partitions over.
* ``pause``: the same processes get SIGSTOP, then SIGCONT after ``seconds``: a
  node that hangs. Paused past Ray's failure detector, it is declared dead and
  replaced; when it resumes, its raylet learns that and exits, and its old
  primaries can acknowledge nothing (fencing: their backups follow the new
  epoch's primary only).
* ``add``: a new simulated node (``--local-nodes`` only). canopy serve, which
  owns the simulated cluster, starts it when its next health check asks the
  controller for requests; naming a node that died starts it again on its data
  directory, so it rejoins with what it held.

* ``restart-gcs``: Ray's GCS (the head's control store: nodes, actors, names)
  is killed and started again ``seconds`` later, as when the head restarts
  (``--local-nodes`` clusters with ``gcs_redis_address`` only: the GCS reads its
  tables back from Redis, and every node, actor and client goes on; without
  Redis the cluster would be lost with its GCS). serve carries it out, like
  ``add``.

* ``kill-head``: the head node (Ray's GCS and every process on the head, canopy's
  controller included) is killed and started again ``seconds`` later (the same clusters
  as ``restart-gcs``; see :mod:`cluster.head`). The partitions, on the other nodes, serve
  throughout; the controller comes back on the new head and takes the instance over.

* ``partition``: the node is cut off from the other nodes (or from those named) for
  ``seconds``, both ways or one way, then healed; a node Ray declared dead meanwhile is
  started again under its name and rejoins (``--local-nodes`` clusters with
  ``node_namespaces``: each simulated node in a network namespace, see :mod:`cluster.netns`;
  serve carries it out). With ``delay_ms`` (1 to :data:`MAX_DELAY_MS`) that traffic is
  delayed by so many milliseconds instead of dropped (:mod:`cluster.delayline`).

Killing and pausing are refused on clusters not started with ``--local-nodes``
unless forced (they hit real machines' processes), and so is killing or pausing
the controller's own node (the head of an embedded Ray: without GCS fault
tolerance the instance stops with it).
"""

from __future__ import annotations

import os
import re
import socket
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from replication.nodes import Node, NodeError, check_name

ACTIONS = ("kill", "pause", "add", "restart-gcs", "kill-head", "partition")
#: which way a partition drops traffic: what the node sends and receives, only what it receives, only what it sends
DIRECTIONS = ("both", "in", "out")
#: a pause longer than this is refused (a forgotten node should come back)
MAX_PAUSE = 3600.0
#: the longest packet delay a ``partition`` with ``delay_ms`` makes
MAX_DELAY_MS = 10_000
#: the longest GCS outage ``restart-gcs`` makes (Ray's processes wait gcs_reconnect_timeout for it)
MAX_GCS_OUTAGE = 30.0
LAUNCH_TIMEOUT = 30.0


class NodeActionError(Exception):
    """Refused: ``code`` is the wire error code (picklable, for Ray to carry it back)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(code, message)
        self.code = code

    def __str__(self) -> str:
        return str(self.args[1])


@ray.remote(num_cpus=0, max_retries=0)
def _launch(action: str, seconds: float) -> dict[str, Any]:
    """Runs on the node: a Ray worker's parent process is its node's raylet."""
    from actors import processes

    raylet = os.getppid()
    return {"raylet_pid": raylet, "helper_pid": processes.launch(action, raylet, seconds),
            "host": socket.gethostname()}


class NodeControl:
    """The controller's part: checks a request against the cluster and carries it out."""

    def __init__(self, local_nodes: int, home_node: str | None, gcs_redis: bool = False,
                 gcs_reconnect_timeout: float = 60.0, namespaces: bool = False) -> None:
        self.local = local_nodes > 1
        self.namespaces = namespaces
        #: the partitions serve is to make (taken by :meth:`take_partitions`)
        self.partitions: list[dict[str, Any]] = []
        self.home_node = home_node
        self.gcs_redis = gcs_redis
        self.gcs_reconnect_timeout = gcs_reconnect_timeout
        #: names of nodes serve is to start (taken by :meth:`take_requests`)
        self.requested: list[str] = []
        #: the GCS outage serve is to make, in seconds (taken by :meth:`take_gcs_restart`)
        self.gcs_restart: float | None = None
        #: the head's outage serve is to make, in seconds (taken by :meth:`take_head_kill`)
        self.head_kill: float | None = None

    def act(self, action: str, name: str | None, seconds: float, force: bool, nodes: list[Node],
            options: dict[str, Any] | None = None) -> dict[str, Any]:
        if action not in ACTIONS:
            raise NodeActionError("INVALID_REQUEST", f"unknown node action {action!r} (one of {', '.join(ACTIONS)})")
        if action == "pause" and not 0 < seconds <= MAX_PAUSE:  # NaN fails every comparison
            raise NodeActionError(
                "INVALID_REQUEST", f"pause for more than 0 and at most {MAX_PAUSE:g} seconds, not {seconds:g}")
        if action == "add":
            return self._add(name, nodes)
        if action in ("restart-gcs", "kill-head"):
            return self._outage(action, seconds)
        if action == "partition":
            return self._partition(name, seconds, nodes, options or {})
        if name is None:
            raise NodeActionError("INVALID_REQUEST", f"{action}: which node?")
        alive = {n.name: n for n in nodes if n.alive}
        node = alive.get(name)
        if node is None:
            known = ", ".join(sorted(alive)) or "none"
            raise NodeActionError("NO_SUCH_NODE", f"no alive node named {name!r} (alive: {known})")
        if not self.local and not force:
            raise NodeActionError(
                "REFUSED",
                f"{action} node {name}: this cluster was not started with --local-nodes, so {name} is a real "
                "machine's Ray node; force it if you mean it",
            )
        if node.id == self.home_node and not force:
            raise NodeActionError(
                "REFUSED",
                f"{action} node {name}: it holds the controller and Ray's head; without GCS fault tolerance "
                "the instance stops with it; force it if you mean it",
            )
        strategy = NodeAffinitySchedulingStrategy(node.id, soft=False)
        done: dict[str, Any] = ray.get(
            _launch.options(scheduling_strategy=strategy).remote(action, seconds), timeout=LAUNCH_TIMEOUT
        )
        return {"node": name, "action": action, "seconds": seconds if action == "pause" else None, **done}

    def _add(self, name: str | None, nodes: list[Node]) -> dict[str, Any]:
        if not self.local:
            raise NodeActionError(
                "REFUSED", "add node: only a cluster started with --local-nodes starts nodes itself; on a real "
                "cluster start Ray on the new machine (ray start --address ...) and canopy uses it")
        alive = {n.name for n in nodes if n.alive} | set(self.requested)
        if name is None:
            taken = {int(m.group(1)) for n in nodes if (m := re.fullmatch(r"node-(\d+)", n.name))}
            taken |= {int(m.group(1)) for n in self.requested if (m := re.fullmatch(r"node-(\d+)", n))}
            name = f"node-{next(k for k in range(len(taken) + 1) if k not in taken)}"
        try:
            check_name(name)
        except NodeError as e:
            raise NodeActionError("INVALID_REQUEST", str(e)) from None
        if name in alive:
            raise NodeActionError("REFUSED", f"add node: a node named {name!r} is already up (or being started)")
        self.requested.append(name)
        rejoins = any(n.name == name for n in nodes)
        return {"node": name, "action": "add", "rejoins": rejoins}

    def _outage(self, action: str, seconds: float) -> dict[str, Any]:
        what = "restart GCS" if action == "restart-gcs" else "kill head"
        if not self.local:
            raise NodeActionError(
                "REFUSED", f"{what}: only a cluster started with --local-nodes restarts Ray's head itself; on a "
                "real cluster restart the head (`ray start --head` with the same $RAY_REDIS_ADDRESS)")
        if not self.gcs_redis:
            raise NodeActionError(
                "REFUSED", f"{what}: this cluster's GCS keeps its tables in memory only, so the whole cluster "
                "would be lost with it; start canopy with gcs_redis_address (a Redis server) for a GCS that restarts")
        limit = min(MAX_GCS_OUTAGE, self.gcs_reconnect_timeout / 2)
        if not 0 <= seconds <= limit:
            raise NodeActionError(
                "INVALID_REQUEST", f"{what}: an outage of 0 to {limit:g} s (half of gcs_reconnect_timeout, at "
                f"most {MAX_GCS_OUTAGE:g}), not {seconds:g}")
        if self.gcs_restart is not None or self.head_kill is not None:
            raise NodeActionError("REFUSED", f"{what}: a GCS restart or head kill is already asked for")
        if action == "restart-gcs":
            self.gcs_restart = seconds
        else:
            self.head_kill = seconds
        return {"node": None, "action": action, "seconds": seconds}

    def _partition(self, name: str | None, seconds: float, nodes: list[Node], options: dict[str, Any]) -> dict[str, Any]:
        if not self.local or not self.namespaces:
            raise NodeActionError(
                "REFUSED", "partition: only a cluster started with --local-nodes and --node-namespaces (each simulated "
                "node in a network namespace of its own) cuts nodes off; on a real network, cut it there")
        if not 0 < seconds <= MAX_PAUSE:  # NaN fails every comparison
            raise NodeActionError(
                "INVALID_REQUEST", f"partition for more than 0 and at most {MAX_PAUSE:g} seconds, not {seconds:g}")
        alive = sorted(n.name for n in nodes if n.alive)
        if name not in alive:
            raise NodeActionError("NO_SUCH_NODE", f"no alive node named {name!r} (alive: {', '.join(alive) or 'none'})")
        peers = options.get("peers")
        if peers is not None:
            if not peers or name in peers or any(p not in alive for p in peers):
                raise NodeActionError(
                    "INVALID_REQUEST", f"partition {name} from {', '.join(peers) or 'nothing'}: name other alive nodes "
                    f"(alive: {', '.join(alive)})")
            peers = sorted(set(peers))
        direction = options.get("direction") or "both"
        if direction not in DIRECTIONS:
            raise NodeActionError("INVALID_REQUEST", f"partition direction {direction!r}: one of {', '.join(DIRECTIONS)}")
        delay_ms = options.get("delay_ms")
        if delay_ms is not None and (isinstance(delay_ms, bool) or not isinstance(delay_ms, int)
                                     or not 1 <= delay_ms <= MAX_DELAY_MS):
            raise NodeActionError(
                "INVALID_REQUEST", f"partition {name}: options.delay_ms is a whole number of milliseconds from 1 to "
                f"{MAX_DELAY_MS}, or nil to drop the traffic; not {delay_ms!r}")
        cut = {"node": name, "peers": peers, "direction": direction, "seconds": seconds, "delay_ms": delay_ms}
        self.partitions.append(cut)
        return {"action": "partition", **cut}

    def take_partitions(self) -> list[dict[str, Any]]:
        out, self.partitions = self.partitions, []
        return out

    def take_head_kill(self) -> float | None:
        out, self.head_kill = self.head_kill, None
        return out

    def take_gcs_restart(self) -> float | None:
        out, self.gcs_restart = self.gcs_restart, None
        return out

    def take_requests(self) -> list[str]:
        out, self.requested = self.requested, []
        return out
