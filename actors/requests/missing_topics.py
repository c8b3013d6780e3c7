"""Missing-topic handler requests: register, remove, answer, list.

Registering needs REGISTER_HANDLER and MODIFY_TOPIC on the path (the
handler is the one expected to create topics there); listing needs
REGISTER_HANDLER or VIEW_SERVER.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions import requests as check
from sessions.missing_topics import MissingTopicError
from sessions.security import GlobalPermission


def add(ctx: Context, sid: str, path: Any) -> str:
    path = ctx.registry.limits.path(path)
    ctx.registry.check(sid, GlobalPermission.REGISTER_HANDLER)
    ctx.registry.check(sid, check.P.MODIFY_TOPIC, path)
    token: str = ctx.missing.add(sid, path)
    return token


def remove(ctx: Context, sid: str, token: Any) -> None:
    check.expect(token, str, "registration")
    ctx.missing.remove(sid, token)


def answer(ctx: Context, sid: str, notification_id: Any, response: Any) -> None:
    check.expect(notification_id, str, "notification id")
    check.expect(response, str, "answer")
    ctx.missing.answer(sid, notification_id, response)


def list_(ctx: Context, sid: str) -> list[list[Any]]:
    if not ctx.registry.has(sid, GlobalPermission.REGISTER_HANDLER):
        ctx.registry.check(sid, GlobalPermission.VIEW_SERVER)
    return [[r.token, r.path, r.session_id] for r in ctx.missing.handlers.registrations()]


HANDLERS: dict[str, Callable[..., Any]] = {
    "missing_topic_add": add,
    "missing_topic_rm": remove,
    "missing_topic_ans": answer,
    "missing_topic_list": list_,
}

__all__ = ["HANDLERS", "MissingTopicError"]
