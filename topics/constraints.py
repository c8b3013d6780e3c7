"""Update constraints: the conditions an update applies under (pure).

A constraint is evaluated against a topic's current state in the same step as the update it
goes with (a partition applies one operation at a time): when it does not hold the update
fails with :class:`~topics.errors.UnsatisfiedConstraintError`, naming the term that failed,
and nothing changes. The kinds are those of the reference system's update constraints:

=================================  ============================================================
term                               holds when
=================================  ============================================================
:class:`ValueEquals`               a topic is at the path and its value is ``data`` (sent as a
                                   set's value is: ``raw`` says how), compared byte for byte in
                                   the form the topic stores (so a DOUBLE topic's ``1.0``
                                   equals an INT64-looking ``1`` converted as a set would)
:class:`NoValue`                   a topic is at the path and it has no value
:class:`NoTopic`                   no topic is at the path
:class:`Locked`                    the updating session holds the session lock ``name`` at
                                   ``sequence`` (a :data:`LockLookup` answers)
:class:`JsonWithValue`             a JSON topic with a value is at the path and the value at
                                   the RFC 6901 ``pointer`` is ``value`` (one CBOR item,
                                   compared as CBOR bytes, as a JSON patch ``test`` compares)
:class:`JsonWithoutValue`          a JSON topic with a value is at the path and nothing is at
                                   ``pointer``
:class:`And`, :class:`Or`          every term holds / some term holds
=================================  ============================================================

A TIME_SERIES topic's value, here, is its newest event's value, typed by its event type (as
a fetch shows it); a topic with DONT_RETAIN_VALUE never has one.

Wire form: plain lists msgpack carries, made by :func:`to_wire` and read by :func:`from_wire`
(which refuses anything else with :class:`~topics.errors.ConstraintError`, naming where, such
as ``and[1].or[0]``, and what is wrong)::

    ["value_equals", data (bytes), raw (bool)]
    ["no_value"]
    ["no_topic"]
    ["locked", name (str), sequence (int)]
    ["json_with_value", pointer (str), value (bytes: one CBOR item of a JSON value)]
    ["json_without_value", pointer (str)]
    ["and", [term, ...]]        ["or", [term, ...]]   (at least one term)

A constraint nests ``and`` and ``or`` at most :data:`MAX_DEPTH` deep, has at most
:data:`MAX_TERMS` terms in all (``and`` and ``or`` count) and pointers of at most
:data:`MAX_POINTER` characters.

Session locks are decided where the session is known: the gateway calls :func:`decide_locks`
with its lookup before it sends the constraint on, and a partition evaluates what remains
with :data:`NO_LOCKS`. The gateway's lookup reads the session lock table the controller
pushed to it (``actors/locks.py``): a ``locked`` term holds when the updating session owns
the lock at that sequence.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal

import cbor2

from topics import types as values
from topics.errors import ConstraintError, TopicModelError, UnsatisfiedConstraintError
from topics.pointer import MISSING, PointerError, format_pointer, parse_pointer, resolve
from topics.types import TopicType

__all__ = [
    "MAX_DEPTH", "MAX_LOCK_NAME", "MAX_POINTER", "MAX_TERMS", "NO_LOCKS",
    "And", "Constraint", "Current", "JsonWithValue", "JsonWithoutValue", "LockLookup", "Locked", "NoTopic",
    "NoValue", "Or", "ValueEquals",
    "check", "decide_locks", "evaluate", "from_wire", "to_wire",
]

#: the most levels of ``and`` / ``or`` a constraint nests (a single term is one level)
MAX_DEPTH: Final = 8
#: the most terms of a constraint, ``and`` and ``or`` included
MAX_TERMS: Final = 64
#: the longest JSON pointer of a partial JSON term, in characters
MAX_POINTER: Final = 1024
#: the longest session lock name, in characters
MAX_LOCK_NAME: Final = 256
_SEQUENCE_MAX: Final = 2**63 - 1


# -- the terms -------------------------------------------------------------------------------


class _Term:
    """What every term does: combine with another (``a & b``, ``a | b``, :meth:`and_`,
    :meth:`or_`; an ``and`` of ``and`` terms is one ``and``) and give its wire form."""

    __slots__ = ()

    def and_(self, other: Constraint) -> And:
        return And((*_flat(self, And), *_flat(_term(other), And)))

    def or_(self, other: Constraint) -> Or:
        return Or((*_flat(self, Or), *_flat(_term(other), Or)))

    def __and__(self, other: object) -> And:
        if not isinstance(other, _Term):
            return NotImplemented
        return self.and_(other)  # type: ignore[arg-type]

    def __or__(self, other: object) -> Or:
        if not isinstance(other, _Term):
            return NotImplemented
        return self.or_(other)  # type: ignore[arg-type]

    def to_wire(self) -> list[Any]:
        """The plain-list form (:func:`to_wire`)."""
        return to_wire(self)  # type: ignore[arg-type]


def _term(value: object) -> _Term:
    if not isinstance(value, _Term):
        raise TypeError(f"a constraint combines with another constraint, not {type(value).__name__}")
    return value


def _flat(term: _Term, kind: type[And] | type[Or]) -> tuple[Constraint, ...]:
    return term.terms if isinstance(term, kind) else (term,)  # type: ignore[return-value]


@dataclass(frozen=True)
class ValueEquals(_Term):
    """The topic's value is ``data`` (``raw``: bytes meant literally, for BINARY; else one CBOR item)."""

    data: bytes
    raw: bool = False


