"""MQTT's data representation (section 1.5) and MQTT 5 properties (5.0 section 2.2.2).

The bottom layer of the codec: the packet types and reason codes by name,
the one error type, a :class:`Cursor` that reads the data types of section
1.5 (bytes, two- and four-byte integers, Variable Byte Integers, UTF-8
strings, binary data, string pairs) out of one packet with bounds checks,
the matching ``put_*`` writers, and MQTT 5 property blocks.

Errors::

    Exception
     ├── MQTTError    the bytes a peer sent break the protocol; .reason_code is
     │                the MQTT 5 reason code to close with (0x81 Malformed
     │                Packet, 0x82 Protocol Error, 0x84, 0x95, ...)
     └── ValueError   an encoder was given a value the wire cannot carry

Properties
----------
:data:`PROPERTIES` lists every property of MQTT 5.0 (0x01 Payload Format
Indicator ... 0x2A Shared Subscription Available): its wire type, the packet
types it may appear in and whether it may appear in a CONNECT's will
properties. A property block decodes into a :class:`Properties` value, one
attribute per property (None when absent), except that User Properties
(0x26) are an ordered tuple of ``(name, value)`` pairs that may repeat and
Subscription Identifiers (0x0B) a tuple that may hold several in PUBLISH
and at most one in SUBSCRIBE. Any other property given twice, and any
property not allowed where it is found, is a Protocol Error (0x82); so are
the values the specification forbids (a Receive Maximum of 0, a Maximum QoS
of 2, Authentication Data without an Authentication Method, ...).
"""

from __future__ import annotations

import enum
from collections.abc import Iterator
from dataclasses import dataclass, fields
from typing import Any, Final

from mqtt.names import string_problem, topic_name_problem


class PacketType(enum.IntEnum):
    """The control packet types, by the value of the fixed header's high nibble."""

    CONNECT = 1
    CONNACK = 2
    PUBLISH = 3
    PUBACK = 4
    PUBREC = 5
    PUBREL = 6
    PUBCOMP = 7
    SUBSCRIBE = 8
    SUBACK = 9
    UNSUBSCRIBE = 10
    UNSUBACK = 11
    PINGREQ = 12
    PINGRESP = 13
    DISCONNECT = 14
    AUTH = 15


class ReasonCode(enum.IntEnum):
    """MQTT 5.0 reason codes (section 2.4); 0x00-0x02 have several names."""

    SUCCESS = 0x00
    NORMAL_DISCONNECTION = 0x00
    GRANTED_QOS_0 = 0x00
    GRANTED_QOS_1 = 0x01
    GRANTED_QOS_2 = 0x02
    DISCONNECT_WITH_WILL_MESSAGE = 0x04
    NO_MATCHING_SUBSCRIBERS = 0x10
    NO_SUBSCRIPTION_EXISTED = 0x11
    CONTINUE_AUTHENTICATION = 0x18
    RE_AUTHENTICATE = 0x19
    UNSPECIFIED_ERROR = 0x80
    MALFORMED_PACKET = 0x81
    PROTOCOL_ERROR = 0x82
    IMPLEMENTATION_SPECIFIC_ERROR = 0x83
    UNSUPPORTED_PROTOCOL_VERSION = 0x84
    CLIENT_IDENTIFIER_NOT_VALID = 0x85
    BAD_USER_NAME_OR_PASSWORD = 0x86
    NOT_AUTHORIZED = 0x87
    SERVER_UNAVAILABLE = 0x88
    SERVER_BUSY = 0x89
    BANNED = 0x8A
    SERVER_SHUTTING_DOWN = 0x8B
    BAD_AUTHENTICATION_METHOD = 0x8C
    KEEP_ALIVE_TIMEOUT = 0x8D
    SESSION_TAKEN_OVER = 0x8E
    TOPIC_FILTER_INVALID = 0x8F
    TOPIC_NAME_INVALID = 0x90
    PACKET_IDENTIFIER_IN_USE = 0x91
    PACKET_IDENTIFIER_NOT_FOUND = 0x92
    RECEIVE_MAXIMUM_EXCEEDED = 0x93
    TOPIC_ALIAS_INVALID = 0x94
    PACKET_TOO_LARGE = 0x95
    MESSAGE_RATE_TOO_HIGH = 0x96
    QUOTA_EXCEEDED = 0x97
    ADMINISTRATIVE_ACTION = 0x98
    PAYLOAD_FORMAT_INVALID = 0x99
    RETAIN_NOT_SUPPORTED = 0x9A
    QOS_NOT_SUPPORTED = 0x9B
    USE_ANOTHER_SERVER = 0x9C
    SERVER_MOVED = 0x9D
    SHARED_SUBSCRIPTIONS_NOT_SUPPORTED = 0x9E
    CONNECTION_RATE_EXCEEDED = 0x9F
    MAXIMUM_CONNECT_TIME = 0xA0
    SUBSCRIPTION_IDENTIFIERS_NOT_SUPPORTED = 0xA1
    WILDCARD_SUBSCRIPTIONS_NOT_SUPPORTED = 0xA2


