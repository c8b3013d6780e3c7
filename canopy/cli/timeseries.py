"""``canopy ts``: append, edit, query a time series."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from canopy.cli.common import _json_line, _parse_value, _render, _session, _text
from canopy.errors import CanopyError


def _event_type(session: Any, path: str) -> str:
    found = session.topics.fetch(f">{path}", with_values=False, with_properties=True)
    if not found:
        raise CanopyError(f"no topic at {path!r}", "NO_SUCH_TOPIC")
    event_type = (found[0].properties or {}).get("TIME_SERIES_EVENT_VALUE_TYPE")
    if event_type is None:
        raise CanopyError(f"topic {path!r} is a {found[0].type.value} topic, not a TIME_SERIES topic", "INVALID_VALUE")
    return str(event_type)


def _print_meta(meta: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps({"sequence": meta.sequence, "timestamp": meta.timestamp, "author": meta.author}))
    else:
        print(f"{meta.sequence} {meta.timestamp} {meta.author}")


_QUERY_OPTIONS = (
    "from_sequence", "from_time", "from_last", "from_last_ms", "to_sequence", "to_time", "next", "next_ms",
    "previous", "previous_ms", "until_last", "until_last_ms",
)


def _ts(args: argparse.Namespace) -> int:
    with _session(args) as session:
        ts = session.time_series
        if args.action == "append":
            value = _parse_value(args.value, _event_type(session, args.path))
            _print_meta(ts.append(args.path, value, args.timestamp), args.json)
        elif args.action == "edit":
            value = _parse_value(args.value, _event_type(session, args.path))
            _print_meta(ts.edit(args.path, args.sequence, value), args.json)
        else:
            query = {k: getattr(args, k) for k in _QUERY_OPTIONS if getattr(args, k) is not None}
            result = ts.range_query(args.path, to_start=args.to_start, edits=args.edits, limit=args.limit, **query)
            for e in result.events:
                if args.json:
                    record: dict[str, Any] = {
                        "sequence": e.sequence, "timestamp": e.timestamp, "author": e.author, "value": _render(e.value),
                    }
                    if e.original is not None:
                        record["original_sequence"] = e.original.sequence
                    print(_json_line(record))
                else:
                    edit = f" (edit of {e.original.sequence})" if e.original is not None else ""
                    print(f"{e.sequence} {e.timestamp} {e.author or '-'} {_text(e.value)}{edit}")
            if not result.complete:
                print(f"canopy: {len(result.events)} of {result.selected_count} events shown (--limit)", file=sys.stderr)
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy ts``."""
    ts = commands.add_parser("ts", help="time series").add_subparsers(dest="action", required=True)
    append = ts.add_parser("append", parents=[client], help="append an event")
    append.add_argument("path")
    append.add_argument("value")
    append.add_argument("--timestamp", type=int, help="milliseconds since the epoch (default: the server's clock)")
    append.add_argument("--json", action="store_true")
    edit = ts.add_parser("edit", parents=[client], help="edit an event")
    edit.add_argument("path")
    edit.add_argument("sequence", type=int, help="sequence number of the original event")
    edit.add_argument("value")
    edit.add_argument("--json", action="store_true")
    query = ts.add_parser("query", parents=[client], help="query a range of events")
    query.add_argument("path")
    anchor = query.add_mutually_exclusive_group()
    for option in ("from_sequence", "from_time", "from_last", "from_last_ms"):
        anchor.add_argument("--" + option.replace("_", "-"), dest=option, type=int)
    span = query.add_mutually_exclusive_group()
    for option in ("to_sequence", "to_time", "next", "next_ms", "previous", "previous_ms", "until_last", "until_last_ms"):
        span.add_argument("--" + option.replace("_", "-"), dest=option, type=int)
    span.add_argument("--to-start", dest="to_start", action="store_true")
    query.add_argument("--edits", choices=["latest", "all"], help="the edit view instead of the value view")
    query.add_argument("--limit", type=int)
    query.add_argument("--json", action="store_true")
    for p in (append, edit, query):
        p.set_defaults(run=_ts)
