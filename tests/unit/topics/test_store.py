from __future__ import annotations

from typing import Any

import cbor2
import pytest

from topics.protocol import (
    Added,
    AddTopic,
    AppendEvent,
    Appended,
    Changed,
    CountTopics,
    EditEvent,
    End,
    Failed,
    FetchTopics,
    Ok,
    QueryEvents,
    ReadRecent,
    RefPut,
    Register,
    Removed,
    RemoveTopics,
    Result,
    SetValue,
    Snapshot,
    TopicRow,
    Unregister,
)
from topics.store import CREATED, EXISTS, TopicStore
from topics.timeseries import Event


def ok(result: Result) -> Any:
    assert isinstance(result, Ok), result
    return result.value


def failed(result: Result) -> str:
    assert isinstance(result, Failed), result
    return result.code


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


def p_set(path: str, value: Any, add: bool = False) -> SetValue:
    return SetValue(path, cb(value), False, None, add)


def test_add_exists_and_conflict() -> None:
    store = TopicStore()
    r = store.apply("g", [AddTopic("a", "STRING", None), AddTopic("a", "STRING", {}), AddTopic("a", "JSON", None)])
    assert ok(r[0]) == CREATED and ok(r[1]) == EXISTS
    assert failed(r[2]) == "TOPIC_EXISTS_MISMATCH"


def test_set_is_type_checked_and_failure_changes_nothing() -> None:
    store = TopicStore()
    store.apply("g", [AddTopic("n", "INT64", None)])
    r = store.apply(
        "g",
        [
            SetValue("n", cb(5), False, None, False),
            SetValue("n", cb("five"), False, None, False),
            SetValue("n", cb(6), False, "STRING", False),
            SetValue("n", b"raw", True, None, False),
            SetValue("missing", cb(1), False, None, False),
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
            SetValue("s", cb("x"), False, None, True),
            SetValue("i", cb(1), False, None, True),
            SetValue("d", cb(1.5), False, None, True),
            SetValue("j", cb({"a": 1}), False, None, True),
            SetValue("b", b"\x00", True, None, True),
            SetValue("forced", cb("x"), False, "JSON", True),
        ],
    )
    assert [ok(x) for x in r] == [CREATED] * 6
    types = {t.path: t.type.value for t in store.tree}
    assert types == {"s": "STRING", "i": "INT64", "d": "DOUBLE", "j": "JSON", "b": "BINARY", "forced": "JSON"}


def test_double_from_integer_is_stored_as_float() -> None:
    store = TopicStore()
    store.apply("g", [AddTopic("d", "DOUBLE", None), SetValue("d", cb(3), False, None, False)])
    assert cbor2.loads(store.tree.get("d").value) == 3.0  # type: ignore[union-attr]
    assert isinstance(cbor2.loads(store.tree.get("d").value), float)  # type: ignore[union-attr]


def test_time_series_topics_refuse_set() -> None:
    store = TopicStore()
    store.apply("g", [AddTopic("ts", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "STRING"})])
    assert failed(store.apply("g", [SetValue("ts", cb("x"), False, None, False)])[0]) == "INVALID_VALUE"


def test_malformed_operations() -> None:
    store = TopicStore()
    bad: list[Any] = [[99], "x", AddTopic("a", "STRING", ["not", "a", "map"]), SetValue("a", "text", False)]  # type: ignore[arg-type]
    r = store.apply("g", bad)
    assert [failed(x) for x in r] == ["INVALID_REQUEST", "INVALID_REQUEST", "INVALID_REQUEST", "INVALID_VALUE"]


def test_remove_by_selector() -> None:
    store = TopicStore()
    store.apply("g", [AddTopic(p, "STRING", None) for p in ("a", "a/b", "a/b/c", "x")])
    assert ok(store.apply("g", [RemoveTopics(">a")])[0]) == 1
    assert sorted(store.tree.paths()) == ["a/b", "a/b/c", "x"]
    assert ok(store.apply("g", [RemoveTopics("?a//")])[0]) == 2
    assert failed(store.apply("g", [RemoveTopics("?a//b")])[0]) == "INVALID_SELECTOR"


