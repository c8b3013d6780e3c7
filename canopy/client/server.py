"""Operating the gateway and the cluster (``session.server``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from canopy import protocol as wire

if TYPE_CHECKING:
    from canopy.client.session import Session


class Server:
    """Operating the gateway the session is connected to (``session.server``)."""

    def __init__(self, session: Session) -> None:
        self._s = session

    async def trace(self, every: int = 0, limit: int = 100_000) -> list[wire.TraceRecord]:
        """Time every ``every``-th set this gateway receives from now on (0
        stops); return the records taken since the last call (CONTROL_SERVER)."""
        rows = await self._s._call("trace", every, limit)
        return [wire.TraceRecord(*row) for row in rows]

    async def cluster_status(self) -> dict[str, Any]:
        """The whole cluster, as ``canopy cluster status --json`` prints it (VIEW_SERVER):
        ``nodes`` (name, address, alive, ``home``: the controller's, ``head``: Ray's head node),
        ``partitions`` (primary and backup node, epoch,
        topics, selectors registered, journal sequence of each, whether the backup caught up,
        replication lag, failovers since the controller started, healthy), ``gateways`` (node, url, sessions), ``balanced``, ``configuration``
        (the security store's version; the configuration log's ``log_term``,
        ``log_committed``, ``log_majority`` and ``log_copies``: each node's committed
        position) and ``healthy``."""
        status: dict[str, Any] = await self._s._call("cluster_status")
        return status

    async def kill_node(self, node: str, *, force: bool = False) -> dict[str, Any]:
        """Crash a cluster node (CONTROL_SERVER): its raylet and every process it started
        get SIGKILL, with no warning, as when a machine fails. Refused
        (:class:`~canopy.errors.RefusedError`) on clusters not started with
        ``--local-nodes`` and on the controller's node unless ``force``."""
        return await self._node("kill", node, 0.0, force)

    async def pause_node(self, node: str, seconds: float, *, force: bool = False) -> dict[str, Any]:
        """Freeze a cluster node for ``seconds`` (SIGSTOP, then SIGCONT): a node that hangs.
        Paused past the failure detector, it is replaced, and on resuming it leaves the
        cluster. The same refusals as :meth:`kill_node`."""
        return await self._node("pause", node, seconds, force)

    async def add_node(self, node: str | None = None) -> dict[str, Any]:
        """Start a simulated node (``--local-nodes`` clusters): ``node-<k>`` by default;
        a dead node's name starts it again on its data directory. Answered once asked
        for; the node appears in :meth:`cluster_status` seconds later."""
        return await self._node("add", node, 0.0, False)

    async def restart_gcs(self, seconds: float = 2.0) -> dict[str, Any]:
        """Kill Ray's GCS (the head's store of nodes, actors and names) and start it
        again ``seconds`` later, as when the head restarts (CONTROL_SERVER;
        ``--local-nodes`` clusters started with ``gcs_redis_address`` only, else
        :class:`~canopy.errors.RefusedError`). The broker serves throughout: the GCS
        reads its tables back from Redis. Answered once asked for; canopy serve
        carries it out at its next health check."""
        return await self._node("restart-gcs", None, seconds, False)

    async def kill_head(self, seconds: float = 5.0) -> dict[str, Any]:
        """Kill the head node (Ray's GCS, the head's raylet and every process on it, the
        controller included) and start it again ``seconds`` later (the same clusters as
        :meth:`restart_gcs`, else :class:`~canopy.errors.RefusedError`). The partitions live on
        the other nodes and serve throughout, through their gateways; changes that need the
        controller wait for it or are refused UNAVAILABLE; once the head is back the controller
        takes the instance over. Answered once asked for; canopy serve carries it out."""
        return await self._node("kill-head", None, seconds, False)

    async def partition(self, node: str, seconds: float, *, peers: list[str] | None = None,
                        direction: str = "both", delay_ms: int | None = None) -> dict[str, Any]:
        """Cut ``node`` off the other nodes' network (or off ``peers`` only) for ``seconds``, then heal
        it: ``direction`` ``both``, ``in`` (it receives nothing from them) or ``out`` (it sends them
        nothing). Clients still reach its gateway. A node Ray declares dead meanwhile leaves the
        cluster, and once healed is started again under its name and rejoins. With ``delay_ms``
        (1 to 10000) that traffic arrives so many milliseconds late instead of never (as
        ``tc netem delay`` would make it), each way that ``direction`` names. ``--local-nodes``
        clusters started with ``node_namespaces`` only (else :class:`~canopy.errors.RefusedError`).
        Answered once asked for; canopy serve carries it out at its next health check."""
        options: dict[str, Any] = {"peers": peers, "direction": direction}
        if delay_ms is not None:  # left out otherwise, as servers that cannot delay expect
            options["delay_ms"] = delay_ms
        answer: dict[str, Any] = await self._s._call("cluster_node", "partition", node, seconds, False, options)
        return answer

    async def _node(self, action: str, node: str | None, seconds: float, force: bool) -> dict[str, Any]:
        answer: dict[str, Any] = await self._s._call("cluster_node", action, node, seconds, force)
        return answer
