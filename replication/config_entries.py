"""The configuration log's rules that need no copy at hand: its entries and a copy's state, the
majority, which copy a new writer takes as the truth and what it may take as committed. Pure
(no I/O): the copies (:mod:`replication.config_log`) and the writer
(:mod:`replication.config_writer`) share them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

__all__ = ["ConfigLogError", "Entry", "LogState", "NAMES", "StaleTerm", "WRITER", "commit_point", "majority", "newest"]

#: document names (the fan-out issue adds ``servers``; metric collectors are ``collectors``, the
#: session lock table ``locks``)
NAMES = ("security", "session_trees", "views", "fanout", "servers", "collectors", "locks", "writer")
#: the writer's own entry, which each writer stores when it recovers the log (not a document)
WRITER = "writer"


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
