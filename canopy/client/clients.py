"""Client control (``session.clients``): other sessions on any gateway, their properties,
roles and subscriptions, closing them, and hearing what happens to them."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import itertools
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from canopy import errors
from canopy.client.events import TopicEvent
from canopy.client.sessions import _target
from canopy.client.subscriptions import Subscription
from topics.selectors import parse_selector

if TYPE_CHECKING:
    from canopy.client.session import Session

log = logging.getLogger("canopy.client")

#: property keys that stand for every fixed (``$``) property and for every user property
ALL_FIXED_PROPERTIES, ALL_USER_PROPERTIES = "*F", "*U"
#: what the catch-all of :meth:`Clients.unrequested` is known by (it matches every path)
_EVERY_PATH = "*.*"


@dataclass(frozen=True)
class SessionEvent:
    """What happened to a session, as a listener hears it (see :meth:`Clients.listen`)."""

    session_id: str
    #: ``STATE`` or ``PROPERTIES``
    type: str
    #: ``ACTIVE``, ``DISCONNECTED``, ``RECONNECTED`` or ``CLOSED``
    state: str
    #: the properties the listener asked for (none once the session closed)
    properties: dict[str, str] = field(default_factory=dict)
    #: the old values of the properties that changed (``None``: a new key)
    changed: dict[str, str | None] = field(default_factory=dict)
    #: why a closed session ended (``CLOSED_BY_CLIENT``, ``CLOSED_BY_CLIENT_CONTROL``, ``EXPIRED``, ...)
    reason: str | None = None

    @property
    def is_open(self) -> bool:
        """A session that is open (it was when the listener started, or it opened since)."""
        return self.type == "STATE" and self.state == "ACTIVE"

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> SessionEvent:
        return cls(str(body["session_id"]), str(body["type"]), str(body["state"]), dict(body.get("properties") or {}),
                   dict(body.get("changed") or {}), body.get("reason"))


#: a session event listener's callback; it may be a coroutine function
SessionEventCallback = Callable[[SessionEvent], Any]


class SessionListener:
    """A session event listener's registration; :meth:`close` (or closing the session) ends it."""

    def __init__(self, owner: Clients, listener_id: int, callback: SessionEventCallback,
                 session_filter: str | None, keys: tuple[str, ...]) -> None:
        self._owner = owner
        self.id = listener_id
        self.callback = callback
        self.filter = session_filter
        self.keys = keys
        self.registration = ""
        self.closed = False

    def _deliver(self, events: list[Any]) -> None:
        for body in events:
            try:
                outcome = self.callback(SessionEvent.from_wire(body))
                if inspect.isawaitable(outcome):
                    asyncio.ensure_future(outcome)
            except Exception:
                log.exception("a session event listener's callback failed")

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._owner._listeners.pop(self.id, None)
        if self.registration and not self._owner._s.closed:
            with contextlib.suppress(errors.InvalidRequestError, errors.ConnectionInterruptedError):
                await self._owner._s._call("session_unlisten", self.registration)

    async def __aenter__(self) -> SessionListener:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Unrequested(Subscription):
    """The topics other sessions subscribed this one to that none of its own subscriptions
    match; :meth:`unsubscribe` only stops this catch-all (the server's subscription stays)."""

    async def unsubscribe(self) -> None:
        if self.session._unrequested is self:
            self.session._unrequested = None
            self.session._reroute()
        self._end()