MALFORMED: Final = ReasonCode.MALFORMED_PACKET
PROTOCOL_ERROR: Final = ReasonCode.PROTOCOL_ERROR
MAX_VARIABLE_BYTE_INT: Final = 268_435_455


class MQTTError(Exception):
    """Bytes from a peer that break MQTT 3.1.1 or 5.0; the connection must close.

    ``reason_code`` is the MQTT 5 reason code to put in the DISCONNECT (or
    CONNACK) that closes it. ``protocol_level`` is set on 0x84 (Unsupported
    Protocol Version): the level the CONNECT asked for, so the caller can
    answer in a CONNACK that client understands. ``packets`` holds, when
    :meth:`mqtt.codec.Reader.feed` raises, the packets completed before the
    offending one in the same call (a server may act on, say, a DISCONNECT
    among them before it closes).
    """

    def __init__(self, reason_code: int, message: str, *, protocol_level: int | None = None) -> None:
        super().__init__(message)
        self.reason_code = reason_code
        self.protocol_level = protocol_level
        self.packets: tuple[object, ...] = ()


class Cursor:
    """Reads the data types of section 1.5 from one packet's bytes, front to back.

    *base* is the offset of ``data[0]`` in the whole packet (the fixed
    header's length), so errors give offsets counted from the packet's
    first byte. Every read checks that its bytes are there first: a
    length prefix larger than what is left raises MQTTError(0x81) before
    anything is allocated.
    """

    __slots__ = ("_data", "_pos", "_end", "_base", "packet")

    def __init__(self, data: bytes | bytearray | memoryview, packet: str, base: int = 0) -> None:
        self._data = memoryview(data)
        self._pos = 0
        self._end = len(self._data)
        self._base = base
        self.packet = packet

    @property
    def offset(self) -> int:
        """The offset of the next byte to read, from the start of the packet."""
        return self._base + self._pos

    @property
    def left(self) -> int:
        """How many bytes are left to read."""
        return self._end - self._pos

    def fail(self, reason_code: int, field: str, what: str, *, at: int | None = None) -> MQTTError:
        """An MQTTError saying *what* is wrong with *field* at byte *at* (default: the next)."""
        where = self.offset if at is None else at
        return MQTTError(reason_code, f"{self.packet}: {field} at byte {where}: {what}")

    def take(self, size: int, field: str) -> memoryview:
        """The next *size* bytes; MQTTError(0x81) if fewer are left."""
        if size > self.left:
            raise self.fail(MALFORMED, field, f"truncated: needs {size} bytes, {self.left} left")
        start = self._pos
        self._pos += size
        return self._data[start:self._pos]

    def byte(self, field: str) -> int:
        """A one-byte integer."""
        return self.take(1, field)[0]

    def two(self, field: str) -> int:
        """A Two Byte Integer, big-endian (1.5.2)."""
        view = self.take(2, field)
        return view[0] << 8 | view[1]

    def four(self, field: str) -> int:
        """A Four Byte Integer, big-endian (1.5.3 in 5.0)."""
        return int.from_bytes(self.take(4, field), "big")

    def varint(self, field: str) -> int:
        """A Variable Byte Integer: at most four bytes, the fewest needed (MQTT-1.5.5-1)."""
        start = self.offset
        value = 0
        for index in range(4):
            byte = self.byte(field)
            value |= (byte & 0x7F) << (7 * index)
            if not byte & 0x80:
                if byte == 0 and index > 0:
                    raise self.fail(MALFORMED, field, "variable byte integer not in its fewest bytes (MQTT-1.5.5-1)",
                                    at=start)
                return value
        raise self.fail(MALFORMED, field, "variable byte integer longer than 4 bytes", at=start)

    def utf8(self, field: str) -> str:
        """A UTF-8 Encoded String: well-formed (MQTT-1.5.4-1), no U+0000 (MQTT-1.5.4-2).

        A BOM (EF BB BF) is kept as U+FEFF wherever it is (MQTT-1.5.4-3).
        """
        size = self.two(field)
        start = self.offset
        raw = self.take(size, field)
        try:
            text = str(raw, "utf-8")
        except UnicodeDecodeError as error:
            raise self.fail(MALFORMED, field, "ill-formed UTF-8 (MQTT-1.5.4-1)", at=start + error.start) from None
        if "\x00" in text:
            raise self.fail(MALFORMED, field, "holds U+0000 (MQTT-1.5.4-2)", at=start + bytes(raw).index(0))
        return text

    def binary(self, field: str) -> bytes:
        """Binary Data: a two-byte length and that many bytes."""
        return bytes(self.take(self.two(field), field))

    def pair(self, field: str) -> tuple[str, str]:
        """A UTF-8 String Pair (MQTT-1.5.7-1)."""
        return self.utf8(field + " name"), self.utf8(field + " value")

    def rest(self) -> bytes:
        """Every byte left."""
        return bytes(self.take(self.left, "payload"))

    def sub(self, size: int, field: str) -> Cursor:
        """A cursor over the next *size* bytes (which this one skips), sharing the buffer."""
        start = self._pos
        self.take(size, field)
        inner = Cursor.__new__(Cursor)
        inner._data = self._data
        inner._pos = start
        inner._end = start + size
        inner._base = self._base
        inner.packet = self.packet
        return inner

    def done(self) -> None:
        """MQTTError(0x81) unless every byte was read: the remaining length must match the fields."""
        if self.left:
            raise self.fail(MALFORMED, "remaining length", f"{self.left} bytes after the last field")


