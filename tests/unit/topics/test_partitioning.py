"""Which partition owns a path, and which partitions a selector concerns (topics/partitioning.py)."""

from __future__ import annotations

from topics.partitioning import default_partition_count, partition_of, partitions_for
from topics.selectors import parse_selector


def test_partitioning_is_stable_and_spread() -> None:
    assert partition_of("a/b", 4) == partition_of("a/b", 4)
    counts = [0] * 4
    for i in range(4000):
        counts[partition_of(f"topic/{i}", 4)] += 1
    assert min(counts) > 800
    assert partitions_for(parse_selector(">a/b"), 4) == [partition_of("a/b", 4)]
    assert partitions_for(parse_selector("?a/b"), 4) == [partition_of("a/b", 4)]
    assert partitions_for(parse_selector("?a/.*"), 4) == [0, 1, 2, 3]
    assert default_partition_count(2) == 1 and default_partition_count(8) == 4
    assert default_partition_count(64) == 8 and default_partition_count(None) == 1
