"""Topic view requests: view_create, view_list, view_remove (the evaluator owns the views)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from views import requests as check


def view_create(ctx: Context, sid: str, name: Any, specification: Any) -> Any:
    name, text = check.check_create(ctx.registry, sid, name, specification)
    session = ctx.registry.sessions[sid]

    async def created() -> dict[str, Any]:
        view: dict[str, Any] = await ctx.views.create.remote(name, text, session.principal, sorted(session.roles))
        return view

    return created()


def view_list(ctx: Context, sid: str) -> Any:
    async def listed() -> list[dict[str, Any]]:
        views: list[dict[str, Any]] = await ctx.views.list.remote()
        return views

    return listed()


def view_remove(ctx: Context, sid: str, name: Any) -> Any:
    name = check.check_remove(ctx.registry, sid, name)

    async def removed() -> bool:
        for view in await ctx.views.list.remote():
            if view["name"] == name:
                check.check_remove_source(ctx.registry, sid, view["specification"])
        found: bool = await ctx.views.remove.remote(name)
        return found

    return removed()


HANDLERS: dict[str, Callable[..., Any]] = {"view_create": view_create, "view_list": view_list, "view_remove": view_remove}
