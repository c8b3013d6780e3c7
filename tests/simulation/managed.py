"""The real control plane in the simulator: ``ReplicaSet``, ``PartitionManager`` and ``Liveness``
over a :class:`SimCluster`, driven as ``canopy serve`` drives the controller.

:class:`SimCluster` is :class:`actors.cluster.Cluster` on the simulated world: a replica is a
:class:`~tests.simulation.replica.SimReplica` made on its node (``Sim.make_replica``), a call
is a simulated Ray call from the controller's process, a journal is read back by a message to
its node and one back (lost or held up by the network like any other), and ``outcomes`` runs
the world until every answer is in or the bound passes -- the controller's code blocks as a
synchronous actor's does, while everything else goes on. When the controller's process dies
meanwhile, :class:`ControllerGone` (a ``BaseException``: nothing in the control plane catches
it) unwinds the step; while its node is paused, the step resumes only when the pause ends.

:class:`ManagedController` is the process: at start, once every node is alive (serve starts
every node first), :meth:`ReplicaSet.start` from the journals; after a crash (Ray restarts
it), :meth:`ReplicaSet.adopt` from the replicas alive, as ``ControllerActor`` adopts (one that
cannot adopt fails to start, and Ray starts it again). Every second (serve's check) one job:
``Liveness.poll`` of every replica, then the manager's steps in the controller's order --
:meth:`~actors.replicas.PartitionManager.follow_nodes`, each replica event,
:meth:`~actors.replicas.PartitionManager.settle`. ``route`` calls wait while a job runs (a
synchronous actor).

With the configuration log (:mod:`tests.simulation.configuration`), the controller does its
part as ``ControllerActor`` does: after the replicas' start (or adoption) it makes a copy on every
node and starts (recovers) the writer, waiting for it; Liveness watches the writer too (restarted:
started again; given up: made again); and each check the copies follow the nodes (the writer told
of a change) or the writer is tended.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from actors.cluster import CallTimeout, NodeGone, Outcome
from actors.liveness import Liveness
from actors.replicas import PartitionManager, ReplicaSet
from cluster.config import InstanceConfig
from replication.nodes import Node
from replication.placement import Placements
from tests.simulation.processes import ActorDied, ActorUnavailable, CallError, Process, SimNode
from tests.simulation.processes import CallTimeout as SimCallTimeout
from tests.simulation.replica import Position, SimReplica
from tests.simulation.configuration import RECOVER_S
from tests.simulation.world import MS, SECOND

if TYPE_CHECKING:
    from collections.abc import Callable

    from tests.simulation.run import Sim

__all__ = ["ControllerGone", "ManagedController", "SimCluster"]

# what the managers log goes to the trace (``controller`` entries), not to stderr
logging.getLogger("canopy").addHandler(logging.NullHandler())

TICK_NS = SECOND
#: the configuration log's writer, as Liveness names it
WRITER = "configuration-log"
RESEND_NS = 100 * MS
#: a call's own bound (the callers' ``outcomes`` bound is what they wait)
CALL_MS = 3_600_000


class ControllerGone(BaseException):
    """The controller's process died while a step waited: the step is abandoned."""


class _Future:
    __slots__ = ("done", "outcome")

    def __init__(self) -> None:
        self.done = False
        self.outcome: Outcome = (None, None)

    def set(self, result: Any, error: BaseException | None) -> None:
        if not self.done:
            self.done = True
            self.outcome = (result, error)


def _as_dict(position: Position) -> dict[str, Any]:
    """``position()`` as ``PartitionActor`` answers it."""
    return {"role": position.role.value, "epoch": position.epoch, "primed": position.primed,
            "caught_up": position.caught_up, "sequence": position.sequence, "since": position.since,
            "handing_over": position.handing_over, "damaged": position.damaged, "address": position.address,
            "backup": position.backup}


