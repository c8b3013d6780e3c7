from __future__ import annotations

import json
import math
from typing import Any

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from topics.errors import InvalidValueError, TopicTypeError
from topics.types import (
    EVENT_VALUE_TYPES,
    MAX_JSON_DEPTH,
    TopicType,
    accept,
    check_json_text_depth,
    check_plain,
    decode,
    encode,
    encode_any,
    validate,
)

T = TopicType

ROUND_TRIPS: list[tuple[TopicType, Any]] = [
    (T.STRING, "hello"),
    (T.STRING, ""),
    (T.STRING, "ünïcødé ✓"),
    (T.STRING, None),
    (T.INT64, 0),
    (T.INT64, 2**63 - 1),
    (T.INT64, -(2**63)),
    (T.INT64, None),
    (T.DOUBLE, 1.5),
    (T.DOUBLE, -0.0),
    (T.DOUBLE, math.inf),
    (T.DOUBLE, None),
    (T.JSON, {"foo": "bar", "count": 43}),
    (T.JSON, [1, "two", 3.0, True, None, {"x": []}]),
    (T.JSON, "scalar"),
    (T.JSON, None),
    (T.JSON, 2**64 - 1),
    (T.BINARY, b""),
    (T.BINARY, b"\x00\xff"),
]


@pytest.mark.parametrize(("value_type", "value"), ROUND_TRIPS)
def test_round_trip(value_type: TopicType, value: Any) -> None:
    data = encode(value_type, value)
    assert isinstance(data, bytes)
    assert validate(value_type, data) == data
    assert decode(value_type, data) == value


def test_scalar_values_are_cbor() -> None:
    assert encode(T.STRING, "a") == cbor2.dumps("a")
    assert encode(T.INT64, 5) == cbor2.dumps(5)
    assert encode(T.DOUBLE, 1.5) == cbor2.dumps(1.5)
    assert encode(T.BINARY, b"raw") == b"raw"


def test_json_key_order_is_kept_in_the_bytes() -> None:
    a = encode(T.JSON, {"foo": "bar", "count": 43})
    b = encode(T.JSON, {"count": 43, "foo": "bar"})
    assert a != b
    assert list(decode(T.JSON, a)) == ["foo", "count"]


def test_double_accepts_int_and_widens() -> None:
    assert decode(T.DOUBLE, encode(T.DOUBLE, 3)) == 3.0
    assert isinstance(decode(T.DOUBLE, encode(T.DOUBLE, 3)), float)
    assert decode(T.DOUBLE, cbor2.dumps(3)) == 3.0


BAD_VALUES: list[tuple[TopicType, Any, str]] = [
    (T.STRING, 5, "must be str"),
    (T.STRING, b"x", "must be str"),
    (T.STRING, "\ud800", "cannot encode"),
    (T.INT64, 2**63, "outside the INT64 range"),
    (T.INT64, -(2**63) - 1, "outside the INT64 range"),
    (T.INT64, 1.0, "must be int"),
    (T.INT64, True, "must be int"),
    (T.INT64, "1", "must be int"),
    (T.DOUBLE, "1.5", "must be float"),
    (T.DOUBLE, True, "must be float"),
    (T.DOUBLE, 10**400, "too large"),
    (T.JSON, {1: "x"}, "keys must be strings"),
    (T.JSON, {"a": b"bytes"}, "not a JSON value"),
    (T.JSON, {"a": {1, 2}}, "not a JSON value"),
    (T.JSON, math.nan, "finite"),
    (T.JSON, 2**64, "64-bit"),
    (T.BINARY, "text", "must be bytes"),
    (T.TIME_SERIES, "x", "event value type"),
]


@pytest.mark.parametrize(("value_type", "value", "fragment"), BAD_VALUES)
def test_bad_values_are_rejected_with_reason(value_type: TopicType, value: Any, fragment: str) -> None:
    with pytest.raises(InvalidValueError, match=fragment):
        encode(value_type, value)


def nested(depth: int, inner: Any = 1) -> Any:
    """``inner`` inside ``depth`` arrays and objects, alternating."""
    value = inner
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


def test_json_nesting_is_bounded() -> None:
    deep: Any = []
    for _ in range(300):
        deep = [deep]
    with pytest.raises(InvalidValueError, match="nested deeper"):
        encode(T.JSON, deep)


