"""Metric collector definitions and a gateway's session counts (sessions/collectors.py)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions.collectors import (
    MAX_COLLECTORS,
    MAX_GROUPS,
    OTHER,
    CollectorError,
    Collectors,
    SessionCollector,
    SessionMetrics,
    TopicCollector,
    from_dict,
    label_name,
)

PROMETHEUS_LABEL = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")


def session(name: str, filter_: str = "all", group_by: list[str] | None = None, remove: bool = False) -> SessionCollector:
    made = from_dict({"kind": "session", "name": name, "filter": filter_, "group_by": group_by or [],
                      "remove_metrics_with_no_matches": remove})
    assert isinstance(made, SessionCollector)
    return made


@given(st.text(min_size=1, max_size=40))
def test_every_property_name_becomes_a_prometheus_label_name_of_its_own(name: str) -> None:
    label = label_name(name)
    assert PROMETHEUS_LABEL.fullmatch(label) and not label.startswith("__"), label


@pytest.mark.parametrize("name, label", [("$Principal", "_Principal"), ("user-tier", "user_tier"), ("9lives", "_9lives"),
                                         ("__x", "_x"), ("Department", "Department"), ("a.b c", "a_b_c")])
def test_sanitising_property_names(name: str, label: str) -> None:
    assert label_name(name) == label


def test_definitions_round_trip_through_their_maps() -> None:
    topic = from_dict({"kind": "topic", "name": "prices", "selector": "?prices//", "group_by_type": True})
    assert topic == TopicCollector("prices", "?prices//", True)
    grouped = session("by-tier", "Tier is '1' or $Principal is 'admin'", ["Tier", "$Principal"], True)
    assert grouped.labels == ("Tier", "_Principal")
    for collector in (topic, grouped):
        assert from_dict(collector.to_dict()) == collector
    wire = Collectors((topic, grouped)).to_wire()
    assert Collectors.from_wire(wire).items == (topic, grouped)


@pytest.mark.parametrize("definition, says", [
    ("not a map", "is a map"),
    ({"kind": "gauge", "name": "x"}, "kind must be 'topic' or 'session'"),
    ({"kind": "topic", "name": "-bad", "selector": ">a"}, "a name is 1-64"),
    ({"kind": "topic", "name": "x" * 65, "selector": ">a"}, "a name is 1-64"),
    ({"kind": "topic", "name": "t", "selector": "?a//b"}, "is not a topic selector"),
    ({"kind": "topic", "name": "t", "selector": ""}, "selector must be a non-empty string"),
    ({"kind": "topic", "name": "t", "selector": ">a", "group_by_type": "yes"}, "group_by_type must be true or false"),
    ({"kind": "topic", "name": "t", "selector": ">a", "filter": "all"}, "unknown key(s) filter"),
    ({"kind": "session", "name": "s", "filter": "Tier is"}, "invalid session filter"),
    ({"kind": "session", "name": "s", "filter": "all", "group_by": "Tier"}, "group_by must be a list"),
    ({"kind": "session", "name": "s", "filter": "all", "group_by": ["a-b", "a_b"]}, "both exported as label 'a_b'"),
    ({"kind": "session", "name": "s", "filter": "all", "group_by": ["collector"]}, "the collector's own"),
    ({"kind": "session", "name": "s", "filter": "all", "group_by": [f"p{i}" for i in range(11)]}, "at most 10"),
    ({"kind": "session", "name": "s", "filter": "x" * 5000}, "at most 4,096"),
])
def test_bad_definitions_are_refused_naming_what_is_wrong(definition: object, says: str) -> None:
    with pytest.raises(CollectorError) as refused:
        from_dict(definition)
    assert says in str(refused.value) and refused.value.code == "INVALID_COLLECTOR"


def test_put_replaces_by_name_and_the_count_is_bounded() -> None:
    collectors = Collectors()
    for i in range(MAX_COLLECTORS):
        collectors, replaced = collectors.put(TopicCollector(f"c{i}", ">a"))
        assert not replaced
    collectors, replaced = collectors.put(TopicCollector("c5", ">b", True))
    assert replaced and collectors.items[5] == TopicCollector("c5", ">b", True)
    with pytest.raises(CollectorError, match=f"at most {MAX_COLLECTORS} metric collectors"):
        collectors.put(TopicCollector("one-more", ">a"))
    fewer = collectors.remove("c5")
    assert fewer is not None and len(fewer.items) == MAX_COLLECTORS - 1 and collectors.remove("none") is None
    assert [c.name for c in fewer.topics][:5] == ["c0", "c1", "c2", "c3", "c4"] and fewer.sessions == []


def props(tier: str | None, principal: str = "u") -> dict[str, str]:
    return {"$Principal": principal, **({"Tier": tier} if tier is not None else {})}


NONE: frozenset[str] = frozenset()


def test_sessions_are_counted_per_group_and_a_seen_group_keeps_its_series() -> None:
    metrics = SessionMetrics()
    metrics.set([session("tiers", "$Principal is 'u'", ["Tier"]), session("everyone")])
    for tier in ("1", "1", "2", None):
        metrics.opened(props(tier), NONE)
    metrics.opened(props("1", "other"), NONE)
    metrics.closed(props("2"), NONE)
    open_now = [(props("1"), NONE), (props("1"), NONE), (props(None), NONE), (props("1", "other"), NONE)]
    (tiers, rows), (everyone, totals) = metrics.figures(open_now)
    assert tiers.name == "tiers" and rows == [(("",), 1, 1, 0), (("1",), 2, 2, 0), (("2",), 0, 1, 1)]
    assert everyone.name == "everyone" and totals == [((), 4, 5, 1)]


def test_removing_metrics_with_no_matches_drops_empty_groups_and_their_counts() -> None:
    metrics = SessionMetrics()
    metrics.set([session("tiers", "all", ["Tier"], remove=True), session("nobody", "Tier is 'x'", remove=True)])
    metrics.opened(props("1"), NONE)
    metrics.opened(props("2"), NONE)
    metrics.closed(props("2"), NONE)
    (_, rows), (_, nobody) = metrics.figures([(props("1"), NONE)])
    assert rows == [(("1",), 1, 1, 0)] and nobody == []
    metrics.opened(props("2"), NONE)  # a group that comes back counts afresh
    (_, rows), _ = metrics.figures([(props("1"), NONE), (props("2"), NONE)])
    assert rows == [(("1",), 1, 1, 0), (("2",), 1, 1, 0)]


def test_groups_beyond_the_bound_are_counted_together() -> None:
    metrics = SessionMetrics()
    metrics.set([session("ids", "all", ["Id"])])
    open_now = [({"Id": str(i)}, NONE) for i in range(MAX_GROUPS + 5)]
    ((_, rows),) = metrics.figures(open_now)
    assert len(rows) == MAX_GROUPS + 1 and rows[-1] == ((OTHER,), 5, 0, 0)


def test_a_changed_definition_counts_afresh_and_an_unchanged_one_keeps_its_counts() -> None:
    metrics = SessionMetrics()
    kept, changed = session("kept"), session("changed", "all", ["Tier"])
    metrics.set([kept, changed])
    metrics.opened(props("1"), NONE)
    metrics.set([session("kept"), session("changed", "all", ["$Principal"])])
    (_, kept_rows), (_, changed_rows) = metrics.figures([])
    assert kept_rows == [((), 0, 1, 0)] and changed_rows == []
