"""A partition's exports, in a process of their own: ``python -m history.export_worker`` reads
one JSON job per line on stdin and answers each with its :class:`~history.store.ExportReport`
as one JSON line on stdout, until stdin closes (its partition stopped or died).

A partition runs its exports this way (:class:`ExportProcess`) so that decoding records and
writing Parquet never take its interpreter lock: done on a thread of the partition's process,
an export held up its event loop (``bench/broker.py`` p99 latency went from ~4 ms to 45-70 ms
while one ran). The process is started once and kept (it imports pyarrow once), and runs at a
lower priority (nice 10): the history can wait, the data plane cannot.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import asdict
from pathlib import Path
from typing import Any

from history.store import Exporter, ExportReport
from replication.journal import Segment

__all__ = ["ExportFailed", "ExportProcess"]


class ExportFailed(Exception):
    """The export process failed (what it said is in the message) or was stopped."""


class ExportProcess:
    """The export process of one partition's :class:`~history.store.Exporter` (started when first
    needed, again after it died); :meth:`export` blocks: call it from a worker thread."""

    def __init__(self, exporter: Exporter) -> None:
        self.exporter = exporter
        self._child: subprocess.Popen[str] | None = None
        self._lock = threading.Lock()
        self._stopped = False

    def export(self, segments: list[Segment], upto: int) -> ExportReport:
        job = {
            "location": self.exporter.location, "partition": self.exporter.partition,
            "retention_days": self.exporter.retention_days, "upto": upto,
            "segments": [[str(s.path), s.first_sequence, s.last_sequence] for s in segments],
        }
        with self._lock:
            child = self._started()
            assert child.stdin is not None and child.stdout is not None
            try:
                child.stdin.write(json.dumps(job) + "\n")
                child.stdin.flush()
                line = child.stdout.readline()
            except OSError as e:
                raise ExportFailed(f"the export process went away: {e}") from e
        if not line:
            raise ExportFailed(f"the export process exited ({child.poll()}); its log is the partition's")
        data = json.loads(line)
        if "error" in data:
            raise ExportFailed(data["error"])
        report = ExportReport(**{**data, "gaps": [tuple(g) for g in data["gaps"]]})
        self.exporter.record(report)
        return report

    def start(self) -> None:
        """Start the process now (it imports pyarrow before it reads a job), so that an export
        soon after -- the one a clean stop makes, within its bound -- does not wait for it."""
        with self._lock:
            self._started()

    def _started(self) -> subprocess.Popen[str]:
        if self._stopped:
            raise ExportFailed("the export process was stopped")
        child = self._child
        if child is None or child.poll() is not None:
            child = self._child = subprocess.Popen(
                [sys.executable, "-m", "history.export_worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True,
            )
        return child

    def stop(self) -> None:
        """End the process (an export in progress leaves whole or temporary files: the next goes on)."""
        self._stopped = True
        child = self._child
        if child is not None and child.poll() is None:
            child.kill()
            child.wait()


def main() -> int:
    try:
        os.nice(10)
    except OSError:
        pass
    importlib.import_module("pyarrow.parquet")  # before the first job: a started process is ready to export
    exporters: dict[tuple[str, int], Exporter] = {}  # kept between jobs: their retention clock too
    for line in sys.stdin:
        job: dict[str, Any] = json.loads(line)
        key = (str(job["location"]), int(job["partition"]))
        exporter = exporters.get(key)
        if exporter is None:
            exporter = exporters[key] = Exporter(key[0], key[1], int(job["retention_days"]))
        segments = [Segment(Path(p), int(first), int(last)) for p, first, last in job["segments"]]
        try:
            answer: dict[str, Any] = asdict(exporter.export(segments, int(job["upto"])))
        except Exception as e:  # noqa: BLE001 - said to the partition, which logs it and retries
            answer = {"error": f"{type(e).__name__}: {e}"}
        print(json.dumps(answer), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
