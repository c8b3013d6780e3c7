"""Missing-topic handlers: who is told when a subscription or fetch matches nothing.

Pure bookkeeping (no I/O); the gateways hold one :class:`HandlerRegistry`
each, kept the same by the actors, and one :class:`Waits` for the requests
they hold back.

* A session with REGISTER_HANDLER, and MODIFY_TOPIC on the path, registers a
  handler for a topic path (:meth:`HandlerRegistry.add`). Several sessions may
  register one path; only one of them is notified: the oldest registration
  still open. Closing a registration, or its session, removes it.
* A selector that matches no topic is offered to the handler registered for
  the most specific path that is a prefix (segment-wise) of the selector's
  path prefix (:meth:`HandlerRegistry.handler_for`): ``a`` hears of ``?a/d/``,
  ``a/d`` of ``a/d/e``; a handler on ``a/d/e`` does not hear of ``?a/d/.*``,
  whose matches need not lie below it.
* The request waits for the handler's answer, proceed or cancel
  (:class:`Waits`); no answer within the timeout counts as proceed, and so
  does a handler whose session goes away while the notification is out.
  With several handlers (the local one and, with fan-out, a primary's), the
  request goes on once every one has answered proceed and is abandoned at the
  first cancel.

Each session may hold at most :data:`MAX_HANDLERS_PER_SESSION` registrations
and each gateway at most :data:`MAX_WAITING` held-back requests (one session
cannot hold back everything).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from topics import paths
from topics.selectors import Selector

#: registrations one session may hold open
MAX_HANDLERS_PER_SESSION = 100
#: requests one gateway may hold back waiting for handlers; one more proceeds at once
MAX_WAITING = 10_000
#: seconds a request waits for a handler's answer by default before it proceeds
DEFAULT_TIMEOUT = 10.0

PROCEED = "proceed"
CANCEL = "cancel"


class MissingTopicError(ValueError):
    """A refused registration: ``code`` is the wire error code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class Registration:
    token: str
    path: str
    session_id: str
    #: the registration's place among those of its path (lower is older): registrations
    #: made on several gateways are told apart by this, not by when each gateway heard of them
    order: int = 0


@dataclass(frozen=True)
class Notification:
    """What a handler is told: the request's selector, who asked, and the servers the
    request passed through (the first is where it was made)."""

    id: str
    selector: str
    session_id: str
    properties: dict[str, str]
    servers: tuple[str, ...]

    def to_wire(self) -> dict[str, Any]:
        return {"id": self.id, "selector": self.selector, "session_id": self.session_id,
                "properties": dict(self.properties), "servers": list(self.servers)}


class HandlerRegistry:
    """Every open registration, by path, oldest first."""

    def __init__(self) -> None:
        self._by_path: dict[str, list[Registration]] = {}
        self._by_token: dict[str, Registration] = {}

    def add(self, token: str, path: str, session_id: str, order: int | None = None) -> Registration:
        """Register; ``order`` places it among its path's registrations (by default after them)."""
        path = paths.normalise(path)
        if not path:
            raise MissingTopicError("INVALID_PATH", "a missing-topic handler needs a topic path, not the root")
        if token in self._by_token:
            raise MissingTopicError("INVALID_REQUEST", f"registration {token!r} exists already")
        held = sum(1 for r in self._by_token.values() if r.session_id == session_id)
        if held >= MAX_HANDLERS_PER_SESSION:
            raise MissingTopicError(
                "LIMIT_EXCEEDED", f"a session may register at most {MAX_HANDLERS_PER_SESSION} missing-topic handlers")
        listed = self._by_path.setdefault(path, [])
        if order is None:
            order = listed[-1].order + 1 if listed else 0
        registration = Registration(token, path, session_id, order)
        listed.append(registration)
        listed.sort(key=lambda r: (r.order, r.token))
        self._by_token[token] = registration
        return registration

    def get(self, token: str) -> Registration | None:
        return self._by_token.get(token)

    def covers(self, selector: Selector) -> bool:
        """Whether some handler would hear of ``selector`` matching nothing."""
        return self.handler_for(selector) is not None

    def remove(self, token: str) -> Registration | None:
        registration = self._by_token.pop(token, None)
        if registration is not None:
            listed = self._by_path[registration.path]
            listed.remove(registration)
            if not listed:
                del self._by_path[registration.path]
        return registration

    def remove_session(self, session_id: str) -> list[Registration]:
        gone = [r for r in self._by_token.values() if r.session_id == session_id]
        for registration in gone:
            self.remove(registration.token)
        return gone

    def handler_for(self, selector: Selector) -> Registration | None:
        """The registration to notify of ``selector`` matching nothing, or None."""
        prefix = selector.path_prefix
        if not prefix:
            return None  # no handler path (never the root) prefixes every path
        for path in [prefix, *reversed(paths.ancestors(prefix))]:
            listed = self._by_path.get(path)
            if listed:
                return listed[0]
        return None

    def registrations(self) -> list[Registration]:
        return sorted(self._by_token.values(), key=lambda r: (r.path, r.token))

    def __len__(self) -> int:
        return len(self._by_token)


@dataclass
class Wait:
    """A request held back until its handlers answer."""

    id: str
    deadline: float
    #: the handlers (registration tokens) still to answer
    outstanding: set[str] = field(default_factory=set)
    cancelled_by: str | None = None


class Waits:
    """Requests held back for handlers' answers, and what each comes to."""

    def __init__(self, limit: int = MAX_WAITING) -> None:
        self.limit = limit
        self._waits: dict[str, Wait] = {}
        self._ids = itertools.count(1)

    def start(self, handlers: Iterable[str], now: float, timeout: float) -> Wait | None:
        """Hold a request for ``handlers``; None when it need not (or may not) wait: it proceeds."""
        outstanding = set(handlers)
        if not outstanding or len(self._waits) >= self.limit:
            return None
        wait = Wait(f"m{next(self._ids)}", now + timeout, outstanding)
        self._waits[wait.id] = wait
        return wait

    def answer(self, wait_id: str, handler: str, response: str) -> str | None:
        """A handler's answer; the request's outcome once it has one (PROCEED or CANCEL), else None.
        An answer for a request that was decided already, or from a handler not asked, changes nothing."""
        if response not in (PROCEED, CANCEL):
            raise MissingTopicError("INVALID_REQUEST", f"answer proceed or cancel, not {response!r}")
        wait = self._waits.get(wait_id)
        if wait is None or handler not in wait.outstanding:
            return None
        wait.outstanding.discard(handler)
        if response == CANCEL:
            wait.cancelled_by = handler
            del self._waits[wait_id]
            return CANCEL
        if not wait.outstanding:
            del self._waits[wait_id]
            return PROCEED
        return None

    def handler_gone(self, handler: str) -> list[tuple[str, str]]:
        """A handler's registration or session closed: it counts as proceed wherever it was
        awaited; return ``(wait id, outcome)`` for each request now decided."""
        decided = []
        for wait_id, wait in list(self._waits.items()):
            if handler in wait.outstanding:
                outcome = self.answer(wait_id, handler, PROCEED)
                if outcome is not None:
                    decided.append((wait_id, outcome))
        return decided

    def forget(self, wait_id: str) -> None:
        """The request is gone (its client's connection, say): nobody waits any more."""
        self._waits.pop(wait_id, None)

    def expire(self, now: float) -> list[str]:
        """The requests whose handlers did not all answer in time: they proceed."""
        late = [wait_id for wait_id, wait in self._waits.items() if wait.deadline <= now]
        for wait_id in late:
            del self._waits[wait_id]
        return late

    def __len__(self) -> int:
        return len(self._waits)
