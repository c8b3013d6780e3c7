"""The values a session hands out: topic events, time series events, fetch results.

:class:`TopicEvent` is built on the hot path as a plain tuple (``_new_event``):
every such tuple holds every field, in order.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, NamedTuple

from canopy import errors
from topics.errors import TopicModelError
from topics.specification import TopicSpecification
from topics.types import TopicType


class AddResult(enum.Enum):
    CREATED = "CREATED"
    EXISTS = "EXISTS"


class EventMetadata(NamedTuple):
    """Where a time series event sits: its sequence number, time (ms) and author."""

    sequence: int
    timestamp: int
    author: str


class TimeSeriesEvent(NamedTuple):
    """A time series event; ``original`` is set when it is an edit."""

    sequence: int
    timestamp: int
    author: str
    value: Any
    original: EventMetadata | None = None

    @property
    def is_edit(self) -> bool:
        return self.original is not None


class RangeResult(NamedTuple):
    events: list[TimeSeriesEvent]
    selected_count: int

    @property
    def complete(self) -> bool:
        """False when ``limit`` cut the result short."""
        return len(self.events) == self.selected_count


class TopicEvent(NamedTuple):
    """One notification for a subscription.

    ``subscribed`` (with the current value), ``value`` for each update,
    ``unsubscribed`` with a reason. For a TIME_SERIES topic every event and
    edit arrives as a ``value`` notification whose ``event`` holds the event
    (``value`` is its value).

    Two kinds concern the session's connection, not a topic (their ``path`` is
    ``""`` and their ``type`` ``None``): ``disconnected`` when the connection
    dropped (``reason`` says how; the session is reconnecting, and the values
    may be stale until) ``reconnected``, once the subscription is up to date
    again (``reason`` ``RESUMED`` or ``NEW_SESSION``, ``value`` the session id).
    Between the two come the current values of the topics it knew (``value``),
    the topics that appeared (``subscribed``) and those that went
    (``unsubscribed``, reason ``DISCONNECTED``). See :func:`connect`.
    """

    kind: str  # "subscribed" | "value" | "unsubscribed" | "disconnected" | "reconnected"
    path: str
    type: TopicType | None  # None for the connection events
    value: Any = None
    specification: TopicSpecification | None = None
    reason: str | None = None
    name: str | None = None  # the OpenAjax name, for hub subscriptions
    event: TimeSeriesEvent | None = None
    #: false for a value delivered without becoming the topic's value (an MQTT publish
    #: without RETAIN, a ``set`` with ``retain=False``): the topic keeps the one it had
    retained: bool = True


@dataclass(frozen=True)
class FetchedTopic:
    path: str
    type: TopicType
    value: Any = None
    properties: dict[str, str] | None = None


_new_event = tuple.__new__


def _local(error: TopicModelError) -> errors.CanopyError:
    """A topic model error the client found before sending, as the server would have answered it."""
    return errors.error_for(error.code, str(error))
