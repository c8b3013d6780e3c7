"""Security store requests: security_get, security_update."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions import requests as check
from sessions.security import GlobalPermission


def security_get(ctx: Context, sid: str) -> dict[str, Any]:
    ctx.registry.check(sid, GlobalPermission.VIEW_SECURITY)
    return ctx.registry.security.to_dict(with_secrets=False)


def security_update(ctx: Context, sid: str, commands: Any) -> Any:
    check.security_commands(ctx.registry, sid, commands)  # refuse bad commands here, with their reason

    async def updated() -> int:
        version: int = await ctx.controller.update_security.remote(commands)
        return version

    return updated()


HANDLERS: dict[str, Callable[..., Any]] = {"security_get": security_get, "security_update": security_update}
