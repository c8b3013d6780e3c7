"""The syntax of MQTT topic names and topic filters (section 4.7 of MQTT 3.1.1 and 5.0).

Pure string checks, shared by the decoder (which turns a problem into an
:class:`~mqtt.codec.MQTTError` at the field's byte offset) and the encoder
(which refuses to write what the decoder would refuse).

A *topic name* (in PUBLISH, a will, a Response Topic) is at least one
character long (MQTT-4.7.3-1), holds no wildcard ``+`` or ``#``
(MQTT-3.3.2-2; MQTT-4.7.1-1 in 3.1.1, MQTT-4.7.0-1 in 5.0), no U+0000
(MQTT-4.7.3-2) and encodes to at most 65,535 UTF-8 bytes (MQTT-4.7.3-3).

A *topic filter* (in SUBSCRIBE and UNSUBSCRIBE) obeys the same rules except
that it may hold wildcards where they fill a whole level: ``#`` only as the
whole last level (MQTT-4.7.1-2), ``+`` only as a whole level (MQTT-4.7.1-3).
In MQTT 5 a filter starting ``$share/`` is a shared subscription
``$share/{ShareName}/{filter}``: the ShareName is at least one character
(MQTT-4.8.2-1), holds none of ``/``, ``+``, ``#`` and is followed by ``/``
and a valid topic filter (MQTT-4.8.2-2). In MQTT 3.1.1 ``$share/`` is an
ordinary first level.

Each ``*_problem`` function returns ``None`` for a valid string, else a
sentence saying what is wrong and which statement it breaks.
"""

from __future__ import annotations

MAX_STRING_BYTES = 65_535
SHARE_PREFIX = "$share/"


def string_problem(text: str) -> str | None:
    """What keeps *text* from being an MQTT UTF-8 Encoded String, or None.

    It must encode to well-formed UTF-8 (no surrogate code points,
    MQTT-1.5.4-1), hold no U+0000 (MQTT-1.5.4-2) and encode to at most
    65,535 bytes.
    """
    if "\x00" in text:
        return f"holds U+0000 at character {text.index(chr(0))} (MQTT-1.5.4-2)"
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError as error:
        return f"holds the surrogate code point at character {error.start}, which is not UTF-8 (MQTT-1.5.4-1)"
    if size > MAX_STRING_BYTES:
        return f"encodes to {size} bytes, over {MAX_STRING_BYTES} (MQTT-4.7.3-3)"
    return None


def topic_name_problem(name: str) -> str | None:
    """What keeps *name* from being a topic name, or None (MQTT-4.7.3-1, MQTT-3.3.2-2)."""
    if not name:
        return "is empty (MQTT-4.7.3-1)"
    for wildcard in "+#":
        if wildcard in name:
            return f"holds the wildcard {wildcard!r} at character {name.index(wildcard)} (MQTT-3.3.2-2)"
    return string_problem(name)


def topic_filter_problem(topic_filter: str, *, shared: bool) -> str | None:
    """What keeps *topic_filter* from being a topic filter, or None.

    *shared* says whether ``$share/`` introduces a shared subscription
    (MQTT 5) that must then be well formed (MQTT-4.8.2-1, MQTT-4.8.2-2).
    """
    problem = string_problem(topic_filter)
    if problem is not None:
        return problem
    if shared and topic_filter.startswith(SHARE_PREFIX):
        rest = topic_filter[len(SHARE_PREFIX):]
        share_name, slash, inner = rest.partition("/")
        if not share_name:
            return "has an empty ShareName (MQTT-4.8.2-1)"
        for bad in "+#":
            if bad in share_name:
                return f"has {bad!r} in its ShareName {share_name!r} (MQTT-4.8.2-2)"
        if not slash:
            return f"has no '/' and topic filter after its ShareName {share_name!r} (MQTT-4.8.2-2)"
        inner_problem = _filter_levels_problem(inner)
        return None if inner_problem is None else f"has a shared topic filter that {inner_problem}"
    return _filter_levels_problem(topic_filter)


def _filter_levels_problem(topic_filter: str) -> str | None:
    if not topic_filter:
        return "is empty (MQTT-4.7.3-1)"
    levels = topic_filter.split("/")
    for index, level in enumerate(levels):
        if "#" in level and (level != "#" or index != len(levels) - 1):
            return f"has '#' in level {index} ({level!r}), not alone in the last level (MQTT-4.7.1-2)"
        if "+" in level and level != "+":
            return f"has '+' in level {index} ({level!r}), not alone in its level (MQTT-4.7.1-3)"
    return None


def split_shared(topic_filter: str) -> tuple[str, str] | None:
    """``(share name, topic filter)`` of an MQTT 5 shared subscription filter, else None.

    Call on a filter :func:`topic_filter_problem` accepted with
    ``shared=True``; ``split_shared("$share/g/a/+") == ("g", "a/+")``.
    """
    if not topic_filter.startswith(SHARE_PREFIX):
        return None
    share_name, slash, inner = topic_filter[len(SHARE_PREFIX):].partition("/")
    if not share_name or not slash:
        return None
    return share_name, inner


def is_topic_name(name: str) -> bool:
    """Whether *name* is a valid topic name (see :func:`topic_name_problem`)."""
    return topic_name_problem(name) is None


def is_topic_filter(topic_filter: str, *, shared: bool = True) -> bool:
    """Whether *topic_filter* is a valid topic filter (see :func:`topic_filter_problem`)."""
    return topic_filter_problem(topic_filter, shared=shared) is None