def test_fetch_sorted_filtered_limited() -> None:
    store = TopicStore()
    store.apply(
        "g",
        [
            SetValue("b", cb("x"), False, None, True),
            SetValue("a", cb(1), False, None, True),
            AddTopic("c", "JSON", {"CONFLATION": "off"}),
        ],
    )
    rows = ok(store.apply("g", [FetchTopics("*.*", True, True, None, None)])[0])
    assert rows == [
        TopicRow("a", "INT64", [], cb(1), None),
        TopicRow("b", "STRING", [], cb("x"), None),
        TopicRow("c", "JSON", [["CONFLATION", "off"]], None, None),
    ]
    rows = ok(store.apply("g", [FetchTopics("*.*", False, False, ["STRING", "json"], 1)])[0])
    assert rows == [TopicRow("b", "STRING", None, None, None)]
    assert failed(store.apply("g", [FetchTopics("*.*", True, False, None, -1)])[0]) == "INVALID_REQUEST"


def test_count_says_how_many_topics_each_selector_selects_by_type() -> None:
    store = TopicStore()
    store.apply("g", [p_set("a/x", "s", True), p_set("a/y", 1, True), AddTopic("a/z/j", "JSON", None),
                      AddTopic("b", "STRING", None), RefPut("a/ref", 1, "v", "STRING", None, cb("r"))])
    counted = ok(store.apply("g", [CountTopics(["?a//", ">b", ">nothing", "*a/z/.*"])])[0])
    assert counted == [{"STRING": 2, "INT64": 1, "JSON": 1}, {"STRING": 1}, {}, {"JSON": 1}]
    assert failed(store.apply("g", [CountTopics(["?a//b"])])[0]) == "INVALID_SELECTOR"
    assert failed(store.apply("g", [CountTopics([">a"] * 1001)])[0]) == "INVALID_REQUEST"
    assert not store.drain_changes() and not store.drain_events()  # a read: nothing changed, nobody told


def test_registration_snapshot_then_events_in_order() -> None:
    store = TopicStore()
    store.apply("g1", [SetValue("a/x", cb(1), False, None, True)])
    store.drain_events()
    store.apply("g1", [Register("?a/.*", 7)])
    events = store.drain_events()
    assert events == {"g1": [Snapshot(7, "a/x", "INT64", [], cb(1)), End(7)]}
    store.apply(
        "g2",
        [
            SetValue("a/x", cb(2), False, None, False),
            AddTopic("a/y", "STRING", None),
            AddTopic("b/z", "STRING", None),
            RemoveTopics(">a/x"),
        ],
    )
    assert store.drain_events() == {
        "g1": [
            Changed("a/x", cb(2)),
            Added("a/y", "STRING", [], None),
            Removed("a/x"),
        ]
    }
    store.apply("g1", [Unregister("?a/.*")])
    store.apply("g1", [SetValue("a/y", cb("q"), False, None, False)])
    assert store.drain_events() == {}


def test_dont_retain_value() -> None:
    store = TopicStore()
    store.apply("g", [AddTopic("v", "STRING", {"DONT_RETAIN_VALUE": "true"}), Register(">v", 1)])
    store.drain_events()
    store.apply("g", [SetValue("v", cb("x"), False, None, False)])
    assert store.drain_events() == {"g": [Changed("v", cb("x"))]}
    assert store.tree.get("v").value is None  # type: ignore[union-attr]
    assert ok(store.apply("g", [FetchTopics(">v", True, False, None, None)])[0]) == [TopicRow("v", "STRING", None, None, None)]


def test_drop_gateway() -> None:
    store = TopicStore()
    store.apply("g", [Register("?a/.*", 1), Register(">b", 2)])
    assert store.gateways() == ["g"]
    assert store.drop_gateway("g") == 2
    store.apply("h", [AddTopic("b", "STRING", None)])
    assert store.drain_events() == {}
    assert len(store.index) == 0


@pytest.mark.parametrize("policy", ["CREATED"])
def test_add_event_carries_value_when_created_by_set(policy: str) -> None:
    store = TopicStore()
    store.apply("g", [Register("?n/.*", 1)])
    store.drain_events()
    assert ok(store.apply("g", [SetValue("n/1", cb("v"), False, None, True)])[0]) == policy
    assert store.drain_events() == {"g": [Added("n/1", "STRING", [], cb("v"))]}