class SimCluster:
    """:class:`actors.cluster.Cluster` for the controller process ``caller``."""

    def __init__(self, sim: Sim, caller: Process) -> None:
        self.sim = sim
        self.caller = caller
        self.incarnation = caller.incarnation

    def make_replica(self, name: str, node: Node, index: int, count: int) -> SimReplica:
        return self.sim.make_replica(name, index, node.name, int(node.id))

    def ready(self, handles: Sequence[Any], timeout: float) -> None:
        """At once: a simulated replica runs from the moment it is made."""

    def call(self, handle: Any, method: str, *args: Any) -> _Future:
        future = _Future()

        def done(result: Any, error: BaseException | None) -> None:
            if isinstance(error, SimCallTimeout):
                return  # lost on its way: unanswered, as a Ray call whose answer never comes
            future.set(_as_dict(result) if isinstance(result, Position) else result, error)

        self.sim.calls.call(self.caller, handle, method, args, CALL_MS, done)
        return future

    def _on_node(self, node: Node, read: Callable[[], Any]) -> _Future:
        """``read()`` run on ``node`` (a task held there), its answer sent back; Ray sends a
        task or its answer again until it gets there (a message the network loses is resent)."""
        future = _Future()
        sim, head = self.sim, self.caller.node
        target = sim.nodes[node.name]
        incarnation = self.caller.incarnation

        def arrive() -> None:
            if target.deferred(arrive):
                return
            if not target.running() or str(target.id) != node.id:
                answer(None, NodeGone(f"{node.name} left before the task ran"))
            else:
                answer(read(), None)

        def answer(result: Any, error: BaseException | None) -> None:
            if not sim.network.message(target.name, head.name, ("task", target.name), back, result, error):
                sim.world.at(RESEND_NS, answer, result, error)

        def back(result: Any, error: BaseException | None) -> None:
            if self.caller.current(incarnation):
                future.set(result, error)

        def send() -> None:
            if not sim.network.message(head.name, target.name, ("task", target.name), arrive):
                sim.world.at(RESEND_NS, send)

        send()
        return future

    def held(self, node: Node, count: int) -> _Future:
        disk = self.sim.disks[node.name]
        return self._on_node(node, lambda: {i: (h.epoch, h.sequence) for i in range(count)
                                            if (h := disk.held(i)) is not None})

    def held_of(self, node: Node, index: int) -> _Future:
        disk = self.sim.disks[node.name]
        return self._on_node(node, lambda: None if (h := disk.held(index)) is None else (h.epoch, h.sequence))

    def outcomes(self, futures: Sequence[_Future], timeout: float) -> list[Outcome]:
        world, caller = self.sim.world, self.caller
        mine = self.incarnation

        def over() -> bool:
            return not caller.current(mine) or all(f.done for f in futures)

        if timeout > 0:  # a look at what came in (``ray.wait(timeout=0)``) runs nothing else
            world.run_until(over, world.now_ns + round(timeout * SECOND))
        node = caller.node
        while caller.current(mine) and node.paused_until > world.now_ns:  # a stopped process sees nothing
            world.run_until(lambda: not caller.current(mine), node.paused_until)
        if not caller.current(mine):
            raise ControllerGone(f"{caller} died")
        return [f.outcome if f.done else (None, CallTimeout(f"no answer within {timeout} s")) for f in futures]

    def kill(self, handle: Any) -> None:
        if isinstance(handle, SimReplica):
            self.sim.kill(handle)

    def unavailable(self, error: BaseException) -> bool:
        return isinstance(error, ActorUnavailable)

    def died(self, error: BaseException) -> bool:
        return isinstance(error, ActorDied)


