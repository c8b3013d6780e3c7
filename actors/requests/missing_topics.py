"""Missing-topic handler requests: register, remove, answer, list, and forward.

The permissions are in the authorization matrix (:mod:`sessions.authorization`):
registering needs REGISTER_HANDLER and MODIFY_TOPIC on the path (the handler is
the one expected to create topics there); listing needs REGISTER_HANDLER or
VIEW_SERVER; forwarding (another server's link) needs SERVER_LINK.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.missing_topics import MAX_HOPS
from actors.requests.context import Context
from actors.requests.topics import PROBE, fetched_rows, probe_plan
from sessions import requests as check
from sessions.missing_topics import PROCEED, MissingTopicError

#: properties a forwarded request may carry besides the session's user properties: its own ($) ones
FORWARDED_EXTRA = 16
#: the property that marks a forwarded session's properties with the link that passed them on
FORWARDED_BY = "$ForwardedBy"


def add(ctx: Context, sid: str, path: Any) -> str:
    path = ctx.registry.limits.path(path)
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
    return [[r.token, r.path, r.session_id] for r in ctx.missing.handlers.registrations()]


def forward(
    ctx: Context, sid: str, selector: Any, session_id: Any, properties: Any, servers: Any, hops: Any = None,
) -> Any:
    """A secondary's fan-out link (or a remote server connection) forwards a request of one
    of its sessions: when no topic here matches the selector (as the link's session sees the
    tree), it is this server's request too: its handlers are notified, and its own fan-out
    links may take it on to their primaries. Answers ``proceed`` or ``cancel``. The link's
    principal needs SERVER_LINK and SELECT_TOPIC on the selector's path prefix.

    The properties are the other server's word about its session, not this server's: they
    reach the handlers with ``$ForwardedBy`` set to the principal of the link that passed
    them on (empty for an anonymous link), replacing any the other server sent, so that a
    handler never takes a forwarded ``$Principal`` or ``$Roles`` for one of its own."""
    sel = check.selector(ctx.registry, selector)
    check.expect(session_id, str, "session id")
    if not isinstance(properties, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in properties.items()
    ):
        raise check.RequestError("INVALID_REQUEST", "properties must map strings to strings")
    ctx.registry.limits.properties(properties, extra=FORWARDED_EXTRA)
    if not isinstance(servers, list) or not 0 < len(servers) <= MAX_HOPS or not all(
        isinstance(s, str) and s for s in servers
    ):
        raise check.RequestError("INVALID_REQUEST", f"servers must be 1..{MAX_HOPS} server names")
    hops = [] if hops is None else hops
    if not isinstance(hops, list) or len(hops) > MAX_HOPS or not all(isinstance(h, str) for h in hops):
        raise check.RequestError("INVALID_REQUEST", f"hops must be at most {MAX_HOPS} instance ids")
    marked = {**properties, FORWARDED_BY: ctx.registry.sessions[sid].principal}
    plan = probe_plan(check.fetch_plan(ctx.registry, sid, str(sel), False, False, None, None), PROBE)

    async def forwarded() -> str:
        if await fetched_rows(ctx, sid, plan):
            return PROCEED  # the primary has a matching topic: nobody here is told
        outcome: str
        outcome, _asked = await ctx.missing.check(
            sel, session_id, tuple(servers), marked, matched=[], hops=tuple(hops))
        return outcome

    return forwarded()


HANDLERS: dict[str, Callable[..., Any]] = {
    "missing_topic_add": add,
    "missing_topic_rm": remove,
    "missing_topic_ans": answer,
    "missing_topic_list": list_,
    "missing_topic_fwd": forward,
}

__all__ = ["HANDLERS", "MissingTopicError"]
