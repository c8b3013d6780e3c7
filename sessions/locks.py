"""Session locks: who holds each named lock, who waits for it, and what each change decides.

A lock is created by the first request for its name and goes when it is released with
nobody waiting; it has at most one *owner*, a session of one gateway process, and a queue
of *waiters*. A :class:`LockTable` is an immutable value; every change is a pure function
from a table to a new table (and what the change answered), so the controller can apply
it, commit the new table to the replicated configuration as one document (``locks``) and
push it to every gateway, and any copy of the log reads the same locks back:

* :func:`acquire` grants a free lock at once, answers a lock its session already holds
  with the same sequence, and otherwise records the session as a waiter;
* :func:`release` (the owner unlocks), :func:`withdraw` (a waiter gives up) and
  :func:`cleanup` (a gateway's sessions ended, lost their connections, or stopped
  waiting) take holders away;
* :func:`sweep` takes away every holder of a gateway process that is gone.

Whenever an owner goes, the lock passes to its *oldest* waiter (first come, first
served; waiters of one session are one entry, whose scope is the weaker of those asked
for). Every grant takes the table's next sequence: one counter for every name, kept
across restarts in the committed table, so the sequences of one name only grow (a
fencing token). A gateway process is named ``base~token`` (see
:class:`actors.missing_topics.MissingTopics`): ``base`` is the gateway's name for the
controller, ``token`` changes when Ray restarts the process, which ends its sessions.

Scopes: :attr:`Scope.UNLOCK_ON_SESSION_LOSS` releases when the owner's session ends;
:attr:`Scope.UNLOCK_ON_CONNECTION_LOSS` also when the session loses its connection, even
if it is kept for its client to resume. A session whose connection drops stops waiting
(its requests' answers went with the connection; the client asks again).

Bounds: a name is a path of at most :data:`MAX_NAME` characters (checked by the caller);
a session holds or waits for at most :data:`MAX_PER_SESSION` locks, waits for at most
:data:`MAX_WAITING` of them, and a table holds at most :data:`MAX_ENTRIES` holders in
all. A request over one raises :class:`LockLimitError` (``LIMIT_EXCEEDED``).

No I/O, no clock: the same calls on the same table give the same table everywhere.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from sessions.limits import Limits, shown
from sessions.requests import RequestError
from topics.errors import PathError

__all__ = [
    "MAX_ENTRIES", "MAX_NAME", "MAX_PER_SESSION", "MAX_WAITING",
    "Cleanup", "Decision", "Holder", "Lock", "LockLimitError", "LockTable", "Scope",
    "acquire", "check_name", "check_scope", "cleanup", "owners", "release", "stale", "sweep", "withdraw",
]

#: the longest lock name, in characters (the name is a path: ACQUIRE_LOCK is checked there)
MAX_NAME: Final = 256
#: the most locks one session holds or waits for
MAX_PER_SESSION: Final = 100
#: the most locks one session waits for at a time
MAX_WAITING: Final = 16
#: the most owners and waiters of every lock together (the table is one committed document)
MAX_ENTRIES: Final = 10_000


class Scope(enum.Enum):
    """When a held lock is released without an unlock."""

    UNLOCK_ON_SESSION_LOSS = "UNLOCK_ON_SESSION_LOSS"
    UNLOCK_ON_CONNECTION_LOSS = "UNLOCK_ON_CONNECTION_LOSS"

    def weakest(self, other: Scope) -> Scope:
        """The scope that releases sooner (of one session's requests for one lock)."""
        connection = Scope.UNLOCK_ON_CONNECTION_LOSS
        return connection if connection in (self, other) else self


class LockLimitError(Exception):
    """A session, or the table, is at one of its bounds."""

    code = "LIMIT_EXCEEDED"


@dataclass(frozen=True)
class Holder:
    """An owner or a waiter: a session of a gateway process, and the scope it asked for."""

    gateway: str
    session: str
    scope: Scope = Scope.UNLOCK_ON_SESSION_LOSS

    def same(self, gateway: str, session: str) -> bool:
        return self.gateway == gateway and self.session == session


@dataclass(frozen=True)
class Lock:
    name: str
    owner: Holder
    sequence: int
    waiters: tuple[Holder, ...] = ()


@dataclass(frozen=True)
class LockTable:
    """Every lock with an owner; ``next_sequence`` is the sequence of the next grant and
    ``version`` counts the changes (a gateway keeps the newest table it was given)."""

    locks: Mapping[str, Lock] = field(default_factory=dict)
    next_sequence: int = 1
    version: int = 0

    def entries(self) -> int:
        return sum(1 + len(lock.waiters) for lock in self.locks.values())

    def owned(self, gateway: str, session: str, name: str, sequence: int | None = None) -> Lock | None:
        """The lock ``name`` if that session owns it (at ``sequence``, when given)."""
        lock = self.locks.get(name)
        if lock is None or not lock.owner.same(gateway, session):
            return None
        return lock if sequence is None or lock.sequence == sequence else None

    def waiting(self, gateway: str, session: str, name: str) -> bool:
        lock = self.locks.get(name)
        return lock is not None and any(w.same(gateway, session) for w in lock.waiters)

    def to_wire(self) -> dict[str, Any]:
        """The plain form (the configuration log's ``locks`` document, the gateways' pushes)."""
        return {
            "version": self.version, "next_sequence": self.next_sequence,
            "locks": [[lock.name, lock.sequence, _holder(lock.owner), [_holder(w) for w in lock.waiters]]
                      for lock in sorted(self.locks.values(), key=lambda lock: lock.name)],
        }

    @classmethod
    def from_wire(cls, document: Any) -> LockTable:
        if not document:
            return cls()
        locks = {}
        for name, sequence, owner, waiters in document["locks"]:
            locks[name] = Lock(name, _read_holder(owner), int(sequence), tuple(_read_holder(w) for w in waiters))
        return cls(locks, int(document["next_sequence"]), int(document["version"]))

    def cleared(self) -> LockTable:
        """No holder at all, the sequence counter kept (an instance that starts again)."""
        return self if not self.locks else LockTable({}, self.next_sequence, self.version + 1)


def _holder(h: Holder) -> list[str]:
    return [h.gateway, h.session, h.scope.value]


def _read_holder(item: Any) -> Holder:
    gateway, session, scope = item
    return Holder(str(gateway), str(session), Scope(scope))


def check_name(limits: Limits, name: Any) -> str:
    """A lock name as given in a request: a path in normal form (``INVALID_PATH``) of at most
    :data:`MAX_NAME` characters."""
    path = limits.path(name)
    if len(path) > MAX_NAME:
        raise PathError(f"a lock name has {len(path):,} characters; at most {MAX_NAME}", shown(path))
    return path


def check_scope(value: Any) -> Scope:
    """A scope as given in a request (``None``: :attr:`Scope.UNLOCK_ON_SESSION_LOSS`)."""
    if value is None:
        return Scope.UNLOCK_ON_SESSION_LOSS
    try:
        return Scope(value)
    except (ValueError, TypeError):
        known = ", ".join(s.value for s in Scope)
        raise RequestError("INVALID_REQUEST", f"scope {shown(str(value))!r} is not one of {known}") from None


# -- the changes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    """What :func:`acquire` answered: the lock now (granted when the session owns it)."""

    granted: bool
    lock: Lock


def acquire(table: LockTable, name: str, holder: Holder) -> tuple[LockTable, Decision]:
    """Grant ``name`` to ``holder`` when it is free, answer it as it is when the session owns
    it already (its scope becomes the weaker of the two), else record the session as a
    waiter. Raises :class:`LockLimitError` over a bound."""
    lock = table.locks.get(name)
    if lock is not None and lock.owner.same(holder.gateway, holder.session):
        scope = lock.owner.scope.weakest(holder.scope)
        if scope is lock.owner.scope:
            return table, Decision(True, lock)
        lock = replace(lock, owner=replace(lock.owner, scope=scope))
        return _with(table, {name: lock}), Decision(True, lock)
    if lock is not None:
        for i, waiter in enumerate(lock.waiters):
            if waiter.same(holder.gateway, holder.session):
                scope = waiter.scope.weakest(holder.scope)
                if scope is waiter.scope:
                    return table, Decision(False, lock)
                waiters = (*lock.waiters[:i], replace(waiter, scope=scope), *lock.waiters[i + 1:])
                lock = replace(lock, waiters=waiters)
                return _with(table, {name: lock}), Decision(False, lock)
    held, waits = _counts(table, holder.gateway, holder.session)
    if held + waits >= MAX_PER_SESSION:
        raise LockLimitError(f"the session holds or waits for {MAX_PER_SESSION} locks already, the most it may")
    if table.entries() >= MAX_ENTRIES:
        raise LockLimitError(f"the server holds {MAX_ENTRIES:,} locks and waiting requests, the most it may")
    if lock is None:
        lock = Lock(name, holder, table.next_sequence)
        return _with(table, {name: lock}, granted=1), Decision(True, lock)
    if waits >= MAX_WAITING:
        raise LockLimitError(f"the session waits for {MAX_WAITING} locks already, the most it may")
    lock = replace(lock, waiters=(*lock.waiters, holder))
    return _with(table, {name: lock}), Decision(False, lock)


def release(table: LockTable, name: str, gateway: str, session: str,
            sequence: int | None = None) -> tuple[LockTable, bool]:
    """The owner unlocks ``name`` (at ``sequence``, when given); whether it owned it. The
    oldest waiter gets it."""
    if table.owned(gateway, session, name, sequence) is None:
        return table, False
    return _removed(table, lambda lock, h: h is lock.owner and lock.name == name), True


def withdraw(table: LockTable, name: str, gateway: str, session: str) -> tuple[LockTable, bool]:
    """The session stops waiting for ``name``; whether it was waiting."""
    if not table.waiting(gateway, session, name):
        return table, False
    return _removed(table, lambda lock, h: lock.name == name and h is not lock.owner and h.same(gateway, session)), True


@dataclass(frozen=True)
class Cleanup:
    """What a gateway process asks to be taken away: every lock of sessions that ``ended``;
    the UNLOCK_ON_CONNECTION_LOSS locks and every wait of sessions ``disconnected``; the
    waits ``withdrawn`` (session, name) nobody waits for any more."""

    ended: frozenset[str] = frozenset()
    disconnected: frozenset[str] = frozenset()
    withdrawn: frozenset[tuple[str, str]] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.ended or self.disconnected or self.withdrawn)

    def to_wire(self) -> list[Any]:
        return [sorted(self.ended), sorted(self.disconnected), sorted([s, n] for s, n in self.withdrawn)]

    @classmethod
    def from_wire(cls, item: Any) -> Cleanup:
        ended, disconnected, withdrawn = item
        return cls(frozenset(ended), frozenset(disconnected), frozenset((s, n) for s, n in withdrawn))