class ManagedController(Process):
    """The controller process running the real managers (see the module docstring)."""

    def __init__(self, sim: Sim, head: SimNode, count: int) -> None:
        super().__init__(sim.world, "controller", head)
        self.sim = sim
        self.count = count
        self.head = head.name
        self.fresh = True  # start from the journals (else adopt the replicas)
        self.busy = False
        self.replicas: ReplicaSet | None = None
        self.cluster: SimCluster | None = None
        self.manager: PartitionManager | None = None
        self.liveness: Liveness | None = None
        self.failovers_before = 0
        self.handovers_before = 0
        self._mailbox: list[tuple[str, tuple[Any, ...], Callable[[Any, BaseException | None], None]]] = []
        self._timer: Any = None

    # -- what the run and the checker read ---------------------------------------------------

    @property
    def placements(self) -> Placements:
        return self.replicas.placements if self.replicas is not None else ()

    @property
    def unsettled(self) -> set[int]:
        return self.replicas.unsettled if self.replicas is not None else set()

    @property
    def failovers(self) -> int:
        return self.failovers_before + (sum(self.replicas.failovers) if self.replicas is not None else 0)

    @property
    def handovers(self) -> int:
        return self.handovers_before + (self.manager.handovers if self.manager is not None else 0)

    def replica_at(self, index: int, node: str) -> SimReplica | None:
        if self.replicas is None:
            return None
        found = self.replicas.replicas.get((index, node))
        if found is None or found[0] in self.replicas.dead:
            return None
        replica = found[1]
        assert isinstance(replica, SimReplica)
        return replica

    # -- the process -------------------------------------------------------------------------

    def start(self) -> None:
        self.busy = False
        self._mailbox = []
        self._timer = self.world.at(0, self._tick, self.incarnation)

    def stop(self, clean: bool) -> None:
        self.busy = False
        self.failovers_before, self.handovers_before = self.failovers, self.handovers
        self.replicas = self.manager = self.liveness = None
        self.cluster = None
        if self._timer is not None:
            self.world.cancel(self._timer)

    def handle(self, method: str, args: tuple[Any, ...], reply: Callable[[Any, BaseException | None], None]) -> None:
        if self.busy:  # a synchronous actor: one call at a time
            self._mailbox.append((method, args, reply))
            return
        assert method == "route", method
        if self.replicas is None or not self.replicas.placements:
            reply(None, CallError("no partition map yet"))
            return
        route = self.replicas.route(args[0])
        reply((route.epoch, route.handle), None)

    def _nodes(self) -> dict[str, Node]:
        """The alive nodes as Ray lists them."""
        return {name: Node(name, str(node.id), name, True, True, node is self.node)
                for name, node in self.sim.nodes.items() if node.alive}

    def _tick(self, incarnation: int) -> None:
        if self.node.deferred(self._tick, incarnation) or not self.current(incarnation):
            return
        self._timer = self.world.at(TICK_NS, self._tick, incarnation)
        if self.busy:
            return
        self.busy = True
        try:
            if self.replicas is None:
                self._begin()
            else:
                self._check()
        except ControllerGone:
            return  # this incarnation is over: its successor adopts
        self.busy = False
        mailbox, self._mailbox = self._mailbox, []
        for method, args, reply in mailbox:
            self.handle(method, args, reply)

    def _begin(self) -> None:
        cluster = SimCluster(self.sim, self)
        replicas = ReplicaSet(InstanceConfig(data_dir="/data"), self.count, cluster)
        nodes = self._nodes()
        # names are never taken twice (Ray refuses a second actor of one name)
        replicas._made = max((int(r.name.rpartition("#")[2]) for r in self.sim.replicas), default=0)
        if self.fresh:
            if len(nodes) < len(self.sim.nodes):
                return  # serve starts every node before the controller
            self.fresh = False  # Ray restarts a controller that dies from now on: it adopts
            try:
                replicas.start(nodes)
                if self.sim.config is not None:
                    self.sim.config.start(cluster, nodes, fresh=True)
            except Exception as e:
                # the controller did not start (a node left, a replica did not answer): serve stops
                # what it made, and the operator (here: the next tick) starts it again
                self.world.note("start failed", type(e).__name__, str(e))
                replicas.kill_all()
                if self.sim.config is not None:
                    self.sim.config.stop_all()
                self.fresh = True
                return
            said: list[str] = []
        else:
            found = {r.name: r for r in self.sim.replicas if not r.dead and r.node.name in nodes}
            try:
                said = replicas.adopt(nodes, found, [name for name in self.sim.nodes if name not in nodes])
                if self.sim.config is not None:  # the log is recovered again (``_recover_config_log``)
                    self.sim.config.start(cluster, nodes, fresh=False)
            except Exception as e:  # it fails to start; Ray starts it again
                self.world.note("adopt failed", type(e).__name__, str(e))
                self.world.at(0, self.crash)
                return
        self.cluster = cluster
        self.replicas, self.manager = replicas, PartitionManager(replicas, self.world.clock.monotonic)
        self.liveness = Liveness(cluster, self.world.clock.monotonic)
        try:
            self.liveness.baseline(self._serving(replicas), 5.0)
        except Exception as e:  # one is down: its first answer is its baseline
            self.world.note("baseline", type(e).__name__, str(e))
        self._said(said)

    def _check(self) -> None:
        replicas, manager, liveness = self.replicas, self.manager, self.liveness
        assert replicas is not None and manager is not None and liveness is not None
        config, cluster = self.sim.config, self.cluster
        events = liveness.poll(self._serving(replicas))
        nodes = self._nodes()
        said = [e.reason for e in manager.follow_nodes(nodes)]
        if config is not None and cluster is not None:
            config.follow_nodes(cluster, nodes)
        for name, event, reason in events:
            if name == WRITER:
                said += self._writer_event(event)
                continue
            said += [f"{e.name} {e.event} {e.reason}" for e in manager.replica_event(name, event, reason)]
        said += [e.reason for e in manager.settle(quiet=not said and not events)]
        self._said(said)

    def _serving(self, replicas: ReplicaSet) -> dict[str, Any]:
        """What Liveness watches: the replicas, and the configuration log's writer (``_serving``)."""
        serving = replicas.serving()
        config = self.sim.config
        if config is not None and config.writer is not None:
            serving = {**serving, WRITER: config.writer}
        return serving

    def _writer_event(self, event: str) -> list[str]:
        """The configuration log's writer restarted (Ray made it again, empty): it recovers the
        log from the copies (``ControllerActor._recover``); given up by Ray: a new one does."""
        config, cluster = self.sim.config, self.cluster
        assert config is not None and cluster is not None
        if event not in ("restarted", "dead"):
            return [f"{WRITER} {event}"]
        try:
            if event == "dead":
                assert self.liveness is not None
                self.liveness.forget(WRITER)
                config.start(cluster, self._nodes(), fresh=True)
            else:
                config.recover(cluster, RECOVER_S)
        except Exception as e:
            return [f"{WRITER} {event}; its recovery failed: {type(e).__name__}: {e}"]
        return [f"{WRITER} {event}; recovered"]

    def _said(self, lines: list[str]) -> None:
        if self.world.tracing:
            for line in lines:
                self.world.note("controller", line)