@dataclass(frozen=True)
class NoValue(_Term):
    """A topic is at the path and has no value."""


@dataclass(frozen=True)
class NoTopic(_Term):
    """No topic is at the path."""


@dataclass(frozen=True)
class Locked(_Term):
    """The updating session holds session lock ``name`` at ``sequence``."""

    name: str
    sequence: int


@dataclass(frozen=True)
class JsonWithValue(_Term):
    """The JSON value at ``pointer`` (decoded tokens) encodes to ``value`` (CBOR bytes)."""

    pointer: tuple[str, ...]
    value: bytes


@dataclass(frozen=True)
class JsonWithoutValue(_Term):
    """Nothing is at ``pointer`` in the topic's JSON value."""

    pointer: tuple[str, ...]


@dataclass(frozen=True)
class And(_Term):
    terms: tuple[Constraint, ...]


@dataclass(frozen=True)
class Or(_Term):
    terms: tuple[Constraint, ...]


Constraint = ValueEquals | NoValue | NoTopic | Locked | JsonWithValue | JsonWithoutValue | And | Or

LockLookup = Callable[[str, int], bool]
"""Whether the updating session holds session lock ``name`` at ``sequence``."""


def NO_LOCKS(name: str, sequence: int) -> bool:  # noqa: N802 (a constant lookup)
    """The lookup of a place that knows no session: no session holds any lock."""
    return False


@dataclass(frozen=True)
class Current:
    """What a constraint is evaluated against: the type of the topic at the path (``None``: no
    topic there; a TIME_SERIES topic's event type) and its value in stored form (``None``: none)."""

    type: TopicType | None
    value: bytes | None = None


# -- the wire form ---------------------------------------------------------------------------


def to_wire(constraint: Constraint) -> list[Any]:
    """The plain-list form of ``constraint`` (see the module's table)."""
    kind = type(constraint)
    if kind is ValueEquals:
        assert isinstance(constraint, ValueEquals)
        return ["value_equals", constraint.data, constraint.raw]
    if kind is NoValue:
        return ["no_value"]
    if kind is NoTopic:
        return ["no_topic"]
    if kind is Locked:
        assert isinstance(constraint, Locked)
        return ["locked", constraint.name, constraint.sequence]
    if kind is JsonWithValue:
        assert isinstance(constraint, JsonWithValue)
        return ["json_with_value", format_pointer(constraint.pointer), constraint.value]
    if kind is JsonWithoutValue:
        assert isinstance(constraint, JsonWithoutValue)
        return ["json_without_value", format_pointer(constraint.pointer)]
    if kind is And or kind is Or:
        assert isinstance(constraint, (And, Or))
        return ["and" if kind is And else "or", [to_wire(term) for term in constraint.terms]]
    raise TypeError(f"not a constraint: {constraint!r}")


def from_wire(item: Any) -> Constraint:
    """The constraint a wire form stands for; :class:`~topics.errors.ConstraintError` naming the
    offending term and what is wrong with it otherwise."""
    return _Reader().term(item, "", 1)


