"""WebSocket connections on asyncio, driven from websockets' sans-I/O protocol.

:class:`WebSocketStream` is an :class:`asyncio.Protocol`: bytes from the
socket go into a websockets protocol object (``ClientProtocol`` or
``ServerProtocol``), which parses frames and answers pings and closes; every
complete message goes straight to the stream's :class:`Handler` from the
socket callback, and :meth:`WebSocketStream.send` frames and writes at once.
No task, queue or lock stands between the socket and the handler, which is
what a broker's latency needs; the handler sees back pressure as
:attr:`WebSocketStream.paused` and is told when writing may go on
(:meth:`Handler.writable`).

Both sides keep the connection alive: every ``ping_interval`` seconds a
stream that has received nothing since the last tick sends a ping, and a
stream whose ping went unanswered for ``ping_timeout`` fails with 1011.
Messages larger than ``max_size`` fail the connection with 1009 (the
protocol object enforces it).

:func:`connect` opens a client stream and completes its handshake (over
TLS for ``wss://``, verified with :func:`client_context`); :func:`serve_stream`
is the protocol factory of a server (the server's ``create_server`` brings
TLS, if any).
"""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
from collections.abc import Callable, Sequence
from typing import Any

from websockets.client import ClientProtocol
from websockets.exceptions import InvalidHandshake, InvalidURI
from websockets.frames import Frame, Opcode
from websockets.http11 import Request, Response
from websockets.protocol import CLOSED, OPEN, Protocol
from websockets.server import ServerProtocol
from websockets.uri import parse_uri

__all__ = ["Handler", "WebSocketStream", "connect", "serve_stream"]

PING_INTERVAL = 20.0
PING_TIMEOUT = 20.0
CLOSE_TIMEOUT = 5.0
WRITE_HIGH = 256 * 1024  # bytes buffered before the stream counts as paused
WRITE_LOW = 64 * 1024


class Handler:
    """What a stream tells its owner; override what you need."""

    def on_connected(self, stream: WebSocketStream) -> None:
        """The TCP (or TLS) connection is there; the opening handshake is to come."""

    def on_request(
        self, stream: WebSocketStream, request: Request
    ) -> Handler | Response | asyncio.Future[Response] | None:
        """A server's opening handshake request arrived: return another handler to take
        the connection over once it is open (by the request's path, say), or ``None``; or a
        plain HTTP response to send instead of accepting (a request that is no WebSocket
        handshake: ``/metrics``, say), or a future of one (the connection closes after it)."""
        return None

    def on_open(self, stream: WebSocketStream) -> None:
        """The opening handshake completed."""

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        """A complete message arrived."""

    def on_writable(self, stream: WebSocketStream) -> None:
        """The send buffer drained after :attr:`WebSocketStream.paused` was set."""

    def on_closed(self, stream: WebSocketStream) -> None:
        """The connection is gone (see :attr:`WebSocketStream.close_code`)."""


