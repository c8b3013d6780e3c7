"""The pure parts of fan-out: connection definitions and the mirror's claims."""

from __future__ import annotations

import pytest

from fanout.config import FanoutConfigError, FanoutConnection, from_tables
from fanout.mirror import FANOUT_BASE, Mirror, claim_name, overlapping, precedence
from topics.protocol import Changed, RefDrop, RefDropView, RefEvent, RefPut, Register, decode_operation, encode_operation
from topics.specification import TopicSpecification
from topics.store import TopicStore
from topics.errors import ReferenceTopicError
from topics.types import TopicType, encode


def test_a_definition_from_a_toml_table_and_back() -> None:
    [c] = from_tables({"main": {"primaries": "ws://p:8080", "links": ["?A//"], "principal": "f",
                                "password": "pw-123456", "retry_delay": 2, "reconnect_timeout": 0}})
    assert c == FanoutConnection("main", ("ws://p:8080",), ("?A//",), "f", "pw-123456", 2.0, 0.0)
    assert FanoutConnection.from_dict(c.to_dict()) == c
    assert "password" not in c.shown()


@pytest.mark.parametrize("table, message", [
    ({"links": ["?A//"]}, "primaries must be a non-empty list"),
    ({"primaries": ["http://p"], "links": ["?A//"]}, "not a ws:// or wss:// URL"),
    ({"primaries": ["ws://p"], "links": []}, "links must be a non-empty list"),
    ({"primaries": ["ws://p"], "links": ["?A/("]}, "is not a selector"),
    ({"primaries": ["ws://p"], "links": ["*.*"]}, "no path prefix"),
    ({"primaries": ["ws://p"], "links": ["A"], "principal": "x"}, "together"),
    ({"primaries": ["ws://p"], "links": ["A"], "retry_delay": 0}, "retry_delay must be a number"),
    ({"primaries": ["ws://p"], "links": ["A"], "retry_delay": True}, "retry_delay must be a number"),
    ({"primaries": ["ws://p"], "links": ["A"], "colour": "red"}, "unknown key(s) colour"),
])
def test_bad_definitions_say_what_and_where(table: dict[str, object], message: str) -> None:
    with pytest.raises(FanoutConfigError, match="fan-out connection 'main'") as info:
        FanoutConnection.from_dict(table, "main")
    assert message in str(info.value)


def test_bad_names_and_tables() -> None:
    with pytest.raises(FanoutConfigError, match="a name is"):
        FanoutConnection.from_dict({"primaries": ["ws://p"], "links": ["A"]}, "bad name")
    with pytest.raises(FanoutConfigError, match=r"\[fanout.x\]"):
        from_tables({"x": 5})
    with pytest.raises(FanoutConfigError, match="table of connections"):
        from_tables([1])


def test_fanout_claims_win_over_every_view_and_are_read_only() -> None:
    store = TopicStore()
    mirror = Mirror(precedence(0), claim_name("main", "?A//"))
    spec = TopicSpecification.of("STRING")
    store.ref_put(*RefPut("A/B", 0, "a view", "STRING", None, encode(TopicType.STRING, "from the view")))
    store.ref_put(*mirror.announced("A/B", spec, "replica"))
    assert store.tree.get("A/B").value == encode(TopicType.STRING, "replica")
    with pytest.raises(ReferenceTopicError, match="replica of a primary's topic"):
        store._writable("A/B")
    store.ref_put(*mirror.value("A/B", "newer"))
    assert store.tree.get("A/B").value == encode(TopicType.STRING, "newer")
    drop = mirror.removed("A/B")
    assert drop == RefDrop("A/B", FANOUT_BASE)
    store.ref_drop(*drop)
    assert store.tree.get("A/B").value == encode(TopicType.STRING, "from the view")  # the view has it again
    assert mirror.removed("A/B") is None and mirror.value("A/B", "x") is None


