"""Values given as text (what MQTT publishes carry) and values delivered without being kept."""

from __future__ import annotations

import json
import math
import re
from typing import Any

import cbor2
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from topics import types
from topics.errors import InvalidValueError
from topics.protocol import (
    Added, AddTopic, Appended, Changed, Failed, FetchTopics, Ok, Register, SetValue, decode_event,
    decode_operation, encode_event, encode_operation,
)
from topics.store import TopicStore
from topics.types import INT64_MAX, INT64_MIN, MAX_JSON_DEPTH, TEXT, TopicType

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


@pytest.mark.parametrize(
    ("topic_type", "text", "value", "canonical"),
    [
        (T.STRING, b"hello", "hello", b"hello"),
        (T.STRING, b"", None, b""),  # an empty text is no value
        (T.STRING, "ünï ✓".encode(), "ünï ✓", "ünï ✓".encode()),
        (T.STRING, b"\xef\xbb\xbfbom", "\ufeffbom", b"\xef\xbb\xbfbom"),  # a BOM is kept (MQTT-1.5.4-3)
        (T.STRING, b" 12 \n", " 12 \n", b" 12 \n"),
        (T.INT64, b"42", 42, b"42"),
        (T.INT64, b"-42", -42, b"-42"),
        (T.INT64, b"+007", 7, b"7"),
        (T.INT64, b" 42\n", 42, b"42"),
        (T.INT64, b"\t\r\n\x0b\x0c-1 ", -1, b"-1"),
        (T.INT64, b"9223372036854775807", INT64_MAX, b"9223372036854775807"),
        (T.INT64, b"-9223372036854775808", INT64_MIN, b"-9223372036854775808"),
        (T.INT64, b"-0000000000000000000000009223372036854775808", INT64_MIN, b"-9223372036854775808"),
        (T.INT64, b"", None, b""),
        (T.DOUBLE, b"1.5", 1.5, b"1.5"),
        (T.DOUBLE, b"1", 1.0, b"1.0"),
        (T.DOUBLE, b"-.5", -0.5, b"-0.5"),
        (T.DOUBLE, b"5.", 5.0, b"5.0"),
        (T.DOUBLE, b"1e300", 1e300, b"1e+300"),
        (T.DOUBLE, b"1E-400", 0.0, b"0.0"),  # below the range: rounds to zero
        (T.DOUBLE, b"-0.0", -0.0, b"-0.0"),
        (T.DOUBLE, b"0.1\n", 0.1, b"0.1"),
        (T.DOUBLE, b"Infinity", math.inf, b"Infinity"),
        (T.DOUBLE, b"-Infinity", -math.inf, b"-Infinity"),
        (T.DOUBLE, b"+inf", math.inf, b"Infinity"),
        (T.DOUBLE, b"-INF", -math.inf, b"-Infinity"),
        (T.DOUBLE, b"", None, b""),
        (T.JSON, b'{"b": 1, "a": [2.5, "\xc3\xa9", null, true]}', {"b": 1, "a": [2.5, "é", None, True]},
         b'{"b":1,"a":[2.5,"\xc3\xa9",null,true]}'),
        (T.JSON, b"null", None, b"null"),
        (T.JSON, b"", None, b"null"),  # an empty text is no value: JSON null, written "null"
        (T.JSON, b' "text" ', "text", b'"text"'),
        (T.JSON, b"18446744073709551615", 2**64 - 1, b"18446744073709551615"),
        (T.JSON, b"-18446744073709551616", -(2**64), b"-18446744073709551616"),
        (T.JSON, b'"\\u00e9\\n"', "é\n", b'"\xc3\xa9\\n"'),
        (T.BINARY, b"\x00\xff", b"\x00\xff", b"\x00\xff"),
        (T.BINARY, b"", b"", b""),
    ],
)
def test_text_converts_and_back(topic_type: TopicType, text: bytes, value: Any, canonical: bytes) -> None:
    stored = types.from_text(topic_type, text)
    assert stored == types.encode(topic_type, value)
    assert types.decode(topic_type, stored) == value
    assert types.to_text(topic_type, stored) == canonical
    assert types.from_text(topic_type, canonical) == stored


