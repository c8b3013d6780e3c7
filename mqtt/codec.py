"""MQTT 3.1.1 and 5.0 control packets, sans I/O: frozen values, one encoder, one decoder.

A *version* is a protocol level: 4 is MQTT 3.1.1 (OASIS 2014), 5 is MQTT 5.0
(OASIS 2019). Each of the fifteen packet types is a frozen dataclass
(:class:`Connect` ... :class:`Auth`); :data:`Packet` is their union.

Decoding: a :class:`Reader` takes the bytes of one connection as they
arrive (:meth:`Reader.feed`) and returns every packet they complete,
keeping at most one partial packet. Its version starts unknown: the first
packet must then be a CONNECT (MQTT-3.1.0-1), whose protocol level sets it;
a second CONNECT is a Protocol Error (MQTT-3.1.0-2). A client-side reader
sets ``version`` itself. :func:`decode` reads one whole packet from bytes.

Every way the bytes can break the protocol raises :class:`MQTTError` (never
IndexError, UnicodeDecodeError and the like; defined in mqtt.properties, the
layer all decoding shares, and exported here): ``reason_code`` is the MQTT 5
reason code to close with and the message names the packet type, the field
and its byte offset from the start of the packet. The code follows 5.0's
definitions (section 1.2) and says the specification's own word where it has
one: 0x81 Malformed Packet for what cannot be parsed (reserved flags, lengths
that do not add up, ill-formed UTF-8, topic syntax), 0x82 Protocol Error for
a parsed value the protocol forbids (packet identifier 0, an empty SUBSCRIBE
or UNSUBSCRIBE, a property or reason code not allowed there, a second
CONNECT), 0x84 Unsupported Protocol Version with the requested
``protocol_level``, 0x95 Packet too large. The docstrings of the
``_decode_*`` functions name the normative statements they enforce.

Encoding: :func:`encode` writes exactly what the decoder accepts, and
raises ValueError for a packet the version cannot carry (properties or a
reason code in MQTT 3.1.1, AUTH in 3.1.1) or that the decoder would refuse
(an invalid topic, packet identifier 0, ...). ``decode(encode(p, v), v) == p``
for every packet *p* that *encode* accepts.

What the codec does not check is session state (is this packet identifier
in use, is this Topic Alias known, may a client send this packet type):
that is the caller's. :func:`check_payload_format` is the optional 0x99 check.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final, TypeAlias

from mqtt.names import split_shared, topic_filter_problem, topic_name_problem
from mqtt.properties import (
    EMPTY,
    MALFORMED,
    MAX_VARIABLE_BYTE_INT,
    PROTOCOL_ERROR,
    Cursor,
    MQTTError,
    PacketType,
    Properties,
    ReasonCode,
    decode_properties,
    encode_properties,
    put_binary,
    put_byte,
    put_two,
    put_utf8,
    varint_bytes,
)

__all__ = [
    "MAX_PACKET_SIZE", "MQTT_3_1_1", "MQTT_5", "REASON_CODES", "Auth", "Connack", "Connect", "Disconnect", "MQTTError", "Packet",
    "PacketType", "Pingreq", "Pingresp", "Properties", "Puback", "Pubcomp", "Publish", "Pubrec", "Pubrel",
    "ReasonCode", "Reader", "Suback", "Subscribe", "SubscriptionOptions", "Unsuback", "Unsubscribe", "Will",
    "check_payload_format", "decode", "encode",
]

MQTT_3_1_1: Final = 4
MQTT_5: Final = 5
#: the largest packet MQTT can describe: a 1-byte type, 4 length bytes and 268,435,455 bytes
MAX_PACKET_SIZE: Final = 1 + 4 + MAX_VARIABLE_BYTE_INT
_T = PacketType


# -- packets -------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Will:
    """A CONNECT's will message; ``properties`` are will properties (MQTT 5 only)."""

    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Connect:
    """CONNECT (3.1). ``protocol_level`` is the version: 4 or 5; ``password`` is binary data."""

    packet_type: ClassVar[PacketType] = _T.CONNECT
    protocol_level: int
    client_id: str
    clean_start: bool = True
    keep_alive: int = 0
    username: str | None = None
    password: bytes | None = None
    will: Will | None = None
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Connack:
    """CONNACK (3.2); in MQTT 3.1.1 ``reason_code`` is the return code 0-5."""

    packet_type: ClassVar[PacketType] = _T.CONNACK
    session_present: bool = False
    reason_code: int = 0
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Publish:
    """PUBLISH (3.3). ``packet_id`` is None exactly when ``qos`` is 0.

    In MQTT 5 ``topic`` may be empty when ``properties.topic_alias`` names it.
    """

    packet_type: ClassVar[PacketType] = _T.PUBLISH
    topic: str
    payload: bytes = b""
    qos: int = 0
    retain: bool = False
    dup: bool = False
    packet_id: int | None = None
    properties: Properties = EMPTY


@dataclass(frozen=True)
class _PublishResponse:
    packet_type: ClassVar[PacketType]
    packet_id: int
    reason_code: int = 0
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Puback(_PublishResponse):
    """PUBACK (3.4); MQTT 3.1.1 has no reason code or properties (both must stay defaults)."""

    packet_type: ClassVar[PacketType] = _T.PUBACK


@dataclass(frozen=True)
class Pubrec(_PublishResponse):
    """PUBREC (3.5); as :class:`Puback`."""

    packet_type: ClassVar[PacketType] = _T.PUBREC


@dataclass(frozen=True)
class Pubrel(_PublishResponse):
    """PUBREL (3.6); as :class:`Puback`."""

    packet_type: ClassVar[PacketType] = _T.PUBREL


@dataclass(frozen=True)
class Pubcomp(_PublishResponse):
    """PUBCOMP (3.7); as :class:`Puback`."""

    packet_type: ClassVar[PacketType] = _T.PUBCOMP


@dataclass(frozen=True)
class SubscriptionOptions:
    """The options byte after a SUBSCRIBE topic filter; MQTT 3.1.1 has only ``qos``."""

    qos: int = 0
    no_local: bool = False
    retain_as_published: bool = False
    retain_handling: int = 0


