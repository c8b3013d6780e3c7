"""``canopy metrics collector``: the metric collectors of every gateway's /metrics."""

from __future__ import annotations

import argparse
from typing import Any

from canopy.cli.common import _json_line, _session
from canopy.errors import CanopyError


def _metrics(args: argparse.Namespace) -> int:
    """``canopy metrics collector add|list|remove``: the metric collectors of /metrics."""
    if args.action == "add":
        if args.topics is not None and (args.group_by or args.remove_empty):
            raise CanopyError("--group-by and --remove-metrics-with-no-matches go with --sessions", "INVALID_COLLECTOR")
        if args.sessions is not None and args.group_by_type:
            raise CanopyError("--group-by-type goes with --topics", "INVALID_COLLECTOR")
        with _session(args) as session:
            if args.topics is not None:
                put = session.metrics.put_topic_collector(args.name, args.topics, group_by_type=args.group_by_type)
            else:
                put = session.metrics.put_session_collector(args.name, args.sessions, group_by=args.group_by,
                                                            remove_metrics_with_no_matches=args.remove_empty)
        print(f"{put['name']}: {'replaced' if put.get('replaced') else 'added'} ({_collector_text(put)})")
        return 0
    with _session(args) as session:
        if args.action == "remove":
            removed = session.metrics.remove_collector(args.name)
            print(f"{args.name}: removed" if removed else f"{args.name}: no such collector")
            return 0
        listed = session.metrics.list_collectors()
    for collector in listed:
        print(_json_line(collector) if args.json else f"{collector['name']}\t{_collector_text(collector)}")
    return 0


def _collector_text(c: dict[str, Any]) -> str:
    if c.get("kind") == "topic":
        return f"topics {c['selector']}" + (", by type" if c.get("group_by_type") else "")
    grouped = f", by {', '.join(c['group_by'])}" if c.get("group_by") else ""
    return f"sessions {c['filter']}{grouped}" + (", empty groups removed" if c.get("remove_metrics_with_no_matches")
                                                  else "")


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy metrics``."""
    metrics = commands.add_parser("metrics", help="what /metrics exports").add_subparsers(dest="what", required=True)
    collector = metrics.add_parser(
        "collector", help="metric collectors: labelled series over topics or sessions on every gateway's /metrics"
    ).add_subparsers(dest="action", required=True)
    c_add = collector.add_parser("add", parents=[client], help="define a metric collector (or replace one)")
    c_add.add_argument("name", metavar="NAME")
    over = c_add.add_mutually_exclusive_group(required=True)
    over.add_argument("--topics", metavar="SELECTOR", help="count the topics it selects and their subscriptions")
    over.add_argument("--sessions", metavar="FILTER", help="count the sessions this session filter matches")
    c_add.add_argument("--group-by-type", action="store_true", help="with --topics: a series per topic type")
    c_add.add_argument("--group-by", action="append", default=[], metavar="PROPERTY",
                       help="with --sessions: a series per value of this session property (repeat for more)")
    c_add.add_argument("--remove-metrics-with-no-matches", dest="remove_empty", action="store_true",
                       help="with --sessions: no series for a group no session matches now")
    c_list = collector.add_parser("list", parents=[client], help="every metric collector")
    c_list.add_argument("--json", action="store_true")
    c_remove = collector.add_parser("remove", parents=[client], help="remove a metric collector (its series go)")
    c_remove.add_argument("name", metavar="NAME")
    for p in (c_add, c_list, c_remove):
        p.set_defaults(run=_metrics)
