"""The configuration log's copies: terms, majority commit, recovery choice,
compaction and the one-time import, on real SQLite files."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from replication.config_log import (
    ConfigLogError,
    ConfigLogStore,
    Entry,
    LogState,
    StaleTerm,
    commit_point,
    import_documents,
    majority,
    newest,
)


def entry(position: int, term: int, name: str, value: object) -> Entry:
    return Entry(position, term, name, json.dumps(value))


@pytest.fixture(params=["file", "memory"])
def copy(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[ConfigLogStore]:
    """A copy in a file, and one in memory (the simulator's, which keeps its meta table and last
    entry in Python too): the same tests hold for both."""
    store = ConfigLogStore(tmp_path / "node-0") if request.param == "file" else ConfigLogStore.in_memory()
    yield store
    store.close()


def test_stored_entries_become_documents_only_once_committed(copy: ConfigLogStore) -> None:
    copy.begin_term(1)
    state = copy.store(1, [entry(1, 1, "security", {"v": 1}), entry(2, 1, "views", ["a"])])
    assert state == LogState(term=1, last=2, last_term=1, committed=0)
    assert copy.documents() == {}
    copy.commit(1, 1)
    assert copy.documents() == {"security": {"v": 1}}
    copy.commit(1, 99)  # never past the last stored entry
    assert copy.state().committed == 2
    assert copy.documents() == {"security": {"v": 1}, "views": ["a"]}


def test_it_survives_a_reopen(tmp_path: Path) -> None:
    first = ConfigLogStore(tmp_path)
    first.store(3, [entry(1, 3, "session_trees", {"t": 1})])
    first.commit(3, 1)
    first.close()
    again = ConfigLogStore(tmp_path)
    try:
        assert again.state() == LogState(3, 1, 3, 1)
        assert again.documents() == {"session_trees": {"t": 1}}
    finally:
        again.close()


def test_a_leader_of_an_older_term_is_refused(copy: ConfigLogStore) -> None:
    copy.begin_term(2)
    for write in (lambda: copy.store(1, [entry(1, 1, "views", [])]), lambda: copy.commit(1, 1),
                  lambda: copy.begin_term(1), lambda: copy.truncate(1, 0)):
        with pytest.raises(StaleTerm):
            write()
    assert copy.state() == LogState(2, 0, 0, 0)


def test_uncommitted_entries_are_replaced_by_a_new_leader_but_committed_ones_never(copy: ConfigLogStore) -> None:
    copy.store(1, [entry(1, 1, "views", ["a"]), entry(2, 1, "views", ["a", "b"]), entry(3, 1, "security", {})])
    copy.commit(1, 1)
    copy.store(2, [entry(2, 2, "views", ["a", "c"])])  # the new leader's log differs from 2 on
    assert [(e.position, e.term) for e in copy.entries_after(0)] == [(1, 1), (2, 2)]
    with pytest.raises(ConfigLogError, match="committed"):
        copy.store(2, [entry(1, 2, "views", [])])
    with pytest.raises(ConfigLogError, match="committed"):
        copy.truncate(2, 0)
    copy.truncate(2, 1)
    assert copy.state().last == 1


def test_bad_entries_are_refused_whole(copy: ConfigLogStore) -> None:
    with pytest.raises(ConfigLogError, match="order"):
        copy.store(1, [entry(2, 1, "views", []), entry(1, 1, "views", [])])
    with pytest.raises(ConfigLogError, match="unknown"):
        copy.store(1, [entry(1, 1, "views", []), entry(2, 1, "passwords", [])])
    with pytest.raises(json.JSONDecodeError):
        copy.store(1, [Entry(1, 1, "views", "{not json")])
    assert copy.state().last == 0


def test_commit_compacts_superseded_entries_and_a_lagging_copy_catches_up(tmp_path: Path) -> None:
    leader, behind = ConfigLogStore(tmp_path / "a"), ConfigLogStore(tmp_path / "b")
    try:
        entries = [entry(k, 1, "views", list(range(k))) for k in range(1, 6)] + [entry(6, 1, "security", {"s": 1})]
        leader.store(1, entries)
        leader.commit(1, 6)
        assert [e.position for e in leader.entries_after(0)] == [5, 6]  # views 1-4 superseded by 5
        behind.store(1, leader.entries_after(behind.state().committed))
        behind.commit(1, leader.state().committed)
        assert behind.documents() == leader.documents() == {"views": [0, 1, 2, 3, 4], "security": {"s": 1}}
    finally:
        leader.close()
        behind.close()


def test_a_write_is_atomic(copy: ConfigLogStore, monkeypatch: pytest.MonkeyPatch) -> None:
    copy.store(1, [entry(1, 1, "views", ["kept"])])
    real = copy._db
    calls = {"n": 0}

    class Failing:
        def execute(self, sql: str, *args: object) -> object:
            return real.execute(sql, *args)

        def executemany(self, sql: str, rows: object) -> object:
            calls["n"] += 1
            raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(copy, "_db", Failing())
    with pytest.raises(sqlite3.OperationalError):
        copy.store(1, [entry(1, 1, "views", ["replacement"])])
    monkeypatch.setattr(copy, "_db", real)
    assert calls["n"] == 1
    assert [e.value() for e in copy.entries_after(0)] == [["kept"]]  # the delete was rolled back


def test_majority_and_commit_point() -> None:
    assert [majority(n) for n in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]
    with pytest.raises(ValueError):
        majority(0)
    assert commit_point([7, 5, 2], 3) == 5
    assert commit_point([7], 3) == 0  # one copy heard from of three
    assert commit_point([4, 4], 3) == 4
    assert commit_point([9], 1) == 9


@given(st.lists(st.integers(0, 50), min_size=1, max_size=7))
def test_a_commit_point_is_stored_by_a_majority(stored: list[int]) -> None:
    point = commit_point(stored, len(stored))
    assert sum(1 for s in stored if s >= point) >= majority(len(stored))
    assert not any(sum(1 for s in stored if s >= p) >= majority(len(stored)) for p in range(point + 1, 52))


def test_recovery_takes_the_highest_committed_copy() -> None:
    states = {
        "node-0": LogState(3, last=9, last_term=3, committed=6),
        "node-1": LogState(4, last=8, last_term=4, committed=8),
        "node-2": LogState(4, last=10, last_term=2, committed=8),
    }
    assert newest(states) == "node-1"  # committed 8 twice: the newer last term wins
    assert newest({"a": LogState(1, 5, 1, 5), "b": LogState(1, 7, 1, 5)}) == "b"
    with pytest.raises(ValueError):
        newest({})


def test_the_json_files_of_a_single_node_are_imported(tmp_path: Path) -> None:
    (tmp_path / "security.json").write_text(json.dumps({"version": 3}))
    (tmp_path / "views.json").write_text(json.dumps([{"name": "v"}]))
    files = {"security": tmp_path / "security.json", "views": tmp_path / "views.json",
             "session_trees": tmp_path / "session_trees.json"}
    assert import_documents(files) == [("security", {"version": 3}), ("views", [{"name": "v"}])]