# -- time series ----------------------------------------------------------------

TS = {"TIME_SERIES_EVENT_VALUE_TYPE": "DOUBLE", "TIME_SERIES_RETAINED_RANGE": "limit 5"}


def series_store(now: list[int]) -> TopicStore:
    store = TopicStore(clock=lambda: now[0])
    store.apply("g", [AddTopic("ts", "TIME_SERIES", TS)])
    return store


def test_append_stamps_and_emits_events() -> None:
    now = [1000]
    store = series_store(now)
    store.apply("g", [Register(">ts", 1)])
    store.drain_events()
    r = store.apply("g", [AppendEvent("ts", cb(1.5), False, None, "alice"), AppendEvent("ts", cb(2), False, 5000, "bob")])
    assert [ok(x) for x in r] == [(0, 1000, "alice"), (1, 5000, "bob")]
    now[0] = 2000  # the clock is behind the newest event: stamps never go backwards
    assert ok(store.apply("g", [AppendEvent("ts", cb(3.0), False, None, "")])[0]) == (2, 5000, "")
    events = store.drain_events()["g"]
    assert [type(e) for e in events] == [Appended] * 3
    assert events[1] == Appended("ts", Event(1, 5000, "bob", cb(2.0)))


def test_time_series_bad_input_changes_nothing() -> None:
    store = series_store([1000])
    store.apply("g", [AppendEvent("ts", cb(1.0), False, 2000, "a"), AddTopic("plain", "STRING", None)])
    r = store.apply(
        "g",
        [
            AppendEvent("ts", cb(2.0), False, 1999, "a"),
            AppendEvent("ts", cb("text"), False, None, "a"),
            EditEvent("ts", 7, cb(1.0), False, "a"),
            AppendEvent("plain", cb("x"), False, None, "a"),
            AppendEvent("nowhere", cb(1.0), False, None, "a"),
            QueryEvents("ts", "sideways", 0, "end", 0, "values", None),
            QueryEvents("ts", "sequence", -1, "end", 0, "values", None),
        ],
    )
    assert [failed(x) for x in r] == [
        "TIMESTAMP_ORDER", "INVALID_VALUE", "UNKNOWN_SEQUENCE", "INVALID_VALUE", "NO_SUCH_TOPIC",
        "INVALID_QUERY", "INVALID_QUERY",
    ]
    assert [e.sequence for e in store.tree.get("ts").log.events()] == [0]  # type: ignore[union-attr]


def test_edit_query_and_fetch() -> None:
    store = series_store([1000])
    store.apply("g", [AppendEvent("ts", cb(float(i)), False, None, "a") for i in range(3)])
    edit = ok(store.apply("g", [EditEvent("ts", 1, cb(10.0), False, "b")])[0])
    assert edit == (3, 1000, "b", 1, 1000, "a")
    selected, events, event_type = ok(store.apply("g", [QueryEvents("ts", "start", 0, "end", 0, "values", None)])[0])
    assert event_type == "DOUBLE" and selected == 3
    assert [cbor2.loads(e.value) for e in events] == [0.0, 10.0, 2.0]
    _, all_edits, _ = ok(store.apply("g", [QueryEvents("ts", "start", 0, "end", 0, "all_edits", 2)])[0])
    assert [e.sequence for e in all_edits] == [0, 1]
    rows = ok(store.apply("g", [FetchTopics(">ts", True, False, None, None)])[0])
    assert rows == [TopicRow("ts", "TIME_SERIES", None, cb(2.0), "DOUBLE")]


def test_registration_snapshot_carries_the_subscription_range() -> None:
    store = TopicStore(clock=lambda: 1)
    store.apply("g", [AddTopic("ts", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64",
                                                      "TIME_SERIES_SUBSCRIPTION_RANGE": "limit 2"})])
    store.apply("g", [AppendEvent("ts", cb(i), False, None, "") for i in range(5)])
    store.drain_events()
    store.apply("g", [Register(">ts", 9)])
    events = store.drain_events()["g"]
    assert [type(e) for e in events] == [Snapshot, Appended, Appended, End]
    assert [e.event.sequence for e in events[1:3]] == [3, 4]  # type: ignore[union-attr]