def put_byte(out: bytearray, value: int, field: str) -> None:
    """Append a one-byte integer; ValueError outside 0-255."""
    _check_range(value, 0xFF, field)
    out.append(value)


def put_two(out: bytearray, value: int, field: str) -> None:
    """Append a Two Byte Integer; ValueError outside 0-65535."""
    _check_range(value, 0xFFFF, field)
    out += value.to_bytes(2, "big")


def put_four(out: bytearray, value: int, field: str) -> None:
    """Append a Four Byte Integer; ValueError outside 0-4294967295."""
    _check_range(value, 0xFFFF_FFFF, field)
    out += value.to_bytes(4, "big")


def varint_bytes(value: int, field: str = "variable byte integer") -> bytes:
    """The Variable Byte Integer encoding of *value*, in its fewest bytes (MQTT-1.5.5-1)."""
    _check_range(value, MAX_VARIABLE_BYTE_INT, field)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def put_utf8(out: bytearray, text: str, field: str) -> None:
    """Append a UTF-8 Encoded String; ValueError if *text* cannot be one (see names.string_problem)."""
    if not isinstance(text, str):
        raise ValueError(f"{field} must be a str, not {type(text).__name__}")
    problem = string_problem(text)
    if problem is not None:
        raise ValueError(f"{field} {problem}")
    raw = text.encode("utf-8")
    out += len(raw).to_bytes(2, "big")
    out += raw


def put_binary(out: bytearray, data: bytes, field: str) -> None:
    """Append Binary Data; ValueError over 65,535 bytes."""
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise ValueError(f"{field} must be bytes, not {type(data).__name__}")
    if len(data) > 0xFFFF:
        raise ValueError(f"{field} is {len(data)} bytes, over 65535")
    out += len(data).to_bytes(2, "big")
    out += data