@dataclass(frozen=True)
class Subscribe:
    """SUBSCRIBE (3.8): at least one ``(topic filter, options)`` pair."""

    packet_type: ClassVar[PacketType] = _T.SUBSCRIBE
    packet_id: int
    subscriptions: tuple[tuple[str, SubscriptionOptions], ...]
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Suback:
    """SUBACK (3.9): one reason (3.1.1: return) code per filter subscribed."""

    packet_type: ClassVar[PacketType] = _T.SUBACK
    packet_id: int
    reason_codes: tuple[int, ...]
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Unsubscribe:
    """UNSUBSCRIBE (3.10): at least one topic filter."""

    packet_type: ClassVar[PacketType] = _T.UNSUBSCRIBE
    packet_id: int
    filters: tuple[str, ...]
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Unsuback:
    """UNSUBACK (3.11): in MQTT 5 one reason code per filter; in 3.1.1 none."""

    packet_type: ClassVar[PacketType] = _T.UNSUBACK
    packet_id: int
    reason_codes: tuple[int, ...] = ()
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Pingreq:
    """PINGREQ (3.12)."""

    packet_type: ClassVar[PacketType] = _T.PINGREQ


@dataclass(frozen=True)
class Pingresp:
    """PINGRESP (3.13)."""

    packet_type: ClassVar[PacketType] = _T.PINGRESP


@dataclass(frozen=True)
class Disconnect:
    """DISCONNECT (3.14); MQTT 3.1.1 has no reason code or properties."""

    packet_type: ClassVar[PacketType] = _T.DISCONNECT
    reason_code: int = 0
    properties: Properties = EMPTY


@dataclass(frozen=True)
class Auth:
    """AUTH (3.15), MQTT 5 only."""

    packet_type: ClassVar[PacketType] = _T.AUTH
    reason_code: int = 0
    properties: Properties = EMPTY


Packet: TypeAlias = (Connect | Connack | Publish | Puback | Pubrec | Pubrel | Pubcomp | Subscribe | Suback
                     | Unsubscribe | Unsuback | Pingreq | Pingresp | Disconnect | Auth)


# -- rules shared by the decoder and the encoder ---------------------------------------------------------------------

#: The MQTT 5 reason codes each packet type may carry (tables 3-1, 3-4 ... 3-13 of 5.0).
REASON_CODES: Final[Mapping[PacketType, frozenset[int]]] = {
    _T.CONNACK: frozenset({0x00, 0x80, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89, 0x8A, 0x8C, 0x90,
                           0x95, 0x97, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9F}),
    _T.PUBACK: frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),
    _T.PUBREC: frozenset({0x00, 0x10, 0x80, 0x83, 0x87, 0x90, 0x91, 0x97, 0x99}),
    _T.PUBREL: frozenset({0x00, 0x92}),
    _T.PUBCOMP: frozenset({0x00, 0x92}),
    _T.SUBACK: frozenset({0x00, 0x01, 0x02, 0x80, 0x83, 0x87, 0x8F, 0x91, 0x97, 0x9E, 0xA1, 0xA2}),
    _T.UNSUBACK: frozenset({0x00, 0x11, 0x80, 0x83, 0x87, 0x8F, 0x91}),
    _T.DISCONNECT: frozenset({0x00, 0x04, 0x80, 0x81, 0x82, 0x83, 0x87, 0x89, 0x8B, 0x8D, 0x8E, 0x8F, 0x90, 0x93,
                              0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9A, 0x9B, 0x9C, 0x9D, 0x9E, 0x9F, 0xA0, 0xA1,
                              0xA2}),
    _T.AUTH: frozenset({0x00, 0x18, 0x19}),
}
_REASON_STATEMENTS: Final = {
    _T.CONNACK: "MQTT-3.2.2-8", _T.PUBACK: "MQTT-3.4.2-1", _T.PUBREC: "MQTT-3.5.2-1", _T.PUBREL: "MQTT-3.6.2-1",
    _T.PUBCOMP: "MQTT-3.7.2-1", _T.SUBACK: "MQTT-3.9.3-2", _T.UNSUBACK: "MQTT-3.11.3-2",
    _T.DISCONNECT: "MQTT-3.14.2-1", _T.AUTH: "MQTT-3.15.2-1",
}
#: MQTT 3.1.1: CONNACK return codes 0-5 (3.2.2.3), SUBACK return codes (MQTT-3.9.3-2)
_V311_CODES: Final = {_T.CONNACK: frozenset(range(6)), _T.SUBACK: frozenset({0x00, 0x01, 0x02, 0x80})}

#: what a rule found wrong: the reason code to close with, and why
_Problem: TypeAlias = tuple[int, str]


def _reason_problem(packet_type: PacketType, code: int, version: int) -> _Problem | None:
    if version == MQTT_3_1_1:
        if code in _V311_CODES.get(packet_type, frozenset({0})):
            return None
        return PROTOCOL_ERROR, f"0x{code:02X} is not an MQTT 3.1.1 {packet_type.name} code"
    if code in REASON_CODES[packet_type]:
        return None
    return PROTOCOL_ERROR, f"0x{code:02X} is not a {packet_type.name} reason code ({_REASON_STATEMENTS[packet_type]})"


def _packet_id_problem(packet_id: int) -> _Problem | None:
    if isinstance(packet_id, int) and 1 <= packet_id <= 0xFFFF:
        return None
    return PROTOCOL_ERROR, f"{packet_id!r} is not a packet identifier 1-65535 (MQTT-2.3.1-1, MQTT-2.2.1-3)"


def _topic_problem(topic: str, properties: Properties, version: int) -> _Problem | None:
    if version == MQTT_5 and topic == "":
        if properties.topic_alias is not None:
            return None
        return PROTOCOL_ERROR, "is empty and there is no Topic Alias (3.3.2.1)"
    problem = topic_name_problem(topic)
    return None if problem is None else (MALFORMED, problem)


