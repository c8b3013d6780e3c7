"""Lose the head of a ``--local-nodes`` cluster and bring it back (``canopy cluster kill-head``).

The head is the simulated node ``node-0``: Ray's GCS, its log monitor and API server (no
autoscaler monitor: serve starts the simulated nodes itself), the head's raylet and every
worker process under it (canopy's controller, the configuration log's writer, node-0's
gateway and configuration copy; no partition replica when two other nodes are up:
:func:`replication.placement.hosts`). :func:`kill` sends each of them SIGKILL at once, as
when the machine loses power; :func:`start` starts them again on
the same ports and directories, the raylet under a new node id as Ray's head restarts do.
With ``gcs_redis_address`` the GCS reads its tables back from Redis; every other raylet,
actor and driver waits for it (up to ``gcs_reconnect_timeout``) and the partitions, on the
other nodes, serve throughout.

What comes back by itself: Ray restarts the actors the head held that select the head by its
label (the controller and the configuration log's writer, placed with
``label_selector={LABEL: "node-0"}``), on the new head; the controller takes the instance
over (:meth:`actors.controller.ControllerActor._adopt`). serve's own Ray connection went with
the head's raylet (a driver cannot move to another raylet), so serve connects again
(:func:`reconnect`).

This module uses Ray's private node API (``ray._private.node.Node`` of a
``ray.cluster_utils.Cluster``), as Ray's own head-failure tests do; it is only for the
simulated cluster serve owns.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from actors import processes

#: how long serve waits for the head's raylet to register after it was started again
REGISTER_TIMEOUT = 60.0


def pids(head: Any) -> dict[str, list[int]]:
    """The head's Ray processes by kind (``gcs_server``, ``raylet``, ``monitor``, ...)."""
    return {kind: [p.process.pid for p in found] for kind, found in head.all_processes.items()}


def kill(head: Any) -> list[int]:
    """SIGKILL the head's raylet with every process under it, then its other processes (the GCS
    and the monitors); return every pid killed."""
    killed: list[int] = []
    for info in head.all_processes.pop("raylet", []):
        killed += processes.crash(info.process.pid)
    killed += [pid for found in pids(head).values() for pid in found]
    head.kill_all_processes(check_alive=False, allow_graceful=False, wait=True)
    return killed


def start(head: Any) -> str:
    """Start the head's processes again after :func:`kill`; return its raylet's new node id.

    The GCS and its companions come up as at the first start (on the recorded ports); the
    raylet gets a new node id (the GCS keeps the old one's death) and its old Unix sockets,
    left by the killed process, are removed first (the new one could not bind them)."""
    from ray._raylet import NodeID

    head._gcs_address = None  # what start_head_processes expects of a head with no GCS
    head._gcs_client = None
    head.start_head_processes()
    head._node_id = NodeID.from_random().hex()
    for socket_path in (head._plasma_store_socket_name, head._raylet_socket_name):
        try:
            os.unlink(socket_path)
        except FileNotFoundError:
            pass
    head.start_ray_processes()
    return str(head._node_id)


def reconnect(address: str, namespace: str, node_id: str, timeout: float = REGISTER_TIMEOUT,
              node_ip: str | None = None) -> None:
    """Connect this process to Ray again, through the head's new raylet (the driver goes with
    its raylet: Ray prefers the head among the raylets of this machine once it has registered;
    until then, connect again)."""
    import ray

    ray.shutdown()
    deadline = time.monotonic() + timeout
    while True:
        on_ip: dict[str, Any] = {"_node_ip_address": node_ip} if node_ip else {}
        ray.init(address=address, namespace=namespace, logging_level=logging.WARNING, **on_ip)
        through = ray.get_runtime_context().get_node_id()
        if through == node_id:
            return
        ray.shutdown()
        if time.monotonic() > deadline:
            raise TimeoutError(f"the head's new raylet ({node_id}) did not register within {timeout:.0f} s "
                               f"(Ray connected through {through})")
        time.sleep(0.5)