def test_double_nan() -> None:
    for text in [b"NaN", b"nan", b"-NaN", b" NAN\n", b"+nan"]:
        assert math.isnan(types.decode(T.DOUBLE, types.from_text(T.DOUBLE, text)))
    assert types.to_text(T.DOUBLE, types.encode(T.DOUBLE, math.nan)) == b"NaN"


def test_json_member_order_is_kept() -> None:
    stored = types.from_text(T.JSON, b'{"b":1,"a":2}')
    assert stored == cb({"b": 1, "a": 2})
    assert stored != types.from_text(T.JSON, b'{"a":2,"b":1}')


def test_no_value_is_the_empty_text() -> None:
    for t in (T.STRING, T.INT64, T.DOUBLE, T.JSON, T.BINARY):
        assert types.to_text(t, None) == b""
    for t in (T.STRING, T.INT64, T.DOUBLE):
        assert types.to_text(t, types.encode(t, None)) == b""
        assert types.from_text(t, b"") == types.encode(t, None)
    assert types.to_text(T.JSON, types.encode(T.JSON, None)) == b"null"
    # the one lossy case: the empty string's text is empty, which reads back as no value
    assert types.to_text(T.STRING, types.encode(T.STRING, "")) == b""


@pytest.mark.parametrize(("topic_type", "text", "why"), [
    (T.STRING, b"\xff", "UTF-8"),
    (T.STRING, b"ab\xc3", "UTF-8"),
    (T.STRING, b"\xed\xa0\x80", "UTF-8"),  # an encoded surrogate
    (T.INT64, b"1.5", "decimal integer"),
    (T.INT64, b"1.0", "decimal integer"),
    (T.INT64, b"1_000", "decimal integer"),
    (T.INT64, b"0x10", "decimal integer"),
    (T.INT64, "\u0663".encode(), "decimal integer"),  # ARABIC-INDIC DIGIT THREE
    (T.INT64, b"\xc2\xa012", "decimal integer"),  # NO-BREAK SPACE is not ASCII whitespace
    (T.INT64, b"\xff1", "decimal integer"),
    (T.INT64, b" ", "decimal integer"),
    (T.INT64, b"+", "decimal integer"),
    (T.INT64, b"1 2", "decimal integer"),
    (T.INT64, b"null", "decimal integer"),
    (T.INT64, b"9223372036854775808", "INT64 range"),
    (T.INT64, b"-9223372036854775809", "INT64 range"),
    (T.INT64, b"9" * 5000, "INT64 range"),
    (T.DOUBLE, b"one", "decimal number"),
    (T.DOUBLE, b"1_0.5", "decimal number"),
    (T.DOUBLE, b"0x1p3", "decimal number"),
    (T.DOUBLE, b"1.5f", "decimal number"),
    (T.DOUBLE, b"infinit", "decimal number"),
    (T.DOUBLE, b"nan(1)", "decimal number"),
    (T.DOUBLE, b"1e", "decimal number"),
    (T.DOUBLE, b".", "decimal number"),
    (T.DOUBLE, b" ", "decimal number"),
    (T.DOUBLE, "\u0663.5".encode(), "decimal number"),
    (T.DOUBLE, b"1" * 100_000 + b"x", "decimal number"),
    (T.DOUBLE, b"1e999", "outside the DOUBLE range"),
    (T.DOUBLE, b"1E309", "outside the DOUBLE range"),
    (T.DOUBLE, b"-1e400", "outside the DOUBLE range"),
    (T.DOUBLE, b"1" * 400, "outside the DOUBLE range"),
    (T.JSON, b"{", "not JSON text"),
    (T.JSON, b"[1] x", "not JSON text"),
    (T.JSON, b"NaN", "not JSON text: NaN is not a JSON number"),
    (T.JSON, b"[-Infinity]", "not a JSON number"),
    (T.JSON, b"1e400", "range of a 64-bit float"),
    (T.JSON, b'{"a":1,"a":2}', "twice"),
    (T.JSON, b'{"a":{"b":1,"b":1}}', "twice"),
    (T.JSON, b"\xff", "UTF-8"),
    (T.JSON, b"\xef\xbb\xbf{}", "byte order mark"),  # a BOM is not JSON
    (T.JSON, b"\x0b1", "not JSON text"),  # VT is not JSON whitespace
    (T.JSON, b"18446744073709551616", "64-bit CBOR range"),
    (T.JSON, b"-18446744073709551617", "64-bit CBOR range"),
    (T.JSON, b"1" * 5000, "64-bit CBOR range"),
    (T.JSON, b'"\\ud800"', "cannot encode"),
    (T.JSON, b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1), "nested deeper"),
    (T.JSON, b"[" * 300, "nested deeper"),
    (T.JSON, b"[" * 100_000, "nested deeper"),
])
def test_text_that_does_not_convert_is_refused_saying_why(topic_type: TopicType, text: bytes, why: str) -> None:
    with pytest.raises(InvalidValueError, match=re.escape(why)):
        types.from_text(topic_type, text)


