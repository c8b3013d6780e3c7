"""The reference topic type mapping of topic views: every cell of the table."""

from __future__ import annotations

import math
from typing import Any

import pytest

from topics.conversions import convert, event_type_after, is_supported, java_double_to_string
from topics.errors import ConversionError
from topics.types import TopicType

S, I, D, J, TS, B = (
    TopicType.STRING,
    TopicType.INT64,
    TopicType.DOUBLE,
    TopicType.JSON,
    TopicType.TIME_SERIES,
    TopicType.BINARY,
)

# (source, target, value, expected) -- conversions that happen
CONVERTS: list[tuple[TopicType, TopicType, Any, Any]] = [
    # STRING row
    (S, S, "abc", "abc"),
    (S, I, "123", 123),
    (S, I, "-9223372036854775808", -(2**63)),
    (S, I, "+7", 7),
    (S, D, "12.5", 12.5),
    (S, D, "1e3", 1000.0),
    (S, D, " 2.5 ", 2.5),
    (S, D, "7", 7.0),
    (S, J, "abc", "abc"),
    (S, J, "12", "12"),
    (S, TS, "abc", "abc"),
    # INT64 row
    (I, S, 123, "123"),
    (I, S, -5, "-5"),
    (I, I, 123, 123),
    (I, D, 123, 123.0),
    (I, J, 123, 123),
    (I, TS, 123, 123),
    # DOUBLE row
    (D, S, 12.5, "12.5"),
    (D, S, 123.0, "123.0"),
    (D, S, 1e21, "1.0E21"),
    (D, I, 12.51, 13),
    (D, I, 12.5, 13),
    (D, I, 12.49, 12),
    (D, I, -12.5, -12),
    (D, I, -12.51, -13),
    (D, I, 0.49999999999999994, 0),
    (D, D, 12.5, 12.5),
    (D, J, 12.5, 12.5),
    (D, TS, 12.5, 12.5),
    # JSON row
    (J, S, "abc", "abc"),
    (J, S, 42, "42"),
    (J, I, "42", 42),
    (J, I, 42, 42),
    (J, D, "4.25", 4.25),
    (J, D, 42, 42.0),
    (J, J, {"a": [1, 2]}, {"a": [1, 2]}),
    (J, TS, {"a": 1}, {"a": 1}),
    # BINARY row
    (B, TS, b"\x00\x01", b"\x00\x01"),
    (B, B, b"\x00\x01", b"\x00\x01"),
]

# (source, target, value) -- the value does not convert: no reference topic
NO_CONVERSION: list[tuple[TopicType, TopicType, Any]] = [
    (S, I, "12.5"),
    (S, I, "abc"),
    (S, I, "99999999999999999999"),
    (S, I, " 1"),
    (S, I, ""),
    (S, D, "abc"),
    (S, D, "1.2.3"),
    (S, D, ""),
    (D, I, math.nan),
    (D, I, math.inf),
    (D, I, 1e19),
    (D, J, math.nan),
    (J, S, 4.2),
    (J, I, 4.2),
    (J, D, 4.2),
    (J, S, True),
    (J, S, None),
    (J, I, {"a": 1}),
    (J, D, [1]),
    (J, I, "4.2"),
    (J, I, "x"),
]

# the 'x' cells: no conversion is ever supported
UNSUPPORTED = [(S, B), (I, B), (D, B), (J, B), (B, S), (B, I), (B, D), (B, J)]


@pytest.mark.parametrize(("source", "target", "value", "expected"), CONVERTS)
def test_conversions(source: TopicType, target: TopicType, value: Any, expected: Any) -> None:
    assert is_supported(source, target)
    result = convert(value, source, target)
    assert result == expected
    assert type(result) is type(expected)


@pytest.mark.parametrize(("source", "target", "value"), NO_CONVERSION)
def test_values_that_do_not_convert(source: TopicType, target: TopicType, value: Any) -> None:
    assert is_supported(source, target)
    with pytest.raises(ConversionError):
        convert(value, source, target)


@pytest.mark.parametrize(("source", "target"), UNSUPPORTED)
def test_unsupported_cells(source: TopicType, target: TopicType) -> None:
    assert not is_supported(source, target)
    sample = b"x" if source is B else "1"
    with pytest.raises(ConversionError, match="cannot be converted"):
        convert(sample, source, target)


@pytest.mark.parametrize("source", [S, I, D, J, B])
def test_conversion_to_time_series_keeps_the_source_type_as_event_type(source: TopicType) -> None:
    assert event_type_after(source, TS) is source
    assert event_type_after(TS, TS, source) is source
    assert event_type_after(source, S) is None


# TIME_SERIES row: follows the rules of the event value type
TIME_SERIES_CASES: list[tuple[TopicType, TopicType, Any, Any]] = [
    (D, I, 12.51, 13),
    (D, S, 12.5, "12.5"),
    (S, I, "7", 7),
    (S, J, "x", "x"),
    (I, D, 3, 3.0),
    (J, S, 42, "42"),
    (J, J, {"k": 1}, {"k": 1}),
    (B, B, b"raw", b"raw"),
    (S, S, "same", "same"),
]


@pytest.mark.parametrize(("event_type", "target", "value", "expected"), TIME_SERIES_CASES)
def test_time_series_source_follows_its_event_type(
    event_type: TopicType, target: TopicType, value: Any, expected: Any
) -> None:
    assert is_supported(TS, target, event_type)
    assert convert(value, TS, target, event_type=event_type) == expected


@pytest.mark.parametrize(("event_type", "target"), [(S, B), (B, S), (B, J), (J, B), (D, B)])
def test_time_series_unsupported_follow_event_type(event_type: TopicType, target: TopicType) -> None:
    assert not is_supported(TS, target, event_type)


def test_time_series_source_needs_an_event_type() -> None:
    assert not is_supported(TS, S)
    with pytest.raises(ConversionError, match="event value type"):
        convert("x", TS, S)


def test_time_series_value_that_fails_to_convert() -> None:
    with pytest.raises(ConversionError):
        convert("abc", TS, I, event_type=S)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0.0, "0.0"),
        (-0.0, "-0.0"),
        (1.0, "1.0"),
        (100.0, "100.0"),
        (12.51, "12.51"),
        (0.001, "0.001"),
        (0.0001, "1.0E-4"),
        (1234567.0, "1234567.0"),
        (1e7, "1.0E7"),
        (1.5e-7, "1.5E-7"),
        (-2.5e10, "-2.5E10"),
        (math.nan, "NaN"),
        (math.inf, "Infinity"),
        (-math.inf, "-Infinity"),
    ],
)
def test_double_to_string_is_javas(value: float, text: str) -> None:
    assert java_double_to_string(value) == text
