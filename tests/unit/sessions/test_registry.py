from __future__ import annotations

from typing import Any

import cbor2
import pytest

from sessions.deliveries import Subscribed, Unsubscribed, Update
from sessions.registry import SessionRegistry
from sessions.security import PermissionDenied, SecurityStore, default_store
from sessions.trees import BranchMappingTable, SessionTrees
from topics.selectors import Selector, parse_selector
from topics.protocol import Added, Changed, End, Removed, Snapshot, TopicEvent


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


def sel(text: str) -> Selector:
    return parse_selector(text)


def messages(registry: SessionRegistry, sid: str) -> list[Any]:
    out: list[Any] = []
    queue = registry.sessions[sid].queue
    aliases: dict[int, str] = registry.__dict__.setdefault("_test_aliases", {})
    while True:
        batch = queue.take()
        if not batch:
            return out
        for m in batch:
            if isinstance(m, Subscribed):
                aliases[m.alias] = m.path
            out.append(m)


def summary(registry: SessionRegistry, sid: str) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    aliases: dict[int, str] = registry.__dict__.setdefault("_test_aliases", {})
    for m in messages(registry, sid):
        if isinstance(m, Subscribed):
            aliases[m.alias] = m.path
            out.append(("sub", m.path, cbor2.loads(m.value) if m.value else None))
        elif isinstance(m, Update):
            out.append(("val", aliases.get(m.alias, m.alias), cbor2.loads(m.value)))
        elif isinstance(m, Unsubscribed):
            out.append(("unsub", aliases.get(m.alias, m.alias), m.reason))
        else:
            out.append((type(m).__name__,))
    return out


def feed_snapshot(r: SessionRegistry, regs: list[tuple[Selector, int]], topics: dict[str, tuple[str, Any]]) -> None:
    """Answer registrations the way partitions would, from a dict path -> (type, value)."""
    for selector, token in regs:
        events: list[TopicEvent] = []
        for path, (type_name, value) in topics.items():
            if selector.matches(path):
                events.append(Snapshot(token, path, type_name, [], cb(value) if value is not None else None))
        events.append(End(token))
        r.on_events(events)


def test_first_subscription_registers_then_snapshot_makes_it_live() -> None:
    r = SessionRegistry(partitions_for=lambda _: 2)
    r.open("s1", "", {})
    regs, waits = r.subscribe("s1", sel("?a/.*"))
    assert [str(s) for s, _ in regs] == ["?a/.*"] and waits == [regs[0][1]]
    token = regs[0][1]
    assert r.on_events([Snapshot(token, "a/x", "INT64", [], cb(1)), End(token)]) == []
    assert summary(r, "s1") == [("sub", "a/x", 1)]
    assert r.on_events([End(token)]) == [token]
    assert r.is_live(token)


def test_second_session_is_served_from_the_cache() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    r.open("s2", "", {})
    regs, _ = r.subscribe("s1", sel("?a/.*"))
    feed_snapshot(r, regs, {"a/x": ("STRING", "v")})
    messages(r, "s1")
    assert r.subscribe("s2", sel("?a/.*")) == ([], [])
    assert summary(r, "s2") == [("sub", "a/x", "v")]


def test_values_fan_out_once_encoded() -> None:
    r = SessionRegistry()
    for sid in ("s1", "s2"):
        r.open(sid, "", {})
    regs, _ = r.subscribe("s1", sel("?a/.*"))
    r.subscribe("s2", sel("?a/.*"))
    token = regs[0][1]
    r.on_events([Added("a/x", "STRING", [], None), End(token), Changed("a/x", cb("1"))])
    assert messages(r, "s1") == messages(r, "s2")