def test_time_series_events_and_clearing() -> None:
    mirror = Mirror(precedence(3), "m")
    spec = TopicSpecification.of("TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64"})
    put = mirror.announced("ts", spec, None)
    assert put.value is None and put.precedence == FANOUT_BASE + 3
    event = mirror.value("ts", 5, (5, 1000, "alice"))
    assert event is not None and event.event == RefEvent(encode(TopicType.INT64, 5), 1000, "alice")
    assert mirror.clear() == RefDropView(FANOUT_BASE + 3) and mirror.topics == {}
    with pytest.raises(ValueError):
        precedence(-1)


def test_overlapping_links_are_found_by_path_prefix() -> None:
    assert overlapping({"a": ["A"], "b": ["A/B"], "c": ["C"]}) == [("a", "b", "A")]
    assert overlapping({"a": ["A/B"], "b": ["A/C"]}) == []


def test_missing_topic_propagation_conditions_2_and_3() -> None:
    from fanout.mirror import crosses, propagates
    from topics.selectors import parse_selector as sel

    links = [sel("?A//")]
    assert crosses(sel("A/D"), links[0]) and crosses(sel("?A/D//"), links[0])
    assert crosses(sel("*.*"), links[0]) is False  # no prefix... nothing but the root
    assert crosses(sel("?Q/L//"), sel(">Q")) and crosses(sel("?Q//"), sel("?Q/L//"))
    assert not crosses(sel("B/x"), links[0])
    # condition 2: the selector must intersect a link
    assert propagates(sel("A/D"), links, []) and not propagates(sel("B/x"), links, [])
    # condition 3: a replica matching both the selector and a crossing link stops it
    assert not propagates(sel("?A//"), links, ["A/B"])
    assert propagates(sel("?A/C//"), links, ["A/B"])  # the replica does not match the selector
    assert not propagates(sel("A/X2"), [sel("?A//")], ["A/X2"])  # whoever holds the replica
    assert propagates(sel("?A//"), [sel("?A/L//")], ["A/Z"])  # a replica outside the link does not count


def test_a_restarted_partition_gets_the_last_claim_again() -> None:
    mirror = Mirror(precedence(0), "m")
    spec = TopicSpecification.of("STRING")
    mirror.announced("p", spec, "first")
    mirror.value("p", "second")
    again = mirror.reclaim("p")
    assert again is not None and again.value == encode(TopicType.STRING, "second")
    mirror.removed("p")
    assert mirror.reclaim("p") is None and mirror.values == {}


def test_the_store_tells_a_link_that_another_link_claims_its_path() -> None:
    store = TopicStore()
    first, second = Mirror(precedence(0), "first"), Mirror(precedence(1), "second")
    spec = TopicSpecification.of("STRING")
    assert store.ref_put(*first.announced("x", spec, "one")) is False
    assert store.ref_put(*second.announced("x", spec, "two")) is True
    assert store.tree.get("x").value == encode(TopicType.STRING, "one")  # the first configured holds it
    assert store.ref_put(*RefPut("x", 5, "a view", "STRING", None, None)) is False  # views are not told


def test_a_value_not_retained_is_passed_to_the_replica_s_subscribers_without_becoming_its_value() -> None:
    """An MQTT publish without RETAIN on the primary reaches the secondary's subscribers as a
    change not retained; the replica keeps the value it had, as the primary's topic does."""
    store = TopicStore()
    mirror, other = Mirror(precedence(0), "m"), Mirror(precedence(1), "other")
    spec = TopicSpecification.of("STRING")
    store.apply("g", [Register(">p", 1)])
    store.ref_put(*mirror.announced("p", spec, "kept"))
    store.drain_events()
    passing = mirror.value("p", "passing", retained=False)
    assert passing is not None and passing.retain is False
    assert decode_operation(encode_operation(passing)) == passing  # it crosses the partition link as it is
    store.apply("link", [passing])
    assert store.drain_events() == {"g": [Changed("p", encode(TopicType.STRING, "passing"), False)]}
    assert store.tree.get("p").value == encode(TopicType.STRING, "kept")  # type: ignore[union-attr]
    assert mirror.reclaim("p").value == encode(TopicType.STRING, "kept")  # type: ignore[union-attr]
    # a link whose claim does not hold the path is not heard
    other.announced("p", spec, "theirs")
    store.apply("link", [other.value("p", "not mine", retained=False)])
    assert store.drain_events() == {}
