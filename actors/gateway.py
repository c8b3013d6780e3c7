"""GatewayActor: client sessions over WebSocket, one gateway per node.

The gateway is an async Ray actor whose event loop runs a ``websockets``
server (:mod:`actors.connections`) and one :class:`~actors.link.PartitionLink`
to every partition. The bookkeeping (sessions, groups, interest, topic
cache, views, outbound queues) lives in the pure
:class:`~sessions.registry.SessionRegistry`; requests are checked by the
pure core and carried out by the handlers of :mod:`actors.requests`.

Partition events arrive on the link, in each partition's order, and go
straight to the registry; the writers of the sessions they concern are
woken at once. The controller pushes new security stores
(:meth:`GatewayActor.set_security`) and the session tree actor new branch
mapping tables (:meth:`GatewayActor.set_session_trees`); both re-evaluate
every session at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import ray
from websockets.asyncio.server import Server, serve

from actors.connections import Connections
from actors.link import PartitionLink, PartitionUnavailable
from actors.requests import HANDLERS, Context, Routed
from canopy import protocol as wire
from sessions.filters import FilterSyntaxError, parse_filter
from sessions.registry import SessionRegistry
from sessions.requests import RequestError
from sessions.security import AuthenticationFailed, PermissionDenied, SecurityCommandError, SecurityStore
from sessions.trees import SessionTrees, TreeError
from topics.errors import TopicModelError
from topics.protocol import Failed, ProtocolError, Result, TopicEvent
from views.parser import ViewSpecError

log = logging.getLogger("canopy.gateway")
#: errors a request can end with that are the request's fault, each with a ``code``
REQUEST_ERRORS = (
    RequestError,
    TopicModelError,
    PermissionDenied,
    SecurityCommandError,
    TreeError,
    FilterSyntaxError,
    PartitionUnavailable,
    ViewSpecError,
    ProtocolError,
    AuthenticationFailed,
)


class GatewayActor:
    def __init__(
        self,
        gateway_id: str,
        partitions: list[Any],
        config: dict[str, Any],
        host: str,
        port: int,
        security: dict[str, Any],
        session_trees: list[Any],
        session_tree_actor: Any,
    ) -> None:
        self.gateway_id = gateway_id
        self.config = config
        self.host = host
        self.port = port
        self.link = PartitionLink(
            gateway_id, partitions, self._on_events,
            max_in_flight=config["max_in_flight"], max_batch=config["max_batch"],
            window=config["batch_window_ms"] / 1000,
        )
        count = len(partitions)
        self.registry = SessionRegistry(
            config["queue_limit"],
            config["backpressure_threshold"],
            security=SecurityStore.from_dict(security),
            trees=SessionTrees.from_wire(session_trees),
            partitions_for=lambda selector: len(self.link.partitions_for(selector)) if count else 1,
        )
        self.ctx = Context(self.registry, self.link, config, session_trees=session_tree_actor)
        self.connections = Connections(gateway_id, self.registry, config, self._dispatch, self.ctx.unregister)
        self._server: Server | None = None
        self.url = ""

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        from cluster import names

        self.ctx.controller = ray.get_actor(names.CONTROLLER)
        self.ctx.views = ray.get_actor(names.VIEWS)
        await self.link.attach()
        self._server = await serve(
            self.connections.handle, self.host, self.port, max_size=self.config["max_frame_size"], compression=None
        )
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://{self.host}:{port}"
        return {"gateway": self.gateway_id, "url": self.url, "host": self.host, "port": port}

    async def set_peers(self, peers: list[Any]) -> None:
        """Every gateway of the instance (this one included), for session-wide operations."""
        self.ctx.peers = peers

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close(close_connections=False)
        await self.connections.close_all()
        if self._server is not None:
            await self._server.wait_closed()
        self.link.close()

    async def stats(self) -> dict[str, Any]:
        return {
            "gateway": self.gateway_id,
            "pid": os.getpid(),
            "url": self.url,
            "sessions": len(self.registry.sessions),
            "groups": len(self.registry.groups),
            "interest": len(self.registry.interest),
            "cached_topics": len(self.registry.cache),
            **self.link.stats(),
        }

    # -- configuration pushed to the gateway ---------------------------------------

    async def set_security(self, store: dict[str, Any]) -> None:
        with _no_gc():
            self.ctx.apply_changes(self.registry.set_security(SecurityStore.from_dict(store)))
        self.connections.wake()

    async def set_session_trees(self, trees: list[Any]) -> float:
        """Apply new tables; return how long re-evaluating the sessions took (s)."""
        started = time.perf_counter()
        with _no_gc():  # a re-evaluation makes many short-lived objects in a large heap
            self.ctx.apply_changes(self.registry.set_trees(SessionTrees.from_wire(trees)))
        elapsed = time.perf_counter() - started
        self.connections.wake()
        return elapsed

    async def session_properties(self, kind: str, value: str) -> dict[str, dict[str, str]]:
        return {sid: dict(self.registry.sessions[sid].properties) for sid in self._select(kind, value)}

    async def change_session_properties(self, kind: str, value: str, changes: dict[str, str | None]) -> int:
        chosen = self._select(kind, value)
        for sid in chosen:
            self.ctx.apply_changes(self.registry.set_properties(sid, changes))
        self.connections.wake()
        return len(chosen)

    def _select(self, kind: str, value: str) -> list[str]:
        """This gateway's sessions a target names."""
        if kind == "id":
            return [value] if value in self.registry.sessions else []
        session_filter = parse_filter(value)
        return [s.id for s in self.registry.sessions.values() if session_filter.matches(s.properties, s.roles)]

    # -- events from partitions ----------------------------------------------

    def _on_events(self, partition: int, events: list[TopicEvent]) -> None:
        for token in self.registry.on_events(events):
            self.ctx.token_live(token)
        self.connections.wake()

    # -- requests --------------------------------------------------------------

    def _dispatch(self, sid: str, request: wire.Request) -> None:
        handler = HANDLERS.get(request.op) if request.op in wire.OPERATIONS else None
        if handler is None:
            known = ", ".join(sorted(wire.OPERATIONS))
            self.connections.error(sid, request.cid, "UNKNOWN_OPERATION", f"unknown operation {request.op!r}; known: {known}")
            return
        try:
            outcome = handler(self.ctx, sid, *request.args)
        except TypeError as e:
            self.connections.error(sid, request.cid, "INVALID_REQUEST", f"{request.op}: wrong arguments ({e})")
            return
        except REQUEST_ERRORS as e:
            self.connections.error(sid, request.cid, e.code, str(e))
            return
        if isinstance(outcome, Routed):
            # one partition result: answer from the link's callback, no task, no future
            self.link.route(outcome.path, outcome.operation, functools.partial(self._answer, sid, request.cid))
        elif asyncio.iscoroutine(outcome):
            self.connections.spawn(self._finish(sid, request.cid, outcome))
        else:
            self.connections.respond(sid, request.cid, outcome)

    def _answer(self, sid: str, cid: int, result: Result) -> None:
        if isinstance(result, Failed):
            self.connections.error(sid, cid, result.code, result.message)
        else:
            self.connections.respond(sid, cid, result.value)
        self.connections.wake()

    async def _finish(self, sid: str, cid: int, work: Any) -> None:
        try:
            result = await work
        except REQUEST_ERRORS as e:
            self.connections.error(sid, cid, e.code, str(e))
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if e.cause is not None else e
            code = getattr(cause, "code", "INTERNAL")
            self.connections.error(sid, cid, code if isinstance(code, str) else "INTERNAL", str(cause))
        except Exception as e:  # never let a bug kill the session silently
            log.exception("request %s failed", cid)
            self.connections.error(sid, cid, "INTERNAL", f"{type(e).__name__}: {e}")
        else:
            self.connections.respond(sid, cid, result)
        self.connections.wake()


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for one bounded burst of work."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=0)(GatewayActor)