def test_subscriptions_and_deliveries_are_counted_for_the_metrics() -> None:
    r = SessionRegistry()
    registrations = []
    for sid, selector in (("s1", "?a//"), ("s2", ">a/x")):
        r.open(sid, "", {})
        registrations += r.subscribe(sid, sel(selector))[0]
    feed_snapshot(r, registrations, {"a/x": ("STRING", "v"), "a/y": ("INT64", 1), "b": ("STRING", "w")})
    assert r.subscriptions(sel("?a//")) == {"STRING": 2, "INT64": 1}
    assert r.subscriptions(sel(">a/y")) == {"INT64": 1} and r.subscriptions(sel(">b")) == {}
    before = r.updates_delivered
    r.on_events([Changed("a/x", cb("2")), Changed("a/y", cb(2)), Changed("b", cb("x"))])
    assert r.updates_delivered == before + 3  # a/x to two sessions, a/y to one, b to none


def test_unsubscribe_keeps_topics_still_matched_by_another_selector() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    broad, narrow = sel("?a//"), sel(">a/x")
    regs = r.subscribe("s", broad)[0] + r.subscribe("s", narrow)[0]
    feed_snapshot(r, regs, {"a/x": ("STRING", None), "a/y": ("STRING", None)})
    messages(r, "s")
    assert r.unsubscribe("s", broad) == [broad]
    assert summary(r, "s") == [("unsub", "a/y", "REQUESTED")]
    assert sorted(t.path for t in r.cache) == ["a/x"]
    assert r.unsubscribe("s", broad) == []


def test_removed_topics_unsubscribe_with_reason() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel("?a/.*"))
    feed_snapshot(r, regs, {"a/x": ("STRING", None)})
    messages(r, "s")
    r.on_events([Removed("a/x")])
    assert summary(r, "s") == [("unsub", "a/x", "REMOVED")]
    assert len(r.cache) == 0


def test_conflation_always() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel(">t"))
    token = regs[0][1]
    r.on_events([Snapshot(token, "t", "INT64", [["CONFLATION", "always"]], cb(0)), End(token)])
    r.on_events([Changed("t", cb(i)) for i in range(1, 6)])
    assert summary(r, "s") == [("sub", "t", 0), ("val", "t", 5)]


def test_unsubscribe_policy_under_backpressure_until_resubscribe() -> None:
    r = SessionRegistry(queue_limit=100, backpressure=2)
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel(">t"))
    token = regs[0][1]
    r.on_events([Snapshot(token, "t", "INT64", [["CONFLATION", "unsubscribe"]], cb(0)), End(token)])
    r.on_events([Changed("t", cb(i)) for i in range(1, 5)])
    assert summary(r, "s") == [("sub", "t", 0), ("unsub", "t", "BACK_PRESSURE")]
    r.on_events([Changed("t", cb(9))])
    assert summary(r, "s") == []
    r.subscribe("s", sel(">t"))
    assert summary(r, "s") == [("sub", "t", 9)]


def test_overflow_marks_the_session_for_closing() -> None:
    r = SessionRegistry(queue_limit=3, backpressure=1)
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel(">t"))
    token = regs[0][1]
    r.on_events([Snapshot(token, "t", "INT64", [["CONFLATION", "off"]], None), End(token)])
    r.on_events([Changed("t", cb(i)) for i in range(5)])
    closing = r.take_closing()
    assert list(closing) == ["s"] and closing["s"][0] == "QUEUE_LIMIT"


def test_close_session_releases_registrations() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    r.open("s2", "", {})
    a, b = sel("?a/.*"), sel(">b")
    r.subscribe("s1", a)
    r.subscribe("s2", a)
    r.subscribe("s1", b)
    assert r.close("s1") == [b]
    assert r.close("s2") == [a]
    assert r.close("s2") == []
    assert r.interest == {} and r.groups == {}


def test_dont_retain_value_topics_are_not_cached_with_values() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    r.open("s2", "", {})
    regs, _ = r.subscribe("s1", sel(">t"))
    token = regs[0][1]
    r.on_events([Snapshot(token, "t", "STRING", [["DONT_RETAIN_VALUE", "true"]], None), End(token),
                 Changed("t", cb("x"))])
    assert summary(r, "s1") == [("sub", "t", None), ("val", "t", "x")]
    r.subscribe("s2", sel(">t"))
    assert summary(r, "s2") == [("sub", "t", None)]


