"""``canopy tree``: session trees' branch mapping tables."""

from __future__ import annotations

import argparse
import json

from canopy.cli.common import _session
from canopy.errors import CanopyError


def _tree(args: argparse.Namespace) -> int:
    with _session(args) as session:
        trees = session.session_trees
        if args.action == "put":
            print(trees.put_table(args.branch, [tuple(m) for m in args.map]))
        elif args.action == "remove":
            print(trees.remove_table(args.branch))
        else:
            tables = trees.list_tables() if args.action == "list" else {}
            if args.action == "get":
                table = trees.get_table(args.branch)
                if table is None:
                    raise CanopyError(f"no branch mapping table at {args.branch!r}", "NO_SUCH_TABLE")
                tables = {args.branch: table}
            for branch, mappings in tables.items():
                if args.json:
                    print(json.dumps({"branch": branch, "mappings": [list(m) for m in mappings]}))
                else:
                    print(branch)
                    for session_filter, target in mappings:
                        print(f"  {session_filter}  ->  {target}")
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy tree``."""
    tree = commands.add_parser("tree", help="session trees (branch mapping tables)").add_subparsers(
        dest="action", required=True
    )
    t_put = tree.add_parser("put", parents=[client], help="replace a branch mapping table")
    t_put.add_argument("branch", help="the session tree branch")
    t_put.add_argument("--map", nargs=2, action="append", default=[], metavar=("FILTER", "TOPIC_BRANCH"),
                       help="one mapping, in order; no --map removes the table")
    t_get = tree.add_parser("get", parents=[client])
    t_get.add_argument("branch")
    t_get.add_argument("--json", action="store_true")
    t_list = tree.add_parser("list", parents=[client])
    t_list.add_argument("--json", action="store_true")
    t_remove = tree.add_parser("remove", parents=[client])
    t_remove.add_argument("branch")
    for p in (t_put, t_get, t_list, t_remove):
        p.set_defaults(run=_tree)
