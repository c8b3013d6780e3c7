"""Schedules: drawn from a seed within their bounds, and printed as Python that gives them back."""

from __future__ import annotations

from collections import Counter

import tests.simulation.schedule as schedule_module
from tests.simulation.schedule import (
    Corrupt,
    CrashProcess,
    Cut,
    PowerCut,
    Rejoin,
    Reset,
    RestartAll,
    Schedule,
    Write,
    generate,
)

SEEDS = range(500)


def test_the_same_seed_gives_the_same_schedule() -> None:
    assert generate(11) == generate(11)
    assert generate(11) != generate(12)


def test_the_literal_evaluates_to_the_same_schedule() -> None:
    names = {name: getattr(schedule_module, name) for name in schedule_module.__all__}
    for seed in range(100):
        schedule = generate(seed)
        assert eval(schedule.literal(), names) == schedule


def test_the_literal_is_readable() -> None:
    schedule = Schedule(3, ("node-0", "node-1"), 1, "always",
                        (Write(5, "node-1", "k/1"), Cut(9, "node-0", "node-1", 200), Reset(10, 0)), 10_000)
    assert schedule.literal() == (
        "Schedule(\n    seed=3,\n    nodes=('node-0', 'node-1'),\n    partitions=1,\n    policy='always',\n"
        "    ops=(\n        Write(5, 'node-1', 'k/1'),\n        Cut(9, 'node-0', 'node-1', 200),\n"
        "        Reset(10, 0),\n    ),\n    faults_end_ms=10000,\n)")
    assert schedule.without(1).ops == (Write(5, "node-1", "k/1"), Reset(10, 0))
    lossy = Schedule(3, ("node-0",), 1, "always", (), 10_000, spike_rate=0.01, loss_rate=0.001)
    assert lossy.literal().endswith("faults_end_ms=10000,\n    spike_rate=0.01,\n    loss_rate=0.001,\n)")


def test_every_schedule_keeps_its_bounds() -> None:
    for seed in SEEDS:
        s = generate(seed)
        assert [op.at_ms for op in s.ops] == sorted(op.at_ms for op in s.ops)
        assert s.head == "node-0" and 2 <= len(s.nodes) <= 4 and 1 <= s.partitions <= 3
        assert 25 <= len(s.writes) <= 35 and 2 <= len(s.faults) <= 6
        assert all(op.at_ms < s.faults_end_ms for op in s.ops)
        assert all(w.client in s.nodes for w in s.writes)
        crashes = Counter(op.target for op in s.faults if isinstance(op, CrashProcess))
        assert max(crashes.values(), default=0) <= 5
        assert not any(isinstance(op, (PowerCut, Rejoin)) and op.node == s.head for op in s.faults)
        corrupted = [op.partition for op in s.faults if isinstance(op, Corrupt)]
        assert len(corrupted) == len(set(corrupted)) and all(p < s.partitions for p in corrupted)
        assert sum(isinstance(op, RestartAll) for op in s.faults) <= 1


def test_the_mix_is_mostly_three_nodes_two_partitions_and_every_fault() -> None:
    schedules = [generate(seed) for seed in SEEDS]
    assert 0.8 < sum(len(s.nodes) == 3 for s in schedules) / len(schedules) < 0.97
    assert 0.8 < sum(s.partitions == 2 for s in schedules) / len(schedules) < 0.97
    assert 0.1 < sum(s.policy != "always" for s in schedules) / len(schedules) < 0.4
    kinds = Counter(type(op).__name__ for s in schedules for op in s.faults)
    assert set(kinds) == {"CrashProcess", "PowerCut", "Pause", "Cut", "Isolate", "Slow", "Reset", "Corrupt",
                          "Rejoin", "RestartAll"}
    assert kinds.most_common(1)[0][0] == "CrashProcess"
    assert 0.4 < sum(s.spike_rate > 0 for s in schedules) / len(schedules) < 0.6
    assert 0.3 < sum(s.loss_rate > 0 for s in schedules) / len(schedules) < 0.5