def _subscription_problem(topic_filter: str, options: SubscriptionOptions, version: int) -> _Problem | None:
    if options.qos not in (0, 1, 2):
        if version == MQTT_3_1_1:
            return MALFORMED, f"requested QoS {options.qos} (MQTT-3.8.3-4)"
        return PROTOCOL_ERROR, f"Maximum QoS {options.qos} (3.8.3.1)"
    if version == MQTT_3_1_1 and (options.no_local or options.retain_as_published or options.retain_handling):
        return MALFORMED, "MQTT 3.1.1 subscription options hold only a QoS (MQTT-3.8.3-4)"
    if options.retain_handling not in (0, 1, 2):
        return PROTOCOL_ERROR, f"Retain Handling {options.retain_handling} (3.8.3.1)"
    problem = topic_filter_problem(topic_filter, shared=version == MQTT_5)
    if problem is not None:
        return MALFORMED, problem
    if version == MQTT_5 and options.no_local and split_shared(topic_filter) is not None:
        return PROTOCOL_ERROR, "No Local on a shared subscription (MQTT-3.8.3-4)"
    return None


def _filter_problem(topic_filter: str, version: int) -> _Problem | None:
    problem = topic_filter_problem(topic_filter, shared=version == MQTT_5)
    return None if problem is None else (MALFORMED, problem)


def _raise(cursor: Cursor, problem: _Problem | None, field: str, at: int) -> None:
    if problem is not None:
        raise cursor.fail(problem[0], field, problem[1], at=at)


def _refuse(problem: _Problem | None, field: str) -> None:
    if problem is not None:
        raise ValueError(f"{field} {problem[1]}")


def check_payload_format(payload: bytes, properties: Properties) -> None:
    """MQTTError(0x99 Payload format invalid) if the payload claims UTF-8 and is not.

    A receiver MAY make this check (5.0 3.3.2.3.2); a server answers a
    QoS 1/2 PUBLISH that fails it with a PUBACK/PUBREC of 0x99, a CONNECT
    whose will fails it with a CONNACK of 0x99.
    """
    if properties.payload_format_indicator == 1:
        try:
            payload.decode("utf-8")
        except UnicodeDecodeError as error:
            raise MQTTError(ReasonCode.PAYLOAD_FORMAT_INVALID,
                            f"payload: Payload Format Indicator is 1 but byte {error.start} is not UTF-8") from None


# -- decoding --------------------------------------------------------------------------------------------------------

#: the fixed header flags of every packet type but PUBLISH, and the statement that fixes them
_FLAGS: Final = {_T.PUBREL: 0b0010, _T.SUBSCRIBE: 0b0010, _T.UNSUBSCRIBE: 0b0010}
_FLAG_STATEMENTS: Final = {_T.PUBREL: "MQTT-3.6.1-1", _T.SUBSCRIBE: "MQTT-3.8.1-1", _T.UNSUBSCRIBE: "MQTT-3.10.1-1",
                           _T.DISCONNECT: "MQTT-3.14.1-1", _T.AUTH: "MQTT-3.15.1-1"}


def _header_error(reason_code: int, packet: str, field: str, at: int, what: str) -> MQTTError:
    return MQTTError(reason_code, f"{packet}: {field} at byte {at}: {what}")


def _check_first_byte(first: int, version: int | None) -> None:
    """The packet type and flags of the fixed header's first byte.

    Type 0 (and 15 in 3.1.1) is reserved; before the version is known only
    CONNECT may come (MQTT-3.1.0-1). Reserved flags must be as listed
    (MQTT-2.2.2-1/-2 in 3.1.1, MQTT-2.1.3-1 in 5.0; SUBSCRIBE MQTT-3.8.1-1,
    UNSUBSCRIBE MQTT-3.10.1-1, PUBREL MQTT-3.6.1-1, DISCONNECT MQTT-3.14.1-1,
    AUTH MQTT-3.15.1-1). A PUBLISH may not have QoS 3 (MQTT-3.3.1-4) nor DUP
    with QoS 0 (MQTT-3.3.1-2).
    """
    kind, flags = first >> 4, first & 0x0F
    if kind == 0 or (kind == _T.AUTH and version == MQTT_3_1_1):
        raise _header_error(MALFORMED, f"packet type {kind}", "packet type", 0, "reserved")
    packet_type = PacketType(kind)
    name = packet_type.name
    if version is None and packet_type is not _T.CONNECT:
        raise _header_error(PROTOCOL_ERROR, name, "packet type", 0, "the first packet must be CONNECT (MQTT-3.1.0-1)")
    if packet_type is _T.PUBLISH:
        qos = flags >> 1 & 0b11
        if qos == 3:
            raise _header_error(MALFORMED, name, "QoS flags", 0, "QoS 3 (MQTT-3.3.1-4)")
        if qos == 0 and flags & 0b1000:
            raise _header_error(MALFORMED, name, "DUP flag", 0, "DUP set on a QoS 0 message (MQTT-3.3.1-2)")
        return
    expected = _FLAGS.get(packet_type, 0)
    if flags != expected:
        generic = {None: "MQTT-2.2.2-1, MQTT-2.1.3-1", MQTT_3_1_1: "MQTT-2.2.2-1"}.get(version, "MQTT-2.1.3-1")
        statement = _FLAG_STATEMENTS.get(packet_type, generic)
        raise _header_error(MALFORMED, name, "fixed header flags", 0,
                            f"{flags:04b}, reserved bits must be {expected:04b} ({statement})")


