"""Missing-topic handlers across the gateways of an instance.

The bookkeeping is pure (:mod:`sessions.missing_topics`); this module moves
it between gateways and sessions.

* **Registrations are known everywhere.** A session registers on its own
  gateway, which tells every other gateway (``handlers_changed``), so that
  a gateway deciding whether a request may wait for a handler needs no call.
  A gateway that starts (or restarts) asks its peers for theirs when the
  controller hands it the peer list; registrations of a gateway that is no
  longer among the peers are dropped. A registration's token starts with its
  gateway's id, and its order (nanoseconds since the epoch when it was made)
  decides which of a path's registrations is notified: the oldest.
* **A request that matches nothing waits** (:meth:`MissingTopics.check`):
  the request's gateway (its *origin*) picks the handler, notifies it (on
  its own gateway, or through the handler's gateway's ``missing_topic_notify``),
  and waits for ``proceed`` or ``cancel``. The handler's gateway remembers
  where each notification came from and sends the answer back
  (``missing_topic_answered``). Whatever goes wrong on the way (the handler's
  session or gateway gone, no answer in ``missing_topic_timeout_ms``) counts
  as proceed: a request is never stuck, and never cancelled but by a handler.
* **Fan-out**: a request whose selector's path prefix intersects
  a fan-out link's is also offered to that link's actor
  (:meth:`actors.fanout.FanoutLinkActor.missing`), which forwards it to its
  primary when the missing-topic propagation conditions hold there (listed
  in ARCHITECTURE.md); the primary treats it as
  its own request (its handlers, its own fan-out links: tiers), with the
  chain of servers growing by one at each hop. The request goes on once
  every handler said proceed and ends at the first cancel; a link that
  cannot answer counts as proceed.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

from actors.background import Background
from canopy import protocol as wire
from sessions.missing_topics import (
    CANCEL,
    PROCEED,
    HandlerRegistry,
    MissingTopicError,
    Notification,
    Registration,
    Waits,
)
from fanout.mirror import crosses, propagates
from topics.selectors import Selector, parse_selector

log = logging.getLogger("canopy.gateway")

#: the NOTIFY kind of a missing-topic notification
KIND = "missing_topic"

#: servers a request may pass through (fan-out tiers) before it is no longer propagated
MAX_HOPS = 16
#: matched topics a request's replicas are looked for among (the rest are not looked at)
MAX_MATCHED = 10_000
#: seconds a fan-out link has to say which matched topics are its replicas
REPLICAS_TIMEOUT = 2.0
#: seconds another gateway has to say who it is and what it has registered
PEER_TIMEOUT = 10.0


def gateway_of(token: str) -> str:
    """The id of the gateway a registration token was made on."""
    return token.split("/", 1)[0]


class MissingTopics:
    """One gateway's part: its registry copy, its waiting requests and the
    notifications it handed to its own sessions.

    ``send(session_id, message)`` queues an encoded message for a session of
    this gateway; ``properties(session_id)`` gives a session's properties.
    """

    def __init__(
        self,
        gateway_id: str,
        send: Callable[[str, bytes], None],
        properties: Callable[[str], dict[str, str] | None],
        timeout: float,
        server_name: str = "",
        instance: str = "",
    ) -> None:
        #: this gateway process's own id: a restarted gateway (same gateway id) is another one,
        #: so its new registrations and waits are never taken for the old ones
        self.gateway_id = f"{gateway_id}~{secrets.token_hex(4)}"
        self.server_name = server_name or gateway_id
        #: this server instance, for loop detection across fan-out tiers (names may repeat)
        self.instance = instance or secrets.token_hex(8)
        self.timeout = timeout
        self._send = send
        self._properties = properties
        self.handlers = HandlerRegistry()
        self.waits = Waits()
        self._futures: dict[str, asyncio.Future[str]] = {}
        self._serial = itertools.count(1)
        #: the other gateways, by id
        self.peers: dict[str, Any] = {}
        #: notification id -> (origin gateway id, registration token, when to forget it) for those
        #: out to this gateway's sessions (forgotten after twice the timeout: the origin has gone on)
        self._out: dict[str, tuple[str, str, float]] = {}
        self._background = Background(log)
        #: the fan-out connections: name, FanoutLinkActor, its links' selectors
        self.fanouts: list[tuple[str, Any, list[Selector]]] = []
        #: remote servers with a missing-topic notification filter: name, filter
        self.remote_filters: list[tuple[str, Selector]] = []
        #: the view evaluator (it holds the remote servers' sessions)
        self.views: Callable[[], Any] = lambda: None
        #: requests of this gateway held for handlers, those a handler cancelled and those no
        #: answer came for in time; notifications handed to this gateway's sessions
        self.held = self.cancelled = self.timed_out = self.notified = 0

    # -- registrations ------------------------------------------------------------------

    def add(self, session_id: str, path: str) -> str:
        token = f"{self.gateway_id}/{next(self._serial)}"
        registration = self.handlers.add(token, path, session_id, time.time_ns())
        self._broadcast([_row(registration)], [])
        return token

    def remove(self, session_id: str, token: str) -> None:
        registration = self.handlers.get(token)
        if registration is None or registration.session_id != session_id:
            raise MissingTopicError("INVALID_REQUEST", f"this session holds no missing-topic registration {token!r}")
        self._gone([registration])

    def session_closed(self, session_id: str) -> None:
        self._gone([r for r in self.handlers.registrations() if r.session_id == session_id
                    and gateway_of(r.token) == self.gateway_id])

    def _gone(self, registrations: list[Registration]) -> None:
        for registration in registrations:
            self.handlers.remove(registration.token)
            for notification_id, (_origin, token, _until) in list(self._out.items()):
                if token == registration.token:  # asked and will never answer: proceed
                    self._route_answer(notification_id, PROCEED)
        if registrations:
            self._broadcast([], [r.token for r in registrations])

    def own(self) -> list[list[Any]]:
        """This gateway's registrations, as :meth:`changed` takes them."""
        return [_row(r) for r in self.handlers.registrations() if gateway_of(r.token) == self.gateway_id]

    def changed(self, added: list[list[Any]], removed: list[str]) -> None:
        """Another gateway's registrations came or went."""
        for token in removed:
            self.handlers.remove(token)
        for token, path, session_id, order in added:
            if self.handlers.get(token) is None and gateway_of(token) in self.peers:
                self.handlers.add(token, path, session_id, order)

    async def set_peers(self, peers: list[Any], self_id: str) -> None:
        """The instance's gateways (this one among them, as ``self_id`` says): forget the
        registrations of those gone, learn those of the others."""
        ids = await asyncio.gather(*(asyncio.wait_for(p.gateway_id.remote(), PEER_TIMEOUT) for p in peers),
                                   return_exceptions=True)
        self.peers = {i: p for i, p in zip(ids, peers) if isinstance(i, str) and i != self_id}
        for registration in self.handlers.registrations():
            owner = gateway_of(registration.token)
            if owner != self.gateway_id and owner not in self.peers:
                self.handlers.remove(registration.token)
        theirs = await asyncio.gather(
            *(asyncio.wait_for(p.missing_topic_handlers.remote(), PEER_TIMEOUT) for p in self.peers.values()),
            return_exceptions=True)
        for rows in theirs:
            if isinstance(rows, list):
                self.changed(rows, [])

    def _broadcast(self, added: list[list[Any]], removed: list[str]) -> None:
        for peer in self.peers.values():
            self._background.track(peer.missing_topic_handlers_changed.remote(added, removed), "tell a gateway of handlers")

    # -- requests that match nothing ------------------------------------------------------

    def covers(self, selector: Selector) -> bool:
        """Whether a request for ``selector`` may have anybody to wait for: a handler here,
        or a fan-out link it may be propagated through."""
        return self.handlers.covers(selector) or any(
            crosses(selector, link) for _name, _handle, links in self.fanouts for link in links
        ) or any(crosses(selector, f) for _name, f in self.remote_filters)

    def crosses_links(self, selector: Selector) -> bool:
        """Whether ``selector`` intersects a fan-out link (then which topics it matched matters)."""
        return any(crosses(selector, link) for _name, _handle, links in self.fanouts for link in links)

    async def check(
        self, selector: Selector, session_id: str, servers: tuple[str, ...] = (),
        properties: dict[str, str] | None = None, matched: list[str] | None = None, hops: tuple[str, ...] = (),
    ) -> tuple[str, bool]:
        """Offer a request of ``session_id`` for ``selector`` to the handlers: the one registered
        here when it ``matched`` no topic here, and, through the fan-out links, the primaries
        where the missing-topic propagation conditions hold (on this side: :func:`fanout.mirror.propagates` over the
        replicas among ``matched``; the link's actor checks its session, the primary the rest).
        Answer PROCEED or CANCEL once they decided, and whether any was asked.

        ``servers`` is the chain the request came through (a request forwarded by a secondary),
        ``hops`` the instance ids of those servers; ``properties`` the requesting session's when
        it is not a session of this gateway."""
        if self.instance in hops or len(hops) >= MAX_HOPS:
            return PROCEED, False  # it went round in a circle of fan-out links, or too far
        local = self.handlers.handler_for(selector) if not matched else None
        links = await self._propagating(selector, matched or [])
        remotes = [name for name, f in self.remote_filters if crosses(selector, f)] if not matched else []
        handlers = ([local.token] if local is not None else []) + [f"fanout/{name}" for name, _ in links] + [
            f"server/{name}" for name in remotes]
        loop = asyncio.get_running_loop()
        wait = self.waits.start(handlers, loop.time(), self.timeout)
        if wait is None:
            return PROCEED, False
        self.held += 1
        future: asyncio.Future[str] = loop.create_future()
        self._futures[wait.id] = future
        timer = loop.call_later(self.timeout, self._expire)
        if properties is None:
            properties = dict(self._properties(session_id) or {})
        notification = Notification(
            f"{self.gateway_id}:{wait.id}", str(selector), session_id, properties, (*servers, self.server_name),
        )
        if local is not None:
            self._notify(local, notification)
        onward = [*hops, self.instance]
        for name, handle in links:
            offer = handle.missing.remote(notification.selector, session_id, properties, list(notification.servers),
                                          onward)
            self._background.track(self._offer(wait.id, f"fanout/{name}", offer, notification), "offer to a primary")
        views = self.views() if remotes else None
        for name in remotes:
            if views is None:
                self.answered(wait.id, f"server/{name}", PROCEED)
                continue
            offer = views.missing.remote(name, notification.selector, session_id, properties,
                                         list(notification.servers), onward)
            self._background.track(self._offer(wait.id, f"server/{name}", offer, notification), "offer to a remote server")
        try:
            outcome = await future
        finally:
            timer.cancel()
            self._futures.pop(wait.id, None)
            self.waits.forget(wait.id)
        if outcome == CANCEL:
            self.cancelled += 1
        return outcome, True

    async def _propagating(self, selector: Selector, matched: list[str]) -> list[tuple[str, Any]]:
        """The fan-out connections a request is to be offered to (conditions 2 and 3)."""
        crossing = [(n, h, links) for n, h, links in self.fanouts if any(crosses(selector, k) for k in links)]
        if not crossing:
            return []
        replicas: set[str] = set()
        if matched:  # which of the topics it matched here are replicas (of any connection)
            asked = [asyncio.wait_for(h.replicas.remote(matched[:MAX_MATCHED]), REPLICAS_TIMEOUT)
                     for _n, h, _l in self.fanouts]
            for held in await asyncio.gather(*asked, return_exceptions=True):
                if isinstance(held, list):  # a link that does not answer (restarting) holds none
                    replicas.update(held)
        return [(n, h) for n, h, links in crossing if propagates(selector, links, replicas)]

    def set_remote_filters(self, filters: list[tuple[str, str]]) -> None:
        """The remote servers whose definitions have a missing-topic notification filter: a
        request that matches nothing here and intersects a filter (by path prefix) is passed
        on to that server (through the view evaluator's session to it)."""
        self.remote_filters = [(name, parse_selector(f)) for name, f in filters]

    def set_fanouts(self, fanouts: list[tuple[str, Any, list[str]]]) -> None:
        """The fan-out connections of this server: name, actor, link selectors."""
        self.fanouts = [(name, handle, [parse_selector(s) for s in links]) for name, handle, links in fanouts]

    async def _offer(self, wait_id: str, handler: str, offer: Awaitable[str], notification: Notification) -> None:
        try:
            response = await offer
        except Exception as e:  # the link's actor gone: as if it said proceed
            log.warning("missing-topic notification %s for %s: no answer from %s (%s); proceeding",
                        notification.id, notification.selector, handler, e)
            response = PROCEED
        if response not in (PROCEED, CANCEL):
            response = PROCEED
        self.answered(wait_id, handler, response)

    def _notify(self, registration: Registration, notification: Notification) -> None:
        body = notification.to_wire()
        owner = gateway_of(registration.token)
        if owner == self.gateway_id:
            if not self.notify(body, registration.token, self.gateway_id):
                self.answered(notification.id.rsplit(":", 1)[1], registration.token, PROCEED)
            return
        peer = self.peers.get(owner)
        if peer is None:
            self.answered(notification.id.rsplit(":", 1)[1], registration.token, PROCEED)
            return
        reply = peer.missing_topic_notify.remote(body, registration.token, self.gateway_id)
        self._background.track(self._delivered(reply, notification.id, registration.token), "notify a handler's gateway")

    async def _delivered(self, reply: Any, notification_id: str, token: str) -> None:
        try:
            delivered = await reply
        except Exception as e:  # the gateway is gone or restarting: set_peers will tidy up
            log.warning("missing-topic notification %s: the handler's gateway did not take it (%s)", notification_id, e)
            self.answered(notification_id.rsplit(":", 1)[1], token, PROCEED)
            return
        if not delivered:  # the registration went before the notification got there
            self.handlers.remove(token)
            self.answered(notification_id.rsplit(":", 1)[1], token, PROCEED)

    def notify(self, body: dict[str, Any], token: str, origin: str) -> bool:
        """Hand a notification to the session of one of this gateway's registrations;
        False when it is gone (the origin then proceeds)."""
        registration = self.handlers.get(token)
        if registration is None or gateway_of(token) != self.gateway_id:
            return False
        now = time.monotonic()
        if len(self._out) >= self.waits.limit:  # unanswered ones pile up: forget those long decided
            for key in [k for k, (_o, _t, until) in self._out.items() if until < now]:
                del self._out[key]
            if len(self._out) >= self.waits.limit:
                return False
        self._out[body["id"]] = (origin, token, now + 2 * self.timeout)
        message = wire.Notify(KIND, {**body, "registration": token, "path": registration.path})
        self._send(registration.session_id, wire.encode(message))
        self.notified += 1
        return True

    def answer(self, session_id: str, notification_id: Any, response: Any) -> None:
        """A handler session's answer to a notification it was given."""
        if response not in (PROCEED, CANCEL):
            raise MissingTopicError("INVALID_REQUEST", f"answer 'proceed' or 'cancel', not {response!r}")
        entry = self._out.get(notification_id) if isinstance(notification_id, str) else None
        registration = self.handlers.get(entry[1]) if entry is not None else None
        if registration is None or registration.session_id != session_id:
            raise MissingTopicError(
                "INVALID_REQUEST", f"no missing-topic notification {notification_id!r} awaits this session's answer")
        self._route_answer(notification_id, response)

    def _route_answer(self, notification_id: str, response: str) -> None:
        origin, token, _until = self._out.pop(notification_id)
        wait_id = notification_id.rsplit(":", 1)[1]
        if origin == self.gateway_id:
            self.answered(wait_id, token, response)
            return
        peer = self.peers.get(origin)
        if peer is not None:  # else the origin is gone, and its request with it
            self._background.track(peer.missing_topic_answered.remote(wait_id, token, response), "answer a notification")

    def answered(self, wait_id: str, handler: str, response: str) -> None:
        """A handler's answer reached the request's gateway."""
        outcome = self.waits.answer(wait_id, handler, response)
        if outcome is not None:
            future = self._futures.get(wait_id)
            if future is not None and not future.done():
                future.set_result(outcome)

    def _expire(self) -> None:
        for wait_id in self.waits.expire(asyncio.get_running_loop().time() + 1e-3):
            log.warning("missing-topic notification %s:%s: no answer in %.3g s; proceeding",
                        self.gateway_id, wait_id, self.timeout)
            self.timed_out += 1
            future = self._futures.get(wait_id)
            if future is not None and not future.done():
                future.set_result(PROCEED)

    def stats(self) -> dict[str, int]:
        return {"missing_topic_handlers": len(self.handlers), "missing_topic_waits": len(self.waits),
                "missing_topic_requests_held": self.held, "missing_topic_requests_cancelled": self.cancelled,
                "missing_topic_requests_timed_out": self.timed_out, "missing_topic_notifications": self.notified}


def _row(registration: Registration) -> list[Any]:
    return [registration.token, registration.path, registration.session_id, registration.order]
