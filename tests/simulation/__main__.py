"""``python -m tests.simulation SEED [--trace]``: replay one schedule (``make simulate SEED=N``).

Prints the schedule as Python, then the outcome, or the violation with the tail of the trace
(``--trace``: the whole trace, also when the run passes).
"""

from __future__ import annotations

import argparse
import sys
import time

from tests.simulation.invariants import Violation
from tests.simulation.run import Sim
from tests.simulation.schedule import generate


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.simulation", description=__doc__.splitlines()[0])
    parser.add_argument("seed", type=int)
    parser.add_argument("--trace", action="store_true", help="print the whole trace")
    parser.add_argument("--tail", type=int, default=200, help="trace entries printed on a violation")
    options = parser.parse_args(argv)
    schedule = generate(options.seed)
    print(schedule.literal())
    sim = Sim(schedule, tracing=True)
    started = time.perf_counter()
    try:
        sim.play()
    except Violation as e:
        print(sim.world.format_trace(None if options.trace else options.tail))
        print(f"\nseed {options.seed}: VIOLATION {e}")
        return 1
    seconds = time.perf_counter() - started
    if options.trace:
        print(sim.world.format_trace(None))
    print(f"\nseed {options.seed}: {sim.outcome()} ({seconds * 1000:.0f} ms with the trace)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
