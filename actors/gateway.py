"""GatewayActor: client sessions over WebSocket, one gateway per node.

The gateway is an async Ray actor whose event loop also runs a
``websockets`` server. Per connection it reads frames, decodes them with
:mod:`canopy.protocol`, and turns each request into operations on the
partitions through one :class:`~actors.channel.PartitionChannel` each. The
bookkeeping (sessions, selectors, topic cache, outbound queues) lives in
:class:`~sessions.registry.SessionRegistry`; each session's writer task
drains its queue into frames as fast as the client reads.

Partitions push events with :meth:`GatewayActor.deliver`, numbered per
partition; calls that arrive early are held until the gap before them is
filled, so every partition's events are applied in the order it made them.
"""

from __future__ import annotations

import asyncio
import functools
import heapq
import itertools
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any

import msgpack
import ray
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from actors.channel import PartitionChannel, PartitionUnavailable
from canopy import protocol as wire
from cluster.partitioning import partition_of, partitions_for
from sessions.registry import SessionRegistry
from topics import paths
from topics.errors import InvalidValueError, TopicModelError
from topics.selectors import parse_selector
from topics.specification import TopicSpecification
from topics.store import (
    FAILED,
    OP_ADD,
    OP_APPEND,
    OP_EDIT,
    OP_FETCH,
    OP_QUERY,
    OP_REGISTER,
    OP_REMOVE,
    OP_SET,
    OP_UNREGISTER,
)
from topics.types import TopicType

log = logging.getLogger("canopy.gateway")
HELLO_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
CLOSE_QUEUE_LIMIT = 4001
CLOSE_SHUTDOWN = 1001


class RequestError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(eq=False)
class _Connection:
    ws: ServerConnection
    session_id: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    writer: asyncio.Task[None] | None = None
    closing: bool = False


def _expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise RequestError("INVALID_REQUEST", f"{what} has the wrong type ({type(value).__name__})")
    return value


