"""Change records of a TopicStore, and rebuilding a store from state() + changes (topics/changes.py)."""

from __future__ import annotations

from typing import Any

import cbor2
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from topics.changes import (
    Change,
    ChangeFormatError,
    EventAppended,
    TopicAdded,
    TopicRemoved,
    TopicState,
    ValueSet,
    decode_change,
    decode_state,
    encode_change,
    encode_state,
    operation_name,
    persistent_only,
)
from topics.protocol import (
    AddTopic,
    AppendEvent,
    EditEvent,
    Ok,
    Operation,
    RefDrop,
    RefEvent,
    RefPut,
    Register,
    RemoveTopics,
    SetValue,
)
from topics.properties import TimeSeriesRange
from topics.store import TopicStore
from topics.timeseries import Event, EventLog, RangeQuery, ViewKind


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


def through_msgpack(item: Any) -> Any:
    """What a journal or snapshot file gives back."""
    return msgpack.unpackb(msgpack.packb(item, use_bin_type=True), raw=False)


def recorded(store: TopicStore) -> list[Change]:
    return [decode_change(through_msgpack(encode_change(c))) for c in store.drain_changes()]


def states_of(store: TopicStore) -> list[TopicState]:
    return [decode_state(through_msgpack(encode_state(s))) for s in store.state()]


def apply_ok(store: TopicStore, *ops: Operation) -> None:
    for result in store.apply("g", ops):
        assert isinstance(result, Ok), result


TS = {"TIME_SERIES_EVENT_VALUE_TYPE": "STRING", "TIME_SERIES_RETAINED_RANGE": "limit 3"}


# -- what is recorded ------------------------------------------------------------------


def test_each_change_to_a_persistent_topic_is_recorded_in_order() -> None:
    store = TopicStore(clock=lambda: 1000, record_changes=True)
    apply_ok(
        store,
        AddTopic("a", "STRING", None),
        SetValue("a", cb("x"), False),
        SetValue("n", cb(1), False, None, True),
        AddTopic("t", "TIME_SERIES", TS),
        AppendEvent("t", cb("e0"), False, None, "alice"),
        EditEvent("t", 0, cb("e0'"), False, "bob"),
        RemoveTopics(">a"),
    )
    changes = recorded(store)
    assert changes == [
        TopicAdded("a", "STRING", [], None),
        ValueSet("a", "STRING", cb("x")),
        TopicAdded("n", "INT64", [], cb(1)),
        TopicAdded("t", "TIME_SERIES", [[k, v] for k, v in sorted(TS.items())], None),
        EventAppended("t", "STRING", Event(0, 1000, "alice", cb("e0"))),
        EventAppended("t", "STRING", Event(1, 1000, "bob", cb("e0'"), 0, 1000, "alice")),
        TopicRemoved("a"),
    ]
    assert [operation_name(c) for c in changes] == ["add", "set", "add", "add", "append", "edit", "remove"]
    assert store.drain_changes() == []


def test_non_persistent_failed_and_reference_changes_are_not_recorded() -> None:
    store = TopicStore(clock=lambda: 5, record_changes=True)
    store.apply(
        "g",
        [
            AddTopic("p", "STRING", {"PERSISTENT": "false"}),
            SetValue("p", cb("x"), False),
            AddTopic("q", "INT64", None),
            SetValue("q", cb("not an int"), False),  # fails: nothing recorded
            AddTopic("q", "INT64", {}),  # EXISTS: nothing recorded
            RefPut("r", 1, "v", "STRING", None, cb("ref")),
            RefPut("q", 1, "v", "STRING", None, cb("waiting")),
            RefPut("rt", 1, "v", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "string"}, None,
                   RefEvent(cb("e"), 5, "v")),
            RemoveTopics("?.*//"),  # removes p and q (q's claim then binds), skips r and rt
            RefDrop("r", 1),
            SetValue("r", cb("mine"), False, None, True),  # now a normal topic
        ],
    )
    assert recorded(store) == [
        TopicAdded("q", "INT64", [], None),
        TopicRemoved("q"),
        TopicAdded("r", "STRING", [], cb("mine")),
    ]
    assert [s.path for s in store.state()] == ["r"]  # q and rt are reference topics now


