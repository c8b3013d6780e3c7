"""Exceptions raised by the canopy client.

Every error the server reports carries a code; :func:`error_for` turns it
into the matching exception class, so callers can catch exactly what they
handle::

    CanopyError
    ├── InvalidInputError            the request was refused for its content
    │   ├── InvalidPathError             INVALID_PATH
    │   ├── InvalidSelectorError         INVALID_SELECTOR
    │   ├── InvalidNameError             INVALID_NAME (OpenAjax)
    │   ├── InvalidTypeError             INVALID_TYPE
    │   ├── InvalidValueError            INVALID_VALUE
    │   ├── InvalidSpecificationError    INVALID_SPECIFICATION
    │   ├── InvalidPropertiesError       INVALID_PROPERTIES (session properties)
    │   ├── InvalidRequestError          INVALID_REQUEST (wrong arguments)
    │   ├── InvalidQueryError            INVALID_QUERY (time series range query)
    │   ├── InvalidFilterError           INVALID_FILTER (session filter)
    │   ├── InvalidBranchMappingError    INVALID_BRANCH_MAPPING
    │   ├── InvalidSecurityCommandError  INVALID_SECURITY_COMMAND
    │   ├── InvalidFanoutError           INVALID_FANOUT (a fan-out connection definition)
    │   ├── InvalidRemoteServerError     INVALID_REMOTE_SERVER (a remote server definition)
    │   ├── InvalidCollectorError        INVALID_COLLECTOR (a metric collector definition)
    │   ├── InvalidConstraintError       INVALID_CONSTRAINT (an update constraint's form)
    │   └── FrameTooLargeError           FRAME_TOO_LARGE
    ├── TimeSeriesError              TIME_SERIES_ERROR
    │   ├── TimestampOrderError          TIMESTAMP_ORDER
    │   └── UnknownSequenceError         UNKNOWN_SEQUENCE
    ├── PermissionDeniedError        PERMISSION_DENIED
    ├── AuthenticationError          AUTHENTICATION_FAILED
    ├── TopicExistsMismatchError     TOPIC_EXISTS_MISMATCH
    ├── NoSuchTopicError             NO_SUCH_TOPIC
    ├── UnsatisfiedConstraintError   UNSATISFIED_CONSTRAINT (an update's constraint did not hold)
    ├── PatchFailedError             PATCH_FAILED (a JSON patch did not apply)
    ├── UnknownOperationError        UNKNOWN_OPERATION
    ├── ProtocolViolationError       PROTOCOL_ERROR, UNSUPPORTED_VERSION
    ├── UnavailableError             UNAVAILABLE (a partition is down)
    ├── NoSuchNodeError              NO_SUCH_NODE (cluster node actions)
    ├── NoSuchSessionError           NO_SUCH_SESSION (client control, messaging: no session has that id)
    ├── MessagingError               a request to other sessions failed (``session.messaging``)
    │   ├── HandlerConflictError         HANDLER_CONFLICT (the session has a handler for the path)
    │   ├── UnhandledMessageError        UNHANDLED_MESSAGE (no handler, no request stream)
    │   ├── RequestTimeoutError          REQUEST_TIMEOUT (no response in time)
    │   ├── RejectedRequestError         REJECTED_REQUEST (the recipient refused; its message)
    │   ├── IncompatibleDatatypeError    INCOMPATIBLE_DATATYPE (a value of another type than expected)
    │   └── RecipientClosedError         RECIPIENT_CLOSED (the recipient's session ended first)
    ├── RefusedError                 REFUSED (a cluster node action needs force)
    ├── RequestCancelledError        CANCELLED (a missing-topic handler cancelled it)
    ├── LimitExceededError           LIMIT_EXCEEDED (a per-session limit)
    ├── SessionClosedError           the session ended (``code`` says why)
    ├── ConnectionInterruptedError   CONNECTION_INTERRUPTED: the connection dropped
    │                                while the request was in flight; the session goes on
    └── ConnectError                 could not connect or handshake
"""

from __future__ import annotations


class CanopyError(Exception):
    """Base of every client error; ``code`` is the server's error code."""

    code = "INTERNAL"

    def __init__(self, message: str, code: str | None = None) -> None:
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


