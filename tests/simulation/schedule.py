"""What happens in one simulated run: the cluster's shape, the writes and the faults, by time.

A :class:`Schedule` is a plain value: ``generate(seed)`` draws one, :meth:`Schedule.literal`
prints it as Python, so that a regression stores the schedule itself (it survives changes to
the generator) and replays it: ``from tests.simulation.schedule import *`` and paste. Each operation is a frozen dataclass with its time ``at_ms`` first.

Targets are named as the cluster names them: nodes ``node-0`` (the head: the controller, the
configuration log's writer and serve run there; it is never powered off, as ``NodeControl``
refuses) to ``node-<n-1>``; a crashed process is ``partition-<i>@<node>`` (whichever replica of
partition ``i`` that node holds), ``controller``, ``configuration-log``,
``config-agent@<node>`` or ``gateway@<node>``; clients write from a node's gateway, and the
services (on ``node-1``) change configuration documents (:class:`Configure`) through the
configuration log, when the schedule runs it (``config_log``; schedules recorded before it was
simulated replay without it).

The generator (its own random stream, ``f"{seed}/schedule"``): 3 nodes (10%: 2 or 4),
2 partitions (10%: 1 or 3), ``always`` (25%: ``interval:100``), 2 writers and ~30 writes over
8 s, then 2–6 faults drawn by weight over the same 8 s, bounded so that stopping stays rare:
at most 5 crashes of one process, at most one corruption per partition, one ``RestartAll``,
one power cut per node, never the head's (nor a ``Rejoin`` of it); latency spikes in half the
runs (0.1% or 1% of messages), lost Ray-call messages in two in five (0.1% or 1%). At
``faults_end_ms`` every cut heals, every node is back, the policy is ``always`` again and the
network loses and spikes no more. The configuration changes (2-6 over the same 8 s, of
``views``, ``session_trees`` or ``security``) are drawn from a stream of their own
(``f"{seed}/configure"``), so that the rest of a seed's schedule is what it was before them.
"""

from __future__ import annotations

import random
from collections import Counter
import dataclasses
from dataclasses import dataclass, fields

__all__ = [
    "Configure", "Corrupt", "CrashProcess", "Cut", "Isolate", "Op", "Pause", "PowerCut", "Rejoin", "Reset", "RestartAll",
    "Schedule", "Slow", "Write", "generate",
]

WRITE_WINDOW_MS = 8_000
FAULTS_END_MS = 10_000
MAX_CRASHES = 5  # of one process in a run (under a simulated minute)
#: the configuration documents the services change
CONFIGURED = ("views", "session_trees", "security")


@dataclass(frozen=True)
class Write:
    """A client on node ``client`` sets ``key`` (its partition: ``topics.partitioning.partition_of``)."""

    at_ms: int
    client: str
    key: str


@dataclass(frozen=True)
class CrashProcess:
    """``target``'s process dies (Ray restarts it)."""

    at_ms: int
    target: str


@dataclass(frozen=True)
class PowerCut:
    """``node`` loses power: its processes die, its disk keeps what was synced; back after ``down_ms``."""

    at_ms: int
    node: str
    down_ms: int


@dataclass(frozen=True)
class Pause:
    """``node``'s processes stop running for ``ms`` (a stall, a stopped VM); nothing is lost."""

    at_ms: int
    node: str
    ms: int


@dataclass(frozen=True)
class Cut:
    """Nothing from ``a`` reaches ``b`` (nor back, when ``both_ways``) for ``ms``."""

    at_ms: int
    a: str
    b: str
    ms: int
    both_ways: bool = True


@dataclass(frozen=True)
class Isolate:
    """``node`` reaches no other node, nor they it, for ``ms``."""

    at_ms: int
    node: str
    ms: int


@dataclass(frozen=True)
class Slow:
    """Every message between ``a`` and ``b`` takes ``delay_ms`` more, for ``ms``."""

    at_ms: int
    a: str
    b: str
    ms: int
    delay_ms: int