class _Reader:
    """One :func:`from_wire`: counts the terms read so far."""

    def __init__(self) -> None:
        self.terms = 0

    def term(self, item: Any, where: str, depth: int) -> Constraint:
        self.terms += 1
        if self.terms > MAX_TERMS:
            raise ConstraintError(where, f"a constraint has at most {MAX_TERMS} terms")
        if not isinstance(item, (list, tuple)) or not item or not isinstance(item[0], str):
            raise ConstraintError(where, f"a term is a list starting with its kind, got {_shown(item)}")
        kind, fields = item[0], item[1:]
        arity = _ARITY.get(kind)
        if arity is None:
            raise ConstraintError(where, f"unknown kind {_shown(kind)}; one of {', '.join(sorted(_ARITY))}")
        if len(fields) != arity:
            raise ConstraintError(where, f"{kind} takes {arity} field{'s' if arity != 1 else ''}, got {len(fields)}")
        if kind == "value_equals":
            data = _field(fields[0], bytes, where, kind, "value")
            return ValueEquals(data, _field(fields[1], bool, where, kind, "raw"))
        if kind == "no_value":
            return NoValue()
        if kind == "no_topic":
            return NoTopic()
        if kind == "locked":
            name = _field(fields[0], str, where, kind, "lock name")
            sequence = _field(fields[1], int, where, kind, "sequence")
            if not name or len(name) > MAX_LOCK_NAME:
                raise ConstraintError(where, f"a lock name has 1 to {MAX_LOCK_NAME} characters")
            if not 0 <= sequence <= _SEQUENCE_MAX:
                raise ConstraintError(where, f"a lock sequence is 0 to 2**63-1, got {sequence}")
            return Locked(name, sequence)
        if kind == "json_with_value":
            pointer = _pointer(fields[0], where, kind)
            data = _field(fields[1], bytes, where, kind, "value")
            try:
                value = values.decode(TopicType.JSON, data)
            except TopicModelError as e:
                raise ConstraintError(where, f"{kind}'s value is not one CBOR item of a JSON value: {e}") from None
            return JsonWithValue(pointer, _cbor(value))
        if kind == "json_without_value":
            return JsonWithoutValue(_pointer(fields[0], where, kind))
        # and, or
        terms = fields[0]
        if not isinstance(terms, (list, tuple)) or not terms:
            raise ConstraintError(where, f"{kind} takes a non-empty list of terms, got {_shown(terms)}")
        if depth >= MAX_DEPTH:
            raise ConstraintError(where, f"and / or nest at most {MAX_DEPTH} levels deep")
        inner = f"{where}." if where else ""
        made = tuple(self.term(term, f"{inner}{kind}[{i}]", depth + 1) for i, term in enumerate(terms))
        return And(made) if kind == "and" else Or(made)


_ARITY: Final = {
    "value_equals": 2, "no_value": 0, "no_topic": 0, "locked": 2, "json_with_value": 2, "json_without_value": 1,
    "and": 1, "or": 1,
}


