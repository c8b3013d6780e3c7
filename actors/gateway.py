"""GatewayActor: client sessions over WebSocket, one gateway per node.

The gateway is an async Ray actor whose event loop also runs a
``websockets`` server. Per connection it authenticates the HELLO against its
copy of the security store, reads frames, decodes them with
:mod:`canopy.protocol` and hands each request to its handler
(:mod:`actors.operations`), which turns it into operations on the partitions
through one :class:`~actors.channel.PartitionChannel` each. The bookkeeping
(sessions, groups, interest, topic cache, views, outbound queues) lives in
:class:`~sessions.registry.SessionRegistry`; each session's writer task
drains its queue into frames as fast as the client reads.

Partitions push events with :meth:`GatewayActor.deliver`, numbered per
partition; calls that arrive early are held until the gap before them is
filled, so every partition's events are applied in the order it made them.
The controller pushes new security stores (:meth:`set_security`) and the
session tree actor new branch mapping tables (:meth:`set_session_trees`);
both re-evaluate every session at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import ipaddress
import itertools
import logging
import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import msgpack
import ray
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from actors.channel import PartitionChannel, PartitionUnavailable, Resequencer
from actors.operations import Operations, RequestError
from canopy import protocol as wire
from cluster.partitioning import partitions_for
from sessions.filters import FilterSyntaxError
from sessions.registry import SessionRegistry
from sessions.security import AuthenticationFailed, PermissionDenied, SecurityCommandError, SecurityStore
from sessions.trees import SessionTrees, TreeError
from topics.errors import TopicModelError
from topics.store import FAILED
from views.parser import ViewSpecError

log = logging.getLogger("canopy.gateway")
HELLO_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
CLOSE_QUEUE_LIMIT = 4001
CLOSE_SHUTDOWN = 1001
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
)


@dataclass(eq=False)
class _Connection:
    ws: ServerConnection
    session_id: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    writer: asyncio.Task[None] | None = None
    closing: bool = False


class GatewayActor(Operations):
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
        self.partitions = partitions
        count = len(partitions)
        self.registry = SessionRegistry(
            config["queue_limit"],
            config["backpressure_threshold"],
            security=SecurityStore.from_dict(security),
            trees=SessionTrees.from_wire(session_trees),
            partitions_for=lambda selector: len(partitions_for(selector, count)),
        )
        self.channels = [
            PartitionChannel(
                i, p, gateway_id, config["max_in_flight"], config["max_batch"], config["batch_window_ms"] / 1000
            )
            for i, p in enumerate(partitions)
        ]
        self.session_trees = session_tree_actor
        self.controller = None
        self.views: Any = None
        self.peers: list[Any] = []
        self.countries = [(ipaddress.ip_network(n, strict=False), c) for n, c in (config.get("countries") or {}).items()]
        self.connections: dict[str, _Connection] = {}
        self._server: Server | None = None
        self.resequencer = Resequencer(count)
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._session_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.url = ""

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> dict[str, Any]:
        from cluster import names

        self.controller = ray.get_actor(names.CONTROLLER)
        self.views = ray.get_actor(names.VIEWS)
        me = ray.get_runtime_context().current_actor
        await asyncio.gather(*(p.attach_gateway.remote(self.gateway_id, me) for p in self.partitions))
        self._server = await serve(
            self._handle,
            self.host,
            self.port,
            max_size=self.config["max_frame_size"],
            compression=None,
        )
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"ws://{self.host}:{port}"
        return {"gateway": self.gateway_id, "url": self.url, "host": self.host, "port": port}

    async def set_peers(self, peers: list[Any]) -> None:
        """Every gateway of the instance (this one included), for session-wide operations."""
        self.peers = peers

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close(close_connections=False)
        for conn in list(self.connections.values()):
            await self._close(conn, "SERVER_SHUTDOWN", "the server is shutting down", CLOSE_SHUTDOWN)
        if self._server is not None:
            await self._server.wait_closed()
        await asyncio.gather(
            *(p.detach_gateway.remote(self.gateway_id) for p in self.partitions), return_exceptions=True
        )

    async def stats(self) -> dict[str, Any]:
        return {
            "gateway": self.gateway_id,
            "pid": os.getpid(),
            "url": self.url,
            "sessions": len(self.registry.sessions),
            "groups": len(self.registry.groups),
            "interest": len(self.registry.interest),
            "cached_topics": len(self.registry.cache),
            "calls": sum(c.calls for c in self.channels),
            "operations": sum(c.operations for c in self.channels),
        }

    # -- configuration pushed to the gateway ---------------------------------------

    async def set_security(self, store: dict[str, Any]) -> None:
        with _no_gc():
            self._apply_changes(self.registry.set_security(SecurityStore.from_dict(store)))
        self._wake()

    async def set_session_trees(self, trees: list[Any]) -> float:
        """Apply new tables; return how long re-evaluating the sessions took (s)."""
        started = time.perf_counter()
        with _no_gc():  # a re-evaluation makes many short-lived objects in a large heap
            self._apply_changes(self.registry.set_trees(SessionTrees.from_wire(trees)))
        elapsed = time.perf_counter() - started
        self._wake()
        return elapsed

    async def session_properties(self, kind: str, value: str) -> dict[str, dict[str, str]]:
        return {sid: dict(self.registry.sessions[sid].properties) for sid in self.select_sessions(kind, value)}

    async def change_session_properties(self, kind: str, value: str, changes: dict[str, str | None]) -> int:
        chosen = self.select_sessions(kind, value)
        for sid in chosen:
            self._apply_changes(self.registry.set_properties(sid, changes))
        self._wake()
        return len(chosen)

    # -- events from partitions ----------------------------------------------

    async def deliver(self, partition: int, sequence: int, blob: bytes) -> None:
        ready = self.resequencer.accept(partition, sequence, blob)
        for batch in ready:
            self._apply_events(batch)
        if ready:
            self._wake()

    def _apply_events(self, blob: bytes) -> None:
        try:
            events = msgpack.unpackb(blob, raw=False, use_list=True)
            live = self.registry.on_events(events)
        except Exception:  # a bad batch must not stall the stream behind it
            log.exception("could not apply a batch of partition events")
            return
        for token in live:
            waiter = self._waiters.pop(token, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def _wake(self) -> None:
        for session_id in self.registry.take_dirty():
            conn = self.connections.get(session_id)
            if conn is not None:
                conn.wakeup.set()
        for session_id, (code, message) in self.registry.take_closing().items():
            conn = self.connections.get(session_id)
            if conn is not None and not conn.closing:
                self._spawn(self._close(conn, code, message, CLOSE_QUEUE_LIMIT))

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # -- connections -----------------------------------------------------------

    async def _handle(self, ws: ServerConnection) -> None:
        try:
            first = await asyncio.wait_for(ws.recv(), HELLO_TIMEOUT)
        except (TimeoutError, ConnectionClosed):
            return
        try:
            hello = self._hello(first)
            # scrypt takes tens of milliseconds: keep it off the event loop
            roles = await asyncio.to_thread(self.registry.security.authenticate, hello.principal, hello.password)
        except (RequestError, AuthenticationFailed) as e:
            await ws.send(wire.frame([wire.encode(wire.Error(0, e.code, str(e)))]))
            await ws.close(1002 if e.code == "PROTOCOL_ERROR" else 1008, e.code)
            return
        session_id = f"{self.gateway_id}-{next(self._session_ids):x}"
        client_ip = str(ws.remote_address[0]) if ws.remote_address else ""
        properties = {
            **hello.properties,
            "$SessionId": session_id,
            "$Principal": hello.principal or "",
            "$ClientIP": client_ip,
            "$Country": self._country(client_ip),
            "$Transport": "WEBSOCKET",
            "$StartTime": str(int(time.time() * 1000)),
        }
        session = self.registry.open(session_id, hello.principal or "", properties, roles)
        conn = _Connection(ws, session_id)
        self.connections[session_id] = conn
        welcome = wire.Welcome(
            wire.PROTOCOL_VERSION,
            session_id,
            dict(session.properties),
            self.config["max_frame_size"],
            self.config["hub_root"],
        )
        writer = conn.writer = asyncio.ensure_future(self._writer(conn))
        try:
            await ws.send(wire.frame([wire.encode(welcome)]))
            async for data in ws:
                self._receive(conn, data)
                self._wake()
        except ConnectionClosed:
            pass
        finally:
            writer.cancel()
            self._forget(conn)

    def _country(self, client_ip: str) -> str:
        if not self.countries or not client_ip:
            return ""
        try:
            address = ipaddress.ip_address(client_ip)
        except ValueError:
            return ""
        for network, code in self.countries:
            if address in network:
                return code
        return ""

    def _hello(self, data: Any) -> wire.Hello:
        if not isinstance(data, bytes):
            raise RequestError("PROTOCOL_ERROR", "frames must be binary")
        try:
            messages = wire.decode(data)
        except wire.ProtocolError as e:
            raise RequestError("PROTOCOL_ERROR", str(e)) from None
        if len(messages) != 1 or not isinstance(messages[0], wire.Hello):
            raise RequestError("PROTOCOL_ERROR", "the first frame must hold exactly one HELLO message")
        hello = messages[0]
        if hello.version != wire.PROTOCOL_VERSION:
            raise RequestError(
                "UNSUPPORTED_VERSION",
                f"protocol version {hello.version} is not supported; this server speaks {wire.PROTOCOL_VERSION}",
            )
        for key in hello.properties:
            if key.startswith("$") or not key:
                raise RequestError(
                    "INVALID_PROPERTIES", f"user session property {key!r} may not be empty or start with '$'"
                )
        return hello

    async def _writer(self, conn: _Connection) -> None:
        queue = self.registry.sessions[conn.session_id].queue
        try:
            while True:
                await conn.wakeup.wait()
                conn.wakeup.clear()
                while True:
                    messages = queue.take()
                    if not messages:
                        break
                    await conn.ws.send(wire.frame(messages))
        except ConnectionClosed:
            pass

    async def _close(self, conn: _Connection, code: str, message: str, ws_code: int) -> None:
        """End a session: stop its writer, drop its queue, tell the client why.

        A client that is not reading cannot take the CLOSE message; after
        CLOSE_TIMEOUT the connection is dropped without it.
        """
        if conn.closing:
            return
        conn.closing = True
        if conn.writer is not None:
            conn.writer.cancel()
        self._forget(conn)
        try:
            await asyncio.wait_for(conn.ws.send(wire.frame([wire.encode(wire.Close(code, message))])), CLOSE_TIMEOUT)
            await asyncio.wait_for(conn.ws.close(ws_code, code), CLOSE_TIMEOUT)
        except (ConnectionClosed, TimeoutError):
            conn.ws.transport.abort()

    def _forget(self, conn: _Connection) -> None:
        if self.connections.pop(conn.session_id, None) is None:
            return
        self._unregister(self.registry.close(conn.session_id))

    # -- requests --------------------------------------------------------------

    def _receive(self, conn: _Connection, data: Any) -> None:
        sid = conn.session_id
        if not isinstance(data, bytes):
            self._error(sid, 0, "PROTOCOL_ERROR", "frames must be binary")
            return
        try:
            messages = wire.decode(data)
        except wire.ProtocolError as e:
            self._error(sid, 0, e.code, str(e))
            return
        for m in messages:
            if isinstance(m, wire.Request):
                self._dispatch(conn, m)
            elif isinstance(m, wire.Malformed):
                self._error(sid, m.cid, "PROTOCOL_ERROR", m.reason)
            else:
                self._error(sid, 0, "PROTOCOL_ERROR", f"a client may not send {type(m).__name__}")

    def _error(self, session_id: str, cid: int, code: str, message: str) -> None:
        self.registry.send(session_id, wire.encode(wire.Error(cid, code, message)))

    def _respond(self, session_id: str, cid: int, result: Any) -> None:
        self.registry.send(session_id, wire.encode(wire.Response(cid, result)))

    def _dispatch(self, conn: _Connection, request: wire.Request) -> None:
        handler = getattr(self, f"_op_{request.op}", None) if request.op in wire.OPERATIONS else None
        sid = conn.session_id
        if handler is None:
            known = ", ".join(sorted(wire.OPERATIONS))
            self._error(sid, request.cid, "UNKNOWN_OPERATION", f"unknown operation {request.op!r}; known: {known}")
            return
        try:
            work = handler(sid, *request.args)
        except TypeError as e:
            self._error(sid, request.cid, "INVALID_REQUEST", f"{request.op}: wrong arguments ({e})")
            return
        except REQUEST_ERRORS as e:
            self._error(sid, request.cid, e.code, str(e))
            return
        if isinstance(work, asyncio.Future):
            # a single partition result: answer from a callback, no task needed
            work.add_done_callback(functools.partial(self._finish_one, sid, request.cid))
        else:
            self._spawn(self._finish(sid, request.cid, work))

    def _finish_one(self, sid: str, cid: int, future: asyncio.Future[list[Any]]) -> None:
        error = future.exception()
        if error is not None:
            code = getattr(error, "code", "INTERNAL")
            self._error(sid, cid, code if isinstance(code, str) else "INTERNAL", str(error))
        else:
            result = future.result()
            if result[0] == FAILED:
                self._error(sid, cid, result[1], result[2])
            else:
                self._respond(sid, cid, result[1])
        self._wake()

    async def _finish(self, sid: str, cid: int, work: Any) -> None:
        try:
            result = await work
        except REQUEST_ERRORS as e:
            self._error(sid, cid, e.code, str(e))
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if e.cause is not None else e
            code = getattr(cause, "code", "INTERNAL")
            self._error(sid, cid, code if isinstance(code, str) else "INTERNAL", str(cause))
        except Exception as e:  # never let a bug kill the session silently
            log.exception("request %s failed", cid)
            self._error(sid, cid, "INTERNAL", f"{type(e).__name__}: {e}")
        else:
            self._respond(sid, cid, result)
        self._wake()


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