def _check_range(value: int, top: int, field: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
        raise ValueError(f"{field} must be an int in 0-{top}, not {value!r}")


class WireType(enum.Enum):
    """How a property's value is encoded (5.0 section 2.2.2.2)."""

    BYTE = "Byte"
    TWO_BYTE_INT = "Two Byte Integer"
    FOUR_BYTE_INT = "Four Byte Integer"
    VARIABLE_BYTE_INT = "Variable Byte Integer"
    UTF8_STRING = "UTF-8 Encoded String"
    BINARY_DATA = "Binary Data"
    UTF8_STRING_PAIR = "UTF-8 String Pair"


@dataclass(frozen=True)
class PropertySpec:
    """One row of the property table: where the property may go and how it is encoded.

    ``attribute`` names its :class:`Properties` field; ``in_will`` says it
    may be a will property (CONNECT payload); ``repeatable_in`` lists the
    packet types where it may occur more than once.
    """

    identifier: int
    name: str
    attribute: str
    wire: WireType
    packets: frozenset[PacketType]
    in_will: bool = False
    repeatable_in: frozenset[PacketType] = frozenset()


_P = PacketType
_W = WireType
_ACKS = frozenset({_P.PUBACK, _P.PUBREC, _P.PUBREL, _P.PUBCOMP})
_WITH_PROPERTIES = frozenset(_P) - {_P.PINGREQ, _P.PINGRESP}

PROPERTIES: Final[tuple[PropertySpec, ...]] = (
    PropertySpec(0x01, "Payload Format Indicator", "payload_format_indicator", _W.BYTE, frozenset({_P.PUBLISH}), True),
    PropertySpec(0x02, "Message Expiry Interval", "message_expiry_interval", _W.FOUR_BYTE_INT,
                 frozenset({_P.PUBLISH}), True),
    PropertySpec(0x03, "Content Type", "content_type", _W.UTF8_STRING, frozenset({_P.PUBLISH}), True),
    PropertySpec(0x08, "Response Topic", "response_topic", _W.UTF8_STRING, frozenset({_P.PUBLISH}), True),
    PropertySpec(0x09, "Correlation Data", "correlation_data", _W.BINARY_DATA, frozenset({_P.PUBLISH}), True),
    PropertySpec(0x0B, "Subscription Identifier", "subscription_identifiers", _W.VARIABLE_BYTE_INT,
                 frozenset({_P.PUBLISH, _P.SUBSCRIBE}), repeatable_in=frozenset({_P.PUBLISH})),
    PropertySpec(0x11, "Session Expiry Interval", "session_expiry_interval", _W.FOUR_BYTE_INT,
                 frozenset({_P.CONNECT, _P.CONNACK, _P.DISCONNECT})),
    PropertySpec(0x12, "Assigned Client Identifier", "assigned_client_identifier", _W.UTF8_STRING,
                 frozenset({_P.CONNACK})),
    PropertySpec(0x13, "Server Keep Alive", "server_keep_alive", _W.TWO_BYTE_INT, frozenset({_P.CONNACK})),
    PropertySpec(0x15, "Authentication Method", "authentication_method", _W.UTF8_STRING,
                 frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH})),
    PropertySpec(0x16, "Authentication Data", "authentication_data", _W.BINARY_DATA,
                 frozenset({_P.CONNECT, _P.CONNACK, _P.AUTH})),
    PropertySpec(0x17, "Request Problem Information", "request_problem_information", _W.BYTE,
                 frozenset({_P.CONNECT})),
    PropertySpec(0x18, "Will Delay Interval", "will_delay_interval", _W.FOUR_BYTE_INT, frozenset(), True),
    PropertySpec(0x19, "Request Response Information", "request_response_information", _W.BYTE,
                 frozenset({_P.CONNECT})),
    PropertySpec(0x1A, "Response Information", "response_information", _W.UTF8_STRING, frozenset({_P.CONNACK})),
    PropertySpec(0x1C, "Server Reference", "server_reference", _W.UTF8_STRING,
                 frozenset({_P.CONNACK, _P.DISCONNECT})),
    PropertySpec(0x1F, "Reason String", "reason_string", _W.UTF8_STRING,
                 _ACKS | {_P.CONNACK, _P.SUBACK, _P.UNSUBACK, _P.DISCONNECT, _P.AUTH}),
    PropertySpec(0x21, "Receive Maximum", "receive_maximum", _W.TWO_BYTE_INT, frozenset({_P.CONNECT, _P.CONNACK})),
    PropertySpec(0x22, "Topic Alias Maximum", "topic_alias_maximum", _W.TWO_BYTE_INT,
                 frozenset({_P.CONNECT, _P.CONNACK})),
    PropertySpec(0x23, "Topic Alias", "topic_alias", _W.TWO_BYTE_INT, frozenset({_P.PUBLISH})),
    PropertySpec(0x24, "Maximum QoS", "maximum_qos", _W.BYTE, frozenset({_P.CONNACK})),
    PropertySpec(0x25, "Retain Available", "retain_available", _W.BYTE, frozenset({_P.CONNACK})),
    PropertySpec(0x26, "User Property", "user_properties", _W.UTF8_STRING_PAIR, _WITH_PROPERTIES, True,
                 repeatable_in=_WITH_PROPERTIES),
    PropertySpec(0x27, "Maximum Packet Size", "maximum_packet_size", _W.FOUR_BYTE_INT,
                 frozenset({_P.CONNECT, _P.CONNACK})),
    PropertySpec(0x28, "Wildcard Subscription Available", "wildcard_subscription_available", _W.BYTE,
                 frozenset({_P.CONNACK})),
    PropertySpec(0x29, "Subscription Identifier Available", "subscription_identifier_available", _W.BYTE,
                 frozenset({_P.CONNACK})),
    PropertySpec(0x2A, "Shared Subscription Available", "shared_subscription_available", _W.BYTE,
                 frozenset({_P.CONNACK})),
)
BY_IDENTIFIER: Final[dict[int, PropertySpec]] = {spec.identifier: spec for spec in PROPERTIES}
_BY_ATTRIBUTE: Final[dict[str, PropertySpec]] = {spec.attribute: spec for spec in PROPERTIES}
#: the tuple-valued attributes: every occurrence is kept, in order
_MULTI: Final = frozenset({"user_properties", "subscription_identifiers"})
#: properties whose value must be 0 or 1 ("It is a Protocol Error ... to have a value other than 0 or 1")
_ZERO_OR_ONE: Final = frozenset({0x01, 0x17, 0x19, 0x24, 0x25, 0x28, 0x29, 0x2A})
#: properties for which 0 is a Protocol Error (Subscription Identifier, Receive Maximum, Topic Alias
#: (MQTT-3.3.2-8), Maximum Packet Size)
_NONZERO: Final = frozenset({0x0B, 0x21, 0x23, 0x27})