# -- recent messages ---------------------------------------------------------------------


def _paths(events: list[Any]) -> list[str]:
    return [e.path for e in events]


def test_every_message_takes_a_position_and_joins_the_recent_ones_whether_or_not_a_link_listens() -> None:
    store = TopicStore(clock=lambda: 1000, position=500)
    store.apply("gw", [p_set("a/x", 1, add=True), p_set("a/x", 2), p_set("b/y", 3, add=True)])
    store.apply("gw", [AddTopic("a/empty", "STRING")])  # no value: not a message
    store.apply("gw", [SetValue("a/x", b"9", "text", retain=False)])  # delivered, not kept: a message
    assert store.position == 504 and not store.drain_events()  # nobody registered, all still numbered
    first, last, chosen = store.recent_since(500, ["?a//"])
    assert (first, last) == (501, 504)
    assert [(type(e).__name__, e.path) for e in chosen] == [("Added", "a/x"), ("Changed", "a/x"), ("Changed", "a/x")]
    assert chosen[-1].retained is False
    assert _paths(store.recent_since(502, ["?a//", "b/y"])[2]) == ["b/y", "a/x"]
    assert store.recent_since(504, ["?a//"])[2] == []


def test_the_recent_window_keeps_the_newest_and_says_where_it_starts() -> None:
    store = TopicStore(clock=lambda: 1000, recent=3)
    for i in range(10):
        store.apply("gw", [p_set("t", i, add=True)])
    first, last, chosen = store.recent_since(2, ["t"])
    assert (first, last) == (8, 10)  # 3..7 are gone: the caller sees it missed some
    assert [cbor2.loads(e.value) for e in chosen] == [7, 8, 9]


