from __future__ import annotations

from typing import Any

import pytest

from topics import properties as P
from topics.errors import SpecificationError, TopicTypeError
from topics.properties import Conflation, TimeSeriesRange, validate_property
from topics.specification import TopicSpecification
from topics.types import TopicType

GOOD: list[tuple[str, Any, str]] = [
    (P.COMPRESSION, "off", "off"),
    (P.COMPRESSION, "LOW", "low"),
    (P.COMPRESSION, "medium", "medium"),
    (P.COMPRESSION, "high", "high"),
    (P.COMPRESSION, "true", "true"),
    (P.COMPRESSION, False, "false"),
    (P.CONFLATION, "off", "off"),
    (P.CONFLATION, "conflate", "conflate"),
    (P.CONFLATION, "Unsubscribe", "unsubscribe"),
    (P.CONFLATION, "always", "always"),
    (P.DONT_RETAIN_VALUE, "TRUE", "true"),
    (P.OWNER, "$Principal is 'admin'", "$Principal is 'admin'"),
    (P.PERSISTENT, True, "true"),
    (P.PRIORITY, "high", "high"),
    (P.PUBLISH_VALUES_ONLY, "false", "false"),
    (P.REMOVAL, "when no updates for 10m", "when no updates for 10m"),
    (P.SCHEMA, '{"type": "object"}', '{"type": "object"}'),
    (P.TIDY_ON_UNSUBSCRIBE, "true", "true"),
    (P.TIME_SERIES_EVENT_VALUE_TYPE, "double", "DOUBLE"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit 5", "limit 5"),
    (P.TIME_SERIES_RETAINED_RANGE, "last 10s", "last 10s"),
    (P.TIME_SERIES_RETAINED_RANGE, "last 1500ms limit 3", "limit 3 last 1500ms"),
    (P.TIME_SERIES_RETAINED_RANGE, "last 7200s", "last 2h"),
    (P.TIME_SERIES_SUBSCRIPTION_RANGE, "limit 1", "limit 1"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit 1000000000", "limit 1000000000"),  # the maxima
    (P.TIME_SERIES_RETAINED_RANGE, "last 87840h", "last 87840h"),
    (P.TIME_SERIES_SUBSCRIPTION_RANGE, "last 316224000000ms limit 0001000000000", "limit 1000000000 last 87840h"),
    (P.VALIDATE_VALUES, "false", "false"),
]

BAD: list[tuple[Any, Any, str]] = [
    (P.COMPRESSION, "max", "expected one of off, low, medium, high, true, false"),
    (P.CONFLATION, "sometimes", "expected one of off, conflate, unsubscribe, always"),
    (P.DONT_RETAIN_VALUE, "yes", "expected true or false"),
    (P.OWNER, "  ", "may not be empty"),
    (P.PRIORITY, "urgent", "expected one of low, default, high"),
    (P.REMOVAL, "", "may not be empty"),
    (P.SCHEMA, "{not json", "must be JSON text"),
    (P.SCHEMA, "[" * 100_000, "must be JSON text: JSON text nested deeper than 256 levels of arrays and objects at position 256"),
    (P.TIME_SERIES_EVENT_VALUE_TYPE, "TIME_SERIES", "expected one of"),
    (P.TIME_SERIES_EVENT_VALUE_TYPE, "RECORD", "expected one of"),
    (P.TIME_SERIES_RETAINED_RANGE, "", "empty range"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit", "expected 'limit N'"),
    (P.TIME_SERIES_RETAINED_RANGE, "last 10", "needs one duration with a unit"),
    (P.TIME_SERIES_RETAINED_RANGE, "last 10m", "unit ms, s or h"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit 5 limit 6", "misplaced 'limit'"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit -1", "expected 'limit N'"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit 999999999999999999999",
     "TIME_SERIES_RETAINED_RANGE: range 'limit 999999999999999999999' is out of range: at most 1000000000 events"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit 1000000001", "out of range: at most 1000000000 events"),
    (P.TIME_SERIES_RETAINED_RANGE, "last 87841h", r"'last 87841h' is out of range: at most 87840h \(ten years\)"),
    (P.TIME_SERIES_RETAINED_RANGE, "last 316224000001ms", "out of range"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit 5 last 99999999999999999999s", "'last 99999999999999999999s' is out"),
    (P.TIME_SERIES_RETAINED_RANGE, "limit \u0663", "expected 'limit N'"),  # ASCII digits only
    (P.TIME_SERIES_SUBSCRIPTION_RANGE, "limit 999999999999999999999", "TIME_SERIES_SUBSCRIPTION_RANGE: range"),
    (P.TIME_SERIES_SUBSCRIPTION_RANGE, "last 100000h", "out of range"),
    ("NO_SUCH_PROPERTY", "x", "unknown topic property"),
    (P.VALIDATE_VALUES, 1.5, "needs a string value"),
]


@pytest.mark.parametrize(("name", "value", "normal"), GOOD)
def test_valid_properties(name: str, value: Any, normal: str) -> None:
    assert validate_property(name, value) == (name, normal)


@pytest.mark.parametrize(("name", "value", "fragment"), BAD)
def test_invalid_properties(name: Any, value: Any, fragment: str) -> None:
    with pytest.raises(SpecificationError, match=fragment):
        validate_property(name, value)


def test_a_range_number_of_thousands_of_digits_is_out_of_range_not_a_crash() -> None:
    with pytest.raises(SpecificationError, match=r"'limit 9{20}\.\.\.' is out of range"):
        validate_property(P.TIME_SERIES_RETAINED_RANGE, "limit " + "9" * 5000)  # int() would refuse it


@pytest.mark.parametrize(
    ("limit", "last_ms"),
    [(P.MAX_RANGE_LIMIT + 1, None), (None, P.MAX_RANGE_LAST_MS + 1), (10**5000, None)],
    ids=["limit", "last", "huge limit"],
)
def test_ranges_built_in_code_are_bounded_too(limit: int | None, last_ms: int | None) -> None:
    with pytest.raises(SpecificationError, match="is out of range: at most"):
        TimeSeriesRange(limit, last_ms)


def test_range_semantics() -> None:
    assert TimeSeriesRange.parse("limit 5 last 2s") == TimeSeriesRange(5, 2000)
    narrowed = TimeSeriesRange(10, None).narrowed_to(TimeSeriesRange(20, 500))
    assert narrowed == TimeSeriesRange(10, 500)


def test_specifications_are_normalised_and_shared() -> None:
    a = TopicSpecification.of("json", {P.CONFLATION: "OFF", P.PRIORITY: "high"})
    b = TopicSpecification.of(TopicType.JSON, {P.PRIORITY: "HIGH", P.CONFLATION: "off"})
    assert a == b and a is b
    assert a.properties == {P.CONFLATION: "off", P.PRIORITY: "high"}
    assert a.conflation is Conflation.OFF
    assert str(a) == "JSON{CONFLATION=off, PRIORITY=high}"
    assert a != TopicSpecification.of("json")


def test_specification_defaults() -> None:
    spec = TopicSpecification.of("STRING")
    assert spec.conflation is Conflation.CONFLATE
    assert not spec.dont_retain_value
    assert spec.persistent
    assert spec.event_type is None
    assert spec.value_type is TopicType.STRING


def test_with_properties() -> None:
    spec = TopicSpecification.of("STRING", {P.CONFLATION: "off"})
    changed = spec.with_properties({P.CONFLATION: None, P.DONT_RETAIN_VALUE: True})
    assert changed.properties == {P.DONT_RETAIN_VALUE: "true"}
    assert changed.dont_retain_value


def test_time_series_specification() -> None:
    spec = TopicSpecification.of(
        "TIME_SERIES",
        {P.TIME_SERIES_EVENT_VALUE_TYPE: "json", P.TIME_SERIES_RETAINED_RANGE: "limit 3"},
    )
    assert spec.event_type is TopicType.JSON
    assert spec.value_type is TopicType.JSON
    assert spec.retained_range == TimeSeriesRange(limit=3)
    assert spec.subscription_range is None
    default = TopicSpecification.of("TIME_SERIES", {P.TIME_SERIES_EVENT_VALUE_TYPE: "INT64"})
    assert default.retained_range == TimeSeriesRange(limit=10)


def test_time_series_needs_event_type() -> None:
    with pytest.raises(SpecificationError, match="needs the property TIME_SERIES_EVENT_VALUE_TYPE"):
        TopicSpecification.of("TIME_SERIES")


@pytest.mark.parametrize("policy", ["conflate", "always"])
def test_time_series_refuses_conflating_policies(policy: str) -> None:
    with pytest.raises(SpecificationError, match="not supported for TIME_SERIES"):
        TopicSpecification.of(
            "TIME_SERIES", {P.TIME_SERIES_EVENT_VALUE_TYPE: "STRING", P.CONFLATION: policy}
        )


def test_time_series_properties_refused_elsewhere() -> None:
    with pytest.raises(SpecificationError, match="only applies to TIME_SERIES topics, not JSON"):
        TopicSpecification.of("JSON", {P.TIME_SERIES_RETAINED_RANGE: "limit 3"})


def test_unknown_type() -> None:
    with pytest.raises(TopicTypeError):
        TopicSpecification.of("ROUTING")
