"""One node's copy of the replicated configuration log, in SQLite.

Views, branch mapping tables and the security store (and, with fan-out, remote
server definitions) are *documents*: each change to one appends an entry
holding the whole new document under its name (``security``, ``views``,
``session_trees``, ...). Documents are small and change rarely, so a whole
document per entry keeps applying trivial (the newest committed entry of a name
is the document) and keeps every copy able to answer on its own.

The log is written by one leader at a time (the cluster's configuration
leader; see ``ARCHITECTURE.md``). Each leader works under a **term** higher
than any before it; a copy refuses entries from an older term
(:class:`StaleTerm`), so a leader that was replaced can no longer append. An
entry is **committed** once a majority of the copies have stored it and the
leader said so; only then is the request that made it answered. A new leader
takes the copy with the highest committed position (then the newest last term,
then the longest) as the truth, with the entries after that position that a
majority of the copies hold (:func:`recovered_commit`); other entries after a
copy's committed position are replaced (they were never answered as done).

Each copy is ``<node data dir>/configuration.sqlite`` (WAL journal, full
synchronous writes: an entry reported stored is on disk). Superseded entries
(an older entry of a name whose newer entry is committed) are compacted away,
so positions may have gaps; a copy that catches up receives the retained
entries after its committed position, which give the same documents.
"""

from __future__ import annotations

import json
import os
import sqlite3
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, NamedTuple

FILE = "configuration.sqlite"
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


class ConfigLogStore:
    """A node's copy of the log (:mod:`sqlite3`, one connection, one thread)."""

    def __init__(self, directory: str | Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.path = Path(directory) / FILE
        # it holds password hashes: owner only (SQLite gives its -wal and -shm files the same mode)
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        os.chmod(self.path, 0o600)
        # check_same_thread off: the actor that owns it calls it from one thread at a time
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS entries (position INTEGER PRIMARY KEY, term INTEGER NOT NULL, "
            "name TEXT NOT NULL, document TEXT NOT NULL)"
        )
        self._db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")

    def close(self) -> None:
        self._db.close()

    # -- reading -------------------------------------------------------------------------

    def _meta(self, key: str) -> int:
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def state(self) -> LogState:
        row = self._db.execute("SELECT position, term FROM entries ORDER BY position DESC LIMIT 1").fetchone()
        last, last_term = (int(row[0]), int(row[1])) if row else (0, 0)
        return LogState(self._meta("term"), last, last_term, self._meta("committed"))

    def entries_after(self, position: int) -> list[Entry]:
        rows = self._db.execute(
            "SELECT position, term, name, document FROM entries WHERE position > ? ORDER BY position", (position,)
        ).fetchall()
        return [Entry(int(p), int(t), str(n), str(d)) for p, t, n, d in rows]

    def documents(self) -> dict[str, Any]:
        """Each name's newest committed document."""
        committed = self._meta("committed")
        rows = self._db.execute(
            "SELECT name, document FROM entries WHERE position IN "
            "(SELECT MAX(position) FROM entries WHERE position <= ? GROUP BY name)", (committed,)
        ).fetchall()
        return {str(name): json.loads(document) for name, document in rows}

    # -- a leader's writes -------------------------------------------------------------------

    def _check_term(self, term: int) -> None:
        if term < self._meta("term"):
            raise StaleTerm(f"a leader of term {term}: this copy follows term {self._meta('term')}")

    def begin_term(self, term: int) -> LogState:
        """A new leader announces itself; an older one is refused from now on."""
        self._check_term(term)
        with self._transaction():
            self._set("term", term)
        return self.state()

    def store(self, term: int, entries: list[Entry]) -> LogState:
        """Store ``entries`` (increasing positions, after the committed ones); stored
        entries at or after the first new position that are not committed are replaced."""
        self._check_term(term)
        if not entries:
            return self.state()
        positions = [e.position for e in entries]
        if positions != sorted(set(positions)):
            raise ConfigLogError(f"entries out of order: positions {positions}")
        committed = self._meta("committed")
        if positions[0] <= committed:
            raise ConfigLogError(f"entry {positions[0]} would replace a committed one (committed: {committed})")
        for entry in entries:
            if entry.name not in NAMES:
                raise ConfigLogError(f"unknown configuration document {entry.name!r}")
            json.loads(entry.document)  # a document must be JSON
        with self._transaction():
            self._set("term", term)
            self._db.execute("DELETE FROM entries WHERE position >= ?", (positions[0],))
            self._db.executemany(
                "INSERT INTO entries (position, term, name, document) VALUES (?, ?, ?, ?)",
                [tuple(e) for e in entries],
            )
        return self.state()

    def commit(self, term: int, position: int) -> LogState:
        """Entries up to ``position`` (at most the last stored) are committed."""
        self._check_term(term)
        state = self.state()
        point = min(position, state.last)
        if point > state.committed:
            with self._transaction():
                self._set("committed", point)
                self._compact(point)
        return self.state()

    def truncate(self, term: int, position: int) -> LogState:
        """Drop the uncommitted entries after ``position`` (a new leader's log ends there)."""
        self._check_term(term)
        if position < self._meta("committed"):
            raise ConfigLogError(f"cannot cut committed entries (committed {self._meta('committed')}, asked {position})")
        with self._transaction():
            self._db.execute("DELETE FROM entries WHERE position > ?", (position,))
        return self.state()

    def _compact(self, committed: int) -> None:
        """Entries of a name older than its newest committed one are of no use any more."""
        self._db.execute(
            "DELETE FROM entries WHERE position < ? AND position < "
            "(SELECT MAX(e.position) FROM entries e WHERE e.name = entries.name AND e.position <= ?)",
            (committed, committed),
        )

    def _set(self, key: str, value: int) -> None:
        self._db.execute("INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = ?",
                         (key, value, value))

    def _transaction(self) -> _Transaction:
        return _Transaction(self._db)


class _Transaction:
    def __init__(self, db: sqlite3.Connection) -> None:
        self.db = db

    def __enter__(self) -> None:
        self.db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: Any, *_: Any) -> None:
        self.db.execute("COMMIT" if kind is None else "ROLLBACK")


def import_documents(files: Mapping[str, Path]) -> list[tuple[str, Any]]:
    """The one-time import of the JSON documents a single-node canopy kept in its data
    directory (``{name: path}``): the ones that exist, in ``NAMES`` order."""
    out = []
    for name in NAMES:
        path = files.get(name)
        if path is not None and path.exists():
            out.append((name, json.loads(path.read_text(encoding="utf-8"))))
    return out