def test_a_backup_keeps_its_primary_messages_and_numbering() -> None:
    primary = TopicStore(clock=lambda: 1000, position=7_000, record_volatile=True)
    backup = TopicStore(clock=lambda: 1000, position=1, record_volatile=True)
    primary.apply("gw", [p_set("t", 1, add=True), AppendEvent("s", b"", True)])  # the append fails: no topic
    primary.apply("gw", [AddTopic("s", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64"})])
    primary.apply("gw", [AppendEvent("s", cbor2.dumps(5), False, 3)])
    backup.replay(primary.drain_changes())
    backup.extend_recent(primary.drain_recent(), primary.position)
    assert primary.drain_recent() == []
    assert backup.position == primary.position == 7_002
    assert backup.recent_since(7_000, ["?.*"]) == primary.recent_since(7_000, ["?.*"])
    backup.apply("gw", [p_set("t", 2)])  # promoted: it numbers on
    assert backup.position == 7_003


def test_reading_recent_messages_checks_its_input() -> None:
    store = TopicStore(clock=lambda: 1000)
    results = store.apply("gw", [ReadRecent(["?["], 0), ReadRecent([">a"], "0"), ReadRecent([">a"] * 1001, 0)])  # type: ignore[list-item]
    assert [type(r).__name__ for r in results] == ["Failed"] * 3, results
    assert all(r.code in ("INVALID_SELECTOR", "INVALID_REQUEST") for r in results), results


def test_a_retained_value_keeps_what_it_was_published_with_through_snapshots_state_and_replay() -> None:
    """The attributes of a retained set (an MQTT 5 publish's properties) stay with the value: a
    registration's snapshot carries them, and so do the state and the changes a backup or a
    restart rebuilds the store from; a value set without them clears them."""
    store = TopicStore(clock=lambda: 1000, record_changes=True)
    store.apply("gw", [SetValue("a/x", cb(1), False, None, True, True, "", b"props-1")])
    store.apply("gw", [SetValue("a/y", cb(1), False, None, True), SetValue("a/y", cb(2), False, attributes=b"props-2")])
    store.apply("gw", [SetValue("a/z", cb(1), False, None, True, True, "", b"props-3"), SetValue("a/z", cb(2), False)])
    store.apply("gw", [SetValue("a/x", cb(5), False, retain=False, attributes=b"not-kept")])
    assert store.attributes == {"a/x": b"props-1", "a/y": b"props-2"}
    store.register("gw", "?a/", 7)
    snapshots = {e.path: e.attributes for e in store.drain_events()["gw"] if isinstance(e, Snapshot)}
    assert snapshots == {"a/x": b"props-1", "a/y": b"props-2", "a/z": b""}

    rebuilt = TopicStore(clock=lambda: 1000)
    rebuilt.replay(store.drain_changes())
    assert rebuilt.attributes == store.attributes
    loaded = TopicStore(clock=lambda: 1000)
    loaded.load(store.state())
    assert loaded.attributes == store.attributes
    store.apply("gw", [RemoveTopics("?a/x")])
    assert "a/x" not in store.attributes


def test_the_recent_window_is_bounded_in_bytes_and_an_answer_too_large_says_it_is_not_all(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import topics.store as module

    store = TopicStore(clock=lambda: 1000, recent_bytes=10_000)
    for i in range(50):
        store.apply("gw", [SetValue("t", b"x" * 1000, True, "BINARY", True)])
    first, last, chosen = store.recent_since(0, ["t"])
    assert 5 <= len(chosen) <= 10 and last == 50 and first == 51 - len(store.recent)
    monkeypatch.setattr(module, "MAX_RECENT_ANSWER", 3_000)
    first, last, chosen = store.recent_since(last - 5, ["t"])
    assert first > last - 5 + 1 and len(chosen) == 3  # cut short: the reader treats it as a gap


# -- properties the store honours: VALIDATE_VALUES, and those refused at creation ----------------

TAGGED_TEXT = bytes(cbor2.dumps(cbor2.CBORTag(55799, "x")))  # self-described: cbor2 reads "x"
BIGNUM_ONE = b"\xc2\x41\x01"  # tag 2: the integer 1 as a bignum


@pytest.mark.parametrize("type_name, good, bad", [
    ("STRING", cb("x"), TAGGED_TEXT),
    ("INT64", cb(1), BIGNUM_ONE),
    ("JSON", cb({"a": [1, "b", None, True, 1.5]}), cb({"a": cbor2.CBORTag(55799, 1)})),
    ("JSON", cb([1]), b"\xa1\x61a" + BIGNUM_ONE),
])
def test_validate_values_refuses_a_value_not_plain_for_the_type_and_changes_nothing(
    type_name: str, good: bytes, bad: bytes
) -> None:
    store = TopicStore()
    store.apply("g", [AddTopic("strict", type_name, {"VALIDATE_VALUES": "true"}), AddTopic("lax", type_name, None)])
    r = store.apply("g", [
        SetValue("strict", good, False), SetValue("strict", bad, False), SetValue("lax", bad, False),
    ])
    assert ok(r[0]) is None and failed(r[1]) == "INVALID_VALUE"
    assert store.tree.get("strict").value == good  # type: ignore[union-attr]
    assert ok(r[2]) is None  # without it what cbor2 reads as the type will do, as before


def test_validate_values_applies_to_time_series_events_and_edits() -> None:
    store = TopicStore(clock=lambda: 1000)
    store.apply("g", [AddTopic("ts", "TIME_SERIES", {**TS, "VALIDATE_VALUES": "true"})])
    r = store.apply("g", [
        AppendEvent("ts", cb(1.5), False, None, "a"),
        AppendEvent("ts", b"\xfa\x3f\xc0\x00\x00", False, None, "a"),  # float32 1.5: plain
        AppendEvent("ts", b"\xf7", False, None, "a"),  # undefined
        EditEvent("ts", 0, b"\xc1\x01", False, "a"),  # tag 1 (a date) around 1
    ])
    assert [type(x) for x in r[:2]] == [Ok, Ok]
    assert [failed(x) for x in r[2:]] == ["INVALID_VALUE", "INVALID_VALUE"]


@pytest.mark.parametrize("properties, refused", [
    ({"SCHEMA": '{"records": []}'}, "SCHEMA"),
])
def test_properties_canopy_does_not_honour_are_refused_at_creation(properties: dict[str, str], refused: str) -> None:
    store = TopicStore()
    r = store.apply("g", [AddTopic("t", "JSON", properties), AddTopic("u", "JSON", {"COMPRESSION": "off"})])
    assert failed(r[0]) == "INVALID_SPECIFICATION" and refused in r[0].message  # type: ignore[union-attr]
    assert store.tree.get("t") is None and ok(r[1]) == CREATED


def test_an_update_on_behalf_of_an_owner_applies_only_to_the_topics_it_owns() -> None:
    from topics.protocol import PatchJson

    store = TopicStore()
    owned = {"OWNER": "$Principal is 'fred'"}
    store.apply("g", [AddTopic("mine", "JSON", owned), AddTopic("other", "JSON"), AddTopic("ts", "TIME_SERIES", {
        **owned, "TIME_SERIES_EVENT_VALUE_TYPE": "string"})])
    r = store.apply("g", [
        SetValue("mine", cb({"n": 1}), False, owner="fred"),
        SetValue("other", cb({"n": 1}), False, owner="fred"),
        SetValue("mine", cb({"n": 9}), False, owner="ann"),
        PatchJson("mine", '[{"op": "replace", "path": "/n", "value": 2}]', None, "fred"),
        PatchJson("other", '[{"op": "replace", "path": "/n", "value": 2}]', None, "fred"),
        AppendEvent("ts", cb("e"), False, 1000, "fred", "fred"),
        SetValue("nowhere", cb(1), False, owner="fred"),
    ])
    assert [failed(x) if isinstance(x, Failed) else "ok" for x in r] == [
        "ok", "PERMISSION_DENIED", "PERMISSION_DENIED", "ok", "PERMISSION_DENIED", "ok", "PERMISSION_DENIED"]
    assert r[1].message == "permission UPDATE_TOPIC is needed on 'other'"  # type: ignore[union-attr]
    assert cbor2.loads(store.tree.get("mine").value) == {"n": 2}  # type: ignore[union-attr]
    assert store.tree.get("other").value is None  # type: ignore[union-attr]
    r = store.apply("g", [RemoveTopics(">other", "fred"), RemoveTopics(">mine", "ann"), RemoveTopics(">mine", "fred")])
    assert [failed(x) if isinstance(x, Failed) else ok(x) for x in r] == ["PERMISSION_DENIED", "PERMISSION_DENIED", 1]
    assert store.tree.get("mine") is None and store.tree.get("other") is not None


def test_a_structure_registration_hears_of_topics_and_never_of_values() -> None:
    from topics.protocol import Absent, Present

    store = TopicStore()
    store.apply("g", [SetValue("a/x", cb(1), False, None, True)])
    store.drain_events()
    store.apply("g", [Register("?a//", 4, True)])
    assert store.drain_events() == {"g": [Present(4, "a/x", "INT64", []), End(4)]}
    store.apply("w", [
        SetValue("a/x", cb(2), False, None, False),  # a value: nothing for a structure registration
        SetValue("a/y", cb(3), False, None, True),  # added with a value: the topic, not the value
        AddTopic("a/z", "STRING", None),
        RemoveTopics(">a/x"),
    ])
    assert store.drain_events() == {"g": [
        Present(0, "a/y", "INT64", []), Present(0, "a/z", "STRING", []), Absent("a/x"),
    ]}
    # a value registration of the same selector beside it: each hears what it registered for
    store.apply("g", [Register("?a//", 5)])
    store.drain_events()
    store.apply("w", [SetValue("a/y", cb(4), False, None, False), AddTopic("a/w", "STRING", None)])
    assert store.drain_events() == {"g": [
        Changed("a/y", cb(4)), Added("a/w", "STRING", [], None), Present(0, "a/w", "STRING", []),
    ]}
    store.apply("g", [Unregister("?a//", True)])
    store.apply("w", [AddTopic("a/v", "STRING", None)])
    assert store.drain_events() == {"g": [Added("a/v", "STRING", [], None)]}
    store.apply("g", [Register(">b", 6, True)])
    assert store.gateways() == ["g"] and store.drop_gateway("g") == 2
    assert len(store.outline) == 0