def test_a_replicating_store_records_every_normal_change_and_marks_the_volatile_ones() -> None:
    """A primary replicates changes to topics that are not persistent too; the
    backup journals only the others (persistent_only)."""
    store = TopicStore(clock=lambda: 5, record_volatile=True)
    apply_ok(
        store,
        AddTopic("p", "STRING", {"PERSISTENT": "false"}),
        SetValue("p", cb("x"), False),
        SetValue("q", cb(1), False, None, True),
        AddTopic("pt", "TIME_SERIES", {**TS, "PERSISTENT": "false"}),
        AppendEvent("pt", cb("e"), False, None, "a"),
        RemoveTopics(">p"),
        RefPut("r", 1, "v", "STRING", None, cb("ref")),
    )
    changes, volatile = store.drain_replicated()
    assert [type(c).__name__ for c in changes] == [
        "TopicAdded", "ValueSet", "TopicAdded", "TopicAdded", "EventAppended", "TopicRemoved",
    ]
    assert volatile == [0, 1, 3, 4, 5]
    assert persistent_only(changes, volatile) == [TopicAdded("q", "INT64", [], cb(1))]
    assert store.drain_replicated() == ([], [])
    apply_ok(store, SetValue("p2", cb("y"), False, None, True), SetValue("q", cb(2), False))
    assert store.drain_changes() == [TopicAdded("p2", "STRING", [], cb("y")), ValueSet("q", "INT64", cb(2))]
    apply_ok(store, AddTopic("v", "STRING", {"PERSISTENT": "false"}))
    assert store.drain_changes() == [] and store.drain_replicated() == ([], [])
    # a backup's first state holds the volatile topics too
    assert sorted(s.path for s in store.state()) == ["p2", "q"]
    assert sorted(s.path for s in store.state(volatile=True)) == ["p2", "pt", "q", "v"]


def test_a_store_that_does_not_record_collects_nothing() -> None:
    store = TopicStore()
    apply_ok(store, AddTopic("a", "STRING", None), SetValue("a", cb("x"), False))
    assert not store.records_changes and store.drain_changes() == []
    assert store._changes is None


def test_restoring_emits_no_events_and_records_no_changes() -> None:
    original = TopicStore(clock=lambda: 7, record_changes=True)
    apply_ok(original, AddTopic("a", "STRING", None), SetValue("a", cb("x"), False),
             AddTopic("t", "TIME_SERIES", TS), AppendEvent("t", cb("e"), False))
    changes = original.drain_changes()
    restored = TopicStore(record_changes=True)
    restored.apply("g", [Register("*.*//", 1)])
    restored.drain_events()
    assert restored.replay(changes) == 0
    restored.load(original.state())
    assert restored.drain_events() == {} and restored.drain_changes() == []


def test_codec_refuses_what_is_not_a_change() -> None:
    for item in ([], [9, "a"], [2, "a", "STRING"], [3, 4], [1, "a", "STRING", [["x"]], None],
                 [4, "t", "STRING", 0, 1, "a", b"v", 0, None, None], "x"):
        with pytest.raises(ChangeFormatError):
            decode_change(item)
    with pytest.raises(ChangeFormatError):
        decode_state(["a", "STRING", [], None, None])