class Clients:
    """Other sessions, on whichever gateway holds them (``session.clients``), as the
    reference system's client control. A target is one session id or, with ``filter=``, a
    session filter (evaluated once, on the sessions open then). Reading needs VIEW_SESSION;
    changing MODIFY_SESSION (and VIEW_SESSION to change roles or properties); subscribing
    others MODIFY_SESSION and SELECT_TOPIC on the selector's path prefix; listening
    VIEW_SESSION and REGISTER_HANDLER. ``session.sessions`` is the older, smaller form of
    the same requests."""

    def __init__(self, session: Session) -> None:
        self._s = session
        self._listeners: dict[int, SessionListener] = {}
        self._ids = itertools.count(1)

    async def list(self, filter: str | None = None, keys: Iterable[str] | None = None) -> dict[str, dict[str, str]]:
        """Every session the filter matches (every session when ``None``), by id, with its
        properties (those ``keys`` name, when given)."""
        args: list[Any] = [["filter", filter if filter is not None else "all"]]
        if keys is not None:
            args.append(list(keys))
        found: dict[str, dict[str, str]] = await self._s._call("session_get", *args)
        return found

    async def get_properties(self, session_id: str, keys: Iterable[str] | None = None) -> dict[str, str]:
        """One session's properties (those ``keys`` name: :data:`ALL_FIXED_PROPERTIES`,
        :data:`ALL_USER_PROPERTIES` or names); :class:`~canopy.errors.NoSuchSessionError`
        when no gateway holds it."""
        args: list[Any] = [["id", session_id]]
        if keys is not None:
            args.append(list(keys))
        found: dict[str, dict[str, str]] = await self._s._call("session_get", *args)
        if session_id not in found:
            raise errors.NoSuchSessionError(f"no session {session_id!r} on any gateway", "NO_SUCH_SESSION")
        return found[session_id]

    async def set_properties(
        self, properties: dict[str, str | None], session_id: str | None = None, *, filter: str | None = None
    ) -> int:
        """Change user properties (``None`` removes one); how many sessions changed."""
        return await self._s.sessions.set_properties(properties, session_id, filter=filter)

    async def close(self, session_id: str | None = None, *, filter: str | None = None) -> int:
        """Close sessions (see :meth:`canopy.client.Sessions.close`); how many closed."""
        return await self._s.sessions.close(session_id, filter=filter)

    async def change_roles(
        self, session_id: str | None = None, *, filter: str | None = None,
        remove: Iterable[str] = (), add: Iterable[str] = (),
    ) -> int:
        """Take roles from and give roles to sessions (not both empty, no role in both); their
        ``$Roles`` and permissions change at once, and a subscribed topic they may no longer
        read is unsubscribed. How many sessions the target named."""
        changed: int = await self._s._call("session_roles", _target(session_id, filter), list(remove), list(add))
        return changed

    async def subscribe(self, session_id: str | None = None, selector: str = "", *, filter: str | None = None) -> int:
        """Subscribe sessions to ``selector`` as if they had: they receive the topics they may
        read through their usual subscription events (in the Python client: those none of
        its subscriptions match go to :meth:`unrequested`). How many sessions it named."""
        count: int = await self._s._call("session_subscribe", _target(session_id, filter), _selector(selector))
        return count

    async def unsubscribe(self, session_id: str | None = None, selector: str = "", *, filter: str | None = None) -> int:
        """Unsubscribe sessions from ``selector`` (theirs, however it was made)."""
        count: int = await self._s._call("session_unsubscribe", _target(session_id, filter), _selector(selector))
        return count

    async def listen(
        self, callback: SessionEventCallback, filter: str | None = None, properties: Iterable[str] = (),
    ) -> SessionListener:
        """Hear what happens to the sessions ``filter`` matches (every session when ``None``),
        on every gateway: first an open event (:attr:`SessionEvent.is_open`) for each open
        now, then sessions opening, losing or getting back their connection, closing, and
        changes to the ``properties`` named (none heard without). ``callback`` is called on
        the session's loop (a coroutine function is scheduled)."""
        keys = tuple(properties)
        listener = SessionListener(self, next(self._ids), callback, filter, keys)
        self._listeners[listener.id] = listener
        try:
            listener.registration = await self._s._call("session_listen", listener.id, filter, list(keys))
        except BaseException:
            self._listeners.pop(listener.id, None)
            raise
        return listener

    def unrequested(self, callback: Callable[[Any], Any] | None = None) -> Subscription:
        """The events of topics this session receives that none of its own subscriptions
        match: those other sessions subscribed it to (:meth:`subscribe`). One at a time: a
        second call replaces the first. Topics a later subscription of its own matches go to
        that subscription from then on."""
        session = self._s
        old = session._unrequested
        if old is not None:
            old._end()
        sub = _Unrequested(session, parse_selector(_EVERY_PATH), None, callback)
        session._unrequested = sub
        for topic in session._known.values():
            if not any(s.selector.matches(topic.path) for s in session._subscriptions):
                sub._put(TopicEvent("subscribed", topic.path, topic.spec.type, topic.value, topic.spec))
        session._reroute()
        return sub

    def _notified(self, body: Any) -> None:
        """A NOTIFY ``session_event``."""
        if not isinstance(body, dict):
            return
        listener = self._listeners.get(body.get("listener"))  # type: ignore[arg-type]
        events = body.get("events")
        if listener is not None and isinstance(events, list):
            listener._deliver(events)

    def _register_again(self) -> None:
        """A new session after a reconnection: its listeners are registered again."""
        for listener in list(self._listeners.values()):
            future = self._s._request("session_listen", listener.id, listener.filter, list(listener.keys))
            future.add_done_callback(functools.partial(_registered, listener))


def _registered(listener: SessionListener, future: asyncio.Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        log.warning("a session event listener could not be registered again: %s",
                    "cancelled" if future.cancelled() else future.exception())
        return
    listener.registration = future.result()


def _selector(selector: Any) -> str:
    if not selector:
        raise errors.InvalidRequestError("name a selector")
    return str(selector)
