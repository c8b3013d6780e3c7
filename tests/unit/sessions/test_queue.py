from __future__ import annotations

import pytest

from sessions.queue import OutboundQueue, Outcome
from topics.properties import Conflation, Priority


def drain(q: OutboundQueue) -> list[bytes]:
    out: list[bytes] = []
    while True:
        batch = q.take(max_bytes=10)
        if not batch:
            return out
        out.extend(batch)


def test_fifo_with_control_messages() -> None:
    q = OutboundQueue(limit=10, backpressure=5)
    q.push_control(b"c1")
    assert q.push_value("t", b"v1", Conflation.OFF) is Outcome.QUEUED
    q.push_control(b"c2")
    assert drain(q) == [b"c1", b"v1", b"c2"]
    assert q.pending_values == 0 and len(q) == 0


def test_off_overflows_at_limit() -> None:
    q = OutboundQueue(limit=3, backpressure=1)
    outcomes = [q.push_value("t", bytes([i]), Conflation.OFF) for i in range(4)]
    assert outcomes == [Outcome.QUEUED] * 3 + [Outcome.OVERFLOW]
    assert drain(q) == [b"\x00", b"\x01", b"\x02"]


def test_conflate_only_under_backpressure() -> None:
    q = OutboundQueue(limit=100, backpressure=2)
    assert q.push_value("a", b"a1", Conflation.CONFLATE) is Outcome.QUEUED
    assert q.push_value("a", b"a2", Conflation.CONFLATE) is Outcome.QUEUED  # 1 pending < 2
    assert q.push_value("a", b"a3", Conflation.CONFLATE) is Outcome.CONFLATED
    assert q.push_value("b", b"b1", Conflation.CONFLATE) is Outcome.QUEUED
    assert drain(q) == [b"a1", b"a3", b"b1"]
    assert q.conflated == 1


def test_always_conflates_in_place_keeping_order() -> None:
    q = OutboundQueue(limit=100, backpressure=50)
    q.push_value("a", b"a1", Conflation.ALWAYS)
    q.push_value("b", b"b1", Conflation.ALWAYS)
    assert q.push_value("a", b"a2", Conflation.ALWAYS) is Outcome.CONFLATED
    assert drain(q) == [b"a2", b"b1"]
    # after the pending value left, the next one is queued afresh
    assert q.push_value("a", b"a3", Conflation.ALWAYS) is Outcome.QUEUED


def test_unsubscribe_under_backpressure() -> None:
    q = OutboundQueue(limit=100, backpressure=2)
    assert q.push_value("a", b"1", Conflation.UNSUBSCRIBE) is Outcome.QUEUED
    assert q.push_value("a", b"2", Conflation.UNSUBSCRIBE) is Outcome.QUEUED
    assert q.push_value("a", b"3", Conflation.UNSUBSCRIBE) is Outcome.UNSUBSCRIBE
    assert q.drop_topic("a") == 2
    assert q.pending_values == 0
    q.push_control(b"unsub")
    assert drain(q) == [b"unsub"]


def test_control_messages_do_not_count_towards_the_limit() -> None:
    q = OutboundQueue(limit=1, backpressure=1)
    for _ in range(50):
        q.push_control(b"c")
    assert q.push_value("t", b"v", Conflation.OFF) is Outcome.QUEUED
    assert not q.under_backpressure or q.pending_values == 1


def test_take_respects_size_but_returns_at_least_one() -> None:
    q = OutboundQueue()
    q.push_control(b"x" * 100)
    q.push_control(b"y")
    assert q.take(max_bytes=10) == [b"x" * 100]
    assert q.take(max_bytes=10) == [b"y"]
    assert q.take() == []


def test_invalid_limits() -> None:
    with pytest.raises(ValueError):
        OutboundQueue(limit=0)


from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

OPS = st.lists(
    st.one_of(
        st.tuples(st.just("value"), st.sampled_from("abc")),
        st.tuples(st.just("control")),
        st.tuples(st.just("drop"), st.sampled_from("abc")),
        st.tuples(st.just("take")),
    ),
    max_size=60,
)


