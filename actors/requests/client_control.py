"""Client control requests: session_roles, session_subscribe, session_unsubscribe (on every
gateway), session_listen and session_unlisten (see :mod:`actors.client_control`)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions import client_control as control
from sessions import requests as check


def _no_such_session(kind: str, value: str, count: int) -> int:
    """A target naming one session that no gateway holds is an error; a filter may match none."""
    if kind == "id" and count == 0:
        raise check.RequestError("NO_SUCH_SESSION", f"no session {value!r} on any gateway")
    return count


def session_roles(ctx: Context, sid: str, target: Any, remove: Any, add: Any) -> Any:
    """Take roles from and give roles to the sessions a target names; answers how many it named."""
    kind, value = check.session_target(target)
    change = control.role_change(remove, add)

    async def changed() -> int:
        counts = await asyncio.gather(*(p.change_session_roles.remote(kind, value, sorted(change.remove),
                                                                         sorted(change.add)) for p in ctx.peers))
        return _no_such_session(kind, value, sum(counts))

    return changed()


def _control(ctx: Context, target: Any, selector: Any, subscribe: bool) -> Any:
    kind, value = check.session_target(target)
    sel = check.selector(ctx.registry, selector)

    async def controlled() -> int:
        counts = await asyncio.gather(*(p.control_subscriptions.remote(kind, value, str(sel), subscribe)
                                        for p in ctx.peers))
        return _no_such_session(kind, value, sum(counts))

    return controlled()


def session_subscribe(ctx: Context, sid: str, target: Any, selector: Any) -> Any:
    """Subscribe the sessions a target names to a selector, as if they had; answers how many."""
    return _control(ctx, target, selector, True)


def session_unsubscribe(ctx: Context, sid: str, target: Any, selector: Any) -> Any:
    """Unsubscribe the sessions a target names from a selector; answers how many it named."""
    return _control(ctx, target, selector, False)


def session_listen(ctx: Context, sid: str, listener_id: Any, session_filter: Any, keys: Any = None) -> str:
    """Register a session event listener; answers its registration."""
    check.expect(listener_id, int, "listener id")
    return str(ctx.clients.listen(sid, listener_id, control.listen_filter(ctx.registry.limits, session_filter),
                                  control.property_keys(keys)))


def session_unlisten(ctx: Context, sid: str, registration: Any) -> None:
    ctx.clients.unlisten(sid, check.expect(registration, str, "registration"))


HANDLERS: dict[str, Callable[..., Any]] = {
    "session_roles": session_roles,
    "session_subscribe": session_subscribe,
    "session_unsubscribe": session_unsubscribe,
    "session_listen": session_listen,
    "session_unlisten": session_unlisten,
}
