"""History test helpers: journals written with the broker's own Journal, and one SparkSession for these tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from history.store import Exporter
from replication.journal import Journal
from topics.changes import Change

T0 = 1_764_000_000_000  # 2025-11-24T16:00:00Z


@pytest.fixture(scope="package")
def spark() -> Iterator[Any]:
    """One local SparkSession (two cores) for the history tests: starting one costs ~6-10 s. Package
    scope: its context (executor threads, schedulers) stops after the last of them, not at the end
    of the run the other tests go on in; the gateway JVM idles on until the process ends."""
    from history.spark import session

    spark = session("local[2]", conf={"spark.sql.shuffle.partitions": "4", "spark.default.parallelism": "2"})
    try:
        yield spark
    finally:
        spark.stop()


def journal(data_dir: Path, partition: int = 0, segment_bytes: int = 4096) -> Journal:
    j = Journal.for_partition(data_dir, partition, segment_bytes=segment_bytes)
    j.recover()
    return j


def write(j: Journal, batches: Sequence[tuple[int, list[Change]]]) -> None:
    """Append each (timestamp, changes) batch."""
    for timestamp, changes in batches:
        j.append(changes, timestamp)


def export_all(j: Journal, location: Path | str) -> Any:
    j.roll()
    return Exporter(location, j.partition).export(j.closed_segments(), j.last_sequence)