class InvalidInputError(CanopyError):
    code = "INVALID_INPUT"


class InvalidPathError(InvalidInputError):
    code = "INVALID_PATH"


class InvalidSelectorError(InvalidInputError):
    code = "INVALID_SELECTOR"


class InvalidNameError(InvalidInputError):
    code = "INVALID_NAME"


class InvalidTypeError(InvalidInputError):
    code = "INVALID_TYPE"


class InvalidValueError(InvalidInputError):
    code = "INVALID_VALUE"


class InvalidSpecificationError(InvalidInputError):
    code = "INVALID_SPECIFICATION"


class InvalidPropertiesError(InvalidInputError):
    code = "INVALID_PROPERTIES"


class InvalidRequestError(InvalidInputError):
    code = "INVALID_REQUEST"


class FrameTooLargeError(InvalidInputError):
    code = "FRAME_TOO_LARGE"


class InvalidQueryError(InvalidInputError):
    code = "INVALID_QUERY"


class TimeSeriesError(CanopyError):
    code = "TIME_SERIES_ERROR"


class TimestampOrderError(TimeSeriesError):
    """An event's timestamp is earlier than the newest event's."""

    code = "TIMESTAMP_ORDER"


class UnknownSequenceError(TimeSeriesError):
    """An edit names no retained original event."""

    code = "UNKNOWN_SEQUENCE"


class InvalidFilterError(InvalidInputError):
    """A session filter does not parse; the message shows where."""

    code = "INVALID_FILTER"


class InvalidBranchMappingError(InvalidInputError):
    code = "INVALID_BRANCH_MAPPING"


class InvalidSecurityCommandError(InvalidInputError):
    code = "INVALID_SECURITY_COMMAND"


class InvalidFanoutError(InvalidInputError):
    """A fan-out connection definition that cannot be used, or a name in use."""

    code = "INVALID_FANOUT"


class InvalidRemoteServerError(InvalidInputError):
    """A remote server definition that cannot be used, a name in use, or none such."""

    code = "INVALID_REMOTE_SERVER"


class InvalidCollectorError(InvalidInputError):
    """A metric collector definition that cannot be used, or one too many."""

    code = "INVALID_COLLECTOR"


class InvalidConstraintError(InvalidInputError):
    """An update constraint that is not well formed; the message says where (``and[1].or[0]``)."""

    code = "INVALID_CONSTRAINT"


class InvalidViewError(InvalidInputError):
    """A topic view specification that parses but is not valid (the message
    gives line, column and the offending text under a caret)."""

    code = "INVALID_VIEW"


class ViewSyntaxError(InvalidViewError):
    """A topic view specification that does not parse (line, column, caret)."""

    code = "VIEW_SYNTAX"


class ReferenceTopicError(CanopyError):
    """The topic is a reference topic of a view: it is read-only."""

    code = "REFERENCE_TOPIC"


class PermissionDeniedError(CanopyError):
    """The session lacks a permission; the message names it and the path."""

    code = "PERMISSION_DENIED"


class AuthenticationError(CanopyError):
    code = "AUTHENTICATION_FAILED"


class TopicExistsMismatchError(CanopyError):
    code = "TOPIC_EXISTS_MISMATCH"


class NoSuchTopicError(CanopyError):
    code = "NO_SUCH_TOPIC"


class UnsatisfiedConstraintError(CanopyError):
    """An update's constraint did not hold against the topic's current state: the update was
    not applied. The message names the term that failed."""

    code = "UNSATISFIED_CONSTRAINT"


class PatchFailedError(CanopyError):
    """A JSON patch could not apply to the topic's value (a ``test`` failed, a path is missing,
    the topic has no value): nothing changed."""

    code = "PATCH_FAILED"


class UnknownOperationError(CanopyError):
    code = "UNKNOWN_OPERATION"


class ProtocolViolationError(CanopyError):
    code = "PROTOCOL_ERROR"


class UnavailableError(CanopyError):
    code = "UNAVAILABLE"


class NoSuchNodeError(CanopyError):
    """No alive cluster node has that name."""

    code = "NO_SUCH_NODE"


class NoSuchSessionError(CanopyError):
    """Client control named a session id that no gateway holds (closed, or never opened)."""

    code = "NO_SUCH_SESSION"


