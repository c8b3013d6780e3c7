"""Requests about other sessions: session_get, session_set, session_close (across every gateway)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions import requests as check
from sessions.client_control import property_keys


def session_get(ctx: Context, sid: str, target: Any, keys: Any = None) -> Any:
    """The properties of the sessions a target names on every gateway: those ``keys`` name
    (see :func:`sessions.client_control.pick`), or all when nil."""
    kind, value = check.session_target(target)
    wanted = list(property_keys(keys)) if keys is not None else None

    async def gathered() -> dict[str, dict[str, str]]:
        found: dict[str, dict[str, str]] = {}
        for part in await asyncio.gather(*(p.session_properties.remote(kind, value, wanted) for p in ctx.peers)):
            found.update(part)
        return found

    return gathered()


def session_set(ctx: Context, sid: str, target: Any, changes: Any) -> Any:
    kind, value = check.session_target(target)
    checked = check.property_changes(ctx.registry, changes)

    async def changed() -> int:
        counts = await asyncio.gather(*(p.change_session_properties.remote(kind, value, checked) for p in ctx.peers))
        return sum(counts)

    return changed()


def session_close(ctx: Context, sid: str, target: Any) -> Any:
    """End the sessions a target names, on whichever gateway holds them; answers how many
    ended. A session that names itself ends too, and gets no answer."""
    kind, value = check.session_target(target)

    async def closed() -> int:
        return sum(await asyncio.gather(*(p.close_sessions.remote(kind, value) for p in ctx.peers)))

    return closed()


HANDLERS: dict[str, Callable[..., Any]] = {
    "session_get": session_get, "session_set": session_set, "session_close": session_close,
}
