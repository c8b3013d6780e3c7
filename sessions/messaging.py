"""Request/response messaging between sessions: the decisions, without I/O.

A session sends a typed value (a *request*) on a message path and waits for one
typed value back (the *response*). Requests are

* **unaddressed** (``message_send``): to the session whose *handler* covers the
  path. A handler registered for a path covers its branch; the handler of the
  most specific registered path wins (:meth:`HandlerRegistry.choose`: ``a``
  hears of ``a/b/c`` unless someone registered ``a/b``). When several sessions
  registered the same path, the gateway that routes the request takes them in
  turn (round robin, per gateway), so that the load spreads over them. A
  session holds at most one handler per path (a second one is
  ``HANDLER_CONFLICT``) and at most :data:`MAX_HANDLERS_PER_SESSION` in all.
* **addressed** to one session by id (``message_send_session``) or to every
  session a filter matches (``message_send_filter``), which answer through
  their client-local request streams; no registration is involved.

Every request has a deadline (:func:`timeout_for`); the sender's gateway keeps
what it waits for in :class:`Pending` (bounded per session and per gateway)
and the recipient's gateway what its sessions owe an answer to in
:class:`Deliveries`. Time is passed in (``now``): nothing here reads a clock.

A handler may ask for the senders' session properties (:func:`property_keys`,
:func:`pick`: ``*F`` stands for every fixed property, ``*U`` for every user
one, as in client control); its requests carry them.

Errors (:class:`MessagingError`, each with a wire ``code``):
``HANDLER_CONFLICT``, ``UNHANDLED_MESSAGE`` (no handler, no request stream),
``NO_SUCH_SESSION``, ``REQUEST_TIMEOUT``, ``REJECTED_REQUEST`` (the recipient
refused, with its message), ``INCOMPATIBLE_DATATYPE`` (a value not of the
type expected), ``RECIPIENT_CLOSED`` (the recipient's session ended before it
answered), ``LIMIT_EXCEEDED`` and ``INVALID_REQUEST``/``INVALID_TYPE``/
``INVALID_VALUE`` for malformed input.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sessions.client_control import ALL_FIXED, ALL_USER, pick, property_keys
from topics import paths
from topics.errors import InvalidValueError
from topics.types import TopicType, validate

#: handlers one session may register
MAX_HANDLERS_PER_SESSION = 100
#: requests one session may wait for at once (the ``max_message_requests`` setting's default)
MAX_PENDING_PER_SESSION = 100
#: requests one gateway waits for at once, and deliveries its sessions owe answers to
MAX_PENDING = 100_000
#: sessions a request to a filter reaches at most (the rest are not sent to)
MAX_FILTER_SESSIONS = 1_000
#: the types a request or a response may have
VALUE_TYPES = frozenset(
    {TopicType.STRING, TopicType.INT64, TopicType.DOUBLE, TopicType.JSON, TopicType.BINARY}
)
#: codes a recipient may refuse a request with (``message_reject``)
REJECTIONS = frozenset({"REJECTED_REQUEST", "UNHANDLED_MESSAGE", "INCOMPATIBLE_DATATYPE"})
#: bytes of a frame kept for what goes with a value (path, properties, ids) when it is passed on
_FRAME_HEADROOM = 65_536


class MessagingError(ValueError):
    """A refused or failed request: ``code`` is the wire error code."""

    code: str

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


# -- values --------------------------------------------------------------------------


def value_limit(max_frame_size: int) -> int:
    """The largest request or response value (bytes) a gateway with ``max_frame_size`` passes on:
    the frame less room for the path and session properties that travel with it."""
    return max_frame_size - min(_FRAME_HEADROOM, max_frame_size // 2)


def value_type(name: Any, what: str = "type") -> TopicType:
    """The value type ``name`` names (STRING, INT64, DOUBLE, JSON or BINARY)."""
    if not isinstance(name, str):
        raise MessagingError("INVALID_TYPE", f"the {what} must be a type name, not {type(name).__name__}")
    try:
        parsed = TopicType[name.strip().upper()]
    except KeyError:
        parsed = None
    if parsed not in VALUE_TYPES:
        raise MessagingError(
            "INVALID_TYPE", f"{name[:40]!r} is no {what}: expected one of "
            + ", ".join(sorted(t.value for t in VALUE_TYPES)))
    assert parsed is not None
    return parsed


def check_value(type_name: Any, data: Any, limit: int, what: str = "request") -> tuple[str, bytes]:
    """A typed value as it travels: ``(type name, bytes)``, the bytes a valid encoding of the
    type, and at most ``limit`` bytes long."""
    kind = value_type(type_name, f"{what} type")
    if not isinstance(data, (bytes, bytearray)):
        raise MessagingError("INVALID_VALUE", f"the {what} value must be bytes, not {type(data).__name__}")
    if len(data) > limit:
        raise MessagingError(
            "INVALID_VALUE", f"the {what} value is {len(data):,} bytes; at most {limit:,} may be sent")
    try:
        return kind.value, validate(kind, bytes(data))
    except InvalidValueError as e:
        raise MessagingError("INVALID_VALUE", f"the {what} value is not a {kind.value}: {e}") from None


def check_response(expected: str | None, type_name: str) -> None:
    """Refuse a response of another type than the sender expects (``INCOMPATIBLE_DATATYPE``)."""
    if expected is not None and type_name != expected:
        raise MessagingError(
            "INCOMPATIBLE_DATATYPE", f"the response is a {type_name}, the sender expects a {expected}")


def timeout_for(requested_ms: Any, default_ms: int, most_ms: int) -> float:
    """The seconds a request waits for its response: what it asks for (milliseconds, nil
    for the default), at most ``most_ms``."""
    if requested_ms is None:
        requested_ms = default_ms
    if not isinstance(requested_ms, (int, float)) or isinstance(requested_ms, bool) or not requested_ms > 0:
        raise MessagingError("INVALID_REQUEST", f"a timeout is a positive number of milliseconds, not {requested_ms!r}")
    return float(min(requested_ms, most_ms)) / 1000


# -- handlers ------------------------------------------------------------------------


@dataclass(frozen=True)
class Handler:
    """A registration: ``token`` names it everywhere (it starts with its gateway's id)."""

    token: str
    path: str
    session_id: str
    #: the sender's session properties its requests carry
    properties: tuple[str, ...] = ()
    #: its place among the handlers of its path (lower is older)
    order: int = 0


class HandlerRegistry:
    """Every handler of the instance, by path (one gateway's copy)."""

    def __init__(self, per_session: int = MAX_HANDLERS_PER_SESSION) -> None:
        self.per_session = per_session
        self._by_path: dict[str, list[Handler]] = {}
        self._by_token: dict[str, Handler] = {}
        self._turns: dict[str, int] = {}

    def add(self, token: str, path: str, session_id: str, properties: Iterable[str] = (),
            order: int | None = None) -> Handler:
        """Register; ``HANDLER_CONFLICT`` when the session has a handler for the path already."""
        path = paths.normalise(path)  # the root is no path (INVALID_PATH)
        if token in self._by_token:
            raise MessagingError("INVALID_REQUEST", f"registration {token!r} exists already")
        listed = self._by_path.get(path, [])
        if any(h.session_id == session_id for h in listed):
            raise MessagingError("HANDLER_CONFLICT", f"this session has a request handler for {path!r} already; "
                                 "close that registration first")
        if sum(1 for h in self._by_token.values() if h.session_id == session_id) >= self.per_session:
            raise MessagingError(
                "LIMIT_EXCEEDED", f"a session may register at most {self.per_session} request handlers")
        if order is None:
            order = listed[-1].order + 1 if listed else 0
        handler = Handler(token, path, session_id, tuple(properties), order)
        listed = self._by_path.setdefault(path, [])
        listed.append(handler)
        listed.sort(key=lambda h: (h.order, h.token))
        self._by_token[token] = handler
        return handler

    def get(self, token: str) -> Handler | None:
        return self._by_token.get(token)

    def remove(self, token: str) -> Handler | None:
        handler = self._by_token.pop(token, None)
        if handler is not None:
            listed = self._by_path[handler.path]
            listed.remove(handler)
            if not listed:
                del self._by_path[handler.path]
                self._turns.pop(handler.path, None)
        return handler

    def remove_session(self, session_id: str) -> list[Handler]:
        gone = [h for h in self._by_token.values() if h.session_id == session_id]
        for handler in gone:
            self.remove(handler.token)
        return gone

    def covering(self, path: str) -> list[Handler]:
        """The handlers of the most specific registered path at or above ``path``, oldest first."""
        for candidate in [path, *reversed(paths.ancestors(path))]:
            listed = self._by_path.get(candidate)
            if listed:
                return list(listed)
        return []

    def choose(self, path: str) -> Handler | None:
        """The handler to send a request on ``path`` to (the next in turn of the most specific
        path's handlers), or None when no handler covers it."""
        listed = self.covering(path)
        if not listed:
            return None
        turn = self._turns.get(listed[0].path, 0)
        self._turns[listed[0].path] = turn + 1
        return listed[turn % len(listed)]

    def registrations(self) -> list[Handler]:
        return sorted(self._by_token.values(), key=lambda h: (h.path, h.order, h.token))

    def __len__(self) -> int:
        return len(self._by_token)


# -- what a sender's gateway waits for --------------------------------------------------


@dataclass
class Outstanding:
    """A request awaiting its response(s) on the sender's gateway."""

    id: str
    sender: str
    deadline: float
    #: a request to a filter: the sessions it went to that have not answered (None until
    #: it was dispatched), and those that did
    to_filter: bool = False
    waiting: set[str] | None = None
    answered: set[str] = field(default_factory=set)


class Pending:
    """The requests a gateway's sessions wait for, each with a deadline."""

    def __init__(self, per_session: int = MAX_PENDING_PER_SESSION, limit: int = MAX_PENDING) -> None:
        self.per_session = per_session
        self.limit = limit
        self._entries: dict[str, Outstanding] = {}
        self._per_sender: dict[str, int] = {}
        self._ids = itertools.count(1)

    def start(self, sender: str, now: float, timeout: float, to_filter: bool = False) -> Outstanding:
        """Wait for a new request's answer(s) until ``now + timeout``; ``LIMIT_EXCEEDED`` when
        the sender (or the gateway) waits for too many already."""
        held = self._per_sender.get(sender, 0)
        if held >= self.per_session:
            raise MessagingError(
                "LIMIT_EXCEEDED", f"a session may wait for at most {self.per_session} responses at once")
        if len(self._entries) >= self.limit:
            raise MessagingError("LIMIT_EXCEEDED", "the server waits for too many responses; try again later")
        entry = Outstanding(f"r{next(self._ids)}", sender, now + timeout, to_filter)
        self._entries[entry.id] = entry
        self._per_sender[sender] = held + 1
        return entry

    def get(self, request_id: str) -> Outstanding | None:
        return self._entries.get(request_id)

    def answer(self, request_id: str, responder: str) -> Outstanding | None:
        """A response (or a failure) from ``responder``: the request it answers, or None when
        the answer counts for nothing (late, repeated). A request to one session ends with
        its answer; one to a filter once every session it went to answered."""
        entry = self._entries.get(request_id)
        if entry is None or responder in entry.answered:
            return None
        if entry.to_filter and entry.waiting is not None and responder not in entry.waiting:
            return None
        entry.answered.add(responder)
        if entry.waiting is not None:
            entry.waiting.discard(responder)
        if not entry.to_filter or entry.waiting == set():
            self._end(entry)
        return entry

    def dispatched(self, request_id: str, recipients: Iterable[str]) -> None:
        """A request to a filter went to ``recipients`` (some may have answered already)."""
        entry = self._entries.get(request_id)
        if entry is None:
            return
        entry.waiting = set(recipients) - entry.answered
        if not entry.waiting:
            self._end(entry)

    def cancel(self, request_id: str) -> Outstanding | None:
        """Stop waiting (the request could not be sent, or its sender went)."""
        entry = self._entries.get(request_id)
        if entry is not None:
            self._end(entry)
        return entry

    def sender_gone(self, sender: str) -> list[Outstanding]:
        gone = [e for e in self._entries.values() if e.sender == sender]
        for entry in gone:
            self._end(entry)
        return gone

    def expire(self, now: float) -> list[Outstanding]:
        """The requests whose deadline passed: each ends (for a filter, ``waiting`` holds the
        sessions that did not answer)."""
        late = [e for e in self._entries.values() if e.deadline <= now]
        for entry in late:
            self._end(entry)
        return late

    def next_deadline(self) -> float | None:
        return min((e.deadline for e in self._entries.values()), default=None)

    def waiting_for(self, sender: str) -> int:
        return self._per_sender.get(sender, 0)

    def _end(self, entry: Outstanding) -> None:
        del self._entries[entry.id]
        left = self._per_sender[entry.sender] - 1
        if left:
            self._per_sender[entry.sender] = left
        else:
            del self._per_sender[entry.sender]

    def __len__(self) -> int:
        return len(self._entries)


# -- what a recipient's gateway's sessions owe -----------------------------------------------


@dataclass(frozen=True)
class Delivery:
    """A request handed to a session of this gateway, awaiting its answer."""

    id: str
    recipient: str
    #: the sender's gateway, and its id of the request
    origin: str
    request: str
    #: the type the sender expects back, if it said
    response_type: str | None
    #: after this the sender has stopped waiting: forget it
    until: float


class Deliveries:
    """Requests given to this gateway's sessions, by delivery id, until answered or late."""

    def __init__(self, limit: int = MAX_PENDING) -> None:
        self.limit = limit
        self._entries: dict[str, Delivery] = {}

    def add(self, delivery: Delivery, now: float) -> bool:
        """Record a delivery; False when there is no room even after forgetting the late ones."""
        if len(self._entries) >= self.limit:
            self.expire(now)
            if len(self._entries) >= self.limit:
                return False
        self._entries[delivery.id] = delivery
        return True

    def take(self, delivery_id: Any, recipient: str) -> Delivery:
        """The delivery a session answers (it is forgotten); ``INVALID_REQUEST`` when no such
        request awaits this session's answer."""
        entry = self._entries.get(delivery_id) if isinstance(delivery_id, str) else None
        if entry is None or entry.recipient != recipient:
            raise MessagingError(
                "INVALID_REQUEST", f"no request {str(delivery_id)[:40]!r} awaits this session's answer")
        del self._entries[entry.id]
        return entry

    def recipient_gone(self, recipient: str) -> list[Delivery]:
        gone = [d for d in self._entries.values() if d.recipient == recipient]
        for delivery in gone:
            del self._entries[delivery.id]
        return gone

    def expire(self, now: float) -> list[Delivery]:
        late = [d for d in self._entries.values() if d.until <= now]
        for delivery in late:
            del self._entries[delivery.id]
        return late

    def __len__(self) -> int:
        return len(self._entries)


__all__ = [
    "ALL_FIXED", "ALL_USER", "Deliveries", "Delivery", "Handler", "HandlerRegistry", "MessagingError",
    "Outstanding", "Pending", "check_response", "check_value", "pick", "property_keys", "timeout_for",
    "value_limit", "value_type",
]