def test_json_nesting_limit_is_exact_and_counts_containers_only() -> None:
    at_limit = nested(MAX_JSON_DEPTH)  # a scalar inside 256 containers
    assert decode(T.JSON, encode(T.JSON, at_limit)) == at_limit
    assert validate(T.JSON, cbor2.dumps(at_limit)) == cbor2.dumps(at_limit)
    for value in (nested(MAX_JSON_DEPTH + 1), nested(MAX_JSON_DEPTH, [])):  # 257 containers
        with pytest.raises(InvalidValueError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            encode(T.JSON, value)
        with pytest.raises(InvalidValueError, match="nested deeper"):
            encode_any(value)
        with pytest.raises(InvalidValueError, match="nested deeper"):
            validate(T.JSON, cbor2.dumps(value))


def _cyclic() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


@pytest.mark.parametrize("value_type", sorted(EVENT_VALUE_TYPES, key=str))
@pytest.mark.parametrize("value", [nested(5000), _cyclic()], ids=["5000 deep", "cyclic"])
def test_deep_values_are_invalid_values_not_recursion_errors(value_type: TopicType, value: Any) -> None:
    with pytest.raises(InvalidValueError) as caught:
        encode(value_type, value)
    assert len(str(caught.value)) < 200  # the value is described, not printed


def test_deep_values_without_a_type_are_refused() -> None:
    for value in (nested(5000), _cyclic()):
        with pytest.raises(InvalidValueError, match="nested deeper"):
            encode_any(value)


@pytest.mark.parametrize("data", [b"\x81" * 5000 + b"\x01", b"\xa1\x61k" * 5000 + b"\x01"], ids=["arrays", "maps"])
def test_deep_cbor_is_refused(data: bytes) -> None:
    for value_type in (T.JSON, T.STRING, T.DOUBLE):
        with pytest.raises(InvalidValueError):
            validate(value_type, data)


@given(st.integers(min_value=0, max_value=20_000), st.sampled_from(["arrays", "maps", "tags", "indefinite"]))
def test_cbor_nesting_is_refused_at_the_limit_before_the_decoder_goes_deeper(depth: int, kind: str) -> None:
    """cbor2 alone stops at 400 levels with a message about itself; its max_depth makes
    the limit and the message canopy's, for every type."""
    head = {"arrays": b"\x81", "maps": b"\xa1\x61k", "tags": b"\xc6", "indefinite": b"\x9f"}[kind]
    tail = b"\xff" * depth if kind == "indefinite" else b""
    data = head * depth + b"\x01" + tail
    if depth <= MAX_JSON_DEPTH:
        if kind == "tags" and depth:
            with pytest.raises(InvalidValueError, match="not a JSON value"):
                validate(T.JSON, data)
        else:
            assert validate(T.JSON, data) == data
        return
    for value_type in (T.JSON, T.STRING, T.INT64):
        with pytest.raises(InvalidValueError, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
            validate(value_type, data)


def _json_text(depth: int, opener: str) -> str:
    """JSON text nesting ``depth`` arrays or objects."""
    if opener == "{":  # empty objects at the bottom: {"k":{"k":{}}}
        return '{"k":' * (depth - 1) + "{}" + "}" * (depth - 1) if depth else "1"
    closer = "]" if opener == "[" else "}"
    return opener * depth + "1" + closer * depth


@given(
    st.integers(min_value=0, max_value=5000),
    st.sampled_from(["[", "{", '{"k":']),
    st.none() | st.sampled_from(["[[[{{", "\\", '\\"[{', "]]}}", '"']),
    st.booleans(),
)
def test_json_text_depth_agrees_with_the_value_limit(depth: int, opener: str, string: str | None, closed: bool) -> None:
    """Text that ``json.loads`` reads to a value :func:`encode` accepts passes; deeper text
    is refused before ``json.loads`` recurses (it raised RecursionError at about 1,000
    levels). Brackets inside strings do not count; unclosed text is left to the decoder."""
    text = _json_text(depth, opener)
    if string is not None:  # a string full of brackets and escapes before the value
        text = "[" + json.dumps(string) + "," + text + "]"
        depth += 1
    if not closed:
        whole, text = text, text.rstrip("]}")
        closed = text == whole  # nothing to strip ("1"): still JSON
    try:
        check_json_text_depth(text)
    except InvalidValueError as e:
        assert depth > MAX_JSON_DEPTH
        assert f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects at position" in str(e)
        return
    assert depth <= MAX_JSON_DEPTH
    if closed:
        encode(T.JSON, json.loads(text))
    else:
        with pytest.raises(ValueError):
            json.loads(text)


def test_json_text_depth_probe() -> None:
    with pytest.raises(InvalidValueError, match=f"deeper than {MAX_JSON_DEPTH} levels .* at position {MAX_JSON_DEPTH}"):
        check_json_text_depth("[" * 100_000)
    check_json_text_depth("[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH)
    check_json_text_depth("]" + "[" * 100_000)  # not JSON at its first character: for the decoder to say
    check_json_text_depth('"' + "[" * 100_000)  # one unterminated string


@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_json_values_hold_only_finite_numbers(bad: float) -> None:
    for value in (bad, [1, bad], {"a": {"b": bad}}):
        with pytest.raises(InvalidValueError, match="finite"):
            encode(T.JSON, value)
        with pytest.raises(InvalidValueError, match="finite"):
            validate(T.JSON, cbor2.dumps(value))
    with pytest.raises(InvalidValueError, match="finite"):
        encode_any([bad])  # inside a structure it can only be meant as JSON


@pytest.mark.parametrize("special", [math.nan, math.inf, -math.inf])
def test_double_values_may_be_nan_or_infinite(special: float) -> None:
    data = encode(T.DOUBLE, special)
    assert accept(T.DOUBLE, data, raw=False) == data
    assert decode(T.DOUBLE, data) == special or math.isnan(decode(T.DOUBLE, data))
    sent, raw = encode_any(special)  # no type: the receiving DOUBLE topic takes it
    assert (sent, raw) == (data, False)


BAD_BYTES: list[tuple[TopicType, bytes, str]] = [
    (T.JSON, b"", "empty value"),
    (T.JSON, cbor2.dumps(1) + cbor2.dumps(2), "trailing bytes"),
    (T.JSON, b"\xa1", "malformed CBOR"),
    (T.JSON, b"\xff", "malformed CBOR"),
    (T.JSON, cbor2.dumps(b"bytes"), "not a JSON value"),
    (T.JSON, cbor2.dumps({1: 2}), "keys must be strings"),
    (T.JSON, bytes.fromhex("a2616101616102"), "malformed CBOR"),  # duplicate key
    (T.JSON, bytes.fromhex("c11a514b67b0"), "not a JSON value"),  # tagged datetime
    (T.JSON, b"\xf7", "not a JSON value"),  # undefined
    (T.STRING, cbor2.dumps(5), "cannot hold"),
    (T.INT64, cbor2.dumps("5"), "cannot hold"),
    (T.INT64, cbor2.dumps(2**63), "outside the INT64 range"),
    (T.INT64, cbor2.dumps(True), "cannot hold"),
    (T.DOUBLE, cbor2.dumps("x"), "cannot hold"),
]


@pytest.mark.parametrize(("value_type", "data", "fragment"), BAD_BYTES)
def test_bad_bytes_are_rejected(value_type: TopicType, data: bytes, fragment: str) -> None:
    with pytest.raises(InvalidValueError, match=fragment):
        validate(value_type, data)


def test_validate_needs_bytes() -> None:
    with pytest.raises(InvalidValueError, match="must be bytes"):
        validate(T.JSON, "text")


@pytest.mark.parametrize("name", ["json", "JSON", " Json ", "time_series", T.INT64])
def test_type_names_parse(name: Any) -> None:
    assert isinstance(TopicType.parse(name), TopicType)


def test_unknown_type_name() -> None:
    with pytest.raises(TopicTypeError, match="unknown topic type 'RECORDS'"):
        TopicType.parse("RECORDS")


@pytest.mark.parametrize("name", ["RECORD_V2", "recordv2"])
def test_record_v2_is_refused_with_a_reason(name: str) -> None:
    with pytest.raises(TopicTypeError, match="not supported.*legacy record model.*JSON topic"):
        TopicType.parse(name)


@pytest.mark.parametrize("value_type, data", [
    (TopicType.STRING, b"\xf6"),
    (TopicType.STRING, b"\x7f\x61a\x61b\xff"),  # an indefinite-length text string
    (TopicType.DOUBLE, b"\xf9\x3c\x00"),
    (TopicType.JSON, b"\xbf\x61a\x9f\x01\xf5\xff\xff"),  # indefinite map and array
    (TopicType.BINARY, b"\xc1\xf7"),
])
def test_plain_values(value_type: TopicType, data: bytes) -> None:
    check_plain(value_type, accept(value_type, data, raw=value_type is TopicType.BINARY))


@pytest.mark.parametrize("value_type, data, why", [
    (TopicType.STRING, bytes(cbor2.dumps(cbor2.CBORTag(256, "x"))), "tag 256"),
    (TopicType.INT64, b"\xc2\x41\x01", "tag 2"),
    (TopicType.JSON, b"\x82\x01\xd9\xd9\xf7\x02", "tag 55799"),
    (TopicType.JSON, b"\xbf\x61a\xc2\x41\x01\xff", "tag 2"),
])
def test_values_read_as_the_type_but_not_plain(value_type: TopicType, data: bytes, why: str) -> None:
    accept(value_type, data, raw=False)  # cbor2 reads them as the type
    with pytest.raises(InvalidValueError, match=why):
        check_plain(value_type, data)


@pytest.mark.parametrize("value_type, value", [rt for rt in ROUND_TRIPS if rt[0] is not T.BINARY])
def test_what_encode_makes_is_plain(value_type: TopicType, value: Any) -> None:
    check_plain(value_type, encode(value_type, value))