def _fixed_header(head: bytes | memoryview, version: int | None, max_packet_size: int) -> tuple[int, int, int] | None:
    """``(first byte, remaining length, header length)`` of the packet *head* starts, None if incomplete.

    Checks the first byte as soon as it is there and the size as soon as
    the remaining length is: MQTTError(0x81) for a remaining length over
    four bytes or not in its fewest (MQTT-1.5.5-1), 0x95 for a packet whose
    total size would exceed *max_packet_size*.
    """
    if not head:
        return None
    first = head[0]
    _check_first_byte(first, version)
    name = PacketType(first >> 4).name
    value = 0
    for index in range(1, min(len(head), 5)):
        byte = head[index]
        value |= (byte & 0x7F) << (7 * (index - 1))
        if byte & 0x80:
            if index == 4:
                raise _header_error(MALFORMED, name, "remaining length", 1, "longer than 4 bytes")
            continue
        if byte == 0 and index > 1:
            raise _header_error(MALFORMED, name, "remaining length", 1, "not in its fewest bytes (MQTT-1.5.5-1)")
        size = index + 1 + value
        if size > max_packet_size:
            raise _header_error(ReasonCode.PACKET_TOO_LARGE, name, "remaining length", 1,
                                f"announces a {size}-byte packet, over the maximum of {max_packet_size}")
        return first, value, index + 1
    return None


def _decode_body(first: int, body: bytes | memoryview, version: int | None, header_length: int) -> Packet:
    packet_type = PacketType(first >> 4)
    cursor = Cursor(body, packet_type.name, header_length)
    if packet_type is _T.CONNECT:
        packet: Packet = _decode_connect(cursor)
    elif version is None:
        raise cursor.fail(PROTOCOL_ERROR, "packet type", "the first packet must be CONNECT (MQTT-3.1.0-1)", at=0)
    else:
        packet = _DECODERS[packet_type](cursor, first, version)
    cursor.done()
    return packet


def _decode_connect(cursor: Cursor) -> Connect:
    """CONNECT: protocol name "MQTT" (MQTT-3.1.2-1) and level 4 or 5 (else 0x84, MQTT-3.1.2-2).

    The reserved flag is 0 (MQTT-3.1.2-3). Without the will flag, will QoS
    and will retain are 0 (3.1.1: MQTT-3.1.2-11/-13/-15; 5.0: MQTT-3.1.2-11/-13);
    a will QoS is never 3 (3.1.1: MQTT-3.1.2-14; 5.0: MQTT-3.1.2-12). In
    3.1.1 a password needs a user name (MQTT-3.1.2-22). Fields present
    exactly as the flags say (3.1.1: MQTT-3.1.2-9, -18 ... -21); the will
    topic is a topic name.
    """
    name_at = cursor.offset
    name = cursor.utf8("protocol name")
    level_at = cursor.offset
    level = cursor.byte("protocol level")
    if name != "MQTT" or level not in (MQTT_3_1_1, MQTT_5):
        if name == "MQTT" or (name == "MQIsdp" and level == 3):
            error = cursor.fail(ReasonCode.UNSUPPORTED_PROTOCOL_VERSION, "protocol level",
                                f"level {level} ({name!r}) is not supported (MQTT-3.1.2-2)", at=level_at)
            error.protocol_level = level
            raise error
        raise cursor.fail(MALFORMED, "protocol name", f"{name!r} is not 'MQTT' (MQTT-3.1.2-1)", at=name_at)
    v311 = level == MQTT_3_1_1
    flags_at = cursor.offset
    flags = cursor.byte("connect flags")
    if flags & 0x01:
        raise cursor.fail(MALFORMED, "connect flags", "reserved bit 0 is set (MQTT-3.1.2-3)", at=flags_at)
    will_flag, will_qos, will_retain = flags & 0x04, flags >> 3 & 0b11, flags & 0x20
    if not will_flag and will_qos:
        statement = "MQTT-3.1.2-13" if v311 else "MQTT-3.1.2-11"
        raise cursor.fail(MALFORMED, "connect flags", f"will QoS {will_qos} without the will flag ({statement})",
                          at=flags_at)
    if not will_flag and will_retain:
        statement = "MQTT-3.1.2-15" if v311 else "MQTT-3.1.2-13"
        raise cursor.fail(MALFORMED, "connect flags", f"will retain without the will flag ({statement})", at=flags_at)
    if will_qos == 3:
        statement = "MQTT-3.1.2-14" if v311 else "MQTT-3.1.2-12"
        raise cursor.fail(MALFORMED, "connect flags", f"will QoS 3 ({statement})", at=flags_at)
    if v311 and flags & 0x40 and not flags & 0x80:
        raise cursor.fail(MALFORMED, "connect flags", "password flag without user name flag (MQTT-3.1.2-22)",
                          at=flags_at)
    keep_alive = cursor.two("keep alive")
    properties = EMPTY if v311 else decode_properties(cursor, _T.CONNECT)
    client_id = cursor.utf8("client identifier")
    will = None
    if will_flag:
        will_properties = EMPTY if v311 else decode_properties(cursor, _T.CONNECT, will=True)
        topic_at = cursor.offset
        topic = cursor.utf8("will topic")
        problem = topic_name_problem(topic)
        _raise(cursor, None if problem is None else (MALFORMED, problem), "will topic", topic_at)
        payload = cursor.binary("will payload")
        will = Will(topic, payload, will_qos, bool(will_retain), will_properties)
    username = cursor.utf8("user name") if flags & 0x80 else None
    password = cursor.binary("password") if flags & 0x40 else None
    return Connect(level, client_id, bool(flags & 0x02), keep_alive, username, password, will, properties)


def _decode_connack(cursor: Cursor, first: int, version: int) -> Connack:
    """CONNACK: acknowledge flags bits 7-1 are 0 (MQTT-3.2.2-1 in 5.0), a known code, no session with a failure
    (3.1.1: MQTT-3.2.2-4; 5.0: MQTT-3.2.2-6)."""
    ack_at = cursor.offset
    ack_flags = cursor.byte("acknowledge flags")
    if ack_flags & 0xFE:
        raise cursor.fail(MALFORMED, "acknowledge flags", f"reserved bits set: {ack_flags:08b} (MQTT-3.2.2-1)",
                          at=ack_at)
    code_at = cursor.offset
    code = cursor.byte("reason code")
    _raise(cursor, _reason_problem(_T.CONNACK, code, version), "reason code", code_at)
    if ack_flags and code:
        statement = "MQTT-3.2.2-4" if version == MQTT_3_1_1 else "MQTT-3.2.2-6"
        raise cursor.fail(PROTOCOL_ERROR, "acknowledge flags", f"session present with code 0x{code:02X} ({statement})",
                          at=ack_at)
    properties = EMPTY if version == MQTT_3_1_1 else decode_properties(cursor, _T.CONNACK)
    return Connack(bool(ack_flags), code, properties)