@dataclass(frozen=True, repr=False)
class Properties:
    """The properties of one MQTT 5 packet or will; None (or ``()``) when absent."""

    payload_format_indicator: int | None = None
    message_expiry_interval: int | None = None
    content_type: str | None = None
    response_topic: str | None = None
    correlation_data: bytes | None = None
    subscription_identifiers: tuple[int, ...] = ()
    session_expiry_interval: int | None = None
    assigned_client_identifier: str | None = None
    server_keep_alive: int | None = None
    authentication_method: str | None = None
    authentication_data: bytes | None = None
    request_problem_information: int | None = None
    will_delay_interval: int | None = None
    request_response_information: int | None = None
    response_information: str | None = None
    server_reference: str | None = None
    reason_string: str | None = None
    receive_maximum: int | None = None
    topic_alias_maximum: int | None = None
    topic_alias: int | None = None
    maximum_qos: int | None = None
    retain_available: int | None = None
    user_properties: tuple[tuple[str, str], ...] = ()
    maximum_packet_size: int | None = None
    wildcard_subscription_available: int | None = None
    subscription_identifier_available: int | None = None
    shared_subscription_available: int | None = None

    def __repr__(self) -> str:
        shown = (f"{field.name}={getattr(self, field.name)!r}" for field in fields(self)
                 if getattr(self, field.name) not in (None, ()))
        return f"Properties({', '.join(shown)})"

    @property
    def is_empty(self) -> bool:
        """Whether no property is set (what MQTT 3.1.1 packets always have)."""
        return self == EMPTY

    def present(self) -> Iterator[tuple[PropertySpec, Any]]:
        """``(spec, value)`` for every property set, in table order; tuples come out element by element."""
        for field in fields(self):
            value = getattr(self, field.name)
            spec = _BY_ATTRIBUTE[field.name]
            if field.name in _MULTI:
                for item in value:
                    yield spec, item
            elif value is not None:
                yield spec, value


EMPTY: Final = Properties()


def _value_problem(spec: PropertySpec, value: Any) -> str | None:
    """What the specification forbids about this value of *spec*, or None."""
    if spec.identifier in _ZERO_OR_ONE and value not in (0, 1):
        return f"must be 0 or 1, not {value}"
    if spec.identifier in _NONZERO and value == 0:
        return "must not be 0"
    if spec.identifier == 0x08:
        problem = topic_name_problem(value)
        if problem is not None:
            return f"is not a topic name (MQTT-3.3.2-14): it {problem}"
    return None


def _may_repeat(spec: PropertySpec, packet: PacketType, will: bool) -> bool:
    # the only will property that may repeat is User Property (a Subscription Identifier is no will property)
    return spec.attribute in _MULTI if will else packet in spec.repeatable_in


def _where(packet: PacketType, will: bool) -> str:
    return "will properties" if will else packet.name


