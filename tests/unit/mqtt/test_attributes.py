"""The attributes an MQTT publish's value carries to its subscribers (mqtt/attributes.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqtt.attributes import UNKNOWN, Attributes, decode_attributes, encode_attributes, for_subscriber
from mqtt.properties import EMPTY, Properties


@given(
    qos=st.integers(0, 2), retain=st.booleans(), origin=st.text(max_size=40),
    deadline=st.none() | st.integers(0, 2**63 - 1),
    expiry=st.none() | st.integers(0, 2**32 - 1), correlation=st.none() | st.binary(max_size=20),
)
def test_what_is_written_reads_back(
    qos: int, retain: bool, origin: str, deadline: int | None, expiry: int | None, correlation: bytes | None
) -> None:
    properties = Properties(message_expiry_interval=expiry, correlation_data=correlation)
    if properties == EMPTY:
        properties = EMPTY
    decoded = decode_attributes(encode_attributes(qos, retain, origin, properties, deadline))
    origin_kept = origin.encode()[:255].decode(errors="ignore")
    assert decoded.qos == qos and decoded.retain == retain and decoded.deadline == deadline
    assert decoded.origin == origin_kept or len(origin.encode()) > 255
    assert decoded.properties == properties


def test_only_forwarded_properties_travel() -> None:
    """A topic alias concerns one connection, subscription identifiers are the server's."""
    sent = Properties(topic_alias=3, subscription_identifiers=(7,), content_type="text/plain")
    assert decode_attributes(encode_attributes(1, False, "s", sent)).properties == Properties(content_type="text/plain")
    assert decode_attributes(encode_attributes(1, False, "s", Properties(topic_alias=3))).properties == EMPTY


def test_other_attributes_read_as_unknown() -> None:
    for foreign in (b"", b"\x00", b"\x01\x00\x00", b"\xff\x00\x00", b"\x0b\x00\x00", b"\x18\x00\x00\x01", b"\x08\x05ab"):
        assert decode_attributes(foreign) == UNKNOWN, foreign
    assert UNKNOWN == Attributes(2, False, "", EMPTY, None)


def test_a_subscriber_gets_what_is_left_of_the_interval_and_its_own_identifiers() -> None:
    forwarded = Properties(message_expiry_interval=60, content_type="t")
    assert for_subscriber(EMPTY, forwarded) is forwarded
    assert for_subscriber(EMPTY, forwarded, 41_200).message_expiry_interval == 42  # rounded up
    assert for_subscriber(EMPTY, forwarded, 41_000).message_expiry_interval == 41
    own = Properties(subscription_identifiers=(5,))
    both = for_subscriber(own, forwarded, 1)
    assert (both.subscription_identifiers, both.message_expiry_interval, both.content_type) == ((5,), 1, "t")