def _packet_id(cursor: Cursor) -> int:
    at = cursor.offset
    packet_id = cursor.two("packet identifier")
    _raise(cursor, _packet_id_problem(packet_id), "packet identifier", at)
    return packet_id


def _decode_publish(cursor: Cursor, first: int, version: int) -> Publish:
    """PUBLISH: a topic name without wildcards (MQTT-3.3.2-1, MQTT-3.3.2-2), non-empty unless an MQTT 5
    Topic Alias stands for it (MQTT-4.7.3-1); a non-zero packet identifier when QoS > 0 (MQTT-2.3.1-1)."""
    qos = first >> 1 & 0b11
    topic_at = cursor.offset
    topic = cursor.utf8("topic name")
    packet_id = _packet_id(cursor) if qos else None
    properties = EMPTY if version == MQTT_3_1_1 else decode_properties(cursor, _T.PUBLISH)
    _raise(cursor, _topic_problem(topic, properties, version), "topic name", topic_at)
    return Publish(topic, cursor.rest(), qos, bool(first & 0x01), bool(first & 0x08), packet_id, properties)


def _decode_response(cursor: Cursor, first: int, version: int) -> Puback | Pubrec | Pubrel | Pubcomp:
    """PUBACK, PUBREC, PUBREL, PUBCOMP: packet identifier; in MQTT 5 an optional reason code (one of the
    packet's, MQTT-3.4.2-1 ... MQTT-3.7.2-1) and optional properties."""
    kind = _RESPONSES[PacketType(first >> 4)]
    packet_id = _packet_id(cursor)
    if version == MQTT_3_1_1:
        return kind(packet_id)
    code, properties = _code_and_properties(cursor, kind.packet_type)
    return kind(packet_id, code, properties)


def _code_and_properties(cursor: Cursor, packet_type: PacketType) -> tuple[int, Properties]:
    code = 0
    if cursor.left:
        code_at = cursor.offset
        code = cursor.byte("reason code")
        _raise(cursor, _reason_problem(packet_type, code, MQTT_5), "reason code", code_at)
    properties = decode_properties(cursor, packet_type) if cursor.left else EMPTY
    return code, properties


def _decode_subscribe(cursor: Cursor, first: int, version: int) -> Subscribe:
    """SUBSCRIBE: at least one filter (3.1.1: MQTT-3.8.3-3; 5.0: MQTT-3.8.3-2), each valid (MQTT-3.8.3-1,
    MQTT-4.7.1-2, MQTT-4.7.1-3, shared MQTT-4.8.2-1/-2) with its options' reserved bits 0 (3.1.1:
    MQTT-3.8.3-4; 5.0: MQTT-3.8.3-5), no QoS 3, no Retain Handling 3, no No Local on a shared
    subscription (5.0: MQTT-3.8.3-4)."""
    packet_id = _packet_id(cursor)
    properties = EMPTY if version == MQTT_3_1_1 else decode_properties(cursor, _T.SUBSCRIBE)
    subscriptions = []
    while cursor.left:
        filter_at = cursor.offset
        topic_filter = cursor.utf8("topic filter")
        options_at = cursor.offset
        byte = cursor.byte("subscription options")
        reserved = 0xFC if version == MQTT_3_1_1 else 0xC0
        if byte & reserved:
            statement = "MQTT-3.8.3-4" if version == MQTT_3_1_1 else "MQTT-3.8.3-5"
            raise cursor.fail(MALFORMED, "subscription options", f"reserved bits set: {byte:08b} ({statement})",
                              at=options_at)
        options = SubscriptionOptions(byte & 0b11, bool(byte & 0x04), bool(byte & 0x08), byte >> 4 & 0b11)
        _raise(cursor, _subscription_problem(topic_filter, options, version), "topic filter", filter_at)
        subscriptions.append((topic_filter, options))
    if not subscriptions:
        statement = "MQTT-3.8.3-3" if version == MQTT_3_1_1 else "MQTT-3.8.3-2"
        raise cursor.fail(PROTOCOL_ERROR, "payload", f"no topic filter ({statement})")
    return Subscribe(packet_id, tuple(subscriptions), properties)


def _decode_suback(cursor: Cursor, first: int, version: int) -> Suback:
    """SUBACK: at least one code, each a SUBACK code (MQTT-3.9.3-2 in both versions)."""
    packet_id = _packet_id(cursor)
    properties = EMPTY if version == MQTT_3_1_1 else decode_properties(cursor, _T.SUBACK)
    return Suback(packet_id, _codes(cursor, _T.SUBACK, version), properties)


def _codes(cursor: Cursor, packet_type: PacketType, version: int) -> tuple[int, ...]:
    if not cursor.left:
        raise cursor.fail(PROTOCOL_ERROR, "payload", "no reason code")
    codes = []
    while cursor.left:
        at = cursor.offset
        code = cursor.byte("reason code")
        _raise(cursor, _reason_problem(packet_type, code, version), "reason code", at)
        codes.append(code)
    return tuple(codes)


def _decode_unsubscribe(cursor: Cursor, first: int, version: int) -> Unsubscribe:
    """UNSUBSCRIBE: at least one filter (MQTT-3.10.3-2), each a valid topic filter (MQTT-3.10.3-1)."""
    packet_id = _packet_id(cursor)
    properties = EMPTY if version == MQTT_3_1_1 else decode_properties(cursor, _T.UNSUBSCRIBE)
    filters = []
    while cursor.left:
        at = cursor.offset
        topic_filter = cursor.utf8("topic filter")
        _raise(cursor, _filter_problem(topic_filter, version), "topic filter", at)
        filters.append(topic_filter)
    if not filters:
        raise cursor.fail(PROTOCOL_ERROR, "payload", "no topic filter (MQTT-3.10.3-2)")
    return Unsubscribe(packet_id, tuple(filters), properties)