class GatewayActor:
    def __init__(
        self, gateway_id: str, partitions: list[Any], config: dict[str, Any], host: str, port: int
    ) -> None:
        self.gateway_id = gateway_id
        self.config = config
        self.host = host
        self.port = port
        self.partitions = partitions
        self.registry = SessionRegistry(config["queue_limit"], config["backpressure_threshold"])
        self.channels = [
            PartitionChannel(
                i, p, gateway_id, config["max_in_flight"], config["max_batch"], config["batch_window_ms"] / 1000
            )
            for i, p in enumerate(partitions)
        ]
        self.connections: dict[str, _Connection] = {}
        self._server: Server | None = None
        self._next_sequence = [1] * len(partitions)
        self._held: dict[tuple[int, int], bytes] = {}
        self._waiters: dict[int, asyncio.Future[None]] = {}
        self._session_ids = itertools.count(1)
        self._tasks: set[asyncio.Task[Any]] = set()
        self.url = ""

    # -- lifecycle -----------------------------------------------------------

    async def start(self) -> dict[str, Any]:
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
            "selectors": len(list(self.registry.index.selectors())),
            "cached_topics": len(self.registry.cache),
            "calls": sum(c.calls for c in self.channels),
            "operations": sum(c.operations for c in self.channels),
        }

    # -- events from partitions ----------------------------------------------

    async def deliver(self, partition: int, sequence: int, blob: bytes) -> None:
        expected = self._next_sequence[partition]
        if sequence != expected:
            self._held[(partition, sequence)] = blob
            return
        while True:
            self._apply_events(blob)
            expected += 1
            held = self._held.pop((partition, expected), None)
            if held is None:
                break
            blob = held
        self._next_sequence[partition] = expected
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
        except RequestError as e:
            await ws.send(wire.frame([wire.encode(wire.Error(0, e.code, str(e)))]))
            await ws.close(1002 if e.code == "PROTOCOL_ERROR" else 1008, e.code)
            return
        session_id = f"{self.gateway_id}-{next(self._session_ids):x}"
        properties = {
            "$SessionId": session_id,
            "$Principal": hello.principal or "",
            "$ClientIP": str(ws.remote_address[0]) if ws.remote_address else "",
            "$Transport": "WEBSOCKET",
            "$StartTime": str(int(time.time() * 1000)),
            **hello.properties,
        }
        self.registry.open(session_id, hello.principal or "", properties)
        conn = _Connection(ws, session_id)
        self.connections[session_id] = conn
        welcome = wire.Welcome(
            wire.PROTOCOL_VERSION, session_id, properties, self.config["max_frame_size"], self.config["hub_root"]
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
        for selector in self.registry.close(conn.session_id):
            for i in partitions_for(selector, len(self.channels)):
                _detached(self.channels[i].submit([OP_UNREGISTER, str(selector)]))

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
        except RequestError as e:
            self._error(sid, request.cid, e.code, f"{request.op}: {e}")
            return
        except TopicModelError as e:
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
        except RequestError as e:
            self._error(sid, cid, e.code, str(e))
        except PartitionUnavailable as e:
            self._error(sid, cid, e.code, str(e))
        except TopicModelError as e:
            self._error(sid, cid, e.code, str(e))
        except Exception as e:  # never let a bug kill the session silently
            log.exception("request %s failed", cid)
            self._error(sid, cid, "INTERNAL", f"{type(e).__name__}: {e}")
        else:
            self._respond(sid, cid, result)
        self._wake()

    def _route(self, path: str, operation: list[Any]) -> asyncio.Future[list[Any]]:
        return self.channels[partition_of(path, len(self.channels))].submit(operation)

    @staticmethod
    def _ok(result: list[Any]) -> Any:
        if result[0] == FAILED:
            raise RequestError(result[1], result[2])
        return result[1]

    async def _all(self, futures: list[asyncio.Future[list[Any]]]) -> list[Any]:
        return [self._ok(r) for r in await asyncio.gather(*futures)]

    def _op_add(self, sid: str, path: Any, type_name: Any, properties: Any = None) -> Any:
        path = paths.normalise(path)
        spec = TopicSpecification.of(_expect(type_name, str, "type"), _expect(properties or {}, dict, "properties"))
        return self._route(path, [OP_ADD, path, spec.type.value, spec.properties])

    def _op_set(
        self, sid: str, path: Any, data: Any, raw: Any, type_name: Any = None, add_if_missing: Any = False
    ) -> Any:
        path = paths.normalise(path)
        _expect(data, bytes, "value")
        _expect(raw, bool, "raw")
        _expect(add_if_missing, bool, "add_if_missing")
        if type_name is not None:
            type_name = TopicType.parse(_expect(type_name, str, "type")).value
        if len(data) > self.config["max_frame_size"]:
            raise InvalidValueError("value larger than the maximum frame size")
        return self._route(path, [OP_SET, path, data, raw, type_name, add_if_missing])

    def _op_append(self, sid: str, path: Any, data: Any, raw: Any, timestamp: Any = None) -> Any:
        path = paths.normalise(path)
        _expect(data, bytes, "value")
        _expect(raw, bool, "raw")
        if timestamp is not None:
            _expect(timestamp, int, "timestamp")
        author = self.registry.sessions[sid].principal
        return self._route(path, [OP_APPEND, path, data, raw, timestamp, author])

    def _op_edit(self, sid: str, path: Any, original: Any, data: Any, raw: Any) -> Any:
        path = paths.normalise(path)
        _expect(original, int, "original sequence")
        _expect(data, bytes, "value")
        _expect(raw, bool, "raw")
        author = self.registry.sessions[sid].principal
        return self._route(path, [OP_EDIT, path, original, data, raw, author])

    def _op_range_query(
        self, sid: str, path: Any, anchor: Any, anchor_value: Any, span: Any, span_value: Any,
        view: Any, limit: Any = None,
    ) -> Any:
        path = paths.normalise(path)
        _expect(anchor, str, "anchor")
        _expect(anchor_value, int, "anchor value")
        _expect(span, str, "span")
        _expect(span_value, int, "span value")
        _expect(view, str, "view")
        if limit is not None:
            _expect(limit, int, "limit")
        return self._route(path, [OP_QUERY, path, anchor, anchor_value, span, span_value, view, limit])

    def _op_remove(self, sid: str, selector: Any) -> Any:
        sel = parse_selector(_expect(selector, str, "selector"))
        futures = [self.channels[i].submit([OP_REMOVE, str(sel)]) for i in partitions_for(sel, len(self.channels))]

        async def total() -> int:
            return sum(await self._all(futures))

        return total()

    def _op_fetch(
        self, sid: str, selector: Any, with_values: Any = True, with_properties: Any = False,
        types: Any = None, limit: Any = None,
    ) -> Any:
        sel = parse_selector(_expect(selector, str, "selector"))
        _expect(with_values, bool, "with_values")
        _expect(with_properties, bool, "with_properties")
        if types is not None:
            types = [TopicType.parse(_expect(t, str, "type")).value for t in _expect(types, list, "types")]
        if limit is not None and (_expect(limit, int, "limit") < 0):
            raise RequestError("INVALID_REQUEST", "limit must not be negative")
        op = [OP_FETCH, str(sel), with_values, with_properties, types, limit]
        futures = [self.channels[i].submit(op) for i in partitions_for(sel, len(self.channels))]

        async def merged() -> list[Any]:
            parts = await self._all(futures)
            rows = list(heapq.merge(*parts, key=lambda row: row[0]))
            return rows[:limit] if limit is not None else rows

        return merged()

    def _op_subscribe(self, sid: str, selector: Any) -> Any:
        sel = parse_selector(_expect(selector, str, "selector"))
        targets = partitions_for(sel, len(self.channels))
        register, wait = self.registry.subscribe(sid, sel, len(targets))
        futures = []
        if register is not None:
            futures = [self.channels[i].submit([OP_REGISTER, str(sel), register]) for i in targets]
            self._waiters.setdefault(register, asyncio.get_running_loop().create_future())
        elif wait is not None:
            self._waiters.setdefault(wait, asyncio.get_running_loop().create_future())

        async def subscribed() -> None:
            try:
                await self._all(futures)
            except (RequestError, PartitionUnavailable) as e:
                self._unsubscribe(sid, sel)
                waiter = self._waiters.pop(register, None) if register is not None else None
                if waiter is not None and not waiter.done():
                    waiter.set_exception(e)
                    waiter.exception()  # retrieved: other sessions waiting on it see it too
                raise
            if wait is not None and not self.registry.is_live(wait):
                await self._waiters[wait]

        return subscribed()

    def _op_unsubscribe(self, sid: str, selector: Any) -> Any:
        sel = parse_selector(_expect(selector, str, "selector"))
        self._unsubscribe(sid, sel)

        async def done() -> None:
            return None

        return done()

    def _unsubscribe(self, sid: str, sel: Any) -> None:
        gone = self.registry.unsubscribe(sid, sel)
        if gone is not None:
            for i in partitions_for(gone, len(self.channels)):
                _detached(self.channels[i].submit([OP_UNREGISTER, str(gone)]))


def _detached(future: asyncio.Future[Any]) -> None:
    """Nobody waits for this result: log a failure instead of warning about it."""

    def done(f: asyncio.Future[Any]) -> None:
        if not f.cancelled() and f.exception() is not None:
            log.warning("background partition operation failed: %s", f.exception())

    future.add_done_callback(done)


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=0)(GatewayActor)