class WebSocketStream(asyncio.Protocol):
    def __init__(
        self,
        protocol: Protocol,
        handler: Handler,
        *,
        ping_interval: float | None = PING_INTERVAL,
        ping_timeout: float = PING_TIMEOUT,
        close_timeout: float = CLOSE_TIMEOUT,
    ) -> None:
        self.protocol = protocol
        self.handler = handler
        self.transport: asyncio.Transport | None = None
        self.paused = False
        self.remote_address: Any = None
        self._fragments: list[bytes] = []
        self._text = False
        self._ping_interval = ping_interval
        self._ping_timeout = ping_timeout
        self._close_timeout = close_timeout
        self._heard = True  # something arrived since the last keepalive tick
        self._ping_sent_at: float | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._closed_told = False
        self.lost = asyncio.get_running_loop().create_future()

    # -- state ---------------------------------------------------------------------------

    @property
    def open(self) -> bool:
        return self.protocol.state is OPEN

    @property
    def close_code(self) -> int | None:
        """The close code the peer sent (or we sent, failing first); ``None`` if none."""
        close = self.protocol.close_rcvd or self.protocol.close_sent
        return int(close.code) if close is not None else None

    @property
    def close_reason(self) -> str:
        close = self.protocol.close_rcvd or self.protocol.close_sent
        return close.reason if close is not None else ""

    # -- sending -----------------------------------------------------------------------------

    def send(self, data: bytes) -> bool:
        """Send one binary message now; ``False`` when the connection is not open."""
        if self.protocol.state is not OPEN:
            return False
        self.protocol.send_binary(data)
        self._flush()
        return True

    def close(self, code: int = 1000, reason: str = "") -> None:
        """Start the closing handshake; the connection is dropped if it does not
        complete within the close timeout."""
        if self.protocol.state is OPEN:
            self.protocol.send_close(code, reason)
            self._flush()
        if self.transport is not None and not self.transport.is_closing():
            asyncio.get_running_loop().call_later(self._close_timeout, self.abort)

    def abort(self) -> None:
        if self.transport is not None:
            self.transport.abort()

    async def aclose(self, code: int = 1000, reason: str = "") -> None:
        """Close and wait until the connection is gone (dropped after the close timeout)."""
        self.close(code, reason)
        try:
            await asyncio.wait_for(asyncio.shield(self.lost), self._close_timeout + 1)
        except TimeoutError:
            self.abort()

    def _flush(self) -> None:
        transport = self.transport
        if transport is None:
            return
        for data in self.protocol.data_to_send():
            if data:
                transport.write(data)
            elif transport.can_write_eof():  # the protocol asks to end the TCP stream
                transport.write_eof()
            else:
                transport.close()

    # -- asyncio.Protocol ---------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.remote_address = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        transport.set_write_buffer_limits(WRITE_HIGH, WRITE_LOW)
        if self._ping_interval is not None:
            self._timer = asyncio.get_running_loop().call_later(self._ping_interval, self._keepalive)
        self.handler.on_connected(self)

    def data_received(self, data: bytes) -> None:
        self._heard = True
        protocol = self.protocol
        protocol.receive_data(data)
        events = protocol.events_received()
        self._flush()  # pongs, close echoes, handshake responses
        for event in events:
            if isinstance(event, Frame):
                self._frame(event)
            elif isinstance(event, Request):
                self._request(event)
            elif isinstance(event, Response):
                self._response(event)

    def eof_received(self) -> bool | None:
        self.protocol.receive_eof()
        self.protocol.events_received()
        self._flush()
        return None

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        self.handler.on_writable(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.protocol.receive_eof()  # idempotent: the protocol ends CLOSED
        if self._timer is not None:
            self._timer.cancel()
        if not self.lost.done():
            self.lost.set_result(None)
        if not self._closed_told:
            self._closed_told = True
            self.handler.on_closed(self)

    # -- events ---------------------------------------------------------------------------------

    def _frame(self, frame: Frame) -> None:
        opcode = frame.opcode
        if opcode is Opcode.BINARY or opcode is Opcode.TEXT:
            if frame.fin:
                payload = frame.data if type(frame.data) is bytes else bytes(frame.data)
                self.handler.on_message(self, payload if opcode is Opcode.BINARY else payload.decode())
                return
            self._text = opcode is Opcode.TEXT
            self._fragments = [bytes(frame.data)]
        elif opcode is Opcode.CONT:
            self._fragments.append(bytes(frame.data))
            if frame.fin:
                whole = b"".join(self._fragments)
                self._fragments = []
                self.handler.on_message(self, whole.decode() if self._text else whole)
        elif opcode is Opcode.PONG:
            self._ping_sent_at = None

    def _request(self, request: Request) -> None:
        protocol = self.protocol
        assert isinstance(protocol, ServerProtocol)
        successor = self.handler.on_request(self, request)
        if isinstance(successor, asyncio.Future):
            successor.add_done_callback(self._respond)
            return
        if isinstance(successor, Response):
            protocol.send_response(successor)
            self._flush()
            if self.transport is not None:
                self.transport.close()
            return
        response = protocol.accept(request)
        protocol.send_response(response)
        self._flush()
        if protocol.state is OPEN:
            if successor is not None:
                self.handler = successor
            self.handler.on_open(self)
        elif self.transport is not None:
            self.transport.close()

    def _respond(self, future: asyncio.Future[Response]) -> None:
        """A plain HTTP response made later (see :meth:`Handler.on_request`)."""
        if self.transport is None or self.transport.is_closing() or future.cancelled():
            return
        if future.exception() is not None:
            response = self.protocol.reject(500, "the server could not answer\n")  # type: ignore[attr-defined]
        else:
            response = future.result()
        self.protocol.send_response(response)  # type: ignore[attr-defined]
        self._flush()
        self.transport.close()

    def _response(self, response: Response) -> None:
        if self.protocol.state is OPEN:
            self.handler.on_open(self)
        else:
            self.abort()

    def _keepalive(self) -> None:
        loop = asyncio.get_running_loop()
        if self.protocol.state is CLOSED or self.transport is None:
            return
        if self._ping_sent_at is not None and loop.time() - self._ping_sent_at > self._ping_timeout:
            if self.protocol.state is OPEN:
                self.protocol.fail(1011, "keepalive ping timeout")
                self._flush()
            self.abort()
            return
        if self.protocol.state is OPEN and not self._heard and self._ping_sent_at is None:
            self.protocol.send_ping(os.urandom(4))
            self._ping_sent_at = loop.time()
            self._flush()
        self._heard = False
        assert self._ping_interval is not None
        self._timer = loop.call_later(min(self._ping_interval, self._ping_timeout), self._keepalive)


class _Opening(Handler):
    """Collects what arrives while a client stream completes its handshake."""

    def __init__(self) -> None:
        loop = asyncio.get_running_loop()
        self.ready: asyncio.Future[None] = loop.create_future()
        self.messages: list[bytes | str] = []
        self.arrived: asyncio.Future[None] = loop.create_future()

    def on_open(self, stream: WebSocketStream) -> None:
        if not self.ready.done():
            self.ready.set_result(None)

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        self.messages.append(data)
        if not self.arrived.done():
            self.arrived.set_result(None)

    def on_closed(self, stream: WebSocketStream) -> None:
        error = ConnectionError(
            f"the connection closed ({stream.close_code} {stream.close_reason})".strip()
            if stream.close_code
            else "the connection closed"
        )
        for future in (self.ready, self.arrived):
            if not future.done():
                future.set_exception(error)


def client_context(ca_file: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """How a client verifies a ``wss://`` server: against the certificates in
    ``ca_file`` (PEM) when given, else the system's trust store; the host name
    checked; TLS 1.2 or later.

    Raises :class:`OSError` when ``ca_file`` cannot be read and
    :class:`ssl.SSLError` when it holds no certificate.
    """
    context = ssl.create_default_context(cafile=ca_file)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


_HOSTNAME_MISMATCH = 62  # X509_V_ERR_HOSTNAME_MISMATCH
_IP_ADDRESS_MISMATCH = 64  # X509_V_ERR_IP_ADDRESS_MISMATCH


def tls_failure(error: ssl.SSLError) -> str:
    """What a failed TLS handshake means, for a person (certificate problems say so)."""
    if isinstance(error, ssl.SSLCertVerificationError):
        if error.verify_code in (_HOSTNAME_MISMATCH, _IP_ADDRESS_MISMATCH):
            return f"certificate problem: the server's certificate is not valid for this host ({error.verify_message})"
        return (
            f"certificate problem: the server's certificate is not trusted ({error.verify_message}); "
            "give the CA that signed it (ca_file, --ca-file)"
        )
    return f"the TLS handshake failed ({error.reason or error}): does the server serve wss://?"


async def connect(
    url: str, *, max_size: int | None = None, ssl_context: ssl.SSLContext | None = None, **options: Any
) -> WebSocketStream:
    """Open a client stream to ``url`` (``ws://`` or ``wss://``) and complete the handshake.

    A ``wss://`` server is verified with ``ssl_context`` (default:
    :func:`client_context`, the system's trust store); a ``ws://`` URL takes
    no context. Raises :class:`OSError` (:class:`ssl.SSLError` when TLS fails:
    :func:`tls_failure` explains it), :class:`websockets.exceptions.InvalidURI`
    or :class:`websockets.exceptions.InvalidHandshake`. Until the caller sets
    :attr:`WebSocketStream.handler`, messages are kept: :func:`first_message`.
    """
    uri = parse_uri(url)
    if ssl_context is not None and not uri.secure:
        raise ValueError(f"a TLS context is for wss:// URLs, not {url}")
    protocol = ClientProtocol(uri, max_size=max_size)
    opening = _Opening()
    loop = asyncio.get_running_loop()
    tls = (ssl_context or client_context()) if uri.secure else None
    _, stream = await loop.create_connection(
        lambda: WebSocketStream(protocol, opening, **options), uri.host, uri.port, ssl=tls
    )
    protocol.send_request(protocol.connect())
    stream._flush()
    try:
        await opening.ready
    except BaseException as e:
        opening.arrived.cancel()  # nobody will wait for a first message: keep its failure unlogged
        stream.abort()
        if isinstance(e, ConnectionError):
            raise InvalidHandshake(str(protocol.handshake_exc or "the server refused the handshake")) from None
        raise
    if protocol.handshake_exc is not None:
        opening.arrived.cancel()
        stream.abort()
        raise protocol.handshake_exc
    return stream


async def first_message(stream: WebSocketStream) -> bytes | str:
    """The first message a freshly connected stream received (waits for it)."""
    opening = stream.handler
    assert isinstance(opening, _Opening)
    await opening.arrived
    return opening.messages.pop(0)


def take_messages(stream: WebSocketStream) -> list[bytes | str]:
    """What a freshly connected stream received and nobody took yet."""
    opening = stream.handler
    if not isinstance(opening, _Opening):
        return []
    taken, opening.messages = opening.messages, []
    return taken


def serve_stream(
    handler_factory: Callable[[], Handler], *, max_size: int | None, subprotocols: tuple[str, ...] = (), **options: Any
) -> Callable[[], WebSocketStream]:
    """The protocol factory of a WebSocket server: each connection gets a new handler. Of
    ``subprotocols``, the first a client offers is agreed; a client that offers none of
    them is served without one."""

    def select(protocol: ServerProtocol, offered: Sequence[str]) -> Any:
        return next((p for p in subprotocols if p in offered), None)

    def factory() -> WebSocketStream:
        protocol = ServerProtocol(max_size=max_size, select_subprotocol=select if subprotocols else None)
        return WebSocketStream(protocol, handler_factory(), **options)

    return factory


__all__ += ["InvalidHandshake", "InvalidURI", "client_context", "first_message", "take_messages", "tls_failure"]
