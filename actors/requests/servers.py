"""Remote server requests: server_add, server_list, server_check, server_remove.

Definitions live with the view evaluator (remote topic views use them) and in the
replicated configuration. Adding and removing needs CONTROL_SERVER, listing and
checking VIEW_SERVER.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context, answer_of
from fanout.servers import RemoteServer
from sessions.requests import expect


def add(ctx: Context, sid: str, definition: Any) -> Any:
    server = RemoteServer.from_dict(definition)  # a bad one is refused here

    async def added() -> dict[str, Any]:
        answer: dict[str, Any] = await ctx.views.server_add.remote(server.to_dict())
        await _tell_gateways(ctx)
        return answer

    return added()


def remove(ctx: Context, sid: str, name: Any) -> Any:
    expect(name, str, "name")

    async def removed() -> bool:
        answer: bool = await ctx.views.server_remove.remote(name)
        await _tell_gateways(ctx)
        return answer

    return removed()


async def _tell_gateways(ctx: Context) -> None:
    """Every gateway learns the remote servers' missing-topic notification filters."""
    filters = await ctx.views.remote_filters.remote()
    ctx.missing.set_remote_filters(filters)
    for peer in ctx.peers:
        peer.set_remote_filters.remote(filters)


def list_(ctx: Context, sid: str) -> Any:
    return answer_of(ctx.views.server_list.remote())


def check_(ctx: Context, sid: str, name: Any) -> Any:
    expect(name, str, "name")
    return answer_of(ctx.views.server_check.remote(name))


HANDLERS: dict[str, Callable[..., Any]] = {
    "server_add": add, "server_remove": remove, "server_list": list_, "server_check": check_,
}
