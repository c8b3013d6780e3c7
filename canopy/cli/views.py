"""``canopy view``: create, list, remove topic views."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from canopy.cli.common import _session
from canopy.errors import CanopyError


def _specification(args: argparse.Namespace) -> str:
    if (args.specification is None) == (args.file is None):
        raise CanopyError("give the specification or --file, not both", "INVALID_REQUEST")
    if args.file is None:
        return str(args.specification)
    try:
        return Path(args.file).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise CanopyError(f"cannot read --file {args.file!r}: {e}", "INVALID_REQUEST") from None


def _view(args: argparse.Namespace) -> int:
    text = _specification(args) if args.action == "create" else ""  # before connecting: fail fast
    with _session(args) as session:
        views = session.views
        if args.action == "create":
            view = views.create(args.name, text)
            print(f"{view.name} (precedence {view.precedence}, {view.state})")
        elif args.action == "remove":
            views.remove(args.name)
        else:
            for view in views.list():
                if args.json:
                    print(json.dumps({
                        "name": view.name, "specification": view.specification, "principal": view.principal,
                        "roles": sorted(view.roles), "precedence": view.precedence, "state": view.state,
                    }))
                else:
                    print(f"{view.name}\t{view.state}\t{' '.join(view.specification.split())}")
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy view``."""
    view = commands.add_parser("view", help="topic views").add_subparsers(dest="action", required=True)
    v_create = view.add_parser("create", parents=[client], help="create or replace a topic view")
    v_create.add_argument("name")
    v_create.add_argument("specification", nargs="?", help="the view specification (or --file)")
    v_create.add_argument("--file", help="read the specification from this file")
    v_list = view.add_parser("list", parents=[client], help="every view, in creation order")
    v_list.add_argument("--json", action="store_true")
    v_remove = view.add_parser("remove", parents=[client], help="remove a view (succeeds if absent)")
    v_remove.add_argument("name")
    for p in (v_create, v_list, v_remove):
        p.set_defaults(run=_view)