def test_events_for_topics_nobody_watches_are_ignored() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    r.on_events([Added("zzz", "STRING", [], None), Changed("zzz", cb("1")), Removed("zzz"), End(99)])
    assert len(r.cache) == 0 and r.take_dirty() == set()


# -- session trees ------------------------------------------------------------------

PRICES = BranchMappingTable.of(
    "market/prices",
    [
        ("USER_TIER is '1' or $Country is 'DE'", "backend/discounted_prices"),
        ("USER_TIER is '2'", "backend/standard_prices"),
        ("$Principal is ''", "backend/delayed_prices"),
    ],
)
BACKEND = {
    "backend/discounted_prices/fish/cod": ("DOUBLE", 1.0),
    "backend/standard_prices/fish/cod": ("DOUBLE", 2.0),
    "backend/delayed_prices/fish/cod": ("DOUBLE", 3.0),
    "market/prices/fish/cod": ("DOUBLE", 9.0),
}


def tree_registry() -> SessionRegistry:
    return SessionRegistry(trees=SessionTrees().put(PRICES))


def test_sessions_see_their_branch_at_the_same_session_path() -> None:
    r = tree_registry()
    r.open("t1", "alice", {"$Principal": "alice", "USER_TIER": "1"})
    r.open("t2", "bob", {"$Principal": "bob", "USER_TIER": "2"})
    r.open("anon", "", {"$Principal": ""})
    r.open("other", "carol", {"$Principal": "carol", "USER_TIER": "3"})
    for sid in ("t1", "t2", "anon", "other"):
        regs, _ = r.subscribe(sid, sel(">market/prices/fish/cod"))
        feed_snapshot(r, regs, BACKEND)
    got = {sid: summary(r, sid) for sid in ("t1", "t2", "anon", "other")}
    assert got == {
        "t1": [("sub", "market/prices/fish/cod", 1.0)],
        "t2": [("sub", "market/prices/fish/cod", 2.0)],
        "anon": [("sub", "market/prices/fish/cod", 3.0)],
        "other": [("sub", "market/prices/fish/cod", 9.0)],  # no mapping applies: identity
    }
    assert len(r.groups) == 4


def test_table_change_re_evaluates_without_the_client() -> None:
    r = SessionRegistry()
    r.open("s", "bob", {"USER_TIER": "2"})
    regs, _ = r.subscribe("s", sel(">market/prices/fish/cod"))
    feed_snapshot(r, regs, BACKEND)
    assert summary(r, "s") == [("sub", "market/prices/fish/cod", 9.0)]
    regs, unregs = r.set_trees(SessionTrees().put(PRICES))
    feed_snapshot(r, regs, BACKEND)
    out = summary(r, "s")
    assert out == [("unsub", "market/prices/fish/cod", "BRANCH_MAPPINGS"), ("sub", "market/prices/fish/cod", 2.0)]
    assert [str(u) for u in unregs] == [">market/prices/fish/cod"]


def test_property_change_re_evaluates_one_session() -> None:
    r = tree_registry()
    r.open("s", "bob", {"USER_TIER": "2"})
    r.open("other", "eve", {"USER_TIER": "2"})
    for sid in ("s", "other"):
        feed_snapshot(r, r.subscribe(sid, sel("?market/prices//"))[0], BACKEND)
    messages(r, "s"), messages(r, "other")
    regs, _ = r.set_properties("s", {"USER_TIER": "1"})
    feed_snapshot(r, regs, BACKEND)
    assert summary(r, "s") == [("unsub", "market/prices/fish/cod", "BRANCH_MAPPINGS"),
                               ("sub", "market/prices/fish/cod", 1.0)]
    assert summary(r, "other") == []


