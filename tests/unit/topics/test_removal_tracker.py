from __future__ import annotations

import pytest

from topics.changes import TopicAdded, TopicState, decode_change, decode_state, encode_change, encode_state
from topics.protocol import AddTopic, Ok, RemovalFacts, Removed, Register, RemovalWatch, SetValue
from topics.removal_tracker import CHECK_INTERVAL_MS, REPORT_TIMEOUT_MS, Due, RemovalTracker
from topics.store import TopicStore

T0 = 1_700_000_000_000


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> int:
        return self.now


# -- the tracker ------------------------------------------------------------------


def test_no_updates_is_due_its_period_after_the_last_update() -> None:
    t = RemovalTracker()
    t.added("a", "when no updates for 2s", T0)
    assert t.next_check_ms(T0) == T0 + CHECK_INTERVAL_MS
    t.updated("a", T0 + 1500)
    assert t.due(T0 + 3000) == []
    assert t.due(T0 + 3500) == [Due("a", ">a", True, None)]
    assert t.watched == {} and t.next_check_ms(T0 + 3500) is None


def test_session_facts_are_not_holding_until_every_fresh_report_gives_them() -> None:
    t = RemovalTracker()
    t.added("a", "when subscriptions < 1 for 1s or this session closes", T0, "s1", ["CLIENT"])
    watch = t.watch()
    assert (watch.paths, watch.filters, watch.creators) == (("a",), (), ("s1",))
    assert t.due(T0 + 60_000) == []  # nobody reported: nothing is known
    t.report("g1", T0, {"a": 0}, {}, {"s1": True})
    t.report("g2", T0, {}, {}, {})  # answers nothing: the figures stay unknown
    assert t.due(T0 + 4000) == []
    t.report("g2", T0 + 4000, {"a": 1}, {}, {"s1": False})
    t.report("g1", T0 + 4000, {"a": 0}, {}, {"s1": True})
    assert t.due(T0 + 4500) == []  # one subscription; the creator is open on g1
    t.report("g1", T0 + 5000, {"a": 0}, {}, {"s1": False})
    assert t.due(T0 + 5000) == [Due("a", ">a", True, ["CLIENT"])]


def test_a_report_that_stopped_holding_is_never_missed_between_checks() -> None:
    t = RemovalTracker()
    t.added("a", "when subscriptions < 1 for 2s", T0)
    t.report("g", T0, {"a": 0}, {}, {})
    t.report("g", T0 + 1000, {"a": 1}, {}, {})  # subscribed for a moment, between two checks
    t.report("g", T0 + 1500, {"a": 0}, {}, {})
    assert t.due(T0 + 2500) == [] and t.due(T0 + 3500) == [Due("a", ">a", True, None)]


def test_a_silent_or_lost_gateway_drops_out() -> None:
    t = RemovalTracker()
    t.added("a", "when no session has 'Department is \"x\"'", T0)
    t.report("g1", T0, {}, {'Department is "x"': 0}, {})
    t.report("g2", T0, {}, {'Department is "x"': 1}, {})
    assert t.due(T0 + 100) == []
    t.forget("g2")
    t.report("g1", T0 + REPORT_TIMEOUT_MS, {}, {'Department is "x"': 0}, {})
    assert [d.path for d in t.due(T0 + REPORT_TIMEOUT_MS)] == ["a"]
    t.added("b", "when no session has 'Department is \"x\"'", T0)
    assert t.due(T0 + 3 * REPORT_TIMEOUT_MS) == []  # g1's report is stale: unknown again


def test_a_remove_clause_is_handed_out_with_the_roles() -> None:
    t = RemovalTracker()
    t.added("p", "when time after 5 remove '?b//'", T0, "s", ["R"])
    assert t.due(T0) == [Due("p", "?b//", False, ["R"])]


def test_the_interest_version_changes_only_with_what_it_names() -> None:
    t = RemovalTracker()
    first = t.watch()
    t.added("a", "when no updates for 1s", T0)
    assert t.watch().version == first.version
    t.added("b", "when subscriptions < 2 for 1s", T0)
    second = t.watch()
    assert second.version > first.version and second.paths == ("b",)
    t.removed("b")
    assert t.watch().version > second.version


