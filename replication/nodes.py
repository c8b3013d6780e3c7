"""Nodes by stable names, and each node's data directory.

Ray names a node by an id that changes every time the node starts, but a
partition's journal stays on the disk of the node that wrote it; so canopy
names nodes by something that survives a restart:

* the node's ``canopy-node`` label when it has one (``ray start
  --labels='{"canopy-node": "eu-1"}'``; ``canopy serve --local-nodes N``
  labels its simulated nodes ``node-0`` ... ``node-<N-1>``);
* otherwise its address (one canopy node per machine is the usual cluster).

Two unlabelled Ray nodes on one address get the address plus the start of
their Ray id, which does not survive a restart: label them.

Ray's head node (the one whose ``ray.nodes()`` entry has the resource
:data:`HEAD_RESOURCE`) is marked :attr:`Node.head`: it holds no partition
replica while enough other nodes are alive (:mod:`replication.placement`).

A node's data directory is ``<data_dir>/nodes/<name>`` for a labelled node
(simulated nodes share one disk) and ``<data_dir>`` itself otherwise (the
embedded single node, or one machine of a real cluster).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NamedTuple

LABEL = "canopy-node"
#: the resource Ray gives its head node, and no other
HEAD_RESOURCE = "node:__internal_head__"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


class NodeError(ValueError):
    pass


class Node(NamedTuple):
    name: str
    id: str  # Ray's node id (hex), for scheduling
    address: str
    alive: bool
    labelled: bool
    head: bool = False  # Ray's head node

    def data_dir(self, data_dir: str | Path) -> str:
        return node_data_dir(data_dir, self.name if self.labelled else None)


def check_name(name: str) -> str:
    if not _NAME.fullmatch(name):
        raise NodeError(
            f"node name {name!r}: 1 to 63 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def node_data_dir(data_dir: str | Path, label: str | None) -> str:
    return str(Path(data_dir) / "nodes" / check_name(label)) if label is not None else str(data_dir)


def from_ray(entries: list[dict[str, Any]]) -> list[Node]:
    """Canopy's view of ``ray.nodes()`` (plain dicts): every node with its name, alive or not,
    the newest entry per name first (a restarted node appears twice, dead and alive)."""
    plain = Counter(
        str(e.get("NodeManagerAddress", "")) for e in entries if not (e.get("Labels") or {}).get(LABEL) and e.get("Alive")
    )
    nodes: list[Node] = []
    for e in entries:
        label = (e.get("Labels") or {}).get(LABEL)
        address = str(e.get("NodeManagerAddress", ""))
        node_id = str(e["NodeID"])
        if label:
            name, labelled = check_name(str(label)), True
        else:
            name, labelled = address, False
            if plain[address] > 1:
                name = f"{address}-{node_id[:8]}"
        head = HEAD_RESOURCE in (e.get("Resources") or {})
        nodes.append(Node(name, node_id, address, bool(e.get("Alive")), labelled, head))
    nodes.sort(key=lambda n: (n.name, not n.alive))
    return nodes


def head_of(nodes: Iterable[Node]) -> str | None:
    """The name of the alive head node among ``nodes``, if any."""
    return next((node.name for node in nodes if node.head and node.alive), None)


def alive_by_name(nodes: list[Node]) -> dict[str, Node]:
    """The alive node of each name (at most one is alive per name)."""
    out: dict[str, Node] = {}
    for node in nodes:
        if node.alive and node.name not in out:
            out[node.name] = node
    return out