def _decode_unsuback(cursor: Cursor, first: int, version: int) -> Unsuback:
    """UNSUBACK: in 3.1.1 only the packet identifier; in 5.0 at least one UNSUBACK code (MQTT-3.11.3-2)."""
    packet_id = _packet_id(cursor)
    if version == MQTT_3_1_1:
        return Unsuback(packet_id)
    properties = decode_properties(cursor, _T.UNSUBACK)
    return Unsuback(packet_id, _codes(cursor, _T.UNSUBACK, version), properties)


def _decode_empty(cursor: Cursor, first: int, version: int) -> Pingreq | Pingresp:
    """PINGREQ and PINGRESP: no variable header or payload."""
    return Pingreq() if first >> 4 == _T.PINGREQ else Pingresp()


def _decode_disconnect(cursor: Cursor, first: int, version: int) -> Disconnect:
    """DISCONNECT: empty in 3.1.1; in 5.0 an optional reason code (MQTT-3.14.2-1) and properties."""
    if version == MQTT_3_1_1:
        return Disconnect()
    return Disconnect(*_code_and_properties(cursor, _T.DISCONNECT))


def _decode_auth(cursor: Cursor, first: int, version: int) -> Auth:
    """AUTH (5.0 only): an optional reason code (MQTT-3.15.2-1) and properties."""
    return Auth(*_code_and_properties(cursor, _T.AUTH))


_RESPONSES: Final[dict[PacketType, type[Puback] | type[Pubrec] | type[Pubrel] | type[Pubcomp]]] = {
    _T.PUBACK: Puback, _T.PUBREC: Pubrec, _T.PUBREL: Pubrel, _T.PUBCOMP: Pubcomp}
_DECODERS: Final[dict[PacketType, Callable[[Cursor, int, int], Packet]]] = {
    _T.CONNACK: _decode_connack, _T.PUBLISH: _decode_publish, _T.PUBACK: _decode_response,
    _T.PUBREC: _decode_response, _T.PUBREL: _decode_response, _T.PUBCOMP: _decode_response,
    _T.SUBSCRIBE: _decode_subscribe, _T.SUBACK: _decode_suback, _T.UNSUBSCRIBE: _decode_unsubscribe,
    _T.UNSUBACK: _decode_unsuback, _T.PINGREQ: _decode_empty, _T.PINGRESP: _decode_empty,
    _T.DISCONNECT: _decode_disconnect, _T.AUTH: _decode_auth,
}


def decode(data: bytes | bytearray | memoryview, version: int | None = None,
           max_packet_size: int = MAX_PACKET_SIZE) -> Packet:
    """The one packet *data* holds, exactly; MQTTError if it holds anything else.

    With *version* None only a CONNECT can be decoded (its own protocol
    level says how); otherwise *version* is 4 or 5.
    """
    view = memoryview(data)
    header = _fixed_header(view[:5], _checked_version(version), max_packet_size)
    if header is None:
        raise MQTTError(MALFORMED, f"truncated fixed header: {len(view)} bytes")
    first, remaining, header_length = header
    present = len(view) - header_length
    if present != remaining:
        name = PacketType(first >> 4).name
        what = "truncated" if present < remaining else "followed by more bytes"
        raise _header_error(MALFORMED, name, "remaining length", 1,
                            f"announces {remaining} bytes, {present} present: {what}")
    return _decode_body(first, view[header_length:], version, header_length)


def _checked_version(version: int | None) -> int | None:
    if version not in (None, MQTT_3_1_1, MQTT_5):
        raise ValueError(f"version must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0), not {version!r}")
    return version


class Reader:
    """Splits one connection's incoming bytes into packets.

    Call :meth:`feed` with bytes as they arrive; it returns the packets they
    complete. At most one partial packet is kept, and never more of it than
    its fixed header announces; a fixed header announcing a packet larger
    than *max_packet_size* (counted, as MQTT 5's Maximum Packet Size, over
    the whole packet) raises MQTTError(0x95) before its body is read.

    ``version`` starts as given (None: unknown, for a server). While it is
    None the first packet must be a CONNECT, which sets it; a CONNECT after
    that is a Protocol Error (MQTT-3.1.0-2). After an MQTTError the
    connection must be closed: every later :meth:`feed` raises it again.
    """

    def __init__(self, max_packet_size: int = MAX_PACKET_SIZE, *, version: int | None = None) -> None:
        if not isinstance(max_packet_size, int) or max_packet_size < 2:
            raise ValueError(f"max_packet_size must be an int >= 2, not {max_packet_size!r}")
        self.max_packet_size = max_packet_size
        self._version = _checked_version(version)
        self._head = bytearray()  # the fixed header, while incomplete (at most 4 bytes)
        self._header: tuple[int, int, int] | None = None  # first byte, remaining length, header length
        self._body = bytearray()
        self._error: MQTTError | None = None

    @property
    def version(self) -> int | None:
        """4 (MQTT 3.1.1), 5 (MQTT 5.0), or None until a CONNECT says."""
        return self._version

    @version.setter
    def version(self, version: int | None) -> None:
        self._version = _checked_version(version)

    @property
    def buffered(self) -> int:
        """How many bytes of a partial packet are held."""
        return (self._header[2] if self._header else len(self._head)) + len(self._body)

    def feed(self, data: bytes | bytearray | memoryview) -> list[Packet]:
        """Every packet *data* completes, in order; the rest is kept for the next call.

        Raises MQTTError (its ``packets`` hold the packets completed before
        the offending one) and from then on raises it on every call.
        """
        if self._error is not None:
            raise self._error
        packets: list[Packet] = []
        try:
            self._read(memoryview(data), packets)
        except MQTTError as error:
            error.packets = tuple(packets)
            self._error = error
            raise
        return packets

    def _read(self, view: memoryview, packets: list[Packet]) -> None:
        position, end = 0, len(view)
        while True:
            if self._header is None:
                if position == end:
                    return
                take = min(5 - len(self._head), end - position)
                head = bytes(self._head) + bytes(view[position:position + take])
                header = _fixed_header(head, self._version, self.max_packet_size)
                if header is None:
                    self._head = bytearray(head)
                    return
                position += header[2] - len(self._head)
                self._head = bytearray()
                if header[0] >> 4 == _T.CONNECT and self._version is not None:
                    raise _header_error(PROTOCOL_ERROR, "CONNECT", "packet type", 0,
                                        "a second CONNECT (MQTT-3.1.0-2)")
                self._header = header
            first, remaining, header_length = self._header
            body: bytes | memoryview
            if not self._body and end - position >= remaining:
                body = view[position:position + remaining]  # whole in this chunk: no copy
                position += remaining
            else:
                chunk = view[position:position + remaining - len(self._body)]
                self._body += chunk
                position += len(chunk)
                if len(self._body) < remaining:
                    return
                body, self._body = memoryview(self._body), bytearray()
            self._header = None
            packet = _decode_body(first, body, self._version, header_length)
            if isinstance(packet, Connect):
                self._version = packet.protocol_level
            packets.append(packet)


