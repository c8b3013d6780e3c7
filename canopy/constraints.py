"""Update constraints as a client builds them: conditions a ``set`` or ``json_patch`` applies
under (pure: no I/O, nothing of the server's extra).

The server checks a constraint against the topic as it is, in the same step as the update;
when it does not hold the update fails with :class:`~canopy.errors.UnsatisfiedConstraintError`
and nothing changes::

    from canopy import constraints as c

    c.no_topic()                                  # only if nothing is at the path yet
    c.value_equals(41)                            # only if the value is still 41
    c.json_with_value("/owner", "ann") & c.json_without_value("/closed")
    c.no_value() | c.value_equals("draft")

Terms combine with ``&`` and ``|`` (or :meth:`~topics.constraints.And.and_` and
:meth:`~topics.constraints.Or.or_`); ``to_wire()`` gives the form a request carries (the
table of :mod:`topics.constraints`). A builder refuses what the server would refuse, with the
same error: a value that cannot be encoded (:class:`~canopy.errors.InvalidValueError`), a
pointer or lock that is not one (:class:`~canopy.errors.InvalidConstraintError`).
"""

from __future__ import annotations

from typing import Any, Protocol

from canopy import errors
from topics import types as values
from topics.constraints import (
    MAX_LOCK_NAME,
    MAX_POINTER,
    And,
    Constraint,
    JsonWithoutValue,
    JsonWithValue,
    Locked,
    NoTopic,
    NoValue,
    Or,
    ValueEquals,
)
from topics.errors import TopicModelError
from topics.pointer import PointerError, parse_pointer
from topics.types import TopicType

__all__ = [
    "And", "Constraint", "JsonWithValue", "JsonWithoutValue", "Locked", "NoTopic", "NoValue", "Or",
    "SessionLock", "ValueEquals",
    "json_with_value", "json_without_value", "locked", "no_topic", "no_value", "value_equals",
]


class SessionLock(Protocol):
    """What :func:`locked` reads of a session lock: its name and the sequence it was acquired at."""

    @property
    def name(self) -> str: ...

    @property
    def sequence(self) -> int: ...


def value_equals(value: Any, type: TopicType | str | None = None) -> ValueEquals:  # noqa: A002 (as Topics.set)
    """The topic's value is ``value``, encoded as ``Topics.set`` encodes it (with ``type``, for
    that topic type; else bytes raw and anything else as one CBOR item), compared with the
    topic's value in the form the topic stores it."""
    try:
        topic_type = TopicType.parse(type) if type is not None else None
        data, raw = values.encode_any(value, topic_type)
    except TopicModelError as e:
        raise errors.error_for(e.code, str(e)) from None
    return ValueEquals(data, raw)


def no_value() -> NoValue:
    """A topic is at the path and it has no value."""
    return NoValue()


def no_topic() -> NoTopic:
    """No topic is at the path (with ``add_if_missing``: add the topic only if it is not there)."""
    return NoTopic()


def locked(lock: SessionLock) -> Locked:
    """The updating session holds ``lock`` (a :class:`~canopy.client.SessionLock`) still at the
    sequence it was acquired at: the gateway decides it from the cluster's lock table."""
    name, sequence = getattr(lock, "name", None), getattr(lock, "sequence", None)
    if not isinstance(name, str) or not 0 < len(name) <= MAX_LOCK_NAME:
        raise errors.InvalidConstraintError(
            f"a lock's name is a string of 1 to {MAX_LOCK_NAME} characters, got {name!r}"
        )
    if not isinstance(sequence, int) or isinstance(sequence, bool) or not 0 <= sequence < 2**63:
        raise errors.InvalidConstraintError(f"a lock's sequence is an integer 0 to 2**63-1, got {sequence!r}")
    return Locked(name, sequence)


def json_with_value(pointer: str, value: Any) -> JsonWithValue:
    """The topic is JSON and its value has ``value`` at the RFC 6901 ``pointer`` (compared as
    CBOR bytes, as a JSON patch ``test`` is: member order and ``1`` against ``1.0`` matter)."""
    tokens = _pointer(pointer)
    try:
        data = values.encode(TopicType.JSON, value)
    except TopicModelError as e:
        raise errors.error_for(e.code, str(e)) from None
    return JsonWithValue(tokens, data)


def json_without_value(pointer: str) -> JsonWithoutValue:
    """The topic is JSON and its value has nothing at the RFC 6901 ``pointer``."""
    return JsonWithoutValue(_pointer(pointer))


def _pointer(text: Any) -> tuple[str, ...]:
    if not isinstance(text, str):
        raise errors.InvalidConstraintError(f"a JSON pointer is a string, got {type(text).__name__}")
    if len(text) > MAX_POINTER:
        raise errors.InvalidConstraintError(f"a JSON pointer has at most {MAX_POINTER} characters")
    try:
        return parse_pointer(text)
    except PointerError as e:
        raise errors.InvalidConstraintError(f"{text!r} is not a JSON pointer: {e}") from None


