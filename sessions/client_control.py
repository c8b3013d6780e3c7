"""Client control's bookkeeping: what one session may do to others, and who hears of them.

Pure (no I/O, no clock): the gateway's shell (``actors/client_control.py``) carries it
out and moves what it decides between gateways.

* **Property keys.** A request names the session properties it wants: names as they
  are, :data:`ALL_FIXED` for every fixed (``$``) property, :data:`ALL_USER` for every
  user property (:func:`property_keys`, :func:`pick`).
* **Roles.** :func:`role_change` checks a change of roles (roles to remove, roles to
  add: not the same role in both, not both empty, bounded) and :meth:`RoleChange.apply`
  gives a session's new role set; the registry then re-evaluates the session
  (``SessionRegistry.set_roles``), so what it may read changes at once.
* **Session event listeners.** A listener names a session filter (or none: every
  session) and the properties its events carry. :class:`Listeners` holds every
  listener of the instance (each gateway has a copy: a listener's *origin* is the
  gateway of the session that registered it) and turns what happens to a session of
  this gateway into :class:`SessionEvent` values, each for one listener. A listener
  hears: a ``STATE`` event ``ACTIVE`` for every matching session open when it is
  registered (:meth:`Listeners.snapshot`) and for every one opened later; ``STATE``
  ``CLOSED`` (with the reason) when one ends; ``STATE`` ``DISCONNECTED`` /
  ``RECONNECTED`` when a session kept for its client loses its connection or gets
  one back; ``PROPERTIES`` when one of the properties it asked for changes (with
  their old values; not at all when it asked for none). The filter is evaluated on
  the session as it is at each event.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessions.filters import parse_filter
from sessions.limits import Limits, shown
from sessions.requests import RequestError, expect

__all__ = [
    "ALL_FIXED", "ALL_USER", "Listener", "Listeners", "RoleChange", "SessionEvent", "State",
    "listen_filter", "pick", "property_keys", "role_change",
]

#: a property key that stands for every fixed (``$``) property, and one for every user property
ALL_FIXED, ALL_USER = "*F", "*U"
#: property keys one request or listener may name
MAX_KEYS = 64
#: roles one change may name (to remove and to add together), and the longest role name
MAX_ROLES = 64
MAX_ROLE_LENGTH = 256
#: session event listeners one session may hold
MAX_LISTENERS = 16


class State(enum.Enum):
    """What a ``STATE`` event says of a session."""

    ACTIVE = "ACTIVE"
    DISCONNECTED = "DISCONNECTED"
    RECONNECTED = "RECONNECTED"
    CLOSED = "CLOSED"


STATE, PROPERTIES = "STATE", "PROPERTIES"


def property_keys(value: Any) -> tuple[str, ...]:
    """The property keys a request names (a list of strings, or nil for none)."""
    if value is None:
        return ()
    expect(value, list, "properties")
    if len(value) > MAX_KEYS:
        raise RequestError("INVALID_REQUEST", f"{len(value):,} property keys; at most {MAX_KEYS}")
    for key in value:
        if not isinstance(key, str) or not key or len(key) > MAX_ROLE_LENGTH:
            raise RequestError("INVALID_PROPERTIES", f"a property key is a non-empty string, not {key!r}")
    return tuple(dict.fromkeys(value))


def pick(properties: Mapping[str, str], keys: Iterable[str] | None) -> dict[str, str]:
    """The properties ``keys`` name (every one when ``keys`` is ``None``)."""
    if keys is None:
        return dict(properties)
    keys = tuple(keys)
    fixed, user = ALL_FIXED in keys, ALL_USER in keys
    return {k: v for k, v in properties.items()
            if k in keys or (fixed and k.startswith("$")) or (user and not k.startswith("$"))}


def listen_filter(limits: Limits, value: Any) -> str | None:
    """A listener's session filter (nil: every session), parsed to refuse a bad one, and no
    longer than a selector may be (``max_selector_length``)."""
    if value is None:
        return None
    expect(value, str, "filter")
    if len(value) > limits.max_selector_length:
        raise RequestError("INVALID_FILTER", f"session filter {shown(value)!r} has {len(value):,} characters; "
                                             f"at most {limits.max_selector_length:,} (max_selector_length)")
    parse_filter(value)
    return str(value)


@dataclass(frozen=True)
class RoleChange:
    """Roles to take from sessions and roles to give them."""

    remove: frozenset[str]
    add: frozenset[str]

    def apply(self, roles: frozenset[str]) -> frozenset[str]:
        """A session's roles after the change (absent roles to remove and present roles to
        add are ignored)."""
        return (roles - self.remove) | self.add


def role_change(remove: Any, add: Any) -> RoleChange:
    """Check a change of roles: lists of role names, not both empty, no role in both."""
    sets = []
    for value, what in ((remove, "roles to remove"), (add, "roles to add")):
        expect(value, list, what)
        for role in value:
            if not isinstance(role, str) or not role or len(role) > MAX_ROLE_LENGTH:
                raise RequestError("INVALID_REQUEST", f"a role is a non-empty string of at most "
                                                      f"{MAX_ROLE_LENGTH} characters, not {shown(repr(role))}")
        sets.append(frozenset(value))
    taken, given = sets
    if len(taken) + len(given) > MAX_ROLES:
        raise RequestError("INVALID_REQUEST", f"{len(taken) + len(given):,} roles; at most {MAX_ROLES} per change")
    if not taken and not given:
        raise RequestError("INVALID_REQUEST", "name roles to remove or roles to add")
    both = taken & given
    if both:
        raise RequestError("INVALID_REQUEST", f"roles both removed and added: {', '.join(sorted(both))}")
    return RoleChange(taken, given)


@dataclass(frozen=True)
class SessionEvent:
    """Something that happened to a session, as one listener hears it."""

    session_id: str
    type: str
    state: State
    #: the properties the listener asked for (none for a closed session)
    properties: dict[str, str] = field(default_factory=dict)
    #: the old values of those that changed (``None``: the key is new)
    changed: dict[str, str | None] = field(default_factory=dict)
    #: why a closed session ended
    reason: str | None = None

    def to_wire(self) -> dict[str, Any]:
        return {"session_id": self.session_id, "type": self.type, "state": self.state.value,
                "properties": self.properties, "changed": self.changed, "reason": self.reason}


@dataclass(frozen=True)
class Listener:
    """One session event listener: ``token`` starts with its origin gateway's id."""

    token: str
    origin: str
    session_id: str
    filter: str | None
    keys: tuple[str, ...]
    #: the id the listening client gave it (its NOTIFY bodies carry it)
    listener_id: int = 0

    def matches(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return self.filter is None or parse_filter(self.filter).matches(properties, roles)

    def to_row(self) -> list[Any]:
        return [self.token, self.origin, self.session_id, self.filter, list(self.keys), self.listener_id]

    @classmethod
    def from_row(cls, row: list[Any]) -> Listener:
        token, origin, session_id, session_filter, keys, listener_id = row
        return cls(token, origin, session_id, session_filter, tuple(keys), listener_id)


#: what one session event is for: (listener, event)
Heard = tuple[Listener, SessionEvent]


class Listeners:
    """Every session event listener of the instance, as one gateway knows them."""

    def __init__(self, most_per_session: int = MAX_LISTENERS) -> None:
        self._by_token: dict[str, Listener] = {}
        self.most_per_session = most_per_session

    def __len__(self) -> int:
        return len(self._by_token)

    def get(self, token: str) -> Listener | None:
        return self._by_token.get(token)

    def all(self) -> list[Listener]:
        return list(self._by_token.values())

    def add(self, listener: Listener) -> bool:
        """Hold a listener; False when it was held already. A session over
        :attr:`most_per_session` is refused (``LIMIT_EXCEEDED``)."""
        if listener.token in self._by_token:
            return False
        held = sum(1 for x in self._by_token.values() if x.session_id == listener.session_id)
        if held >= self.most_per_session:
            raise RequestError("LIMIT_EXCEEDED", f"this session holds {held} session event listeners; "
                                                 f"at most {self.most_per_session}")
        self._by_token[listener.token] = listener
        return True

    def remove(self, token: str) -> Listener | None:
        return self._by_token.pop(token, None)

    def of_session(self, session_id: str) -> list[Listener]:
        return [x for x in self._by_token.values() if x.session_id == session_id]

    def snapshot(
        self, listener: Listener, sessions: Iterable[tuple[str, Mapping[str, str], frozenset[str]]]
    ) -> list[SessionEvent]:
        """``STATE ACTIVE`` for each of ``sessions`` (id, properties, roles) the listener's filter matches."""
        return [SessionEvent(sid, STATE, State.ACTIVE, pick(props, listener.keys))
                for sid, props, roles in sessions if listener.matches(props, roles)]

    def state(
        self, session_id: str, properties: Mapping[str, str], roles: frozenset[str], state: State,
        reason: str | None = None,
    ) -> list[Heard]:
        """A session of this gateway opened, lost or got back its connection, or closed."""
        out = []
        for listener in self._by_token.values():
            if listener.matches(properties, roles):
                shown_ = {} if state is State.CLOSED else pick(properties, listener.keys)
                out.append((listener, SessionEvent(session_id, STATE, state, shown_, reason=reason)))
        return out

    def changed(
        self, session_id: str, before: Mapping[str, str], after: Mapping[str, str], roles: frozenset[str],
    ) -> list[Heard]:
        """A session's properties went from ``before`` to ``after``: a ``PROPERTIES`` event for
        each listener whose filter matches it now and that asked for a key that changed."""
        differ = {k for k in set(before) | set(after) if before.get(k) != after.get(k)}
        if not differ:
            return []
        out = []
        for listener in self._by_token.values():
            if not listener.keys or not listener.matches(after, roles):
                continue
            keys = set(pick({k: "" for k in differ}, listener.keys))
            if keys:
                out.append((listener, SessionEvent(
                    session_id, PROPERTIES, State.ACTIVE, pick(after, listener.keys),
                    {k: before.get(k) for k in sorted(keys)},
                )))
        return out