def test_topics_appearing_under_a_mapped_branch_are_delivered() -> None:
    r = tree_registry()
    r.open("s", "bob", {"USER_TIER": "2"})
    regs, _ = r.subscribe("s", sel("?market/prices//"))
    feed_snapshot(r, regs, {})
    topic_selectors = {str(s) for s, _ in regs}
    assert topic_selectors == {"?backend/standard_prices//"}
    r.on_events([Added("backend/standard_prices/veg/leek", "DOUBLE", [], cb(4.0))])
    r.on_events([Added("backend/discounted_prices/veg/leek", "DOUBLE", [], cb(3.0))])  # not this tier's
    assert summary(r, "s") == [("sub", "market/prices/veg/leek", 4.0)]
    r.on_events([Removed("backend/standard_prices/veg/leek")])
    assert summary(r, "s") == [("unsub", "market/prices/veg/leek", "REMOVED")]


def test_ten_thousand_sessions_share_ten_groups() -> None:
    r = tree_registry()
    for i in range(1000):
        r.open(f"s{i}", "", {"USER_TIER": str(i % 10), "$Principal": "p"})
    assert len(r.groups) == 10


# -- permissions ---------------------------------------------------------------------


def secured(store: SecurityStore) -> SessionRegistry:
    return SessionRegistry(security=store)


def test_select_topic_is_needed_on_the_selector_prefix() -> None:
    store = default_store("adminpassword").apply(
        [["set_path_permissions", "ANONYMOUS", "secret", ["READ_TOPIC"]]]
    )
    r = secured(store)
    r.open("s", "", {}, store.anonymous_roles)
    with pytest.raises(PermissionDenied, match="SELECT_TOPIC is needed on 'secret/x'"):
        r.subscribe("s", sel("?secret/x/.*"))
    r.subscribe("s", sel("?open/.*"))


def test_read_topic_filters_topics_and_follows_permission_changes() -> None:
    store = default_store("adminpassword").apply(
        [["set_path_permissions", "ANONYMOUS", "a/hidden", ["SELECT_TOPIC"]]]
    )
    r = secured(store)
    r.open("s", "", {}, store.anonymous_roles)
    regs, _ = r.subscribe("s", sel("?a//"))
    feed_snapshot(r, regs, {"a/open": ("STRING", "o"), "a/hidden": ("STRING", "h"), "a/hidden/deep": ("STRING", "d")})
    assert sorted(summary(r, "s")) == [("sub", "a/open", "o")]
    r.set_security(store.apply([["remove_path_permissions", "ANONYMOUS", "a/hidden"]]))
    assert sorted(summary(r, "s")) == [("sub", "a/hidden", "h"), ("sub", "a/hidden/deep", "d")]
    r.set_security(r.security.apply([["set_default_path_permissions", "ANONYMOUS", ["SELECT_TOPIC"]]]))
    assert sorted(x[0] + x[2] for x in summary(r, "s")) == ["unsubAUTHORIZATION"] * 3


def test_a_topics_owner_reads_it_whatever_its_roles_and_others_do_not() -> None:
    store = default_store("adminpassword").apply(
        [["set_path_permissions", "ANONYMOUS", "o", ["SELECT_TOPIC"]]]  # select, but read nothing
    )
    r = secured(store)
    r.open("fred", "fred", {}, store.anonymous_roles)
    r.open("ann", "ann", {}, store.anonymous_roles)
    regs, _ = r.subscribe("fred", sel("?o//"))
    r.subscribe("ann", sel("?o//"))
    owned = [["OWNER", "$Principal is 'fred'"]]
    feed = [Snapshot(t, "o/mine", "STRING", owned, cb("m")) for _, t in regs] + [
        Snapshot(t, "o/other", "STRING", [], cb("x")) for _, t in regs] + [End(t) for _, t in regs]
    r.on_events(feed)
    assert summary(r, "fred") == [("sub", "o/mine", "m")] and summary(r, "ann") == []
    r.on_events([Added("o/later", "STRING", owned, cb("l")), Changed("o/mine", cb("m2"))])
    assert summary(r, "fred") == [("sub", "o/later", "l"), ("val", "o/mine", "m2")] and summary(r, "ann") == []
    assert r.visible("fred", sel("?o//"), "o/mine") == ["o/mine"] and r.visible("ann", sel("?o//"), "o/mine") == []
    # a later subscription and a change of the security store keep the owner's topics
    r.open("fred2", "fred", {}, store.anonymous_roles)
    r.subscribe("fred2", sel(">o/mine"))
    assert summary(r, "fred2") == [("sub", "o/mine", "m2")]
    r.set_security(store.apply([["set_default_path_permissions", "ANONYMOUS", ["SELECT_TOPIC"]]]))
    assert summary(r, "fred") == [] and summary(r, "fred2") == []
    r.on_events([Removed("o/mine")])
    assert summary(r, "fred") == [("unsub", "o/mine", "REMOVED")]
    assert not r.owns("fred", "o/mine")