@dataclass(frozen=True)
class Reset:
    """A reset of partition ``partition``'s replication stream (primary to backup), or with
    ``client`` of that client's stream to the partition's primary."""

    at_ms: int
    partition: int
    client: str | None = None


@dataclass(frozen=True)
class Corrupt:
    """A durable record of ``node``'s journal of ``partition`` goes bad (noticed at its next recovery)."""

    at_ms: int
    node: str
    partition: int


@dataclass(frozen=True)
class Rejoin:
    """``node``'s raylet restarts: its processes die, it rejoins with its name and disk and a new id."""

    at_ms: int
    node: str


@dataclass(frozen=True)
class Configure:
    """The services change configuration document ``name`` (through the configuration log)."""

    at_ms: int
    name: str


@dataclass(frozen=True)
class RestartAll:
    """Every process of the instance stops and the instance starts again from the held epochs."""

    at_ms: int


Op = Write | Configure | CrashProcess | PowerCut | Pause | Cut | Isolate | Slow | Reset | Corrupt | Rejoin | RestartAll
Fault = CrashProcess | PowerCut | Pause | Cut | Isolate | Slow | Reset | Corrupt | Rejoin | RestartAll


@dataclass(frozen=True)
class Schedule:
    """One run: ``nodes`` (the head first), ``partitions``, the fsync ``policy`` until
    ``faults_end_ms``, and ``ops`` in time order. Until ``faults_end_ms`` too, a share
    ``spike_rate`` of network messages takes a latency spike and ``loss_rate`` of Ray-call
    messages are lost (:class:`tests.simulation.network.Conditions`)."""

    seed: int
    nodes: tuple[str, ...]
    partitions: int
    policy: str
    ops: tuple[Op, ...]
    faults_end_ms: int
    spike_rate: float = 0.0
    loss_rate: float = 0.0
    #: whether the configuration log runs (its writer, a copy on every node, the services that
    #: change documents); schedules recorded before it was simulated replay without it
    config_log: bool = False

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def writes(self) -> list[Write]:
        return [op for op in self.ops if isinstance(op, Write)]

    @property
    def faults(self) -> list[Op]:
        return [op for op in self.ops if not isinstance(op, (Write, Configure))]

    def literal(self) -> str:
        """This schedule as Python that evaluates to an equal one (with this module's names in scope)."""
        ops = "".join(f"        {_literal(op)},\n" for op in self.ops)
        rates = "".join(f"    {name}={getattr(self, name)!r},\n" for name in ("spike_rate", "loss_rate", "config_log")
                        if getattr(self, name))
        return (f"Schedule(\n    seed={self.seed!r},\n    nodes={self.nodes!r},\n    partitions={self.partitions!r},\n"
                f"    policy={self.policy!r},\n    ops=(\n{ops}    ),\n    faults_end_ms={self.faults_end_ms!r},\n"
                f"{rates})")

    def without(self, index: int) -> Schedule:
        """This schedule less its ``index``-th operation (the shrinker drops them one at a time)."""
        return dataclasses.replace(self, ops=self.ops[:index] + self.ops[index + 1:])


def _literal(op: Op) -> str:
    """``Write(120, 'node-1', 'k/3')``: positional, defaults left off."""
    values = [getattr(op, f.name) for f in fields(op)]
    while len(values) > 1 and fields(op)[len(values) - 1].default == values[-1]:
        values.pop()
    return f"{type(op).__name__}({', '.join(repr(v) for v in values)})"


# -- the generator -----------------------------------------------------------------------------


