"""The configuration log's rules that need no copy at hand: its entries and a copy's state, the
majority, which copy a new writer takes as the truth and what it may take as committed. Pure
(no I/O): the copies (:mod:`replication.config_log`) and the writer
(:mod:`replication.config_writer`) share them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["ConfigLogError", "Entry", "LogState", "NAMES", "StaleTerm", "commit_point", "majority", "newest",
           "recovered_commit"]

#: document names (the fan-out issue adds ``servers``; metric collectors are ``collectors``, the
#: session lock table ``locks``)
NAMES = ("security", "session_trees", "views", "fanout", "servers", "collectors", "locks")


class ConfigLogError(Exception):
    pass


class StaleTerm(ConfigLogError):
    """A leader of an older term: another one took over."""


class Entry(NamedTuple):
    position: int
    term: int
    name: str
    document: str  # JSON text

    def value(self) -> Any:
        return json.loads(self.document)


class LogState(NamedTuple):
    #: the highest term this copy has seen (it refuses older leaders)
    term: int
    #: the last stored entry's position and term (0, 0 when empty)
    last: int
    last_term: int
    #: entries up to here are committed (stored by a majority, said so by a leader)
    committed: int


def majority(copies: int) -> int:
    """How many copies make a majority of ``copies``."""
    if copies < 1:
        raise ValueError("a log needs at least one copy")
    return copies // 2 + 1


def newest(states: Mapping[Any, LogState]) -> Any:
    """The copy a new leader takes as the truth: the highest committed position, then
    the newest last term, then the longest log (ties: the first key in order)."""
    if not states:
        raise ValueError("no copy to recover from")
    return max(states, key=lambda k: (states[k].committed, states[k].last_term, states[k].last))


def commit_point(stored: Iterable[int], copies: int) -> int:
    """The highest position stored by a majority of ``copies`` (each copy's last
    stored position in ``stored``; copies not heard from count as 0)."""
    positions = sorted(stored, reverse=True)
    need = majority(copies)
    return positions[need - 1] if len(positions) >= need else 0


def recovered_commit(source: list[Entry], committed: int, held: Iterable[set[tuple[int, int]]], copies: int) -> int:
    """The committed position a new writer takes from the ``source`` copy's entries
    (committed up to ``committed``): also every entry after it that a majority of the
    ``copies`` hold, the same (position, term) — the old writer may have died after a
    majority stored an entry and before any copy heard it was committed, and that change
    may have been answered as done by then (see the writer's append)."""
    held = list(held)
    for entry in reversed(source):
        if entry.position <= committed:
            break
        if sum((entry.position, entry.term) in h for h in held) >= majority(copies):
            return entry.position
    return committed