def test_refused_text_is_shown_cut_short() -> None:
    with pytest.raises(InvalidValueError) as refused:
        types.from_text(T.INT64, b"x" * 10_000)
    assert len(str(refused.value)) < 200
    with pytest.raises(InvalidValueError, match=re.escape(r"b'\xff1'")):  # not UTF-8: shown as bytes
        types.from_text(T.DOUBLE, b"\xff1")


@pytest.mark.parametrize("call", [lambda t: types.from_text(t, b"1"), lambda t: types.to_text(t, b"\x01")])
def test_a_time_series_converts_with_its_event_value_type(call: Any) -> None:
    with pytest.raises(InvalidValueError, match="event value type"):
        call(T.TIME_SERIES)


def test_json_nested_to_the_limit_converts() -> None:
    text = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert types.to_text(T.JSON, types.from_text(T.JSON, text)) == text


def test_to_text_refuses_malformed_stored_values() -> None:
    with pytest.raises(InvalidValueError):
        types.to_text(T.STRING, b"")
    with pytest.raises(InvalidValueError):
        types.to_text(T.INT64, cb("x"))


@given(st.text().filter(lambda s: s != ""))
def test_strings_round_trip(text: str) -> None:
    stored = types.from_text(T.STRING, text.encode())
    assert stored == types.encode(T.STRING, text)
    assert types.to_text(T.STRING, stored) == text.encode()


@given(st.binary())
def test_only_utf8_converts_to_string(text: bytes) -> None:
    try:
        string = text.decode("utf-8")
    except UnicodeDecodeError:
        with pytest.raises(InvalidValueError, match="UTF-8"):
            types.from_text(T.STRING, text)
        with pytest.raises(InvalidValueError, match="UTF-8"):
            types.from_text(T.JSON, text)
    else:
        assert types.decode(T.STRING, types.from_text(T.STRING, text)) == (string or None)


SPACE = st.text(st.sampled_from(" \t\r\n\x0b\x0c"), max_size=2)


@given(st.integers(min_value=-(2**63), max_value=2**63 - 1), SPACE, SPACE)
def test_integers_round_trip(n: int, before: str, after: str) -> None:
    stored = types.from_text(T.INT64, str(n).encode())
    assert stored == types.encode(T.INT64, n)
    assert types.to_text(T.INT64, stored) == str(n).encode()
    assert types.from_text(T.INT64, (before + str(n) + after).encode()) == stored


@given(st.integers(min_value=INT64_MAX + 1) | st.integers(max_value=INT64_MIN - 1))
def test_integers_out_of_range_are_refused(n: int) -> None:
    with pytest.raises(InvalidValueError, match="INT64 range"):
        types.from_text(T.INT64, str(n).encode())


