"""One simulated run: a schedule played against replicas, a controller, links and (when the
schedule runs it) the configuration log, checked throughout.

:func:`run` builds the world from a :class:`~tests.simulation.schedule.Schedule` (or a seed,
through :func:`~tests.simulation.schedule.generate`), starts the controller at t=0, plays the
writes and faults at their times, and at ``faults_end_ms`` heals every cut, powers every node
on, sets the policy back to ``always`` and stops losing and delaying messages. From then on it
asks the checker every half second whether the cluster has converged
(:meth:`~tests.simulation.invariants.Checker.unconverged`), and ends as soon as it has; not by
:data:`CONVERGE_MS` later is a :class:`~tests.simulation.invariants.Violation`, as is any other
invariant broken on the way.

The failure detector (the GCS on the head) looks at every node each :data:`DETECT_EVERY_NS`:
one the head has not reached for :data:`DETECT_MS` is lost (the controller sees it gone); when
it is reached again its raylet exits (its processes die) and it comes back after
:data:`REJOIN_NS` with its name and disk and a new id. A power cut or a ``Rejoin`` gives a node
a new id the same way. Replicas are pinned to their node: once it left they are dead for good,
and the controller makes new ones; a gateway is made again on the node that comes back.
"""

from __future__ import annotations

import itertools
from typing import Any, NamedTuple

from replication.journal import FsyncMode, FsyncPolicy
from tests.simulation.client import SimLink
from tests.simulation.configuration import SimAgent, SimConfiguration, SimServices
from tests.simulation.controller import Controller
from tests.simulation.managed import ManagedController
from tests.simulation.disk import NodeDisk
from tests.simulation.invariants import Checker, Violation
from tests.simulation.network import Conditions, Network
from tests.simulation.processes import Calls, SimNode
from tests.simulation.replica import SimReplica
from tests.simulation.schedule import (
    Configure,
    Corrupt,
    CrashProcess,
    Cut,
    Isolate,
    Op,
    Pause,
    PowerCut,
    Rejoin,
    Reset,
    RestartAll,
    Schedule,
    Slow,
    Write,
    generate,
)
from tests.simulation.world import MS, SECOND, World
from topics.partitioning import partition_of

__all__ = ["Outcome", "Sim", "run"]

DETECT_MS = 3_000
DETECT_EVERY_NS = 250 * MS
REJOIN_NS = SECOND
CONVERGE_MS = 60_000
CHECK_EVERY_NS = 500 * MS


class Outcome(NamedTuple):
    seed: int
    acknowledged: int
    unknown: int
    failed: int
    failovers: int
    handovers: int
    excused: int
    converged_ms: int  # after faults_end
    events: int
    #: configuration changes acknowledged, refused and of an outcome still unknown at the end
    configured: int = 0
    refused: int = 0
    undecided: int = 0


