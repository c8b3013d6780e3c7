"""The gateway's request handlers, one module per concern.

Each handler takes the gateway's :class:`~actors.requests.context.Context`,
the session id and the request's arguments, checks them with the pure core
(:mod:`sessions.requests`, :mod:`views.requests`) and returns one of:

* :class:`~actors.requests.context.Routed` — one partition operation; the
  gateway routes it and answers from the result (no task, no future);
* a coroutine — the gateway runs it and answers with what it returns;
* anything else — the answer itself.

A handler raises the core's errors (each with a ``code``) for bad input or
a missing permission; the gateway turns them into ERROR messages.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests import (
    client_control, cluster, locks, messaging, metrics, missing_topics, notifications, security, servers, session_trees,
    sessions, time_series, topics, views,
)
from actors.requests.context import Context, Routed

Handler = Callable[..., Any]

HANDLERS: dict[str, Handler] = {
    **topics.HANDLERS,
    **time_series.HANDLERS,
    **security.HANDLERS,
    **session_trees.HANDLERS,
    **sessions.HANDLERS,
    **client_control.HANDLERS,
    **views.HANDLERS,
    **cluster.HANDLERS,
    **missing_topics.HANDLERS,
    **servers.HANDLERS,
    **metrics.HANDLERS,
    **messaging.HANDLERS,
    **locks.HANDLERS,
    **notifications.HANDLERS,
}

__all__ = ["HANDLERS", "Context", "Handler", "Routed"]