# -- encoding --------------------------------------------------------------------------------------------------------


def encode(packet: Packet, version: int) -> bytes:
    """The bytes of *packet* in MQTT *version* (4: 3.1.1, 5: 5.0), as :class:`Reader` reads them back.

    ValueError for a packet *version* cannot carry or that the decoder
    would refuse; TypeError for something that is not a packet.
    """
    if version not in (MQTT_3_1_1, MQTT_5):
        raise ValueError(f"version must be 4 (MQTT 3.1.1) or 5 (MQTT 5.0), not {version!r}")
    encoder = _ENCODERS.get(type(packet))
    if encoder is None:
        raise TypeError(f"not an MQTT packet: {packet!r}")
    first, body = encoder(packet, version)
    if len(body) > MAX_VARIABLE_BYTE_INT:
        raise ValueError(f"{packet.packet_type.name} body of {len(body)} bytes is over {MAX_VARIABLE_BYTE_INT}")
    return bytes([first]) + varint_bytes(len(body)) + bytes(body)


def _properties(properties: Properties, packet_type: PacketType, version: int, *, will: bool = False) -> bytes:
    if version == MQTT_5:
        return encode_properties(properties, packet_type, will=will)
    if not properties.is_empty:
        raise ValueError(f"MQTT 3.1.1 {'will' if will else packet_type.name} has no properties")
    return b""


def _put_packet_id(out: bytearray, packet_id: int) -> None:
    _refuse(_packet_id_problem(packet_id), "packet identifier")
    put_two(out, packet_id, "packet identifier")


def _encode_connect(packet: Connect, version: int) -> tuple[int, bytearray]:
    if packet.protocol_level != version:
        raise ValueError(f"a CONNECT of protocol level {packet.protocol_level} cannot be encoded as version {version}")
    body = bytearray()
    put_utf8(body, "MQTT", "protocol name")
    body.append(version)
    will = packet.will
    flags = 0x02 if packet.clean_start else 0
    if will is not None:
        if will.qos not in (0, 1, 2):
            raise ValueError(f"will QoS must be 0, 1 or 2, not {will.qos!r}")
        flags |= 0x04 | will.qos << 3 | (0x20 if will.retain else 0)
    if packet.username is not None:
        flags |= 0x80
    if packet.password is not None:
        if version == MQTT_3_1_1 and packet.username is None:
            raise ValueError("MQTT 3.1.1 allows no password without a user name (MQTT-3.1.2-22)")
        flags |= 0x40
    body.append(flags)
    put_two(body, packet.keep_alive, "keep alive")
    body += _properties(packet.properties, _T.CONNECT, version)
    put_utf8(body, packet.client_id, "client identifier")
    if will is not None:
        body += _properties(will.properties, _T.CONNECT, version, will=True)
        problem = topic_name_problem(will.topic)
        _refuse(None if problem is None else (MALFORMED, problem), "will topic")
        put_utf8(body, will.topic, "will topic")
        put_binary(body, will.payload, "will payload")
    if packet.username is not None:
        put_utf8(body, packet.username, "user name")
    if packet.password is not None:
        put_binary(body, packet.password, "password")
    return 0x10, body


def _encode_connack(packet: Connack, version: int) -> tuple[int, bytearray]:
    _refuse(_reason_problem(_T.CONNACK, packet.reason_code, version), "reason code")
    if packet.session_present and packet.reason_code:
        raise ValueError("session present needs reason code 0 (MQTT-3.2.2-4, MQTT-3.2.2-6)")
    body = bytearray([0x01 if packet.session_present else 0x00, packet.reason_code])
    body += _properties(packet.properties, _T.CONNACK, version)
    return 0x20, body


def _encode_publish(packet: Publish, version: int) -> tuple[int, bytearray]:
    qos = packet.qos
    if qos not in (0, 1, 2):
        raise ValueError(f"QoS must be 0, 1 or 2, not {qos!r}")
    if qos == 0 and packet.packet_id is not None:
        raise ValueError("a QoS 0 PUBLISH has no packet identifier (MQTT-2.3.1-5, MQTT-2.2.1-2)")
    if qos == 0 and packet.dup:
        raise ValueError("DUP must be 0 on a QoS 0 PUBLISH (MQTT-3.3.1-2)")
    if qos and packet.packet_id is None:
        raise ValueError(f"a QoS {qos} PUBLISH needs a packet identifier (MQTT-2.3.1-1)")
    _refuse(_topic_problem(packet.topic, packet.properties, version), "topic name")
    body = bytearray()
    put_utf8(body, packet.topic, "topic name")
    if packet.packet_id is not None:
        _put_packet_id(body, packet.packet_id)
    body += _properties(packet.properties, _T.PUBLISH, version)
    if not isinstance(packet.payload, (bytes, bytearray, memoryview)):
        raise ValueError(f"payload must be bytes, not {type(packet.payload).__name__}")
    body += packet.payload
    return 0x30 | packet.dup << 3 | qos << 1 | packet.retain, body


