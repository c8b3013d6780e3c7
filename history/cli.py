"""``canopy history``: the history jobs from the command line (a :data:`canopy.cli.Extension`).

::

    canopy history query SELECTOR [--from T] [--to T]
    canopy history timeseries PATH [--from T] [--to T] [--edits values|latest|all]
    canopy history replay-view SPEC [--from T] [--to T] [--serial]
    canopy history stats [--by topic|branch] [--depth N] [--from T] [--to T]
    canopy history export [--data-dir DIR]        a stopped server's journals, to Parquet now

Each job takes ``--history-dir`` (default ``$CANOPY_HISTORY_DIR``, else
``data/history``: ``canopy serve``'s default), ``--master`` (default
``local[*]``), and prints a table on stdout (``--limit`` rows, default
1,000), or one JSON object per line (``--json``), or writes every row to
``--out PATH`` (``--format parquet|csv|json``, else from the name's suffix;
Spark writes a directory of part files there). ``--progress`` (default: when
stderr is a terminal) shows the running stages' task counts on stderr.
In JSON lines and CSV a value that reads as JSON is that JSON; other values
are base64 (``value_base64``).
"""

from __future__ import annotations

import argparse
import base64
import datetime as dt
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

__all__ = ["add_history"]

DEFAULT_DIR = os.path.join("data", "history")
FORMATS = ("parquet", "csv", "json")
# what each job shows in a table or JSON line, in order (every column goes to --out parquet)
SHOWN = {
    "query": ("path", "timestamp", "sequence", "partition", "op", "type", "value"),
    "timeseries": ("path", "timestamp", "sequence", "op", "type", "value", "author", "original_sequence"),
    "replay-view": ("path", "timestamp", "op", "type", "value", "source_path", "source_sequence"),
}


def add_history(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--history-dir", default=os.environ.get("CANOPY_HISTORY_DIR") or DEFAULT_DIR, metavar="DIR",
                        help="the server's history_dir (default: $CANOPY_HISTORY_DIR, else data/history)")
    common.add_argument("--master", default=None, metavar="URL",
                        help="Spark master: local[*] (default), spark://HOST:PORT or any other Spark accepts")
    common.add_argument("--from", dest="start", default=None, metavar="TIME",
                        help="from this time (ms since the epoch or ISO 8601; UTC unless it says), inclusive")
    common.add_argument("--to", dest="end", default=None, metavar="TIME", help="up to this time, inclusive")
    common.add_argument("--json", action="store_true", help="one JSON object per line")
    common.add_argument("--out", default=None, metavar="PATH", help="write every row here (a Spark output directory)")
    common.add_argument("--format", choices=FORMATS, default=None, help="of --out (default: its suffix, else parquet)")
    common.add_argument("--limit", type=int, default=1000, metavar="N", help="rows shown in a table (default 1000)")
    common.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show stage and task counts on stderr (default: when stderr is a terminal)")

    history = commands.add_parser("history", help="queries over everything the broker journaled (PySpark)")
    jobs = history.add_subparsers(dest="job", required=True)
    query = jobs.add_parser("query", parents=[common], help="every change to matching topics, ordered per topic")
    query.add_argument("selector")
    series = jobs.add_parser("timeseries", parents=[common], help="a TIME_SERIES topic's events over its whole history")
    series.add_argument("path")
    series.add_argument("--edits", choices=("values", "latest", "all"), default="latest",
                        help="values: each event as last edited; latest (default): original and latest edit; "
                        "all: original and every edit")
    replay = jobs.add_parser("replay-view", parents=[common],
                             help="evaluate a topic view specification over its sources' history")
    replay.add_argument("specification")
    replay.add_argument("--serial", action="store_true", help="one Spark task (as the live evaluator runs)")
    stats = jobs.add_parser("stats", parents=[common], help="changes, bytes and rates per topic or branch")
    stats.add_argument("--by", choices=("topic", "branch"), default="topic")
    stats.add_argument("--depth", type=int, default=1, metavar="N", help="path segments naming a branch (default 1)")
    export = jobs.add_parser("export", help="export a stopped server's journals to its history now")
    export.add_argument("--data-dir", default="data", metavar="DIR", help="the server's data directory (default: data)")
    export.add_argument("--history-dir", default=None, metavar="DIR", help="default: <data-dir>/history")
    for parser in (query, series, replay, stats):
        parser.set_defaults(run=_run_job)
    export.set_defaults(run=_export)


