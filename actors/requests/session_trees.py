"""Branch mapping table requests: tree_put, tree_remove, tree_get, tree_list.

Reading a table needs what changing it needs, MODIFY_TOPIC on its session tree
branch: a table names the topic tree branches behind a session path, which a
session that merely reads (READ_TOPIC) that path must never learn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions import requests as check
from sessions.security import PathPermission


def tree_put(ctx: Context, sid: str, branch: Any, mappings: Any) -> Any:
    table = check.tree_table(ctx.registry, sid, branch, mappings)

    async def put() -> int:
        version: int = await ctx.session_trees.put.remote(table.to_wire())
        return version

    return put()


def tree_remove(ctx: Context, sid: str, branch: Any) -> Any:
    checked = check.tree_branch(ctx.registry, branch)

    async def removed() -> int:
        version: int = await ctx.session_trees.remove.remote(checked)
        return version

    return removed()


def tree_get(ctx: Context, sid: str, branch: Any) -> Any:
    checked = check.tree_branch(ctx.registry, branch)
    table = ctx.registry.trees.tables.get(checked)
    return table.to_wire() if table is not None else None


def tree_list(ctx: Context, sid: str) -> list[Any]:
    tables = sorted(ctx.registry.trees.tables.values(), key=lambda t: t.session_tree_branch)
    return [t.to_wire() for t in tables if ctx.registry.has(sid, PathPermission.MODIFY_TOPIC, t.session_tree_branch)]


HANDLERS: dict[str, Callable[..., Any]] = {"tree_put": tree_put, "tree_remove": tree_remove, "tree_get": tree_get, "tree_list": tree_list}
