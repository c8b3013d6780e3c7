"""Which partition owns a path, and which partitions a selector concerns.

Paths are spread by a stable hash (CRC-32 of the UTF-8 path) modulo the
partition count, the same in every process and every run. A selector that
can match only one path concerns only that path's partition; any other
selector concerns them all.
"""

from __future__ import annotations

import zlib

from topics.selectors import Selector


def partition_of(path: str, count: int) -> int:
    return zlib.crc32(path.encode("utf-8")) % count


def partitions_for(selector: Selector, count: int) -> list[int]:
    literal = selector.literal_path
    if literal is not None:
        return [partition_of(literal, count)]
    return list(range(count))


def default_partition_count(cpus: int | None) -> int:
    """One partition per two cores (the gateways and Ray need the others), 1..8."""
    return max(1, min((cpus or 1) // 2, 8))
