"""How MQTT topic names, topic filters and payloads map onto canopy's topic tree.

Pure: no I/O, no clock, no asyncio; the MQTT broker shell calls these on the
names, filters and payloads its codec has decoded.

Topic names
-----------
:func:`path_of` splits an MQTT topic name on ``/`` into levels and makes
each level one canopy path segment, verbatim, except that an *empty* level
becomes the segment ``%`` (a single percent sign)::

    sport/tennis/player1   ->  sport/tennis/player1
    /finance               ->  %/finance
    a//b/                  ->  a/%/b/%
    $SYS/broker/uptime     ->  $SYS/broker/uptime

Refused, with :class:`MappingError` naming the name and the offending
position or level:

* the empty name (MQTT-4.7.3-1) and a name longer than ``max_length``
  characters (default :data:`MAX_TOPIC_LENGTH`);
* a level that is exactly ``%``: that segment stands for an empty level, so
  mapping it verbatim would give two names one path (``%%``, ``a%`` and any
  other level merely *containing* ``%`` map verbatim);
* a control character, U+0000 (MQTT-4.7.3-2) to U+001F and U+007F to
  U+009F, which canopy paths cannot hold; a surrogate code point, which is
  not UTF-8 (MQTT-1.5.4-1);
* the wildcard characters ``+`` and ``#``, which a topic name may not
  contain (MQTT-3.3.2-2, MQTT-4.7.1-1).

The mapping is injective, and :func:`topic_of` reverses it for *every*
canopy path (segment ``%`` -> empty level, everything else verbatim):
``topic_of(path_of(t)) == t`` for every name :func:`path_of` accepts, and
``path_of(topic_of(p)) == p`` for every canopy path ``p`` except the
single-segment path ``%`` (its name would be empty) and paths holding ``+``,
``#`` or a surrogate, none of which is an MQTT topic name.
:func:`has_topic_name` tells them apart: deliver a topic to an MQTT
subscriber only when it holds.

Topic filters
-------------
:func:`selector_of` turns a topic filter into a canopy selector that
matches ``path_of(n)`` exactly when the filter matches the topic name ``n``:

* a filter without wildcards selects the one path: ``>`` + ``path_of(filter)``;
* otherwise a split-path pattern, one RE2 regex per level: a literal level
  matches exactly its segment (``re.escape``, an empty level ``%``), ``+``
  matches any one segment (``.+``) and a trailing ``#`` becomes the ``//``
  qualifier, so ``a/#`` selects ``a`` and all its descendants (MQTT-4.7.1-2):
  ``sport/+/player1`` -> ``?sport/.+/player1``, ``a/b/#`` -> ``?a/b//``;
* a first level ``+`` or ``#`` must not match a name starting with ``$``
  (MQTT-4.7.2-1), so its regex is ``[^$].*``: ``#`` -> ``?[^$].*//``,
  ``+/x`` -> ``?[^$].*/x``.

:func:`selector_of` refuses (:class:`MappingError`) what :func:`path_of`
refuses in a name, except the wildcards, and a misplaced wildcard (``#``
not alone in the last level, ``+`` not alone in its level). A selector may
also match paths that have no topic name (``#`` matches ``%``); check
:func:`has_topic_name` before delivering.

:func:`parse_shared` splits ``$share/GROUP/filter`` into its share name and
filter (MQTT-4.8.2-1, MQTT-4.8.2-2).

Payloads
--------
:func:`from_payload` and :func:`to_payload` are the rule of
:func:`topics.types.from_text` and :func:`topics.types.to_text` (one rule,
kept where the topic store applies it): a payload is UTF-8 text for STRING,
a decimal integer for INT64, a decimal number, ``NaN`` or ``Infinity`` for
DOUBLE, JSON text for JSON and the bytes themselves for BINARY (a
TIME_SERIES topic: its event value type); the empty payload is no value
(null; no bytes for BINARY). What does not convert raises
:class:`~topics.errors.InvalidValueError` saying why.

:func:`payload_format` and :func:`content_type` give the MQTT 5 payload
format indicator and content type to send with each type's payloads.

Errors
------
::

    ValueError
    ├── MappingError          a topic name, filter or share name has no canopy equivalent
    └── topics.errors.InvalidValueError   a payload does not fit the topic type
"""

