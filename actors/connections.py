"""The gateway's WebSocket sessions: handshake, reading requests, writing frames.

Each connection is a :class:`~canopy.transport.WebSocketStream` whose
handler is a :class:`_Client`. The first message must be a HELLO; it is
authenticated against the gateway's copy of the security store (scrypt runs
off the event loop, a few at a time; repeated failures back off per
principal and address, :mod:`sessions.logins`), the session is opened in the
registry and WELCOME sent. Then every message is decoded with :mod:`canopy.protocol` and each
request handed to the gateway's dispatcher, straight from the socket
callback.

Writing has no task either: :meth:`Connections.wake` (called after every
batch of requests or partition events) writes each session that has new
messages at once, turning each delivery (:mod:`sessions.deliveries`) into
its protocol message, until the session's queue is empty or its socket
buffer is full; when the client has read enough, the stream says so
(:meth:`_Client.writable`) and writing goes on. Meanwhile the session's
queue grows, and the topics' CONFLATION policies decide what it keeps.

**Sessions outlive their connections** (protocol version 3, see
:mod:`canopy.protocol`). A connection that ends without a WebSocket close
from its client (1000 or 1001: the client meant to end) leaves its session
*kept* for ``session_grace_ms``: still registered and subscribed, its queue
still filled within its byte budget (over it, the kept session is ended).
A HELLO that names the session and its resume token (a random secret made at
open, compared in constant time), authenticated as usual and as the same
principal, takes it over: the registry drops the old queue and queues a
refresh of every view (:meth:`~sessions.registry.SessionRegistry.refresh`),
the WELCOME says ``resumed`` and how many messages make up the refresh. A
connection the gateway still holds for that session is dropped first. Every
other resume is refused without saying why, and the HELLO opens a new
session. Answers to requests of a connection that is gone are dropped (each
connection counts its own requests by correlation id). After the grace
period the session is closed as a closed connection's always was.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from canopy import protocol as wire
from actors.http_endpoints import is_websocket
from actors.settings import InstanceSettings
from canopy.transport import Handler, WebSocketStream
from sessions.collectors import SessionMetrics
from sessions.countries import CountryTable
from sessions.deliveries import CompressedUpdate, DeltaUpdate, SeriesUpdate, Subscribed, Unsubscribed, Update
from sessions.incidents import IncidentLog
from sessions.limits import Limits, PropertyLimitError
from sessions.logins import LoginFailure, LoginGuard, VerifiedPasswords, describe_failure
from sessions.registry import Session, SessionRegistry
from sessions.requests import RequestError
from sessions.security import AuthenticationFailed
from sessions.streaming import DeltaCache, DeltaStream
from topics.selectors import Selector

log = logging.getLogger("canopy.gateway")
CLOSE_QUEUE_LIMIT = 4001
#: a session closed by another session's ``session_close`` (an application code: final to a client)
CLOSE_BY_CLIENT_CONTROL = 4002
CLOSE_SHUTDOWN = 1001
CLOSE_POLICY = 1008
CLOSE_TRY_AGAIN_LATER = 1013
#: seconds between two log lines about logins refused unchecked from one address
REFUSAL_LOG_INTERVAL = 10.0
#: requests whose cost grows with the tree, or that reach every partition or other actors:
#: a session has only ``max_wide_requests_in_flight`` of them at a time, so that one cannot
#: stall the partitions for everyone else
WIDE = frozenset({
    "fetch", "remove", "subscribe", "range_query", "view_create", "view_remove", "view_list",
    "session_get", "session_set", "session_close", "session_roles", "session_subscribe", "session_unsubscribe",
    "security_update", "tree_put", "tree_remove", "cluster_status",
    "cluster_node", "missing_topic_list", "fanout_list", "fanout_add", "fanout_remove",
    "server_add", "server_remove", "server_list", "server_check",
    "collector_put", "collector_remove", "collector_list", "message_send_filter",
    "notify_select", "notify_deselect",
})
#: messages a client may send before its HELLO is answered
EARLY_LIMIT = 64
#: WebSocket close codes with which a client ends its session on purpose (any other end keeps it)
CLEAN_CLOSES = frozenset({1000, 1001})


def to_wire(item: object) -> wire.Message | bytes:
    """The protocol message for a queued item (a delivery, or a message as it is,
    encoded already or not)."""
    if isinstance(item, Update):
        return wire.Value(item.alias, item.value, item.retained)
    if isinstance(item, DeltaUpdate):
        return wire.Delta(item.alias, item.delta)
    if isinstance(item, CompressedUpdate):
        return wire.Compressed(item.alias, item.data)
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
    assert isinstance(item, (bytes, wire.Response, wire.Error, wire.Close)), item
    return item


class _Client(Handler):
    """One connection: waiting for its HELLO, authenticating, or a session."""

    def __init__(self, connections: Connections) -> None:
        self.connections = connections
        self.stream: WebSocketStream | None = None
        self.session_id: str | None = None
        self.early: list[bytes | str] | None = None  # messages that came before WELCOME
        self.closing = False
        self._hello_timer: asyncio.TimerHandle | None = None
        #: requests handed to the gateway and not answered yet (wide ones too), and those waiting for room
        self.in_flight = 0
        self.wide_in_flight = 0
        self.waiting: deque[tuple[wire.Request, int]] = deque()
        #: correlation id -> requests of this connection with it that were handed on and not answered
        self.outstanding: dict[int, int] = {}
        self.protocol_errors = 0
        #: the client's IP address, whether the connection counts against the limits, and
        #: why it was refused (over a limit) if it was
        self.address = ""
        #: the topics' bases and compression levels, when the client takes deltas or compressed
        #: values (its HELLO said so)
        self.deltas: DeltaStream | None = None
        self.counted = False
        self.refusal: str | None = None

    def on_connected(self, stream: WebSocketStream) -> None:
        """Counted against the limits from the first byte on (a connection that never
        finishes its WebSocket handshake counts too), and given ``hello_timeout_ms`` to
        finish the handshake and send its HELLO."""
        self.stream = stream
        self.address = str(stream.remote_address[0]) if stream.remote_address else ""
        self.refusal = self.connections.admit_connection(self.address)
        if self.refusal is None:
            self.counted = True
            self.connections.streams.add(stream)
        self._hello_timer = asyncio.get_running_loop().call_later(self.connections.hello_timeout, self._no_hello)

    def on_request(self, stream: WebSocketStream, request: Any) -> Any:
        """A handshake for ``/mqtt`` hands the connection to MQTT over WebSocket (counted
        against the limits still, as this connection was); a request that is no WebSocket
        handshake is plain HTTP (``/healthz``, ``/readyz``, ``/metrics``: answered, then closed)."""
        http = self.connections.http
        if http is not None and not is_websocket(request):
            if self._hello_timer is not None:
                self._hello_timer.cancel()
            self.closing = True
            transport = stream.transport
            return http.handle(request, self.address,
                               lambda: transport is not None and not transport.is_closing())
        mqtt = self.connections.websocket_mqtt
        if mqtt is None or self.refusal is not None or request.path.split("?", 1)[0] != "/mqtt":
            return None
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        self.closing = True  # this handler's part is over
        return mqtt(stream, self._release)

    def _release(self, stream: WebSocketStream) -> None:
        """Uncount a connection another handler took over, once it is gone."""
        if self.counted:
            self.counted = False
            self.connections.streams.discard(stream)
            self.connections.connection_closed(self.address)

    def on_open(self, stream: WebSocketStream) -> None:
        if self.refusal is not None:  # over a connection limit: told why, and closed
            self.closing = True
            stream.send(wire.encode_frame([wire.Error(0, "LIMIT_EXCEEDED", self.refusal)]))
            stream.close(CLOSE_TRY_AGAIN_LATER, "LIMIT_EXCEEDED")

    def _no_hello(self) -> None:
        """A connection that sent no HELLO in time: told why, and closed (one that has
        not finished its handshake, or was refused, is dropped)."""
        stream = self.stream
        if stream is None or self.early is not None or (self.closing and self.refusal is None):
            return
        if not stream.open or self.refusal is not None:
            stream.abort()
            return
        self.closing = True
        message = f"no HELLO within {self.connections.hello_timeout:g} s of connecting (hello_timeout_ms)"
        stream.send(wire.encode_frame([wire.Error(0, "PROTOCOL_ERROR", message)]))
        stream.close(CLOSE_POLICY, "no HELLO in time")

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        if self.closing and self.session_id is None:
            return  # refused, or given up on before its HELLO
        if self.session_id is not None:
            self.connections.receive(self, data)
        elif self.early is None:
            if self._hello_timer is not None:
                self._hello_timer.cancel()
            self.early = []
            self.connections.spawn(self.connections.hello(self, data))
        elif len(self.early) < EARLY_LIMIT:
            self.early.append(data)
        else:
            stream.close(1008, "too many messages before the session opened")

    def on_writable(self, stream: WebSocketStream) -> None:
        if self.session_id is not None:
            self.connections.write(self)

    # -- what the connections ask of every kind of connection (see actors/mqtt.py) ------------

    def pause_reading(self) -> None:
        if self.stream is not None and self.stream.transport is not None:
            self.stream.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.stream is not None and self.stream.transport is not None:
            self.stream.transport.resume_reading()

    def respond(self, cid: int, result: Any) -> None:
        """Answer request ``cid``; the answer counts against the session's budget."""
        self.connections.registry.send(self.session_id or "", wire.encode(wire.Response(cid, result)))

    def refuse(self, cid: int, code: str, message: str) -> None:
        self.connections.registry.send(self.session_id or "", wire.encode(wire.Error(cid, code, message)))

    def end(self, code: str, message: str, ws_code: int) -> None:
        """Tell the client why its session ends, and close (the session is forgotten already)."""
        if self.stream is not None:
            self.stream.send(wire.encode_frame([wire.Close(code, message)]))
            self.stream.close(ws_code, code)

    def kept_on_drop(self) -> bool:
        """Whether a session whose connection dropped is kept for its client to resume."""
        stream = self.stream
        close = stream.protocol.close_rcvd if stream is not None else None
        return not (close is not None and close.code in CLEAN_CLOSES)

    def on_closed(self, stream: WebSocketStream) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
        if self.counted:
            self.counted = False
            self.connections.streams.discard(stream)
            self.connections.connection_closed(self.address)
        self.connections.dropped(self)


