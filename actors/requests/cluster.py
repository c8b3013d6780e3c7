"""Cluster requests: cluster_status, cluster_node (kill, pause, add or cut off a node), fanout_list."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from actors.requests.context import Context, answer_of
from fanout.config import FanoutConnection
from sessions.requests import RequestError, expect


def cluster_status(ctx: Context, sid: str) -> Any:
    return answer_of(ctx.controller.status.remote())


def cluster_node(ctx: Context, sid: str, action: Any, node: Any, seconds: Any, force: Any, options: Any = None) -> Any:
    """CONTROL_SERVER: crash (``kill``), ``pause``, ``add`` or cut off (``partition``) a node, restart
    Ray's GCS or the head (see :mod:`actors.node_control`). ``options``: a partition's ``peers``
    (node names, or nil for every other node), ``direction`` (``both``, ``in``, ``out``) and
    ``delay_ms`` (delay the traffic instead of dropping it; checked by the controller)."""
    expect(action, str, "action")
    if node is not None:
        expect(node, str, "node")
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)):
        raise RequestError("INVALID_REQUEST", f"seconds has the wrong type ({type(seconds).__name__})")
    expect(force, bool, "force")
    if options is not None:
        expect(options, dict, "options")
        unknown = set(options) - {"peers", "direction", "delay_ms"}
        if unknown:
            raise RequestError("INVALID_REQUEST", f"options: unknown keys {sorted(unknown)} (peers, direction, delay_ms)")
        peers = options.get("peers")
        if peers is not None and (not isinstance(peers, list) or not all(isinstance(p, str) for p in peers)
                                  or len(peers) > 64):
            raise RequestError("INVALID_REQUEST", "options.peers: a list of at most 64 node names, or nil")
        if options.get("direction") is not None:
            expect(options["direction"], str, "options.direction")
    return answer_of(ctx.controller.node_action.remote(action, node, float(seconds), force, options))


def fanout_list(ctx: Context, sid: str) -> Any:
    """VIEW_SERVER: each fan-out connection's state and what its links mirror."""
    return answer_of(ctx.controller.fanout_status.remote())


def fanout_add(ctx: Context, sid: str, definition: Any) -> Any:
    """CONTROL_SERVER: add a fan-out connection (see :mod:`fanout.config` for the definition)."""
    expect(definition, dict, "definition")
    connection = FanoutConnection.from_dict(definition)  # a bad one is refused here, before the controller
    return answer_of(ctx.controller.fanout_add.remote(connection.to_dict()))


def fanout_remove(ctx: Context, sid: str, name: Any) -> Any:
    """CONTROL_SERVER: remove a fan-out connection added at run time; its replicas go."""
    expect(name, str, "name")
    return answer_of(ctx.controller.fanout_remove.remote(name))


HANDLERS: dict[str, Callable[..., Any]] = {
    "cluster_status": cluster_status, "cluster_node": cluster_node, "fanout_list": fanout_list,
    "fanout_add": fanout_add, "fanout_remove": fanout_remove,
}
