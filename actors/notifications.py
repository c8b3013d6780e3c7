"""Topic notifications on a gateway: the shell over :class:`sessions.notifications.NotificationBook`.

It sends the book's *structure* registrations to the partitions (topics added and removed,
never a value: a listener on a busy branch costs no value traffic), feeds it the partitions'
structure events and queues what it returns for each session as NOTIFY
``topic_notification`` messages, in the session's outbound queue like every control message
(its byte budget applies: a listener too slow to read them is ended as any slow consumer).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from actors.link import PartitionLink
from canopy import protocol as wire
from sessions.notifications import Lens, Notification, NotificationBook
from sessions.registry import Group, SessionRegistry
from sessions.requests import RequestError
from topics.protocol import Failed, Register, Result, TopicEvent, Unregister
from topics.selectors import Selector

KIND = "topic_notification"


class _SessionLens:
    """A session's view of the tree, from its group: its tables and its permissions."""

    __slots__ = ("_registry", "_group")

    def __init__(self, registry: SessionRegistry, group: Group) -> None:
        self._registry = registry
        self._group = group

    def session_paths(self, topic_path: str) -> list[str]:
        return self._group.session_paths(topic_path)

    def resolve(self, session_path: str) -> str:
        return self._group.resolution.resolve(session_path)

    def interest(self, selector: Selector) -> list[Selector]:
        return self._group.resolution.interest(selector)

    def can_read(self, session_path: str) -> bool:
        return self._registry.can_read(self._group, session_path)


def body(n: Notification) -> dict[str, Any]:
    """A notification as the NOTIFY's body (see :mod:`canopy.protocol`)."""
    out: dict[str, Any] = {"listener": n.listener, "type": n.type.value, "path": n.path, "descendant": n.descendant}
    if n.specification is not None:
        out["topic_type"] = n.specification.type.value
        out["properties"] = n.specification.properties
    return out


class TopicNotifications:
    def __init__(self, registry: SessionRegistry, link: PartitionLink, send: Callable[[str, bytes], None]) -> None:
        self.registry = registry
        self.link = link
        self._send = send
        self.book = NotificationBook(lambda s: len(link.partitions_for(s)) if link.count else 1)
        #: registration token -> resolved when its snapshot is complete everywhere
        self.waiters: dict[int, asyncio.Future[None]] = {}
        self.notifications_sent = 0

    def lens(self, session_id: str) -> Lens | None:
        session = self.registry.sessions.get(session_id)
        if session is None or session.group is None:
            return None
        return _SessionLens(self.registry, session.group)

    def _lens(self, session_id: str) -> Lens:
        lens = self.lens(session_id)
        if lens is None:
            raise RequestError("NO_SUCH_SESSION", f"no session {session_id}")
        return lens

    # -- requests -------------------------------------------------------------------------

    async def select(self, session_id: str, listener: int, selector: Selector, descendants: bool) -> None:
        """Add a selector to a listener; answered once the SELECTED notifications are queued."""
        out, registrations, waits = self.book.select(
            session_id, listener, selector, self._lens(session_id), descendants=descendants
        )
        self._deliver(out)
        loop = asyncio.get_running_loop()
        futures: list[asyncio.Future[Result]] = []
        for topic_selector, token in registrations:
            self.waiters.setdefault(token, loop.create_future())
            futures += self.link.everywhere(topic_selector, Register(str(topic_selector), token, True))
        for result in await asyncio.gather(*futures):
            if isinstance(result, Failed):
                self.deselect(session_id, listener, selector)
                for _, token in registrations:
                    waiter = self.waiters.pop(token, None)
                    if waiter is not None and not waiter.done():
                        waiter.cancel()
                raise RequestError(result.code, result.message)
        for token in waits:
            waiter = self.waiters.get(token)
            if waiter is not None:
                await asyncio.shield(waiter)

    def deselect(self, session_id: str, listener: int, selector: Selector) -> None:
        lens = self.lens(session_id)
        if lens is None:
            return
        out, gone = self.book.deselect(session_id, listener, selector, lens)
        self._deliver(out)
        self._unregister(gone)

    def close(self, session_id: str, listener: int) -> None:
        self._unregister(self.book.close(session_id, listener))

    def session_closed(self, session_id: str) -> None:
        self._unregister(self.book.close_session(session_id))

    def _unregister(self, selectors: list[Selector]) -> None:
        for selector in selectors:
            for index in self.link.partitions_for(selector):
                self.link.submit(index, Unregister(str(selector), True))

    # -- partition events -----------------------------------------------------------------

    def on_events(self, events: list[TopicEvent]) -> None:
        if not self.book.interest:
            return
        out, live = self.book.on_events(events, self.lens)
        self._deliver(out)
        for token in live:
            waiter = self.waiters.pop(token, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)

    def reset(self, owned: Callable[[str], bool]) -> None:
        self.book.resync_begin(owned)

    def resynced(self, owned: Callable[[str], bool]) -> None:
        self._deliver(self.book.resync_end(owned, self.lens))

    def _deliver(self, notifications: list[Notification]) -> None:
        for n in notifications:
            self._send(n.session_id, wire.encode(wire.Notify(KIND, body(n))))
        self.notifications_sent += len(notifications)

    def stats(self) -> dict[str, int]:
        return {
            "notification_listeners": len(self.book.listeners),
            "notification_registrations": len(self.book.interest),
            "notification_topics": len(self.book.cache),
            "notifications_sent": self.notifications_sent,
        }