def cleanup(table: LockTable, gateway: str, what: Cleanup) -> LockTable:
    """Carry out ``what`` for the sessions of gateway process ``gateway``."""
    if not what:
        return table

    def goes(lock: Lock, h: Holder) -> bool:
        if h.gateway != gateway:
            return False
        if h.session in what.ended:
            return True
        if h is lock.owner:
            return h.session in what.disconnected and h.scope is Scope.UNLOCK_ON_CONNECTION_LOSS
        return h.session in what.disconnected or (h.session, lock.name) in what.withdrawn

    return _removed(table, goes)


def sweep(table: LockTable, live: Mapping[str, str | None]) -> LockTable:
    """Take away every holder of a gateway process that is gone. ``live`` maps each live
    gateway's base name to its process now (``None``: not known now, so its holders stay):
    a holder whose base is not there, or whose process is not the one now, goes."""

    def gone(lock: Lock, h: Holder) -> bool:
        base = h.gateway.partition("~")[0]
        if base not in live:
            return True
        now = live[base]
        return now is not None and now != h.gateway

    return _removed(table, gone)


def stale(table: LockTable, gateway: str, connected: Callable[[str], bool | None],
          asking: Collection[tuple[str, str]]) -> Cleanup:
    """What a gateway process should ask to be taken away, from what it knows:
    ``connected(session)`` says whether one of its sessions has a connection now (``None``:
    the session is not open); ``asking`` holds the (session, name) of its lock requests
    still waiting for an answer."""
    ended: set[str] = set()
    disconnected: set[str] = set()
    withdrawn: set[tuple[str, str]] = set()
    for lock in table.locks.values():
        for h in (lock.owner, *lock.waiters):
            if h.gateway != gateway:
                continue
            state = connected(h.session)
            if state is None:
                ended.add(h.session)
            elif not state:
                if h is not lock.owner or h.scope is Scope.UNLOCK_ON_CONNECTION_LOSS:
                    disconnected.add(h.session)
            elif h is not lock.owner and (h.session, lock.name) not in asking:
                withdrawn.add((h.session, lock.name))
    return Cleanup(frozenset(ended), frozenset(disconnected), frozenset(withdrawn))


