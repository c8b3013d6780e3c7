"""Conversions between topic types (the reference topic type mapping of topic views).

A topic view's ``type`` clause converts the current value of its processing
chain to another topic type. The rules, cell by cell:

============  ==========================================================
source        conversion
============  ==========================================================
STRING        INT64/DOUBLE if the text parses as that number, else none;
              JSON: the string as a JSON scalar; TIME_SERIES: events of
              type STRING; BINARY: not supported
INT64         STRING: decimal text; DOUBLE: widened (123 → 123.0); JSON:
              the number; TIME_SERIES: events of type INT64; BINARY: no
DOUBLE        STRING: Java's ``Double.toString`` text (12.5 → "12.5",
              1e21 → "1.0E21"); INT64: rounded half up (12.51 → 13,
              12.5 → 13, -12.5 → -12), none when NaN, infinite or out of
              range; JSON: the number (none if not finite); TIME_SERIES:
              events of type DOUBLE; BINARY: no
JSON          STRING/INT64/DOUBLE only from a string or integer scalar,
              read as text and converted as from STRING (a JSON double,
              boolean, null, array or object converts to none);
              TIME_SERIES: events of type JSON; BINARY: no
TIME_SERIES   as the source type equal to its event value type
              (TIME_SERIES of DOUBLE → INT64 rounds, of BINARY → BINARY)
BINARY        TIME_SERIES (events of type BINARY) and BINARY only
============  ==========================================================

Converting a type to itself returns the value unchanged. Converting to
TIME_SERIES yields the *event value* to append; its event type is given by
:func:`event_type_after`. A conversion that does not apply to a value raises
:class:`~topics.errors.ConversionError` (a view then creates no reference
topic); :func:`is_supported` tells whether a pair of types can ever convert.

Values here are Python values as produced by :func:`topics.types.decode`.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

from topics.errors import ConversionError
from topics.types import INT64_MAX, INT64_MIN, TopicType

__all__ = ["convert", "event_type_after", "is_supported", "java_double_to_string"]

T = TopicType
# Java's Long.parseLong: optional sign, ASCII digits, no spaces
_LONG = re.compile(r"[+-]?[0-9]+")
# Java's Double.parseDouble for decimal text (it also trims whitespace and
# accepts an optional f/F/d/D suffix, NaN and Infinity)
_DOUBLE = re.compile(
    r"[+-]?(?:NaN|Infinity|(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?[fFdD]?)"
)


def _effective(source: TopicType, event_type: TopicType | None) -> TopicType:
    if source is T.TIME_SERIES:
        if event_type is None or event_type is T.TIME_SERIES:
            raise ConversionError("a TIME_SERIES source needs its event value type")
        return event_type
    return source


def is_supported(
    source: TopicType, target: TopicType, event_type: TopicType | None = None
) -> bool:
    """Whether values of ``source`` can ever convert to ``target`` ('x' cells are not)."""
    try:
        src = _effective(source, event_type)
    except ConversionError:
        return False
    if target is T.TIME_SERIES or src is target:
        return True
    if src is T.BINARY or target is T.BINARY:
        return False
    return True


def event_type_after(
    source: TopicType, target: TopicType, event_type: TopicType | None = None
) -> TopicType | None:
    """The event value type of the converted topic when ``target`` is TIME_SERIES, else ``None``."""
    if target is not T.TIME_SERIES:
        return None
    return _effective(source, event_type)


def java_double_to_string(value: float) -> str:
    """Format a double as Java's ``Double.toString`` does (shortest round-trip digits)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    digits_tuple = Decimal(repr(abs(value))).normalize().as_tuple()
    digits = "".join(map(str, digits_tuple.digits))
    assert isinstance(digits_tuple.exponent, int)
    # value = 0.d1d2d3... x 10^point
    point = len(digits) + digits_tuple.exponent
    magnitude = abs(value)
    if 1e-3 <= magnitude < 1e7:
        if point <= 0:
            return f"{sign}0.{'0' * -point}{digits}"
        if point >= len(digits):
            return f"{sign}{digits}{'0' * (point - len(digits))}.0"
        return f"{sign}{digits[:point]}.{digits[point:]}"
    mantissa = digits[0] + "." + (digits[1:] or "0")
    return f"{sign}{mantissa}E{point - 1}"


def _string_to_int64(text: str) -> int:
    if _LONG.fullmatch(text) is None:
        raise ConversionError(f"{text!r} is not an INT64 number")
    number = int(text)
    if not INT64_MIN <= number <= INT64_MAX:
        raise ConversionError(f"{text!r} is outside the INT64 range")
    return number


def _string_to_double(text: str) -> float:
    trimmed = text.strip(" \t\n\r\x0b\x0c")
    if _DOUBLE.fullmatch(trimmed) is None:
        raise ConversionError(f"{text!r} is not a DOUBLE number")
    return float(trimmed.rstrip("fFdD").replace("Infinity", "inf"))


def _double_to_int64(value: float) -> int:
    if not math.isfinite(value):
        raise ConversionError(f"{value!r} has no INT64 equivalent")
    # Java's Math.round: floor(x + 1/2), computed exactly
    rounded = math.floor(Decimal(value) + Decimal("0.5"))
    if not INT64_MIN <= rounded <= INT64_MAX:
        raise ConversionError(f"{value!r} is outside the INT64 range")
    return int(rounded)


def _from_string(text: str | None, target: TopicType) -> Any:
    if target is T.JSON:
        return text
    if text is None:
        raise ConversionError(f"a null STRING has no {target.value} equivalent")
    if target is T.INT64:
        return _string_to_int64(text)
    return _string_to_double(text)


def _json_as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise ConversionError(
        f"only JSON strings and integers convert to other types, not {type(value).__name__}"
    )


def convert(
    value: Any,
    source: TopicType,
    target: TopicType,
    *,
    event_type: TopicType | None = None,
) -> Any:
    """Convert ``value`` of topic type ``source`` to topic type ``target``.

    ``event_type`` is the event value type when ``source`` is TIME_SERIES.
    Raises :class:`ConversionError` when the pair is not supported or this
    value does not convert.
    """
    src = _effective(source, event_type)
    if target is T.TIME_SERIES or src is target:
        return value
    if not is_supported(src, target):
        raise ConversionError(f"{src.value} cannot be converted to {target.value}")
    if src is T.STRING:
        return _from_string(value, target)
    if src is T.JSON:
        text = _json_as_text(value)
        return text if target is T.STRING else _from_string(text, target)
    if value is None:
        if target in (T.JSON, T.STRING):
            return None
        raise ConversionError(f"a null {src.value} has no {target.value} equivalent")
    if src is T.INT64:
        if target is T.STRING:
            return str(value)
        if target is T.DOUBLE:
            return float(value)
        return value  # JSON
    # DOUBLE
    if target is T.STRING:
        return java_double_to_string(value)
    if target is T.INT64:
        return _double_to_int64(value)
    if not math.isfinite(value):
        raise ConversionError(f"{value!r} is not a JSON number")
    return value  # JSON