# -- a new connection for a session: refresh -----------------------------------------------------


def test_refresh_drops_what_was_queued_and_reannounces_every_view_with_its_current_value() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel("?a//"))
    feed_snapshot(r, regs, {"a/x": ("INT64", 1), "a/y": ("STRING", None)})
    announced = {m.path: m.alias for m in messages(r, "s") if isinstance(m, Subscribed)}
    r.on_events([Changed("a/x", cb(2)), Changed("a/x", cb(3)), Removed("a/y")])
    r.send("s", b"an answer the dead connection never delivered")
    assert r.refresh("s") == 1
    again = messages(r, "s")
    assert again == [Subscribed(announced["a/x"], "a/x", "INT64", [], cb(3))]  # same alias, the current value
    assert "s" in r.take_dirty()
    r.on_events([Changed("a/x", cb(4))])  # and it goes on as before
    assert messages(r, "s") == [Update(announced["a/x"], cb(4))]


def test_refresh_follows_a_time_series_subscription_with_its_window() -> None:
    from topics.protocol import Appended
    from topics.timeseries import Event

    r = SessionRegistry()
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel(">ts"))
    token = regs[0][1]
    props = [["TIME_SERIES_EVENT_VALUE_TYPE", "INT64"]]
    r.on_events([Snapshot(token, "ts", "TIME_SERIES", props, None), End(token)])
    r.on_events([Appended("ts", Event(i, 1000 + i, "me", cb(i))) for i in range(3)])
    messages(r, "s")
    count = r.refresh("s")
    kinds = [type(m).__name__ for m in messages(r, "s")]
    assert kinds[0] == "Subscribed" and set(kinds[1:]) == {"SeriesUpdate"} and len(kinds) == count >= 2


def test_a_session_unknown_or_over_its_budget_cannot_be_refreshed() -> None:
    r = SessionRegistry(queue_limit=3, backpressure=1)
    assert r.refresh("nobody") is None
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel(">t"))
    token = regs[0][1]
    r.on_events([Snapshot(token, "t", "INT64", [["CONFLATION", "off"]], None), End(token)])
    r.on_events([Changed("t", cb(i)) for i in range(5)])  # nobody reads: over the limit
    assert r.refresh("s") is None
    assert list(r.take_closing()) == ["s"]


def test_a_snapshot_again_delivers_a_value_the_gateway_missed_and_only_that() -> None:
    """After a partition's failover the link registers again; a topic's snapshot whose value
    differs from the cached one is a write whose event never came: subscribers get it."""
    r = SessionRegistry()
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel(">t"))
    token = regs[0][1]
    r.on_events([Snapshot(token, "t", "INT64", [], cb(1)), End(token)])
    r.on_events([Snapshot(token, "t", "INT64", [], cb(1)), End(token)])  # nothing missed: nothing new
    r.on_events([Snapshot(token, "t", "INT64", [], cb(2)), End(token)])  # missed: delivered
    assert summary(r, "s") == [("sub", "t", 1), ("val", "t", 2)]
    assert r.cache.get("t").value == cb(2)  # type: ignore[union-attr]


