"""The gateway's WebSocket sessions: handshake, reading requests, writing frames.

Per connection: the first frame must be a HELLO; it is authenticated
against the gateway's copy of the security store (scrypt runs off the event
loop), the session is opened in the registry and WELCOME sent. Then every
frame is decoded with :mod:`canopy.protocol` and each request handed to the
gateway's dispatcher. A writer task per session drains the session's
outbound queue into frames as fast as the client reads, turning each
delivery (:mod:`sessions.deliveries`) into its protocol message.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection
from websockets.exceptions import ConnectionClosed

from canopy import protocol as wire
from sessions.countries import CountryTable
from sessions.deliveries import SeriesUpdate, Subscribed, Unsubscribed, Update
from sessions.registry import SessionRegistry
from sessions.requests import RequestError
from sessions.security import AuthenticationFailed
from topics.selectors import Selector

log = logging.getLogger("canopy.gateway")
HELLO_TIMEOUT = 10.0
CLOSE_TIMEOUT = 5.0
CLOSE_QUEUE_LIMIT = 4001
CLOSE_SHUTDOWN = 1001


def to_wire(item: object) -> wire.Message:
    """The protocol message for a queued item (a delivery, or a message as it is)."""
    if isinstance(item, Update):
        return wire.Value(item.alias, item.value)
    if isinstance(item, Subscribed):
        return wire.Subscribed(item.alias, item.path, item.type, item.properties, item.value)
    if isinstance(item, SeriesUpdate):
        e = item.event
        return wire.Event(
            item.alias, e.sequence, e.timestamp, e.author, e.value,
            e.original_sequence, e.original_timestamp, e.original_author,
        )
    if isinstance(item, Unsubscribed):
        return wire.Unsubscribed(item.alias, item.reason)
    assert isinstance(item, (wire.Response, wire.Error, wire.Close)), item
    return item


@dataclass(eq=False)
class Connection:
    ws: ServerConnection
    session_id: str
    wakeup: asyncio.Event = field(default_factory=asyncio.Event)
    writer: asyncio.Task[None] | None = None
    closing: bool = False


class Connections:
    """The WebSocket sessions of one gateway.

    ``dispatch(session_id, request)`` handles a request; ``unregister``
    carries out the unregistrations a closed session leaves behind.
    """

    def __init__(
        self,
        gateway_id: str,
        registry: SessionRegistry,
        config: dict[str, Any],
        dispatch: Callable[[str, wire.Request], None],
        unregister: Callable[[list[Selector]], None],
    ) -> None:
        self.gateway_id = gateway_id
        self.registry = registry
        self.config = config
        self.countries = CountryTable(config.get("countries"))
        self._dispatch = dispatch
        self._unregister = unregister
        self.by_session: dict[str, Connection] = {}
        self._serial = 0
        self._tasks: set[asyncio.Task[Any]] = set()

    # -- a connection's life -----------------------------------------------------------

    async def handle(self, ws: ServerConnection) -> None:
        try:
            first = await asyncio.wait_for(ws.recv(), HELLO_TIMEOUT)
        except (TimeoutError, ConnectionClosed):
            return
        try:
            hello = _hello(first)
            # scrypt takes tens of milliseconds: keep it off the event loop
            roles = await asyncio.to_thread(self.registry.security.authenticate, hello.principal, hello.password)
        except (RequestError, AuthenticationFailed) as e:
            await ws.send(wire.encode_frame([wire.Error(0, e.code, str(e))]))
            await ws.close(1002 if e.code == "PROTOCOL_ERROR" else 1008, e.code)
            return
        self._serial += 1
        session_id = f"{self.gateway_id}-{self._serial:x}"
        client_ip = str(ws.remote_address[0]) if ws.remote_address else ""
        properties = {
            **hello.properties,
            "$SessionId": session_id,
            "$Principal": hello.principal or "",
            "$ClientIP": client_ip,
            "$Country": self.countries.lookup(client_ip),
            "$Transport": "WEBSOCKET",
            "$StartTime": str(int(time.time() * 1000)),
        }
        session = self.registry.open(session_id, hello.principal or "", properties, roles)
        conn = Connection(ws, session_id)
        self.by_session[session_id] = conn
        welcome = wire.Welcome(
            wire.PROTOCOL_VERSION, session_id, dict(session.properties),
            self.config["max_frame_size"], self.config["hub_root"],
        )
        writer = conn.writer = asyncio.ensure_future(self._writer(conn))
        try:
            await ws.send(wire.encode_frame([welcome]))
            async for data in ws:
                self._receive(conn, data)
                self.wake()
        except ConnectionClosed:
            pass
        finally:
            writer.cancel()
            self._forget(conn)

    async def _writer(self, conn: Connection) -> None:
        queue = self.registry.sessions[conn.session_id].queue
        try:
            while True:
                await conn.wakeup.wait()
                conn.wakeup.clear()
                while True:
                    items = queue.take()
                    if not items:
                        break
                    await conn.ws.send(wire.encode_frame([to_wire(item) for item in items]))
        except ConnectionClosed:
            pass

    async def close(self, conn: Connection, code: str, message: str, ws_code: int) -> None:
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
            await asyncio.wait_for(conn.ws.send(wire.encode_frame([wire.Close(code, message)])), CLOSE_TIMEOUT)
            await asyncio.wait_for(conn.ws.close(ws_code, code), CLOSE_TIMEOUT)
        except (ConnectionClosed, TimeoutError):
            conn.ws.transport.abort()

    async def close_all(self) -> None:
        for conn in list(self.by_session.values()):
            await self.close(conn, "SERVER_SHUTDOWN", "the server is shutting down", CLOSE_SHUTDOWN)

    def _forget(self, conn: Connection) -> None:
        if self.by_session.pop(conn.session_id, None) is None:
            return
        self._unregister(self.registry.close(conn.session_id))

    # -- requests and notifications ---------------------------------------------------------

    def _receive(self, conn: Connection, data: Any) -> None:
        sid = conn.session_id
        if not isinstance(data, bytes):
            self.error(sid, 0, "PROTOCOL_ERROR", "frames must be binary")
            return
        try:
            messages = wire.decode(data)
        except wire.ProtocolError as e:
            self.error(sid, 0, e.code, str(e))
            return
        for m in messages:
            if isinstance(m, wire.Request):
                self._dispatch(sid, m)
            elif isinstance(m, wire.Malformed):
                self.error(sid, m.cid, "PROTOCOL_ERROR", m.reason)
            else:
                self.error(sid, 0, "PROTOCOL_ERROR", f"a client may not send {type(m).__name__}")

    def error(self, session_id: str, cid: int, code: str, message: str) -> None:
        self.registry.send(session_id, wire.Error(cid, code, message))

    def respond(self, session_id: str, cid: int, result: Any) -> None:
        self.registry.send(session_id, wire.Response(cid, result))

    def wake(self) -> None:
        """Wake the writers of sessions with new messages; close the sessions
        the registry gave up on."""
        for session_id in self.registry.take_dirty():
            conn = self.by_session.get(session_id)
            if conn is not None:
                conn.wakeup.set()
        for session_id, (code, message) in self.registry.take_closing().items():
            conn = self.by_session.get(session_id)
            if conn is not None and not conn.closing:
                self.spawn(self.close(conn, code, message, CLOSE_QUEUE_LIMIT))

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _hello(data: Any) -> wire.Hello:
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
            raise RequestError("INVALID_PROPERTIES", f"user session property {key!r} may not be empty or start with '$'")
    return hello