@given(OPS, st.fixed_dictionaries({t: st.sampled_from(list(Conflation)) for t in "abc"}))
def test_counts_stay_true_whatever_happens(ops: list[tuple[object, ...]], policies: dict[str, Conflation]) -> None:
    """A topic has one policy; values of a topic stay in order, conflated into its pending one."""
    q = OutboundQueue(limit=20, backpressure=5)
    live: list[tuple[str, bytes]] = []  # a model of the queued values
    for n, op in enumerate(ops):
        if op[0] == "value":
            topic = op[1]
            outcome = q.push_value(topic, bytes([n]), policies[topic])  # type: ignore[index]
            if outcome is Outcome.QUEUED:
                live.append((topic, bytes([n])))  # type: ignore[arg-type]
            elif outcome is Outcome.CONFLATED:
                i = max(i for i, (t, _) in enumerate(live) if t == topic)
                live[i] = (topic, bytes([n]))  # type: ignore[assignment]
        elif op[0] == "control":
            q.push_control(b"c")
        elif op[0] == "drop":
            assert q.drop_topic(op[1]) == sum(1 for t, _ in live if t == op[1])
            live = [(t, m) for t, m in live if t != op[1]]
        else:
            taken = [m for m in q.take(max_bytes=1_000_000) if m != b"c"]
            assert taken == [m for _, m in live]
            live = []
        assert q.pending_values == len(live)


# -- PRIORITY: lanes -------------------------------------------------------------------------

H, L = Priority.HIGH, Priority.LOW


def test_without_priorities_the_queue_is_one_fifo_lane() -> None:
    q = OutboundQueue(limit=10, backpressure=5)
    q.push_control(b"c", Priority.DEFAULT)
    q.push_value("t", b"v", Conflation.OFF, Priority.DEFAULT)
    assert q._lanes == (q._items,) and q._high is None and q._low is None
    assert drain(q) == [b"c", b"v"]


def test_high_values_leave_before_default_and_default_before_low() -> None:
    q = OutboundQueue(limit=100, backpressure=50)
    q.push_value("l", b"l1", Conflation.OFF, L)
    q.push_value("d", b"d1", Conflation.OFF)
    q.push_value("h", b"h1", Conflation.OFF, H)
    q.push_control(b"answer")
    q.push_value("l", b"l2", Conflation.OFF, L)
    q.push_value("h", b"h2", Conflation.OFF, H)
    assert len(q) == 6 and list(q.messages()) == [b"h1", b"h2", b"d1", b"answer", b"l1", b"l2"]
    assert drain(q) == [b"h1", b"h2", b"d1", b"answer", b"l1", b"l2"]
    assert q.pending_values == 0 and q.bytes == 0 and len(q) == 0


def test_a_topics_notifications_keep_their_place_among_its_values_in_its_lane() -> None:
    q = OutboundQueue(limit=100, backpressure=50)
    q.push_value("d", b"d1", Conflation.OFF)
    q.push_control(b"SUBSCRIBED h", H)
    q.push_value("h", b"h1", Conflation.OFF, H)
    q.push_control(b"UNSUBSCRIBED h", H)
    q.push_control(b"SUBSCRIBED l", L)
    q.push_value("l", b"l1", Conflation.OFF, L)
    assert drain(q) == [b"SUBSCRIBED h", b"h1", b"UNSUBSCRIBED h", b"d1", b"SUBSCRIBED l", b"l1"]


def test_lanes_conflate_drop_and_take_within_the_byte_limit() -> None:
    q = OutboundQueue(limit=100, backpressure=1)
    q.push_value("d", b"d1", Conflation.CONFLATE)
    q.push_value("h", b"h1", Conflation.CONFLATE, H)
    assert q.push_value("h", b"h2", Conflation.CONFLATE, H) is Outcome.CONFLATED
    q.push_value("l", b"l1", Conflation.OFF, L)
    q.push_value("l", b"l2", Conflation.OFF, L)
    assert q.drop_topic("l") == 2 and q.pending_values == 2
    assert q.take(max_bytes=1) == [b"h2"]  # the first message always, then the byte limit
    assert q.take() == [b"d1"] and q.take() == [] and q.bytes == 0


def test_a_sealed_topic_takes_no_later_value_into_what_is_queued() -> None:
    q = OutboundQueue(limit=100, backpressure=1)
    q.push_value("t", b"t1", Conflation.ALWAYS)
    q.seal_topic("t")
    assert q.push_value("t", b"t2", Conflation.ALWAYS) is Outcome.QUEUED
    assert drain(q) == [b"t1", b"t2"]
