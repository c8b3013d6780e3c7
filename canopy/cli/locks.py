"""``canopy lock``: the session locks held now, and holding one from the command line."""

from __future__ import annotations

import argparse
import sys
import threading

from canopy.cli.common import _json_line, _session

#: ``--scope`` -> the scope asked for
SCOPES = {"session": "UNLOCK_ON_SESSION_LOSS", "connection": "UNLOCK_ON_CONNECTION_LOSS"}


def _locks(args: argparse.Namespace) -> int:
    """``canopy lock list`` (VIEW_SERVER) and ``canopy lock hold`` (ACQUIRE_LOCK on NAME)."""
    with _session(args) as session:
        if args.action == "list":
            for lock in session.locks.list():
                if args.json:
                    print(_json_line(lock))
                else:
                    print(f"{lock['name']}\t{lock['sequence']}\t{lock['session_id']}\t{lock['scope']}\t"
                          f"{lock['waiting']} waiting")
            return 0
        lock = session.locks.lock(args.name, SCOPES[args.scope], timeout=args.wait)
        print(f"{lock.name}: locked, sequence {lock.sequence}", flush=True)
        try:
            threading.Event().wait(args.seconds)  # held until then (or ^C)
        finally:
            owned = lock.unlock()
            print(f"{lock.name}: {'released' if owned else 'no longer held'}", file=sys.stderr)
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy lock``."""
    lock = commands.add_parser("lock", help="session locks").add_subparsers(dest="action", required=True)
    listing = lock.add_parser("list", parents=[client], help="the locks held now (VIEW_SERVER)")
    listing.add_argument("--json", action="store_true")
    hold = lock.add_parser(
        "hold", parents=[client],
        help="acquire a lock (waiting while another session holds it), print its sequence, hold it, release it",
    )
    hold.add_argument("name", metavar="NAME")
    hold.add_argument("--seconds", type=float, default=None,
                      help="how long to hold it (default: until interrupted)")
    hold.add_argument("--scope", choices=sorted(SCOPES), default="session",
                      help="released on session loss (default) or already on connection loss")
    hold.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                      help="give up after waiting this long for the lock (default: wait as long as it takes)")
    for p in (listing, hold):
        p.set_defaults(run=_locks)
