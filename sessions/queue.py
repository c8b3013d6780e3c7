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
from topics.properties import Conflation

__all__ = ["OutboundQueue", "Outcome"]


class Outcome(enum.Enum):
    QUEUED = "queued"
    CONFLATED = "conflated"
    UNSUBSCRIBE = "unsubscribe"  # the caller must unsubscribe the session from the topic
    OVERFLOW = "overflow"  # the caller must close the session


_ALWAYS, _CONFLATE, _UNSUBSCRIBE = Conflation.ALWAYS, Conflation.CONFLATE, Conflation.UNSUBSCRIBE
_QUEUED, _CONFLATED = Outcome.QUEUED, Outcome.CONFLATED
_UNSUBSCRIBE_NOW, _OVERFLOW = Outcome.UNSUBSCRIBE, Outcome.OVERFLOW


class OutboundQueue:
    """Pending messages for one session. Not thread-safe; one owner."""

    __slots__ = (
        "limit", "backpressure", "max_bytes", "bytes", "_size", "_items", "_pending", "_values", "_per_topic",
        "conflated", "last_outcome",
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
        self._pending: dict[object, list[object]] = {}
        self._values = 0
        self._per_topic: dict[object, int] = {}  # values queued per topic
        self.conflated = 0
        self.last_outcome = Outcome.QUEUED

    def __len__(self) -> int:
        return len(self._items)

    @property
    def pending_values(self) -> int:
        return self._values

    def messages(self) -> Iterator[object]:
        """The messages queued, oldest first (those dropped after queueing left out)."""
        return (item[1] for item in self._items if item[1] is not None)

    @property
    def under_backpressure(self) -> bool:
        return self._values >= self.backpressure

    def push_control(self, message: object) -> bool:
        """Queue a control message; ``False`` when the queue is now over its byte budget."""
        self._items.append([None, message])
        self.bytes += self._size(message)
        return self.max_bytes is None or self.bytes <= self.max_bytes

    def push_value(self, topic: object, message: object, policy: Conflation) -> Outcome:
        """Queue a topic value under the topic's conflation policy (the
        outcome is also kept in :attr:`last_outcome`)."""
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
        self._items.append(item)
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
        for item in self._items:
            if item[0] == topic and item[1] is not None:
                self.bytes -= self._size(item[1])
                item[1] = None
                dropped += 1
        self._values -= dropped
        self._pending.pop(topic, None)
        return dropped

    def take(self, max_bytes: int = 64 * 1024) -> list[object]:
        """Pop messages from the front, at least one and up to ~``max_bytes``."""
        size = self._size
        out: list[object] = []
        append = out.append
        total = taken_values = 0
        items, per_topic, pending = self._items, self._per_topic, self._pending
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
        self._values -= taken_values
        self.bytes -= total
        return out

    def overflow_reason(self) -> str:
        """Why a push overflowed: the budget it went over."""
        if self._values >= self.limit:
            return f"more than {self.limit:,} values queued"
        return f"more than {self.max_bytes:,} bytes queued"
