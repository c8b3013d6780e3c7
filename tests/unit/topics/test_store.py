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
    assert rows == [
        ["a", "INT64", [], cb(1), None],
        ["b", "STRING", [], cb("x"), None],
        ["c", "JSON", [["CONFLATION", "off"]], None, None],
    ]
    rows = ok(store.apply("g", [[OP_FETCH, "*.*", False, False, ["STRING", "json"], 1]])[0])
    assert rows == [["b", "STRING", None, None, None]]
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
    assert ok(store.apply("g", [[OP_FETCH, ">v", True, False, None, None]])[0]) == [["v", "STRING", None, None, None]]


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


# -- time series ----------------------------------------------------------------

TS = {"TIME_SERIES_EVENT_VALUE_TYPE": "DOUBLE", "TIME_SERIES_RETAINED_RANGE": "limit 5"}


def series_store(now: list[int]) -> TopicStore:
    store = TopicStore(clock=lambda: now[0])
    store.apply("g", [[OP_ADD, "ts", "TIME_SERIES", TS]])
    return store


def test_append_stamps_and_emits_events() -> None:
    from topics.store import EV_EVENT, OP_APPEND

    now = [1000]
    store = series_store(now)
    store.apply("g", [[OP_REGISTER, ">ts", 1]])
    store.drain_events()
    r = store.apply("g", [[OP_APPEND, "ts", cb(1.5), False, None, "alice"], [OP_APPEND, "ts", cb(2), False, 5000, "bob"]])
    assert [ok(x) for x in r] == [[0, 1000, "alice"], [1, 5000, "bob"]]
    now[0] = 2000  # the clock is behind the newest event: stamps never go backwards
    assert ok(store.apply("g", [[OP_APPEND, "ts", cb(3.0), False, None, ""]])[0]) == [2, 5000, ""]
    events = store.drain_events()["g"]
    assert [e[0] for e in events] == [EV_EVENT] * 3
    assert events[1] == [EV_EVENT, "ts", 1, 5000, "bob", cb(2.0), None, None, None]


def test_time_series_bad_input_changes_nothing() -> None:
    from topics.store import OP_APPEND, OP_EDIT, OP_QUERY

    store = series_store([1000])
    store.apply("g", [[OP_APPEND, "ts", cb(1.0), False, 2000, "a"], [OP_ADD, "plain", "STRING", None]])
    r = store.apply(
        "g",
        [
            [OP_APPEND, "ts", cb(2.0), False, 1999, "a"],
            [OP_APPEND, "ts", cb("text"), False, None, "a"],
            [OP_EDIT, "ts", 7, cb(1.0), False, "a"],
            [OP_APPEND, "plain", cb("x"), False, None, "a"],
            [OP_APPEND, "nowhere", cb(1.0), False, None, "a"],
            [OP_QUERY, "ts", "sideways", 0, "end", 0, "values", None],
            [OP_QUERY, "ts", "sequence", -1, "end", 0, "values", None],
        ],
    )
    assert [failed(x) for x in r] == [
        "TIMESTAMP_ORDER", "INVALID_VALUE", "UNKNOWN_SEQUENCE", "INVALID_VALUE", "NO_SUCH_TOPIC",
        "INVALID_QUERY", "INVALID_QUERY",
    ]
    assert [e.sequence for e in store.tree.get("ts").log.events()] == [0]  # type: ignore[union-attr]


def test_edit_query_and_fetch() -> None:
    from topics.store import OP_APPEND, OP_EDIT, OP_QUERY

    store = series_store([1000])
    store.apply("g", [[OP_APPEND, "ts", cb(float(i)), False, None, "a"] for i in range(3)])
    edit = ok(store.apply("g", [[OP_EDIT, "ts", 1, cb(10.0), False, "b"]])[0])
    assert edit == [3, 1000, "b", 1, 1000, "a"]
    selected, events, event_type = ok(store.apply("g", [[OP_QUERY, "ts", "start", 0, "end", 0, "values", None]])[0])
    assert event_type == "DOUBLE" and selected == 3
    assert [cbor2.loads(e[3]) for e in events] == [0.0, 10.0, 2.0]
    _, all_edits, _ = ok(store.apply("g", [[OP_QUERY, "ts", "start", 0, "end", 0, "all_edits", 2]])[0])
    assert [e[0] for e in all_edits] == [0, 1]
    rows = ok(store.apply("g", [[OP_FETCH, ">ts", True, False, None, None]])[0])
    assert rows == [["ts", "TIME_SERIES", None, cb(2.0), "DOUBLE"]]


def test_registration_snapshot_carries_the_subscription_range() -> None:
    from topics.store import EV_EVENT, OP_APPEND

    store = TopicStore(clock=lambda: 1)
    store.apply("g", [[OP_ADD, "ts", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64",
                                                      "TIME_SERIES_SUBSCRIPTION_RANGE": "limit 2"}]])
    store.apply("g", [[OP_APPEND, "ts", cb(i), False, None, ""] for i in range(5)])
    store.drain_events()
    store.apply("g", [[OP_REGISTER, ">ts", 9]])
    events = store.drain_events()["g"]
    assert [e[0] for e in events] == [EV_SNAPSHOT, EV_EVENT, EV_EVENT, EV_END]
    assert [e[2] for e in events[1:3]] == [3, 4]
