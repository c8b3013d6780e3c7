"""Errors raised by the pure topic model.

Every error a user can provoke with bad input is a subclass of
:class:`TopicModelError`, which is itself a :class:`ValueError`, so callers
that only care about "the input was bad" can catch one type::

    TopicModelError (ValueError)
    ├── PathError             a topic path is empty or contains a forbidden character
    ├── SelectorError         a topic selector expression does not parse
    ├── OpenAjaxNameError     a dotted OpenAjax topic name or pattern is invalid
    ├── TopicTypeError        an unknown topic type name
    ├── InvalidValueError     a value does not fit the topic (or event) type
    ├── ConversionError       a value cannot be converted to another topic type
    ├── SpecificationError    a topic property name or value is invalid
    ├── TopicConflictError    a path is already bound to a topic with another specification
    ├── NoSuchTopicError      no topic is bound to the path
    ├── ReferenceTopicError   the path is bound to a (read-only) reference topic of a view
    ├── ConstraintError       an update constraint's wire form is malformed
    ├── UnsatisfiedConstraintError  an update's constraint does not hold: nothing changed
    ├── PatchFailedError      a JSON patch cannot apply to the topic's value: nothing changed
    └── TimeSeriesError
        ├── TimestampOrderError   an event timestamp goes backwards
        ├── UnknownSequenceError  an edit refers to no retained original event
        ├── NotEventAuthorError   an "own events only" edit of another author's event
        └── RangeQueryError       a range query is malformed

Errors carry the structured facts (the offending text, its position, the
path) as attributes so that the wire protocol can ship them to a client
without parsing the message; ``code`` is the error's name on the wire.
"""

from __future__ import annotations


class TopicModelError(ValueError):
    """Base of every input error raised by :mod:`topics`."""

    code = "INVALID_INPUT"


class PathError(TopicModelError):
    """A topic path is invalid.

    ``path`` is the text as given, ``position`` the offending character index
    (``None`` when the whole path is at fault, e.g. when it is empty).
    """

    code = "INVALID_PATH"

    def __init__(self, message: str, path: object, position: int | None = None) -> None:
        self.path = path
        self.position = position
        where = f" at position {position}" if position is not None else ""
        super().__init__(f"invalid topic path {path!r}: {message}{where}")
        self.reason = message


class SelectorError(TopicModelError):
    """A topic selector expression is invalid.

    ``expression`` is the full expression as given and ``position`` the index
    of the character where the problem was found.
    """

    code = "INVALID_SELECTOR"

    def __init__(self, message: str, expression: str, position: int) -> None:
        self.expression = expression
        self.position = position
        self.reason = message
        super().__init__(
            f"invalid topic selector {expression!r}: {message} at position {position}"
        )


class OpenAjaxNameError(TopicModelError):
    """An OpenAjax dotted topic name (publish) or pattern (subscribe) is invalid."""

    code = "INVALID_NAME"

    def __init__(self, message: str, name: object, token_index: int | None = None) -> None:
        self.name = name
        self.token_index = token_index
        self.reason = message
        where = f" (token {token_index})" if token_index is not None else ""
        super().__init__(f"invalid OpenAjax topic name {name!r}: {message}{where}")


class TopicTypeError(TopicModelError):
    """An unknown topic type name."""

    code = "INVALID_TYPE"


class InvalidValueError(TopicModelError):
    """A value (Python object or encoded bytes) does not fit a topic type."""

    code = "INVALID_VALUE"


class ConversionError(TopicModelError):
    """A value cannot be converted to the requested topic type.

    Topic views treat this as "no reference topic"; ``reason`` says why.
    """

    code = "CONVERSION_FAILED"


class SpecificationError(TopicModelError):
    """A topic specification or one of its properties is invalid."""

    code = "INVALID_SPECIFICATION"


class TopicConflictError(TopicModelError):
    """A path is already bound to a topic whose specification differs."""

    code = "TOPIC_EXISTS_MISMATCH"

    def __init__(self, path: str, existing: object, requested: object) -> None:
        self.path = path
        self.existing = existing
        self.requested = requested
        super().__init__(
            f"topic {path!r} already exists with specification {existing}, "
            f"which differs from the requested {requested}"
        )


class TimeSeriesError(TopicModelError):
    """Base of the time series errors."""

    code = "TIME_SERIES_ERROR"


class TimestampOrderError(TimeSeriesError):
    """An event timestamp is earlier than the latest event of the series."""

    code = "TIMESTAMP_ORDER"


class UnknownSequenceError(TimeSeriesError):
    """An edit refers to a sequence number that is not a retained original event."""

    code = "UNKNOWN_SEQUENCE"


class RangeQueryError(TimeSeriesError):
    """A range query has invalid parameters."""

    code = "INVALID_QUERY"


class NoSuchTopicError(TopicModelError):
    """An operation names a path that no topic is bound to."""

    code = "NO_SUCH_TOPIC"


class NotEventAuthorError(TimeSeriesError):
    """An edit allowed only for one's own events names someone else's event."""

    code = "PERMISSION_DENIED"


class NotOwnerError(TopicModelError):
    """An update by a principal whose roles lack the permission, on a topic whose OWNER is not it."""

    code = "PERMISSION_DENIED"


class ReferenceTopicError(TopicModelError):
    """The path is bound to a reference topic, which only its view may change."""

    code = "REFERENCE_TOPIC"


class ConstraintError(TopicModelError):
    """An update constraint's wire form is malformed; ``where`` names the offending term
    (``"and[1].or[0]"``; ``""`` for the whole constraint) and ``reason`` what is wrong."""

    code = "INVALID_CONSTRAINT"

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"invalid update constraint{f' at {where}' if where else ''}: {reason}")


class UnsatisfiedConstraintError(TopicModelError):
    """An update's constraint does not hold against the topic's current state; the update
    was not applied. The message names the term that failed."""

    code = "UNSATISFIED_CONSTRAINT"


class PatchFailedError(TopicModelError):
    """A well-formed JSON patch cannot apply to the topic's current value (a ``test``
    operation fails, a path does not exist, the topic has no value); nothing changed."""

    code = "PATCH_FAILED"


def excerpt(text: str, line: int, column: int) -> str:
    """The 1-based ``line`` of ``text`` with a caret under ``column`` (for parse errors)."""
    lines = text.splitlines() or [""]
    source = lines[max(min(line, len(lines)), 1) - 1]
    return source + "\n" + " " * max(column - 1, 0) + "^"
