"""A session's outbound queue, with the topic CONFLATION policies.

Every message for a session (responses, subscription notifications, topic
values) goes through one FIFO :class:`OutboundQueue`; a writer drains it into
network frames as fast as the client reads. When the client is slower than
the updates, the queue grows, and each topic's CONFLATION property decides
what happens to *its* values:

``off``
    every value is queued; past the queue limit the session is closed.
``conflate`` (the default)
    under back pressure (at least ``backpressure`` values pending), a new
    value replaces the topic's value still waiting in the queue, in place.
``always``
    a new value always replaces the topic's pending value.
``unsubscribe``
    under back pressure the session is unsubscribed from the topic.

**Priority.** A topic's PRIORITY gives its messages a lane: when several
messages are queued, those of ``high`` topics leave first, then the default
lane, then ``low`` topics'; within a lane the order is the order queued. A
topic's subscription notifications (and any control message about it) are
queued in its lane too (:meth:`OutboundQueue.push_control` with the
priority), so they still come before and after its values as queued.
Everything else (responses, errors) goes in the default lane, so a low
topic's notifications may leave after a response queued later. Until a
session's first ``high`` or ``low`` message the queue has only its default
lane and works as a plain FIFO.

Control messages (responses, subscribed/unsubscribed notifications) are
never dropped or merged and do not count towards the limit; the limit and
the back-pressure threshold count pending *values*. Every message counts
towards ``max_bytes``, the session's outbound budget: past it a value is
refused (OVERFLOW) and a control message reports it, and the owner closes
the session. Messages are opaque
objects (deliveries, responses): the same update object serves every
session, and the owner encodes what :meth:`OutboundQueue.take` hands out.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterator

from sessions.deliveries import size_of
from topics.properties import Conflation, Priority

__all__ = ["OutboundQueue", "Outcome"]


class Outcome(enum.Enum):
    QUEUED = "queued"
    CONFLATED = "conflated"
    UNSUBSCRIBE = "unsubscribe"  # the caller must unsubscribe the session from the topic
    OVERFLOW = "overflow"  # the caller must close the session


_ALWAYS, _CONFLATE, _UNSUBSCRIBE = Conflation.ALWAYS, Conflation.CONFLATE, Conflation.UNSUBSCRIBE
_QUEUED, _CONFLATED = Outcome.QUEUED, Outcome.CONFLATED
_UNSUBSCRIBE_NOW, _OVERFLOW = Outcome.UNSUBSCRIBE, Outcome.OVERFLOW
_HIGH, _LOW = Priority.HIGH, Priority.LOW


class OutboundQueue:
    """Pending messages for one session. Not thread-safe; one owner."""

    __slots__ = (
        "limit", "backpressure", "max_bytes", "bytes", "_size", "_items", "_high", "_low", "_lanes", "_pending",
        "_values", "_per_topic", "conflated", "last_outcome",
    )

    def __init__(
        self,
        limit: int = 10_000,
        backpressure: int = 1_000,
        max_bytes: int | None = None,
        size: Callable[[object], int] = size_of,
    ) -> None:
        """``size`` measures a message in bytes (for ``max_bytes`` and for :meth:`take`)."""
        if limit < 1 or backpressure < 1:
            raise ValueError("queue limit and back-pressure threshold must be positive")
        self.limit = limit
        self.backpressure = min(backpressure, limit)
        self.max_bytes = max_bytes
        self.bytes = 0
        self._size = size
        # items are [topic, message]: topic is None for control messages;
        # a message of None is a value that was dropped after queueing
        self._items: deque[list[object]] = deque()
        # the high and low lanes, made on first use; _lanes: every lane, in the order they drain
        self._high: deque[list[object]] | None = None
        self._low: deque[list[object]] | None = None
        self._lanes: tuple[deque[list[object]], ...] = (self._items,)
        self._pending: dict[object, list[object]] = {}
        self._values = 0
        self._per_topic: dict[object, int] = {}  # values queued per topic
        self.conflated = 0
        self.last_outcome = Outcome.QUEUED

    def __len__(self) -> int:
        if len(self._lanes) == 1:
            return len(self._items)
        return sum(len(lane) for lane in self._lanes)

    def _lane(self, priority: Priority | None) -> deque[list[object]]:
        """The lane of ``priority`` (``None`` or DEFAULT: the default lane), made if need be."""
        if priority is _HIGH:
            if self._high is None:
                self._high = deque()
                self._relane()
            return self._high
        if priority is _LOW:
            if self._low is None:
                self._low = deque()
                self._relane()
            return self._low
        return self._items

    def _relane(self) -> None:
        self._lanes = tuple(lane for lane in (self._high, self._items, self._low) if lane is not None)

    @property
    def pending_values(self) -> int:
        return self._values

    def messages(self) -> Iterator[object]:
        """The messages queued, oldest first (those dropped after queueing left out)."""
        return (item[1] for lane in self._lanes for item in lane if item[1] is not None)

    @property
    def under_backpressure(self) -> bool:
        return self._values >= self.backpressure

    def push_control(self, message: object, priority: Priority | None = None) -> bool:
        """Queue a control message (about a topic of ``priority``: in its lane); ``False``
        when the queue is now over its byte budget."""
        (self._items if priority is None else self._lane(priority)).append([None, message])
        self.bytes += self._size(message)
        return self.max_bytes is None or self.bytes <= self.max_bytes

    def push_value(
        self, topic: object, message: object, policy: Conflation, priority: Priority | None = None
    ) -> Outcome:
        """Queue a topic value under the topic's conflation policy, in the lane of its
        ``priority`` (the outcome is also kept in :attr:`last_outcome`)."""
        size = self._size(message)
        if policy is _ALWAYS or (policy is _CONFLATE and self._values >= self.backpressure):
            item = self._pending.get(topic)
            if item is not None:
                self.bytes += size - self._size(item[1])
                item[1] = message
                self.conflated += 1
                self.last_outcome = _CONFLATED
                return _CONFLATED
        elif policy is _UNSUBSCRIBE and self._values >= self.backpressure:
            self.last_outcome = _UNSUBSCRIBE_NOW
            return _UNSUBSCRIBE_NOW
        if self._values >= self.limit or (self.max_bytes is not None and self.bytes + size > self.max_bytes):
            self.last_outcome = _OVERFLOW
            return _OVERFLOW
        item = [topic, message]
        (self._items if priority is None else self._lane(priority)).append(item)
        self._values += 1
        self.bytes += size
        per_topic = self._per_topic
        per_topic[topic] = per_topic.get(topic, 0) + 1
        if policy is _ALWAYS or policy is _CONFLATE:
            self._pending[topic] = item
        self.last_outcome = _QUEUED
        return _QUEUED

    def drop_topic(self, topic: object) -> int:
        """Discard the values still queued for ``topic``; return how many."""
        if not self._per_topic.pop(topic, 0):
            return 0
        dropped = 0
        for lane in self._lanes:
            for item in lane:
                if item[0] == topic and item[1] is not None:
                    self.bytes -= self._size(item[1])
                    item[1] = None
                    dropped += 1
        self._values -= dropped
        self._pending.pop(topic, None)
        return dropped

    def seal_topic(self, topic: object) -> None:
        """Let no later value of ``topic`` replace one already queued (conflation): the
        session was unsubscribed from it, and what follows belongs to a new subscription."""
        self._pending.pop(topic, None)

    def take(self, max_bytes: int = 64 * 1024) -> list[object]:
        """Pop messages from the front, at least one and up to ~``max_bytes``."""
        size = self._size
        out: list[object] = []
        append = out.append
        total = taken_values = 0
        per_topic, pending = self._per_topic, self._pending
        for items in self._lanes:  # one lane unless some topic has a PRIORITY
            popleft = items.popleft
            while items and (not out or total < max_bytes):
                item = popleft()
                topic, message = item
                if topic is not None:
                    if message is None:
                        continue
                    taken_values += 1
                    left = per_topic[topic] - 1
                    if left:
                        per_topic[topic] = left
                    else:
                        del per_topic[topic]
                    if pending and pending.get(topic) is item:
                        del pending[topic]
                append(message)
                total += size(message)
            if out and total >= max_bytes:
                break
        self._values -= taken_values
        self.bytes -= total
        return out

    def overflow_reason(self) -> str:
        """Why a push overflowed: the budget it went over."""
        if self._values >= self.limit:
            return f"more than {self.limit:,} values queued"
        return f"more than {self.max_bytes:,} bytes queued"
