"""Every Ray name canopy uses, in one place."""

from __future__ import annotations

DEFAULT_NAMESPACE = "canopy"
CONTROLLER = "controller"
SESSION_TREES = "session-trees"
VIEWS = "views"
CONFIG_LOG = "configuration-log"


def partition(index: int) -> str:
    return f"partition-{index}"


def gateway(index: int) -> str:
    return f"gateway-{index}"


def agent(node: str) -> str:
    """The configuration log's copy on the node named ``node``."""
    return f"config-agent@{node}"


#: a gateway's name, as :func:`gateway` makes it
GATEWAY_NAME = r"gateway-(\d+)"
#: a partition replica's name, as :class:`actors.replicas.ReplicaSet` makes it: index, node, serial
REPLICA_NAME = r"partition-(\d+)@(.+)#(\d+)"