# -- helpers ---------------------------------------------------------------------------------


def _counts(table: LockTable, gateway: str, session: str) -> tuple[int, int]:
    held = waits = 0
    for lock in table.locks.values():
        if lock.owner.same(gateway, session):
            held += 1
        waits += sum(1 for w in lock.waiters if w.same(gateway, session))
    return held, waits


def _with(table: LockTable, changed: Mapping[str, Lock | None], granted: int = 0) -> LockTable:
    locks = dict(table.locks)
    for name, lock in changed.items():
        if lock is None:
            locks.pop(name, None)
        else:
            locks[name] = lock
    return LockTable(locks, table.next_sequence + granted, table.version + 1)


def _removed(table: LockTable, goes: Callable[[Lock, Holder], bool]) -> LockTable:
    """``table`` without the holders ``goes`` picks; a lock whose owner went passes to its
    oldest remaining waiter, with the next sequence (locks taken in name order)."""
    changed: dict[str, Lock | None] = {}
    sequence = table.next_sequence
    for name in sorted(table.locks):
        lock = table.locks[name]
        waiters = tuple(w for w in lock.waiters if not goes(lock, w))
        if not goes(lock, lock.owner):
            if len(waiters) != len(lock.waiters):
                changed[name] = replace(lock, waiters=waiters)
            continue
        if waiters:
            changed[name] = Lock(name, waiters[0], sequence, waiters[1:])
            sequence += 1
        else:
            changed[name] = None
    if not changed:
        return table
    return _with(table, changed, granted=sequence - table.next_sequence)


def owners(table: LockTable) -> Iterable[tuple[str, Holder, int]]:
    """(name, owner, sequence) of every lock, by name."""
    for name in sorted(table.locks):
        lock = table.locks[name]
        yield name, lock.owner, lock.sequence
