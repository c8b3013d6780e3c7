"""When a removal policy is due: one topic's state over time (pure; see :mod:`topics.removal`
for the language and the caller's contract). Time is passed in, in ms since the epoch."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from topics.removal import (
    AllOf,
    AnyOf,
    Condition,
    FewerSubscriptions,
    NoSessionHas,
    NoUpdates,
    RemovalPolicy,
    RemovalStateError,
    SessionCloses,
    Term,
    TimeAfter,
)

__all__ = ["RemovalState", "SessionCounts", "TopicFacts"]


SessionCounts = Callable[[str], int] | Mapping[str, int]


@dataclass(frozen=True)
class TopicFacts:
    """What a topic's removal depends on, as observed at one moment.

    ``sessions_matching`` gives, for each of the policy's
    :attr:`~RemovalPolicy.session_filters`, how many sessions match it: a function
    of the filter's text or a mapping holding every one of them.
    ``local_subscriptions`` (those not made through fan-out) defaults to ``subscriptions``.
    ``last_update_ms`` is ``None`` for a topic never updated.
    """

    subscriptions: int = 0
    last_update_ms: int | None = None
    creator_open: bool = True
    sessions_matching: SessionCounts | None = None
    local_subscriptions: int | None = None

    def sessions(self, filter_text: str) -> int:
        counts = self.sessions_matching
        if counts is None:
            raise ValueError(f"the policy needs the number of sessions matching {filter_text!r}")
        if isinstance(counts, Mapping):
            if filter_text not in counts:
                raise ValueError(f"no session count given for the filter {filter_text!r}")
            return counts[filter_text]
        return counts(filter_text)


def _holds(term: Term, facts: TopicFacts) -> bool:
    """Whether the term's condition holds, its periods aside (``no updates`` and
    ``time after`` are not tracked this way)."""
    if isinstance(term, FewerSubscriptions):
        local = facts.local_subscriptions
        count = local if term.local and local is not None else facts.subscriptions
        return count < term.limit
    if isinstance(term, NoSessionHas):
        return facts.sessions(term.filter) == 0
    return not facts.creator_open  # SessionCloses


@dataclass(frozen=True)
class RemovalState:
    """The removal state of one topic: an immutable value, advanced by :meth:`observe`.

    ``since`` has one entry per term of the policy (:attr:`RemovalPolicy.terms`): when
    that term's condition started to hold, or ``None``.
    """

    policy: RemovalPolicy
    created_ms: int
    creator_session: str | None
    since: tuple[int | None, ...]

    def __post_init__(self) -> None:
        if len(self.since) != len(self.policy.terms):
            raise RemovalStateError(f"a removal state of this policy has {len(self.policy.terms)} since times")

    @classmethod
    def start(
        cls,
        policy: RemovalPolicy,
        created_ms: int,
        creator_session: str | None = None,
        last_update_ms: int | None = None,
    ) -> RemovalState:
        """The state of a topic created at ``created_ms`` (by ``creator_session``), before
        any observation; also how a new primary rebuilds it from the journal (see the
        module's docstring): only ``no updates`` terms hold from the start."""
        updated = created_ms if last_update_ms is None else max(created_ms, last_update_ms)
        since = tuple(updated if isinstance(t, NoUpdates) else None for t in policy.terms)
        return cls(policy, created_ms, creator_session, since)

    def observe(self, facts: TopicFacts, now_ms: int) -> RemovalState:
        """The state after seeing ``facts`` at ``now_ms``. A term that holds keeps its
        since time, one that starts to hold gets ``now_ms``, one that stops loses it."""
        since: list[int | None] = []
        for term, was in zip(self.policy.terms, self.since, strict=True):
            if isinstance(term, TimeAfter):
                since.append(None)
            elif isinstance(term, NoUpdates):
                updated = self.created_ms if facts.last_update_ms is None else facts.last_update_ms
                since.append(max(updated, was if was is not None else updated))
            elif _holds(term, facts):
                since.append(now_ms if was is None else was)
            else:
                since.append(None)
        new = tuple(since)
        return self if new == self.since else RemovalState(self.policy, self.created_ms, self.creator_session, new)

    def due_at(self) -> int | None:
        """The moment the policy becomes due if the facts last observed do not change,
        or ``None`` if it never does then."""
        instants = iter([self._term_due_at(t, s) for t, s in zip(self.policy.terms, self.since, strict=True)])
        return _combine(self.policy.condition, instants)

    def _term_due_at(self, term: Term, since: int | None) -> int | None:
        if isinstance(term, TimeAfter):
            return term.at_ms
        if since is None:
            return None
        if isinstance(term, SessionCloses):
            return since
        return max(since, self.created_ms + term.after_ms) + term.for_ms

    def due(self, now_ms: int) -> bool:
        """Whether the topic is due for removal at ``now_ms``, by the facts last observed."""
        at = self.due_at()
        return at is not None and now_ms >= at

    def next_check_ms(self, now_ms: int) -> int | None:
        """When to look again (``now_ms`` when due already), or ``None`` when nothing
        but a change of the facts (reported through :meth:`observe`) can make it due."""
        at = self.due_at()
        return None if at is None else max(at, now_ms)

    def to_wire(self) -> list[Any]:
        """``[created_ms, creator_session, [since, ...]]``: ints, a string and ``None`` only."""
        return [self.created_ms, self.creator_session, list(self.since)]

    @classmethod
    def from_wire(cls, policy: RemovalPolicy, data: Any) -> RemovalState:
        """The state :meth:`to_wire` gave, for the same policy."""
        if not (isinstance(data, list | tuple) and len(data) == 3 and isinstance(data[2], list | tuple)):
            raise RemovalStateError(f"a removal state is [created, creator, [since, ...]], got {data!r}")
        created, creator, since = data
        if not _is_int(created) or not (creator is None or isinstance(creator, str)):
            raise RemovalStateError(f"a removal state's creation time is an int and its creator a string, got {data!r}")
        if not all(s is None or _is_int(s) for s in since):
            raise RemovalStateError(f"a removal state's since times are ints or None, got {since!r}")
        return cls(policy, created, creator, tuple(since))


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _combine(condition: Condition, instants: Iterator[int | None]) -> int | None:
    """Fold the terms' instants (in term order) through the condition's and/or."""
    if isinstance(condition, AllOf):
        parts = [_combine(o, instants) for o in condition.operands]
        return None if any(p is None for p in parts) else max(p for p in parts if p is not None)
    if isinstance(condition, AnyOf):
        known = [p for p in (_combine(o, instants) for o in condition.operands) if p is not None]
        return min(known) if known else None
    return next(instants)
