"""``canopy topic``: add, set (under a constraint: ``--if-value``, ``--if-no-value``,
``--if-no-topic``, ``--if-json POINTER=JSON``, ``--if-no-json POINTER``), patch (an RFC 6902 JSON
patch), remove, fetch, subscribe, watch (topic notifications: topics coming and going, no values)."""

from __future__ import annotations

import argparse
import queue
from typing import Any

from canopy.cli.common import (
    _follow,
    _json_line,
    _parse_value,
    _reconnect_option,
    _render,
    _session,
    _text,
)
from canopy import constraints as c
from canopy.errors import CanopyError


def _properties(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise CanopyError(f"--property expects K=V, got {pair!r}", "INVALID_SPECIFICATION")
        out[key] = value
    return out


def _constraint(args: argparse.Namespace, type_name: str) -> c.Constraint | None:
    """The ``--if-...`` options of ``set`` and ``patch``, all of which must hold."""
    terms: list[c.Constraint] = []
    if getattr(args, "if_value", None) is not None:
        terms.append(c.value_equals(_parse_value(args.if_value, type_name), type_name))
    if getattr(args, "if_no_value", False):
        terms.append(c.no_value())
    if getattr(args, "if_no_topic", False):
        terms.append(c.no_topic())
    for pair in args.if_json or []:
        pointer, sep, text = pair.partition("=")
        if not sep:
            raise CanopyError(f"--if-json expects POINTER=JSON, got {pair!r}", "INVALID_CONSTRAINT")
        terms.append(c.json_with_value(pointer, _parse_value(text, "JSON")))
    for pointer in args.if_no_json or []:
        terms.append(c.json_without_value(pointer))
    if not terms:
        return None
    out = terms[0]
    for term in terms[1:]:
        out = out & term
    return out


def _topic(args: argparse.Namespace) -> int:
    with _session(args) as session:
        t = session.topics
        if args.action == "add":
            result = t.add(args.path, args.type, _properties(args.property))
            print(result.value)
        elif args.action == "set":
            type_name = args.type
            if type_name is None:
                found = t.fetch(f">{args.path}", with_values=False)
                if not found:
                    raise CanopyError(
                        f"no topic at {args.path!r}; give --type to create it", "NO_SUCH_TOPIC"
                    )
                type_name = found[0].type.value
            t.set(args.path, _parse_value(args.value, type_name), type_name, add_if_missing=args.type is not None,
                  retain=not args.no_retain, constraint=_constraint(args, type_name))
        elif args.action == "patch":
            t.apply_json_patch(args.path, args.patch, _constraint(args, "JSON"))
            print(_json_line({"patched": args.path}) if args.json else f"patched {args.path}")
        elif args.action == "remove":
            print(t.remove(args.selector))
        elif args.action == "fetch":
            rows = t.fetch(
                args.selector, not args.no_values, args.properties, args.types or None, args.limit
            )
            for row in rows:
                if args.json:
                    record: dict[str, Any] = {"path": row.path, "type": row.type.value, "value": _render(row.value)}
                    if args.properties:
                        record["properties"] = row.properties
                    print(_json_line(record))
                else:
                    extra = f" {row.properties}" if args.properties else ""
                    print(f"{row.path} {row.type.value} {_text(row.value)}{extra}")
        elif args.action == "watch":
            _watch(t, args)
        else:  # closing the session ends the subscription: no unsubscribe to wait for
            _follow(t.subscribe(args.selector), args.count, args.json, hub=False)
    return 0


def _watch(t: Any, args: argparse.Namespace) -> None:
    """Print a selector's topic notifications (and, with ``--descendants``, its descendant
    notifications) until ``--count`` of them; closing the session ends the listener."""
    if args.count == 0:
        return
    notifications: queue.Queue[Any] = queue.Queue()
    t.notifications(args.selector, notifications.put,
                    descendants=notifications.put if args.descendants else None)
    seen = 0
    while args.count is None or seen < args.count:
        n = notifications.get()
        if args.json:
            print(_json_line({"notification": n.type.value, "path": n.path, "type": n.topic_type,
                              "descendant": n.descendant}), flush=True)
        else:
            print(f"{n.type.value} {n.path} {'descendant' if n.descendant else n.topic_type}", flush=True)
        seen += 1


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy topic``."""
    topic = commands.add_parser("topic", help="topic operations").add_subparsers(dest="action", required=True)
    add = topic.add_parser("add", parents=[client], help="add a topic")
    add.add_argument("path")
    add.add_argument("--type", required=True)
    add.add_argument("--property", action="append", default=[], metavar="K=V")
    set_ = topic.add_parser("set", parents=[client], help="set a topic's value")
    set_.add_argument("path")
    set_.add_argument("value")
    set_.add_argument("--type")
    set_.add_argument("--no-retain", action="store_true",
                      help="deliver the value to the subscribers without keeping it as the topic's value")
    patch = topic.add_parser("patch", parents=[client], help="apply an RFC 6902 JSON patch to a JSON topic")
    patch.add_argument("path")
    patch.add_argument("patch", help="the patch: a JSON array of operations")
    patch.add_argument("--json", action="store_true")
    for p in (set_, patch):
        group = p.add_argument_group("constraints (all must hold, or nothing changes: UNSATISFIED_CONSTRAINT)")
        if p is set_:
            group.add_argument("--if-value", metavar="VALUE", help="only if the topic's value is VALUE")
            group.add_argument("--if-no-value", action="store_true", help="only if the topic has no value")
            group.add_argument("--if-no-topic", action="store_true", help="only if there is no topic (with --type)")
        group.add_argument("--if-json", action="append", metavar="POINTER=JSON",
                           help="only if the JSON value at POINTER is JSON (repeatable)")
        group.add_argument("--if-no-json", action="append", metavar="POINTER",
                           help="only if the JSON value has nothing at POINTER (repeatable)")
    remove = topic.add_parser("remove", parents=[client], help="remove the topics a selector selects")
    remove.add_argument("selector")
    fetch = topic.add_parser("fetch", parents=[client], help="fetch topics")
    fetch.add_argument("selector")
    fetch.add_argument("--json", action="store_true")
    fetch.add_argument("--properties", action="store_true", help="include topic properties")
    fetch.add_argument("--no-values", action="store_true")
    fetch.add_argument("--type", dest="types", action="append", help="only topics of this type (repeatable)")
    fetch.add_argument("--limit", type=int)
    sub = topic.add_parser("subscribe", parents=[client], help="print a selector's events")
    sub.add_argument("selector")
    sub.add_argument("--count", type=int, help="stop after N values")
    sub.add_argument("--json", action="store_true")
    _reconnect_option(sub)
    watch = topic.add_parser("watch", parents=[client],
                             help="print the topics a selector selects coming and going (topic notifications)")
    watch.add_argument("selector")
    watch.add_argument("--count", type=int, help="stop after N notifications")
    watch.add_argument("--json", action="store_true")
    watch.add_argument("--descendants", action="store_true",
                       help="also the immediate descendants of the selected paths that are not selected")
    _reconnect_option(watch)
    for p in (add, set_, patch, remove, fetch, sub, watch):
        p.set_defaults(run=_topic)
