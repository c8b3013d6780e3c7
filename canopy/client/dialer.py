"""Opening a session: :func:`connect`, and the ``_Dialer`` that reaches a server and
says HELLO, for the first connection and every reconnection.

(Not named ``connect``: ``canopy.client.connect`` is the function.)"""

from __future__ import annotations

import asyncio
import os
import ssl
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from canopy import errors
from canopy import protocol as wire
from canopy import transport
from canopy.client.session import Session
from canopy.transport import WebSocketStream

DEFAULT_URL = "ws://127.0.0.1:8080"


class _Opened(NamedTuple):
    """A connection whose HELLO was welcomed, and what came with the WELCOME."""

    stream: WebSocketStream
    welcome: wire.Welcome
    rest: list[wire.Message | wire.Malformed]  # after the WELCOME, in its frame
    early: list[bytes | str]  # frames after it


@dataclass(frozen=True)
class _Dialer:
    """Where a session's server is, who the session is, and how patiently to reconnect."""

    urls: tuple[str, ...]
    principal: str | None
    password: str | None
    properties: dict[str, str]
    timeout: float
    context: ssl.SSLContext | None  # for wss:// URLs
    reconnect_timeout: float
    retry_delay: float
    #: whether the server may send new values as deltas (delta streaming), and deflated
    deltas: bool = True
    compression: bool = True

    async def dial(
        self, url: str, protocol: wire.ClientProtocol, timeout: float, resume: wire.Resume | None = None
    ) -> _Opened:
        """Connect to ``url`` and say HELLO (asking to resume ``resume``).

        :class:`~canopy.errors.ConnectError` when the server cannot be reached
        or does not answer in ``timeout`` seconds; the error the server
        answered the HELLO with (``AuthenticationError``...) when it refused.
        """
        options = {name: True for name, on in (("deltas", self.deltas), ("compression", self.compression)) if on}
        hello = protocol.hello(self.principal, self.password, self.properties, resume, options or None)
        secure = url.lower().startswith("wss:")
        try:
            stream = await asyncio.wait_for(
                transport.connect(url, ssl_context=self.context if secure else None), timeout
            )
        except ssl.SSLError as e:
            raise errors.ConnectError(f"cannot connect to {url}: {transport.tls_failure(e)}") from None
        except (OSError, TimeoutError, transport.InvalidHandshake, transport.InvalidURI) as e:
            hint = ""
            if isinstance(e, transport.InvalidHandshake) and not secure:
                hint = " (if the server serves TLS, use wss://)"
            elif isinstance(e, ConnectionResetError) and secure:  # only the TLS handshake was under way
                hint = " during the TLS handshake (does the server serve wss://?)"
            detail = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
            raise errors.ConnectError(f"cannot connect to {url}: {detail}{hint}") from None
        try:
            stream.send(hello)
            data = await asyncio.wait_for(transport.first_message(stream), timeout)
            messages = protocol.receive(data) if isinstance(data, bytes) else []
        except (ConnectionError, TimeoutError, wire.ProtocolError) as e:
            await stream.aclose()
            raise errors.ConnectError(f"handshake with {url} failed: {type(e).__name__}: {e}") from None
        except BaseException:
            stream.abort()
            raise
        first = messages[0] if messages else None
        if isinstance(first, wire.Error):
            await stream.aclose()
            raise errors.error_for(first.code, first.message)
        if not isinstance(first, wire.Welcome):
            await stream.aclose()
            raise errors.ConnectError(f"handshake with {url} failed: unexpected reply")
        return _Opened(stream, first, messages[1:], transport.take_messages(stream))


class _Connect:
    """What :func:`connect` returns: await it, or use it with ``async with``."""

    def __init__(self, dialer: _Dialer, hub_root: str | None) -> None:
        self._dialer = dialer
        self._hub_root = hub_root
        self._session: Session | None = None

    def __await__(self) -> Generator[Any, None, Session]:
        return _open(self._dialer, self._hub_root).__await__()

    async def __aenter__(self) -> Session:
        self._session = await _open(self._dialer, self._hub_root)
        return self._session

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()