class MessagingError(CanopyError):
    """A request sent to other sessions (``session.messaging``) got no response."""

    code = "MESSAGING_ERROR"


class HandlerConflictError(MessagingError):
    """The session has a request handler for that path already: close it first."""

    code = "HANDLER_CONFLICT"


class UnhandledMessageError(MessagingError):
    """No handler covers the request's path, or the recipient has no request stream for it."""

    code = "UNHANDLED_MESSAGE"


class RequestTimeoutError(MessagingError):
    """No response came within the request's timeout."""

    code = "REQUEST_TIMEOUT"


class RejectedRequestError(MessagingError):
    """The recipient refused the request (its handler raised); the message is the recipient's."""

    code = "REJECTED_REQUEST"


class IncompatibleDatatypeError(MessagingError):
    """A request or response of another type than its receiver expects."""

    code = "INCOMPATIBLE_DATATYPE"


class RecipientClosedError(MessagingError):
    """The recipient's session ended before it answered."""

    code = "RECIPIENT_CLOSED"


class RefusedError(CanopyError):
    """A cluster node action that would hit more than asked (a real machine, the
    controller's node) and was not forced; the message says why."""

    code = "REFUSED"


class RequestCancelledError(CanopyError):
    """A subscription or fetch that matched no topic was cancelled by the missing-topic
    handler it was offered to: nothing was subscribed or fetched."""

    code = "CANCELLED"


class LimitExceededError(CanopyError):
    """A request would take the session past one of the server's per-session limits."""

    code = "LIMIT_EXCEEDED"


class SessionClosedError(CanopyError):
    """The session is over; ``code`` is the server's reason (e.g. QUEUE_LIMIT)."""

    code = "SESSION_CLOSED"


class ConnectionInterruptedError(CanopyError):
    """The connection dropped while this request was in flight.

    Its outcome is unknown: the server may have carried it out (a ``set``
    applied, a topic added) or not, and its answer is lost. The session
    itself goes on: the client reconnects (resuming the session where the
    server still has it), so a request may be made again — check first when
    doing it twice would matter. Not a :class:`SessionClosedError`: when the
    client cannot reconnect, the session ends and *that* error follows.
    """

    code = "CONNECTION_INTERRUPTED"


class ConnectError(CanopyError):
    code = "CONNECT_FAILED"


_BY_CODE: dict[str, type[CanopyError]] = {
    cls.code: cls
    for cls in [
        InvalidInputError,
        InvalidPathError,
        InvalidSelectorError,
        InvalidNameError,
        InvalidTypeError,
        InvalidValueError,
        InvalidSpecificationError,
        InvalidPropertiesError,
        InvalidRequestError,
        FrameTooLargeError,
        InvalidQueryError,
        InvalidFilterError,
        InvalidBranchMappingError,
        InvalidSecurityCommandError,
        InvalidViewError,
        InvalidFanoutError,
        InvalidRemoteServerError,
        InvalidCollectorError,
        InvalidConstraintError,
        ViewSyntaxError,
        ReferenceTopicError,
        PermissionDeniedError,
        AuthenticationError,
        TimeSeriesError,
        TimestampOrderError,
        UnknownSequenceError,
        TopicExistsMismatchError,
        NoSuchTopicError,
        UnsatisfiedConstraintError,
        PatchFailedError,
        UnknownOperationError,
        ProtocolViolationError,
        UnavailableError,
        NoSuchNodeError,
        NoSuchSessionError,
        MessagingError,
        HandlerConflictError,
        UnhandledMessageError,
        RequestTimeoutError,
        RejectedRequestError,
        IncompatibleDatatypeError,
        RecipientClosedError,
        RefusedError,
        RequestCancelledError,
        LimitExceededError,
        SessionClosedError,
        ConnectionInterruptedError,
        ConnectError,
    ]
}
_BY_CODE["UNSUPPORTED_VERSION"] = ProtocolViolationError
_BY_CODE["CONVERSION_FAILED"] = InvalidValueError


def error_for(code: str, message: str) -> CanopyError:
    """The exception for a server error code (unknown codes give :class:`CanopyError`)."""
    return _BY_CODE.get(code, CanopyError)(message, code)
