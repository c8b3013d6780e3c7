"""Topic property names and the validation of their values.

Property values travel and are stored as strings, as in the reference
system; :func:`validate_property` checks one and returns its normal form
(booleans and enumerations in lower case, ranges in canonical text).

==============================  ===============================================
property                        values
==============================  ===============================================
COMPRESSION                     off, low, medium, high, true, false
CONFLATION                      off, conflate, unsubscribe, always
DONT_RETAIN_VALUE               true, false
OWNER                           ``$Principal is 'name'`` (:mod:`topics.owner`)
PERSISTENT                      true, false
PRIORITY                        low, default, high
PUBLISH_VALUES_ONLY             true, false
REMOVAL                         a removal policy (:mod:`topics.removal`), kept
                                as written
SCHEMA                          JSON text, nested at most
                                :data:`~topics.types.MAX_JSON_DEPTH` deep
TIDY_ON_UNSUBSCRIBE             true, false
TIME_SERIES_EVENT_VALUE_TYPE    STRING, INT64, DOUBLE, JSON, BINARY
TIME_SERIES_RETAINED_RANGE      ``limit N`` and/or ``last N(ms|s|h)``; N up to
                                10^9 events, ``last`` up to 87840h (ten years)
TIME_SERIES_SUBSCRIPTION_RANGE  same syntax as the retained range
VALIDATE_VALUES                 true, false
==============================  ===============================================

OWNER must name one principal (:func:`topics.owner.parse_owner`). A REMOVAL policy is parsed
here, its session filters checked only for being non-empty; ``sessions``
checks them with its filter parser when it acts on the policy.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from topics.errors import SpecificationError, TopicTypeError
from topics.owner import parse_owner
from topics.removal import parse_policy
from topics.types import EVENT_VALUE_TYPES, TopicType, check_json_text_depth

COMPRESSION = "COMPRESSION"
CONFLATION = "CONFLATION"
DONT_RETAIN_VALUE = "DONT_RETAIN_VALUE"
OWNER = "OWNER"
PERSISTENT = "PERSISTENT"
PRIORITY = "PRIORITY"
PUBLISH_VALUES_ONLY = "PUBLISH_VALUES_ONLY"
REMOVAL = "REMOVAL"
SCHEMA = "SCHEMA"
TIDY_ON_UNSUBSCRIBE = "TIDY_ON_UNSUBSCRIBE"
TIME_SERIES_EVENT_VALUE_TYPE = "TIME_SERIES_EVENT_VALUE_TYPE"
TIME_SERIES_RETAINED_RANGE = "TIME_SERIES_RETAINED_RANGE"
TIME_SERIES_SUBSCRIPTION_RANGE = "TIME_SERIES_SUBSCRIPTION_RANGE"
VALIDATE_VALUES = "VALIDATE_VALUES"

#: properties that only a TIME_SERIES topic may carry
TIME_SERIES_ONLY = frozenset(
    {TIME_SERIES_EVENT_VALUE_TYPE, TIME_SERIES_RETAINED_RANGE, TIME_SERIES_SUBSCRIPTION_RANGE}
)


class Conflation(enum.Enum):
    OFF = "off"
    CONFLATE = "conflate"
    UNSUBSCRIBE = "unsubscribe"
    ALWAYS = "always"


class Compression(enum.Enum):
    OFF = "off"
    LOW = "low"
    MEDIUM = "medium"
    HIGH = "high"
    TRUE = "true"
    FALSE = "false"


class Priority(enum.Enum):
    LOW = "low"
    DEFAULT = "default"
    HIGH = "high"


_UNIT_MS = {"ms": 1, "s": 1000, "h": 3_600_000}
_RANGE_TOKEN = re.compile(r"\s*(limit|last)\s+([0-9]+)\s*(ms|s|h)?\s*", re.IGNORECASE)

#: the most events a range may name: beyond any log one node holds, so a larger
#: number is a typing slip rather than a wish
MAX_RANGE_LIMIT = 1_000_000_000
#: the longest duration a range may name: ten years of 366 days (``last 87840h``)
MAX_RANGE_LAST_MS = 10 * 366 * 24 * 3_600_000

_MAX_LAST = f"{MAX_RANGE_LAST_MS // 3_600_000}h (ten years)"


def _out_of_range(what: str, number: int, maximum: str) -> SpecificationError:
    shown = str(number) if number.bit_length() < 128 else f"of {number.bit_length()} bits"
    return SpecificationError(f"range {what} {shown} is out of range: at most {maximum}")


def _range_number(word: str, digits: str, unit: str | None) -> int:
    """The number after ``word`` in a range; past its maximum an error that quotes
    it as written (and before ``int()`` of thousands of digits fails)."""
    if len(digits.lstrip("0")) <= 18:
        number = int(digits)
        scaled = number * _UNIT_MS[unit.lower()] if unit is not None else number
        if scaled <= (MAX_RANGE_LIMIT if word == "limit" else MAX_RANGE_LAST_MS):
            return number
    shown = digits if len(digits) <= 24 else digits[:20] + "..."
    maximum = f"{MAX_RANGE_LIMIT} events" if word == "limit" else _MAX_LAST
    raise SpecificationError(f"range '{word} {shown}{unit or ''}' is out of range: at most {maximum}")


@dataclass(frozen=True)
class TimeSeriesRange:
    """A time series range: at most ``limit`` events and/or those of the last ``last_ms``.

    When both are given the smaller range wins: an event is in the range only
    if it is among the ``limit`` most recent *and* no older than ``last_ms``
    before the most recent event.
    """

    limit: int | None = None
    last_ms: int | None = None

    def __post_init__(self) -> None:
        if self.limit is None and self.last_ms is None:
            raise SpecificationError("a range needs 'limit N' and/or 'last N(ms|s|h)'")
        if self.limit is not None and self.limit < 0:
            raise SpecificationError(f"range limit must not be negative, got {self.limit}")
        if self.last_ms is not None and self.last_ms < 0:
            raise SpecificationError(f"range duration must not be negative, got {self.last_ms}")
        if self.limit is not None and self.limit > MAX_RANGE_LIMIT:
            raise _out_of_range("limit", self.limit, f"{MAX_RANGE_LIMIT} events")
        if self.last_ms is not None and self.last_ms > MAX_RANGE_LAST_MS:
            raise _out_of_range("duration (ms)", self.last_ms, _MAX_LAST)

    @classmethod
    def parse(cls, text: str) -> TimeSeriesRange:
        """Parse ``limit N``, ``last N(ms|s|h)`` or both, in either order."""
        pos = 0
        limit: int | None = None
        last: int | None = None
        if not text.strip():
            raise SpecificationError("empty range: expected 'limit N' and/or 'last N(ms|s|h)'")
        while pos < len(text):
            m = _RANGE_TOKEN.match(text, pos)
            if m is None:
                raise SpecificationError(
                    f"invalid range {text!r} at position {pos}: "
                    "expected 'limit N' and/or 'last N(ms|s|h)'"
                )
            word, digits, unit = m.group(1).lower(), m.group(2), m.group(3)
            number = _range_number(word, digits, unit)
            if word == "limit":
                if unit is not None or limit is not None:
                    raise SpecificationError(f"invalid range {text!r}: misplaced 'limit'")
                limit = number
            else:
                if unit is None or last is not None:
                    raise SpecificationError(
                        f"invalid range {text!r}: 'last' needs one duration with a unit ms, s or h"
                    )
                last = number * _UNIT_MS[unit.lower()]
            pos = m.end()
        return cls(limit, last)

    def __str__(self) -> str:
        parts: list[str] = []
        if self.limit is not None:
            parts.append(f"limit {self.limit}")
        if self.last_ms is not None:
            ms = self.last_ms
            if ms and ms % 3_600_000 == 0:
                parts.append(f"last {ms // 3_600_000}h")
            elif ms and ms % 1000 == 0:
                parts.append(f"last {ms // 1000}s")
            else:
                parts.append(f"last {ms}ms")
        return " ".join(parts)

    def narrowed_to(self, other: TimeSeriesRange) -> TimeSeriesRange:
        """The range that is no greater than either ``self`` or ``other``."""

        def least(a: int | None, b: int | None) -> int | None:
            if a is None:
                return b
            if b is None:
                return a
            return min(a, b)

        return TimeSeriesRange(least(self.limit, other.limit), least(self.last_ms, other.last_ms))


#: the retained range of a time series topic that does not set one
DEFAULT_RETAINED_RANGE = TimeSeriesRange(limit=10)


def _text(name: str, value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if not isinstance(value, str):
        raise SpecificationError(
            f"property {name} needs a string value, got {type(value).__name__}"
        )
    return value


def _enum(kind: type[enum.Enum]) -> Callable[[str, str], str]:
    allowed = [str(m.value) for m in kind]

    def check(name: str, value: str) -> str:
        v = value.strip().lower()
        if v not in allowed:
            raise SpecificationError(
                f"invalid value {value!r} for {name}; expected one of {', '.join(allowed)}"
            )
        return v

    return check


def _boolean(name: str, value: str) -> str:
    v = value.strip().lower()
    if v not in ("true", "false"):
        raise SpecificationError(f"invalid value {value!r} for {name}; expected true or false")
    return v


def _non_empty(name: str, value: str) -> str:
    if not value.strip():
        raise SpecificationError(f"property {name} may not be empty")
    return value


def _owner(name: str, value: str) -> str:
    parse_owner(_non_empty(name, value))  # a SpecificationError with the column
    return value


def _removal(name: str, value: str) -> str:
    parse_policy(_non_empty(name, value))  # a RemovalPolicyError is a SpecificationError
    return value


def _json_text(name: str, value: str) -> str:
    try:
        check_json_text_depth(value)  # an InvalidValueError, so a ValueError
        json.loads(value)
    except ValueError as e:
        raise SpecificationError(f"property {name} must be JSON text: {e}") from None
    return value


def _event_type(name: str, value: str) -> str:
    try:
        t = TopicType.parse(value)
    except TopicTypeError:
        t = None
    if t not in EVENT_VALUE_TYPES:
        raise SpecificationError(
            f"invalid value {value!r} for {name}; expected one of "
            + ", ".join(sorted(x.value for x in EVENT_VALUE_TYPES))
        )
    assert t is not None
    return t.value


def _range(name: str, value: str) -> str:
    try:
        return str(TimeSeriesRange.parse(value))
    except SpecificationError as e:
        raise SpecificationError(f"property {name}: {e}") from None


_VALIDATORS: dict[str, Callable[[str, str], str]] = {
    COMPRESSION: _enum(Compression),
    CONFLATION: _enum(Conflation),
    DONT_RETAIN_VALUE: _boolean,
    OWNER: _owner,
    PERSISTENT: _boolean,
    PRIORITY: _enum(Priority),
    PUBLISH_VALUES_ONLY: _boolean,
    REMOVAL: _removal,
    SCHEMA: _json_text,
    TIDY_ON_UNSUBSCRIBE: _boolean,
    TIME_SERIES_EVENT_VALUE_TYPE: _event_type,
    TIME_SERIES_RETAINED_RANGE: _range,
    TIME_SERIES_SUBSCRIPTION_RANGE: _range,
    VALIDATE_VALUES: _boolean,
}

#: every property name canopy knows
PROPERTY_NAMES = frozenset(_VALIDATORS)


def validate_property(name: object, value: object) -> tuple[str, str]:
    """Check one property and return ``(name, normal value)``."""
    if not isinstance(name, str) or name not in _VALIDATORS:
        raise SpecificationError(
            f"unknown topic property {name!r}; known properties: "
            + ", ".join(sorted(PROPERTY_NAMES))
        )
    return name, _VALIDATORS[name](name, _text(name, value))
