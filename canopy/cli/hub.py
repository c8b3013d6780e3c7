"""``canopy hub``: OpenAjax-style publish and subscribe."""

from __future__ import annotations

import argparse

from canopy.cli.common import _follow, _parse_json, _reconnect_option, _session


def _hub(args: argparse.Namespace) -> int:
    with _session(args) as session:
        if args.action == "publish":
            try:
                value = _parse_json(args.value)
            except ValueError:  # not JSON (NaN and Infinity included): plain text
                value = args.value
            session.hub.publish(args.name, value)
        else:
            _follow(session.hub.subscribe(args.pattern), args.count, args.json, hub=True)
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy hub``."""
    hub = commands.add_parser("hub", help="OpenAjax-style names").add_subparsers(dest="action", required=True)
    publish = hub.add_parser("publish", parents=[client], help="publish a value to a dotted name")
    publish.add_argument("name")
    publish.add_argument("value")
    hsub = hub.add_parser("subscribe", parents=[client], help="print events for a dotted pattern")
    hsub.add_argument("pattern")
    hsub.add_argument("--count", type=int)
    hsub.add_argument("--json", action="store_true")
    _reconnect_option(hsub)
    for p in (publish, hsub):
        p.set_defaults(run=_hub)
