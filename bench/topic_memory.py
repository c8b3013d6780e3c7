"""Memory per topic: 1,000,000 JSON topics with ~100-byte values.

Each measurement runs in a fresh interpreter and reports the growth of its
resident set size (RSS), so allocator reuse from one measurement cannot hide
another's cost. Printed side by side:

* ``payload``: the bytes of path text plus value, the information itself;
  everything else is bookkeeping (Python object headers included);
* ``dict baseline``: a plain ``dict`` from path to value bytes, the least a
  Python program can hold the same data in;
* ``canopy TopicTree``: the real topic tree (dict by path + segment trie +
  Topic objects with a shared specification).

    .venv/bin/python bench/topic_memory.py [--topics 1000000]
"""

from __future__ import annotations

import argparse
import gc
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def value_of(i: int) -> dict[str, object]:
    return {
        "id": i,
        "instrument": f"GB00B{i:07d}",
        "bid": 101.25 + (i % 97) / 100,
        "ask": 101.75 + (i % 89) / 100,
        "ccy": "GBP",
        "venue": "XLON-MAIN",
        "status": "open",
        "ts": 1_700_000_000_000 + i,
    }


def path_of(i: int) -> str:
    return f"bench/prices/g{i % 1000:03d}/t{i}"


def measure(kind: str, n: int) -> dict[str, float]:
    from topics import types as values
    from topics.specification import TopicSpecification
    from topics.tree import TopicTree
    from topics.types import TopicType

    encode = values.encode
    json_type = TopicType.JSON
    gc.collect()
    before = rss_bytes()
    start = time.perf_counter()
    if kind == "dict":
        table = {path_of(i): encode(json_type, value_of(i)) for i in range(n)}
        items = list(table.items())
    else:
        tree = TopicTree()
        spec = TopicSpecification.of("JSON")
        for i in range(n):
            path = path_of(i)
            tree.add(path, spec)
            tree.set_value(path, encode(json_type, value_of(i)), check=False)
        items = [(t.path, t.value or b"") for t in tree]
    elapsed = time.perf_counter() - start
    gc.collect()
    # everything the holder owns, path strings and value bytes included;
    # the `items` list of references is subtracted (16 bytes per item + tuples)
    grown = rss_bytes() - before - n * (8 + 56)
    payload = sum(len(p.encode()) + len(v) for p, v in items)
    return {
        "bytes_per_topic": grown / n,
        "payload_per_topic": payload / n,
        "value_bytes": sum(len(v) for _, v in items) / n,
        "seconds": elapsed,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--topics", type=int, default=1_000_000)
    parser.add_argument("--child", choices=["dict", "tree"])
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, args.topics)))
        return
    results = {}
    for kind in ("dict", "tree"):
        out = subprocess.run(
            [sys.executable, __file__, "--child", kind, "--topics", str(args.topics)],
            check=True,
            capture_output=True,
            text=True,
        )
        results[kind] = json.loads(out.stdout)
    d, t = results["dict"], results["tree"]
    print(f"topic memory: {args.topics:,} JSON topics, values {t['value_bytes']:.0f} bytes (CBOR)")
    print(f"  {'holder':28} {'bytes/topic':>12} {'build+encode s':>15}")
    print(f"  {'payload (path + value)':28} {d['payload_per_topic']:12.0f}")
    for name, r in (("dict baseline", d), ("canopy TopicTree", t)):
        print(f"  {name:28} {r['bytes_per_topic']:12.0f} {r['seconds']:15.2f}")
    print(f"  TopicTree / dict baseline: {t['bytes_per_topic'] / d['bytes_per_topic']:.2f}x")


if __name__ == "__main__":
    main()
