"""Topic notifications (``session.topics.notifications``): hearing of topics added and
removed, without their values.

A :class:`NotificationListener` is the reference system's topic notification registration:
it holds selectors (:meth:`~NotificationListener.select`, :meth:`~NotificationListener.deselect`)
and calls its callback with a :class:`TopicNotification` for every topic they select
(``SELECTED`` for those there when a selector came, then ``ADDED`` and ``REMOVED``;
``DESELECTED`` when a selector is taken away). Given a ``descendants`` callback, the listener
also hears, for every path it selects, of the *immediate descendants* it does not select (the
first topic bound on each branch below the path): descendant notifications, with a path and a
type and no specification. The server tells only of topics the session may read (READ_TOPIC),
under their session paths; selecting needs SELECT_TOPIC on the selector's path prefix.

The listener outlives its connection: after a reconnection it selects again and tells its
callbacks only what changed while it was away (``REMOVED`` for what went, ``ADDED`` for what
came), so a callback sees each topic appear once and go once.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import functools
import inspect
import itertools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from canopy import errors
from topics.specification import TopicSpecification

if TYPE_CHECKING:
    from canopy.client.session import Session

log = logging.getLogger("canopy.client")

__all__ = ["NotificationCallback", "NotificationListener", "NotificationType", "TopicNotification"]


class NotificationType(str, enum.Enum):
    ADDED = "ADDED"
    SELECTED = "SELECTED"
    REMOVED = "REMOVED"
    DESELECTED = "DESELECTED"


@dataclass(frozen=True)
class TopicNotification:
    """A topic (or, with ``descendant``, an immediate descendant) came or went."""

    type: NotificationType
    path: str
    #: the topic's specification (type and properties); ``None`` for a descendant notification
    specification: TopicSpecification | None = None
    descendant: bool = False

    @property
    def topic_type(self) -> str | None:
        return self.specification.type.value if self.specification is not None else None

    @classmethod
    def from_wire(cls, body: dict[str, Any]) -> TopicNotification:
        spec = None
        if body.get("topic_type") is not None:
            spec = TopicSpecification.of(str(body["topic_type"]), dict(body.get("properties") or {}))
        return cls(NotificationType(body["type"]), str(body["path"]), spec, bool(body.get("descendant")))


#: a notification callback; it may be a coroutine function
NotificationCallback = Callable[[TopicNotification], Any]
_GONE = (NotificationType.REMOVED, NotificationType.DESELECTED)


class NotificationListener:
    """A topic notification listener: :meth:`select` and :meth:`deselect` selectors,
    :meth:`close` it (closing the session closes it too)."""

    def __init__(self, owner: Notifications, callback: NotificationCallback,
                 descendants: NotificationCallback | None) -> None:
        self._owner = owner
        self.id = next(owner._ids)
        self.callback = callback
        self.descendants_callback = descendants
        #: the selectors, as given
        self.selectors: list[str] = []
        self.closed = False
        #: path -> notification last told, of what is there now (topics, then descendants)
        self._topics: dict[str, TopicNotification] = {}
        self._below: dict[str, TopicNotification] = {}
        #: while selecting again after a reconnection: what the server told again
        self._again: tuple[set[str], set[str]] | None = None

    @property
    def topics(self) -> dict[str, TopicSpecification | None]:
        """Path -> specification of every topic the listener was told is there."""
        return {p: n.specification for p, n in self._topics.items()}

    @property
    def descendants(self) -> list[str]:
        """The immediate descendants the listener was told are there."""
        return sorted(self._below)

    async def select(self, selector: str) -> None:
        """Add a selector: ``SELECTED`` for every topic it selects now (told before this
        returns), then ``ADDED`` and ``REMOVED`` as they come and go."""
        self._check_open()
        text = _selector(selector)
        await self._owner._s._call("notify_select", self.id, text, self.descendants_callback is not None)
        if text not in self.selectors:
            self.selectors.append(text)

    async def deselect(self, selector: str) -> None:
        """Take a selector away: ``DESELECTED`` for the topics no other selector selects."""
        self._check_open()
        text = _selector(selector)
        await self._owner._s._call("notify_deselect", self.id, text)
        if text in self.selectors:
            self.selectors.remove(text)

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        self._owner._listeners.pop(self.id, None)
        if not self._owner._s.closed:
            with contextlib.suppress(errors.InvalidRequestError, errors.ConnectionInterruptedError):
                await self._owner._s._call("notify_close", self.id)

    async def __aenter__(self) -> NotificationListener:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _check_open(self) -> None:
        if self.closed:
            raise errors.InvalidRequestError("this notification listener is closed")

    def _notified(self, n: TopicNotification) -> None:
        told = self._below if n.descendant else self._topics
        if self._again is not None and n.type is NotificationType.SELECTED:
            self._again[1 if n.descendant else 0].add(n.path)
            if n.path in told:
                return  # known from before the reconnection
            n = TopicNotification(NotificationType.ADDED, n.path, n.specification, n.descendant)
        if n.type in _GONE:
            told.pop(n.path, None)
        else:
            told[n.path] = n
        self._call(n)

    def _call(self, n: TopicNotification) -> None:
        callback = self.descendants_callback if n.descendant else self.callback
        if callback is None:
            return
        try:
            outcome = callback(n)
            if inspect.isawaitable(outcome):
                asyncio.ensure_future(outcome)
        except Exception:
            log.exception("a topic notification callback failed")

    def _reselected(self) -> None:
        """Every selector was selected again: what was not told again went meanwhile."""
        again, self._again = self._again, None
        if again is None:
            return
        for told, seen, descendant in ((self._topics, again[0], False), (self._below, again[1], True)):
            for path in [p for p in told if p not in seen]:
                gone = told.pop(path)
                self._call(TopicNotification(NotificationType.REMOVED, path, gone.specification, descendant))


class Notifications:
    """The session's topic notification listeners (reached as ``session.topics.notifications``)."""

    def __init__(self, session: Session) -> None:
        self._s = session
        self._listeners: dict[int, NotificationListener] = {}
        self._ids = itertools.count(1)

    async def listen(
        self, selector: str | None, callback: NotificationCallback, descendants: NotificationCallback | None = None,
    ) -> NotificationListener:
        listener = NotificationListener(self, callback, descendants)
        self._listeners[listener.id] = listener
        if selector is not None:
            try:
                await listener.select(selector)
            except BaseException:
                self._listeners.pop(listener.id, None)
                raise
        return listener

    def _notified(self, body: Any) -> None:
        """A NOTIFY ``topic_notification``."""
        if not isinstance(body, dict):
            return
        listener = self._listeners.get(body.get("listener"))  # type: ignore[arg-type]
        if listener is None:
            return
        try:
            n = TopicNotification.from_wire(body)
        except (KeyError, ValueError, TypeError) as e:
            log.warning("ignoring a malformed topic notification: %s", e)
            return
        listener._notified(n)

    def _register_again(self, resumed: bool) -> None:
        """A new connection: what was queued for the old one may be lost, so every listener
        starts again on the server under a new id and tells its callbacks the difference."""
        for listener in list(self._listeners.values()):
            old = listener.id
            self._listeners.pop(old, None)
            listener.id = next(self._ids)
            self._listeners[listener.id] = listener
            if resumed:
                self._s._request("notify_close", old)
            listener._again = (set(), set())
            selectors = list(listener.selectors)
            if not selectors:
                listener._reselected()
                continue
            left = [len(selectors)]
            for text in selectors:
                future = self._s._request("notify_select", listener.id, text, listener.descendants_callback is not None)
                future.add_done_callback(functools.partial(_reselected, listener, left))


def _reselected(listener: NotificationListener, left: list[int], future: asyncio.Future[Any]) -> None:
    if future.cancelled() or future.exception() is not None:
        log.warning("a topic notification selector could not be selected again: %s",
                    "cancelled" if future.cancelled() else future.exception())
    left[0] -= 1
    if left[0] == 0:
        listener._reselected()


def _selector(selector: Any) -> str:
    if not selector or not isinstance(selector, str):
        raise errors.InvalidRequestError("name a selector")
    return selector  # the server parses it (INVALID_SELECTOR)