# -- a session taken up elsewhere: marks, hold, replay -----------------------------------------


def test_deliveries_carry_the_mark_their_partition_events_came_with() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    regs, _ = r.subscribe("s1", sel("?a/.*"))
    feed_snapshot(r, regs, {"a/x": ("INT64", 0)})
    messages(r, "s1")
    r.set_mark(2, 700)
    r.on_events([Changed("a/x", cb(1))])
    r.set_mark(2, 701)
    r.on_events([Changed("a/x", cb(2), False)])
    assert [(cbor2.loads(m.value), m.retained, m.mark) for m in messages(r, "s1")] == [(1, True, (2, 700)),
                                                                                       (2, False, (2, 701))]


def test_a_held_session_gets_a_partition_messages_only_from_its_replay_then_live_again() -> None:
    r = SessionRegistry()
    for sid in ("held", "other"):
        r.open(sid, "", {})
    regs, _ = r.subscribe("held", sel("?a/.*"))
    r.subscribe("other", sel("?a/.*"))
    feed_snapshot(r, regs, {"a/x": ("INT64", 0), "a/y": ("INT64", 0)})
    messages(r, "held"), messages(r, "other")
    r.hold("held", {1})
    r.set_mark(1, 10)
    r.on_events([Changed("a/x", cb(1))])  # partition 1: not for the held session
    r.set_mark(0, 50)
    r.on_events([Changed("a/y", cb(7))])  # partition 0 is not held
    assert [cbor2.loads(m.value) for m in messages(r, "held")] == [7]
    assert [cbor2.loads(m.value) for m in messages(r, "other")] == [1, 7]
    # its replay: the messages it missed, in order, a publish not retained as it was, nothing else
    assert r.replay("held", [Changed("a/x", cb(1)), Changed("b/z", cb(9)), Changed("a/x", cb(2), False)], (1, 9)) == 2
    assert r.finish("held", 1, {"a/x"}, (1, 11)) == 0  # it had views before the hold: nothing withheld
    r.set_mark(1, 12)
    r.on_events([Changed("a/x", cb(3))])
    got = [(cbor2.loads(m.value), m.retained, m.mark) for m in messages(r, "held")]
    assert got == [(1, True, (1, 9)), (2, False, (1, 9)), (3, True, (1, 12))]
    assert r.replay("gone", [Changed("a/x", cb(4))], (1, 12)) == 0
    r.hold("held", {0})
    r.close("held")
    assert not r._held and not r._held_by


def test_a_held_session_subscribing_gets_values_only_after_what_it_missed() -> None:
    """Subscribed while held: no current value then (it would come before older messages);
    at the end, the topics its replay had nothing for get their current values, and on a gap
    every topic of the partition does."""
    partitions = {"a/x": 1, "a/y": 1, "a/z": 0}
    r = SessionRegistry(partition_of=lambda path: partitions.get(path, 0))
    r.open("other", "", {})
    regs, _ = r.subscribe("other", sel("?a/.*"))
    feed_snapshot(r, regs, {"a/x": ("INT64", 1), "a/y": ("INT64", 2), "a/z": ("INT64", 3)})
    r.open("held", "", {})
    r.hold("held", {1})
    r.subscribe("held", sel("?a/.*"))  # served from the cache
    assert sorted(summary(r, "held")) == [("sub", "a/x", None), ("sub", "a/y", None), ("sub", "a/z", 3)]
    r.set_mark(1, 20)
    r.on_events([Changed("a/x", cb(5))])  # held: not delivered live, the replay has it
    assert summary(r, "held") == []
    r.replay("held", [Changed("a/x", cb(4)), Changed("a/x", cb(5))], (1, 10))
    assert r.finish("held", 1, {"a/x"}, (1, 21)) == 1  # a/y had no message: its current value
    assert summary(r, "held") == [("val", "a/x", 4), ("val", "a/x", 5), ("val", "a/y", 2)]
    r.hold("held", {1})
    assert r.finish("held", 1, None, (1, 22)) == 2  # a gap: every topic of the partition, current
    assert sorted(summary(r, "held")) == [("val", "a/x", 5), ("val", "a/y", 2)]