def generate(seed: int) -> Schedule:
    rng = random.Random(f"{seed}/schedule")
    count = 3 if rng.random() < 0.9 else rng.choice((2, 4))
    nodes = tuple(f"node-{i}" for i in range(count))
    partitions = 2 if rng.random() < 0.9 else rng.choice((1, 3))
    policy = "always" if rng.random() < 0.75 else "interval:100"
    clients = list(nodes[1:3]) if count > 2 else list(nodes)
    ops: list[Op] = [
        Write(rng.randrange(WRITE_WINDOW_MS), rng.choice(clients), f"k/{rng.randrange(10)}")
        for _ in range(rng.randint(25, 35))
    ]
    ops.extend(_faults(rng, nodes, partitions, clients))
    spike_rate = rng.choice((0.0, 0.0, 0.001, 0.01))
    loss_rate = rng.choice((0.0, 0.0, 0.0, 0.001, 0.01))
    # drawn from a stream of their own: the draws above are those of the schedules before them
    changes = random.Random(f"{seed}/configure")
    ops.extend(Configure(changes.randrange(WRITE_WINDOW_MS), changes.choice(CONFIGURED))
               for _ in range(changes.randint(2, 6)))
    ops.sort(key=lambda op: op.at_ms)  # stable: equal times keep the order they were drawn in
    return Schedule(seed, nodes, partitions, policy, tuple(ops), FAULTS_END_MS, spike_rate, loss_rate, True)


#: the kinds of fault, by weight
_WEIGHTS = {
    "crash": 25, "cut": 15, "isolate": 8, "power": 8, "pause": 10, "slow": 10, "reset": 12, "corrupt": 6,
    "rejoin": 5, "restart all": 1,
}


def _faults(rng: random.Random, nodes: tuple[str, ...], partitions: int, clients: list[str]) -> list[Fault]:
    kinds = list(_WEIGHTS)
    weights = list(_WEIGHTS.values())
    others = nodes[1:]
    crashes: Counter[str] = Counter()
    corrupted: set[int] = set()
    powered: set[str] = set()
    restarted = False
    out: list[Fault] = []
    wanted = rng.randint(2, 6)
    for _ in range(100):  # draws that break a bound are drawn again
        if len(out) == wanted:
            break
        kind = rng.choices(kinds, weights)[0]
        at = rng.randrange(WRITE_WINDOW_MS)
        fault: Fault | None = None
        if kind == "crash":
            target = _process(rng, nodes, partitions)
            if crashes[target] < MAX_CRASHES:
                crashes[target] += 1
                fault = CrashProcess(at, target)
        elif kind == "cut":
            a, b = rng.sample(nodes, 2)
            fault = Cut(at, a, b, _duration(rng), rng.random() < 0.7)
        elif kind == "isolate":
            fault = Isolate(at, rng.choice(nodes), _duration(rng))
        elif kind == "power":
            node = rng.choice(others) if others else None
            if node is not None and node not in powered:
                powered.add(node)
                fault = PowerCut(at, node, _duration(rng))
        elif kind == "pause":
            fault = Pause(at, rng.choice(nodes), _duration(rng))
        elif kind == "slow":
            a, b = rng.sample(nodes, 2)
            fault = Slow(at, a, b, _duration(rng), rng.choice((50, 200, 1000, 2000)))
        elif kind == "reset":
            partition = rng.randrange(partitions)
            fault = Reset(at, partition, rng.choice(clients) if rng.random() < 0.4 else None)
        elif kind == "corrupt":
            partition = rng.randrange(partitions)
            if partition not in corrupted:
                corrupted.add(partition)
                fault = Corrupt(at, rng.choice(nodes), partition)
        elif kind == "rejoin":
            fault = Rejoin(at, rng.choice(others)) if others else None
        elif not restarted:
            restarted = True
            fault = RestartAll(at)
        if fault is not None:
            out.append(fault)
    return out


def _process(rng: random.Random, nodes: tuple[str, ...], partitions: int) -> str:
    kind = rng.choices(("replica", "controller", "configuration-log", "agent", "gateway"), (12, 2, 1, 1, 2))[0]
    if kind == "replica":
        return f"partition-{rng.randrange(partitions)}@{rng.choice(nodes)}"
    if kind == "agent":
        return f"config-agent@{rng.choice(nodes)}"
    if kind == "gateway":
        return f"gateway@{rng.choice(nodes)}"
    return kind


def _duration(rng: random.Random) -> int:
    """How long a cut, an isolation, a pause or a slowdown lasts: mostly under the 3 s in which
    the head declares a node dead, sometimes well over it."""
    return rng.choice((rng.randint(100, 2_500), rng.randint(100, 2_500), rng.randint(3_000, 12_000)))
