"""``canopy fanout``: this server's fan-out connections to its primaries."""

from __future__ import annotations

import argparse
import os

from canopy.cli.common import _json_line, _seconds, _session, connection_options_except
from canopy.errors import CanopyError


def _fanout(args: argparse.Namespace) -> int:
    if args.action == "add":
        if (args.link_principal is None) != (args.link_password is None):
            raise CanopyError("give --principal and --password together (or neither: anonymous)", "INVALID_FANOUT")
        with _session(args) as session:
            added = session.fanout.add(
                args.name, args.primary, args.link, principal=args.link_principal, password=args.link_password,
                retry_delay=args.retry_delay, reconnect_timeout=args.link_reconnect_timeout,
            )
        print(f"{added['name']}: mirroring {', '.join(added['links'])} from {', '.join(added['primaries'])}")
        return 0
    if args.action == "remove":
        with _session(args) as session:
            removed = session.fanout.remove(args.name)
        print(f"{args.name}: removed" if removed else f"{args.name}: no such connection")
        return 0
    with _session(args) as session:
        listed = session.fanout.list()
    for connection in listed:
        if args.json:
            print(_json_line(connection))
            continue
        lag = connection.get("lag_ms")
        print(f"{connection['name']}\t{connection['state']}\t{', '.join(connection.get('primaries', []))}"
              + (f"\tlag {lag:g} ms" if lag is not None else "")
              + (f"\t{connection['error']}" if connection.get("error") else ""))
        for link in connection.get("links", []):
            contested = f", {len(link['contested'])} contested" if link.get("contested") else ""
            print(f"  {link['selector']}\t{link['topics']} topics, {link['updates']} updates{contested}")
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy fanout``."""
    # the connection's own --principal/--password are the fan-out link's: the command
    # connects as $CANOPY_PRINCIPAL/$CANOPY_PASSWORD
    client_as_env = connection_options_except(
        client, ("principal", "password"),
        principal=os.environ.get("CANOPY_PRINCIPAL"), password=os.environ.get("CANOPY_PASSWORD"),
    )
    fan = commands.add_parser("fanout", help="fan-out connections of this server to its primaries").add_subparsers(
        dest="action", required=True)
    f_list = fan.add_parser("list", parents=[client], help="each connection's state and what its links mirror")
    f_list.add_argument("--json", action="store_true")
    f_add = fan.add_parser(
        "add", parents=[client_as_env], help="make this server a secondary of a primary for some selectors",
        description="The connection's own credentials are --principal/--password; this command itself "
        "connects as $CANOPY_PRINCIPAL/$CANOPY_PASSWORD.",
    )
    f_add.add_argument("name", metavar="NAME")
    f_add.add_argument("--primary", action="append", required=True, metavar="URL",
                       help="the primary (repeat for its other gateways, tried in turn)")
    f_add.add_argument("--link", action="append", required=True, metavar="SELECTOR", help="a selector to mirror")
    f_add.add_argument("--principal", dest="link_principal", metavar="P", help="whom to connect to the primary as")
    f_add.add_argument("--password", dest="link_password", metavar="W")
    f_add.add_argument("--retry-delay", type=_seconds, default=1.0, metavar="S",
                       help="seconds between connection attempts (default 1)")
    f_add.add_argument("--reconnect-timeout", dest="link_reconnect_timeout", type=_seconds, default=60.0,
                       metavar="S", help="how long a dropped session tries to resume (default 60)")
    f_remove = fan.add_parser("remove", parents=[client], help="remove a connection added at run time")
    f_remove.add_argument("name", metavar="NAME")
    for p in (f_list, f_add, f_remove):
        p.set_defaults(run=_fanout)