from __future__ import annotations

import re
from typing import NoReturn

from topics.errors import InvalidValueError, SelectorError
from topics.selectors import Selector, parse_selector
from topics.types import TopicType, from_text, to_text

__all__ = [
    "EMPTY_LEVEL",
    "MAX_TOPIC_LENGTH",
    "MappingError",
    "SHARE_PREFIX",
    "content_type",
    "from_payload",
    "has_topic_name",
    "parse_shared",
    "path_of",
    "payload_format",
    "selector_of",
    "to_payload",
    "topic_of",
]

#: the canopy segment an empty MQTT topic level maps to
EMPTY_LEVEL = "%"
#: the longest topic name or filter accepted by default, in characters
MAX_TOPIC_LENGTH = 4096
#: what a shared subscription's topic filter starts with (MQTT 5, 4.8.2)
SHARE_PREFIX = "$share/"

# any one segment; no "/" in it, since a split-path pattern splits on "/"
_ANY_SEGMENT = ".+"
# any one first segment that does not start with "$" (MQTT-4.7.2-1)
_ANY_FIRST_SEGMENT = "[^$].*"
# control characters (as in topics.paths) and surrogates (not UTF-8)
_FORBIDDEN = re.compile("[\x00-\x1f\x7f-\x9f\ud800-\udfff]")
_WILDCARD = re.compile("[+#]")
_EXCERPT = 40


class MappingError(ValueError):
    """A topic name, topic filter or share name that canopy cannot map.

    ``kind`` says what was mapped ("topic name", "topic filter" or "shared
    subscription"), ``text`` is it as given, ``reason`` what is wrong,
    ``position`` the offending character index and ``level`` the index of
    the offending level (each ``None`` when the whole text is at fault).
    """

    def __init__(
        self,
        kind: str,
        text: str,
        reason: str,
        *,
        position: int | None = None,
        level: int | None = None,
    ) -> None:
        self.kind = kind
        self.text = text
        self.reason = reason
        self.position = position
        self.level = level
        where = ""
        if level is not None:
            where += f" in level {level}"
        if position is not None:
            where += f" at position {position}"
        shown = text if len(text) <= _EXCERPT * 2 else text[: _EXCERPT * 2] + "..."
        super().__init__(f"invalid MQTT {kind} {shown!r}: {reason}{where}")


# --------------------------------------------------------------------------
# topic names


def path_of(topic_name: str, *, max_length: int = MAX_TOPIC_LENGTH) -> str:
    """The canopy path of an MQTT topic name (see the module docstring).

    Raises :class:`MappingError` for a name that is empty, longer than
    ``max_length`` characters, holds a control character, a surrogate or a
    wildcard, or has a level that is exactly ``%``.
    """
    kind = "topic name"
    _check_text(kind, topic_name, max_length)
    bad = _WILDCARD.search(topic_name)
    if bad is not None:
        raise MappingError(
            kind,
            topic_name,
            f"wildcard character {bad.group()!r} is allowed only in topic filters (MQTT-3.3.2-2)",
            position=bad.start(),
            level=topic_name.count("/", 0, bad.start()),
        )
    return "/".join(_segments(kind, topic_name))


def topic_of(path: str) -> str:
    """The MQTT topic name of a canopy path in normal form: each segment ``%``
    becomes an empty level, every other segment is kept verbatim.

    Defined for every path; the result is a valid topic name (and
    :func:`path_of` maps it back) exactly when :func:`has_topic_name` holds.
    """
    if EMPTY_LEVEL not in path:
        return path
    return "/".join("" if s == EMPTY_LEVEL else s for s in path.split("/"))


