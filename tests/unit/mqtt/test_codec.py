"""The MQTT codec (mqtt/codec.py, mqtt/properties.py, mqtt/names.py).

Round trips of every packet type in both versions through random chunkings,
fuzzing (random bytes, mutated and truncated streams: only MQTTError or
packets may come out, and every packet that comes out re-encodes to
itself), byte strings written by hand from the specifications, and one test
per normative statement the decoder enforces.

Naming: ``test_MQTT_x_y_z_n_...`` tests statement [MQTT-x.y.z-n]. Without a
suffix the statement has that number in both MQTT 3.1.1 and 5.0 and the
test runs both; where the versions number a rule differently (or only one
has it) there is one test per version, suffixed ``_v311`` or ``_v5``, each
named by its own version's number.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mqtt.codec import (
    MAX_PACKET_SIZE,
    REASON_CODES,
    Auth,
    Connack,
    Connect,
    Disconnect,
    MQTTError,
    Packet,
    PacketType,
    Pingreq,
    Pingresp,
    Properties,
    Puback,
    Pubcomp,
    Publish,
    Pubrec,
    Pubrel,
    Reader,
    Suback,
    Subscribe,
    SubscriptionOptions,
    Unsuback,
    Unsubscribe,
    Will,
    check_payload_format,
    decode,
    encode,
)
from mqtt.names import is_topic_filter, is_topic_name, split_shared
from mqtt.properties import BY_IDENTIFIER, EMPTY, PROPERTIES, PropertySpec, WireType, varint_bytes

V311, V5 = 4, 5
VERSIONS = [V311, V5]

# -- building bytes by hand ------------------------------------------------------------------------------------------


def s(text: str | bytes) -> bytes:
    """A UTF-8 string (or binary data) with its two-byte length."""
    raw = text.encode() if isinstance(text, str) else text
    return len(raw).to_bytes(2, "big") + raw


def raw(first: int, body: bytes) -> bytes:
    """A packet: first byte, remaining length, body."""
    return bytes([first]) + varint_bytes(len(body)) + body


def connect_raw(version: int, flags: int = 0x02, payload: bytes = s("id"), *, name: bytes = s("MQTT"),
                properties: bytes = b"\x00") -> bytes:
    """A CONNECT with keep alive 60; *payload* follows the variable header (properties in MQTT 5)."""
    header = name + bytes([version, flags]) + b"\x00\x3c" + (properties if version == V5 else b"")
    return raw(0x10, header + payload)


def after_connect(version: int, packet: bytes) -> bytes:
    """A valid CONNECT of *version*, then *packet*: what a server reads."""
    return connect_raw(version) + packet


def feed_all(data: bytes, version: int | None = None, *, cuts: list[int] | None = None,
             max_packet_size: int = MAX_PACKET_SIZE) -> list[Packet]:
    """Feed *data* to a fresh Reader, cut at *cuts* (default: byte by byte)."""
    reader = Reader(max_packet_size, version=version)
    points = list(range(len(data) + 1)) if cuts is None else [0, *sorted(cuts), len(data)]
    packets: list[Packet] = []
    for start, end in zip(points, points[1:]):
        packets += reader.feed(data[start:end])
    return packets


def refused(data: bytes, code: int, *needles: str, version: int | None = None) -> MQTTError:
    """Assert a Reader refuses *data* with reason *code*, whole and byte by byte; the message holds *needles*."""
    with pytest.raises(MQTTError) as whole:
        Reader(version=version).feed(data)
    with pytest.raises(MQTTError) as split:
        feed_all(data, version)
    assert (whole.value.reason_code, split.value.reason_code) == (code, code), (str(whole.value), str(split.value))
    for needle in needles:
        assert needle in str(whole.value)
    return whole.value


def accepted(data: bytes, version: int | None = None) -> list[Packet]:
    """The packets a Reader makes of *data*, which must be the same whole and byte by byte."""
    packets = Reader(version=version).feed(data)
    assert feed_all(data, version) == packets
    return packets


# -- strategies ------------------------------------------------------------------------------------------------------

_chars = st.characters(codec="utf-8", exclude_characters="\x00")
texts = st.text(_chars, max_size=8)
levels = st.text(st.characters(codec="utf-8", exclude_characters="\x00/+#"), max_size=5)
topic_names = st.lists(levels, min_size=1, max_size=4).map("/".join).filter(bool)
u16 = st.integers(0, 0xFFFF)
packet_ids = st.integers(1, 0xFFFF)
qos_values = st.integers(0, 2)


@st.composite
def topic_filters(draw: st.DrawFn, version: int) -> str:
    parts = draw(st.lists(st.one_of(levels, st.just("+")), min_size=0, max_size=4))
    if draw(st.booleans()) or not parts:
        parts.append("#")
    text = "/".join(parts) or "+"
    if version == V5 and draw(st.integers(0, 4)) == 0:
        share = draw(st.text(st.characters(codec="utf-8", exclude_characters="\x00/+#"), min_size=1, max_size=4))
        text = f"$share/{share}/{text}"
    return text


def _value(spec: PropertySpec, packet: PacketType) -> st.SearchStrategy[object]:
    if spec.identifier == 0x08:
        return topic_names
    wire = spec.wire
    if wire is WireType.BYTE:
        return st.integers(0, 1)
    if wire is WireType.TWO_BYTE_INT:
        return st.integers(1 if spec.identifier in (0x21, 0x23) else 0, 0xFFFF)
    if wire is WireType.FOUR_BYTE_INT:
        return st.integers(1 if spec.identifier == 0x27 else 0, 0xFFFF_FFFF)
    if wire is WireType.VARIABLE_BYTE_INT:
        return st.lists(st.integers(1, 268_435_455), min_size=1, max_size=3 if packet is PacketType.PUBLISH else 1)
    if wire is WireType.UTF8_STRING:
        return texts
    if wire is WireType.BINARY_DATA:
        return st.binary(max_size=6)
    return st.lists(st.tuples(texts, texts), min_size=1, max_size=3)


@st.composite
def properties(draw: st.DrawFn, packet: PacketType, version: int, will: bool = False) -> Properties:
    if version == V311:
        return EMPTY
    values: dict[str, object] = {}
    for spec in PROPERTIES:
        if (spec.in_will if will else packet in spec.packets) and draw(st.integers(0, 3)) == 0:
            value = draw(_value(spec, packet))
            values[spec.attribute] = tuple(value) if isinstance(value, list) else value
    if "authentication_method" not in values:
        values.pop("authentication_data", None)
    return Properties(**values)  # type: ignore[arg-type]


@st.composite
def connects(draw: st.DrawFn, version: int) -> Connect:
    username = draw(st.none() | texts)
    password = draw(st.none() | st.binary(max_size=6))
    if version == V311 and username is None:
        password = None
    will = draw(st.none() | st.builds(Will, topic_names, st.binary(max_size=6), qos_values, st.booleans(),
                                      properties(PacketType.CONNECT, version, will=True)))
    return Connect(version, draw(texts), draw(st.booleans()), draw(u16), username, password, will,
                   draw(properties(PacketType.CONNECT, version)))


@st.composite
def connacks(draw: st.DrawFn, version: int) -> Connack:
    code = draw(st.sampled_from(range(6) if version == V311 else sorted(REASON_CODES[PacketType.CONNACK])))
    return Connack(code == 0 and draw(st.booleans()), code, draw(properties(PacketType.CONNACK, version)))


@st.composite
def publishes(draw: st.DrawFn, version: int) -> Publish:
    qos = draw(qos_values)
    props = draw(properties(PacketType.PUBLISH, version))
    topic = draw(topic_names)
    if props.topic_alias is not None and draw(st.booleans()):
        topic = ""
    return Publish(topic, draw(st.binary(max_size=20)), qos, draw(st.booleans()), qos > 0 and draw(st.booleans()),
                   draw(packet_ids) if qos else None, props)


def responses(kind: type[Puback] | type[Pubrec] | type[Pubrel] | type[Pubcomp]) -> Callable[[int], st.SearchStrategy[Packet]]:
    def strategy(version: int) -> st.SearchStrategy[Packet]:
        if version == V311:
            return st.builds(kind, packet_ids)
        return st.builds(kind, packet_ids, st.sampled_from(sorted(REASON_CODES[kind.packet_type])),
                         properties(kind.packet_type, version))
    return strategy


@st.composite
def options(draw: st.DrawFn, version: int, topic_filter: str) -> SubscriptionOptions:
    if version == V311:
        return SubscriptionOptions(draw(qos_values))
    no_local = split_shared(topic_filter) is None and draw(st.booleans())
    return SubscriptionOptions(draw(qos_values), no_local, draw(st.booleans()), draw(st.integers(0, 2)))


@st.composite
def subscribes(draw: st.DrawFn, version: int) -> Subscribe:
    filters = draw(st.lists(topic_filters(version), min_size=1, max_size=4))
    pairs = tuple((f, draw(options(version, f))) for f in filters)
    return Subscribe(draw(packet_ids), pairs, draw(properties(PacketType.SUBSCRIBE, version)))


def _codes(packet: PacketType, version: int) -> st.SearchStrategy[tuple[int, ...]]:
    allowed = [0, 1, 2, 0x80] if version == V311 else sorted(REASON_CODES[packet])
    return st.lists(st.sampled_from(allowed), min_size=1, max_size=4).map(tuple)


STRATEGIES: dict[type, Callable[[int], st.SearchStrategy[Packet]]] = {
    Connect: connects,
    Connack: connacks,
    Publish: publishes,
    Puback: responses(Puback),
    Pubrec: responses(Pubrec),
    Pubrel: responses(Pubrel),
    Pubcomp: responses(Pubcomp),
    Subscribe: subscribes,
    Suback: lambda v: st.builds(Suback, packet_ids, _codes(PacketType.SUBACK, v), properties(PacketType.SUBACK, v)),
    Unsubscribe: lambda v: st.builds(Unsubscribe, packet_ids, st.lists(topic_filters(v), min_size=1, max_size=4)
                                     .map(tuple), properties(PacketType.UNSUBSCRIBE, v)),
    Unsuback: lambda v: (st.builds(Unsuback, packet_ids) if v == V311 else
                         st.builds(Unsuback, packet_ids, _codes(PacketType.UNSUBACK, v),
                                   properties(PacketType.UNSUBACK, v))),
    Pingreq: lambda v: st.just(Pingreq()),
    Pingresp: lambda v: st.just(Pingresp()),
    Disconnect: lambda v: (st.just(Disconnect()) if v == V311 else
                           st.builds(Disconnect, st.sampled_from(sorted(REASON_CODES[PacketType.DISCONNECT])),
                                     properties(PacketType.DISCONNECT, v))),
    Auth: lambda v: st.builds(Auth, st.sampled_from([0x00, 0x18, 0x19]), properties(PacketType.AUTH, v)),
}
KINDS = [(kind, version) for kind in STRATEGIES for version in VERSIONS if not (kind is Auth and version == V311)]


def any_packet(version: int) -> st.SearchStrategy[Packet]:
    return st.one_of([STRATEGIES[kind](version) for kind, v in KINDS if v == version and kind is not Connect])


def cut_points(size: int) -> st.SearchStrategy[list[int]]:
    return st.lists(st.integers(0, size), max_size=10)


def reencodes(packets: list[Packet], version: int) -> None:
    """Every packet the decoder made is one the encoder writes back, and reads back the same."""
    for packet in packets:
        level = packet.protocol_level if isinstance(packet, Connect) else version
        assert decode(encode(packet, level), level) == packet


# -- round trips -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "version"), KINDS, ids=[f"{k.__name__}-v{v}" for k, v in KINDS])
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_every_packet_type_round_trips_in_any_chunking(kind: type, version: int, data: st.DataObject) -> None:
    packet = data.draw(STRATEGIES[kind](version))
    wire = encode(packet, version)
    assert decode(wire, version) == packet
    reader_version = None if kind is Connect else version
    assert feed_all(wire, reader_version, cuts=data.draw(cut_points(len(wire)))) == [packet]
    assert feed_all(wire, reader_version) == [packet]


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_connection_stream_round_trips_byte_by_byte_and_in_chunks(version: int, data: st.DataObject) -> None:
    packets = [data.draw(connects(version)), *data.draw(st.lists(any_packet(version), max_size=6))]
    wire = b"".join(encode(packet, version) for packet in packets)
    assert feed_all(wire) == packets
    assert feed_all(wire, cuts=data.draw(cut_points(len(wire)))) == packets
    reader = Reader()
    assert reader.feed(wire) == packets and reader.version == version and reader.buffered == 0


def test_auth_does_not_exist_in_v311() -> None:
    with pytest.raises(ValueError, match="no AUTH"):
        encode(Auth(), V311)
    refused(raw(0xF0, b""), 0x81, "reserved", version=V311)


# -- fuzzing ---------------------------------------------------------------------------------------------------------


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=40), st.sampled_from([None, V311, V5]))
def test_random_bytes_give_packets_or_mqtt_errors(data: bytes, version: int | None) -> None:
    try:
        packets = Reader(256, version=version).feed(data)
    except MQTTError as error:
        assert 0x80 <= error.reason_code <= 0xA2
        return
    reencodes(packets, version or V5)


@settings(max_examples=600, deadline=None)
@given(st.integers(1, 15), st.binary(max_size=40), st.sampled_from(VERSIONS))
def test_random_bodies_give_a_packet_or_an_mqtt_error(kind: int, body: bytes, version: int) -> None:
    for flags in (0x0, 0x2, 0xB):
        try:
            packets = Reader(version=version).feed(raw(kind << 4 | flags, body))
        except MQTTError:
            continue
        reencodes(packets, version)


@st.composite
def mutations(draw: st.DrawFn, wire: bytes) -> bytes:
    """*wire* with one to three bytes flipped, deleted or inserted, or cut short."""
    data = bytearray(wire)
    for _ in range(draw(st.integers(1, 3))):
        if not data:
            break
        index = draw(st.integers(0, len(data) - 1))
        operation = draw(st.sampled_from(["flip", "delete", "insert", "truncate"]))
        if operation == "flip":
            data[index] ^= draw(st.integers(1, 255))
        elif operation == "delete":
            del data[index]
        elif operation == "insert":
            data.insert(index, draw(st.integers(0, 255)))
        else:
            del data[index:]
    return bytes(data)


@pytest.mark.parametrize("version", VERSIONS)
@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_mutated_and_truncated_streams_give_packets_or_mqtt_errors(version: int, data: st.DataObject) -> None:
    """Half the streams start with a CONNECT (a server's reader), half not (a reader that knows the version)."""
    with_connect = data.draw(st.booleans())
    packets = data.draw(st.lists(any_packet(version), min_size=0 if with_connect else 1, max_size=4))
    if with_connect:
        packets.insert(0, data.draw(connects(version)))
    mutated = data.draw(mutations(b"".join(encode(packet, version) for packet in packets)))
    reader = Reader(4096, version=None if with_connect else version)
    got: list[Packet] = []
    try:
        for start in range(0, len(mutated), 7):
            got += reader.feed(mutated[start:start + 7])
    except MQTTError as error:
        assert 0x80 <= error.reason_code <= 0xA2
        got += error.packets  # type: ignore[arg-type]
    if got and isinstance(got[0], Connect):
        version = got[0].protocol_level
    reencodes(got, version)


# -- the wire format, by hand from the specifications ----------------------------------------------------------------

HAND_WRITTEN: list[tuple[str, int, str, Packet]] = [
    # 3.1.1 CONNECT, client id "", clean session, keep alive 60
    ("connect-v311", V311, "10 0c 00 04 4d 51 54 54 04 02 00 3c 00 00", Connect(V311, "", True, 60)),
    # ... with user name "u" and password "p"
    ("connect-v311-login", V311, "10 12 00 04 4d 51 54 54 04 c2 00 3c 00 00 00 01 75 00 01 70",
     Connect(V311, "", True, 60, "u", b"p")),
    # ... with a will: topic "w", message "x", QoS 1, retained (flags 0010 1110)
    ("connect-v311-will", V311, "10 12 00 04 4d 51 54 54 04 2e 00 3c 00 00 00 01 77 00 01 78",
     Connect(V311, "", True, 60, will=Will("w", b"x", 1, True))),
    # 5.0 CONNECT, empty properties, client id "c"
    ("connect-v5", V5, "10 0e 00 04 4d 51 54 54 05 02 00 3c 00 00 01 63", Connect(V5, "c", True, 60)),
    # 5.0 CONNECT with Session Expiry Interval 120 (property 0x11, four bytes)
    ("connect-v5-expiry", V5, "10 13 00 04 4d 51 54 54 05 00 00 00 05 11 00 00 00 78 00 01 63",
     Connect(V5, "c", False, 0, properties=Properties(session_expiry_interval=120))),
    ("connack-v311", V311, "20 02 01 00", Connack(True, 0)),
    ("connack-v311-refused", V311, "20 02 00 05", Connack(False, 5)),
    # 5.0 CONNACK, 0x84, Reason String "v"
    ("connack-v5", V5, "20 07 00 84 04 1f 00 01 76", Connack(False, 0x84, Properties(reason_string="v"))),
    # PUBLISH QoS 1 to "a/b", packet id 10, payload "hi"
    ("publish-v311", V311, "32 09 00 03 61 2f 62 00 0a 68 69", Publish("a/b", b"hi", 1, packet_id=10)),
    # PUBLISH QoS 0, retained, DUP clear, empty payload
    ("publish-v311-retain", V311, "31 05 00 03 61 2f 62", Publish("a/b", b"", 0, retain=True)),
    # 5.0 PUBLISH QoS 2 DUP, empty topic with Topic Alias 3 (0x23 00 03)
    ("publish-v5-alias", V5, "3c 09 00 00 00 07 03 23 00 03 7a",
     Publish("", b"z", 2, dup=True, packet_id=7, properties=Properties(topic_alias=3))),
    # 5.0 PUBLISH with Subscription Identifiers 1 and 200 (VBI c8 01) and a User Property
    ("publish-v5-subids", V5, "30 11 00 01 74 0c 0b 01 0b c8 01 26 00 01 6b 00 01 76 21",
     Publish("t", b"!", properties=Properties(subscription_identifiers=(1, 200), user_properties=(("k", "v"),)))),
    ("puback-v311", V311, "40 02 00 0a", Puback(10)),
    ("pubrec-v311", V311, "50 02 00 0a", Pubrec(10)),
    ("pubrel-v311", V311, "62 02 00 0a", Pubrel(10)),
    ("pubcomp-v311", V311, "70 02 00 0a", Pubcomp(10)),
    # 5.0 PUBACK: success with no properties takes the short form (remaining length 2)
    ("puback-v5-short", V5, "40 02 00 0a", Puback(10)),
    # 5.0 PUBACK 0x10 (No matching subscribers) without properties: remaining length 3
    ("puback-v5-code", V5, "40 03 00 0a 10", Puback(10, 0x10)),
    ("pubrel-v5-code", V5, "62 03 00 0a 92", Pubrel(10, 0x92)),
    # SUBSCRIBE, the example of 3.1.1 section 3.8.3: "a/b" QoS 1, "c/d" QoS 2, packet id 10
    ("subscribe-v311", V311, "82 0e 00 0a 00 03 61 2f 62 01 00 03 63 2f 64 02",
     Subscribe(10, (("a/b", SubscriptionOptions(1)), ("c/d", SubscriptionOptions(2))))),
    # 5.0 SUBSCRIBE "a/#": QoS 1, No Local, Retain As Published, Retain Handling 2 (0010 1101)
    ("subscribe-v5", V5, "82 09 00 01 00 00 03 61 2f 23 2d",
     Subscribe(1, (("a/#", SubscriptionOptions(1, True, True, 2)),))),
    # SUBACK, the example of 3.1.1 section 3.9.3: granted 0, 1, 2 and failure
    ("suback-v311", V311, "90 06 00 0a 00 01 02 80", Suback(10, (0, 1, 2, 0x80))),
    ("suback-v5", V5, "90 05 00 0a 00 01 a2", Suback(10, (1, 0xA2))),
    ("unsubscribe-v311", V311, "a2 0c 00 0a 00 03 61 2f 62 00 03 63 2f 64", Unsubscribe(10, ("a/b", "c/d"))),
    ("unsuback-v311", V311, "b0 02 00 0a", Unsuback(10)),
    ("unsuback-v5", V5, "b0 05 00 0a 00 00 11", Unsuback(10, (0x00, 0x11))),
    ("pingreq", V311, "c0 00", Pingreq()),
    ("pingresp", V5, "d0 00", Pingresp()),
    ("disconnect-v311", V311, "e0 00", Disconnect()),
    ("disconnect-v5-short", V5, "e0 00", Disconnect()),
    # 5.0 DISCONNECT with Will Message, no properties: remaining length 1
    ("disconnect-v5-will", V5, "e0 01 04", Disconnect(0x04)),
    # 5.0 DISCONNECT 0x8E with Session Expiry Interval 0
    ("disconnect-v5-props", V5, "e0 07 8e 05 11 00 00 00 00",
     Disconnect(0x8E, Properties(session_expiry_interval=0))),
    # 5.0 AUTH: Continue authentication, method "m", data 01 02
    ("auth-v5", V5, "f0 0b 18 09 15 00 01 6d 16 00 02 01 02",
     Auth(0x18, Properties(authentication_method="m", authentication_data=b"\x01\x02"))),
]


@pytest.mark.parametrize(("version", "wire", "packet"), [case[1:] for case in HAND_WRITTEN],
                         ids=[case[0] for case in HAND_WRITTEN])
def test_hand_written_bytes_from_the_specifications(version: int, wire: str, packet: Packet) -> None:
    data = bytes.fromhex(wire)
    assert encode(packet, version) == data
    assert decode(data, version) == packet
    reader_version = None if isinstance(packet, Connect) else version
    assert accepted(data, reader_version) == [packet]


def test_longer_forms_the_specification_allows_decode_too() -> None:
    # 5.0 PUBACK with reason code and an empty property block (remaining length 4)
    assert decode(bytes.fromhex("40 04 00 0a 00 00"), V5) == Puback(10)
    # 5.0 DISCONNECT with reason code 0 and an empty property block
    assert decode(bytes.fromhex("e0 02 00 00"), V5) == Disconnect()
    # 5.0 AUTH with no reason code at all (remaining length 0)
    assert decode(bytes.fromhex("f0 00"), V5) == Auth()


@pytest.mark.parametrize(("value", "wire"), [
    (0, "00"), (127, "7f"), (128, "80 01"), (16_383, "ff 7f"), (16_384, "80 80 01"),
    (2_097_151, "ff ff 7f"), (2_097_152, "80 80 80 01"), (268_435_455, "ff ff ff 7f"),
])
def test_variable_byte_integers_match_the_table_of_section_1_5_5(value: int, wire: str) -> None:
    assert varint_bytes(value) == bytes.fromhex(wire)


@pytest.mark.parametrize("size", [0, 124, 125, 16_379, 16_380])
def test_remaining_lengths_across_the_one_and_two_byte_boundaries(size: int) -> None:
    packet = Publish("a", b"x" * size)
    wire = encode(packet, V311)
    assert wire[0] == 0x30 and len(wire) == 1 + len(varint_bytes(size + 3)) + size + 3
    assert accepted(wire, V311) == [packet]


def test_the_property_table_is_the_specifications() -> None:
    identifiers = [0x01, 0x02, 0x03, 0x08, 0x09, 0x0B, 0x11, 0x12, 0x13, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x1C,
                   0x1F, 0x21, 0x22, 0x23, 0x24, 0x25, 0x26, 0x27, 0x28, 0x29, 0x2A]
    assert [spec.identifier for spec in PROPERTIES] == identifiers
    assert BY_IDENTIFIER[0x01].name == "Payload Format Indicator"
    assert BY_IDENTIFIER[0x2A].name == "Shared Subscription Available"
    assert BY_IDENTIFIER[0x0B].wire is WireType.VARIABLE_BYTE_INT
    assert BY_IDENTIFIER[0x26].wire is WireType.UTF8_STRING_PAIR
    assert BY_IDENTIFIER[0x18].in_will and not BY_IDENTIFIER[0x18].packets
    assert PacketType.PINGREQ not in BY_IDENTIFIER[0x26].packets
    assert BY_IDENTIFIER[0x1F].packets >= {PacketType.PUBACK, PacketType.SUBACK, PacketType.AUTH}


# -- size bounds -----------------------------------------------------------------------------------------------------


def test_a_remaining_length_over_the_maximum_is_refused_before_the_body_arrives() -> None:
    reader = Reader(100, version=V5)
    assert reader.feed(b"\x30") == [] and reader.buffered == 1
    with pytest.raises(MQTTError) as info:
        reader.feed(b"\xe8\x07")  # remaining length 1000: the header alone, no body sent
    assert info.value.reason_code == 0x95
    assert "PUBLISH" in str(info.value) and "1003-byte packet" in str(info.value)
    with pytest.raises(MQTTError):
        reader.feed(b"\x00" * 1000)  # the reader stays failed


def test_max_packet_size_counts_the_whole_packet() -> None:
    fits = encode(Publish("t", b"x" * 94), V5)  # 1 + 1 + 98 bytes
    assert len(fits) == 100
    assert Reader(100, version=V5).feed(fits) == [decode(fits, V5)]
    with pytest.raises(MQTTError) as info:
        Reader(99, version=V5).feed(fits[:2])
    assert info.value.reason_code == 0x95


def test_a_partial_packet_is_kept_and_nothing_more() -> None:
    wire = encode(Publish("topic", b"p" * 300), V311)
    reader = Reader(version=V311)
    assert reader.feed(wire[:1]) == [] and reader.buffered == 1
    assert reader.feed(wire[1:2]) == [] and reader.buffered == 2
    assert reader.feed(wire[2:200]) == [] and reader.buffered == 200
    assert reader.feed(wire[200:] + wire[:10]) == [decode(wire, V311)] and reader.buffered == 10


def test_a_remaining_length_of_five_bytes_is_malformed() -> None:
    refused(b"\x30\xff\xff\xff\xff\x01", 0x81, "longer than 4 bytes", version=V311)
    with pytest.raises(MQTTError, match="longer than 4 bytes"):
        Reader(version=V5).feed(b"\x30\x80\x80\x80\x80")  # refused at the fifth byte, before a sixth


@pytest.mark.parametrize(("wire", "what"), [
    ("40 03 00 0a 00", "1 bytes after the last field"),  # 3.1.1 PUBACK is exactly 2 bytes
    ("c0 01 00", "1 bytes after the last field"),  # PINGREQ is empty
    ("20 01 00", "truncated"),  # CONNACK needs 2 bytes
    ("32 04 00 03 61 2f", "truncated"),  # the topic overruns the remaining length
])
def test_a_remaining_length_that_does_not_match_the_fields_is_malformed(wire: str, what: str) -> None:
    refused(bytes.fromhex(wire), 0x81, what, version=V311)


def test_decode_wants_exactly_one_packet() -> None:
    with pytest.raises(MQTTError, match="truncated"):
        decode(bytes.fromhex("40 02 00"), V311)
    with pytest.raises(MQTTError, match="followed by more bytes"):
        decode(bytes.fromhex("40 02 00 0a 00"), V311)
    with pytest.raises(MQTTError, match="truncated fixed header"):
        decode(b"\x40", V311)


# -- errors ----------------------------------------------------------------------------------------------------------


def test_errors_name_the_packet_the_field_and_the_byte_offset() -> None:
    error = refused(raw(0x30, s("a/+")), 0x81, version=V311)
    assert str(error).startswith("PUBLISH: topic name at byte 2: ")
    error = refused(raw(0x82, b"\x00\x01" + s("a") + b"\x04"), 0x81, version=V311)
    assert str(error).startswith("SUBSCRIBE: subscription options at byte 7: ")


def test_after_an_error_the_reader_refuses_everything_and_keeps_earlier_packets_on_the_error() -> None:
    reader = Reader(version=V311)
    with pytest.raises(MQTTError) as info:
        reader.feed(bytes.fromhex("c0 00 e0 00 c1 00"))
    assert info.value.packets == (Pingreq(), Disconnect())
    with pytest.raises(MQTTError) as again:
        reader.feed(bytes.fromhex("c0 00"))
    assert again.value is info.value


@pytest.mark.parametrize("packet", [
    Connect(V311, "c", properties=Properties(session_expiry_interval=1)),
    Puback(1, 0x10),
    Publish("a/#", b""),
    Publish("a", b"", 1),
    Publish("a", b"", 0, packet_id=1),
    Publish("a", b"", 0, dup=True),
    Subscribe(0, (("a", SubscriptionOptions()),)),
    Subscribe(1, ()),
    Subscribe(1, (("a", SubscriptionOptions(no_local=True)),)),
    Unsuback(1, (0,)),
    Connack(True, 1),
    Connack(False, 6),
    Suback(1, (3,)),
])
def test_encode_refuses_what_the_v311_decoder_would_refuse(packet: Packet) -> None:
    with pytest.raises(ValueError):
        encode(packet, V311)


@pytest.mark.parametrize("packet", [
    Connect(V311, "c"),
    Publish("", b""),
    Publish("a", b"", properties=Properties(topic_alias=0)),
    Publish("a", b"", properties=Properties(session_expiry_interval=1)),
    Publish("a", b"", properties=Properties(response_topic="r/+")),
    Connack(properties=Properties(maximum_qos=2)),
    Connack(properties=Properties(authentication_data=b"x")),
    Subscribe(1, (("$share/g/a", SubscriptionOptions(no_local=True)),)),
    Subscribe(1, (("$share/g", SubscriptionOptions()),)),
    Subscribe(1, (("a", SubscriptionOptions(retain_handling=3)),)),
    Subscribe(1, (("a", SubscriptionOptions()),), Properties(subscription_identifiers=(1, 2))),
    Puback(1, 0x92),
    Unsuback(1),
    Disconnect(0x01),
    Auth(0x01),
    Publish("a", "text"),  # type: ignore[arg-type]
])
def test_encode_refuses_what_the_v5_decoder_would_refuse(packet: Packet) -> None:
    with pytest.raises(ValueError):
        encode(packet, V5)


def test_check_payload_format_is_the_0x99_check() -> None:
    check_payload_format(b"\xff", Properties())
    check_payload_format("é".encode(), Properties(payload_format_indicator=1))
    with pytest.raises(MQTTError) as info:
        check_payload_format(b"ok\xff", Properties(payload_format_indicator=1))
    assert info.value.reason_code == 0x99 and "byte 2" in str(info.value)


def test_topic_name_and_filter_checks() -> None:
    assert is_topic_name("a/b") and is_topic_name("/") and is_topic_name("$SYS/x")
    assert not is_topic_name("") and not is_topic_name("a/+") and not is_topic_name("#")
    assert all(map(is_topic_filter, ["#", "+", "a/#", "+/+", "/", "a//b", "+/a/#", "$share/g/#"]))
    assert not any(map(is_topic_filter, ["", "a#", "a/#/b", "a+", "+a/b", "#/", "$share//a", "$share/g", "$share/g+/a"]))
    assert is_topic_filter("$share/g", shared=False)
    assert split_shared("$share/g/a/+") == ("g", "a/+") and split_shared("a/b") is None


# -- properties ------------------------------------------------------------------------------------------------------


def _publish_with(block: bytes) -> bytes:
    return raw(0x30, s("t") + varint_bytes(len(block)) + block)


def test_a_property_given_twice_is_a_protocol_error() -> None:
    error = refused(_publish_with(b"\x23\x00\x01\x23\x00\x02"), 0x82, "Topic Alias", "twice", version=V5)
    assert "at byte 9" in str(error)  # 30 0a | 00 01 74 | 06 | 23 00 01 | 23 ...


def test_user_properties_repeat_in_order_and_subscription_identifiers_repeat_in_publish_only() -> None:
    block = b"\x26" + s("a") + s("1") + b"\x0b\x05\x26" + s("a") + s("2") + b"\x0b\x06"
    [packet] = accepted(_publish_with(block), V5)
    assert isinstance(packet, Publish)
    assert packet.properties.user_properties == (("a", "1"), ("a", "2"))
    assert packet.properties.subscription_identifiers == (5, 6)
    subscribe = raw(0x82, b"\x00\x01\x04\x0b\x05\x0b\x06" + s("a") + b"\x00")
    refused(subscribe, 0x82, "Subscription Identifier", "twice", version=V5)


def test_a_property_not_allowed_in_the_packet_is_a_protocol_error() -> None:
    refused(_publish_with(b"\x11\x00\x00\x00\x01"), 0x82, "Session Expiry Interval", "not allowed", version=V5)
    will = s("id") + b"\x02\x21\x00\x01" + s("w") + s("x")  # Receive Maximum is no will property
    refused(connect_raw(V5, 0x06, will), 0x82, "Receive Maximum", "will properties")


def test_an_unknown_property_is_malformed() -> None:
    refused(_publish_with(b"\x04\x00"), 0x81, "unknown property 0x04", version=V5)


@pytest.mark.parametrize(("block", "name"), [
    (b"\x01\x02", "Payload Format Indicator"),
    (b"\x0b\x00", "Subscription Identifier"),
    (b"\x23\x00\x00", "Topic Alias"),
])
def test_forbidden_property_values_are_protocol_errors(block: bytes, name: str) -> None:
    refused(_publish_with(block), 0x82, name, version=V5)


def test_forbidden_connack_property_values_are_protocol_errors() -> None:
    for block in (b"\x24\x02", b"\x21\x00\x00", b"\x27\x00\x00\x00\x00", b"\x16\x00\x00", b"\x2a\x05"):
        refused(raw(0x20, b"\x00\x00" + varint_bytes(len(block)) + block), 0x82, version=V5)


def test_a_property_length_overrunning_the_packet_is_malformed() -> None:
    refused(raw(0x30, s("t") + b"\x05\x23\x00"), 0x81, "truncated", version=V5)
    refused(_publish_with(b"\x23\x00"), 0x81, "Topic Alias", "truncated", version=V5)


# -- one test per normative statement --------------------------------------------------------------------------------

ILL_FORMED = [b"\xff", b"\xc0\x80", b"\xed\xa0\x80", b"a\xe2\x82", b"\xf4\x90\x80\x80"]


@pytest.mark.parametrize("bad", ILL_FORMED)
def test_MQTT_1_5_3_1_ill_formed_utf8_is_malformed_v311(bad: bytes) -> None:
    """Overlong, surrogate (U+D800), truncated and out-of-range sequences close the connection."""
    refused(connect_raw(V311, payload=s(bad)), 0x81, "client identifier", "MQTT-1.5.4-1")
    refused(raw(0x30, s(b"a" + bad)), 0x81, "topic name", version=V311)


@pytest.mark.parametrize("bad", ILL_FORMED)
def test_MQTT_1_5_4_1_ill_formed_utf8_is_malformed_v5(bad: bytes) -> None:
    refused(connect_raw(V5, payload=s(bad)), 0x81, "client identifier", "MQTT-1.5.4-1")
    refused(_publish_with(b"\x03" + s(bad)), 0x81, "Content Type", version=V5)


def test_MQTT_1_5_3_2_null_character_is_malformed_v311() -> None:
    refused(connect_raw(V311, 0x82, s("id") + s(b"u\x00")), 0x81, "user name", "U+0000")


def test_MQTT_1_5_4_2_null_character_is_malformed_v5() -> None:
    refused(_publish_with(b"\x26" + s("k") + s(b"\x00")), 0x81, "User Property value", "U+0000", version=V5)


def _bom_is_kept(version: int) -> None:
    [packet] = accepted(raw(0x30, s(b"\xef\xbb\xbfa\xef\xbb\xbf") + (b"\x00" if version == V5 else b"")), version)
    assert isinstance(packet, Publish) and packet.topic == "\ufeffa\ufeff"


def test_MQTT_1_5_3_3_a_bom_is_kept_v311() -> None:
    """EF BB BF is U+FEFF wherever it is, never skipped or stripped."""
    _bom_is_kept(V311)


def test_MQTT_1_5_4_3_a_bom_is_kept_v5() -> None:
    _bom_is_kept(V5)


def test_MQTT_1_5_5_1_variable_byte_integers_in_fewest_bytes_v5() -> None:
    refused(b"\x30\x83\x00" + s("a") + b"\x00", 0x81, "remaining length", "fewest", version=V5)
    refused(raw(0x30, s("a") + b"\x80\x00"), 0x81, "property length", "fewest", version=V5)
    refused(_publish_with(b"\x0b\x81\x00"), 0x81, "Subscription Identifier", "fewest", version=V5)


@pytest.mark.parametrize("first", [0x11, 0x18, 0x21, 0x41, 0x52, 0x78, 0x93, 0xB1, 0xC4, 0xD8])
def test_MQTT_2_2_2_2_invalid_fixed_header_flags_are_malformed_v311(first: int) -> None:
    """3.1.1 MQTT-2.2.2-1/-2: reserved flags must be as listed; otherwise the receiver closes."""
    data = connect_raw(V311) if first >> 4 == 1 else bytes([first, 0])
    data = bytes([first]) + data[1:]
    refused(data, 0x81, "fixed header flags", version=None if first >> 4 == 1 else V311)


@pytest.mark.parametrize("first", [0x12, 0x24, 0x48, 0x51, 0x74, 0x98, 0xB2, 0xC1, 0xD2, 0xF8])
def test_MQTT_2_1_3_1_reserved_fixed_header_flags_are_malformed_v5(first: int) -> None:
    data = connect_raw(V5) if first >> 4 == 1 else bytes([first, 0])
    data = bytes([first]) + data[1:]
    refused(data, 0x81, "fixed header flags", version=None if first >> 4 == 1 else V5)


def _zero_packet_ids(version: int) -> list[bytes]:
    props = b"\x00" if version == V5 else b""
    return [
        raw(0x32, s("a") + b"\x00\x00" + props), raw(0x82, b"\x00\x00" + props + s("a") + b"\x00"),
        raw(0xA2, b"\x00\x00" + props + s("a")), bytes.fromhex("40 02 00 00"), bytes.fromhex("62 02 00 00"),
    ]


@pytest.mark.parametrize("index", range(5))
def test_MQTT_2_3_1_1_packet_identifiers_are_non_zero_v311(index: int) -> None:
    refused(_zero_packet_ids(V311)[index], 0x82, "packet identifier", version=V311)


@pytest.mark.parametrize("index", range(5))
def test_MQTT_2_2_1_3_packet_identifiers_are_non_zero_v5(index: int) -> None:
    refused(_zero_packet_ids(V5)[index], 0x82, "packet identifier", "MQTT-2.2.1-3", version=V5)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_1_0_1_the_first_packet_must_be_connect(version: int) -> None:
    refused(bytes.fromhex("c0 00"), 0x82, "MQTT-3.1.0-1")
    refused(encode(Publish("a"), version), 0x82, "MQTT-3.1.0-1")
    with pytest.raises(MQTTError, match="MQTT-3.1.0-1"):
        decode(bytes.fromhex("c0 00"))


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_1_0_2_a_second_connect_is_a_protocol_error(version: int) -> None:
    refused(connect_raw(version) + connect_raw(version), 0x82, "MQTT-3.1.0-2")
    refused(connect_raw(version), 0x82, "MQTT-3.1.0-2", version=version)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_1_2_1_the_protocol_name_must_be_MQTT(version: int) -> None:
    refused(connect_raw(version, name=s("MQTX")), 0x81, "protocol name", "MQTT-3.1.2-1")
    refused(connect_raw(version, name=s("mqtt")), 0x81, "protocol name")


@pytest.mark.parametrize(("name", "level"), [("MQTT", 3), ("MQIsdp", 3), ("MQTT", 6), ("MQTT", 0), ("MQTT", 255)])
def test_MQTT_3_1_2_2_an_unsupported_protocol_level_is_0x84_and_says_the_level(name: str, level: int) -> None:
    """0x84 comes with the level asked for: 3 (MQTT 3.1, 'MQIsdp') gets a 3.1.1-style CONNACK 1."""
    error = refused(raw(0x10, s(name) + bytes([level]) + b"\x02\x00\x3c" + s("id")), 0x84, "MQTT-3.1.2-2")
    assert error.protocol_level == level


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_1_2_3_reserved_connect_flag_is_malformed(version: int) -> None:
    refused(connect_raw(version, 0x03), 0x81, "connect flags", "MQTT-3.1.2-3")


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_1_2_9_the_will_fields_must_be_present_with_the_will_flag(version: int) -> None:
    will_properties = b"\x00" if version == V5 else b""
    refused(connect_raw(version, 0x06, s("id")), 0x81, "truncated")
    refused(connect_raw(version, 0x06, s("id") + will_properties + s("w")), 0x81, "will payload", "truncated")


def test_MQTT_3_1_2_11_no_will_fields_without_the_will_flag_v311() -> None:
    refused(connect_raw(V311, 0x02, s("id") + s("w") + s("x")), 0x81, "after the last field")


def test_MQTT_3_1_2_13_will_qos_without_the_will_flag_is_malformed_v311() -> None:
    refused(connect_raw(V311, 0x0A), 0x81, "MQTT-3.1.2-13")


def test_MQTT_3_1_2_11_will_qos_without_the_will_flag_is_malformed_v5() -> None:
    refused(connect_raw(V5, 0x12), 0x81, "MQTT-3.1.2-11")


def test_MQTT_3_1_2_14_will_qos_3_is_malformed_v311() -> None:
    refused(connect_raw(V311, 0x1E, s("id") + s("w") + s("x")), 0x81, "MQTT-3.1.2-14")


def test_MQTT_3_1_2_12_will_qos_3_is_malformed_v5() -> None:
    refused(connect_raw(V5, 0x1E, s("id") + b"\x00" + s("w") + s("x")), 0x81, "MQTT-3.1.2-12")


def test_MQTT_3_1_2_15_will_retain_without_the_will_flag_is_malformed_v311() -> None:
    refused(connect_raw(V311, 0x22), 0x81, "MQTT-3.1.2-15")


def test_MQTT_3_1_2_13_will_retain_without_the_will_flag_is_malformed_v5() -> None:
    refused(connect_raw(V5, 0x22), 0x81, "MQTT-3.1.2-13")


def test_MQTT_3_1_2_18_and_20_no_user_name_or_password_without_their_flags_v311() -> None:
    refused(connect_raw(V311, 0x02, s("id") + s("u")), 0x81, "after the last field")
    refused(connect_raw(V311, 0x82, s("id") + s("u") + s("p")), 0x81, "after the last field")


def test_MQTT_3_1_2_19_and_21_user_name_and_password_present_with_their_flags_v311() -> None:
    refused(connect_raw(V311, 0x82, s("id")), 0x81, "user name", "truncated")
    refused(connect_raw(V311, 0xC2, s("id") + s("u")), 0x81, "password", "truncated")


def test_MQTT_3_1_2_16_and_18_no_user_name_or_password_without_their_flags_v5() -> None:
    refused(connect_raw(V5, 0x02, s("id") + s("u")), 0x81, "after the last field")
    refused(connect_raw(V5, 0x82, s("id") + s("u") + s("p")), 0x81, "after the last field")


def test_MQTT_3_1_2_17_and_19_user_name_and_password_present_with_their_flags_v5() -> None:
    refused(connect_raw(V5, 0x82, s("id")), 0x81, "user name", "truncated")
    refused(connect_raw(V5, 0x42, s("id")), 0x81, "password", "truncated")


def test_MQTT_3_1_2_22_no_password_without_a_user_name_v311() -> None:
    """MQTT 5 dropped the rule: there a password without a user name is fine."""
    refused(connect_raw(V311, 0x42, s("id") + s("p")), 0x81, "MQTT-3.1.2-22")
    assert accepted(connect_raw(V5, 0x42, s("id") + s("p"))) == [Connect(V5, "id", True, 60, None, b"p")]


def test_MQTT_3_1_3_10_the_will_topic_is_a_topic_name_v311() -> None:
    """A UTF-8 string (5.0 numbers it MQTT-3.1.3-11) and, as any topic name, without wildcards."""
    refused(connect_raw(V311, 0x06, s("id") + s("w/#") + s("x")), 0x81, "will topic", "wildcard")
    refused(connect_raw(V311, 0x06, s("id") + s(b"\xff") + s("x")), 0x81, "will topic", "UTF-8")


def test_MQTT_3_2_2_1_connack_reserved_flags_are_malformed_v5() -> None:
    refused(bytes.fromhex("20 03 02 00 00"), 0x81, "acknowledge flags", "MQTT-3.2.2-1", version=V5)


def test_connack_reserved_flags_are_malformed_v311() -> None:
    """3.1.1 section 3.2.2.1: bits 7-1 of the acknowledge flags are reserved (no statement number)."""
    refused(bytes.fromhex("20 02 80 00"), 0x81, "acknowledge flags", version=V311)


def test_MQTT_3_2_2_4_no_session_present_with_a_refusal_v311() -> None:
    refused(bytes.fromhex("20 02 01 05"), 0x82, "MQTT-3.2.2-4", version=V311)


def test_MQTT_3_2_2_6_no_session_present_with_a_refusal_v5() -> None:
    refused(bytes.fromhex("20 03 01 87 00"), 0x82, "MQTT-3.2.2-6", version=V5)


def test_connack_return_codes_are_0_to_5_v311() -> None:
    """3.1.1 section 3.2.2.3: return codes 6-255 are reserved (no statement number)."""
    refused(bytes.fromhex("20 02 00 06"), 0x82, "CONNACK", version=V311)


def test_MQTT_3_2_2_8_connack_reason_codes_v5() -> None:
    refused(bytes.fromhex("20 03 00 05 00"), 0x82, "MQTT-3.2.2-8", version=V5)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_3_1_2_dup_on_a_qos_0_publish_is_malformed(version: int) -> None:
    refused(after_connect(version, raw(0x38, s("a") + b"\x00")), 0x81, "DUP", "MQTT-3.3.1-2")


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_3_1_4_publish_qos_3_is_malformed(version: int) -> None:
    refused(after_connect(version, raw(0x36, s("a") + b"\x00\x01\x00")), 0x81, "QoS 3", "MQTT-3.3.1-4")


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_3_2_1_the_topic_name_is_a_utf8_string(version: int) -> None:
    refused(raw(0x30, s(b"a\xc3")), 0x81, "topic name", "UTF-8", version=version)


@pytest.mark.parametrize("topic", ["a/+", "+", "#", "a/#", "a+b", "sport/tennis#"])
@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_3_2_2_wildcards_in_a_topic_name_are_malformed(topic: str, version: int) -> None:
    """Also 3.1.1 MQTT-4.7.1-1 and 5.0 MQTT-4.7.0-1: wildcards never in topic names."""
    body = s(topic) + (b"\x00" if version == V5 else b"")
    refused(after_connect(version, raw(0x30, body)), 0x81, "topic name", "MQTT-3.3.2-2")


def test_MQTT_3_3_2_8_a_topic_alias_of_0_is_a_protocol_error_v5() -> None:
    refused(_publish_with(b"\x23\x00\x00"), 0x82, "Topic Alias", "must not be 0", version=V5)


def test_MQTT_3_3_2_14_the_response_topic_has_no_wildcards_v5() -> None:
    refused(_publish_with(b"\x08" + s("r/#")), 0x82, "Response Topic", "MQTT-3.3.2-14", version=V5)


def test_an_empty_topic_name_needs_a_topic_alias_v5() -> None:
    """5.0 section 3.3.2.1: a zero-length Topic Name without a Topic Alias is a Protocol Error."""
    refused(raw(0x30, s("") + b"\x00"), 0x82, "topic name", version=V5)
    assert accepted(raw(0x30, s("") + b"\x03\x23\x00\x01"), V5) == [Publish("", properties=Properties(topic_alias=1))]


@pytest.mark.parametrize(("statement", "first"), [("MQTT-3.4.2-1", 0x40), ("MQTT-3.5.2-1", 0x50),
                                                  ("MQTT-3.6.2-1", 0x62), ("MQTT-3.7.2-1", 0x70)])
def test_MQTT_3_4_2_1_3_5_2_1_3_6_2_1_3_7_2_1_publish_response_reason_codes_v5(statement: str, first: int) -> None:
    """One statement per packet type: each takes only its own table's reason codes."""
    refused(bytes([first, 3, 0, 1, 0x05]), 0x82, statement, version=V5)
    if first in (0x62, 0x70):
        refused(bytes([first, 3, 0, 1, 0x10]), 0x82, statement, version=V5)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_6_1_1_pubrel_flags_must_be_0010(version: int) -> None:
    refused(bytes.fromhex("60 02 00 01"), 0x81, "MQTT-3.6.1-1", version=version)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_8_1_1_subscribe_flags_must_be_0010(version: int) -> None:
    data = encode(Subscribe(1, (("a", SubscriptionOptions()),)), version)
    refused(bytes([0x80]) + data[1:], 0x81, "MQTT-3.8.1-1", version=version)
    refused(bytes([0x83]) + data[1:], 0x81, "MQTT-3.8.1-1", version=version)


def test_MQTT_3_8_3_3_subscribe_without_filters_is_a_protocol_error_v311() -> None:
    refused(bytes.fromhex("82 02 00 01"), 0x82, "no topic filter", "MQTT-3.8.3-3", version=V311)


def test_MQTT_3_8_3_2_subscribe_without_filters_is_a_protocol_error_v5() -> None:
    refused(bytes.fromhex("82 03 00 01 00"), 0x82, "no topic filter", "MQTT-3.8.3-2", version=V5)


@pytest.mark.parametrize("options", [0x03, 0x04, 0x80, 0xFD])
def test_MQTT_3_8_3_4_reserved_option_bits_and_qos_3_are_malformed_v311(options: int) -> None:
    refused(raw(0x82, b"\x00\x01" + s("a") + bytes([options])), 0x81, "MQTT-3.8.3-4", version=V311)


@pytest.mark.parametrize("options", [0x40, 0x80, 0xC1])
def test_MQTT_3_8_3_5_reserved_option_bits_are_malformed_v5(options: int) -> None:
    refused(raw(0x82, b"\x00\x01\x00" + s("a") + bytes([options])), 0x81, "MQTT-3.8.3-5", version=V5)


def test_subscription_qos_3_and_retain_handling_3_are_protocol_errors_v5() -> None:
    """5.0 section 3.8.3.1 (no statement number): Maximum QoS 3 and Retain Handling 3."""
    refused(raw(0x82, b"\x00\x01\x00" + s("a") + b"\x03"), 0x82, "Maximum QoS 3", version=V5)
    refused(raw(0x82, b"\x00\x01\x00" + s("a") + b"\x30"), 0x82, "Retain Handling 3", version=V5)


def test_MQTT_3_8_3_4_no_local_on_a_shared_subscription_is_a_protocol_error_v5() -> None:
    refused(raw(0x82, b"\x00\x01\x00" + s("$share/g/a") + b"\x04"), 0x82, "MQTT-3.8.3-4", version=V5)
    [packet] = accepted(raw(0x82, b"\x00\x01\x00" + s("$share/g/a") + b"\x01"), V5)
    assert packet == Subscribe(1, (("$share/g/a", SubscriptionOptions(1)),))


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_9_3_2_suback_codes(version: int) -> None:
    """3.1.1: only 0x00, 0x01, 0x02 and 0x80; 5.0: the Subscribe Reason Codes."""
    props = b"\x00" if version == V5 else b""
    refused(raw(0x90, b"\x00\x01" + props + b"\x03"), 0x82, "SUBACK", version=version)
    refused(raw(0x90, b"\x00\x01" + props), 0x82, "no reason code", version=version)
    assert accepted(raw(0x90, b"\x00\x01" + props + b"\x80"), version) == [Suback(1, (0x80,))]
    topic_filter_invalid = raw(0x90, b"\x00\x01" + props + b"\x8f")
    if version == V5:
        assert accepted(topic_filter_invalid, V5) == [Suback(1, (0x8F,))]
    else:
        refused(topic_filter_invalid, 0x82, "SUBACK", version=V311)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_10_1_1_unsubscribe_flags_must_be_0010(version: int) -> None:
    data = encode(Unsubscribe(1, ("a",)), version)
    refused(bytes([0xA0]) + data[1:], 0x81, "MQTT-3.10.1-1", version=version)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_10_3_2_unsubscribe_without_filters_is_a_protocol_error(version: int) -> None:
    refused(raw(0xA2, b"\x00\x01" + (b"\x00" if version == V5 else b"")), 0x82, "MQTT-3.10.3-2", version=version)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_10_3_1_unsubscribe_filters_are_valid_topic_filters(version: int) -> None:
    props = b"\x00" if version == V5 else b""
    refused(raw(0xA2, b"\x00\x01" + props + s("a/#/b")), 0x81, "topic filter", "MQTT-4.7.1-2", version=version)


def test_MQTT_3_11_3_2_unsuback_reason_codes_v5() -> None:
    refused(bytes.fromhex("b0 04 00 01 00 10"), 0x82, "MQTT-3.11.3-2", version=V5)
    refused(bytes.fromhex("b0 03 00 01 00"), 0x82, "no reason code", version=V5)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_3_14_1_1_disconnect_reserved_flags_are_malformed(version: int) -> None:
    refused(bytes.fromhex("e1 00"), 0x81, "MQTT-3.14.1-1", version=version)


def test_MQTT_3_14_2_1_disconnect_reason_codes_v5() -> None:
    refused(bytes.fromhex("e0 01 01"), 0x82, "MQTT-3.14.2-1", version=V5)


def test_MQTT_3_15_1_1_auth_reserved_flags_are_malformed_v5() -> None:
    refused(bytes.fromhex("f1 00"), 0x81, "MQTT-3.15.1-1", version=V5)


def test_MQTT_3_15_2_1_auth_reason_codes_v5() -> None:
    refused(bytes.fromhex("f0 01 04"), 0x82, "MQTT-3.15.2-1", version=V5)


def _subscribe(version: int, topic_filter: str) -> bytes:
    return raw(0x82, b"\x00\x01" + (b"\x00" if version == V5 else b"") + s(topic_filter) + b"\x00")


@pytest.mark.parametrize("topic_filter", ["a/#/b", "a#", "#/", "a/b#", "##"])
@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_4_7_1_2_the_multi_level_wildcard_is_last_and_alone(topic_filter: str, version: int) -> None:
    refused(_subscribe(version, topic_filter), 0x81, "topic filter", "MQTT-4.7.1-2", version=version)


@pytest.mark.parametrize("topic_filter", ["a+", "+a", "a/b+/c", "++", "a/+b"])
@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_4_7_1_3_the_single_level_wildcard_fills_its_level(topic_filter: str, version: int) -> None:
    refused(_subscribe(version, topic_filter), 0x81, "topic filter", "MQTT-4.7.1-3", version=version)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_4_7_3_1_topic_names_and_filters_are_not_empty(version: int) -> None:
    refused(_subscribe(version, ""), 0x81, "topic filter", "MQTT-4.7.3-1", version=version)
    if version == V311:
        refused(raw(0x30, s("")), 0x81, "topic name", "MQTT-4.7.3-1", version=V311)


@pytest.mark.parametrize("version", VERSIONS)
def test_MQTT_4_7_3_2_topic_names_and_filters_hold_no_null_character(version: int) -> None:
    refused(_subscribe(version, "a\x00"), 0x81, "topic filter", "U+0000", version=version)


def test_MQTT_4_8_2_1_a_share_name_is_at_least_one_character_v5() -> None:
    refused(_subscribe(V5, "$share//a"), 0x81, "MQTT-4.8.2-1", version=V5)


@pytest.mark.parametrize("topic_filter", ["$share/g", "$share/g+/a", "$share/#/a", "$share/g/"])
def test_MQTT_4_8_2_2_a_share_name_is_followed_by_a_slash_and_a_filter_v5(topic_filter: str) -> None:
    refused(_subscribe(V5, topic_filter), 0x81, version=V5)


def test_share_is_an_ordinary_level_in_v311() -> None:
    for topic_filter in ("$share/g", "$share/g/", "$share//a"):
        assert accepted(_subscribe(V311, topic_filter), V311) == [
            Subscribe(1, ((topic_filter, SubscriptionOptions()),))]


@settings(max_examples=200, deadline=None)
@given(st.text(min_size=1, max_size=30).filter(lambda t: not set(t) & {"+", "#", "\x00"} and
                                                 not any(0xD800 <= ord(c) <= 0xDFFF for c in t)),
       st.binary(max_size=300), st.integers(0, 2), st.booleans(), st.booleans(),
       st.integers(1, 65535), st.sampled_from([4, 5]), st.lists(st.tuples(st.text(max_size=5), st.text(max_size=5)),
                                                              max_size=2))
def test_the_fast_publish_encoder_writes_what_encode_writes(
    topic: str, payload: bytes, qos: int, retain: bool, dup: bool, packet_id: int, version: int,
    user: list[tuple[str, str]],
) -> None:
    from mqtt.codec import properties_bytes, publish_bytes, topic_bytes

    user = [(k, v) for k, v in user if "\x00" not in k + v and not any(0xD800 <= ord(c) <= 0xDFFF for c in k + v)]
    props = Properties(user_properties=tuple(user)) if version == 5 else Properties()
    expected = encode(Publish(topic, payload, qos, retain, dup and qos > 0, packet_id if qos else None, props), version)
    block = properties_bytes(props) if version == 5 else None
    assert publish_bytes(topic_bytes(topic), payload, qos, retain, packet_id if qos else None, block,
                         dup and qos > 0) == expected
