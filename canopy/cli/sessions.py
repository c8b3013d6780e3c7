"""``canopy session``: other sessions (client control): list them, their properties and
roles, subscribe and unsubscribe them, close them, watch what happens to them."""

from __future__ import annotations

import argparse
import json
import queue
import sys
import time
from typing import Any

from canopy.cli.common import _json_line, _session
from canopy.errors import CanopyError


def _target(args: argparse.Namespace) -> dict[str, Any]:
    session_id = getattr(args, "id", None) or getattr(args, "session_id", None)
    return {"session_id": session_id} if session_id else {"filter": args.filter}


def _count(args: argparse.Namespace, what: str, count: int) -> None:
    print(_json_line({what: count}) if args.json else count)


def _sessions(args: argparse.Namespace) -> int:
    with _session(args) as session:
        action = args.action
        if action == "list":
            found = session.clients.list(args.filter)
            for sid, props in sorted(found.items()):
                print(_json_line({"session": sid, "properties": props}) if args.json else f"{sid} {props}")
        elif action == "get":
            found = session.sessions.get_properties(**_target(args))
            for sid, props in sorted(found.items()):
                print(json.dumps({"session": sid, "properties": props}) if args.json else f"{sid} {props}")
        elif action == "close":
            _count(args, "closed", session.clients.close(**_target(args)))
        elif action == "roles":
            if not args.add and not args.remove:
                raise CanopyError("name roles with --add or --remove", "INVALID_REQUEST")
            _count(args, "sessions", session.clients.change_roles(**_target(args), remove=args.remove, add=args.add))
        elif action in ("subscribe", "unsubscribe"):
            method = session.clients.subscribe if action == "subscribe" else session.clients.unsubscribe
            target = _target(args)
            _count(args, "sessions", method(target.get("session_id"), args.selector, filter=target.get("filter")))
        elif action == "watch":
            return _watch(session, args)
        else:
            changes: dict[str, str | None] = {key: None for key in args.unset}
            for assignment in args.assignments:
                key, sep, value = assignment.partition("=")
                if not sep:
                    raise CanopyError(f"expected KEY=VALUE, got {assignment!r}", "INVALID_PROPERTIES")
                changes[key] = value
            _count(args, "changed", session.sessions.set_properties(changes, **_target(args)))
    return 0


def _watch(session: Any, args: argparse.Namespace) -> int:
    """Print session events as they come: ``--count`` of them, or until interrupted."""
    events: queue.Queue[Any] = queue.Queue()
    with session.clients.listen(events.put, args.filter, args.properties):
        seen = 0
        deadline = time.monotonic() + args.seconds if args.seconds else None
        while args.count is None or seen < args.count:
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                break
            try:
                event = events.get(timeout=wait)
            except queue.Empty:
                break
            seen += 1
            if args.json:
                print(_json_line({"session": event.session_id, "type": event.type, "state": event.state,
                                  "properties": event.properties, "changed": event.changed,
                                  "reason": event.reason}))
            else:
                detail = event.reason or (event.changed if event.type == "PROPERTIES" else event.properties)
                print(f"{event.session_id} {event.type} {event.state} {detail or ''}".rstrip())
            sys.stdout.flush()
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy session``."""
    sess = commands.add_parser(
        "session", help="other sessions (client control): list, properties, roles, subscriptions, close, watch",
    ).add_subparsers(dest="action", required=True)
    s_list = sess.add_parser("list", parents=[client], help="the sessions a filter matches (VIEW_SESSION)")
    s_list.add_argument("--filter", help="a session filter (default: every session)")
    s_get = sess.add_parser("get", parents=[client])
    s_set = sess.add_parser("set", parents=[client])
    s_close = sess.add_parser(
        "close", parents=[client],
        help="close sessions (VIEW_SESSION and MODIFY_SESSION); prints how many closed; their clients do not reconnect",
    )
    s_roles = sess.add_parser(
        "roles", parents=[client],
        help="take roles from and give roles to sessions (VIEW_SESSION and MODIFY_SESSION); prints how many",
    )
    s_sub = sess.add_parser(
        "subscribe", parents=[client],
        help="subscribe sessions to a selector (MODIFY_SESSION, SELECT_TOPIC on its prefix); prints how many",
    )
    s_unsub = sess.add_parser("unsubscribe", parents=[client], help="unsubscribe sessions from a selector")
    s_watch = sess.add_parser(
        "watch", parents=[client],
        help="print session events: open sessions first, then opened, closed, property changes "
             "(VIEW_SESSION and REGISTER_HANDLER)",
    )
    s_watch.add_argument("--filter", help="a session filter (default: every session)")
    s_watch.add_argument("--property", dest="properties", action="append", default=[], metavar="KEY",
                         help="a property the events carry (changes to it are events; *F: fixed ones, *U: user ones)")
    s_watch.add_argument("--count", type=int, help="stop after this many events")
    s_watch.add_argument("--seconds", type=float, help="stop after this long")
    for p in (s_get, s_set, s_close, s_roles, s_sub, s_unsub):
        which = p.add_mutually_exclusive_group(required=True)
        if p is not s_get and p is not s_set:
            which.add_argument("session_id", nargs="?", metavar="ID", help="a session id")
        which.add_argument("--id", help="a session id")
        which.add_argument("--filter", help="a session filter")
    for p in (s_list, s_get, s_set, s_close, s_roles, s_sub, s_unsub, s_watch):
        p.add_argument("--json", action="store_true", help="one JSON record per line")
        p.set_defaults(run=_sessions)
    s_roles.add_argument("--add", action="append", default=[], metavar="ROLE", help="a role to give")
    s_roles.add_argument("--remove", action="append", default=[], metavar="ROLE", help="a role to take")
    for p in (s_sub, s_unsub):
        p.add_argument("selector", metavar="SELECTOR", help="the topic selector")
    s_set.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    s_set.add_argument("--unset", action="append", default=[], metavar="KEY")