def has_topic_name(path: str, *, max_length: int = MAX_TOPIC_LENGTH) -> bool:
    """True when ``topic_of(path)`` is a topic name that :func:`path_of` maps
    back to ``path``: not for ``%``, nor for paths holding ``+``, ``#`` or a
    surrogate, nor for names longer than ``max_length``."""
    try:
        return path_of(topic_of(path), max_length=max_length) == path
    except MappingError:
        return False


def _check_text(kind: str, text: str, max_length: int) -> None:
    """Refuse an empty or too long name or filter, or one holding a control
    character or a surrogate."""
    if not text:
        raise MappingError(kind, text, "it must be at least one character long (MQTT-4.7.3-1)")
    if len(text) > max_length:
        raise MappingError(kind, text, f"it is {len(text)} characters long, more than the {max_length} allowed")
    bad = _FORBIDDEN.search(text)
    if bad is not None:
        code = ord(bad.group())
        if code == 0:
            why = "the null character U+0000 is not allowed (MQTT-4.7.3-2)"
        elif 0xD800 <= code <= 0xDFFF:
            why = f"surrogate U+{code:04X} is not UTF-8 (MQTT-1.5.4-1)"
        else:
            why = f"control character U+{code:04X} is not allowed in canopy paths"
        raise MappingError(kind, text, why, position=bad.start(), level=text.count("/", 0, bad.start()))


def _segments(kind: str, text: str) -> list[str]:
    """The path segments of the levels of ``text`` (see :func:`_segment`)."""
    out: list[str] = []
    position = 0
    for index, level in enumerate(text.split("/")):
        out.append(_segment(kind, text, level, index, position))
        position += len(level) + 1
    return out


def _segment(kind: str, text: str, level: str, index: int, position: int) -> str:
    """The path segment of ``level`` (level ``index`` of ``text``, starting at
    ``position``): ``%`` for an empty level; a level ``%`` is refused."""
    if not level:
        return EMPTY_LEVEL
    if level == EMPTY_LEVEL:
        raise MappingError(
            kind,
            text,
            f"a level may not be exactly {EMPTY_LEVEL!r}: canopy uses that segment for an empty level",
            position=position,
            level=index,
        )
    return level


# --------------------------------------------------------------------------
# topic filters


def selector_of(topic_filter: str, *, max_length: int = MAX_TOPIC_LENGTH) -> Selector:
    """The canopy selector matching the paths of the topic names ``topic_filter``
    matches (see the module docstring); it always parses.

    Pass the filter of a shared subscription without its ``$share/GROUP/``
    (:func:`parse_shared`). Raises :class:`MappingError` for a filter that is
    empty, longer than ``max_length`` characters, holds a control character
    or a surrogate, misplaces a wildcard or has a level that is exactly ``%``.
    """
    kind = "topic filter"
    _check_text(kind, topic_filter, max_length)
    levels = topic_filter.split("/")
    last = len(levels) - 1
    segments: list[str] = []  # the literal levels' path segments
    patterns: list[str] = []  # one RE2 regex per level but a trailing "#"
    qualifier = ""
    wild = False
    position = 0
    for index, level in enumerate(levels):
        if level == "+":
            wild = True
            patterns.append(_ANY_FIRST_SEGMENT if index == 0 else _ANY_SEGMENT)
        elif level == "#":
            if index != last:
                _misplaced(topic_filter, "'#' must be the last level (MQTT-4.7.1-2)", position, index)
            wild = True
            qualifier = "//"
        elif "#" in level:
            _misplaced(topic_filter, "'#' must occupy an entire level (MQTT-4.7.1-2)", position + level.index("#"), index)
        elif "+" in level:
            _misplaced(topic_filter, "'+' must occupy an entire level (MQTT-4.7.1-3)", position + level.index("+"), index)
        else:
            segment = _segment(kind, topic_filter, level, index, position)
            segments.append(segment)
            patterns.append(re.escape(segment))  # its escapes are valid RE2
        position += len(level) + 1
    if not wild:
        return _parse(topic_filter, ">" + "/".join(segments))
    if not patterns:  # the filter "#": every name not starting with "$"
        patterns.append(_ANY_FIRST_SEGMENT)
    return _parse(topic_filter, "?" + "/".join(patterns) + qualifier)


