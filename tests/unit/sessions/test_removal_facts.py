from __future__ import annotations

import cbor2

from sessions.registry import SessionRegistry
from sessions.removal_facts import gather
from topics.protocol import End, RemovalFacts, RemovalWatch, Snapshot
from topics.selectors import parse_selector


def test_a_report_counts_subscribers_matching_sessions_and_open_creators() -> None:
    r = SessionRegistry()
    r.open("s1", "alice", {"$Principal": "alice", "Department": "Accounts"})
    r.open("s2", "bob", {"$Principal": "bob"})
    r.open("internal", "", {"Department": "Accounts"})
    for sid in ("s1", "s2"):
        regs, _ = r.subscribe(sid, parse_selector("?a//"))
        for selector, token in regs:
            r.on_events([Snapshot(token, "a/x", "INT64", [], cbor2.dumps(1)), End(token)])
    regs, _ = r.subscribe("s1", parse_selector(">a/x"))  # a second selector: still one session
    for selector, token in regs:
        r.on_events([Snapshot(token, "a/x", "INT64", [], cbor2.dumps(1)), End(token)])
    watch = RemovalWatch(7, ["a/x", "a/none"], ['Department is "Accounts"', "all"], ["s2", "gone"], [])
    assert gather(r, watch, internal={"internal"}) == RemovalFacts(
        7, {"a/x": 2, "a/none": 0}, {'Department is "Accounts"': 1, "all": 2}, {"s2": True, "gone": False})
    r.close("s2")
    facts = gather(r, watch, internal={"internal"})
    assert facts.subscriptions["a/x"] == 1 and facts.creators == {"s2": False, "gone": False}


def test_a_filter_the_gateway_cannot_read_stays_unknown() -> None:
    r = SessionRegistry()
    assert gather(r, RemovalWatch(1, [], ["Department is"], [], [])).sessions == {}