def _encode_response(packet: _PublishResponse, version: int) -> tuple[int, bytearray]:
    body = bytearray()
    _put_packet_id(body, packet.packet_id)
    _put_code_and_properties(body, packet.reason_code, packet.properties, packet.packet_type, version)
    return packet.packet_type << 4 | _FLAGS.get(packet.packet_type, 0), body


def _put_code_and_properties(out: bytearray, code: int, properties: Properties, packet_type: PacketType,
                             version: int) -> None:
    """The optional reason code and properties of PUBACK ... PUBCOMP, DISCONNECT and AUTH, shortest form."""
    _refuse(_reason_problem(packet_type, code, version), "reason code")
    block = _properties(properties, packet_type, version)
    if version == MQTT_5 and (code or not properties.is_empty):
        out.append(code)
        if not properties.is_empty:
            out += block


def _encode_subscribe(packet: Subscribe, version: int) -> tuple[int, bytearray]:
    body = bytearray()
    _put_packet_id(body, packet.packet_id)
    body += _properties(packet.properties, _T.SUBSCRIBE, version)
    if not packet.subscriptions:
        raise ValueError("SUBSCRIBE needs at least one topic filter (MQTT-3.8.3-3, MQTT-3.8.3-2)")
    for topic_filter, options in packet.subscriptions:
        _refuse(_subscription_problem(topic_filter, options, version), f"topic filter {topic_filter!r}")
        put_utf8(body, topic_filter, "topic filter")
        body.append(options.qos | options.no_local << 2 | options.retain_as_published << 3
                    | options.retain_handling << 4)
    return 0x82, body


def _encode_suback(packet: Suback, version: int) -> tuple[int, bytearray]:
    body = bytearray()
    _put_packet_id(body, packet.packet_id)
    body += _properties(packet.properties, _T.SUBACK, version)
    _put_codes(body, packet.reason_codes, _T.SUBACK, version)
    return 0x90, body


def _put_codes(out: bytearray, codes: tuple[int, ...], packet_type: PacketType, version: int) -> None:
    if not codes:
        raise ValueError(f"{packet_type.name} needs at least one reason code")
    for code in codes:
        _refuse(_reason_problem(packet_type, code, version), "reason code")
        put_byte(out, code, "reason code")


def _encode_unsubscribe(packet: Unsubscribe, version: int) -> tuple[int, bytearray]:
    body = bytearray()
    _put_packet_id(body, packet.packet_id)
    body += _properties(packet.properties, _T.UNSUBSCRIBE, version)
    if not packet.filters:
        raise ValueError("UNSUBSCRIBE needs at least one topic filter (MQTT-3.10.3-2)")
    for topic_filter in packet.filters:
        _refuse(_filter_problem(topic_filter, version), f"topic filter {topic_filter!r}")
        put_utf8(body, topic_filter, "topic filter")
    return 0xA2, body


def _encode_unsuback(packet: Unsuback, version: int) -> tuple[int, bytearray]:
    body = bytearray()
    _put_packet_id(body, packet.packet_id)
    body += _properties(packet.properties, _T.UNSUBACK, version)
    if version == MQTT_5:
        _put_codes(body, packet.reason_codes, _T.UNSUBACK, version)
    elif packet.reason_codes:
        raise ValueError("MQTT 3.1.1 UNSUBACK has no reason codes")
    return 0xB0, body


def _encode_ping(packet: Pingreq | Pingresp, version: int) -> tuple[int, bytearray]:
    return packet.packet_type << 4, bytearray()


def _encode_disconnect(packet: Disconnect, version: int) -> tuple[int, bytearray]:
    body = bytearray()
    _put_code_and_properties(body, packet.reason_code, packet.properties, _T.DISCONNECT, version)
    return 0xE0, body


def _encode_auth(packet: Auth, version: int) -> tuple[int, bytearray]:
    if version == MQTT_3_1_1:
        raise ValueError("MQTT 3.1.1 has no AUTH packet")
    body = bytearray()
    _put_code_and_properties(body, packet.reason_code, packet.properties, _T.AUTH, version)
    return 0xF0, body


_ENCODERS: Final[dict[type, Callable[[Any, int], tuple[int, bytearray]]]] = {
    Connect: _encode_connect, Connack: _encode_connack, Publish: _encode_publish, Puback: _encode_response,
    Pubrec: _encode_response, Pubrel: _encode_response, Pubcomp: _encode_response, Subscribe: _encode_subscribe,
    Suback: _encode_suback, Unsubscribe: _encode_unsubscribe, Unsuback: _encode_unsuback, Pingreq: _encode_ping,
    Pingresp: _encode_ping, Disconnect: _encode_disconnect, Auth: _encode_auth,
}


def publish_bytes(topic: bytes, payload: bytes, qos: int, retain: bool, packet_id: int | None,
                  properties: bytes | None, dup: bool = False) -> bytes:
    """A PUBLISH packet's bytes, built without the checks :func:`encode` makes: for a server
    that writes one per subscriber per message. *topic* is the topic name with its two-byte
    length (a valid topic name: the caller vouches for it, as :func:`encode` would check),
    *properties* the property block (MQTT 5, length included; ``b"\\x00"`` for none) or None
    (MQTT 3.1.1). ``publish_bytes(...) == encode(Publish(...))`` for every packet both accept."""
    first = 0x30 | (0x08 if dup else 0) | (qos << 1) | (0x01 if retain else 0)
    length = len(topic) + len(payload) + (2 if qos else 0) + (len(properties) if properties is not None else 0)
    if length < 0x80:
        head = bytes((first, length))
    else:
        head = bytes((first,)) + varint_bytes(length)
    pid = packet_id.to_bytes(2, "big") if qos and packet_id is not None else b""
    return b"".join((head, topic, pid, properties or b"", payload))


def topic_bytes(topic: str) -> bytes:
    """A topic name as a PUBLISH carries it (two-byte length, UTF-8), for :func:`publish_bytes`."""
    data = topic.encode("utf-8")
    return len(data).to_bytes(2, "big") + data


def properties_bytes(properties: Properties) -> bytes:
    """A PUBLISH's MQTT 5 property block (length included), for :func:`publish_bytes`."""
    return encode_properties(properties, PacketType.PUBLISH)
