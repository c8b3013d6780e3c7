"""DelayStore: pending delayed view events on disk (actors/delay_store.py)."""

from __future__ import annotations

import sqlite3
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from actors.delay_store import STORE_FILE, DelayStore


@pytest.fixture
def store(tmp_path: Path) -> Iterator[DelayStore]:
    s = DelayStore(tmp_path / "delay_store")
    yield s
    s.close()


def test_a_new_store_is_empty(store: DelayStore) -> None:
    assert len(store) == 0
    assert store.next_due() is None
    assert store.pop_due(10**12) == []
    assert store.path.name == STORE_FILE and store.path.exists()


def test_creates_nested_directories(tmp_path: Path) -> None:
    directory = tmp_path / "data" / "delay_store"
    s = DelayStore(str(directory))
    try:
        assert directory.is_dir()
    finally:
        s.close()


def test_pop_orders_by_due_time_then_insertion(store: DelayStore) -> None:
    store.push_many([(300, "v", b"c1"), (100, "v", b"a1"), (300, "w", b"c2")])
    store.push_many([(200, "w", b"b1"), (100, "w", b"a2"), (300, "v", b"c3")])
    assert len(store) == 6
    assert store.next_due() == 100
    assert store.pop_due(99) == []
    assert store.pop_due(100) == [("v", b"a1"), ("w", b"a2")]
    assert store.next_due() == 200
    assert store.pop_due(1_000) == [("w", b"b1"), ("v", b"c1"), ("w", b"c2"), ("v", b"c3")]
    assert len(store) == 0 and store.next_due() is None


def test_pop_limit(store: DelayStore) -> None:
    store.push_many((10, "v", bytes([i])) for i in range(5))
    store.push_many([(5, "v", b"first"), (50, "v", b"later")])
    assert store.pop_due(20, limit=2) == [("v", b"first"), ("v", b"\x00")]
    assert store.pop_due(20, limit=2) == [("v", b"\x01"), ("v", b"\x02")]
    assert store.pop_due(20, limit=2) == [("v", b"\x03"), ("v", b"\x04")]
    assert store.pop_due(20, limit=2) == []
    assert len(store) == 1 and store.next_due() == 50
    with pytest.raises(ValueError):
        store.pop_due(20, limit=0)


def test_drop_view(store: DelayStore) -> None:
    store.push_many([(1, "a", b"1"), (2, "b", b"2"), (3, "a", b"3"), (4, "c", b"4")])
    assert store.drop_view("a") == 2
    assert store.drop_view("a") == 0
    assert store.drop_view("missing") == 0
    assert len(store) == 2 and store.next_due() == 2
    assert store.pop_due(10) == [("b", b"2"), ("c", b"4")]


def test_empty_payloads_and_odd_view_names(store: DelayStore) -> None:
    store.push_many([(1, "", b""), (1, "vïew/with 'quotes'", b"\x00\xff")])
    assert store.pop_due(1) == [("", b""), ("vïew/with 'quotes'", b"\x00\xff")]


def test_a_failing_batch_stores_nothing(store: DelayStore) -> None:
    store.push_many([(1, "v", b"kept")])

    def broken() -> Iterator[tuple[int, str, bytes]]:
        yield (2, "v", b"x")
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        store.push_many(broken())
    with pytest.raises(TypeError):
        store.push_many([(3, "v", b"y"), (4, "v", "not bytes")])  # type: ignore[list-item]
    assert len(store) == 1
    assert store.pop_due(10) == [("v", b"kept")]


def test_reopening_the_directory_starts_empty(tmp_path: Path) -> None:
    directory = tmp_path / "delay_store"
    first = DelayStore(directory)
    first.push_many([(1, "v", b"old"), (2, "v", b"older")])
    first.close()
    second = DelayStore(directory)
    try:
        assert len(second) == 0
        assert second.next_due() is None
        assert second.pop_due(10**12) == []
        second.push_many([(1, "v", b"new")])
        assert second.pop_due(1) == [("v", b"new")]
    finally:
        second.close()


def test_reopening_deletes_a_store_left_by_a_crash(tmp_path: Path) -> None:
    directory = tmp_path / "delay_store"
    directory.mkdir()
    (directory / STORE_FILE).write_bytes(b"not a database")
    (directory / (STORE_FILE + "-wal")).write_bytes(b"junk")
    s = DelayStore(directory)
    try:
        assert len(s) == 0
        with sqlite3.connect(directory / STORE_FILE) as check:
            assert check.execute("SELECT COUNT(*) FROM pending").fetchone() == (0,)
        check.close()
    finally:
        s.close()


def test_close_is_idempotent_and_final(tmp_path: Path) -> None:
    s = DelayStore(tmp_path)
    s.close()
    s.close()
    with pytest.raises(RuntimeError):
        s.push_many([(1, "v", b"x")])
    with pytest.raises(RuntimeError):
        s.pop_due(1)
    with pytest.raises(RuntimeError):
        len(s)


def test_a_hundred_thousand_items(store: DelayStore) -> None:
    count = 100_000
    payload = b"p" * 100

    def items() -> Iterator[tuple[int, str, bytes]]:
        # Due times in reverse blocks, so the store has to sort.
        for i in range(count):
            yield ((count - 1 - i) // 1_000, f"view-{i % 7}", payload + i.to_bytes(4, "big"))

    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        store.push_many(items())
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    # ~10 MB of payloads went to disk; Python keeps (almost) nothing of them.
    assert held < 1_000_000, held
    assert len(store) == count and store.next_due() == 0

    popped = 0
    last: tuple[int, int] = (-1, -1)
    chunks = 0
    while True:
        chunk = store.pop_due(count, limit=7_000)
        if not chunk:
            break
        chunks += 1
        assert len(chunk) <= 7_000
        for _, data in chunk:
            i = int.from_bytes(data[-4:], "big")
            key = ((count - 1 - i) // 1_000, i)
            assert key > last  # (due time, insertion order) strictly increases
            last = key
        popped += len(chunk)
    assert popped == count and chunks == -(-count // 7_000)
    assert len(store) == 0 and store.next_due() is None