def decode_properties(cursor: Cursor, packet: PacketType, *, will: bool = False) -> Properties:
    """Read a property block (its Variable Byte Integer length, then the properties).

    Raises MQTTError: 0x81 for an unknown identifier or a value that
    overruns the block; 0x82 for a property not allowed in *packet* (or in
    a will, when *will*), a property repeated where it may not be, or a
    forbidden value.
    """
    block = cursor.sub(cursor.varint("property length"), "properties")
    values: dict[str, Any] = {}
    multi: dict[str, list[Any]] = {"user_properties": [], "subscription_identifiers": []}
    while block.left:
        start = block.offset
        identifier = block.varint("property identifier")
        spec = BY_IDENTIFIER.get(identifier)
        if spec is None:
            raise block.fail(MALFORMED, "property identifier", f"unknown property 0x{identifier:02X}", at=start)
        allowed = spec.in_will if will else packet in spec.packets
        if not allowed:
            raise block.fail(PROTOCOL_ERROR, spec.name, f"not allowed in {_where(packet, will)}", at=start)
        value = _read_value(block, spec)
        problem = _value_problem(spec, value)
        if problem is not None:
            raise block.fail(PROTOCOL_ERROR, spec.name, problem, at=start)
        if spec.attribute in multi:
            seen = multi[spec.attribute]
            if seen and not _may_repeat(spec, packet, will):
                raise block.fail(PROTOCOL_ERROR, spec.name, f"given twice in {_where(packet, will)}", at=start)
            seen.append(value)
        elif spec.attribute in values:
            raise block.fail(PROTOCOL_ERROR, spec.name, "given twice", at=start)
        else:
            values[spec.attribute] = value
    for attribute, items in multi.items():
        if items:
            values[attribute] = tuple(items)
    if not values:
        return EMPTY  # the common case, one object: callers may test ``is EMPTY``
    properties = Properties(**values)
    if properties.authentication_data is not None and properties.authentication_method is None:
        raise cursor.fail(PROTOCOL_ERROR, "Authentication Data", "given without an Authentication Method")
    return properties


def _read_value(block: Cursor, spec: PropertySpec) -> Any:
    wire = spec.wire
    if wire is WireType.BYTE:
        return block.byte(spec.name)
    if wire is WireType.TWO_BYTE_INT:
        return block.two(spec.name)
    if wire is WireType.FOUR_BYTE_INT:
        return block.four(spec.name)
    if wire is WireType.VARIABLE_BYTE_INT:
        return block.varint(spec.name)
    if wire is WireType.UTF8_STRING:
        return block.utf8(spec.name)
    if wire is WireType.BINARY_DATA:
        return block.binary(spec.name)
    return block.pair(spec.name)


def encode_properties(properties: Properties, packet: PacketType, *, will: bool = False) -> bytes:
    """The property block (length prefix included) that :func:`decode_properties` reads back.

    ValueError for a property not allowed in *packet* (or a will), one
    given more often than allowed, or a value it would refuse.
    """
    body = bytearray()
    counts: dict[int, int] = {}
    for spec, value in properties.present():
        allowed = spec.in_will if will else packet in spec.packets
        if not allowed:
            raise ValueError(f"{spec.name} is not allowed in {_where(packet, will)}")
        counts[spec.identifier] = counts.get(spec.identifier, 0) + 1
        if counts[spec.identifier] > 1 and not _may_repeat(spec, packet, will):
            raise ValueError(f"{spec.name} may be given once in {_where(packet, will)}")
        _write_value(body, spec, value)
        problem = _value_problem(spec, value)
        if problem is not None:
            raise ValueError(f"{spec.name} {problem}")
    if properties.authentication_data is not None and properties.authentication_method is None:
        raise ValueError("Authentication Data needs an Authentication Method")
    return varint_bytes(len(body), "property length") + bytes(body)


def _write_value(out: bytearray, spec: PropertySpec, value: Any) -> None:
    out += varint_bytes(spec.identifier)
    wire = spec.wire
    if wire is WireType.BYTE:
        put_byte(out, value, spec.name)
    elif wire is WireType.TWO_BYTE_INT:
        put_two(out, value, spec.name)
    elif wire is WireType.FOUR_BYTE_INT:
        put_four(out, value, spec.name)
    elif wire is WireType.VARIABLE_BYTE_INT:
        out += varint_bytes(value, spec.name)
    elif wire is WireType.UTF8_STRING:
        put_utf8(out, value, spec.name)
    elif wire is WireType.BINARY_DATA:
        put_binary(out, value, spec.name)
    else:
        name, text = value
        put_utf8(out, name, spec.name + " name")
        put_utf8(out, text, spec.name + " value")
