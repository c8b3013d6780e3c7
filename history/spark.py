"""A SparkSession for the history jobs, and progress on the terminal.

:func:`session` starts (or reuses) one: ``local[*]`` by default, any Spark
master URL otherwise (``spark://HOST:PORT`` for a standalone cluster; others
are passed through). Its Python workers run this interpreter
(``PYSPARK_PYTHON``), which has canopy and its pure packages: the executors
of a cluster on other machines need canopy installed the same way
(``pip install 'canopy[server]'``). Spark binds to 127.0.0.1 unless
``SPARK_LOCAL_IP`` says otherwise; the web UI is off. ``$CANOPY_HISTORY_JAVA_OPTIONS`` adds
options to the driver's JVM (:data:`JAVA_OPTIONS`).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["Progress", "session"]

LOG_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
#: more options for the driver's JVM (space-separated), e.g. ``-XX:TieredStopAtLevel=1``: a short
#: query on a small history then spends about 40 % less CPU (the JIT's second tier never starts),
#: a long job over a large one runs slower
JAVA_OPTIONS = "CANOPY_HISTORY_JAVA_OPTIONS"


def session(master: str | None = None, app: str = "canopy history", conf: dict[str, str] | None = None) -> Any:
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    builder = (
        SparkSession.builder.master(master or "local[*]").appName(app)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.executorEnv.PYSPARK_PYTHON", sys.executable)
        .config("spark.driver.extraJavaOptions", " ".join(
            [f"-Dlog4j2.configurationFile=file:{LOG_CONFIG}", *os.environ.get(JAVA_OPTIONS, "").split()]))
    )
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


class Progress:
    """Prints the running stages' task counts to ``out`` every ``every`` seconds while a job runs."""

    def __init__(self, spark: Any, out: Callable[[str], None], every: float = 0.5) -> None:
        self._tracker = spark.sparkContext.statusTracker()
        self._out = out
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="canopy-history-progress", daemon=True)
        self._last = ""

    def __enter__(self) -> Progress:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def line(self) -> str:
        parts = []
        for stage_id in sorted(self._tracker.getActiveStageIds()):
            info = self._tracker.getStageInfo(stage_id)
            if info is not None:
                parts.append(f"stage {stage_id}: {info.numCompletedTasks}/{info.numTasks} tasks"
                             + (f" ({info.numActiveTasks} running)" if info.numActiveTasks else ""))
        return "; ".join(parts)

    def _run(self) -> None:
        started = time.monotonic()
        while not self._stop.wait(self._every):
            try:
                text = self.line()
            except Exception:  # noqa: BLE001 - the context stopped under us: nothing more to show
                return
            if text and text != self._last:
                self._last = text
                self._out(f"[{time.monotonic() - started:.1f}s] {text}")
