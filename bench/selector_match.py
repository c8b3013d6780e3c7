"""Selector matching: one path against 10,000 registered selectors of mixed kinds.

Prints the median time per ``match(path)`` for the subscription index without
its cache, with a warm cache, and for the brute-force scan of every selector
(the baseline), all in the same run over the same paths. Every answer is
checked against the brute force before timing.

    .venv/bin/python bench/selector_match.py [--selectors 10000] [--paths 500]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from topics.sublist import SubscriptionIndex  # noqa: E402

REGIONS, DESKS, INSTRUMENTS = 20, 25, 200


def make_selector(rng: random.Random) -> str:
    r, d, i = rng.randrange(REGIONS), rng.randrange(DESKS), rng.randrange(INSTRUMENTS)
    roll = rng.random()
    if roll < 0.40:
        return f">r{r}/d{d}/i{i}"
    if roll < 0.55:
        return f"?r{r}/d{d}/i{i // 10}[0-9]"
    if roll < 0.65:
        return f"?r{r}/.*/i{i}"
    if roll < 0.75:
        return f"?r{r}/d{d}//"
    if roll < 0.85:
        return f"*r{r}/d{d}/i{i // 10}.*"
    if roll < 0.90:
        return f"*r{r}/d[0-9]+/i{i}"
    if roll < 0.95:
        return f"#>r{r}/d{d}/i{i}////?r{(r + 1) % REGIONS}/d{d}/"
    return f"*.*/i{i}"  # no literal prefix: tried against every path


def timed(fn, paths: list[str], repeat: int) -> list[float]:  # type: ignore[no-untyped-def]
    samples = []
    for path in paths:
        start = time.perf_counter_ns()
        for _ in range(repeat):
            fn(path)
        samples.append((time.perf_counter_ns() - start) / repeat / 1000)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--selectors", type=int, default=10_000)
    parser.add_argument("--paths", type=int, default=500)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)

    cached: SubscriptionIndex[int] = SubscriptionIndex(cache_size=4096)
    uncached: SubscriptionIndex[int] = SubscriptionIndex(cache_size=0)
    start = time.perf_counter()
    for n in range(args.selectors):
        expression = make_selector(rng)
        cached.add(expression, n)
        uncached.add(expression, n)
    build_s = time.perf_counter() - start
    paths = [
        f"r{rng.randrange(REGIONS)}/d{rng.randrange(DESKS)}/i{rng.randrange(INSTRUMENTS)}"
        for _ in range(args.paths)
    ]
    hits = 0
    for path in paths:
        expected = uncached.match_brute_force(path)
        assert uncached.match(path) == expected, path
        assert cached.match(path) == expected, path  # also warms the cache
        hits += len(expected)

    brute = timed(uncached.match_brute_force, paths[: max(20, args.paths // 10)], 1)
    trie = timed(uncached.match, paths, 5)
    warm = timed(cached.match, paths, 50)

    print(f"selector match: {args.selectors} selectors ({len(set(uncached.selectors()))} distinct), "
          f"{args.paths} paths, {hits / len(paths):.1f} subscribers matched per path on average")
    print(f"  index built in {build_s:.2f} s")
    print(f"  {'method':34} {'median µs':>10} {'p90 µs':>10} {'vs brute force':>15}")
    base = statistics.median(brute)
    for name, samples in (
        ("brute force (baseline)", brute),
        ("subscription index, no cache", trie),
        ("subscription index, warm cache", warm),
    ):
        med = statistics.median(samples)
        p90 = statistics.quantiles(samples, n=10)[-1]
        print(f"  {name:34} {med:10.2f} {p90:10.2f} {base / med:14.1f}x")


if __name__ == "__main__":
    main()
