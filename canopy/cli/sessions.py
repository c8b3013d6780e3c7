"""``canopy session``: other sessions' properties, closing them."""

from __future__ import annotations

import argparse
import json

from canopy.cli.common import _session
from canopy.errors import CanopyError


def _sessions(args: argparse.Namespace) -> int:
    session_id = args.id or getattr(args, "session_id", None)
    target = {"session_id": session_id} if session_id else {"filter": args.filter}
    with _session(args) as session:
        if args.action == "close":
            print(session.sessions.close(**target))
        elif args.action == "get":
            found = session.sessions.get_properties(**target)
            for sid, props in sorted(found.items()):
                print(json.dumps({"session": sid, "properties": props}) if args.json else f"{sid} {props}")
        else:
            changes: dict[str, str | None] = {key: None for key in args.unset}
            for assignment in args.assignments:
                key, sep, value = assignment.partition("=")
                if not sep:
                    raise CanopyError(f"expected KEY=VALUE, got {assignment!r}", "INVALID_PROPERTIES")
                changes[key] = value
            print(session.sessions.set_properties(changes, **target))
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy session``."""
    sess = commands.add_parser("session", help="other sessions: their properties, closing them").add_subparsers(
        dest="action", required=True
    )
    s_get = sess.add_parser("get", parents=[client])
    s_set = sess.add_parser("set", parents=[client])
    s_close = sess.add_parser(
        "close", parents=[client],
        help="close sessions (VIEW_SESSION and MODIFY_SESSION); prints how many closed; their clients do not reconnect",
    )
    for p in (s_get, s_set, s_close):
        which = p.add_mutually_exclusive_group(required=True)
        if p is s_close:
            which.add_argument("session_id", nargs="?", metavar="ID", help="a session id")
        which.add_argument("--id", help="a session id")
        which.add_argument("--filter", help="a session filter")
        p.set_defaults(run=_sessions)
    s_get.add_argument("--json", action="store_true")
    s_set.add_argument("assignments", nargs="*", metavar="KEY=VALUE")
    s_set.add_argument("--unset", action="append", default=[], metavar="KEY")
