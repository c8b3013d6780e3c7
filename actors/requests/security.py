"""Security store requests: security_get, security_update."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable
from typing import Any

import ray

from actors.configuration import NotCommitted
from actors.requests.context import Context
from sessions import requests as check

log = logging.getLogger("canopy.security")


def security_get(ctx: Context, sid: str) -> dict[str, Any]:
    return ctx.registry.security.to_dict(with_secrets=False)


def security_update(ctx: Context, sid: str, commands: Any) -> Any:
    check.security_commands(ctx.registry, sid, commands)  # refuse bad commands here, with their reason
    change = secrets.token_hex(8)

    async def updated() -> int:
        try:
            version: int = await ctx.controller.update_security.remote(commands, change)
            return version
        except (ray.exceptions.ActorUnavailableError, ray.exceptions.ActorDiedError) as e:
            log.warning("the controller went away during security change %s (%s): asking its successor", change, e)
        return await _outcome(ctx, change)

    return updated()


#: how long a security change cut off by the controller's crash waits for its successor
OUTCOME_WAIT = 60.0


async def _outcome(ctx: Context, change: str) -> int:
    """Made or not made, never unsure: Ray restarts the controller, which recovers the
    store from the configuration log; the change was made iff the store it recovered
    remembers the change's id. Asked of the gateway's current controller each time: one
    Ray gave up for good is replaced by a new actor, which tells the gateways."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + OUTCOME_WAIT
    while True:
        try:
            version: int | None = await ctx.controller.security_change.remote(change)
            break
        except Exception as e:
            if loop.time() > deadline:
                raise NotCommitted(f"the security change: the controller did not come back: {e}") from None
            await asyncio.sleep(0.2)
    if version is None:
        raise NotCommitted("the security change was not made (the controller restarted during it); make it again")
    return version


HANDLERS: dict[str, Callable[..., Any]] = {"security_get": security_get, "security_update": security_update}