class _Turn:
    """The login attempts of one (principal, address): one at a time, and how many are using it."""

    __slots__ = ("lock", "users")

    def __init__(self) -> None:
        self.lock = asyncio.Lock()
        self.users = 0


class Connections:
    """The WebSocket sessions of one gateway.

    ``dispatch(session_id, request, received_ns)`` handles a request (read
    at ``received_ns`` on the monotonic clock); ``unregister`` carries out
    the unregistrations a closed session leaves behind; ``after_receive`` is
    called after each client frame's requests, ``after_write`` after every
    write pass. ``config.session_grace_ms`` is how long a session whose
    connection dropped is kept for its client to resume.
    """

    def __init__(
        self,
        gateway_id: str,
        registry: SessionRegistry,
        config: InstanceSettings,
        dispatch: Callable[[str, wire.Request, int], None],
        unregister: Callable[[list[Selector]], None],
        after_write: Callable[[], None] = lambda: None,
        after_receive: Callable[[], None] = lambda: None,
        closed: Callable[[str], None] = lambda session_id: None,
    ) -> None:
        self.gateway_id = gateway_id
        self.registry = registry
        self.config = config
        self.countries = CountryTable(config.countries)
        self._dispatch = dispatch
        self._unregister = unregister
        self._after_write = after_write
        self._after_receive = after_receive
        self._closed = closed
        #: session id -> its connection (a _Client, or another kind: actors/mqtt.py)
        self.by_session: dict[str, Any] = {}
        #: session id -> resume token, for every session (connected or kept)
        self.tokens: dict[str, str] = {}
        #: session id -> the end of its grace period, for the sessions kept without a connection
        self.kept: dict[str, asyncio.TimerHandle] = {}
        self._grace = config.session_grace_ms / 1000
        self.streams: set[WebSocketStream] = set()
        self._serial = 0
        #: sessions closed since the gateway started (opened: ``opened``)
        self.closed_count = 0
        #: bytes of the WebSocket sessions' frames read and written since the gateway started
        self.bytes_received = self.bytes_sent = 0
        #: one diff per value for every session taking deltas (see :mod:`sessions.streaming`)
        self.delta_cache = DeltaCache()
        #: the session metric collectors' counts (sessions/collectors.py)
        self.session_metrics = SessionMetrics()
        #: the plain HTTP requests' answers (/healthz, /readyz, /metrics: actors/http_endpoints.py)
        self.http: Any = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._wake_scheduled = False
        self._admit: set[Any] = set()
        #: throttles this gateway's password logins
        self.logins = LoginGuard(time.monotonic)
        #: passwords checked right lately: a principal's next logins need no scrypt
        self.verified = VerifiedPasswords(time.monotonic)
        #: (principal, address) -> the turn its login attempts take one at a time
        self._turns: dict[tuple[str, str], _Turn] = {}
        self.refusals = IncidentLog(REFUSAL_LOG_INTERVAL)
        self._scrypt = asyncio.Semaphore(4)
        self._max_in_flight = config.max_requests_in_flight
        self._max_wide = config.max_wide_requests_in_flight
        self._max_messages = config.max_messages_per_frame
        self._max_protocol_errors = config.max_protocol_errors
        self.hello_timeout = config.hello_timeout_ms / 1000
        self._max_connections = self.max_connections = config.max_connections
        self._max_per_address = config.max_connections_per_address
        #: client address -> its open connections (each counted by :meth:`admit_connection`)
        self.per_address: dict[str, int] = {}
        #: connections that are not WebSocket streams (MQTT over TCP), counted against the limits too
        self.others = 0
        #: the gateway's own sessions (not clients': the MQTT front door's announcement watch),
        #: which no session query or change names and no session count includes
        self.internal: set[str] = set()
        #: makes the handler of a WebSocket connection for ``/mqtt`` (stream, release), when MQTT is on
        self.websocket_mqtt: Callable[..., Handler] | None = None
        #: told what happens to a session (``opened``, ``closed`` with a reason, ``disconnected``,
        #: ``reconnected``), for session event listeners (actors/client_control.py)
        self.life: Callable[[str, Session, str], None] = lambda what, session, reason: None

    def handler(self) -> Handler:
        """A handler for a new connection (the server's factory calls it)."""
        return _Client(self)

    def admit_connection(self, address: str) -> str | None:
        """Count a new connection from ``address``, or say why it is refused: the
        gateway holds ``max_connections`` already, or the address holds
        ``max_connections_per_address``. :meth:`connection_closed` uncounts it."""
        held = len(self.streams) + self.others
        if held >= self._max_connections:
            return (f"this gateway holds {held:,} connections; at most {self._max_connections:,} "
                    "(max_connections): try again later")
        held = self.per_address.get(address, 0)
        if held >= self._max_per_address:
            return (f"{held:,} connections from this address; at most {self._max_per_address:,} "
                    "(max_connections_per_address)")
        self.per_address[address] = held + 1
        return None

    @property
    def opened(self) -> int:
        """Sessions opened since the gateway started."""
        return self._serial

    def connection_closed(self, address: str) -> None:
        held = self.per_address.get(address, 0) - 1
        if held > 0:
            self.per_address[address] = held
        else:
            self.per_address.pop(address, None)

    # -- a session's life ----------------------------------------------------------------

    async def hello(self, client: _Client, data: bytes | str) -> None:
        stream = client.stream
        assert stream is not None
        client_ip = client.address
        try:
            hello = _hello(data, self.registry.limits)
            roles = await self.authenticate(lambda: stream.open, hello.principal, hello.password, client_ip)
        except (RequestError, AuthenticationFailed, PropertyLimitError) as e:
            stream.send(wire.encode_frame([wire.Error(0, e.code, str(e))]))
            stream.close(1002 if e.code == "PROTOCOL_ERROR" else 1008, e.code)
            return
        if not stream.open:
            return
        principal = hello.principal or ""
        resumed = self._take_over(hello.resume, principal) if hello.resume is not None else None
        if resumed is not None:
            session, refresh = resumed
        else:
            session, refresh = self.open(hello.properties, principal, roles, client_ip), 0
        client.session_id = session.id
        options = hello.options or {}
        deltas, compression = options.get("deltas") is True, options.get("compression") is True
        if deltas or compression:
            client.deltas = DeltaStream(self.delta_cache, deltas, compression)
        self.by_session[session.id] = client
        welcome = wire.Welcome(
            wire.PROTOCOL_VERSION, session.id, dict(session.properties),
            self.config.max_frame_size, self.config.hub_root, self._max_messages,
            self.tokens[session.id], resumed is not None, refresh,
        )
        stream.send(wire.encode_frame([welcome]))
        early, client.early = client.early or [], []
        for message in early:
            self.receive(client, message)
        self.wake()

    def open(
        self, user_properties: dict[str, str], principal: str, roles: frozenset[str], client_ip: str,
        transport: str = "WEBSOCKET", **fixed: str,
    ) -> Session:
        """Open a session in the registry for an authenticated client: its user properties, and
        the fixed ones every session has (``fixed`` adds more, e.g. an MQTT client id)."""
        self._serial += 1
        session_id = f"{self.gateway_id}-{self._serial:x}"
        properties = {
            **user_properties,
            "$SessionId": session_id,
            "$Principal": principal,
            "$ClientIP": client_ip,
            "$Country": self.countries.lookup(client_ip),
            "$Transport": transport,
            "$StartTime": str(int(time.time() * 1000)),
            **fixed,
        }
        self.tokens[session_id] = secrets.token_urlsafe(32)
        session = self.registry.open(session_id, principal, properties, roles)
        if transport != "INTERNAL":
            self.session_metrics.opened(session.properties, roles)
            self.life("opened", session, "")
        return session

    def _take_over(self, resume: wire.Resume, principal: str) -> tuple[Session, int] | None:
        """The session a (authenticated) HELLO may resume and the size of its
        refresh, or ``None``: no such session here any more, a wrong token, or
        another principal's session. A connection still attached to it is dropped."""
        expected = self.tokens.get(resume.session_id)
        session = self.registry.sessions.get(resume.session_id)
        if (
            expected is None
            or session is None
            or not hmac.compare_digest(expected.encode(), resume.token.encode())
            or session.principal != principal
        ):
            log.info("not resuming session %s: unknown here, or not this client's", resume.session_id)
            return None
        refresh = self.registry.refresh(session.id)
        if refresh is None:  # over its budget: the next write pass ends it
            return None
        old = self.by_session.pop(session.id, None)
        if old is not None:  # its client gave up on it before we noticed: it is no longer the session's
            old.closing = True
            if old.stream is not None:
                old.stream.abort()
        timer = self.kept.pop(session.id, None)
        if timer is not None:
            timer.cancel()
            self.life("reconnected", session, "")
        log.info("session %s resumed (a refresh of %d messages)", session.id, refresh)
        return session, refresh

    async def authenticate(
        self, is_open: Callable[[], bool], principal: str | None, password: str | None, address: str
    ) -> frozenset[str]:
        """The roles of a client logging in (``principal`` ``None`` or empty: anonymous), or
        :class:`AuthenticationFailed`: one answer for a wrong password, an unknown principal
        and an attempt refused for now (see :mod:`sessions.logins`); failures are logged
        without the password. ``is_open`` says whether the client is still connected.

        The attempts of one principal from one address take turns (the next waits for the
        one before to be decided, at most the guard's ``max_wait``), so parallel logins
        with the right password never count as each other's failures; a password checked
        right lately (:class:`~sessions.logins.VerifiedPasswords`) needs no scrypt."""
        security = self.registry.security
        if not principal:  # anonymous: no password to guess, no scrypt
            try:
                return security.authenticate(None, None)
            except AuthenticationFailed:
                self._log_refusal(None, address, LoginFailure.ANONYMOUS_NOT_ALLOWED, known=False)
                raise
        deadline = time.monotonic() + self.logins.max_wait  # the answer comes within it, whatever it waits for
        pair = (principal, address)
        turn = self._turns.get(pair)
        if turn is None:
            turn = self._turns[pair] = _Turn()
        turn.users += 1
        try:
            try:  # one attempt of a pair at a time: the next sees whether this one was right
                await asyncio.wait_for(turn.lock.acquire(), self.logins.max_wait)
            except asyncio.TimeoutError:
                self.logins.turn_timed_out()
                self._log_refusal(principal, address, LoginFailure.REFUSED, known=principal in security.principals)
                raise AuthenticationFailed.wrong_credentials(principal) from None
            try:
                if not is_open():  # gone while it queued: not counted
                    raise AuthenticationFailed.wrong_credentials(principal)
                return await self._check(is_open, principal, password, address, deadline - time.monotonic())
            finally:
                turn.lock.release()
        finally:
            turn.users -= 1
            if not turn.users:
                del self._turns[pair]

    async def _check(
        self, is_open: Callable[[], bool], principal: str, password: str | None, address: str, left: float
    ) -> frozenset[str]:
        """One attempt's turn: the guard's wait (at most ``left`` seconds more) or refusal,
        then the password check."""
        security = self.registry.security
        admission = self.logins.admit(principal, address, left)  # counts as a failure until it succeeds
        if admission.wait:
            await asyncio.sleep(admission.wait)  # only this connection waits
        if not admission.admitted:
            self._log_refusal(principal, address, LoginFailure.REFUSED, known=principal in security.principals)
            raise AuthenticationFailed.wrong_credentials(principal)
        if not is_open():  # gone while it waited: stays counted, no scrypt spent
            raise AuthenticationFailed.wrong_credentials(principal)
        security = self.registry.security  # as it is now, after the wait
        known = security.principals.get(principal)
        if known is not None and password is not None and self.verified.matches(principal, password, known.password_hash):
            roles = known.roles  # checked right lately against this very hash: no scrypt
        else:
            try:
                async with self._scrypt:  # each check takes tens of ms and 16 MB: a few at a time, off the loop
                    roles = await asyncio.to_thread(security.authenticate, principal, password)
            except AuthenticationFailed:
                log.warning(
                    describe_failure(principal, address, LoginFailure.WRONG_CREDENTIALS, known=known is not None)
                )
                raise
            if known is not None and password is not None:
                self.verified.remember(principal, password, known.password_hash)
        self.logins.succeeded(principal, address)
        return roles

    def _log_refusal(self, principal: str | None, address: str, reason: LoginFailure, *, known: bool) -> None:
        """Log a login refused without a password check: these cost the client nothing, so
        one address gets one such line per :data:`REFUSAL_LOG_INTERVAL` (the next says how
        many were not logged). Checked failures are logged each: the guard bounds them."""
        suffix = self.refusals.record((address, reason), time.monotonic())
        if suffix is not None:
            log.warning(describe_failure(principal, address, reason, known=known) + suffix)

    def close(self, client: Any, code: str, message: str, ws_code: int) -> None:
        """End a session: drop its queue, tell the client why, close.

        A client that is not reading cannot take the CLOSE message; the
        stream drops the connection when the closing handshake times out.
        """
        if client.closing:
            return
        client.closing = True
        self.forget(client, code)
        client.end(code, message, ws_code)

    def end_session(self, session_id: str, code: str, message: str, ws_code: int) -> bool:
        """End a session whatever state it is in: one with a connection is told why and closed
        (:meth:`close`), one kept for its client to resume is forgotten. False when this
        connections object does not hold it."""
        client = self.by_session.get(session_id)
        if client is not None:
            self.close(client, code, message, ws_code)
            return True
        if session_id in self.kept:
            self._end_kept(session_id, f"{code}: {message}", code)
            return True
        return False

    async def close_all(self, timeout: float = 6.0) -> None:
        for session_id in list(self.kept):
            self._end_kept(session_id, "the server is shutting down", "SERVER_SHUTDOWN")
        for client in list(self.by_session.values()):
            self.close(client, "SERVER_SHUTDOWN", "the server is shutting down", CLOSE_SHUTDOWN)
        for stream in list(self.streams):
            stream.close(CLOSE_SHUTDOWN, "SERVER_SHUTDOWN")
        lost = [s.lost for s in self.streams]
        if lost:
            await asyncio.wait(lost, timeout=timeout)

    def forget(self, client: Any, reason: str = "CLOSED_BY_CLIENT") -> None:
        """End the client's session (if it still is the client's); ``reason`` is why."""
        session_id = client.session_id
        self._admit.discard(client)  # its waiting requests go with it
        if session_id is None or self.by_session.get(session_id) is not client:
            return
        del self.by_session[session_id]
        self.tokens.pop(session_id, None)
        self._close_session(session_id, reason)

    def dropped(self, client: Any) -> None:
        """A connection is gone. Its session ends with it when the client closed
        it (or the server did); otherwise it is kept for the grace period."""
        session_id = client.session_id
        holder = self.by_session.get(session_id) if session_id is not None else None
        if holder is None or holder is not client:
            return  # no session yet, or ended, or taken over by another connection
        if client.closing or self._grace <= 0 or not client.kept_on_drop():
            self.forget(client)
            return
        del self.by_session[session_id]
        self._admit.discard(client)
        self.kept[session_id] = asyncio.get_running_loop().call_later(self._grace, self._end_kept, session_id)
        session = self.registry.sessions.get(session_id)
        if session is not None:
            self.life("disconnected", session, "")
        log.info("session %s lost its connection; kept %.3g s for its client to resume it", session_id, self._grace)

    def _end_kept(self, session_id: str, why: str = "its grace period passed", reason: str = "EXPIRED") -> None:
        timer = self.kept.pop(session_id, None)
        if timer is None:
            return
        timer.cancel()
        self.tokens.pop(session_id, None)
        log.info("session %s ended without its client: %s", session_id, why)
        self._close_session(session_id, reason)

    def _close_session(self, session_id: str, reason: str = "CLOSED_BY_CLIENT") -> None:
        """Close a session in the registry (counted), and say so (``reason``: why it ended)."""
        session = self.registry.sessions.get(session_id)
        if session is not None and session_id not in self.internal:
            self.session_metrics.closed(session.properties, session.roles)
            self.life("closed", session, reason)
        self._unregister(self.registry.close(session_id))
        self.closed_count += 1
        self._closed(session_id)

    # -- requests and notifications ---------------------------------------------------------

    def receive(self, client: _Client, data: bytes | str) -> None:
        if client.closing:  # its session ended, or another connection took it over
            return
        received = time.perf_counter_ns()
        if not isinstance(data, bytes):
            self._protocol_error(client, 0, "frames must be binary")
            self.wake()
            return
        self.bytes_received += len(data)
        count = wire.message_count(data)
        if count is not None and count > self._max_messages:
            self.close(
                client, "PROTOCOL_ERROR",
                f"a frame of {count:,} messages; at most {self._max_messages:,} (max_messages_per_frame)",
                CLOSE_POLICY,
            )
            return
        try:
            messages = wire.decode(data)
        except wire.ProtocolError as e:
            self._protocol_error(client, 0, str(e))
        else:
            for m in messages:
                if isinstance(m, wire.Request):
                    self.submit(client, m, received)
                elif isinstance(m, wire.Malformed):
                    self._protocol_error(client, m.cid, m.reason)
                else:
                    self._protocol_error(client, 0, f"a client may not send {type(m).__name__}")
            if client.waiting:  # flow control: read no more from a session that has enough requests in hand
                client.pause_reading()
        self._after_receive()
        self.wake()

    def received(self) -> None:
        """A connection of another kind (MQTT) handed over what it read: send the requests on."""
        self._after_receive()
        self.wake()

    def submit(self, client: Any, request: wire.Request, received: int) -> None:
        """Hand a session's request to the gateway, or keep it waiting while the session has
        as many in flight as it may (the caller pauses reading while any wait)."""
        if not client.waiting and self._room(client, request):
            self._start(client, request, received)
        else:
            client.waiting.append((request, received))

    def _protocol_error(self, client: _Client, cid: int, message: str) -> None:
        """Answer a message that is not the protocol; too many close the session."""
        if client.session_id is None or client.closing:
            return
        client.protocol_errors += 1
        if client.protocol_errors > self._max_protocol_errors:
            self.close(
                client, "PROTOCOL_ERROR",
                f"more than {self._max_protocol_errors:,} protocol errors (max_protocol_errors); the last: {message}",
                CLOSE_POLICY,
            )
            return
        self.registry.send(client.session_id, wire.encode(wire.Error(cid, "PROTOCOL_ERROR", message)))

    def error(self, session_id: str, cid: int, code: str, message: str, op: str) -> None:
        """Answer a request (of operation ``op``) with an error; every request gets one answer."""
        client = self._answered(session_id, cid, op)
        if client is not None:
            client.refuse(cid, code, message)

    def respond(self, session_id: str, cid: int, result: Any, op: str) -> None:
        """Answer a request (of operation ``op``); the answer counts against the
        session's budget at its encoded size."""
        client = self._answered(session_id, cid, op)
        if client is not None:
            client.respond(cid, result)

    def _answered(self, session_id: str, cid: int, op: str) -> Any:
        """Count an answer to the session's connection and return the connection; ``None``
        when the request came on a connection that is gone (the answer goes nowhere)."""
        client = self.by_session.get(session_id)
        if client is None:
            return None
        outstanding = client.outstanding
        count = outstanding.get(cid, 0)
        if count <= 0:
            return None
        if count == 1:
            del outstanding[cid]
        else:
            outstanding[cid] = count - 1
        client.in_flight -= 1
        if op in WIDE:
            client.wide_in_flight -= 1
        if client.waiting and self._room(client, client.waiting[0][0]):
            self._admit.add(client)
            self.wake()
        return client

    def _room(self, client: Any, request: wire.Request) -> bool:
        """Whether the session may have one more request like this one in flight."""
        if client.in_flight >= self._max_in_flight:
            return False
        return request.op not in WIDE or client.wide_in_flight < self._max_wide

    def _start(self, client: Any, request: wire.Request, received: int) -> None:
        client.in_flight += 1
        client.outstanding[request.cid] = client.outstanding.get(request.cid, 0) + 1
        if request.op in WIDE:
            client.wide_in_flight += 1
        self._dispatch(client.session_id or "", request, received)

    def _admit_waiting(self) -> None:
        """Hand waiting requests to the gateway as answers make room; read again when none wait."""
        admit, self._admit = self._admit, set()
        for client in admit:
            if client.closing or client.session_id is None:
                continue
            while client.waiting and self._room(client, client.waiting[0][0]):
                request, received = client.waiting.popleft()
                self._start(client, request, received)
            if not client.waiting:
                client.resume_reading()
        if admit:
            self._after_receive()

    def wake(self) -> None:
        """Soon (once the callbacks ready now have run, so that their messages
        share frames): write every session with new messages and close the
        sessions the registry gave up on."""
        if not self._wake_scheduled:
            self._wake_scheduled = True
            asyncio.get_running_loop().call_soon(self._write_dirty)

    def _write_dirty(self) -> None:
        self._wake_scheduled = False
        if self._admit:
            self._admit_waiting()
        frames: dict[tuple[int, ...], tuple[bytes, list[object]]] = {}
        for session_id in self.registry.take_dirty():
            client = self.by_session.get(session_id)
            if client is not None:
                self.write(client, frames)
        for session_id, (code, message) in self.registry.take_closing().items():
            client = self.by_session.get(session_id)
            if client is not None:
                self.close(client, code, message, CLOSE_QUEUE_LIMIT)
            else:
                self._end_kept(session_id, f"{code}: {message}")
        self._after_write()

    def write(self, client: Any, frames: dict[tuple[int, ...], tuple[bytes, list[object]]] | None = None) -> None:
        """Write the session's queue until it is empty or the socket is full.

        ``frames`` remembers the frames of one write pass by the identity of
        the messages in them: sessions that share a topic's deliveries (the
        same objects, in the same order) share the encoded frame too. It
        holds the messages, so that no identity is reused during the pass.
        """
        session = self.registry.sessions.get(client.session_id or "")
        if session is None or client.closing:
            return
        if not isinstance(client, _Client):
            client.write(session)  # its own protocol
            return
        stream = client.stream
        if stream is None:
            return
        queue = session.queue
        deltas = client.deltas
        while not stream.paused and len(queue):
            items = queue.take()
            if not items:
                break
            if deltas is not None:
                items = deltas.outgoing(items)
            if frames is None:
                data = wire.encode_frame([to_wire(item) for item in items])
            else:
                key = tuple(map(id, items))
                found = frames.get(key)
                if found is None:
                    found = frames[key] = (wire.encode_frame([to_wire(item) for item in items]), items)
                data = found[0]
            self.bytes_sent += len(data)
            if not stream.send(data):
                break

    def spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _hello(data: Any, limits: Limits) -> wire.Hello:
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
    limits.user_properties(hello.properties)
    return hello
