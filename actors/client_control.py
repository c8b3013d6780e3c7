"""Client control on one gateway: other sessions' roles and subscriptions, and session
event listeners across the gateways of an instance.

The bookkeeping is pure (:mod:`sessions.client_control`); this module carries it out on
this gateway's sessions and moves events between gateways.

* **Targets.** A request names sessions by id or filter; the request's gateway asks
  every gateway (``ctx.peers``) to act on its own sessions and adds up the counts
  (``change_roles``, ``control_subscriptions``), as ``session_close`` does.
* **Listeners are known everywhere**, as missing-topic handlers are: a session
  registers one on its own gateway (its *origin*), which tells every other gateway
  (``session_listeners_changed``); a gateway that starts learns the others' when the
  controller hands it its peers (``session_listeners``), and forgets those of gateways
  no longer among them. Each gateway turns what happens to its *own* sessions into
  events and sends them to the listener's origin (``session_events``), which hands them
  to the listening session as NOTIFY ``session_event``. Every gateway, on learning a
  listener, first sends it an ``ACTIVE`` event for each of its sessions the filter
  matches, then the events that follow, all through the same calls from that gateway
  to the origin, which Ray runs in the order they were made. Ray calls rather than
  values of an internal topic (as the MQTT front door's announcements are): an event
  goes only to the gateway that listens, and nothing is sent while nobody listens.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable
from typing import Any

from actors.background import Background
from actors.missing_topics import PEER_TIMEOUT
from canopy import protocol as wire
from sessions.client_control import Listener, Listeners, RoleChange, SessionEvent, State
from sessions.requests import RequestError
from sessions.registry import Session, SessionRegistry
from topics.protocol import Failed
from topics.selectors import Selector

log = logging.getLogger("canopy.gateway")

#: the NOTIFY kind of session events
KIND = "session_event"
#: seconds a controlled subscription waits for its topics' current values before it is answered
SUBSCRIBE_WAIT = 10.0


class ClientControl:
    """One gateway's part. ``me`` is this gateway process's id among its peers (the
    missing-topic handlers' id: :attr:`actors.missing_topics.MissingTopics.gateway_id`),
    ``peers()`` the other gateways by id; ``select(kind, value)`` this gateway's client
    sessions a target names; ``apply(changes)`` carries out a re-evaluation's registrations;
    ``context`` is the request handlers' :class:`~actors.requests.context.Context`;
    ``internal`` the gateway's own sessions (never named, never heard of);
    ``send(session_id, message)`` queues an encoded message for a session here."""

    def __init__(
        self,
        me: str,
        registry: SessionRegistry,
        peers: Callable[[], dict[str, Any]],
        select: Callable[[str, str], list[str]],
        apply: Callable[[Any], None],
        context: Any,
        internal: set[str],
        send: Callable[[str, bytes], None],
    ) -> None:
        self.me = me
        self.registry = registry
        self._peers = peers
        self._select = select
        self._apply = apply
        self._ctx = context
        self._internal = internal
        self._send_to = send
        self.listeners = Listeners()
        self._serial = itertools.count(1)
        self._background = Background(log)
        #: session events sent to listeners (here or elsewhere)
        self.events_sent = 0

    # -- roles and subscriptions of this gateway's sessions ------------------------------------

    def change_roles(self, kind: str, value: str, change: RoleChange) -> int:
        """Give the sessions a target names here their new roles; how many it named."""
        count = 0
        for sid in self._select(kind, value):
            session = self.registry.sessions[sid]
            roles = change.apply(session.roles)
            count += 1
            if roles == session.roles:
                continue
            before = dict(session.properties)
            self._apply(self.registry.set_roles(sid, roles))
            self.properties_changed(sid, before)
        return count

    async def control_subscriptions(self, kind: str, value: str, selector: Selector, subscribe: bool) -> int:
        """Subscribe (or unsubscribe) the sessions a target names here to ``selector``, as if
        they had asked; answered once their topics' current values are on their way."""
        sessions = self._select(kind, value)
        if not subscribe:
            for sid in sessions:
                self._ctx.unregister(self.registry.unsubscribe(sid, selector))
            return len(sessions)
        futures, waits = [], []
        for sid in sessions:
            registrations, tokens = self.registry.subscribe(sid, selector, controlled=True)
            futures += self._ctx.register(registrations)
            waits += tokens
        self._ctx.link.flush()
        try:
            for result in await asyncio.wait_for(asyncio.gather(*futures), SUBSCRIBE_WAIT):
                if isinstance(result, Failed):
                    log.warning("a controlled subscription to %s: %s %s", selector, result.code, result.message)
            loop = asyncio.get_running_loop()
            pending = [self._ctx.waiters.setdefault(t, loop.create_future()) for t in set(waits)
                       if not self.registry.is_live(t)]
            if pending:
                await asyncio.wait_for(asyncio.gather(*pending, return_exceptions=True), SUBSCRIBE_WAIT)
        except asyncio.TimeoutError:
            log.warning("a controlled subscription to %s: no partition answer in %g s", selector, SUBSCRIBE_WAIT)
        return len(sessions)

    # -- listeners --------------------------------------------------------------------------

    def listen(self, session_id: str, listener_id: int, session_filter: str | None, keys: tuple[str, ...]) -> str:
        """Register a listener of a session of this gateway; its first events (every matching
        session here) are queued at once, the other gateways' follow from them."""
        token = f"{self.me}/{next(self._serial)}"
        listener = Listener(token, self.me, session_id, session_filter, keys, listener_id)
        self.listeners.add(listener)
        self._deliver(listener, self._snapshot(listener))
        for peer in self._peers().values():
            self._track(peer.session_listeners_changed.remote([listener.to_row()], []))
        return token

    def unlisten(self, session_id: str, token: str) -> None:
        listener = self.listeners.get(token)
        if listener is None or listener.session_id != session_id or listener.origin != self.me:
            raise RequestError("INVALID_REQUEST", f"this session holds no session event listener {token!r}")
        self._gone([listener])

    def own(self) -> list[list[Any]]:
        """This gateway's listeners, as :meth:`changed` takes them."""
        return [x.to_row() for x in self.listeners.all() if x.origin == self.me]

    def changed(self, added: list[list[Any]], removed: list[str]) -> None:
        """Another gateway's listeners came or went; a new one hears of this gateway's sessions."""
        for token in removed:
            self.listeners.remove(token)
        peers = self._peers()
        for row in added:
            listener = Listener.from_row(row)
            if listener.origin in peers and self.listeners.get(listener.token) is None:
                self.listeners.add(listener)
                self._send(listener, self._snapshot(listener))

    async def learn(self) -> None:
        """The peers changed: forget the listeners of gateways gone, learn the others'."""
        peers = self._peers()
        for listener in self.listeners.all():
            if listener.origin != self.me and listener.origin not in peers:
                self.listeners.remove(listener.token)
        theirs = await asyncio.gather(
            *(asyncio.wait_for(p.session_listeners.remote(), PEER_TIMEOUT) for p in peers.values()),
            return_exceptions=True)
        for rows in theirs:
            if isinstance(rows, list):
                self.changed(rows, [])

    def session_closed(self, session_id: str) -> None:
        """Drop the listeners of a session of this gateway that ended."""
        self._gone(self.listeners.of_session(session_id))

    def _gone(self, listeners: list[Listener]) -> None:
        mine = [x for x in listeners if x.origin == self.me]
        for listener in mine:
            self.listeners.remove(listener.token)
        if mine:
            for peer in self._peers().values():
                self._track(peer.session_listeners_changed.remote([], [x.token for x in mine]))

    def received(self, token: str, events: list[dict[str, Any]]) -> None:
        """Events another gateway sent to a listener of this one."""
        listener = self.listeners.get(token)
        if listener is not None and listener.origin == self.me:
            self._notify(listener, events)

    # -- what happens to this gateway's sessions -----------------------------------------------

    def life(self, what: str, session: Session, reason: str = "") -> None:
        """A session of this gateway ``opened``, ``closed``, was ``disconnected`` or ``reconnected``."""
        if not self.listeners or session.id in self._internal:
            return
        state = {"opened": State.ACTIVE, "closed": State.CLOSED,
                 "disconnected": State.DISCONNECTED, "reconnected": State.RECONNECTED}[what]
        self._emit(self.listeners.state(session.id, session.properties, session.roles, state, reason or None))

    def properties_changed(self, session_id: str, before: dict[str, str]) -> None:
        session = self.registry.sessions.get(session_id)
        if session is not None and self.listeners and session_id not in self._internal:
            self._emit(self.listeners.changed(session_id, before, session.properties, session.roles))

    def _snapshot(self, listener: Listener) -> list[SessionEvent]:
        internal = self._internal
        return self.listeners.snapshot(listener, (
            (s.id, s.properties, s.roles) for s in self.registry.sessions.values() if s.id not in internal))

    def _emit(self, heard: list[tuple[Listener, SessionEvent]]) -> None:
        by_listener: dict[str, tuple[Listener, list[SessionEvent]]] = {}
        for listener, event in heard:
            by_listener.setdefault(listener.token, (listener, []))[1].append(event)
        for listener, events in by_listener.values():
            self._send(listener, events)

    def _send(self, listener: Listener, events: list[SessionEvent]) -> None:
        if not events:
            return
        if listener.origin == self.me:
            self._deliver(listener, events)
            return
        peer = self._peers().get(listener.origin)
        if peer is not None:
            self.events_sent += len(events)
            self._track(peer.session_events.remote(listener.token, [e.to_wire() for e in events]))

    def _deliver(self, listener: Listener, events: list[SessionEvent]) -> None:
        if events:
            self._notify(listener, [e.to_wire() for e in events])

    def _notify(self, listener: Listener, events: list[dict[str, Any]]) -> None:
        self.events_sent += len(events)
        body = {"listener": listener.listener_id, "registration": listener.token, "events": events}
        self._send_to(listener.session_id, wire.encode(wire.Notify(KIND, body)))

    def _track(self, ref: Any) -> None:
        self._background.track(ref, "tell a gateway of session events")