def _misplaced(topic_filter: str, reason: str, position: int, level: int) -> NoReturn:
    raise MappingError("topic filter", topic_filter, reason, position=position, level=level)


def _parse(topic_filter: str, expression: str) -> Selector:
    try:
        return parse_selector(expression)
    except SelectorError as e:  # not expected: every filter checked above maps
        raise MappingError("topic filter", topic_filter, f"no canopy selector: {e.reason}") from None


def parse_shared(topic_filter: str) -> tuple[str | None, str]:
    """``(share name, filter)`` of ``$share/GROUP/filter``; ``(None, topic_filter)``
    for any other filter.

    Raises :class:`MappingError` for a shared subscription whose share name
    is empty or holds ``+``, ``#`` or a control character (MQTT-4.8.2-1,
    MQTT-4.8.2-2), or that has no filter after it. The filter returned is
    not checked: pass it to :func:`selector_of`.
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None, topic_filter
    kind = "shared subscription"
    rest = topic_filter[len(SHARE_PREFIX) :]
    group, slash, inner = rest.partition("/")
    if not group:
        raise MappingError(
            kind, topic_filter, "the share name must be at least one character long (MQTT-4.8.2-1)",
            position=len(SHARE_PREFIX),
        )
    bad = re.search("[+#\x00-\x1f\x7f-\x9f]", group)
    if bad is not None:
        c = bad.group()
        what = repr(c) if c in "+#" else f"control character U+{ord(c):04X}"
        raise MappingError(
            kind,
            topic_filter,
            f"the share name may not contain {what} (MQTT-4.8.2-2)",
            position=len(SHARE_PREFIX) + bad.start(),
        )
    if not slash or not inner:
        raise MappingError(
            kind,
            topic_filter,
            "the share name must be followed by '/' and a topic filter (MQTT-4.8.2-2)",
            position=len(topic_filter),
        )
    return group, inner


# --------------------------------------------------------------------------
# payloads


def _value_type(topic_type: TopicType) -> TopicType:
    if topic_type is TopicType.TIME_SERIES:
        raise InvalidValueError(
            "a TIME_SERIES topic has no single value: map payloads with its event value type"
        )
    return topic_type


def from_payload(topic_type: TopicType, payload: bytes) -> bytes:
    """The stored bytes of the value a PUBLISH ``payload`` carries for a topic (or time
    series event) of ``topic_type``: :func:`topics.types.from_text`, the one rule
    (an empty payload is no value), which raises
    :class:`~topics.errors.InvalidValueError` saying why a payload does not convert."""
    return from_text(topic_type, payload)


def to_payload(topic_type: TopicType, stored: bytes) -> bytes:
    """The PUBLISH payload of a stored value of ``topic_type``:
    :func:`topics.types.to_text` (no value is the empty payload)."""
    return to_text(topic_type, stored)


def payload_format(topic_type: TopicType) -> int:
    """The MQTT 5 payload format indicator for payloads of ``topic_type``:
    1 (UTF-8 text) for STRING, INT64, DOUBLE and JSON, 0 (bytes) for BINARY."""
    return 0 if _value_type(topic_type) is TopicType.BINARY else 1


_CONTENT_TYPES = {
    TopicType.STRING: "text/plain; charset=utf-8",
    TopicType.INT64: "text/plain; charset=utf-8",
    TopicType.DOUBLE: "text/plain; charset=utf-8",
    TopicType.JSON: "application/json",
    TopicType.BINARY: "application/octet-stream",
}


def content_type(topic_type: TopicType) -> str:
    """The MQTT 5 content type for payloads of ``topic_type``."""
    return _CONTENT_TYPES[_value_type(topic_type)]
