"""Subscriptions: :class:`Subscription` (the events of one selector) and what
``subscribe`` returns, :class:`SubscribeRequest`; ``_Topic``, what a session knows
of a topic it was told of."""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from canopy import errors
from canopy.client.events import TopicEvent, _new_event
from topics import openajax
from topics import types as values
from topics.selectors import Selector
from topics.specification import TopicSpecification
from topics.types import TopicType

if TYPE_CHECKING:
    from canopy.client.session import Session

log = logging.getLogger("canopy.client")
_END = object()


@dataclass
class _Topic:
    path: str
    spec: TopicSpecification
    value: Any
    #: the last time series event delivered (TIME_SERIES topics)
    sequence: int = -1
    #: the bytes of the value the server last sent: what its next delta applies to
    basis: bytes | None = None

    def decode(self, data: bytes) -> Any:
        """A new value's bytes as a Python value (a TIME_SERIES topic's stay bytes)."""
        kind = self.spec.type
        if kind is TopicType.BINARY:
            return data
        if kind is TopicType.TIME_SERIES:
            return data
        return values.decode(kind, data)

    def value_event(self, value: Any) -> TopicEvent:
        return _new_event(TopicEvent, ("value", self.path, self.spec.type, value, self.spec, None, None, None, True))


class Subscription:
    """Events for one selector; iterate with ``async for``; ``async with`` unsubscribes on exit.

    With a ``callback`` the events are not queued: each is passed to the
    callback the moment it arrives, from the session's socket callback (no
    task in between), and iterating the subscription only tells when it ends.
    The callback must not block; an exception it raises is logged and the
    session goes on. Either way the subscription also gets the session's
    ``disconnected`` and ``reconnected`` events (see :class:`TopicEvent`);
    it ends when the session does, for good.
    """

    def __init__(
        self,
        session: Session,
        selector: Selector,
        hub_root: str | None = None,
        callback: Callable[[TopicEvent], Any] | None = None,
    ) -> None:
        self.session = session
        self.selector = selector
        self._events: deque[Any] = deque()
        self._waiter: asyncio.Future[None] | None = None
        self._hub_root = hub_root
        self._error: errors.CanopyError | None = None
        self._callback = callback
        self.ended = False
        self._down = False  # told "disconnected", not yet "reconnected"

    def _push(self, item: Any) -> None:
        callback = self._callback
        if callback is not None and item is not _END:
            try:
                callback(item)
            except Exception:
                log.exception("a subscription callback for %s failed", self.selector)
            return
        self._events.append(item)
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)

    def _put(self, event: TopicEvent) -> None:
        if self._hub_root is not None:
            name = openajax.path_to_name(event.path, self._hub_root)
            if name is None:
                return
            event = event._replace(name=name)
        self._push(event)

    def _notify(self, event: TopicEvent) -> None:
        """A connection event: for every subscription, whatever its selector."""
        if not self.ended:
            self._push(event)

    def _end(self, error: errors.CanopyError | None = None) -> None:
        """No more events: the selector was unsubscribed, or the session ended
        (``error`` says why when the client did not close it itself)."""
        if not self.ended:
            self.ended = True
            self._error = error
            self._push(_END)

    def __aiter__(self) -> AsyncIterator[TopicEvent]:
        return self

    async def __anext__(self) -> TopicEvent:
        while not self._events:
            self._waiter = asyncio.get_running_loop().create_future()
            await self._waiter
        item = self._events[0]
        if item is _END:  # stays at the head: the subscription stays ended
            if self._error is not None:
                raise self._error
            raise StopAsyncIteration
        self._events.popleft()
        assert isinstance(item, TopicEvent)
        return item

    async def next(self, timeout: float | None = None) -> TopicEvent:
        """The next event, or :class:`TimeoutError` after ``timeout`` seconds."""
        return await asyncio.wait_for(self.__anext__(), timeout)

    async def unsubscribe(self) -> None:
        await self.session.topics.unsubscribe(self.selector)

    async def __aenter__(self) -> Subscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if not self.session.closed:
            await self.unsubscribe()


class SubscribeRequest:
    """What ``subscribe`` returns. ``await`` it for the :class:`Subscription`, or
    iterate it directly (``async for event in session.topics.subscribe(...)``),
    or use it with ``async with`` to unsubscribe on exit."""

    def __init__(self, pending: Coroutine[Any, Any, Subscription]) -> None:
        self._pending: Coroutine[Any, Any, Subscription] | None = pending
        self._subscription: Subscription | None = None

    async def _get(self) -> Subscription:
        if self._subscription is None:
            assert self._pending is not None
            pending, self._pending = self._pending, None
            self._subscription = await pending
        return self._subscription

    def __await__(self) -> Generator[Any, None, Subscription]:
        return self._get().__await__()

    def __aiter__(self) -> AsyncIterator[TopicEvent]:
        return self

    async def __anext__(self) -> TopicEvent:
        return await (await self._get()).__anext__()

    async def __aenter__(self) -> Subscription:
        return await self._get()

    async def __aexit__(self, *exc: object) -> None:
        if self._subscription is not None:
            await self._subscription.__aexit__(*exc)

    def __del__(self) -> None:
        if self._pending is not None:
            self._pending.close()  # never awaited: nothing was sent
