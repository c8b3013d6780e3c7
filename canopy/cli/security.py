"""``canopy security``: show and change the security store."""

from __future__ import annotations

import argparse
import json
from typing import Any

from canopy.cli.common import _session
from canopy.errors import CanopyError


def _split(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


def _security(args: argparse.Namespace) -> int:
    with _session(args) as session:
        sec = session.security
        if args.action == "show":
            store = sec.get()
            if args.json:
                print(json.dumps(store, indent=2))
            else:
                anonymous = store["anonymous"]
                print(f"version {store['version']}; anonymous sessions "
                      f"{'allowed' if anonymous['allowed'] else 'refused'} with roles {anonymous['roles']}")
                for name, role in store["roles"].items():
                    print(f"role {name}: global {role['global']} default {role['default']} "
                          f"paths {role['paths']} includes {role['includes']}")
                for name, principal in store["principals"].items():
                    print(f"principal {name}: roles {principal['roles']}")
            return 0
        commands: list[list[Any]] = []
        if args.action == "role":
            if args.global_ is not None:
                commands.append(["set_global_permissions", args.role, _split(args.global_)])
            if args.default is not None:
                commands.append(["set_default_path_permissions", args.role, _split(args.default)])
            for assignment in args.path:
                path, sep, perms = assignment.partition("=")
                if not sep:
                    raise CanopyError(f"--path expects PATH=P1,P2, got {assignment!r}", "INVALID_SECURITY_COMMAND")
                commands.append(["set_path_permissions", args.role, path, _split(perms)])
            for path in args.remove_path:
                commands.append(["remove_path_permissions", args.role, path])
            if args.includes is not None:
                commands.append(["set_role_includes", args.role, _split(args.includes)])
        elif args.action == "principal":
            if args.what == "add":
                commands.append(["add_principal", args.name, args.new_password, _split(args.roles)])
            elif args.what == "remove":
                commands.append(["remove_principal", args.name])
            elif args.what == "password":
                commands.append(["set_password", args.name, args.new_password])
            else:
                commands.append(["set_principal_roles", args.name, _split(args.roles)])
        else:
            commands.append(["set_anonymous", args.allow, _split(args.roles)])
        if not commands:
            raise CanopyError("nothing to change: give at least one option", "INVALID_SECURITY_COMMAND")
        print(sec.update(*commands))
    return 0


def add_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], client: argparse.ArgumentParser
) -> None:
    """Add ``canopy security``."""
    security = commands.add_parser("security", help="the security store").add_subparsers(dest="action", required=True)
    show = security.add_parser("show", parents=[client], help="roles, principals, anonymous settings")
    show.add_argument("--json", action="store_true")
    role = security.add_parser("role", parents=[client], help="change a role")
    role.add_argument("role")
    role.add_argument("--global", dest="global_", metavar="P1,P2", help="global permissions")
    role.add_argument("--default", metavar="P1,P2", help="default path permissions")
    role.add_argument("--path", action="append", default=[], metavar="PATH=P1,P2", help="assign at a path")
    role.add_argument("--remove-path", dest="remove_path", action="append", default=[], metavar="PATH")
    role.add_argument("--includes", metavar="R1,R2", help="roles this role includes")
    principal = security.add_parser("principal", help="principals").add_subparsers(dest="what", required=True)
    p_add = principal.add_parser("add", parents=[client])
    p_add.add_argument("name")
    p_add.add_argument("--new-password", dest="new_password", required=True)
    p_add.add_argument("--roles", default="")
    p_remove = principal.add_parser("remove", parents=[client])
    p_remove.add_argument("name")
    p_password = principal.add_parser("password", parents=[client])
    p_password.add_argument("name")
    p_password.add_argument("--new-password", dest="new_password", required=True)
    p_roles = principal.add_parser("roles", parents=[client])
    p_roles.add_argument("name")
    p_roles.add_argument("--roles", required=True)
    anonymous = security.add_parser("anonymous", parents=[client], help="allow or refuse anonymous sessions")
    choice = anonymous.add_mutually_exclusive_group(required=True)
    choice.add_argument("--allow", dest="allow", action="store_true")
    choice.add_argument("--deny", dest="allow", action="store_false")
    anonymous.add_argument("--roles", default="ANONYMOUS")
    for p in (show, role, p_add, p_remove, p_password, p_roles, anonymous):
        p.set_defaults(run=_security)
