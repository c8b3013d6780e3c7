"""Session lock requests: lock, unlock, lock_cancel, lock_list (see :mod:`actors.locks`)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from actors.requests.context import Context
from sessions.locks import check_name, check_scope
from sessions.requests import expect


def lock(ctx: Context, sid: str, name: Any, scope: Any = None) -> Coroutine[Any, Any, list[Any]]:
    """Answered with ``[name, sequence, scope]`` once the session owns the lock."""
    return ctx.locks.acquire(sid, check_name(ctx.registry.limits, name), check_scope(scope))  # type: ignore[no-any-return]


def unlock(ctx: Context, sid: str, name: Any, sequence: Any = None) -> Coroutine[Any, Any, bool]:
    if sequence is not None:
        expect(sequence, int, "sequence")
    return ctx.locks.release(sid, check_name(ctx.registry.limits, name), sequence)  # type: ignore[no-any-return]


def lock_cancel(ctx: Context, sid: str, name: Any) -> Coroutine[Any, Any, list[Any]]:
    return ctx.locks.withdraw(sid, check_name(ctx.registry.limits, name))  # type: ignore[no-any-return]


def lock_list(ctx: Context, sid: str) -> list[dict[str, Any]]:
    return ctx.locks.listing()  # type: ignore[no-any-return]


HANDLERS: dict[str, Callable[..., Any]] = {
    "lock": lock,
    "unlock": unlock,
    "lock_cancel": lock_cancel,
    "lock_list": lock_list,
}
