"""The on-disk store of pending delayed topic view events.

Delayed topic views (``delay by 5 minutes``) keep their pending events here,
so the backlog is bounded by disk rather than by memory. The store is a
scratch file: it is *not* restored after a restart. Opening a
:class:`DelayStore` deletes whatever an earlier process left in the
directory and starts from an empty SQLite database, and the database is
tuned for speed (WAL, ``synchronous=OFF``) rather than durability.

Items are ``(due_ms, view_name, payload)``. They come out of
:meth:`DelayStore.pop_due` ordered by due time and, for equal due times, by
insertion order. The store holds no items in Python memory: SQLite keeps only
its bounded page cache.

A store is used by one owner at a time; its methods are serialised by a
lock so that it may also be called from worker threads.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path

__all__ = ["DelayStore", "STORE_FILE"]

STORE_FILE = "delays.sqlite3"
_SIDE_FILES = ("-wal", "-shm", "-journal")

_SCHEMA = """
CREATE TABLE pending (
    seq INTEGER PRIMARY KEY,
    due_ms INTEGER NOT NULL,
    view TEXT NOT NULL,
    payload BLOB NOT NULL
);
CREATE INDEX pending_due ON pending (due_ms, seq);
CREATE INDEX pending_view ON pending (view);
"""


class DelayStore:
    """Pending delayed view events in a fresh SQLite database under ``directory``."""

    def __init__(self, directory: str | Path) -> None:
        """Create ``directory`` if needed, delete any old store there and open an empty one.

        Raises :class:`OSError` if the directory cannot be created or an old
        store file cannot be removed, and :class:`sqlite3.Error` if the
        database cannot be opened.
        """
        self._directory = Path(directory)
        self._directory.mkdir(parents=True, exist_ok=True)
        self._path = self._directory / STORE_FILE
        for suffix in ("", *_SIDE_FILES):
            self._path.with_name(STORE_FILE + suffix).unlink(missing_ok=True)
        self._lock = threading.Lock()
        # Autocommit mode: transactions are opened explicitly with BEGIN.
        conn = sqlite3.connect(self._path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=OFF")
            conn.execute("PRAGMA temp_store=FILE")
            conn.executescript(_SCHEMA)
        except BaseException:
            conn.close()
            raise
        self._conn: sqlite3.Connection | None = conn
        self._count = 0

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def push_many(self, items: Iterable[tuple[int, str, bytes]]) -> None:
        """Add ``(due_ms, view_name, payload)`` items in one transaction.

        ``items`` may be any iterable (a generator is consumed lazily, so a
        large batch need not be materialised). Either every item is stored or,
        if the iterable or the database raises, none is; a payload that is not
        :class:`bytes` raises :class:`TypeError`.
        """
        with self._lock:
            conn = self._connection()
            added = 0

            def rows() -> Iterator[tuple[int, str, bytes]]:
                nonlocal added
                for due_ms, view_name, payload in items:
                    if not isinstance(payload, bytes):
                        raise TypeError(f"payload must be bytes, not {type(payload).__name__}")
                    added += 1
                    yield (due_ms, view_name, payload)

            conn.execute("BEGIN")
            try:
                conn.executemany("INSERT INTO pending (due_ms, view, payload) VALUES (?, ?, ?)", rows())
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._count += added

    def pop_due(self, now_ms: int, limit: int = 10_000) -> list[tuple[str, bytes]]:
        """Remove and return up to ``limit`` items with ``due_ms <= now_ms``.

        The items returned are the earliest ones, ordered by ``(due_ms,
        insertion order)``, as ``(view_name, payload)``. Raises
        :class:`ValueError` if ``limit`` is not positive.
        """
        if limit <= 0:
            raise ValueError(f"limit must be greater than zero, not {limit!r}")
        with self._lock:
            conn = self._connection()
            conn.execute("BEGIN")
            try:
                rows: list[tuple[int, int, str, bytes]] = conn.execute(
                    "SELECT due_ms, seq, view, payload FROM pending WHERE due_ms <= ? "
                    "ORDER BY due_ms, seq LIMIT ?",
                    (now_ms, limit),
                ).fetchall()
                if rows:
                    last_due, last_seq = rows[-1][0], rows[-1][1]
                    # Exactly the rows selected: every row up to the last one in
                    # (due_ms, seq) order.
                    deleted = conn.execute(
                        "DELETE FROM pending WHERE (due_ms, seq) <= (?, ?)", (last_due, last_seq)
                    ).rowcount
                    if deleted != len(rows):  # pragma: no cover - cannot happen under the lock
                        raise RuntimeError(f"delay store deleted {deleted} rows for {len(rows)} popped")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            self._count -= len(rows)
        return [(view, payload) for _, _, view, payload in rows]

    def next_due(self) -> int | None:
        """The earliest pending due time (ms), or ``None`` if nothing is pending."""
        with self._lock:
            row = self._connection().execute("SELECT MIN(due_ms) FROM pending").fetchone()
        return None if row is None or row[0] is None else int(row[0])

    def drop_view(self, view_name: str) -> int:
        """Delete every pending item of ``view_name``; return how many were deleted."""
        with self._lock:
            deleted = int(self._connection().execute("DELETE FROM pending WHERE view = ?", (view_name,)).rowcount)
            self._count -= deleted
        return deleted

    def __len__(self) -> int:
        """The number of pending items."""
        with self._lock:
            self._connection()
            return self._count

    def close(self) -> None:
        """Close the database. Idempotent; any other method then raises :class:`RuntimeError`.

        The file is left on disk; the next :class:`DelayStore` opened on the
        directory deletes it.
        """
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def _connection(self) -> sqlite3.Connection:
        if self._conn is None:
            raise RuntimeError("the delay store is closed")
        return self._conn
