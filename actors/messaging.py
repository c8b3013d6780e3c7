"""Request/response messaging across the gateways of an instance.

The decisions are pure (:mod:`sessions.messaging`); this module moves requests
and answers between gateways and sessions, on the paths the missing-topic
handlers use (:mod:`actors.missing_topics`, whose gateway id and peer list it
shares):

* **Handlers are known everywhere.** A session registers on its own gateway,
  which tells every other one (``message_handlers_changed``); a gateway that
  (re)starts asks its peers for theirs once it has the peer list. A handler's
  token starts with its gateway's id.
* **The sender's gateway (the origin) routes and waits.** An unaddressed
  request goes to the handler :meth:`HandlerRegistry.choose` picks, through
  its gateway's ``message_deliver`` (or directly, when it is here); a request
  to a session id or a filter is offered to every gateway, which delivers it
  to its own sessions that match. The origin keeps the request in
  :class:`~sessions.messaging.Pending` until it is answered or its deadline
  passes (``REQUEST_TIMEOUT``).
* **The recipient's gateway delivers and remembers.** It sends the session a
  NOTIFY ``request`` and keeps the delivery (:class:`~sessions.messaging.Deliveries`);
  the session's ``message_respond`` or ``message_reject`` is checked and sent
  back to the origin (``message_answered``). A recipient session that closes
  fails what it owed with ``RECIPIENT_CLOSED``; its handlers are removed
  everywhere.

An outcome travels between gateways as ``["ok", type, data]`` or
``["error", code, message]``.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Callable
from typing import Any

from actors.background import Background
from actors.settings import InstanceSettings
from canopy import protocol as wire
from sessions.messaging import (
    MAX_FILTER_SESSIONS,
    Deliveries,
    Delivery,
    Handler,
    HandlerRegistry,
    MessagingError,
    Outstanding,
    Pending,
    check_response,
    check_value,
    pick,
)

log = logging.getLogger("canopy.gateway")

#: the NOTIFY kind of a request given to its recipient, and of a response to a request to a filter
REQUEST = "request"
RESPONSE = "response"
#: seconds another gateway has to take a request or say what it has registered
PEER_TIMEOUT = 10.0
#: times an unaddressed request is routed again when its handler turns out to be gone
ROUTING_ATTEMPTS = 3

Outcome = list[Any]


def gateway_of(token: str) -> str:
    """The id of the gateway a handler token was made on."""
    return token.split("/", 1)[0]


def _failed(code: str, message: str) -> Outcome:
    return ["error", code, message]


class Messaging:
    """One gateway's part of messaging.

    ``send(session_id, message)`` queues an encoded message for a session of this gateway,
    ``properties(session_id)`` gives one's properties (None when it is not here),
    ``select(kind, value)`` names this gateway's client sessions a target names
    (``"id"`` or ``"filter"``), ``peers()`` the other gateways by id.
    """

    def __init__(
        self,
        gateway_id: str,
        send: Callable[[str, bytes], None],
        properties: Callable[[str], dict[str, str] | None],
        select: Callable[[str, str], list[str]],
        peers: Callable[[], dict[str, Any]],
        config: InstanceSettings,
    ) -> None:
        from sessions.messaging import value_limit

        self.gateway_id = gateway_id
        self._send = send
        self._properties = properties
        self._select = select
        self._peers = peers
        self.default_timeout_ms = config.message_timeout_ms
        self.max_timeout_ms = config.max_message_timeout_ms
        self.value_limit = value_limit(config.max_frame_size)
        self.handlers = HandlerRegistry()
        self.pending = Pending(config.max_message_requests)
        self.deliveries = Deliveries()
        self._futures: dict[str, asyncio.Future[Outcome]] = {}
        #: request id -> (the sender's tag) for requests to a filter
        self._tags: dict[str, Any] = {}
        self._serial = itertools.count(1)
        self._background = Background(log)
        self._sweep: asyncio.TimerHandle | None = None
        #: requests sent from here, delivered to sessions here, answered in time, timed out
        self.sent = self.delivered = self.responded = self.timed_out = 0

    # -- handlers ------------------------------------------------------------------------

    def add(self, session_id: str, path: str, keys: tuple[str, ...]) -> str:
        token = f"{self.gateway_id}/m{next(self._serial)}"
        handler = self.handlers.add(token, path, session_id, keys, time.time_ns())
        self._broadcast([_row(handler)], [])
        return token

    def remove(self, session_id: str, token: str) -> None:
        handler = self.handlers.get(token)
        if handler is None or handler.session_id != session_id:
            raise MessagingError("INVALID_REQUEST", f"this session holds no request handler {token[:60]!r}")
        self.handlers.remove(token)
        self._broadcast([], [token])

    def own(self) -> list[list[Any]]:
        """This gateway's handlers, as :meth:`changed` takes them."""
        return [_row(h) for h in self.handlers.registrations() if gateway_of(h.token) == self.gateway_id]

    def changed(self, added: list[list[Any]], removed: list[str]) -> None:
        """Another gateway's handlers came or went."""
        peers = self._peers()
        for token in removed:
            self.handlers.remove(token)
        for token, path, session_id, keys, order in added:
            if self.handlers.get(token) is None and gateway_of(token) in peers:
                try:
                    self.handlers.add(token, path, session_id, keys, order)
                except MessagingError as e:  # a conflict only a race can make: the older one stays
                    log.warning("ignoring request handler %s of another gateway: %s", token, e)

    async def learn_peers(self) -> None:
        """The peer list changed: forget the handlers of gateways gone, learn the others'."""
        peers = self._peers()
        for handler in self.handlers.registrations():
            owner = gateway_of(handler.token)
            if owner != self.gateway_id and owner not in peers:
                self.handlers.remove(handler.token)
        theirs = await asyncio.gather(
            *(asyncio.wait_for(p.message_handlers.remote(), PEER_TIMEOUT) for p in peers.values()),
            return_exceptions=True)
        for rows in theirs:
            if isinstance(rows, list):
                self.changed(rows, [])

    def _broadcast(self, added: list[list[Any]], removed: list[str]) -> None:
        for peer in self._peers().values():
            self._background.track(peer.message_handlers_changed.remote(added, removed), "tell a gateway of request handlers")

    def session_closed(self, session_id: str) -> None:
        """A session of this gateway ended: its handlers go everywhere, what it owed fails
        for the senders, and nobody waits for its own requests any more."""
        gone = [h.token for h in self.handlers.remove_session(session_id) if gateway_of(h.token) == self.gateway_id]
        if gone:
            self._broadcast([], gone)
        for delivery in self.deliveries.recipient_gone(session_id):
            self._route(delivery, _failed("RECIPIENT_CLOSED", "the recipient's session closed before it answered"))
        for entry in self.pending.sender_gone(session_id):
            self._tags.pop(entry.id, None)
            future = self._futures.pop(entry.id, None)
            if future is not None and not future.done():
                future.set_result(_failed("SESSION_CLOSED", "the session closed"))

    # -- sending ---------------------------------------------------------------------------

    def _start(self, sender: str, timeout: float, to_filter: bool = False) -> Outstanding:
        loop = asyncio.get_running_loop()
        entry = self.pending.start(sender, loop.time(), timeout, to_filter)
        self.sent += 1
        loop.call_later(timeout, self._expire)
        if not to_filter:
            self._futures[entry.id] = loop.create_future()
        return entry

    def _body(self, entry: Outstanding, sender: str, path: str, value: tuple[str, bytes], response_type: str | None,
              timeout: float, properties: dict[str, str], registration: str | None) -> dict[str, Any]:
        return {"request": entry.id, "path": path, "type": value[0], "data": value[1], "session_id": sender,
                "properties": properties, "registration": registration, "response_type": response_type,
                "timeout": timeout}

    async def send(self, sender: str, path: str, value: tuple[str, bytes], response_type: str | None,
                   timeout: float) -> list[Any]:
        """An unaddressed request: to the handler covering ``path``; answers ``[type, data]``."""
        handler = self.handlers.choose(path)
        if handler is None:
            raise MessagingError("UNHANDLED_MESSAGE", f"no session handles requests on {path!r}")
        entry = self._start(sender, timeout)
        try:
            for _attempt in range(ROUTING_ATTEMPTS):
                properties = pick(self._properties(sender) or {}, handler.properties)
                body = self._body(entry, sender, path, value, response_type, timeout, properties, handler.token)
                if await self._deliver_on(gateway_of(handler.token), body, "token", handler.token, 1):
                    return await self._outcome(entry)
                if self.handlers.get(handler.token) is handler:  # gone there: forget it here too
                    self.handlers.remove(handler.token)
                handler = self.handlers.choose(path)
                if handler is None:
                    break
            raise MessagingError("UNHANDLED_MESSAGE", f"no session handles requests on {path!r}")
        finally:
            self._forget(entry)

    async def send_session(self, sender: str, target: str, path: str, value: tuple[str, bytes],
                           response_type: str | None, timeout: float) -> list[Any]:
        """A request to the session ``target``, on whichever gateway holds it."""
        entry = self._start(sender, timeout)
        try:
            body = self._body(entry, sender, path, value, response_type, timeout, {}, None)
            found = await asyncio.gather(
                self._deliver_on(self.gateway_id, body, "id", target, 1),
                *(self._deliver_on(owner, body, "id", target, 1) for owner in self._peers()))
            if not any(found):
                raise MessagingError("NO_SUCH_SESSION", f"there is no session {target[:60]!r}")
            return await self._outcome(entry)
        finally:
            self._forget(entry)

    async def send_filter(self, sender: str, session_filter: str, path: str, value: tuple[str, bytes],
                          response_type: str | None, timeout: float, tag: Any) -> int:
        """A request to every session ``session_filter`` matches (at most
        :data:`MAX_FILTER_SESSIONS`); answers how many it went to. Each answer (or failure)
        reaches the sender as a NOTIFY ``response`` naming ``tag`` and the session."""
        entry = self._start(sender, timeout, to_filter=True)
        self._tags[entry.id] = tag
        body = self._body(entry, sender, path, value, response_type, timeout, {}, None)
        recipients: list[str] = []
        try:
            for owner in [self.gateway_id, *self._peers()]:
                room = MAX_FILTER_SESSIONS - len(recipients)
                if room <= 0:
                    break
                recipients += await self._deliver_on(owner, body, "filter", session_filter, room)
        except BaseException:
            self.pending.cancel(entry.id)
            self._tags.pop(entry.id, None)
            raise
        self.pending.dispatched(entry.id, recipients)
        if self.pending.get(entry.id) is None:  # every one answered already (or none was sent to)
            self._tags.pop(entry.id, None)
        return len(recipients)

    async def _outcome(self, entry: Outstanding) -> list[Any]:
        outcome = await self._futures[entry.id]
        if outcome[0] == "ok":
            return [outcome[1], outcome[2]]
        raise MessagingError(str(outcome[1]), str(outcome[2]))

    def _forget(self, entry: Outstanding) -> None:
        self.pending.cancel(entry.id)
        self._futures.pop(entry.id, None)

    async def _deliver_on(self, owner: str, body: dict[str, Any], kind: str, value: str, most: int) -> list[str]:
        if owner == self.gateway_id:
            return self.deliver(body, kind, value, self.gateway_id, most)
        peer = self._peers().get(owner)
        if peer is None:
            return []
        try:
            delivered = await asyncio.wait_for(
                peer.message_deliver.remote(body, kind, value, self.gateway_id, most), PEER_TIMEOUT)
        except Exception as e:  # the gateway is gone or restarting: as if it had nobody
            log.warning("a request could not be handed to gateway %s: %s", owner, e)
            return []
        return [str(s) for s in delivered] if isinstance(delivered, list) else []

    # -- delivering -------------------------------------------------------------------------

    def deliver(self, body: dict[str, Any], kind: str, value: str, origin: str, most: int) -> list[str]:
        """Hand a request to this gateway's sessions ``kind`` names (a handler ``token``, a
        session ``id``, a ``filter``); answer the sessions it went to."""
        if kind == "token":
            handler = self.handlers.get(value)
            if handler is None or gateway_of(value) != self.gateway_id:
                return []
            recipients = [handler.session_id] if self._properties(handler.session_id) is not None else []
        else:
            recipients = self._select(kind, value)[:most]
        now = time.monotonic()
        delivered = []
        for recipient in recipients:
            delivery = Delivery(f"{self.gateway_id}/d{next(self._serial)}", recipient, origin, str(body["request"]),
                                body["response_type"], now + float(body["timeout"]) + 1.0)
            if not self.deliveries.add(delivery, now):
                break
            notice = {k: body[k] for k in ("path", "type", "data", "session_id", "properties", "registration",
                                           "response_type")}
            self._send(recipient, wire.encode(wire.Notify(REQUEST, {"id": delivery.id, **notice})))
            delivered.append(recipient)
        self.delivered += len(delivered)
        if delivered and self._sweep is None:
            self._sweep = asyncio.get_running_loop().call_later(float(body["timeout"]) + 2.0, self._forget_late)
        return delivered

    def respond(self, session_id: str, delivery_id: Any, type_name: Any, data: Any) -> None:
        """A recipient's response, sent back to the request's origin."""
        value = check_value(type_name, data, self.value_limit, "response")
        delivery = self.deliveries.take(delivery_id, session_id)
        try:
            check_response(delivery.response_type, value[0])
        except MessagingError as e:
            self._route(delivery, _failed(e.code, str(e)))
            raise
        self._route(delivery, ["ok", value[0], value[1]])

    def reject(self, session_id: str, delivery_id: Any, message: str, code: str) -> None:
        """A recipient refused a request (its handler failed, it has no request stream, the
        request's type is not what it takes)."""
        delivery = self.deliveries.take(delivery_id, session_id)
        self._route(delivery, _failed(code, message))

    def _route(self, delivery: Delivery, outcome: Outcome) -> None:
        if delivery.origin == self.gateway_id:
            self.answered(delivery.request, delivery.recipient, outcome)
            return
        peer = self._peers().get(delivery.origin)
        if peer is not None:  # else the origin is gone, and its request with it
            self._background.track(peer.message_answered.remote(delivery.request, delivery.recipient, outcome),
                        "answer a request")

    def answered(self, request_id: str, responder: str, outcome: Outcome) -> None:
        """An answer reached the request's origin."""
        entry = self.pending.answer(request_id, responder)
        if entry is None:
            return  # late, or its sender is gone
        self.responded += 1
        if entry.to_filter:
            self._notify_response(entry, responder, outcome)
            if self.pending.get(entry.id) is None:
                self._tags.pop(entry.id, None)
            return
        future = self._futures.get(request_id)
        if future is not None and not future.done():
            future.set_result(outcome)

    def _notify_response(self, entry: Outstanding, responder: str, outcome: Outcome) -> None:
        body: dict[str, Any] = {"request": self._tags.get(entry.id), "session_id": responder}
        if outcome[0] == "ok":
            body.update(type=outcome[1], data=outcome[2])
        else:
            body.update(code=outcome[1], message=outcome[2])
        self._send(entry.sender, wire.encode(wire.Notify(RESPONSE, body)))

    def _expire(self) -> None:
        for entry in self.pending.expire(asyncio.get_running_loop().time() + 1e-3):
            self.timed_out += 1
            timeout = _failed("REQUEST_TIMEOUT", "no response came in time")
            if entry.to_filter:
                for recipient in sorted(entry.waiting or ()):
                    self._notify_response(entry, recipient, timeout)
                self._tags.pop(entry.id, None)
                continue
            future = self._futures.get(entry.id)
            if future is not None and not future.done():
                future.set_result(timeout)

    def _forget_late(self) -> None:
        self._sweep = None
        self.deliveries.expire(time.monotonic())
        if len(self.deliveries):
            self._sweep = asyncio.get_running_loop().call_later(self.max_timeout_ms / 1000, self._forget_late)

    def stats(self) -> dict[str, int]:
        return {"message_handlers": len(self.handlers), "message_requests_waiting": len(self.pending),
                "message_deliveries_unanswered": len(self.deliveries), "message_requests_sent": self.sent,
                "message_requests_delivered": self.delivered, "message_responses": self.responded,
                "message_requests_timed_out": self.timed_out}


def _row(handler: Handler) -> list[Any]:
    return [handler.token, handler.path, handler.session_id, list(handler.properties), handler.order]
