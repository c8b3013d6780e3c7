"""The :class:`Session`: requests and their answers, what the server sends, and
losing the connection and getting one back (reconnect, resume, resync).

The API areas (``session.topics``, ``session.time_series``...) live in their own
modules; the session holds one of each and is the only one that talks to the
protocol and the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import itertools
import logging
import random
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from canopy import errors
from canopy import protocol as wire
from canopy.client.events import EventMetadata, TimeSeriesEvent, TopicEvent, _local, _new_event
from canopy.client.clients import Clients
from canopy.client.fanout import Fanout, RemoteServers
from canopy.client.hub import Hub
from canopy.client.locks import Locks
from canopy.client.metrics import Metrics
from canopy.client.messaging import Messaging
from canopy.client.missing_topics import MissingTopics
from canopy.client.notifications import Notifications
from canopy.client.security import Security
from canopy.client.server import Server
from canopy.client.session_trees import SessionTrees
from canopy.client.sessions import Sessions
from canopy.client.subscriptions import Subscription, _Topic
from canopy.client.timeseries import TimeSeries
from canopy.client.topics import Topics
from canopy.client.views import TopicViews
from canopy.transport import Handler, WebSocketStream
from topics import types as values
from topics.deltas import DeltaError, apply as apply_delta
from topics.errors import TopicModelError
from topics.selectors import Selector, parse_selector
from topics.specification import TopicSpecification
from topics.types import TopicType

if TYPE_CHECKING:
    from canopy.client.dialer import _Dialer, _Opened

log = logging.getLogger("canopy.client")
_VALUE, _DELTA = wire.VALUE, wire.DELTA
#: the deltas applied lately in this process, with their basis and result: sessions in step get
#: the same delta for an equal basis, and apply it once (as the gateway diffs once for them)
_APPLIED: dict[bytes, tuple[bytes, bytes]] = {}
_MAX_APPLIED, _MAX_APPLIED_SIZE = 256, 16 * 1024  # at most ~8 MiB held


#: server CLOSE codes after which the session may be opened again (the gateway stops; the session is gone);
#: any other ends the session for good (``QUEUE_LIMIT``, ``PROTOCOL_ERROR``, ``CLOSED_BY_CLIENT_CONTROL``, ...)
RESUMABLE_CLOSES = frozenset({"SERVER_SHUTDOWN"})
#: WebSocket close codes with which a server refuses what this client did: the session ends for good
FINAL_CLOSE_CODES = frozenset({1002, 1003, 1007, 1008, 1009, 1010})
#: the reason of an ``unsubscribed`` event for a topic that went while the session was disconnected
GONE_WHILE_DISCONNECTED = "DISCONNECTED"
#: the reason of a ``reconnected`` event: the server still had the session, or a new one was opened
RESUMED, NEW_SESSION = "RESUMED", "NEW_SESSION"


@dataclass
class _Resync:
    """Bringing what the application was told up to date after a reconnection.

    For a resumed session, ``remaining`` counts the messages of the server's
    refresh still to come (SUBSCRIBED and EVENT); for a new one, the
    re-subscriptions not answered yet. ``seen`` holds the paths announced
    since, ``previous`` the topics by alias before (a resumed session keeps
    its aliases: the same alias is the same topic).
    """

    resumed: bool
    remaining: int
    previous: dict[int, _Topic]
    seen: set[str] = field(default_factory=set)
    #: loop time until which a re-subscription refused UNAVAILABLE is tried again
    deadline: float = 0.0


class Session(Handler):
    """A client session. Create it with :func:`connect`.

    The session outlives its connection: when the connection drops (not
    closed by the client, nor ended by the server for good: see
    :func:`connect`) the session reconnects on its own, and until
    :attr:`closed` it takes requests (those made while it is disconnected
    wait). :attr:`connected` tells whether it has a connection right now,
    :attr:`session_id` and :attr:`properties` are those of the server's
    session now (a new one when the server no longer had the old one).
    """

    def __init__(
        self,
        stream: WebSocketStream,
        protocol: wire.ClientProtocol,
        welcome: wire.Welcome,
        hub_root: str | None,
        dialer: _Dialer | None = None,
        url: str = "",
    ) -> None:
        self._stream: WebSocketStream | None = stream
        self._protocol = protocol
        self._dialer = dialer
        self._url = url
        self._resume_token = welcome.resume_token
        self.session_id = welcome.session_id
        self.properties = welcome.properties
        self.max_frame_size = welcome.max_frame_size
        self.max_messages = welcome.max_messages
        self.hub_root = hub_root or welcome.hub_root
        self.topics = Topics(self)
        self.time_series = TimeSeries(self)
        self.hub = Hub(self)
        self.security = Security(self)
        self.session_trees = SessionTrees(self)
        self.sessions = Sessions(self)
        self.clients = Clients(self)
        self.views = TopicViews(self)
        self.server = Server(self)
        self.missing_topics = MissingTopics(self)
        self.messaging = Messaging(self)
        self.fanout = Fanout(self)
        self.remote_servers = RemoteServers(self)
        self.metrics = Metrics(self)
        self.locks = Locks(self)
        #: topic notification listeners (``session.topics.notifications``)
        self._notifications = Notifications(self)
        self.closed = False
        self._closing = False
        self.close_reason: errors.CanopyError | None = None
        #: how many times the session got a connection back
        self.reconnects = 0
        self._pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], Any] | None]] = {}
        self._subscriptions: list[Subscription] = []
        self._aliases: dict[int, _Topic] = {}
        self._routes: dict[int, list[Subscription]] = {}  # alias -> subscriptions matching it
        #: where topics no subscription matches go (other sessions subscribed this one: clients.unrequested)
        self._unrequested: Subscription | None = None
        #: path -> topic, every topic the subscriptions were told of (and not told it went)
        self._known: dict[str, _Topic] = {}
        self._server_close: wire.Close | None = None
        self._reconnecting: asyncio.Task[None] | None = None
        self._resync: _Resync | None = None
        self._flush_scheduled = False
        self._writable: asyncio.Future[None] | None = None
        self.errors: list[errors.CanopyError] = []  # errors the server reported outside any request
        #: bytes of every WebSocket message received (frames' payloads)
        self.bytes_received = 0
        #: delta streaming: bytes the server did not send thanks to deltas, and deltas that did
        #: not apply (each followed by a fetch of the topic's value)
        self.delta_bytes_saved = 0
        self.deltas_failed = 0
        #: bytes the server did not send thanks to compression (a value that does not inflate
        #: counts in ``deltas_failed`` too)
        self.compression_bytes_saved = 0

    @property
    def connected(self) -> bool:
        """Whether the session has a connection now (false while it reconnects, and once closed)."""
        return self._stream is not None and not self.closed

    # -- plumbing ----------------------------------------------------------------

    def _selector(self, selector: str | Selector) -> Selector:
        try:
            return parse_selector(selector)
        except TopicModelError as e:
            raise _local(e) from None

    def _check_open(self) -> None:
        if self.closed:
            raise self.close_reason or errors.SessionClosedError("the session is closed")

    def _request(self, op: str, *args: Any, result: Callable[[Any], Any] | None = None) -> asyncio.Future[Any]:
        """Queue a request; the future resolves to its result (passed through
        ``result`` when given). Requests of one loop turn share a frame; while
        the session is disconnected they wait for the next connection."""
        self._check_open()
        try:
            cid = self._protocol.request(op, *args, max_size=self.max_frame_size)
        except wire.UnencodableRequestError as e:
            raise errors.InvalidRequestError(str(e)) from None
        except ValueError as e:
            raise errors.FrameTooLargeError(f"{e} (the server's maximum frame size)") from None
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._pending[cid] = (future, result)
        if not self._flush_scheduled and self._stream is not None:  # disconnected: sent once back
            self._flush_scheduled = True
            loop.call_soon(self._flush)
        return future

    def _schedule_flush(self) -> None:
        if not self._flush_scheduled and self._stream is not None:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush)

    async def _call(self, op: str, *args: Any) -> Any:
        future = self._request(op, *args)
        stream = self._stream
        if stream is not None and stream.paused:  # the server reads slower than we send: wait for it
            await self._drained()
        return await future

    async def _call_again(self, op: str, *args: Any) -> Any:
        """A request that may be made twice (subscribe, unsubscribe: they set
        what the session is subscribed to, which the client must know): when
        the connection drops while it is in flight, it is made again."""
        while True:
            try:
                return await self._call(op, *args)
            except errors.ConnectionInterruptedError:
                continue  # the session goes on: made again on the next connection

    def _flush(self) -> None:
        self._flush_scheduled = False
        stream = self._stream
        if stream is None:
            return  # disconnected: the requests wait for the next connection
        for data in self._protocol.data_to_send(self.max_frame_size, self.max_messages):
            if not stream.send(data):
                return

    async def _drained(self) -> None:
        if self._writable is None or self._writable.done():
            self._writable = asyncio.get_running_loop().create_future()
        await asyncio.shield(self._writable)

    def _release_writers(self) -> None:
        if self._writable is not None and not self._writable.done():
            self._writable.set_result(None)

    # -- what the stream tells the session (transport.Handler) ------------------------

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        if not isinstance(data, bytes) or stream is not self._stream:
            return
        self.bytes_received += len(data)
        try:
            self._receive(data)
        except wire.ProtocolError as e:
            self.close_reason = errors.ProtocolViolationError(str(e))
            stream.close(1002, "PROTOCOL_ERROR")

    def on_writable(self, stream: WebSocketStream) -> None:
        if stream is self._stream:
            self._release_writers()

    def on_closed(self, stream: WebSocketStream) -> None:
        if stream is self._stream:
            self._lost(stream)

    def on_open(self, stream: WebSocketStream) -> None:
        pass

    # -- losing a connection, getting one back ------------------------------------------

    def _why_lost(self, stream: WebSocketStream) -> tuple[errors.CanopyError, bool]:
        """Why the connection ended, and whether that ends the session for good:
        the client closed it, the client found the server's data broken, the
        server's CLOSE gave a reason other than :data:`RESUMABLE_CLOSES`, or the
        server's close code refused what the client sent (:data:`FINAL_CLOSE_CODES`,
        and 4000-4999, the application's codes)."""
        if self._closing or self.close_reason is not None:
            return self.close_reason or errors.SessionClosedError("the session is closed"), True
        close = self._server_close
        if close is not None:
            return errors.SessionClosedError(close.message, close.code), close.code not in RESUMABLE_CLOSES
        code = stream.close_code
        if code == 1009:
            return errors.FrameTooLargeError("the server closed the session: frame too large"), True
        detail = f" ({code} {stream.close_reason}".rstrip() + ")" if code is not None else ""
        final = code is not None and (code in FINAL_CLOSE_CODES or 4000 <= code < 5000)
        return errors.SessionClosedError(f"the session is closed{detail}"), final

    def _lost(self, stream: WebSocketStream) -> None:
        self._stream = None
        self._flush_scheduled = False
        self._release_writers()
        error, final = self._why_lost(stream)
        dialer = self._dialer
        if final or dialer is None or dialer.reconnect_timeout <= 0:
            self._end(error)
            return
        self._interrupt(stream)
        self._reconnecting = asyncio.ensure_future(self._reconnect(dialer, error))

    def _interrupt(self, stream: WebSocketStream) -> None:
        """The connection dropped: fail what was in flight on it, tell the subscriptions."""
        close, code = self._server_close, stream.close_code
        if close is not None:
            how = f"the server closed it ({close.code}: {close.message})"
        elif code is None or code == 1006:
            how = "it was dropped"
        else:
            how = f"it closed with code {code} {stream.close_reason}".rstrip()
        lost = f"the connection to {self._url or 'the server'} was lost ({how})"
        interrupted = errors.ConnectionInterruptedError(
            f"{lost}; the request was in flight: its outcome is unknown"
        )
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(interrupted)
        self._protocol.discard()
        self._resync = None
        log.info("%s; reconnecting", lost)
        notice = _new_event(TopicEvent, ("disconnected", "", None, None, None, lost, None, None, True))
        for sub in list(self._subscriptions):
            if not sub._down:
                sub._down = True
                sub._notify(notice)

    async def _reconnect(self, dialer: _Dialer, cause: errors.CanopyError) -> None:
        """Try the URLs in turn (this connection's first), a retry delay with
        jitter apart, until one takes the session back or the reconnect
        timeout has passed; then end the session."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + dialer.reconnect_timeout
        urls = dialer.urls
        first = urls.index(self._url) if self._url in urls else 0
        last: BaseException = cause
        for attempt in itertools.count():
            if attempt:
                await asyncio.sleep(min(dialer.retry_delay * random.uniform(0.5, 1.5), max(deadline - loop.time(), 0)))
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            url = urls[(first + attempt) % len(urls)]
            resume = wire.Resume(self.session_id, self._resume_token)
            try:
                opened = await dialer.dial(url, self._protocol, min(dialer.timeout, remaining), resume)
            except errors.ConnectError as e:
                last = e
                continue
            except errors.CanopyError as e:  # the server refused the HELLO: trying again would not help
                self._reconnecting = None
                self._end(errors.SessionClosedError(f"could not reconnect to {url}: {e.message}", e.code))
                return
            except Exception as e:  # a bug, not the network: end the session rather than hang it
                log.exception("reconnecting to %s failed", url)
                self._reconnecting = None
                self._end(errors.SessionClosedError(f"could not reconnect to {url}: {type(e).__name__}: {e}"))
                return
            self._reconnecting = None
            self._attach(url, opened)
            return
        self._reconnecting = None
        self._end(errors.SessionClosedError(
            f"could not reconnect within {dialer.reconnect_timeout:g} s: {last}", "RECONNECT_TIMEOUT"
        ))

    def _attach(self, url: str, opened: _Opened) -> None:
        """A new connection: resume the session or go on with a new one, then bring the subscriptions up to date."""
        stream, welcome = opened.stream, opened.welcome
        resumed = welcome.resumed and welcome.session_id == self.session_id
        self._stream, self._url, self._server_close = stream, url, None
        self._resume_token = welcome.resume_token
        self.session_id = welcome.session_id
        self.properties = welcome.properties
        self.max_frame_size = welcome.max_frame_size
        self.max_messages = welcome.max_messages
        self.reconnects += 1
        log.info("reconnected to %s: %s session %s", url, "resumed" if resumed else "new", self.session_id)
        previous, self._aliases, self._routes = self._aliases, {}, {}
        if resumed:
            resync = self._resync = _Resync(True, welcome.refresh, previous)
            if not welcome.refresh:
                self._resynced(resync)
        else:
            selectors = list(dict.fromkeys(sub.selector for sub in self._subscriptions))
            dialer = self._dialer
            resync = self._resync = _Resync(False, len(selectors), {}, deadline=asyncio.get_running_loop().time() + (
                dialer.reconnect_timeout if dialer is not None else 0.0))
            for selector in selectors:
                self._resubscribe(resync, selector)
            if not selectors:
                self._resynced(resync)
            self.missing_topics._register_again()
            self.messaging._register_again()
            self.clients._register_again()
        self._notifications._register_again(resumed)
        stream.handler = self
        for m in opened.rest:
            if self._stream is stream:
                self._dispatch(m)
        for data in opened.early:  # anything that came with the WELCOME
            self.on_message(stream, data)
        self._schedule_flush()  # the requests that waited, the re-subscriptions
        if stream.lost.done() and self._stream is stream:  # it went before the session could hear of it
            self._lost(stream)

    def _resubscribe(self, resync: _Resync, selector: Selector) -> None:
        if self._resync is not resync or self.closed:
            return
        self._request("subscribe", str(selector)).add_done_callback(
            functools.partial(self._resubscribed, resync, selector)
        )
        self._schedule_flush()

    def _resubscribed(self, resync: _Resync, selector: Selector, future: asyncio.Future[Any]) -> None:
        error = future.exception()
        if self._resync is not resync:
            return  # another connection took over (or the session ended)
        loop = asyncio.get_running_loop()
        if isinstance(error, errors.UnavailableError) and loop.time() < resync.deadline and self._dialer is not None:
            # a new gateway whose way to a partition is still failing over (the cluster lost the
            # node this session was on): the subscription waits for it, as the session waited
            delay = self._dialer.retry_delay * random.uniform(0.5, 1.5)
            loop.call_later(delay, self._resubscribe, resync, selector)
            return
        if error is not None and not isinstance(error, errors.ConnectionInterruptedError):
            assert isinstance(error, errors.CanopyError), error
            for sub in [s for s in self._subscriptions if s.selector == selector]:
                self._subscriptions.remove(sub)
                sub._end(error)
            self._reroute()
        resync.remaining -= 1
        if resync.remaining <= 0:
            self._resynced(resync)

    def _resynced(self, resync: _Resync) -> None:
        """The refresh is complete: topics not announced again went while the
        session was away; every subscription that was told of the disconnection
        is told it is over."""
        if self._resync is not resync:
            return
        self._resync = None
        for path in [p for p in self._known if p not in resync.seen]:
            gone = self._known.pop(path)
            self._fan_out(_new_event(TopicEvent, (
                "unsubscribed", path, gone.spec.type, None, gone.spec, GONE_WHILE_DISCONNECTED, None, None, True
            )))
        how = RESUMED if resync.resumed else NEW_SESSION
        notice = _new_event(TopicEvent, ("reconnected", "", None, self.session_id, None, how, None, None, True))
        for sub in list(self._subscriptions):
            if sub._down:
                sub._down = False
                sub._notify(notice)

    def _end(self, error: errors.CanopyError) -> None:
        """The session is over: every request fails with ``error`` and every
        subscription ends with it (without an error when the client closed it)."""
        if self.closed:
            return
        self.closed = True
        if self.close_reason is None:
            self.close_reason = error
        error = self.close_reason
        self._stream = None
        self._resync = None
        task, self._reconnecting = self._reconnecting, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
        self._release_writers()
        pending, self._pending = self._pending, {}
        for future, _ in pending.values():
            if not future.done():
                future.set_exception(error)
        self._protocol.discard()
        ended_by_client = self._closing
        for sub in self._subscriptions:
            sub._end(None if ended_by_client else error)
        self._subscriptions.clear()
        if self._unrequested is not None:
            self._unrequested._end(None if ended_by_client else error)

    # -- what the server sends ------------------------------------------------------------

    def _receive(self, data: bytes) -> None:
        aliases, routes_of = self._aliases, self._routes
        for item in wire.unpack_frame(data):
            # the fast path: a topic value, by far the most common message
            if type(item) is list and len(item) == 3 and item[0] == _VALUE and type(item[2]) is bytes:
                topic = aliases.get(item[1])
                if topic is not None:
                    topic.basis = item[2]
                    value = topic.value = topic.decode(item[2])
                    routes = routes_of.get(item[1])
                    if routes:
                        event = topic.value_event(value)
                        for sub in routes:
                            sub._put(event)
                continue
            if type(item) is list and len(item) == 3 and item[0] == _DELTA and type(item[2]) is bytes:
                self._delta(wire.Delta(item[1], item[2]))  # the next most common, when values are large
                continue
            self._dispatch(wire.decode_item(item))

    def _route(self, alias: int, path: str) -> None:
        routes = [s for s in self._subscriptions if s.selector.matches(path)]
        if not routes and self._unrequested is not None:
            routes = [self._unrequested]
        self._routes[alias] = routes

    def _reroute(self) -> None:
        for alias, topic in self._aliases.items():
            self._route(alias, topic.path)

    def _dispatch(self, m: Any) -> None:
        if isinstance(m, wire.Value):
            topic = self._aliases.get(m.alias)
            if topic is not None:
                topic.basis = m.value
                value = self._decode(topic.spec, m.value)
                if m.retained:
                    topic.value = value
                self._fan_out(TopicEvent("value", topic.path, topic.spec.type, value, topic.spec, retained=m.retained))
        elif isinstance(m, wire.Delta):
            self._delta(m)
        elif isinstance(m, wire.Compressed):
            self._compressed(m)
        elif isinstance(m, wire.Response):
            pending = self._pending.pop(m.cid, None)
            if pending is not None and not pending[0].done():
                future, convert = pending
                future.set_result(convert(m.result) if convert is not None else m.result)
        elif isinstance(m, wire.Subscribed):
            self._subscribed(m)
        elif isinstance(m, wire.Unsubscribed):
            gone = self._aliases.pop(m.alias, None)
            self._routes.pop(m.alias, None)
            if gone is not None:
                if self._known.get(gone.path) is gone:
                    del self._known[gone.path]
                self._fan_out(
                    TopicEvent("unsubscribed", gone.path, gone.spec.type, None, gone.spec, m.reason)
                )
        elif isinstance(m, wire.Error):
            error = errors.error_for(m.code, m.message)
            pending = self._pending.pop(m.cid, None) if m.cid else None
            if pending is not None and not pending[0].done():
                pending[0].set_exception(error)
            else:
                log.warning("server error: %s", error)
                self.errors.append(error)
        elif isinstance(m, wire.Event):
            self._event(m)
            resync = self._resync
            if resync is not None and resync.resumed:
                self._refreshed(resync)
        elif isinstance(m, wire.Close):
            self._server_close = m
        elif isinstance(m, wire.Notify):
            if m.kind == "missing_topic":
                self.missing_topics._notified(m.body)
            elif m.kind == "session_event":
                self.clients._notified(m.body)
            elif m.kind == "request":
                self.messaging._requested(m.body)
            elif m.kind == "response":
                self.messaging._responded(m.body)
            elif m.kind == "topic_notification":
                self._notifications._notified(m.body)
            else:
                log.info("ignoring a %r notification (a newer server?)", m.kind)
        elif isinstance(m, wire.Malformed):
            log.warning("malformed message from server: %s", m.reason)

    def _delta(self, m: wire.Delta) -> None:
        """A new value as a delta from the topic's basis (see :mod:`topics.deltas`). One that
        does not apply is never guessed at: the topic's value is fetched instead."""
        topic = self._aliases.get(m.alias)
        if topic is None:
            return
        basis = topic.basis
        applied = _APPLIED.get(m.delta)
        if applied is not None and basis is not None and (applied[0] is basis or applied[0] == basis):
            data = applied[1]  # another session of this process in step applied it already
        else:
            try:
                if basis is None:
                    raise DeltaError("no value to apply it to")
                data = apply_delta(m.delta, basis)
            except DeltaError as e:
                self._delta_failed(m.alias, topic, e)
                return
            if len(data) <= _MAX_APPLIED_SIZE:
                if len(_APPLIED) >= _MAX_APPLIED:
                    _APPLIED.clear()
                _APPLIED[m.delta] = (basis, data)
        self.delta_bytes_saved += len(data) - len(m.delta)
        self._value(m.alias, topic, data)

    def _compressed(self, m: wire.Compressed) -> None:
        """A new value deflated: inflated, never past the maximum frame size."""
        topic = self._aliases.get(m.alias)
        if topic is None:
            return
        inflater = zlib.decompressobj()
        try:
            data = inflater.decompress(m.data, self.max_frame_size)
            if inflater.unconsumed_tail or not inflater.eof:
                raise DeltaError(f"a compressed value inflates past {self.max_frame_size} bytes or is cut short")
        except zlib.error as e:
            self._delta_failed(m.alias, topic, DeltaError(f"a compressed value does not inflate: {e}"))
            return
        except DeltaError as e:
            self._delta_failed(m.alias, topic, e)
            return
        self.compression_bytes_saved += len(data) - len(m.data)
        self._value(m.alias, topic, data)

    def _value(self, alias: int, topic: _Topic, data: bytes) -> None:
        topic.basis = data
        value = topic.value = topic.decode(data)
        routes = self._routes.get(alias)
        if routes:
            event = topic.value_event(value)
            for sub in routes:
                sub._put(event)

    def _delta_failed(self, alias: int, topic: _Topic, error: DeltaError) -> None:
        self.deltas_failed += 1
        topic.basis = None  # later deltas cannot apply either, until a value comes
        log.warning("a delta for %s did not apply (%s); fetching its value", topic.path, error)
        self.errors.append(errors.InvalidValueError(f"a delta for {topic.path} did not apply ({error}); fetched its value"))

        def fetched(future: asyncio.Future[Any]) -> None:
            if future.cancelled() or future.exception() is not None:
                log.warning("fetching %s after a delta that did not apply failed: %s", topic.path,
                            "cancelled" if future.cancelled() else future.exception())
                return
            for row in future.result():
                if row[0] == topic.path and type(row[3]) is bytes:
                    if self._aliases.get(alias) is topic and topic.basis is None:  # nothing newer came meanwhile
                        self._value(alias, topic, row[3])
                    return

        self._request("fetch", ">" + topic.path, True, False, None, 1).add_done_callback(fetched)

    def _event(self, m: wire.Event) -> None:
        """A time series event; one seen already (before a reconnection) is not delivered again."""
        topic = self._aliases.get(m.alias)
        if topic is None or topic.spec.event_type is None or m.sequence <= topic.sequence:
            return
        original = (
            EventMetadata(m.original_sequence, m.original_timestamp or 0, m.original_author or "")
            if m.original_sequence is not None
            else None
        )
        value = values.decode(topic.spec.event_type, m.value)
        event = TimeSeriesEvent(m.sequence, m.timestamp, m.author, value, original)
        topic.value = value
        topic.sequence = m.sequence
        routes = self._routes.get(m.alias)
        if routes:
            notice = TopicEvent("value", topic.path, topic.spec.type, value, topic.spec, event=event)
            for sub in routes:
                sub._put(notice)

    def _subscribed(self, m: wire.Subscribed) -> None:
        """A topic announced: new to the subscriptions, or (after a reconnection)
        one they knew, whose current value they are given again."""
        spec = TopicSpecification.of(m.type, dict(m.properties))
        value = self._decode(spec, m.value) if m.value is not None else None
        topic = _Topic(m.path, spec, value, basis=m.value)
        self._aliases[m.alias] = topic
        self._route(m.alias, m.path)
        old = self._known.get(m.path)
        self._known[m.path] = topic
        resync = self._resync
        if old is None:
            self._fan_out(TopicEvent("subscribed", m.path, spec.type, value, spec))
        elif old.spec != spec:  # replaced while we were away
            self._fan_out(TopicEvent("unsubscribed", m.path, old.spec.type, None, old.spec, "REMOVED"))
            self._fan_out(TopicEvent("subscribed", m.path, spec.type, value, spec))
        elif spec.type is TopicType.TIME_SERIES:
            if resync is not None and resync.previous.get(m.alias) is old:
                topic.sequence = old.sequence  # the same series: only the events not seen yet follow
        elif value is not None:
            self._fan_out(TopicEvent("value", m.path, spec.type, value, spec))
        if resync is not None:
            resync.seen.add(m.path)
            if resync.resumed:
                self._refreshed(resync)

    def _refreshed(self, resync: _Resync) -> None:
        """One more message of a resumed session's refresh."""
        resync.remaining -= 1
        if resync.remaining <= 0:
            self._resynced(resync)

    @staticmethod
    def _decode(spec: TopicSpecification, data: bytes) -> Any:
        if spec.type is TopicType.TIME_SERIES:
            return data
        return values.decode(spec.type, data)

    def _fan_out(self, event: TopicEvent) -> None:
        matched = False
        for sub in self._subscriptions:
            if sub.selector.matches(event.path):
                matched = True
                sub._put(event)
        if not matched and self._unrequested is not None:
            self._unrequested._put(event)

    async def _subscribe(
        self, selector: Selector, hub_root: str | None = None, callback: Callable[[TopicEvent], Any] | None = None
    ) -> Subscription:
        sub = Subscription(self, selector, hub_root, callback)
        # topics this session already receives through another selector are
        # not announced again by the server: replay them locally
        for topic in self._known.values():
            if selector.matches(topic.path):
                sub._put(TopicEvent("subscribed", topic.path, topic.spec.type, topic.value, topic.spec))
        self._subscriptions.append(sub)
        self._reroute()
        try:
            await self._call_again("subscribe", str(selector))
        except BaseException:
            if sub in self._subscriptions:
                self._subscriptions.remove(sub)
                self._reroute()
            raise
        return sub

    # -- lifecycle ---------------------------------------------------------------

    async def close(self) -> None:
        """End the session (at once on the server too); closing a closed session does nothing."""
        if not self.closed:
            self._closing = True
            self.close_reason = errors.SessionClosedError("the session was closed by the client")
            task = self._reconnecting
            stream = self._stream
            if stream is not None:
                await stream.aclose(1000)
                await stream.lost
            self._end(self.close_reason)
            if task is not None and task is not asyncio.current_task():
                with contextlib.suppress(asyncio.CancelledError):
                    await task

    async def __aenter__(self) -> Session:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