# -- TIDY_ON_UNSUBSCRIBE and PRIORITY ---------------------------------------------------------


def _two_topics(r: SessionRegistry, properties: dict[str, list[list[str]]]) -> None:
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel("?t/"))
    token = regs[0][1]
    r.on_events([Snapshot(token, path, "INT64", props, cb(0)) for path, props in properties.items()] + [End(token)])
    messages(r, "s")


@pytest.mark.parametrize("tidy, kept", [("true", []), ("false", [("val", "t/a", 1), ("val", "t/a", 2)])])
def test_tidy_on_unsubscribe_drops_what_is_still_queued_for_the_topic(tidy: str, kept: list[Any]) -> None:
    r = SessionRegistry()
    _two_topics(r, {"t/a": [["CONFLATION", "off"], ["TIDY_ON_UNSUBSCRIBE", tidy]], "t/b": []})
    r.on_events([Changed("t/a", cb(1)), Changed("t/b", cb(1)), Changed("t/a", cb(2))])
    r.unsubscribe("s", sel("?t/"))
    assert summary(r, "s") == [
        *kept[:1], ("val", "t/b", 1), *kept[1:], ("unsub", "t/a", "REQUESTED"), ("unsub", "t/b", "REQUESTED"),
    ]


def test_tidy_on_unsubscribe_applies_when_the_topic_is_removed_or_the_session_loses_it() -> None:
    r = SessionRegistry()
    _two_topics(r, {"t/a": [["TIDY_ON_UNSUBSCRIBE", "true"]], "t/b": [["TIDY_ON_UNSUBSCRIBE", "true"]]})
    r.on_events([Changed("t/a", cb(1)), Changed("t/b", cb(1)), Removed("t/a")])
    assert summary(r, "s") == [("val", "t/b", 1), ("unsub", "t/a", "REMOVED")]


def test_a_resubscription_after_an_untidy_unsubscription_keeps_the_order() -> None:
    r = SessionRegistry(backpressure=1)
    _two_topics(r, {"t/a": [["CONFLATION", "always"]]})
    r.open("o", "", {})
    r.subscribe("o", sel("?t/"))  # keeps the topic and its view (so its alias) at this gateway
    r.on_events([Changed("t/a", cb(1))])
    r.unsubscribe("s", sel("?t/"))
    r.subscribe("s", sel("?t/"))
    r.on_events([Changed("t/a", cb(2))])
    assert summary(r, "s") == [
        ("val", "t/a", 1), ("unsub", "t/a", "REQUESTED"), ("sub", "t/a", 1), ("val", "t/a", 2),
    ]


def test_priority_orders_a_backlog_and_a_topics_subscription_comes_before_its_values() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    regs, _ = r.subscribe("s", sel("?t/"))
    token = regs[0][1]
    r.on_events([
        Snapshot(token, "t/low", "INT64", [["PRIORITY", "low"]], cb(0)),
        Snapshot(token, "t/mid", "INT64", [], cb(0)),
        Snapshot(token, "t/high", "INT64", [["PRIORITY", "high"]], cb(0)),
        End(token),
        Changed("t/low", cb(1)), Changed("t/mid", cb(1)), Changed("t/high", cb(1)),
    ])
    assert summary(r, "s") == [
        ("sub", "t/high", 0), ("val", "t/high", 1),
        ("sub", "t/mid", 0), ("val", "t/mid", 1),
        ("sub", "t/low", 0), ("val", "t/low", 1),
    ]
    r.on_events([Changed("t/low", cb(2)), Removed("t/high")])
    r.send("s", "answer")
    assert summary(r, "s") == [("unsub", "t/high", "REMOVED"), ("str",), ("val", "t/low", 2)]
