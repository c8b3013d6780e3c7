"""Topic notification requests: notify_select, notify_deselect and notify_close (see
:mod:`actors.notifications`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions import requests as check


def notify_select(ctx: Context, sid: str, listener: Any, selector: Any, descendants: Any = False) -> Any:
    """Add a selector to one of the session's notification listeners (made by its first);
    answered once the SELECTED notifications of the topics there now are on their way."""
    check.expect(listener, int, "listener id")
    check.expect(descendants, bool, "descendants")
    return ctx.notifications.select(sid, listener, check.selector(ctx.registry, selector), descendants)


def notify_deselect(ctx: Context, sid: str, listener: Any, selector: Any) -> None:
    check.expect(listener, int, "listener id")
    ctx.notifications.deselect(sid, listener, check.selector(ctx.registry, selector))


def notify_close(ctx: Context, sid: str, listener: Any) -> None:
    check.expect(listener, int, "listener id")
    ctx.notifications.close(sid, listener)


HANDLERS: dict[str, Callable[..., Any]] = {
    "notify_select": notify_select,
    "notify_deselect": notify_deselect,
    "notify_close": notify_close,
}
