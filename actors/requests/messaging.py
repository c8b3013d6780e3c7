"""Request/response messaging requests: handlers, sending, and answering.

The permissions are in the authorization matrix (:mod:`sessions.authorization`):
a handler needs REGISTER_HANDLER (and VIEW_SESSION when it asks for the
senders' session properties, checked here); an unaddressed request needs
SEND_TO_MESSAGE_HANDLER on its path, one to a session or a filter
SEND_TO_SESSION; answering and closing act on the session's own deliveries
and handlers. The work is :class:`actors.messaging.Messaging`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context
from sessions import requests as check
from sessions.messaging import REJECTIONS, MessagingError, check_value, property_keys, timeout_for, value_type
from sessions.security import GlobalPermission, PermissionDenied

#: the largest tag a request to a filter may carry (a string's length)
MAX_TAG_LENGTH = 64


def _request(ctx: Context, path: Any, type_name: Any, data: Any, response_type: Any,
             timeout_ms: Any) -> tuple[str, tuple[str, bytes], str | None, float]:
    messaging = ctx.messaging
    path = ctx.registry.limits.path(path)
    value = check_value(type_name, data, messaging.value_limit)
    expected = None if response_type is None else value_type(response_type, "response type").value
    timeout = timeout_for(timeout_ms, messaging.default_timeout_ms, messaging.max_timeout_ms)
    return path, value, expected, timeout


def handler_add(ctx: Context, sid: str, path: Any, properties: Any = None) -> str:
    path = ctx.registry.limits.path(path)
    keys = property_keys(properties)
    if keys and not ctx.registry.has(sid, GlobalPermission.VIEW_SESSION):
        raise PermissionDenied(GlobalPermission.VIEW_SESSION)
    token: str = ctx.messaging.add(sid, path, keys)
    return token


def handler_remove(ctx: Context, sid: str, token: Any) -> None:
    ctx.messaging.remove(sid, check.expect(token, str, "registration"))


def send(ctx: Context, sid: str, path: Any, type_name: Any, data: Any, response_type: Any = None,
         timeout_ms: Any = None) -> Any:
    path, value, expected, timeout = _request(ctx, path, type_name, data, response_type, timeout_ms)
    return ctx.messaging.send(sid, path, value, expected, timeout)


def send_session(ctx: Context, sid: str, target: Any, path: Any, type_name: Any, data: Any,
                 response_type: Any = None, timeout_ms: Any = None) -> Any:
    check.expect(target, str, "session id")
    path, value, expected, timeout = _request(ctx, path, type_name, data, response_type, timeout_ms)
    return ctx.messaging.send_session(sid, target[:256], path, value, expected, timeout)


def send_filter(ctx: Context, sid: str, session_filter: Any, path: Any, type_name: Any, data: Any, tag: Any,
                response_type: Any = None, timeout_ms: Any = None) -> Any:
    most = ctx.registry.limits.max_selector_length
    if isinstance(session_filter, str) and len(session_filter) > most:
        raise MessagingError("INVALID_FILTER", f"a session filter may be at most {most:,} characters "
                             "(max_selector_length)")
    _kind, text = check.session_target(["filter", check.expect(session_filter, str, "filter")])
    if not (isinstance(tag, int) and not isinstance(tag, bool) and -(2**63) <= tag < 2**64) and not (
            isinstance(tag, str) and len(tag) <= MAX_TAG_LENGTH):
        raise MessagingError("INVALID_REQUEST", f"a tag is an integer or at most {MAX_TAG_LENGTH} characters")
    path, value, expected, timeout = _request(ctx, path, type_name, data, response_type, timeout_ms)
    return ctx.messaging.send_filter(sid, text, path, value, expected, timeout, tag)


def respond(ctx: Context, sid: str, delivery_id: Any, type_name: Any, data: Any) -> None:
    ctx.messaging.respond(sid, delivery_id, type_name, data)


def reject(ctx: Context, sid: str, delivery_id: Any, message: Any, code: Any = "REJECTED_REQUEST") -> None:
    message = check.expect(message, str, "message")[:1024]
    if code not in REJECTIONS:
        raise MessagingError("INVALID_REQUEST", "a rejection's code is one of " + ", ".join(sorted(REJECTIONS)))
    ctx.messaging.reject(sid, delivery_id, message, code)


HANDLERS: dict[str, Callable[..., Any]] = {
    "message_handler_add": handler_add,
    "message_handler_rm": handler_remove,
    "message_send": send,
    "message_send_session": send_session,
    "message_send_filter": send_filter,
    "message_respond": respond,
    "message_reject": reject,
}
