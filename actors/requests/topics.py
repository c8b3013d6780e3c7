"""Topic requests: add, set, json_patch, remove, fetch, subscribe, unsubscribe."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from actors.requests.context import Context, Routed, ok
from actors.tracing import DEFAULT_LIMIT
from sessions import requests as check
from actors.missing_topics import MAX_MATCHED
from sessions.missing_topics import CANCEL
from topics.constraints import NO_LOCKS, LockLookup
from topics.protocol import FetchTopics, RemoveTopics, Result
from topics.selectors import Selector, parse_selector

#: topics removed per operation when a remove must name each permitted topic
REMOVE_CHUNK = 500


def add(ctx: Context, sid: str, path: Any, type_name: Any, properties: Any = None) -> Routed:
    op = check.add_topic(ctx.registry, sid, path, type_name, properties)
    return Routed(op.path, op)


def _locks(ctx: Context, sid: str) -> LockLookup:
    """Whether the session holds a session lock at a sequence: an update constraint's ``locked``
    terms are decided here, from the lock table the controller pushed (actors/locks.py)."""
    return NO_LOCKS if ctx.locks is None else ctx.locks.lookup(sid)


def set_(ctx: Context, sid: str, *args: Any) -> Routed:
    op = check.set_value(ctx.registry, sid, *args, max_size=ctx.config.max_frame_size, locks=_locks(ctx, sid))
    ctx.updates_received += 1
    return Routed(op.path, op)


def json_patch(ctx: Context, sid: str, *args: Any) -> Routed:
    op = check.json_patch(ctx.registry, sid, *args, max_size=ctx.config.max_frame_size, locks=_locks(ctx, sid))
    ctx.updates_received += 1
    return Routed(op.path, op)


def remove(ctx: Context, sid: str, selector: Any) -> Any:
    plan = check.remove_plan(ctx.registry, sid, selector)
    if plan.direct:
        return _removed(ctx, plan.selector)
    return _remove_permitted(ctx, sid, plan.selector)


async def _removed(ctx: Context, selector: Selector) -> int:
    return sum(await ctx.all_ok(ctx.link.everywhere(selector, RemoveTopics(str(selector)))))


async def _remove_permitted(ctx: Context, sid: str, selector: Selector) -> int:
    listing = ctx.link.everywhere(selector, FetchTopics(str(selector), False, False))
    rows = [row for part in await ctx.all_ok(listing) for row in part]
    allowed = [row.path for row in rows if ctx.registry.has(sid, check.P.MODIFY_TOPIC, row.path)]
    total = 0
    for start in range(0, len(allowed), REMOVE_CHUNK):
        chunk = parse_selector("#" + "////".join(">" + p for p in allowed[start : start + REMOVE_CHUNK]))
        total += await _removed(ctx, chunk)
    return total


def fetch(ctx: Context, sid: str, *args: Any) -> Any:
    plan = check.fetch_plan(ctx.registry, sid, *args)
    rows = fetched_rows(ctx, sid, plan)
    if not ctx.missing.covers(plan.selector):
        return rows

    async def fetched() -> list[Any]:
        found = await rows
        filtered = plan.limit == 0 or any(op.types for _s, op in plan.operations)
        if found and not filtered and not ctx.missing.crosses_links(plan.selector):
            return found  # it matched: no handler here hears of it, and no link is crossed
        if not await _missing(ctx, sid, plan.selector, await matched_paths(ctx, sid, plan.selector)):
            return found
        return await fetched_rows(ctx, sid, plan)  # after the handlers: they may have made the topic

    return fetched()


#: topics per partition a probe for "does the selector match anything here?" reads
PROBE = 100


def probe_plan(plan: check.FetchPlan, limit: int) -> check.FetchPlan:
    """The same fetch without values, at most ``limit`` topics per partition."""
    operations = [(sel, op._replace(with_values=False, with_properties=False, types=None, limit=limit))
                  for sel, op in plan.operations]
    return check.FetchPlan(plan.selector, operations, None)


async def matched_paths(ctx: Context, sid: str, selector: Selector) -> list[str]:
    """The topic paths ``selector`` shows the session (SELECT_TOPIC checked): as many as the
    replica check of the fan-out links looks at when one is crossed, else a few."""
    limit = MAX_MATCHED if ctx.missing.crosses_links(selector) else PROBE
    plan = probe_plan(check.fetch_plan(ctx.registry, sid, str(selector), False, False, None, None), limit)
    futures = [f for sel, op in plan.operations for f in ctx.link.everywhere(sel, op)]
    return [row.path for part in await ctx.all_ok(futures) for row in part
            if ctx.registry.visible(sid, selector, row.path)]


def fetched_rows(ctx: Context, sid: str, plan: check.FetchPlan) -> Coroutine[Any, Any, list[Any]]:
    futures = [f for selector, op in plan.operations for f in ctx.link.everywhere(selector, op)]

    async def merged() -> list[Any]:
        shown: dict[str, list[Any]] = {}
        for part in await ctx.all_ok(futures):
            for row in part:
                for session_path in ctx.registry.visible(sid, plan.selector, row.path):
                    shown.setdefault(session_path, [session_path, *row[1:]])
        rows = [shown[p] for p in sorted(shown)]
        return rows[: plan.limit] if plan.limit is not None else rows

    return merged()


async def _missing(ctx: Context, sid: str, selector: Selector, matched: list[str]) -> bool:
    """Offer a request for ``selector`` to the missing-topic handlers (here when it
    ``matched`` nothing, and through the fan-out links); whether any was asked. A cancel
    ends the request (``CANCELLED``)."""
    outcome: str
    asked: bool
    outcome, asked = await ctx.missing.check(selector, sid, matched=matched)
    if outcome == CANCEL:
        raise check.RequestError("CANCELLED", f"a missing-topic handler cancelled the request for {selector}")
    return asked


def subscribe(ctx: Context, sid: str, selector: Any) -> Any:
    sel = check.selector(ctx.registry, selector)
    if ctx.missing.covers(sel):
        return _subscribe_when_answered(ctx, sid, sel)
    return _subscribe(ctx, sid, sel)


async def _subscribe_when_answered(ctx: Context, sid: str, sel: Selector) -> None:
    """A subscription a missing-topic handler may hear of: made once the handlers answered
    proceed when it matches nothing now, not made on cancel."""
    await _missing(ctx, sid, sel, await matched_paths(ctx, sid, sel))  # SELECT_TOPIC checked
    if sid in ctx.registry.sessions:
        await _subscribe(ctx, sid, sel)


def _subscribe(ctx: Context, sid: str, sel: Selector) -> Coroutine[Any, Any, None]:
    registrations, waits = ctx.registry.subscribe(sid, sel)
    futures = ctx.register(registrations)

    async def subscribed() -> None:
        results: list[Result] = await asyncio.gather(*futures)
        try:
            for result in results:
                ok(result)
        except check.RequestError as e:
            ctx.unregister(ctx.registry.unsubscribe(sid, sel))
            for _selector, token in registrations:
                waiter = ctx.waiters.pop(token, None)
                if waiter is not None and not waiter.done():
                    waiter.set_exception(e)
                    waiter.exception()  # retrieved: other sessions waiting on it see it too
            raise
        for token in waits:
            if not ctx.registry.is_live(token):
                await ctx.waiters.setdefault(token, asyncio.get_running_loop().create_future())

    return subscribed()


def unsubscribe(ctx: Context, sid: str, selector: Any) -> None:
    ctx.unregister(ctx.registry.unsubscribe(sid, check.selector(ctx.registry, selector)))


def trace(ctx: Context, sid: str, every: Any, limit: Any = DEFAULT_LIMIT) -> list[Any]:
    """Sample every ``every``-th set from now on (0 stops); answer the records so far."""
    check.expect(every, int, "every")
    check.expect(limit, int, "limit")
    if every < 0 or not 0 <= limit <= 1_000_000:
        raise check.RequestError("INVALID_REQUEST", "every must be >= 0 and limit 0..1000000")
    return ctx.tracer.configure(every, limit)


HANDLERS: dict[str, Callable[..., Any]] = {
    "add": add,
    "set": set_,
    "json_patch": json_patch,
    "remove": remove,
    "fetch": fetch,
    "subscribe": subscribe,
    "unsubscribe": unsubscribe,
    "trace": trace,
}