def _err(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _installed() -> bool:
    import importlib.util

    if all(importlib.util.find_spec(m) is not None for m in ("pyspark", "pyarrow", "pandas")):
        return True
    _err("canopy history: the history jobs need the server extra: pip install 'canopy[server]'")
    return False


def _run_job(args: argparse.Namespace) -> int:
    if not _installed():
        return 2
    from history.jobs import History, HistoryError, check_selector, check_view, parse_time

    try:  # bad input is refused before Spark starts
        parse_time(args.start, "--from")
        parse_time(args.end, "--to")
        if args.job == "query":
            check_selector(args.selector)
        elif args.job == "replay-view":
            check_view(args.specification)
    except HistoryError as e:
        _err(f"canopy history: {e}")
        return 2
    out_format = args.format or (Path(args.out).suffix.lstrip(".").lower() if args.out else "")
    if args.out and out_format not in FORMATS:
        out_format = "parquet"
    from history.spark import Progress, session

    started = time.perf_counter()
    try:
        spark = session(args.master)
    except Exception as e:  # noqa: BLE001 - Spark says why in its own exception types
        _err(f"canopy history: Spark did not start (--master {args.master or 'local[*]'}): {_first_line(e)}")
        return 2
    if args.progress or (args.progress is None and sys.stderr.isatty()):
        _err(f"spark session ready in {time.perf_counter() - started:.1f} s ({spark.sparkContext.master})")
        progress: Any = Progress(spark, _err)
    else:
        progress = None
    try:
        h = History(spark, args.history_dir)
        if args.job == "query":
            df = h.query(args.selector, args.start, args.end)
        elif args.job == "timeseries":
            df = h.timeseries(args.path, args.start, args.end, args.edits)
        elif args.job == "replay-view":
            df = h.replay_view(args.specification, args.start, args.end, parallel=not args.serial)
        else:
            df = h.stats(args.by, args.start, args.end, args.depth)
        if progress is not None:
            progress.__enter__()
        try:
            if args.out:
                _write(df, args.out, out_format)
                _err(f"wrote {args.out} ({out_format})")
            elif args.json:
                for row in df.toLocalIterator():
                    print(json.dumps(_plain(row.asDict(), args.job), ensure_ascii=False, separators=(",", ":")))
            else:
                _table(df, SHOWN.get(args.job), args.limit)
        finally:
            if progress is not None:
                progress.__exit__(None, None, None)
    except HistoryError as e:
        _err(f"canopy history: {e}")
        return 2
    except Exception as e:  # noqa: BLE001 - a failed Spark job: one line, not a Java stack
        _err(f"canopy history: the job failed: {type(e).__name__}: {_first_line(e)}")
        return 1
    finally:
        spark.stop()
    return 0


def _first_line(error: BaseException) -> str:
    java = getattr(error, "java_exception", None)  # py4j's error: the Java exception says what went wrong
    try:
        text = str(java.toString() if java is not None else error).strip()
    except Exception:  # noqa: BLE001 - the gateway went with the failure
        text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def _plain(row: dict[str, Any], job: str) -> dict[str, Any]:
    """A row as JSON: the value as JSON when it reads as JSON, else base64; the ``date`` as text."""
    shown = SHOWN.get(job)
    out: dict[str, Any] = {}
    for key in shown or row.keys():
        if key == "value":
            text = row.get("value_json")
            if text is not None:
                out["value"] = json.loads(text)
            elif row.get("value") is not None:
                out["value_base64"] = base64.b64encode(bytes(row["value"])).decode()
            else:
                out["value"] = None
        else:
            value = row.get(key)
            out[key] = value.isoformat() if isinstance(value, dt.date) else value
    if job == "timeseries" and row.get("original_timestamp") is not None:
        out["original_timestamp"] = row["original_timestamp"]
        out["original_author"] = row.get("original_author")
    return out


def _write(df: Any, path: str, out_format: str) -> None:
    from pyspark.sql import functions as F

    if out_format != "parquet":  # neither CSV nor JSON writes binary or map columns as such
        for name, kind in df.dtypes:
            if kind == "binary":
                df = df.withColumn(name + "_base64", F.base64(name)).drop(name)
            elif kind.startswith("map"):
                df = df.withColumn(name, F.to_json(name))
    writer = df.write.mode("overwrite")
    if out_format == "csv":
        writer.option("header", True).csv(path)
    elif out_format == "json":
        writer.json(path)
    else:
        writer.parquet(path)


def _table(df: Any, columns: tuple[str, ...] | None, limit: int) -> None:
    names = list(columns) if columns else df.columns
    shown: list[list[str]] = []
    total = 0
    for row in df.toLocalIterator():
        total += 1
        if total > limit:
            continue
        plain = _plain(row.asDict(), "") if columns else row.asDict()
        cells = []
        for name in names:
            value = plain.get(name) if name != "value" else (
                row["value_json"] if row["value_json"] is not None
                else (f"<{len(row['value'])} bytes>" if row["value"] is not None else "")
            )
            if name == "timestamp" and isinstance(value, int):
                value = dt.datetime.fromtimestamp(value / 1000, dt.timezone.utc).isoformat(timespec="milliseconds")
            cells.append("" if value is None else str(value))
        shown.append(cells)
    widths = [max([len(n)] + [min(len(r[i]), 60) for r in shown]) for i, n in enumerate(names)]
    print("  ".join(n.ljust(w) for n, w in zip(names, widths)).rstrip())
    for cells in shown:
        print("  ".join((c if len(c) <= 60 else c[:57] + "...").ljust(w) for c, w in zip(cells, widths)).rstrip())
    if total > limit:
        print(f"... {total - limit} more rows (--limit, --json or --out for all)")
    elif not total:
        print("(no rows)")


def _export(args: argparse.Namespace) -> int:
    if not _installed():
        return 2
    from history.offline import ExportError, export_data_dir

    location = args.history_dir or os.path.join(args.data_dir, "history")
    try:
        for line in export_data_dir(args.data_dir, location):
            print(line, flush=True)
    except ExportError as e:
        _err(f"canopy history export: {e}")
        return 1
    return 0
