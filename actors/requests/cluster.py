"""Cluster requests: cluster_status."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions.security import GlobalPermission


def cluster_status(ctx: Context, sid: str) -> Any:
    ctx.registry.check(sid, GlobalPermission.VIEW_SERVER)

    async def status() -> dict[str, Any]:
        answer: dict[str, Any] = await ctx.controller.status.remote()
        return answer

    return status()


HANDLERS: dict[str, Callable[..., Any]] = {"cluster_status": cluster_status}
