"""What an MQTT publish carries to its subscribers besides its payload: the attributes.

canopy keeps a topic's value, not the packet that set it, so what a subscriber needs of the
publish travels beside the value as *attributes*: opaque bytes of a set, passed along with its
change to every session that receives it, and kept with a retained value for its later
subscribers (until a value without them replaces it). The MQTT front door writes them with
:func:`encode_attributes` and reads them back with :func:`decode_attributes`:

* a flags byte: the publish's QoS (bits 0-1: a subscriber gets the lower of it and its
  subscription's), its RETAIN flag (bit 2: for Retain As Published), bit 3 always (these are
  the front door's attributes) and bit 4 when an expiry time follows;
* the publishing session's id (a length byte, then UTF-8): a No Local subscription of that
  session does not get its own publish;
* with bit 4, when the message expires (milliseconds since the epoch, 8 bytes big-endian:
  its Message Expiry Interval after it arrived);
* the MQTT 5 properties that go on with the message (:data:`FORWARDED`), as a property block.

Attributes a native client's set carries (none, or bytes of another shape) read as
:data:`UNKNOWN`: QoS 2, not retained, no origin, no properties, no expiry.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import NamedTuple

from mqtt.properties import EMPTY, Cursor, MQTTError, PacketType, Properties, decode_properties, encode_properties

__all__ = ["FORWARDED", "UNKNOWN", "Attributes", "decode_attributes", "encode_attributes", "for_subscriber"]

#: the properties of a PUBLISH that travel with its value to the subscribers (MQTT-3.3.2-4,
#: -15 ... -20: forwarded unaltered, the expiry interval less the time waited); the others
#: concern one connection (topic alias) or are the server's to set (subscription identifiers)
FORWARDED = ("payload_format_indicator", "message_expiry_interval", "content_type", "response_topic",
             "correlation_data", "user_properties")

#: bit 3 of the flags byte: the front door wrote these attributes
ORIGIN = 0x08
#: bit 4: the message's expiry time follows the publishing session's id
DEADLINE = 0x10


class Attributes(NamedTuple):
    """What :func:`decode_attributes` read."""

    qos: int
    retain: bool
    #: the publishing session's id ("" when unknown)
    origin: str
    #: the forwarded MQTT 5 properties
    properties: Properties
    #: when the message expires, ms since the epoch; None: never
    deadline: int | None


UNKNOWN = Attributes(2, False, "", EMPTY, None)


@functools.lru_cache(maxsize=4096)
def _head(qos: int, retain: bool, origin: str) -> bytes:
    sender = origin.encode()[:255]
    return bytes((qos | (0x04 if retain else 0) | ORIGIN, len(sender))) + sender


def encode_attributes(
    qos: int, retain: bool, origin: str, properties: Properties, deadline: int | None = None
) -> bytes:
    """The attributes of a publish (see the module docstring); ``deadline``: when it expires."""
    head = _head(qos, retain, origin)
    if deadline is not None:
        head = bytes((head[0] | DEADLINE,)) + head[1:] + deadline.to_bytes(8, "big")
    if properties is EMPTY:  # most publishes
        return head + b"\x00"
    kept = Properties(**{name: getattr(properties, name) for name in FORWARDED})
    return head + (b"\x00" if kept == EMPTY else encode_properties(kept, PacketType.PUBLISH))


@functools.lru_cache(maxsize=1024)
def decode_attributes(attributes: bytes) -> Attributes:
    """What :func:`encode_attributes` wrote; :data:`UNKNOWN` for anything else."""
    if len(attributes) < 2 or attributes[0] & 0xE0 or not attributes[0] & ORIGIN or attributes[0] & 3 == 3:
        return UNKNOWN
    try:
        end = 2 + attributes[1]
        origin = attributes[2:end].decode()
        deadline = None
        if attributes[0] & DEADLINE:
            if len(attributes) < end + 8:
                return UNKNOWN
            deadline, end = int.from_bytes(attributes[end:end + 8], "big"), end + 8
        properties = decode_properties(Cursor(attributes[end:], "PUBLISH"), PacketType.PUBLISH)
    except (MQTTError, UnicodeDecodeError):
        return UNKNOWN
    return Attributes(attributes[0] & 3, bool(attributes[0] & 0x04), origin, properties, deadline)


def for_subscriber(own: Properties, forwarded: Properties, left_ms: float | None = None) -> Properties:
    """A PUBLISH's properties for one subscriber: the message's forwarded ones (with
    ``left_ms``, its expiry interval is what is left, in whole seconds rounded up) and the
    subscription's own (its identifiers)."""
    if left_ms is not None:
        forwarded = replace(forwarded, message_expiry_interval=-int(-left_ms // 1000))
    if own.is_empty:
        return forwarded
    return replace(forwarded, subscription_identifiers=own.subscription_identifiers)
