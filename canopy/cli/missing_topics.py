"""``canopy missing-topics``: handle and list missing-topic handlers."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from canopy.cli.common import _json_line, _reconnect_option, _session


def _missing_topics(args: argparse.Namespace) -> int:
    """``canopy missing-topics handle``: print each notification, make the topic with
    ``--create``, answer proceed (or cancel with ``--cancel``), until interrupted or ``--count``."""
    import queue

    from topics.selectors import parse_selector

    with _session(args) as session:
        if args.action == "list":
            for token, path, sid in session.missing_topics.list():
                print(_json_line({"registration": token, "path": path, "session": sid}) if args.json
                      else f"{path}\t{sid}\t{token}")
            return 0
        heard: queue.Queue[int] = queue.Queue()

        def handle(notification: Any) -> bool:
            created = None
            if args.create is not None:
                path = parse_selector(notification.selector).path_prefix
                if path:
                    created = session.topics.add(path, args.create).value
            if args.json:
                record = {
                    "selector": notification.selector, "session": notification.session_id,
                    "properties": notification.properties, "servers": list(notification.servers),
                    "path": notification.path, "answer": "cancel" if args.cancel else "proceed",
                }
                if created is not None:
                    record["created"] = created
                print(_json_line(record), flush=True)
            else:
                made = f"; topic {created.lower()}" if created is not None else ""
                print(f"missing {notification.selector} (session {notification.session_id} via "
                      f"{' > '.join(notification.servers)}){made}; {'cancel' if args.cancel else 'proceed'}",
                      flush=True)
            heard.put(1)
            return not args.cancel

        session.missing_topics.add_handler(args.path, handle)
        print(f"canopy: handling missing topics under {args.path}", file=sys.stderr, flush=True)
        count = 0
        while args.count is None or count < args.count:
            heard.get()
            count += 1
        session.missing_topics.drain()  # the last answer reaches the server before the session ends
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy missing-topics``."""
    missing = commands.add_parser(
        "missing-topics", help="missing-topic handlers (subscriptions and fetches that match nothing)"
    ).add_subparsers(dest="action", required=True)
    handle = missing.add_parser(
        "handle", parents=[client], help="register a handler for PATH and print each notification until interrupted"
    )
    handle.add_argument("path", metavar="PATH")
    handle.add_argument("--create", metavar="TYPE", help="create the missing topic (the selector's path prefix) "
                        "with this type before answering proceed")
    handle.add_argument("--cancel", action="store_true", help="answer cancel: the request is abandoned")
    handle.add_argument("--count", type=int, default=None, metavar="N", help="stop after N notifications")
    handle.add_argument("--json", action="store_true", help="one JSON object per notification")
    _reconnect_option(handle)
    m_list = missing.add_parser("list", parents=[client], help="every registered handler")
    m_list.add_argument("--json", action="store_true")
    for p in (handle, m_list):
        p.set_defaults(run=_missing_topics)
