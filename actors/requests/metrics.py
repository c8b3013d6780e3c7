"""Metric collector requests: collector_put, collector_remove, collector_list.

The controller keeps the definitions (the ``collectors`` document of the replicated
configuration) and pushes them to every gateway, which exports them on ``/metrics``
(see :mod:`sessions.collectors`). Putting and removing need CONTROL_SERVER, listing
VIEW_SERVER.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context, answer_of
from sessions.collectors import from_dict
from sessions.requests import expect


def put(ctx: Context, sid: str, definition: Any) -> Any:
    collector = from_dict(definition)  # a bad one is refused here, before the controller
    return answer_of(ctx.controller.collector_put.remote(collector.to_dict()))


def remove(ctx: Context, sid: str, name: Any) -> Any:
    expect(name, str, "name")
    return answer_of(ctx.controller.collector_remove.remote(name))


def list_(ctx: Context, sid: str) -> Any:
    return answer_of(ctx.controller.collector_list.remote())


HANDLERS: dict[str, Callable[..., Any]] = {"collector_put": put, "collector_remove": remove, "collector_list": list_}
