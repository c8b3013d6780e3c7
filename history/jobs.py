"""The history jobs on PySpark, for the CLI (``canopy history``) and notebooks.

::

    from pyspark.sql import SparkSession
    from history.jobs import History

    spark = SparkSession.builder.master("local[*]").getOrCreate()   # or history.spark.session()
    h = History(spark, "data/history")
    h.query("?sensors//", start="2026-11-25T00:00:00Z", end="2026-11-26").show()
    h.timeseries("prices/ts", start=0, end=None, edits="all").show()
    h.replay_view("map ?sensors// to views/<path(1)>", start=..., end=...).show()
    h.stats(by="branch", depth=1).show()

Every method returns a Spark DataFrame. Most are lazy (nothing runs until
the frame is read) once the paths a selector matches are known; ``timeseries``
runs its query on the driver at once, and ``replay_view`` spread over tasks
(``parallel=True``) runs the replay at once and caches its result, to see
whether two sources claimed one reference path (``unpersist()`` it when done). Times are milliseconds since the epoch, ISO 8601 text (no zone:
UTC) or ``datetime``; ``start`` and ``end`` are both inclusive; ``None``
leaves that side open. The rows are those of :mod:`history.store` (what
the journal holds: persistent topics; reference topics of views are
never journaled, :meth:`History.replay_view` derives them).

Matching paths: selectors are matched with the broker's own code
(:func:`topics.selectors.parse_selector`) against the distinct paths in the
window (on the driver), then the rows are filtered by those paths in
Spark: no Python runs per row. The time series query and the view replay
run the broker's pure code (:class:`topics.timeseries.EventLog`,
:class:`views.engine.ViewEngine`).
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from history.replay import replay
from history.store import updates_directory
from topics.properties import MAX_RANGE_LIMIT, TimeSeriesRange
from topics.errors import SelectorError
from topics.selectors import Selector, parse_selector
from topics.timeseries import Anchor, Event, EventLog, RangeQuery, Span, ViewKind
from views.parser import ViewSpecError, parse_view
from views.spec import ViewSpec

__all__ = ["EDITS", "History", "HistoryError", "check_selector", "check_view", "parse_time"]

EDITS = {"values": ViewKind.VALUES, "latest": ViewKind.LATEST_EDITS, "all": ViewKind.ALL_EDITS}
BY = ("topic", "branch")
_DIGITS = re.compile(r"-?\d+")
_MATCHED_INLINE = 10_000  # more matched paths than this are joined (broadcast), not listed in the plan


class HistoryError(ValueError):
    """A history job cannot run as asked (bad time, selector, specification or option)."""


def parse_time(value: Any, what: str = "time") -> int | None:
    """Milliseconds since the epoch from ms, ISO 8601 text (UTC unless it names a zone) or a datetime."""
    if value is None or isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str):
        text = value.strip()
        if _DIGITS.fullmatch(text):
            return int(text)
        try:
            moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00") if text.endswith("Z") else text)
        except ValueError:
            raise HistoryError(
                f"{what} {value!r} is neither milliseconds since the epoch nor ISO 8601 (2026-11-25T10:00:00Z)"
            ) from None
    else:
        raise HistoryError(f"{what} must be milliseconds, ISO 8601 text or a datetime, got {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.timezone.utc)
    return int(moment.timestamp() * 1000)


def check_selector(selector: str) -> Selector:
    try:
        return parse_selector(selector)
    except SelectorError as e:
        raise HistoryError(f"selector {selector!r}: {e}") from None


def check_view(specification: str) -> ViewSpec:
    """The parsed specification, if the history can replay it."""
    try:
        spec = parse_view(specification)
    except ViewSpecError as e:
        raise HistoryError(f"view specification: {e}") from None
    if spec.remote is not None:
        raise HistoryError(f"the view reads server {spec.remote!r}: its history is that server's")
    return spec


def spark_schema() -> Any:
    from pyspark.sql.types import (
        BinaryType, IntegerType, LongType, MapType, StringType, StructField, StructType,
    )

    text, number = StringType(), LongType()
    return StructType([
        StructField("partition", IntegerType()), StructField("sequence", number), StructField("timestamp", number),
        StructField("path", text), StructField("op", text), StructField("type", text),
        StructField("properties", MapType(text, text)), StructField("value", BinaryType()),
        StructField("value_json", text), StructField("author", text), StructField("event_sequence", number),
        StructField("event_timestamp", number), StructField("original_sequence", number),
        StructField("original_timestamp", number), StructField("original_author", text),
    ])


def _replay_schema() -> Any:
    from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

    return StructType([
        StructField("path", StringType()), StructField("timestamp", LongType()), StructField("op", StringType()),
        StructField("type", StringType()), StructField("value", BinaryType()), StructField("value_json", StringType()),
        StructField("source_path", StringType()),
        StructField("source_partition", IntegerType()), StructField("source_sequence", LongType()),
    ])


def _day(ms: int) -> str:
    return dt.datetime.fromtimestamp(ms / 1000, dt.timezone.utc).strftime("%Y-%m-%d")


def _window(start: Any, end: Any) -> tuple[int | None, int | None]:
    lo, hi = parse_time(start, "--from"), parse_time(end, "--to")
    if lo is not None and hi is not None and lo > hi:
        raise HistoryError(f"the window ends ({hi}) before it starts ({lo})")
    return lo, hi


class History:
    """The history at ``location`` (``history_dir`` of the server: a path Spark can read)."""

    def __init__(self, spark: Any, location: str | Path) -> None:
        self.spark = spark
        self.location = str(location)

    # -- the rows ----------------------------------------------------------------

    def updates(self, start: Any = None, end: Any = None) -> Any:
        """Every journaled change in the window (with its ``date``), unordered."""
        from pyspark.sql import functions as F

        lo, hi = _window(start, end)
        directory = updates_directory(self.location)
        local = "://" not in self.location
        if local and not any(directory.glob("date=*/*.parquet")):
            df = self.spark.createDataFrame([], spark_schema()).withColumn("date", F.lit(None).cast("date"))
        else:
            df = self.spark.read.schema(spark_schema()).option("basePath", str(directory)).parquet(
                str(directory / "date=*") if local else f"{self.location.rstrip('/')}/updates/date=*"
            )
        if lo is not None:
            df = df.where((F.col("date") >= F.lit(_day(lo)).cast("date")) & (F.col("timestamp") >= lo))
        if hi is not None:
            df = df.where((F.col("date") <= F.lit(_day(hi)).cast("date")) & (F.col("timestamp") <= hi))
        return df

    def _matching(self, df: Any, selector: str) -> Any:
        """``df``'s rows whose path ``selector`` matches."""
        from pyspark.sql import functions as F

        chosen = check_selector(selector)
        prefix = chosen.path_prefix
        candidates = df.where(F.col("path").startswith(prefix)) if prefix else df
        paths = [r[0] for r in candidates.select("path").distinct().collect() if chosen.matches(r[0])]
        if len(paths) <= _MATCHED_INLINE:
            return df.where(F.col("path").isin(paths))
        matched = self.spark.createDataFrame([(p,) for p in paths], "path string")
        return df.join(F.broadcast(matched), "path")

    # -- the jobs ----------------------------------------------------------------

    def query(self, selector: str, start: Any = None, end: Any = None) -> Any:
        """Every change to the topics ``selector`` matches in the window, ordered per topic."""
        return self._matching(self.updates(start, end), selector).orderBy("path", "partition", "sequence")

    def timeseries(self, path: str, start: Any = None, end: Any = None, edits: str = "latest") -> Any:
        """The events of TIME_SERIES topic ``path`` whose original event time is in the window,
        with the live range query's edit semantics (``values``: each event as last edited;
        ``latest``: the original and its latest edit; ``all``: the original and every edit).
        A topic removed and made again is queried per life, oldest first."""
        from pyspark.sql import functions as F

        if edits not in EDITS:
            raise HistoryError(f"--edits must be one of {', '.join(EDITS)}, got {edits!r}")
        lo, hi = _window(start, end)
        when = F.coalesce(F.col("original_timestamp"), F.col("event_timestamp"))
        chosen = F.col("op").isin("add", "remove")
        if lo is not None:
            chosen = chosen | (F.col("op").isin("append", "edit") & (when >= lo) & ((when <= hi) if hi is not None else F.lit(True)))
        elif hi is not None:
            chosen = chosen | (F.col("op").isin("append", "edit") & (when <= hi))
        else:
            chosen = chosen | F.col("op").isin("append", "edit")
        rows = self.updates().where((F.col("path") == path) & chosen).orderBy("partition", "sequence")
        query = RangeQuery(
            Anchor.TIME if lo is not None else Anchor.START, lo or 0,
            Span.TO_TIME if hi is not None else Span.END, hi or 0, EDITS[edits],
        )
        out: list[tuple[Any, ...]] = []
        life: EventLog | None = None
        kind: str | None = None

        def close() -> None:
            if life is not None:
                for e in life.query(query).events:
                    out.append((path, e.timestamp, e.sequence, "edit" if e.is_edit else "append", kind, e.value,
                                e.author, e.original_sequence, e.original_timestamp, e.original_author))

        for row in rows.toLocalIterator():
            if row["op"] in ("add", "remove"):
                close()
                life = EventLog(TimeSeriesRange(limit=MAX_RANGE_LIMIT)) if row["op"] == "add" else None
                continue
            if life is None:  # its add is older than the retained history
                life = EventLog(TimeSeriesRange(limit=MAX_RANGE_LIMIT))
            kind = row["type"]
            life.put(Event(row["event_sequence"], row["event_timestamp"], row["author"] or "", bytes(row["value"]),
                           row["original_sequence"], row["original_timestamp"], row["original_author"]))
        close()
        from history.store import value_json

        schema = ("path string, timestamp long, sequence long, op string, type string, value binary, author string, "
                  "original_sequence long, original_timestamp long, original_author string, value_json string")
        return self.spark.createDataFrame([(*r, value_json(r[4], r[5])) for r in out], schema)

    def replay_view(self, specification: str, start: Any = None, end: Any = None, parallel: bool = True) -> Any:
        """The reference topics view ``specification`` makes from the history in the window:
        its sources' state when the window opens, then every change, through the live view
        engine inside Spark tasks. Sources are spread over tasks by path unless the view
        inserts other topics (one task then); when two sources of one view make the same
        reference path, the replay runs again in one task, so the first claimant wins as live.
        Ordered by reference path, then time."""
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        spec = check_view(specification)
        lo, hi = _window(start, end)
        rows = self.updates(None, hi)
        if not spec.inserts:
            rows = self._matching(rows, str(spec.selector))
        else:
            parallel = False
        columns = ["path", "timestamp", "partition", "sequence", "op", "type", "properties", "value", "author",
                   "event_sequence", "event_timestamp", "original_sequence", "original_timestamp", "original_author"]
        if lo is None:
            window = rows.select(*columns)
            opening = lo_time = None
        else:
            lo_time = lo
            window = rows.where(F.col("timestamp") >= lo).select(*columns)
            before = rows.where(F.col("timestamp") < lo)
            newest = Window.partitionBy("path").orderBy(F.col("partition").desc(), F.col("sequence").desc())
            last = (before.where(F.col("op").isin("add", "set", "remove"))
                    .withColumn("_n", F.row_number().over(newest)).where(F.col("_n") == 1))
            added = (before.where(F.col("op") == "add").withColumn("_n", F.row_number().over(newest))
                     .where(F.col("_n") == 1).select("path", F.col("properties").alias("_props"),
                                                     F.col("type").alias("_type")))
            opening = (last.where(F.col("op") != "remove").join(added, "path", "left")
                       .select("path", F.lit(lo).cast("long").alias("timestamp"), "partition", "sequence",
                               F.lit("snapshot").alias("op"), F.coalesce("_type", "type").alias("type"),
                               F.col("_props").alias("properties"), "value", "author", "event_sequence",
                               "event_timestamp", "original_sequence", "original_timestamp", "original_author"))
        data = window.withColumn("_first", F.lit(1))
        if opening is not None:
            data = opening.withColumn("_first", F.lit(0)).unionByName(data)
        result = self._replay(data, specification, lo_time, hi, parallel)
        if parallel:
            result = result.cache()
            contested = (result.where(F.col("source_path").isNotNull()).groupBy("path")
                         .agg(F.countDistinct("source_path").alias("n")).where(F.col("n") > 1).limit(1).count())
            if contested:
                result.unpersist()
                result = self._replay(data, specification, lo_time, hi, False)
        return result.orderBy("path", "timestamp", "source_partition", "source_sequence")

    def _replay(self, data: Any, specification: str, start: int | None, end: int | None, parallel: bool) -> Any:
        tasks = max(1, self.spark.sparkContext.defaultParallelism) if parallel else 1
        ordered = data.repartition(tasks, "path") if parallel else data.repartition(1)
        ordered = ordered.sortWithinPartitions("_first", "timestamp", "partition", "sequence").drop("_first")
        return ordered.mapInArrow(_replay_batches(specification, end), _replay_schema())

    def stats(self, by: str = "topic", start: Any = None, end: Any = None, depth: int = 1) -> Any:
        """Per topic (``by="topic"``) or per branch (the first ``depth`` path segments): changes,
        value bytes, first and last change, and changes per second over the window (or, when
        the window is open, between the first and the last change)."""
        from pyspark.sql import functions as F

        if by not in BY:
            raise HistoryError(f"--by must be topic or branch, got {by!r}")
        if not isinstance(depth, int) or depth < 1:
            raise HistoryError(f"--depth must be a positive integer, got {depth!r}")
        lo, hi = _window(start, end)
        df = self.updates(lo, hi)
        key = F.col("path") if by == "topic" else F.substring_index("path", "/", depth)
        out = df.groupBy(key.alias(by)).agg(
            F.count(F.lit(1)).alias("changes"),
            F.sum(F.coalesce(F.length("value"), F.lit(0))).alias("bytes"),
            F.sum(F.when(F.col("op") == "add", 1).otherwise(0)).alias("added"),
            F.sum(F.when(F.col("op") == "remove", 1).otherwise(0)).alias("removed"),
            F.min("timestamp").alias("first"), F.max("timestamp").alias("last"),
        )
        if lo is not None and hi is not None:
            seconds = F.lit(max(hi - lo, 1) / 1000)
        else:
            seconds = F.greatest(F.col("last") - F.col("first"), F.lit(1)) / 1000
        return out.withColumn("per_second", F.round(F.col("changes") / seconds, 3)).orderBy(by)


def _replay_batches(specification: str, end: int | None) -> Any:
    """The function Spark runs per task: Arrow batches of ordered rows in, reference topic changes out."""

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        def rows() -> Iterator[dict[str, Any]]:
            for batch in batches:
                yield from batch.to_pylist()

        out: list[tuple[Any, ...]] = []
        schema = pa.schema([
            ("path", pa.string()), ("timestamp", pa.int64()), ("op", pa.string()), ("type", pa.string()),
            ("value", pa.binary()), ("value_json", pa.string()), ("source_path", pa.string()), ("source_partition", pa.int32()),
            ("source_sequence", pa.int64()),
        ])
        for item in replay(specification, rows(), end):
            out.append(item)
            if len(out) >= 10_000:
                yield pa.RecordBatch.from_arrays([pa.array(c, t.type) for c, t in zip(zip(*out), schema)], schema=schema)
                out = []
        if out:
            yield pa.RecordBatch.from_arrays([pa.array(c, t.type) for c, t in zip(zip(*out), schema)], schema=schema)

    return run