# -- in the store: kept in changes and states, rebuilt, never earlier --------------


def test_a_policy_topic_is_removed_by_expire_with_a_removed_event() -> None:
    clock = Clock()
    s = TopicStore(clock, record_changes=True)
    s.apply("g", [Register("?a//", 1)])
    s.drain_events()
    assert s.apply_one("g", AddTopic("a/x", "STRING", {"REMOVAL": "when no updates for 1s"}, "s1", ["R"])) == Ok("CREATED")
    s.apply_one("g", AddTopic("a/y", "STRING"))
    added = s.drain_changes()[0]
    assert isinstance(added, TopicAdded) and added.removal == [T0, "s1", ["R"], None]
    assert decode_change(encode_change(added)) == added
    clock.now += 800
    s.apply_one("g", SetValue("a/x", b"\x61a", False))
    s.drain_events()
    assert s.expire(T0 + 1500) == 0
    assert s.expire(T0 + 1800) == 1
    assert Removed("a/x") in s.drain_events()["g"] and [t.path for t in s.tree] == ["a/y"]


def test_a_rebuilt_store_has_the_original_times() -> None:
    clock = Clock()
    s = TopicStore(clock, record_changes=True)
    s.add("a", "STRING", {"REMOVAL": "when no updates for 10s"}, "s1", ["R"])
    clock.now += 4000
    s.set("a", b"\x61x", False)
    state = s.state()
    assert state[0].removal == [T0, "s1", ["R"], T0 + 4000]
    assert decode_state(encode_state(state[0])) == state[0]
    later = Clock()
    later.now = T0 + 60_000
    from_state = TopicStore(later)
    from_state.load(state)
    assert from_state.removals.kept("a") == [T0, "s1", ["R"], T0 + 4000]
    from_journal = TopicStore(later)
    from_journal.replay(s.drain_changes(), [T0, T0 + 4005])  # journaled a little after each change
    assert from_journal.removals.kept("a") == [T0, "s1", ["R"], T0 + 4005]
    assert from_journal.removals.due(T0 + 14_000) == []
    assert [d.path for d in from_journal.removals.due(T0 + 14_005)] == ["a"]


def test_a_state_without_what_the_watch_kept_starts_it_when_rebuilt() -> None:
    clock = Clock()
    s = TopicStore(clock)
    s.load([TopicState("a", "STRING", [["REMOVAL", "when no updates for 1s"]], None)])
    assert s.removals.kept("a") == [T0, None, None, None]


def test_a_report_answers_the_interest_and_hands_out_remove_clauses() -> None:
    clock = Clock()
    s = TopicStore(clock)
    s.add("p", "STRING", {"REMOVAL": "when subscriptions < 1 for 1s remove '?q//'"}, "s1", ["R"])
    answer = s.apply_one("g", RemovalFacts(0, {}, {}, {}))
    assert isinstance(answer, Ok) and isinstance(answer.value, RemovalWatch)
    watch = answer.value
    assert watch.paths == ["p"] and watch.removals == []
    s.apply_one("g", RemovalFacts(watch.version, {"p": 0}, {}, {}))
    assert s.expire(T0 + 500) == 0
    assert s.expire(T0 + 1000) == 0 and s.removal_outbox
    handed = s.apply_one("g", RemovalFacts(watch.version, {"p": 0}, {}, {}))
    assert isinstance(handed, Ok) and handed.value.removals == [["?q//", ["R"]]]
    assert s.removal_outbox == [] and "p" in s.tree  # the policy topic is not selected: it stays


@pytest.mark.parametrize("text", ["when no updates for 1s", "when this session closes"])
def test_a_removed_or_replaced_topic_is_no_longer_watched(text: str) -> None:
    s = TopicStore(Clock())
    s.add("a", "STRING", {"REMOVAL": text}, "s1")
    s.remove(">a")
    assert s.removals.watched == {}
