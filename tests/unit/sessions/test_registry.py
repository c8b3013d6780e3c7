from __future__ import annotations

from typing import Any

import cbor2

from canopy import protocol as wire
from sessions.registry import SessionRegistry
from topics.selectors import parse_selector
from topics.store import EV_ADD, EV_END, EV_REMOVE, EV_SNAPSHOT, EV_VALUE


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


def messages(registry: SessionRegistry, sid: str) -> list[Any]:
    out: list[Any] = []
    queue = registry.sessions[sid].queue
    while True:
        batch = queue.take()
        if not batch:
            return out
        out.extend(wire.decode(wire.frame(batch)))


def summary(registry: SessionRegistry, sid: str) -> list[tuple[Any, ...]]:
    out: list[tuple[Any, ...]] = []
    for m in messages(registry, sid):
        if isinstance(m, wire.Subscribed):
            out.append(("sub", m.path, cbor2.loads(m.value) if m.value else None))
        elif isinstance(m, wire.Value):
            out.append(("val", m.alias, cbor2.loads(m.value)))
        elif isinstance(m, wire.Unsubscribed):
            out.append(("unsub", m.alias, m.reason))
        else:
            out.append((type(m).__name__,))
    return out


def test_first_subscription_registers_then_snapshot_makes_it_live() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    sel = parse_selector("?a/.*")
    register, wait = r.subscribe("s1", sel, partitions=2)
    assert register is not None and wait == register
    assert r.take_dirty() == set()
    live = r.on_events([[EV_SNAPSHOT, register, "a/x", "INT64", [], cb(1)], [EV_END, register]])
    assert live == []  # one of two partitions done
    assert summary(r, "s1") == [("sub", "a/x", 1)]
    assert r.on_events([[EV_END, register]]) == [register]
    assert r.is_live(register)
    assert r.take_dirty() == {"s1"}


def test_second_session_is_served_from_the_cache() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    r.open("s2", "", {})
    sel = parse_selector("?a/.*")
    token, _ = r.subscribe("s1", sel, 1)
    r.on_events([[EV_SNAPSHOT, token, "a/x", "STRING", [], cb("v")], [EV_END, token]])
    messages(r, "s1")
    assert r.subscribe("s2", sel, 1) == (None, None)
    assert summary(r, "s2") == [("sub", "a/x", "v")]


def test_values_fan_out_once_encoded() -> None:
    r = SessionRegistry()
    for sid in ("s1", "s2"):
        r.open(sid, "", {})
    sel = parse_selector("?a/.*")
    token, _ = r.subscribe("s1", sel, 1)
    r.subscribe("s2", sel, 1)
    r.on_events([[EV_ADD, "a/x", "STRING", [], None], [EV_END, token], [EV_VALUE, "a/x", cb("1")]])
    one = messages(r, "s1")
    two = messages(r, "s2")
    assert one == two
    assert [type(m).__name__ for m in one] == ["Subscribed", "Value"]


def test_unsubscribe_keeps_topics_still_matched_by_another_selector() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    broad, narrow = parse_selector("?a//"), parse_selector(">a/x")
    t1, _ = r.subscribe("s", broad, 1)
    t2, _ = r.subscribe("s", narrow, 1)
    r.on_events([[EV_SNAPSHOT, t1, "a/x", "STRING", [], None], [EV_SNAPSHOT, t1, "a/y", "STRING", [], None],
                 [EV_END, t1], [EV_SNAPSHOT, t2, "a/x", "STRING", [], None], [EV_END, t2]])
    messages(r, "s")
    assert r.unsubscribe("s", broad) == broad  # last session: unregister
    out = summary(r, "s")
    assert out == [("unsub", 2, "REQUESTED")]
    assert sorted(t.path for t in r.cache) == ["a/x"]
    assert r.unsubscribe("s", broad) is None


def test_removed_topics_unsubscribe_with_reason() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    token, _ = r.subscribe("s", parse_selector("?a/.*"), 1)
    r.on_events([[EV_SNAPSHOT, token, "a/x", "STRING", [], None], [EV_END, token]])
    messages(r, "s")
    r.on_events([[EV_REMOVE, "a/x"]])
    assert summary(r, "s") == [("unsub", 1, "REMOVED")]
    assert len(r.cache) == 0


def test_conflation_always() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    token, _ = r.subscribe("s", parse_selector(">t"), 1)
    r.on_events([[EV_SNAPSHOT, token, "t", "INT64", [["CONFLATION", "always"]], cb(0)], [EV_END, token]])
    r.on_events([[EV_VALUE, "t", cb(i)] for i in range(1, 6)])
    assert summary(r, "s") == [("sub", "t", 0), ("val", 1, 5)]


def test_unsubscribe_policy_under_backpressure_until_resubscribe() -> None:
    r = SessionRegistry(queue_limit=100, backpressure=2)
    r.open("s", "", {})
    sel = parse_selector(">t")
    token, _ = r.subscribe("s", sel, 1)
    r.on_events([[EV_SNAPSHOT, token, "t", "INT64", [["CONFLATION", "unsubscribe"]], cb(0)], [EV_END, token]])
    r.on_events([[EV_VALUE, "t", cb(i)] for i in range(1, 5)])
    assert summary(r, "s") == [("sub", "t", 0), ("unsub", 1, "BACK_PRESSURE")]
    r.on_events([[EV_VALUE, "t", cb(9)]])
    assert summary(r, "s") == []  # stays unsubscribed
    r.subscribe("s", sel, 1)  # subscribing again lifts it
    assert summary(r, "s") == [("sub", "t", 9)]


def test_overflow_marks_the_session_for_closing() -> None:
    r = SessionRegistry(queue_limit=3, backpressure=1)
    r.open("s", "", {})
    token, _ = r.subscribe("s", parse_selector(">t"), 1)
    r.on_events([[EV_SNAPSHOT, token, "t", "INT64", [["CONFLATION", "off"]], None], [EV_END, token]])
    r.on_events([[EV_VALUE, "t", cb(i)] for i in range(5)])
    closing = r.take_closing()
    assert list(closing) == ["s"] and closing["s"][0] == "QUEUE_LIMIT"


def test_close_session_releases_registrations() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    r.open("s2", "", {})
    a, b = parse_selector("?a/.*"), parse_selector(">b")
    r.subscribe("s1", a, 1)
    r.subscribe("s2", a, 1)
    r.subscribe("s1", b, 1)
    assert r.close("s1") == [b]
    assert r.close("s2") == [a]
    assert r.close("s2") == []


def test_dont_retain_value_topics_are_not_cached_with_values() -> None:
    r = SessionRegistry()
    r.open("s1", "", {})
    r.open("s2", "", {})
    sel = parse_selector(">t")
    token, _ = r.subscribe("s1", sel, 1)
    r.on_events([[EV_SNAPSHOT, token, "t", "STRING", [["DONT_RETAIN_VALUE", "true"]], None], [EV_END, token],
                 [EV_VALUE, "t", cb("x")]])
    assert summary(r, "s1") == [("sub", "t", None), ("val", 1, "x")]
    r.subscribe("s2", sel, 1)
    assert summary(r, "s2") == [("sub", "t", None)]


def test_events_for_topics_nobody_watches_are_ignored() -> None:
    r = SessionRegistry()
    r.open("s", "", {})
    r.on_events([[EV_ADD, "zzz", "STRING", [], None], [EV_VALUE, "zzz", cb("1")], [EV_REMOVE, "zzz"], [EV_END, 99]])
    assert len(r.cache) == 0 and r.take_dirty() == set()