def _field(value: Any, kind: type, where: str, term: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConstraintError(where, f"{term}'s {what} is {_KIND_NAMES[kind]}, got {_shown(value)}")
    return value


_KIND_NAMES: Final = {bytes: "bytes", bool: "a boolean", str: "a string", int: "an integer"}


def _pointer(text: Any, where: str, term: str) -> tuple[str, ...]:
    _field(text, str, where, term, "pointer")
    if len(text) > MAX_POINTER:
        raise ConstraintError(where, f"{term}'s pointer is longer than {MAX_POINTER} characters")
    try:
        return parse_pointer(text)
    except PointerError as e:
        raise ConstraintError(where, f"{term}'s pointer {text!r} is not a JSON pointer: {e}") from None


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _cbor(value: Any) -> bytes:
    """The CBOR bytes a partial JSON term compares (those of a JSON patch ``test``)."""
    return bytes(cbor2.dumps(value))


# -- evaluation ------------------------------------------------------------------------------


def evaluate(constraint: Constraint, current: Current, locks: LockLookup = NO_LOCKS) -> Literal[True] | str:
    """``True`` when ``constraint`` holds for ``current``, else why not (naming the term)."""
    reason = _Evaluation(current, locks).failure(constraint, "")
    return True if reason is None else reason


def check(constraint: Constraint | None, current: Current, locks: LockLookup = NO_LOCKS) -> None:
    """Raise :class:`~topics.errors.UnsatisfiedConstraintError` unless ``constraint`` (if any) holds."""
    if constraint is not None:
        outcome = evaluate(constraint, current, locks)
        if outcome is not True:
            raise UnsatisfiedConstraintError(f"the update constraint does not hold: {outcome}")


#: the longest reason an ``or`` gives (it lists why each of its terms failed)
_MAX_REASON = 1000


class _Evaluation:
    """One evaluation: the topic's JSON value is decoded once, when a term first needs it."""

    def __init__(self, current: Current, locks: LockLookup) -> None:
        self.current = current
        self.locks = locks
        self._document: Any = MISSING

    def failure(self, c: Constraint, where: str) -> str | None:
        kind = type(c)
        if kind is And or kind is Or:
            assert isinstance(c, (And, Or))
            name = "and" if kind is And else "or"
            inner = f"{where}." if where else ""
            reasons = []
            for i, term in enumerate(c.terms):
                reason = self.failure(term, f"{inner}{name}[{i}]")
                if reason is None and kind is Or:
                    return None
                if reason is not None:
                    if kind is And:
                        return reason
                    reasons.append(reason)
            if kind is And:
                return None
            said = f"no term of or{f' at {where}' if where else ''} holds ({'; '.join(reasons)})"
            return said if len(said) <= _MAX_REASON else said[: _MAX_REASON - 4] + "...)"
        what = self._leaf(c)
        if what is None:
            return None
        name = _NAMES[kind]
        return f"{name} at {where}: {what}" if where else f"{name}: {what}"

    def _leaf(self, c: Constraint) -> str | None:
        current = self.current
        kind = type(c)
        if kind is NoTopic:
            return None if current.type is None else f"a {current.type.value} topic is at the path"
        if kind is Locked:
            assert isinstance(c, Locked)
            return _lock_failure(c, self.locks)
        if current.type is None:
            return "no topic is at the path"
        if kind is NoValue:
            return None if current.value is None else "the topic has a value"
        if current.value is None:
            return "the topic has no value"
        if kind is ValueEquals:
            assert isinstance(c, ValueEquals)
            try:
                stored = values.accept(current.type, c.data, raw=c.raw)
            except TopicModelError as e:
                return f"the value is not one a {current.type.value} topic holds ({e})"
            return None if stored == current.value else "the topic's value differs"
        assert isinstance(c, (JsonWithValue, JsonWithoutValue))
        if current.type is not TopicType.JSON:
            return f"the topic is a {current.type.value} topic, not JSON"
        found = resolve(self._json(current.value), c.pointer)
        pointer = format_pointer(c.pointer)
        if kind is JsonWithoutValue:
            return None if found is MISSING else f"a value is at {pointer!r}"
        assert isinstance(c, JsonWithValue)
        if found is MISSING:
            return f"no value is at {pointer!r}"
        return None if _cbor(found) == c.value else f"the value at {pointer!r} differs"

    def _json(self, data: bytes) -> Any:
        if self._document is MISSING:
            self._document = values.decode(TopicType.JSON, data)
        return self._document


def _lock_failure(c: Locked, locks: LockLookup) -> str | None:
    if locks(c.name, c.sequence):
        return None
    why = " (no session is known here: the gateway decides locks)" if locks is NO_LOCKS else ""
    return f"the session does not hold lock {c.name!r} at sequence {c.sequence}{why}"


_NAMES: Final[dict[type[Any], str]] = {
    ValueEquals: "value_equals", NoValue: "no_value", NoTopic: "no_topic", Locked: "locked",
    JsonWithValue: "json_with_value", JsonWithoutValue: "json_without_value",
}


# -- session locks, at the gateway -----------------------------------------------------------


def decide_locks(constraint: Constraint | None, locks: LockLookup) -> Constraint | None:
    """``constraint`` with its ``locked`` terms decided by ``locks`` (the gateway, which knows the
    session): what is left for the partition to evaluate, ``None`` when the constraint holds
    whatever the topic's state. Raises :class:`~topics.errors.UnsatisfiedConstraintError`
    when it cannot hold whatever the topic's state. A constraint without ``locked`` terms is
    returned as it is."""
    if constraint is None or not _has_locks(constraint):
        return constraint
    decided = _decided(constraint, locks, "")
    if decided is True:
        return None
    if isinstance(decided, str):
        raise UnsatisfiedConstraintError(f"the update constraint does not hold: {decided}")
    return decided


def _has_locks(c: Constraint) -> bool:
    if isinstance(c, Locked):
        return True
    return isinstance(c, (And, Or)) and any(_has_locks(term) for term in c.terms)


def _decided(c: Constraint, locks: LockLookup, where: str) -> Constraint | Literal[True] | str:
    """What is left of ``c`` once its locks are decided: a constraint, ``True`` (holds) or why it fails."""
    if isinstance(c, Locked):
        what = _lock_failure(c, locks)
        return True if what is None else (f"locked at {where}: {what}" if where else f"locked: {what}")
    if not isinstance(c, (And, Or)):
        return c
    name = "and" if isinstance(c, And) else "or"
    inner = f"{where}." if where else ""
    kept: list[Constraint] = []
    reasons: list[str] = []
    for i, term in enumerate(c.terms):
        decided = _decided(term, locks, f"{inner}{name}[{i}]")
        if decided is True:
            if name == "or":
                return True
        elif isinstance(decided, str):
            if name == "and":
                return decided
            reasons.append(decided)
        else:
            kept.append(decided)
    if not kept:
        return True if name == "and" else f"no term of or{f' at {where}' if where else ''} holds ({'; '.join(reasons)})"
    return kept[0] if len(kept) == 1 else (And(tuple(kept)) if name == "and" else Or(tuple(kept)))

