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
then the longest) among a majority as the truth, all of it, and stores an entry
of its own under its term (``writer``, not a document) after it on a majority
(see :meth:`replication.config_writer.ConfigWriter.recover`); entries other
copies hold after their committed position are replaced.

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
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# the rules without a copy at hand, which the writer shares (named here too, as before)
from replication.config_entries import (
    NAMES,
    WRITER,
    ConfigLogError,
    Entry,
    LogState,
    StaleTerm,
    commit_point,
    majority,
    newest,
)

__all__ = ["FILE", "NAMES", "ConfigLogError", "ConfigLogStore", "Entry", "LogState", "StaleTerm", "commit_point",
           "import_documents", "majority", "newest", "WRITER"]

FILE = "configuration.sqlite"

class ConfigLogStore:
    """A node's copy of the log (:mod:`sqlite3`, one connection, one thread)."""

    def __init__(self, directory: str | Path) -> None:
        Path(directory).mkdir(parents=True, exist_ok=True)
        self.path = Path(directory) / FILE
        # it holds password hashes: owner only (SQLite gives its -wal and -shm files the same mode)
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        os.chmod(self.path, 0o600)
        # check_same_thread off: the actor that owns it calls it from one thread at a time
        self._open(sqlite3.connect(self.path, isolation_level=None, check_same_thread=False))

    @classmethod
    def in_memory(cls) -> ConfigLogStore:
        """A copy held in memory only (the simulator's: its node's "disk" is the object itself)."""
        global _EMPTY
        if _EMPTY is None:  # the schema, made once: copying it is a tenth of making it
            _EMPTY = sqlite3.connect(":memory:", isolation_level=None)
            _schema(_EMPTY)
        db = sqlite3.connect(":memory:", isolation_level=None)
        _EMPTY.backup(db)
        store = cls.__new__(cls)
        store.path = Path(":memory:")
        store._open(db, on_disk=False)
        return store

    def _open(self, db: sqlite3.Connection, on_disk: bool = True) -> None:
        self._db = db
        if on_disk:
            self._db.execute("PRAGMA journal_mode=WAL")
            self._db.execute("PRAGMA synchronous=FULL")
            _schema(db)
        # A copy in memory is this connection's alone, so it keeps its meta table and last entry in
        # Python too (the simulator runs tens of thousands of copies). A file may be opened by
        # another process (a copy made again while the old one is not quite gone): read it each time.
        self._memo = not on_disk
        #: the meta table as committed, and a transaction's changes (kept in memory only)
        self._cached = ({} if not on_disk else  # a copy in memory starts empty
                        {str(k): int(v) for k, v in self._db.execute("SELECT key, value FROM meta")})
        self._pending: dict[str, int] = {}
        #: the last entry's (position, term), None until read again (a store or a cut changes it;
        #: compaction never removes it: it keeps every entry from the committed position on)
        self._last: tuple[int, int] | None = None

    def close(self) -> None:
        self._db.close()

    # -- reading -------------------------------------------------------------------------

    def _meta(self, key: str) -> int:
        if self._memo:
            return self._pending.get(key, self._cached.get(key, 0))
        row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return int(row[0]) if row else 0

    def state(self) -> LogState:
        if self._last is None or not self._memo:
            row = self._db.execute("SELECT position, term FROM entries ORDER BY position DESC LIMIT 1").fetchone()
            self._last = (int(row[0]), int(row[1])) if row else (0, 0)
        return LogState(self._meta("term"), self._last[0], self._last[1], self._meta("committed"))

    def entries_after(self, position: int) -> list[Entry]:
        rows = self._db.execute(
            "SELECT position, term, name, document FROM entries WHERE position > ? ORDER BY position", (position,)
        ).fetchall()
        return [Entry(int(p), int(t), str(n), str(d)) for p, t, n, d in rows]

    def answer(self, method: str, *args: Any) -> Any:
        """A writer's call of this copy (``state``, ``held``, ``store_entries``, ``commit``,
        ``truncate``, ``catch_up``) with its arguments as they travel (entries as tuples), and its
        answer as it travels back: what a node's agent, and the simulator's copy, answer."""
        if method == "store_entries":
            term, entries = args
            return self.store(term, [Entry(*e) for e in entries])
        if method == "catch_up":
            term, entries, committed = args
            return self.catch_up(term, [Entry(*e) for e in entries], committed)
        if method == "held":
            state, held = self.held()
            return state, [tuple(e) for e in held]
        if method in ("state", "commit", "truncate"):
            return getattr(self, method)(*args)
        raise ConfigLogError(f"no such call of a configuration copy: {method!r}")

    def held(self) -> tuple[LogState, list[Entry]]:
        """What a new leader reads of this copy to recover the log: its state and every entry."""
        return self.state(), self.entries_after(0)

    def documents(self) -> dict[str, Any]:
        """Each name's newest committed document."""
        committed = self._meta("committed")
        rows = self._db.execute(
            "SELECT name, document FROM entries WHERE position IN "
            "(SELECT MAX(position) FROM entries WHERE position <= ? GROUP BY name)", (committed,)
        ).fetchall()
        return {str(name): json.loads(document) for name, document in rows if name != WRITER}

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
        self._last = None
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
        self._last = None
        with self._transaction():
            self._db.execute("DELETE FROM entries WHERE position > ?", (position,))
        return self.state()

    def catch_up(self, term: int, entries: list[Entry], committed: int) -> LogState:
        """A leader brings this copy up to date in one step: it announces ``term``, cuts back what
        this copy had not committed, stores those of ``entries`` (the leader's retained committed
        entries) after this copy's committed position, and commits up to ``committed``."""
        state = self.begin_term(term)
        self.truncate(term, state.committed)
        missing = [e for e in entries if e.position > state.committed]
        if missing:
            self.store(term, missing)
        return self.commit(term, committed)

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
        self._pending[key] = value

    def _transaction(self) -> _Transaction:
        return _Transaction(self)


class _Transaction:
    def __init__(self, store: ConfigLogStore) -> None:
        self.store = store

    def __enter__(self) -> None:
        self.store._pending = {}
        self.store._db.execute("BEGIN IMMEDIATE")

    def __exit__(self, kind: Any, *_: Any) -> None:
        store = self.store
        try:
            store._db.execute("COMMIT" if kind is None else "ROLLBACK")
            if kind is None:
                store._cached.update(store._pending)
        finally:
            store._pending = {}


#: an empty copy's schema, which :meth:`ConfigLogStore.in_memory` copies
_EMPTY: sqlite3.Connection | None = None


def _schema(db: sqlite3.Connection) -> None:
    db.execute(
        "CREATE TABLE IF NOT EXISTS entries (position INTEGER PRIMARY KEY, term INTEGER NOT NULL, "
        "name TEXT NOT NULL, document TEXT NOT NULL)"
    )
    db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")


def import_documents(files: Mapping[str, Path]) -> list[tuple[str, Any]]:
    """The one-time import of the JSON documents a single-node canopy kept in its data
    directory (``{name: path}``): the ones that exist, in ``NAMES`` order."""
    out = []
    for name in NAMES:
        path = files.get(name)
        if path is not None and path.exists():
            out.append((name, json.loads(path.read_text(encoding="utf-8"))))
    return out
