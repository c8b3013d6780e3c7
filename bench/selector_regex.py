"""Selector regular expressions: RE2 (what canopy runs) against Python's re (the baseline).

Two tables, both engines in the same run:

* *everyday patterns*: the time of one ``fullmatch`` of a segment or path
  pattern that selectors commonly use (a hit and a miss), in ns. RE2 pays a
  fixed ~0.5 us per call crossing into the extension; Python's re is cheaper
  per call on such short texts.
* *the ReDoS of issue 11*: ``redos/(?:(?:[^!]*)*)*!`` against paths without
  ``!`` of growing length. Python's re backtracks exponentially (each extra
  character multiplies the time); it is run only while one match stays under
  ``--budget-s``. RE2 is linear: 1,000 paths of 200 and of 800 characters.

    .venv/bin/python bench/selector_regex.py [--budget-s 0.5]
"""

from __future__ import annotations

import argparse
import re
import sys
import time
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topics.selectors import compile_regex  # noqa: E402

EVERYDAY = [
    ("i1[0-9]", "i17", "d4"),
    ("x.*", "xanything", "anything"),
    ("[a-z]+_[0-9]{2}", "segment_42", "segment_4x"),
    ("r3/d[0-9]+/i17", "r3/d12/i17", "r3/d12/i18"),
    (".*/i17", "r3/d12/i17", "r3/d12/i123"),
]
REDOS = "redos/(?:(?:[^!]*)*)*!"


def per_call_ns(fn: object, text: str) -> float:
    number = 20_000
    best = min(timeit.repeat(lambda: fn(text), number=number, repeat=5))  # type: ignore[operator]
    return best / number * 1e9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--budget-s", type=float, default=0.5, help="longest single re match to wait for")
    args = parser.parse_args()

    print("everyday patterns: ns per fullmatch (best of 5)")
    print(f"  {'pattern':22} {'re hit':>8} {'RE2 hit':>8} {'re miss':>8} {'RE2 miss':>9}")
    for pattern, hit, miss in EVERYDAY:
        python, linear = re.compile(pattern), compile_regex(pattern)
        assert python.fullmatch(hit) and linear.fullmatch(hit)
        assert not python.fullmatch(miss) and not linear.fullmatch(miss)
        figures = [per_call_ns(f, t) for t in (hit, miss) for f in (python.fullmatch, linear.fullmatch)]
        print(f"  {pattern:22} {figures[0]:8.0f} {figures[1]:8.0f} {figures[2]:8.0f} {figures[3]:9.0f}")

    print(f"\nReDoS {REDOS!r} on paths without '!'")
    python = re.compile(REDOS)
    length = 8
    while True:
        path = "redos/" + "x" * (length - 6)
        start = time.perf_counter()
        assert python.fullmatch(path) is None
        took = time.perf_counter() - start
        print(f"  re,  one path of {length:3} characters: {took * 1e3:10.2f} ms")
        if took > args.budget_s / 4:
            break
        length += 2
    linear = compile_regex(REDOS)
    for length in (200, 800):
        paths = [f"redos/{i:04d}" + "x" * (length - 10) for i in range(1000)]
        start = time.perf_counter()
        for path in paths:
            assert linear.fullmatch(path) is None
        took = time.perf_counter() - start
        print(f"  RE2, 1,000 paths of {length} characters: {took * 1e3:7.2f} ms")


if __name__ == "__main__":
    main()
