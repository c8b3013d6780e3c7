"""``canopy server``: remote servers, the sources of remote topic views."""

from __future__ import annotations

import argparse
import os

from canopy.cli.common import _json_line, _seconds, _session, connection_options_except
from canopy.errors import CanopyError


def _server(args: argparse.Namespace) -> int:
    if args.action == "add" and (args.remote_principal is None) != (args.remote_password is None):
        raise CanopyError("give --principal and --password together (or neither: anonymous)", "INVALID_REMOTE_SERVER")
    with _session(args) as session:
        servers = session.remote_servers
        if args.action == "add":
            added = servers.add(
                args.name, args.remote_url, principal=args.remote_principal, password=args.remote_password,
                retry_delay=args.retry_delay, reconnect_timeout=args.remote_reconnect_timeout,
                missing_topic_filter=args.missing_topic_filter,
            )
            print(f"{added['name']}: {', '.join(added['urls'])}")
        elif args.action == "remove":
            print(f"{args.name}: removed" if servers.remove(args.name) else f"{args.name}: no such remote server")
        elif args.action == "check":
            checked = servers.check(args.name)
            if not checked["ok"]:
                raise CanopyError(f"{args.name}: {checked['error']}", "CONNECT_FAILED")
            print(f"{args.name}: connected in {checked['ms']:g} ms")
        else:
            for server in servers.list():
                if args.json:
                    print(_json_line(server))
                else:
                    views = ", ".join(server["views"]) or "no views"
                    error = f" ({server['error']})" if server.get("error") else ""
                    print(f"{server['name']}\t{server['state']}{error}\t{', '.join(server['urls'])}\t{views}")
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy server``."""
    # `server add`'s --url, --principal and --password are the remote server's: this command
    # talks to $CANOPY_URL as $CANOPY_PRINCIPAL/$CANOPY_PASSWORD
    client_env_only = connection_options_except(
        client, ("principal", "password", "url"),
        principal=os.environ.get("CANOPY_PRINCIPAL"), password=os.environ.get("CANOPY_PASSWORD"),
        url=os.environ.get("CANOPY_URL", "ws://127.0.0.1:8080"),
    )
    server = commands.add_parser(
        "server", help="remote servers: the sources of remote topic views (map ... from NAME ...)"
    ).add_subparsers(dest="action", required=True)
    r_add = server.add_parser(
        "add", parents=[client_env_only], help="define a remote server",
        description="--url, --principal and --password are the remote server's; this command itself talks to "
        "$CANOPY_URL as $CANOPY_PRINCIPAL/$CANOPY_PASSWORD.",
    )
    r_add.add_argument("name", metavar="NAME")
    r_add.add_argument("--url", dest="remote_url", action="append", required=True, metavar="URL",
                       help="the remote server (repeat for its other gateways, tried in turn)")
    r_add.add_argument("--principal", dest="remote_principal", metavar="P")
    r_add.add_argument("--password", dest="remote_password", metavar="W")
    r_add.add_argument("--retry-delay", type=_seconds, default=1.0, metavar="S")
    r_add.add_argument("--reconnect-timeout", dest="remote_reconnect_timeout", type=_seconds, default=60.0,
                       metavar="S")
    r_add.add_argument("--missing-topic-filter", metavar="SELECTOR", default=None)
    r_list = server.add_parser("list", parents=[client], help="every remote server, its state and its views")
    r_list.add_argument("--json", action="store_true")
    r_check = server.add_parser("check", parents=[client], help="connect to a remote server once, and say how it went")
    r_check.add_argument("name", metavar="NAME")
    r_remove = server.add_parser("remove", parents=[client], help="remove a remote server (its views go inactive)")
    r_remove.add_argument("name", metavar="NAME")
    for p in (r_add, r_list, r_check, r_remove):
        p.set_defaults(run=_server)