@given(st.floats(), SPACE, SPACE)
def test_doubles_round_trip(x: float, before: str, after: str) -> None:
    text = types.to_text(T.DOUBLE, cb(x))
    back = types.decode(T.DOUBLE, types.from_text(T.DOUBLE, text))
    assert back == x or (math.isnan(x) and math.isnan(back))
    again = types.from_text(T.DOUBLE, (before + text.decode() + after).encode())
    if math.isnan(x):
        assert text == b"NaN"
        assert math.isnan(types.decode(T.DOUBLE, again))
    else:
        assert again == types.encode(T.DOUBLE, x)
        assert types.to_text(T.DOUBLE, again) == text


@given(st.from_regex(r"[+-]?(?:[0-9]{1,5}(?:\.[0-9]{0,5})?|\.[0-9]{1,5})(?:[eE][+-]?[0-9]{1,3})?", fullmatch=True))
@example("1E309")
@example("-99999e999")
def test_double_text_reads_as_python_reads_it(text: str) -> None:
    expected = float(text)
    if math.isinf(expected):  # beyond the float range
        with pytest.raises(InvalidValueError, match="outside the DOUBLE range"):
            types.from_text(T.DOUBLE, text.encode())
    else:
        assert types.decode(T.DOUBLE, types.from_text(T.DOUBLE, text.encode())) == expected


DOUBLE = re.compile(
    r" *(?:(?P<number>[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)|[+-]?(?i:nan|inf|infinity)) *"
)


@given(st.text(st.sampled_from("0123456789+-.eEnaifINty _x"), min_size=1, max_size=8))
@example("1E309")
@example(" -9e999 ")
@example("-Inf")
def test_double_refuses_what_is_not_a_decimal_number(text: str) -> None:
    match = DOUBLE.fullmatch(text)
    if match is None:
        with pytest.raises(InvalidValueError, match="decimal number, NaN or Infinity"):
            types.from_text(T.DOUBLE, text.encode())
    elif match["number"] is not None and math.isinf(float(match["number"])):
        with pytest.raises(InvalidValueError, match="outside the DOUBLE range"):
            types.from_text(T.DOUBLE, text.encode())
    else:
        value = types.decode(T.DOUBLE, types.from_text(T.DOUBLE, text.encode()))
        assert value == float(text) or math.isnan(value)


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**64), 2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner, max_size=4),
    max_leaves=20,
)


@given(JSON)
def test_json_round_trips(value: Any) -> None:
    stored = types.encode(T.JSON, value)
    text = types.to_text(T.JSON, stored)
    assert text == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    assert types.from_text(T.JSON, text) == stored
    assert types.from_text(T.JSON, json.dumps(value, indent=2).encode()) == stored


@given(st.binary())
def test_binary_is_kept_as_is(data: bytes) -> None:
    assert types.from_text(T.BINARY, data) == data
    assert types.to_text(T.BINARY, data) == data


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


def test_attributes_go_with_the_value_and_are_never_kept() -> None:
    store = TopicStore(record_changes=True)
    store.apply("g", [SetValue("a", cb("v0"), False, None, True), Register(">a", 1)])
    store.drain_events()
    store.drain_changes()
    store.apply("g", [SetValue("a", cb("v1"), False, None, False, True, "", b"\x03meta")])
    store.apply("g", [SetValue("a", cb("v2"), False, None, False, False, "", b"\x03more")])
    assert store.drain_events() == {"g": [Changed("a", cb("v1"), True, b"\x03meta"), Changed("a", cb("v2"), False, b"\x03more")]}
    assert [type(c).__name__ for c in store.drain_changes()] == ["ValueSet"]  # the retained value, no attributes
    op = SetValue("a", cb("v1"), False, None, False, True, "", b"\x03meta")
    assert decode_operation(encode_operation(op)) == op
    event = Changed("a", b"x", True, b"\x03meta")
    assert decode_event(encode_event(event)) == event