class Sim:
    """Everything of one run, for the processes and the checker to reach each other."""

    #: the controller the runs use: the real managers (``ManagedController``), or the scripted one
    controller_class: type[Controller] | type[ManagedController] = ManagedController

    def __init__(self, schedule: Schedule, *, tracing: bool = False) -> None:
        self.schedule = schedule
        world = self.world = World(schedule.seed, tracing=tracing)
        self.network = Network(world, schedule.nodes, Conditions(spike_rate=schedule.spike_rate,
                                                                 loss_rate=schedule.loss_rate))
        self.calls = Calls(world, self.network)
        self.nodes = {name: SimNode(world, name) for name in schedule.nodes}
        self.head = self.nodes[schedule.head]
        self.disks = {name: NodeDisk(name, schedule.policy) for name in schedule.nodes}
        self.checker = Checker(world, schedule.partitions, list(self.disks.values()))
        self.replicas = self.checker.replicas
        #: the configuration log, when the schedule runs it (and the controller is the real one)
        self.config = (SimConfiguration(self) if schedule.config_log and self.controller_class is ManagedController
                       else None)
        self.services = (SimServices(self, self.nodes[schedule.nodes[1 if len(schedule.nodes) > 1 else 0]])
                         if self.config is not None else None)
        self.controller = self.controller_class(self, self.head, schedule.partitions)
        self.links = {name: SimLink(self.nodes[name], schedule.partitions, self.network, self.calls,
                                    self.controller) for name in sorted({w.client for w in schedule.writes})}
        self.ids = itertools.count(1)
        self._unreached: dict[str, int] = {}
        self._rejoining: set[str] = set()
        self._heals: list[Any] = []
        self.faults_over = False
        self.converged_ns: int | None = None
        self.unconverged: str | None = "not checked yet"

    # -- what the processes ask ------------------------------------------------------------------

    def alive(self) -> dict[str, int]:
        """The nodes the head counts in, with their raylets' ids."""
        return {name: node.id for name, node in self.nodes.items() if node.alive}

    def make_replica(self, name: str, index: int, node: str, raylet: int | None = None) -> SimReplica:
        """A new replica of partition ``index`` on ``node``. Its process starts once every
        earlier one of that partition there is dead (a kill may still be on its way): as Ray
        starts an actor once the one it replaces is gone, never beside it on its journal.
        Until then a call to it fails as to an actor not started yet. ``raylet``: the node's id
        it is pinned to (one the node no longer has: it never runs)."""
        before = [r for r in self.replicas if r.index == index and r.node.name == node and not r.dead]
        replica = SimReplica(name, index, self.nodes[node], self.disks[node].journal(index), self.network,
                             self.checker)
        if not replica.node.running() or raylet not in (None, replica.node.id):
            replica.dead = True  # pinned to a raylet that is gone: it never runs (ActorDied)
        elif before:
            self.world.note("waits", name, "for", ", ".join(r.name for r in before))
            return replica
        replica.boot()
        return replica

    def kill(self, replica: SimReplica) -> None:
        """``ray.kill``: the head tells the replica's node (again if the message is lost)."""
        if not replica.dead and not self.network.message(self.head.name, replica.node.name, "kill", self._kill,
                                                         replica):
            self.world.at(100 * MS, self.kill, replica)

    def _kill(self, replica: SimReplica) -> None:
        if not replica.node.deferred(self._kill, replica):
            replica.kill()
            self._start_waiting(replica.index, replica.node)

    def _start_waiting(self, index: int, node: SimNode) -> None:
        """Start the replica of ``index`` on ``node`` that waited for the earlier ones to die."""
        mine = [r for r in self.replicas if r.index == index and r.node is node and not r.dead]
        if len(mine) == 1 and not mine[0].running and mine[0].incarnation == 0:
            mine[0].boot()

    # -- the run ---------------------------------------------------------------------------------

    def play(self) -> None:
        world, schedule = self.world, self.schedule
        for op in schedule.ops:
            world.at(op.at_ms * MS, self._op, op)
        world.at(schedule.faults_end_ms * MS, self._faults_end)
        world.at(DETECT_EVERY_NS, self._detect)
        world.at(schedule.faults_end_ms * MS + CHECK_EVERY_NS, self._converging)
        for link in self.links.values():
            link.boot()
        if self.services is not None:
            self.services.boot()
        self.controller.boot()
        deadline = (schedule.faults_end_ms + CONVERGE_MS) * MS
        if not world.run_until(lambda: self.converged_ns is not None, deadline):
            raise self.checker.fail("no convergence", f"{CONVERGE_MS // 1000} s after the faults ended: "
                                                      f"{self.unconverged}")

    def outcome(self) -> Outcome:
        links = self.links.values()
        assert self.converged_ns is not None
        return Outcome(self.schedule.seed, sum(len(a) for a in self.checker.acked),
                       sum(link.unknown for link in links), sum(link.failed for link in links),
                       self.controller.failovers, self.controller.handovers, len(self.checker.excused),
                       (self.converged_ns - self.schedule.faults_end_ms * MS) // MS, self.world.events,
                       *((services.made, services.failed, services.unknown) if (services := self.services) is not None
                         else ()))

    def _converging(self) -> None:
        self.unconverged = self.checker.unconverged(self.controller, self.alive())
        if self.unconverged is None and self.config is not None:
            self.unconverged = self.config.unconverged(self.alive())
        if self.unconverged is None:
            self.converged_ns = self.world.now_ns
            self.world.note("converged")
        else:
            self.world.at(CHECK_EVERY_NS, self._converging)

    # -- the failure detector --------------------------------------------------------------------

    def _detect(self) -> None:
        world, head, network = self.world, self.head, self.network
        world.at(DETECT_EVERY_NS, self._detect)
        if head.paused_until > world.now_ns:
            return  # the GCS does not run either
        for name, node in self.nodes.items():
            if node is head or name in self._rejoining:
                continue
            reached = (node.powered and node.paused_until <= world.now_ns and network.up(head.name, name)
                       and network.up(name, head.name))
            if node.alive:
                if reached:
                    self._unreached.pop(name, None)
                elif world.now_ns - self._unreached.setdefault(name, world.now_ns) >= DETECT_MS * MS:
                    node.alive = False
                    world.note("node lost", name)
            elif reached:  # it hears it was declared dead: its raylet exits, and starts again
                self._restart_node(node)

    def _restart_node(self, node: SimNode) -> None:
        """The node's raylet exits (its processes die) and comes back after REJOIN_NS with a new id
        (a paused node's raylet does so when the pause ends)."""
        if node.name in self._rejoining or node.deferred(self._restart_node, node):
            return
        node.alive = False
        self._unreached.pop(node.name, None)
        self._rejoining.add(node.name)
        for process in node.processes:
            if isinstance(process, (SimReplica, SimAgent)):  # held to the raylet: gone with it
                process.kill()
            elif process.running:
                process.crash()
        self.world.at(REJOIN_NS, self._rejoined, node)

    def _rejoined(self, node: SimNode) -> None:
        if node.deferred(self._rejoined, node):
            return
        if not node.powered:
            return  # power_on restarts it
        self._rejoining.discard(node.name)
        node.id += 1
        node.alive = True
        self.world.note("node joined", node.name, node.id)
        for process in node.processes:  # a gateway is made again there (replicas are the controller's)
            if isinstance(process, (SimLink, SimServices)) and not process.running:
                process.boot()

    # -- the schedule ----------------------------------------------------------------------------

    def _op(self, op: Op) -> None:
        world, network = self.world, self.network
        if world.tracing:
            world.note("op", repr(op))
        if isinstance(op, Write):
            index = partition_of(op.key, self.schedule.partitions)
            self.links[op.client].submit(index, next(self.ids), op.key)
        elif isinstance(op, Configure):
            if self.services is not None:
                self.services.change(op.name, next(self.ids))
        elif self.faults_over:
            return
        elif isinstance(op, CrashProcess):
            self._crash(op.target)
        elif isinstance(op, PowerCut):
            node = self.nodes[op.node]
            if node.powered and node.name not in self._rejoining:
                self._power_off(node)
                self._heal(op.down_ms, self._power_on, node)
        elif isinstance(op, Pause):
            node = self.nodes[op.node]
            node.paused_until = max(node.paused_until, world.now_ns + op.ms * MS)
        elif isinstance(op, Cut):
            network.cut(op.a, op.b, both_ways=op.both_ways)
            self._heal(op.ms, self._end_cut, op)
        elif isinstance(op, Isolate):
            network.isolate(op.node)
            self._heal(op.ms, network.reconnect, op.node)
        elif isinstance(op, Slow):
            network.slow(op.a, op.b, op.delay_ms * MS)
            self._heal(op.ms, network.slow, op.a, op.b, 0)
        elif isinstance(op, Reset):
            self._reset(op)
        elif isinstance(op, Corrupt):
            journal = self.disks[op.node].journals.get(op.partition)
            if journal is not None:
                journal.corrupt(world.rng("disk"))
        elif isinstance(op, Rejoin):
            node = self.nodes[op.node]
            if node.powered and node.name not in self._rejoining:
                self._restart_node(node)
        elif isinstance(op, RestartAll):
            self._restart_all()

    def _heal(self, ms: int, fn: Any, *args: Any) -> None:
        self._heals.append(self.world.at(ms * MS, fn, *args))

    def _end_cut(self, op: Cut) -> None:
        self.network.heal(op.a, op.b, both_ways=op.both_ways)

    def _crash(self, target: str) -> None:
        if target == "controller":
            self.controller.crash()
        elif target.startswith("gateway@"):
            link = self.links.get(target.partition("@")[2])
            if link is not None:
                link.crash()
        elif target.startswith("partition-"):
            index, _, node = target.removeprefix("partition-").partition("@")
            for replica in reversed(self.replicas):
                if replica.index == int(index) and replica.node.name == node and not replica.dead:
                    replica.crash()
                    break
        elif self.config is not None and target == "configuration-log":
            if self.config.writer is not None:
                self.config.writer.crash()
        elif self.config is not None and target.startswith("config-agent@"):
            agent = self.config.agents.get(target.partition("@")[2])
            if agent is not None:
                agent.crash()

    def _power_off(self, node: SimNode) -> None:
        self.network.power_off(node.name)
        node.powered = False
        for process in node.processes:
            if isinstance(process, (SimReplica, SimAgent)):
                process.kill()
            elif process.running:
                process.crash()
        disk = self.disks[node.name]
        before = {i: {change[1] for _, _, change in j.records} for i, j in disk.journals.items()}
        disk.power_cut(self.world.rng("disk"))
        for i, journal in disk.journals.items():
            self.checker.lost_tail(node.name, i, before[i] - {change[1] for _, _, change in journal.records})
        self.checker.power_cut(node.name, disk.policy.mode is not FsyncMode.ALWAYS)

    def _power_on(self, node: SimNode) -> None:
        if node.powered:
            return
        self.network.power_on(node.name)
        node.powered = True
        self._rejoining.discard(node.name)
        self._restart_node(node)

    def _reset(self, op: Reset) -> None:
        controller = self.controller
        if op.client is None:
            if not controller.placements:
                return
            p = controller.placements[op.partition]
            primary = controller.replica_at(op.partition, p.primary)
            if primary is not None and primary.running and primary.state.stream is not None:
                primary.state.stream.stream.reset()
        else:
            link = self.links.get(op.client)
            if link is not None and link.running and link.channels[op.partition].end is not None:
                end = link.channels[op.partition].end
                assert end is not None
                end.stream.reset()

    def _restart_all(self) -> None:
        """serve stops every process of the instance (the journals close) and starts it again."""
        for replica in self.replicas:
            replica.kill(clean=True)
        for link in self.links.values():
            link.crash()
        if self.config is not None:
            self.config.stop_all()
        self.controller.fresh = True
        self.controller.crash()

    def _faults_end(self) -> None:
        self.faults_over = True
        self.world.note("faults end")
        for timer in self._heals:
            World.cancel(timer)
        self.network.heal_all()
        self.network.conditions = Conditions()
        for name, node in self.nodes.items():
            if not node.powered:
                self._power_on(node)
            self.disks[name].set_policy(FsyncPolicy.parse("always"))


def run(schedule: Schedule | int, *, tracing: bool = False) -> Outcome:
    """Play ``schedule`` (or ``generate(seed)``); its outcome, or :class:`Violation`."""
    sim = Sim(generate(schedule) if isinstance(schedule, int) else schedule, tracing=tracing)
    try:
        sim.play()
        return sim.outcome()
    finally:
        if sim.config is not None:
            sim.config.close()


__all__ += ["Violation"]
