from __future__ import annotations

from typing import Any

import cbor2
import pytest

from topics.store import (
    CREATED,
    EV_ADD,
    EV_END,
    EV_REMOVE,
    EV_SNAPSHOT,
    EV_VALUE,
    EXISTS,
    FAILED,
    OK,
    OP_ADD,
    OP_FETCH,
    OP_REGISTER,
    OP_REMOVE,
    OP_SET,
    OP_UNREGISTER,
    TopicStore,
)


def ok(result: list[Any]) -> Any:
    assert result[0] == OK, result
    return result[1]


def failed(result: list[Any]) -> str:
    assert result[0] == FAILED, result
    return str(result[1])


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


def test_add_exists_and_conflict() -> None:
    store = TopicStore()
    r = store.apply("g", [[OP_ADD, "a", "STRING", None], [OP_ADD, "a", "STRING", {}], [OP_ADD, "a", "JSON", None]])
    assert ok(r[0]) == CREATED and ok(r[1]) == EXISTS
    assert failed(r[2]) == "TOPIC_EXISTS_MISMATCH"


def test_set_is_type_checked_and_failure_changes_nothing() -> None:
    store = TopicStore()
    store.apply("g", [[OP_ADD, "n", "INT64", None]])
    r = store.apply(
        "g",
        [
            [OP_SET, "n", cb(5), False, None, False],
            [OP_SET, "n", cb("five"), False, None, False],
            [OP_SET, "n", cb(6), False, "STRING", False],
            [OP_SET, "n", b"raw", True, None, False],
            [OP_SET, "missing", cb(1), False, None, False],
        ],
    )
    assert ok(r[0]) is None
    assert [failed(x) for x in r[1:]] == ["INVALID_VALUE", "INVALID_VALUE", "INVALID_VALUE", "NO_SUCH_TOPIC"]
    assert store.tree.get("n").value == cb(5)  # type: ignore[union-attr]


def test_add_and_set_infers_type() -> None:
    store = TopicStore()
    r = store.apply(
        "g",
        [
            [OP_SET, "s", cb("x"), False, None, True],
            [OP_SET, "i", cb(1), False, None, True],
            [OP_SET, "d", cb(1.5), False, None, True],
            [OP_SET, "j", cb({"a": 1}), False, None, True],
            [OP_SET, "b", b"\x00", True, None, True],
            [OP_SET, "forced", cb("x"), False, "JSON", True],
        ],
    )
    assert [ok(x) for x in r] == [CREATED] * 6
    types = {t.path: t.type.value for t in store.tree}
    assert types == {"s": "STRING", "i": "INT64", "d": "DOUBLE", "j": "JSON", "b": "BINARY", "forced": "JSON"}


def test_double_from_integer_is_stored_as_float() -> None:
    store = TopicStore()
    store.apply("g", [[OP_ADD, "d", "DOUBLE", None], [OP_SET, "d", cb(3), False, None, False]])
    assert cbor2.loads(store.tree.get("d").value) == 3.0  # type: ignore[union-attr]
    assert isinstance(cbor2.loads(store.tree.get("d").value), float)  # type: ignore[union-attr]


def test_time_series_topics_refuse_set() -> None:
    store = TopicStore()
    store.apply("g", [[OP_ADD, "ts", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "STRING"}]])
    assert failed(store.apply("g", [[OP_SET, "ts", cb("x"), False, None, False]])[0]) == "INVALID_VALUE"


def test_malformed_operations() -> None:
    store = TopicStore()
    r = store.apply("g", [[99], [], "x", [OP_ADD], [OP_ADD, "a", "STRING", ["not", "a", "map"]], [OP_SET, "a", "text", False]])
    assert [failed(x) for x in r] == ["INVALID_REQUEST"] * 4 + ["INVALID_REQUEST", "INVALID_VALUE"]