def connect(
    url: str | Sequence[str] = DEFAULT_URL,
    principal: str | None = None,
    password: str | None = None,
    properties: dict[str, str] | None = None,
    *,
    hub_root: str | None = None,
    timeout: float = 10.0,
    ca_file: str | os.PathLike[str] | None = None,
    reconnect_timeout: float = 60.0,
    retry_delay: float = 0.5,
    deltas: bool = True,
    compression: bool = True,
) -> _Connect:
    """Open a session: ``async with canopy.connect(url) as session: ...``.

    ``url`` is one URL or a list of them, any of which serves the session:
    connecting tries them in order until one answers. ``timeout`` bounds
    each attempt. A ``wss://`` server must present a certificate for the
    URL's host that the CA certificates in ``ca_file`` (PEM) sign, or without
    ``ca_file`` one the system trusts; otherwise
    :class:`~canopy.errors.ConnectError` says what is wrong with it.
    ``ca_file`` is not used for ``ws://`` URLs.

    **Delta streaming.** By default the server may send a new value of a
    STRING, JSON or BINARY topic as a binary delta from the value the session
    has (when that is smaller); the session applies it and subscribers get the
    whole value as ever. ``session.delta_bytes_saved`` counts the bytes that
    saved; a delta that does not apply is counted in ``deltas_failed``, logged
    and answered by fetching the topic's value. ``deltas=False`` asks for
    whole values only. Likewise the server may send a large value of a topic
    whose COMPRESSION is not ``off`` deflated (``compression_bytes_saved``);
    ``compression=False`` asks it not to.

    **Reconnecting.** When the connection drops, the session reconnects for
    up to ``reconnect_timeout`` seconds (0: never; the session ends with the
    connection), trying the URLs in turn from the one it had, ``retry_delay``
    seconds apart (with jitter: 0.5 to 1.5 times that). Meanwhile:

    * requests that were in flight fail with
      :class:`~canopy.errors.ConnectionInterruptedError`: their outcome is
      unknown (a ``set`` may or may not have been applied). ``subscribe``
      and ``unsubscribe`` are made again instead, being safe to repeat;
    * requests made while disconnected wait for the next connection;
    * every subscription yields a ``disconnected`` event (with callbacks too).

    On the next connection the session is *resumed* when the server still
    has it (same session id, properties and subscriptions; it keeps a session
    ``session_grace_ms`` after its connection dropped), else a new one is
    opened with the same principal, password and properties, and every
    selector subscribed again. Either way each subscription is then told the
    current state: a ``value`` event with the current value for each topic
    it knew (for a TIME_SERIES topic, the events of its subscription range
    not seen yet), ``subscribed`` for topics that appeared and
    ``unsubscribed`` (reason ``DISCONNECTED``) for those that went, and then
    a ``reconnected`` event (reason ``RESUMED`` or ``NEW_SESSION``).
    Requests made while disconnected are sent as soon as the server has
    welcomed the session.

    The session ends for good — every waiting request and every
    subscription ends with :class:`~canopy.errors.SessionClosedError` — when
    the reconnect timeout passes (code ``RECONNECT_TIMEOUT``), when the
    server refuses the new HELLO (e.g. ``AUTHENTICATION_FAILED``: a changed
    password), or when the server ends the session on purpose: a CLOSE for
    anything but ``SERVER_SHUTDOWN`` (``QUEUE_LIMIT``, ``PROTOCOL_ERROR``),
    or a close code that refuses what the client sent (1002, 1003, 1007,
    1008, 1009, 1010, 4000-4999). A gateway that shuts down (``SERVER_SHUTDOWN``)
    took the session with it; the client opens a new one, there or elsewhere.
    """
    urls = (url,) if isinstance(url, str) else tuple(url)
    if not urls or not all(isinstance(u, str) for u in urls):
        raise errors.InvalidRequestError("url must be a URL or a non-empty list of URLs")
    for what, seconds in (("reconnect_timeout", reconnect_timeout), ("retry_delay", retry_delay), ("timeout", timeout)):
        if not isinstance(seconds, (int, float)) or isinstance(seconds, bool) or not seconds >= 0:
            raise errors.InvalidRequestError(f"{what} must be a number of seconds, at least 0; got {seconds!r}")
    for key, value in (properties or {}).items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise errors.InvalidPropertiesError("session properties must map strings to strings")
    context = None
    if ca_file is not None and any(u.lower().startswith("wss:") for u in urls):
        try:
            context = transport.client_context(ca_file)
        except OSError as e:  # an ssl.SSLError: the file holds no certificate
            problem = "it holds no PEM certificate" if isinstance(e, ssl.SSLError) else e.strerror or str(e)
            raise errors.ConnectError(f"cannot use the CA file {os.fspath(ca_file)}: {problem}") from None
    dialer = _Dialer(
        urls, principal, password, dict(properties or {}), float(timeout), context,
        float(reconnect_timeout), float(retry_delay), bool(deltas), bool(compression),
    )
    return _Connect(dialer, hub_root)


async def _open(dialer: _Dialer, hub_root: str | None) -> Session:
    """A new session on the first of the dialer's URLs that takes it."""
    protocol = wire.ClientProtocol()
    try:  # before connecting: a HELLO that cannot be encoded never leaves
        protocol.hello(dialer.principal, dialer.password, dialer.properties)
    except (UnicodeEncodeError, TypeError, ValueError) as e:
        raise errors.InvalidRequestError(
            f"the principal, password and properties must be text that UTF-8 can encode ({type(e).__name__})"
        ) from None
    failure: errors.ConnectError | None = None
    for url in dialer.urls:
        try:
            opened = await dialer.dial(url, protocol, dialer.timeout)
        except errors.ConnectError as e:
            failure = e
            continue
        session = Session(opened.stream, protocol, opened.welcome, hub_root, dialer, url)
        opened.stream.handler = session
        for m in opened.rest:
            session._dispatch(m)
        for data in opened.early:  # anything that came with the WELCOME
            session.on_message(opened.stream, data)
        if opened.stream.lost.done() and session._stream is opened.stream:
            session._lost(opened.stream)  # it went before the session could hear of it
        return session
    assert failure is not None
    if len(dialer.urls) > 1:
        raise errors.ConnectError(f"none of {len(dialer.urls)} URLs answered; the last: {failure.message}")
    raise failure
