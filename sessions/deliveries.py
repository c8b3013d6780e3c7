"""What the session registry hands its driver for each session (pure).

A *delivery* is one notification for one session, free of any wire format:
the gateway turns each into a protocol message when it writes the session's
frames. Deliveries are immutable and shared: one update is one
:class:`Update` object, queued for every session subscribed to the topic.

A topic is named by its *alias* (a number unique in the gateway, announced
with the session path in :class:`Subscribed`), so later deliveries need not
repeat the path.
"""

from __future__ import annotations

from typing import NamedTuple

from topics.timeseries import Event

__all__ = [
    "CompressedUpdate", "Delivery", "DeltaUpdate", "SeriesUpdate", "Subscribed", "Unsubscribed", "Update", "size_of",
]


class Subscribed(NamedTuple):
    """The session now sees a topic at ``path`` (a session path)."""

    alias: int
    path: str
    type: str
    properties: list[list[str]]
    value: bytes | None
    #: what the value was published with, opaque (a retained MQTT 5 publish's properties), or empty
    attributes: bytes = b""


class Update(NamedTuple):
    """A new value of a subscribed topic."""

    alias: int
    value: bytes
    #: what the publisher sent with the value, opaque (MQTT 5 message properties), or empty
    attributes: bytes = b""
    #: false for a value delivered without becoming the topic's value (see ``set``'s ``retain``)
    retained: bool = True
    #: (partition, a message position below this value's): where a session that had
    #: everything before this value would read the partition's recent messages again
    mark: tuple[int, int] | None = None


class DeltaUpdate(NamedTuple):
    """A new value of a subscribed topic as a delta from the value the session was last sent
    (made only when a session's deliveries are written: see :mod:`sessions.streaming`)."""

    alias: int
    delta: bytes
    #: the whole value's length
    size: int


class CompressedUpdate(NamedTuple):
    """A new value of a subscribed topic, deflated (zlib) because its topic's COMPRESSION says
    so and the session accepts it (made only when deliveries are written: see
    :mod:`sessions.streaming`)."""

    alias: int
    data: bytes
    #: the whole value's length
    size: int


class SeriesUpdate(NamedTuple):
    """A time series event (or an edit) of a subscribed TIME_SERIES topic."""

    alias: int
    event: Event
    mark: tuple[int, int] | None = None


class Unsubscribed(NamedTuple):
    alias: int
    reason: str


Delivery = Subscribed | Update | DeltaUpdate | CompressedUpdate | SeriesUpdate | Unsubscribed


def size_of(item: object) -> int:
    """About how many bytes a queued item takes on the wire (for framing)."""
    if isinstance(item, Update):
        return len(item.value) + len(item.attributes) + 8
    if isinstance(item, DeltaUpdate):
        return len(item.delta) + 8
    if isinstance(item, CompressedUpdate):
        return len(item.data) + 8
    if isinstance(item, SeriesUpdate):
        return len(item.event.value) + len(item.event.author) + 32
    if isinstance(item, Subscribed):
        return len(item.path) + len(item.value or b"") + 16 * len(item.properties) + 16
    if isinstance(item, bytes):
        return len(item)
    return 64