def test_remove_by_selector() -> None:
    store = TopicStore()
    store.apply("g", [[OP_ADD, p, "STRING", None] for p in ("a", "a/b", "a/b/c", "x")])
    assert ok(store.apply("g", [[OP_REMOVE, ">a"]])[0]) == 1
    assert sorted(store.tree.paths()) == ["a/b", "a/b/c", "x"]
    assert ok(store.apply("g", [[OP_REMOVE, "?a//"]])[0]) == 2
    assert failed(store.apply("g", [[OP_REMOVE, "?a//b"]])[0]) == "INVALID_SELECTOR"


def test_fetch_sorted_filtered_limited() -> None:
    store = TopicStore()
    store.apply(
        "g",
        [
            [OP_SET, "b", cb("x"), False, None, True],
            [OP_SET, "a", cb(1), False, None, True],
            [OP_ADD, "c", "JSON", {"CONFLATION": "off"}],
        ],
    )
    rows = ok(store.apply("g", [[OP_FETCH, "*.*", True, True, None, None]])[0])
    assert rows == [["a", "INT64", [], cb(1)], ["b", "STRING", [], cb("x")], ["c", "JSON", [["CONFLATION", "off"]], None]]
    rows = ok(store.apply("g", [[OP_FETCH, "*.*", False, False, ["STRING", "json"], 1]])[0])
    assert rows == [["b", "STRING", None, None]]
    assert failed(store.apply("g", [[OP_FETCH, "*.*", True, False, None, -1]])[0]) == "INVALID_REQUEST"


def test_registration_snapshot_then_events_in_order() -> None:
    store = TopicStore()
    store.apply("g1", [[OP_SET, "a/x", cb(1), False, None, True]])
    store.drain_events()
    store.apply("g1", [[OP_REGISTER, "?a/.*", 7]])
    events = store.drain_events()
    assert events == {"g1": [[EV_SNAPSHOT, 7, "a/x", "INT64", [], cb(1)], [EV_END, 7]]}
    store.apply(
        "g2",
        [
            [OP_SET, "a/x", cb(2), False, None, False],
            [OP_ADD, "a/y", "STRING", None],
            [OP_ADD, "b/z", "STRING", None],
            [OP_REMOVE, ">a/x"],
        ],
    )
    assert store.drain_events() == {
        "g1": [
            [EV_VALUE, "a/x", cb(2)],
            [EV_ADD, "a/y", "STRING", [], None],
            [EV_REMOVE, "a/x"],
        ]
    }
    store.apply("g1", [[OP_UNREGISTER, "?a/.*"]])
    store.apply("g1", [[OP_SET, "a/y", cb("q"), False, None, False]])
    assert store.drain_events() == {}


def test_dont_retain_value() -> None:
    store = TopicStore()
    store.apply("g", [[OP_ADD, "v", "STRING", {"DONT_RETAIN_VALUE": "true"}], [OP_REGISTER, ">v", 1]])
    store.drain_events()
    store.apply("g", [[OP_SET, "v", cb("x"), False, None, False]])
    assert store.drain_events() == {"g": [[EV_VALUE, "v", cb("x")]]}
    assert store.tree.get("v").value is None  # type: ignore[union-attr]
    assert ok(store.apply("g", [[OP_FETCH, ">v", True, False, None, None]])[0]) == [["v", "STRING", None, None]]


def test_drop_gateway() -> None:
    store = TopicStore()
    store.apply("g", [[OP_REGISTER, "?a/.*", 1], [OP_REGISTER, ">b", 2]])
    assert store.gateways() == ["g"]
    assert store.drop_gateway("g") == 2
    store.apply("h", [[OP_ADD, "b", "STRING", None]])
    assert store.drain_events() == {}
    assert len(store.index) == 0


@pytest.mark.parametrize("policy", ["CREATED"])
def test_add_event_carries_value_when_created_by_set(policy: str) -> None:
    store = TopicStore()
    store.apply("g", [[OP_REGISTER, "?n/.*", 1]])
    store.drain_events()
    assert ok(store.apply("g", [[OP_SET, "n/1", cb("v"), False, None, True]])[0]) == policy
    assert store.drain_events() == {"g": [[EV_ADD, "n/1", "STRING", [], cb("v")]]}