def test_attributes_of_a_retained_value_round_trip_and_stay_off_the_wire_when_empty() -> None:
    def through(item: Any) -> Any:
        return msgpack.unpackb(msgpack.packb(item, use_bin_type=True), raw=False)

    for change in (ValueSet("a", "STRING", b"v", b"attrs"), TopicAdded("a", "STRING", [], b"v", b"attrs")):
        assert decode_change(through(encode_change(change))) == change
    assert len(encode_change(ValueSet("a", "STRING", b"v"))) == 4  # as before attributes were kept
    assert len(encode_change(TopicAdded("a", "STRING", [], None))) == 5
    state = TopicState("a", "STRING", [], b"v", None, 0, b"attrs")
    assert decode_state(through(encode_state(state))) == state
    assert len(encode_state(state._replace(attributes=b""))) == 6
    for item in ([2, "a", "STRING", b"v", "not bytes"], [1, "a", "STRING", [], None, 7]):
        with pytest.raises(ChangeFormatError):
            decode_change(item)


def test_event_log_restored_and_put_check_their_input() -> None:
    log = EventLog.restored(TimeSeriesRange(limit=3), [Event(4, 10, "a", b"x")], 9)
    assert log.next_sequence == 9
    with pytest.raises(ValueError, match="not after"):
        log.put(Event(8, 11, "a", b"y"))
    with pytest.raises(ValueError, match="not after"):
        EventLog.restored(TimeSeriesRange(limit=3), [Event(4, 10, "a", b"x")], 4)
    log.put(Event(9, 11, "a", b"y"))
    log.put(Event(12, 12, "b", b"y'", 9, 11, "a"))
    assert log.next_sequence == 13 and log.current() == Event(12, 12, "b", b"y'", 9, 11, "a")


# -- state() -> load() + replay() rebuilds the store -----------------------------------

PATHS = st.sampled_from(["a", "a/b", "b", "t", "t/u", "s"])
AUTHORS = st.sampled_from(["", "alice", "bob"])
VALUES = st.one_of(st.text("xy", max_size=2), st.integers(-2, 2)).map(cb)
SPECS = st.sampled_from(
    [
        ("STRING", None),
        ("INT64", {}),
        ("JSON", {"PERSISTENT": "true"}),
        ("STRING", {"PERSISTENT": "false"}),
        ("STRING", {"DONT_RETAIN_VALUE": "true"}),
    ]
)
SERIES_PATHS = st.sampled_from(["t", "t/u"])
SERIES_SPECS = st.sampled_from(
    [
        {"TIME_SERIES_EVENT_VALUE_TYPE": "string"},
        {"TIME_SERIES_EVENT_VALUE_TYPE": "string", "TIME_SERIES_RETAINED_RANGE": "limit 3"},
        {"TIME_SERIES_EVENT_VALUE_TYPE": "string", "TIME_SERIES_RETAINED_RANGE": "last 5ms"},
        {"TIME_SERIES_EVENT_VALUE_TYPE": "string", "TIME_SERIES_RETAINED_RANGE": "limit 4 last 8ms"},
        {"TIME_SERIES_EVENT_VALUE_TYPE": "string", "PERSISTENT": "false"},
    ]
)
TEXTS = st.text("xy", max_size=2).map(cb)


def appends() -> st.SearchStrategy[AppendEvent]:
    return st.builds(lambda p, v, a, d: AppendEvent(p, v, False, d, a), SERIES_PATHS, TEXTS, AUTHORS,
                     st.one_of(st.none(), st.none(), st.integers(0, 40)))


def edits() -> st.SearchStrategy[EditEvent]:
    return st.builds(lambda p, s, v, a, own: EditEvent(p, s, v, False, a, own), SERIES_PATHS, st.integers(0, 3),
                     TEXTS, AUTHORS, st.booleans())


