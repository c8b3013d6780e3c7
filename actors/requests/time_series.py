"""Time series requests: append, edit, range_query."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context, Routed, ok
from sessions import requests as check
from topics.protocol import QueryAnswer


def append(ctx: Context, sid: str, *args: Any) -> Routed:
    op = check.append_event(ctx.registry, sid, *args)
    ctx.updates_received += 1
    return Routed(op.path, op)


def edit(ctx: Context, sid: str, *args: Any) -> Routed:
    op = check.edit_event(ctx.registry, sid, *args)
    ctx.updates_received += 1
    return Routed(op.path, op)


def range_query(ctx: Context, sid: str, *args: Any) -> Any:
    op = check.query_events(ctx.registry, sid, *args)
    future = ctx.link.request_route(op.path, op)

    async def queried() -> list[Any]:
        answer: QueryAnswer = ok(await future)
        events = [
            [e.sequence, e.timestamp, e.author, e.value, e.original_sequence, e.original_timestamp, e.original_author]
            for e in answer.events
        ]
        return [answer.selected_count, events, answer.event_type]

    return queried()


HANDLERS: dict[str, Callable[..., Any]] = {"append": append, "edit": edit, "range_query": range_query}
