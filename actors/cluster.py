"""The control plane's seam: what it asks of the cluster it runs on, with Ray behind it.

The controller's managers (:class:`~actors.replicas.ReplicaSet`, :class:`Liveness
<actors.liveness.Liveness>`) never call Ray themselves; they receive a :class:`Cluster` and
ask it to make a partition replica on a node, call an actor (a :class:`Future` back), read a
node's journals there, wait for answers with a bound, and kill an actor. :class:`RayCluster`
does that on Ray; the deterministic simulator (``tests/simulation``) gives the same managers
a cluster of simulated nodes, processes, network and disks on simulated time.

Errors come back as values (:data:`Outcome`: the answer and ``None``, or ``None`` and what
the call raised), so that a manager weighing several answers never loses one to another's
exception. Besides whatever a call raised, a cluster reports:

* :class:`CallTimeout` -- no answer within the bound (the call may still run later);
* :class:`NodeGone` -- the node a task was held to left before the task ran;
* and, through :meth:`Cluster.unavailable` and :meth:`Cluster.died`, whether an actor's
  error means it crashed and is being restarted, or is gone for good (Ray's own exception
  types, kept as they are, are what :class:`RayCluster` reports for those).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, Protocol

from actors.settings import InstanceSettings
from replication.nodes import Node

__all__ = ["CallTimeout", "Cluster", "ClusterError", "ControlEvent", "Future", "NodeGone", "Outcome", "RayCluster",
           "get", "one"]

#: an answer: (what it returned, None) or (None, what it raised)
Outcome = tuple[Any, "BaseException | None"]
#: what :meth:`Cluster.call` returns: opaque to callers, handed back to :meth:`Cluster.outcomes`
Future = Any


class ControlEvent(NamedTuple):
    """One line of what the controller's check says happened (``ControllerActor.check``):
    ``event`` is ``crashed``, ``recovered``, ``dead``, ``failed`` (serve stops on the last
    two), ``cluster`` (``reason`` says what the control plane did), or a request to serve."""

    name: str
    actor: str
    event: str
    reason: str

    @classmethod
    def cluster(cls, reason: str) -> ControlEvent:
        return cls("cluster", "", "cluster", reason)


class ClusterError(Exception):
    """The cluster did not carry a call out."""


class CallTimeout(ClusterError):
    """No answer within the caller's bound (the call may still run)."""


class NodeGone(ClusterError):
    """The node a task was held to left the cluster before the task ran."""


class Cluster(Protocol):
    """What the control plane's managers ask of the cluster (see the module docstring)."""

    def make_replica(self, name: str, node: Node, index: int, count: int) -> Any:
        """Make partition ``index``'s replica ``name`` on ``node``, idle, over the node's data
        directory (it outlives the controller); its handle."""

    def ready(self, handles: Sequence[Any], timeout: float) -> None:
        """Wait up to ``timeout`` seconds until the replicas ``handles``, just made, run (each is
        a process to start); a replica that does not is left to fail the call made to it next."""

    def call(self, handle: Any, method: str, *args: Any) -> Future:
        """Call ``method(*args)`` on the actor ``handle``; calls from one caller to one actor
        run in the order made."""

    def held(self, node: Node, count: int) -> Future:
        """Read back, on ``node``, what each of the ``count`` partitions' journals there holds:
        ``{index: (epoch, last record)}`` (a damaged journal says epoch -1)."""

    def held_of(self, node: Node, index: int) -> Future:
        """What partition ``index``'s journal on ``node`` holds, ``(epoch, last record)``, or
        ``None`` when there is none (read without its lock)."""

    def outcomes(self, futures: Sequence[Future], timeout: float) -> list[Outcome]:
        """Wait up to ``timeout`` seconds (0: not at all) for every one of ``futures``; each
        one's outcome, :class:`CallTimeout` for those that did not answer."""

    def kill(self, handle: Any) -> None:
        """Stop the actor for good (never restarted); a no-op for one already gone."""

    def unavailable(self, error: BaseException) -> bool:
        """``error`` says the actor crashed and is being restarted."""

    def died(self, error: BaseException) -> bool:
        """``error`` says the actor is gone for good (killed, given up, or its node left)."""


def get(cluster: Cluster, futures: Sequence[Future], timeout: float) -> list[Any]:
    """Every answer, within ``timeout`` in all; raises the first error, in the futures' order."""
    found = cluster.outcomes(futures, timeout)
    for _, error in found:
        if error is not None:
            raise error
    return [result for result, _ in found]


def one(cluster: Cluster, future: Future, timeout: float) -> Any:
    """The answer of one call, within ``timeout``; raises what it raised."""
    [result] = get(cluster, [future], timeout)
    return result


class RayCluster:
    """:class:`Cluster` on Ray: replicas are detached actors held to their node; journals are
    read by zero-CPU tasks held there; an error keeps Ray's exception type, but for a task
    whose node left (:class:`NodeGone`) and an answer that did not come (:class:`CallTimeout`)."""

    def __init__(self, config: InstanceSettings) -> None:
        self.config = config
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from actors import partition
        from actors.replicas import held_epochs, held_of

        self._ray = ray
        self._affinity = NodeAffinitySchedulingStrategy
        self._partition = partition
        self._held = ray.remote(num_cpus=0)(held_epochs)
        self._held_of = ray.remote(num_cpus=0)(held_of)

    def _on(self, node: Node) -> Any:
        return self._affinity(node.id, soft=False)

    def make_replica(self, name: str, node: Node, index: int, count: int) -> Any:
        partition = self._partition
        return partition.remote_class().options(
            name=name, lifetime="detached",  # it outlives a crash of the controller's process
            scheduling_strategy=self._on(node),
        ).remote(index, count, self.config, None, partition.IDLE, True, node.data_dir(self.config.data_dir))

    def ready(self, handles: Sequence[Any], timeout: float) -> None:
        if handles:  # Ray answers an actor's __ray_ready__ once its process runs it
            self._ray.wait([h.__ray_ready__.remote() for h in handles], num_returns=len(handles), timeout=timeout)

    def call(self, handle: Any, method: str, *args: Any) -> Future:
        return getattr(handle, method).remote(*args)

    def held(self, node: Node, count: int) -> Future:
        return self._held.options(scheduling_strategy=self._on(node)).remote(
            node.data_dir(self.config.data_dir), count)

    def held_of(self, node: Node, index: int) -> Future:
        return self._held_of.options(scheduling_strategy=self._on(node)).remote(
            node.data_dir(self.config.data_dir), index)

    def outcomes(self, futures: Sequence[Future], timeout: float) -> list[Outcome]:
        ray = self._ray
        refs = list(futures)
        if not refs:
            return []
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=timeout)[0])
        found: list[Outcome] = []
        for ref in refs:
            if ref not in ready:
                found.append((None, CallTimeout(f"no answer within {timeout} s")))
                continue
            try:
                found.append((ray.get(ref, timeout=0), None))
            except ray.exceptions.TaskUnschedulableError as e:
                found.append((None, NodeGone(str(e))))
            except Exception as e:
                found.append((None, e))
        return found

    def kill(self, handle: Any) -> None:
        try:
            self._ray.kill(handle, no_restart=True)
        except Exception:
            pass

    def unavailable(self, error: BaseException) -> bool:
        return isinstance(error, self._ray.exceptions.ActorUnavailableError)

    def died(self, error: BaseException) -> bool:
        exceptions = self._ray.exceptions
        return not self.unavailable(error) and isinstance(
            error, (exceptions.RayActorError, exceptions.ActorUnschedulableError))