# (one_of draws each alternative equally often: repeats weigh the time series operations)
OPERATIONS = st.one_of(
    st.builds(lambda p, s: AddTopic(p, s[0], s[1]), PATHS, SPECS),
    st.builds(lambda p, s: AddTopic(p, "TIME_SERIES", s), SERIES_PATHS, SERIES_SPECS),
    st.builds(lambda p, v, a: SetValue(p, v, False, None, a), PATHS, VALUES, st.booleans()),
    st.builds(RemoveTopics, st.one_of(PATHS.map(lambda p: ">" + p), st.sampled_from(["?t//", "*.*//", "?a/"]))),
    appends(), appends(), appends(), appends(), appends(), edits(), edits(), edits(),
    st.builds(lambda p, n, v: RefPut(p, n, f"view{n}", "STRING", None, v), PATHS, st.integers(1, 2),
              st.text("r", max_size=2).map(cb)),
    st.builds(lambda n, v: RefPut("t/u", n, "tsview", "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "string"},
                                  None, RefEvent(v, 3, "view")), st.integers(1, 2), st.text("r", max_size=2).map(cb)),
    st.builds(RefDrop, PATHS, st.integers(1, 2)),
    st.integers(1, 4),  # the clock moves on
)
#: histories that start with a time series or two, so that events and edits happen
HISTORIES = st.builds(
    lambda first, rest: first + rest,
    st.lists(st.builds(lambda p, s: AddTopic(p, "TIME_SERIES", s), SERIES_PATHS, SERIES_SPECS), max_size=2),
    st.lists(OPERATIONS, min_size=10, max_size=60),
)


class Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        return self.now


def run(store: TopicStore, clock: Clock, ops: list[Any]) -> None:
    for op in ops:
        if isinstance(op, int):
            clock.now += op
        else:
            if isinstance(op, AppendEvent) and op.timestamp is not None:
                op = op._replace(timestamp=clock.now + op.timestamp - 20)  # some go backwards: refused
            store.apply("g", [op])


def persistent_topics(store: TopicStore) -> dict[str, Any]:
    """Everything a restored store must reproduce, internals of the event logs included."""
    out: dict[str, Any] = {}
    for topic in store.tree:
        if topic.path in store.references or not topic.specification.persistent:
            continue
        log = topic.log
        out[topic.path] = (
            topic.specification,
            topic.value,
            None if log is None else (
                log.events(), log.next_sequence, log.retained_range, list(log._originals),
                {k: list(v) for k, v in log._edits.items()}, log.current(),
                log.query(RangeQuery(view=ViewKind.ALL_EDITS)), log.query(),
            ),
        )
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(HISTORIES, st.data())
def test_state_then_later_changes_rebuild_the_store(ops: list[Any], data: st.DataObject) -> None:
    split = data.draw(st.integers(0, len(ops)), label="split")
    clock = Clock()
    original = TopicStore(clock=clock, record_changes=True)
    run(original, clock, ops[:split])
    before = recorded(original)
    state = states_of(original)
    run(original, clock, ops[split:])
    after = recorded(original)
    expected = persistent_topics(original)

    from_state = TopicStore()
    assert from_state.load(state) == len(state)
    assert from_state.replay(after) == 0
    assert persistent_topics(from_state) == expected
    assert len(from_state.tree) == len(expected)

    from_nothing = TopicStore()
    assert from_nothing.replay(before + after) == 0
    assert persistent_topics(from_nothing) == expected
    assert states_of(from_nothing) == states_of(original)

    # replaying changes a state already holds is harmless
    overlapping = TopicStore()
    overlapping.load(state)
    overlapping.replay(before + after)
    assert persistent_topics(overlapping) == expected


@settings(max_examples=100, deadline=None)
@given(HISTORIES, st.lists(OPERATIONS, max_size=15))
def test_a_restored_store_goes_on_like_the_original(ops: list[Any], more: list[Any]) -> None:
    clock = Clock()
    original = TopicStore(clock=clock, record_changes=True)
    run(original, clock, ops)
    restored = TopicStore(clock=clock, record_changes=True)
    restored.load(states_of(original))
    original.drain_changes()
    # the same further operations on persistent, normal topics give the same results and changes
    allowed = set(persistent_topics(original))
    later = [op for op in more if isinstance(op, (AppendEvent, EditEvent, SetValue)) and op.path in allowed]
    for op in later:
        assert original.apply_one("g", op) == restored.apply_one("h", op)
    assert recorded(original) == recorded(restored)
    assert persistent_topics(restored) == persistent_topics(original)
