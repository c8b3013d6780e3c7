"""Values given as text (what MQTT publishes carry) and values delivered without being kept."""

from __future__ import annotations

import math
from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics import types
from topics.errors import InvalidValueError
from topics.protocol import (
    Added, AddTopic, Appended, Changed, Failed, FetchTopics, Ok, Register, SetValue, decode_event,
    decode_operation, encode_event, encode_operation,
)
from topics.store import TopicStore
from topics.types import TEXT, TopicType

T = TopicType


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


@pytest.mark.parametrize(("topic_type", "text", "value"), [
    (T.STRING, b"h\xc3\xa9 there ", "hé there "),
    (T.INT64, b" -42\n", -42),
    (T.INT64, b"9223372036854775807", 2**63 - 1),
    (T.DOUBLE, b"2.5", 2.5),
    (T.DOUBLE, b"7", 7.0),
    (T.DOUBLE, b"-6.02e23", -6.02e23),
    (T.DOUBLE, b"-Infinity", -math.inf),
    (T.JSON, b' {"a": [1, 2.5, null, "x"]} ', {"a": [1, 2.5, None, "x"]}),
    (T.JSON, b"null", None),
    (T.STRING, b"", None),
    (T.INT64, b"", None),
])
def test_text_reads_as_the_topic_type_says(topic_type: TopicType, text: bytes, value: Any) -> None:
    assert types.decode(topic_type, types.from_text(topic_type, text)) == value


def test_binary_text_is_the_bytes_themselves() -> None:
    assert types.from_text(T.BINARY, b"\x00\xff") == b"\x00\xff"
    assert types.to_text(T.BINARY, b"\x00\xff") == b"\x00\xff"


@pytest.mark.parametrize(("topic_type", "text", "why"), [
    (T.STRING, b"\xff", "UTF-8"),
    (T.INT64, b"1.5", "decimal integer"),
    (T.INT64, b"9223372036854775808", "INT64 range"),
    (T.INT64, b"0x10", "decimal integer"),
    (T.DOUBLE, b"one", "decimal number"),
    (T.DOUBLE, b"1e999", "too large"),
    (T.JSON, b"{", "not JSON"),
    (T.JSON, b"NaN", "not JSON"),
    (T.JSON, b"[" * 300, "nested deeper"),
])
def test_text_that_does_not_convert_is_refused_saying_why(topic_type: TopicType, text: bytes, why: str) -> None:
    with pytest.raises(InvalidValueError, match=why):
        types.from_text(topic_type, text)


@given(st.text().filter(lambda s: s != ""))
def test_strings_round_trip(text: str) -> None:
    assert types.to_text(T.STRING, types.from_text(T.STRING, text.encode())) == text.encode()


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1))
def test_integers_round_trip(n: int) -> None:
    assert types.to_text(T.INT64, types.from_text(T.INT64, str(n).encode())) == str(n).encode()


@given(st.floats())
def test_doubles_round_trip(x: float) -> None:
    back = types.decode(T.DOUBLE, types.from_text(T.DOUBLE, types.to_text(T.DOUBLE, cb(x))))
    assert back == x or (math.isnan(x) and math.isnan(back))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_json_round_trips(value: Any) -> None:
    stored = types.encode(T.JSON, value)
    assert types.from_text(T.JSON, types.to_text(T.JSON, stored)) == stored


# -- the store ------------------------------------------------------------------------


def test_a_text_set_converts_to_the_topic_type() -> None:
    store = TopicStore()
    store.apply("g", [AddTopic("n", "INT64", None), AddTopic("j", "JSON", None)])
    results = store.apply("g", [SetValue("n", b"12", TEXT), SetValue("j", b'{"a":1}', TEXT), SetValue("n", b"x", TEXT)])
    assert isinstance(results[0], Ok) and isinstance(results[1], Ok)
    assert isinstance(results[2], Failed) and results[2].code == "INVALID_VALUE"
    assert store.tree.get("n").value == cb(12)  # type: ignore[union-attr]  # the bad one changed nothing
    assert store.tree.get("j").value == cb({"a": 1})  # type: ignore[union-attr]


def test_a_text_set_adds_a_topic_of_the_type_asked_for_else_binary() -> None:
    store = TopicStore()
    store.apply("g", [SetValue("s", b"hi", TEXT, "STRING", True), SetValue("b", b"hi", TEXT, None, True)])
    assert store.tree.get("s").specification.type is T.STRING  # type: ignore[union-attr]
    assert store.tree.get("b").specification.type is T.BINARY  # type: ignore[union-attr]
    assert store.tree.get("b").value == b"hi"  # type: ignore[union-attr]


def test_a_text_set_on_a_time_series_appends_an_event_by_its_author() -> None:
    store = TopicStore(lambda: 1_700_000_000_000)
    properties = {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64"}
    store.apply("g", [AddTopic("ts", "TIME_SERIES", properties), Register(">ts", 1)])
    store.drain_events()
    (result,) = store.apply("g", [SetValue("ts", b"5", TEXT, None, False, True, "alice")])
    assert isinstance(result, Ok), result
    (event,) = store.drain_events()["g"]
    assert isinstance(event, Appended) and event.event.value == cb(5) and event.event.author == "alice"
    (refused,) = store.apply("g", [SetValue("ts", cb(5), False)])
    assert isinstance(refused, Failed)  # a CBOR set still must append


def test_a_value_not_retained_is_delivered_and_not_kept() -> None:
    store = TopicStore(record_changes=True)
    store.apply("g", [SetValue("a", cb("kept"), False, None, True), Register(">a", 1)])
    store.drain_events()
    store.drain_changes()
    store.apply("g", [SetValue("a", cb("passing"), False, None, False, False)])
    assert store.drain_events() == {"g": [Changed("a", cb("passing"), False)]}
    assert store.tree.get("a").value == cb("kept")  # type: ignore[union-attr]
    assert store.drain_changes() == []  # nothing to journal
    rows = store.apply("g", [FetchTopics(">a")])[0]
    assert isinstance(rows, Ok) and rows.value[0].value == cb("kept")


def test_a_topic_added_for_a_value_not_retained_has_no_value() -> None:
    store = TopicStore()
    store.apply("g", [Register("?n/.*", 1)])
    store.drain_events()
    store.apply("g", [SetValue("n/1", b"x", TEXT, "STRING", True, False)])
    assert store.drain_events() == {"g": [Added("n/1", "STRING", [], None), Changed("n/1", cb("x"), False)]}
    assert store.tree.get("n/1").value is None  # type: ignore[union-attr]


def test_the_wire_keeps_the_common_set_and_change_as_short_as_before() -> None:
    assert encode_operation(SetValue("a", b"x", False)) == [2, "a", b"x", False, None, False]
    full = SetValue("a", b"x", TEXT, None, True, False, "bob")
    assert decode_operation(encode_operation(full)) == full
    assert encode_event(Changed("a", b"x")) == [4, "a", b"x"]
    assert decode_event(encode_event(Changed("a", b"x", False))) == Changed("a", b"x", False)
    assert decode_event(encode_event(Changed("a", b"x"))) == Changed("a", b"x")
