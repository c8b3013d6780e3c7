"""Seeded schedules against the replicas, the placement functions and the checker.

``make test`` runs seeds ``0 .. N-1`` (``N`` = ``$SIM_SCHEDULES``, default 10,000), in order, and
stops at the first violation with what replays it; ``make soak`` runs ``$SIM_SCHEDULES``
(default 1,000,000) seeds from a random base over every core. A write lost through a cause the
checker names and ``test_regressions.py`` keeps open (:data:`OPEN`, each with its strict
``xfail``) is counted as known, not failed.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from pathlib import Path

import pytest

from replication.replica import ReplicaState
from tests.simulation import __main__ as simulate
from tests.simulation.invariants import Violation
from tests.simulation.run import Outcome, Sim, run
from tests.simulation.schedule import PowerCut, Schedule, Write, generate
from tests.simulation.test_regressions import OPEN

ROOT = Path(__file__).resolve().parents[2]
#: seeds per task of the soak
CHUNK = 2_000


def _failure(seed: int, violation: Violation) -> str:
    return (f"seed {seed}: {violation}\n\nthe schedule (tests/simulation/test_regressions.py keeps one as a named "
            f"regression):\n{generate(seed).literal()}\n\nreplay it with its trace: make simulate SEED={seed}")


def test_schedules(capsys: pytest.CaptureFixture[str]) -> None:
    count = int(os.environ.get("SIM_SCHEDULES", 10_000))
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    known: list[tuple[int, str]] = []
    for seed in range(count):
        try:
            outcomes.append(run(seed))
        except Violation as e:
            if e.cause not in OPEN:
                failure = _failure(seed, e)
                break
            known.append((seed, e.cause))
    else:
        failure = None
    if failure is not None:
        pytest.fail(failure, pytrace=False)
    seconds = time.perf_counter() - started
    with capsys.disabled():
        print(f"\n{count} schedules in {seconds:.0f} s ({seconds / max(count, 1) * 1000:.1f} ms each): "
              f"{_summary(outcomes)}; {_known(known)}")


def _known(known: list[tuple[int, str]]) -> str:
    if not known:
        return "none lost a write through an open bug"
    causes = Counter(cause for _, cause in known)
    return (f"{len(known)} lost a write through an open bug of test_regressions.py ("
            + "; ".join(f"{n} through {cause}" for cause, n in causes.items())
            + f"; seeds {', '.join(str(seed) for seed, _ in known[:12])}{', ...' if len(known) > 12 else ''})")


def _summary(outcomes: list[Outcome]) -> str:
    if not outcomes:
        return "none converged"
    slowest = max(outcomes, key=lambda o: o.converged_ms)
    return (f"{len(outcomes)} converged, {sum(o.acknowledged for o in outcomes)} acknowledged writes "
            f"({sum(o.unknown for o in outcomes)} unknown, {sum(o.excused for o in outcomes)} lost to power cuts "
            f"under an interval policy or with a damaged only copy), {sum(o.failovers for o in outcomes)} failovers, "
            f"{sum(o.handovers for o in outcomes)} handovers, {sum(o.configured for o in outcomes)} configuration "
            f"changes made ({sum(o.refused for o in outcomes)} refused, {sum(o.undecided for o in outcomes)} "
            "undecided), "
            f"{sum(o.events for o in outcomes) // len(outcomes)} events/schedule, slowest convergence "
            f"{slowest.converged_ms / 1000:.1f} s (seed {slowest.seed})")


def digest(seed: int) -> str:
    sim = Sim(generate(seed), tracing=True)
    sim.play()
    return sim.world.trace_digest()


def test_a_run_is_the_same_under_any_hash_seed() -> None:
    """Nothing a run does depends on the order of a set of strings (``PYTHONHASHSEED``)."""
    code = "from tests.simulation.test_schedules import digest; print([digest(s) for s in (1, 2, 3)])"
    here = str([digest(s) for s in (1, 2, 3)])
    for hash_seed in ("0", "1"):
        done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": hash_seed},
                              cwd=ROOT, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert done.stdout.strip() == here


def test_the_checker_finds_answers_released_before_the_backup_has_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """A planted bug: a primary that answers at once. A crash then loses acknowledged writes,
    which the checker names with no open cause."""
    monkeypatch.setattr(ReplicaState, "hold", lambda self, writes: False)
    for seed in range(200):
        try:
            run(seed)
        except Violation as e:
            assert e.kind == "lost write" and e.cause is None, e
            return
    pytest.fail("200 schedules and no lost write")


@pytest.mark.parametrize("policy", ["interval:100", "always"])
def test_only_writes_every_copy_lost_to_power_cuts_under_interval_are_excused(policy: str) -> None:
    """Both nodes of the partition lose power 20-50 ms after the last writes: under ``interval``
    some are gone from every copy, and excused; under ``always`` none is lost."""
    excused = 0
    for seed in range(12):
        outcome = run(Schedule(seed, ("node-0", "node-1", "node-2"), 1, policy, (
            Write(1000, "node-1", "k/1"), Write(2000, "node-1", "k/2"), Write(2030, "node-2", "k/3"),
            PowerCut(2050, "node-1", 500), PowerCut(2050, "node-2", 500)), 5_000))
        assert outcome.acknowledged == 3
        excused += outcome.excused
    assert (excused > 0) == (policy != "always")


def test_a_seed_replays_with_its_schedule_and_outcome(capsys: pytest.CaptureFixture[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    assert simulate.main(["1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("Schedule(\n    seed=1,") and "seed 1: Outcome(seed=1, acknowledged=" in out
    monkeypatch.setattr(ReplicaState, "hold", lambda self, writes: False)  # the planted bug above
    assert simulate.main(["29", "--tail", "5"]) == 1
    out = capsys.readouterr().out
    assert "VIOLATION lost write" in out and "the last 5" in out


def _chunk(first: int, count: int) -> tuple[list[Outcome], list[tuple[int, str]], list[tuple[int, str]]]:
    """Seeds ``first ..``: their outcomes, the known (seed, cause) and the other (seed, kind)."""
    outcomes: list[Outcome] = []
    known: list[tuple[int, str]] = []
    violations: list[tuple[int, str]] = []
    for seed in range(first, first + count):
        try:
            outcomes.append(run(seed))
        except Violation as e:
            if e.cause in OPEN:
                known.append((seed, e.cause))
            else:
                violations.append((seed, e.kind))
    return outcomes, known, violations


@pytest.mark.soak
def test_a_million_schedules(capsys: pytest.CaptureFixture[str]) -> None:
    """Seeds from a random base (printed: a failing seed replays with ``make simulate``)."""
    count = int(os.environ.get("SIM_SCHEDULES", 1_000_000))
    base = random.SystemRandom().randrange(10**6, 10**12)
    processes = os.cpu_count() or 1
    with capsys.disabled():
        print(f"\nsimulating {count} schedules from seed {base} on {processes} processes", flush=True)
    started = time.perf_counter()
    outcomes: list[Outcome] = []
    known: list[tuple[int, str]] = []
    violations: list[tuple[int, str]] = []
    with ProcessPoolExecutor(processes, mp_context=get_context("spawn")) as pool:
        starts = range(base, base + count, CHUNK)
        for done, open_bugs, failed in pool.map(_chunk, starts, [min(CHUNK, base + count - s) for s in starts]):
            outcomes += done
            known += open_bugs
            violations += failed
    seconds = time.perf_counter() - started
    kinds = Counter(kind for _, kind in violations)
    with capsys.disabled():
        print(f"{count} schedules in {seconds:.0f} s: {_summary(outcomes)}; {_known(known)}; "
              f"{len(violations)} other violations {dict(kinds)}")
    if violations:
        seed, _ = violations[0]
        first: Violation | None = None
        try:
            run(seed)
        except Violation as e:
            first = e
        assert first is not None, f"seed {seed} broke an invariant in a process of its own, not here"
        pytest.fail(f"{len(violations)} of {count} schedules broke an invariant ({dict(kinds)}); the first seeds: "
                    f"{[s for s, _ in violations[:20]]}\n\n{_failure(seed, first)}", pytrace=False)
