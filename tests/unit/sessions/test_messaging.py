"""Request/response messaging's decisions: handler choice, values, time-outs and bookkeeping."""

from __future__ import annotations

import cbor2
import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions.messaging import (
    Deliveries,
    Delivery,
    HandlerRegistry,
    MessagingError,
    Pending,
    check_response,
    check_value,
    pick,
    property_keys,
    timeout_for,
    value_limit,
    value_type,
)
from topics.errors import PathError


def code_of(call: object, *args: object) -> str:
    with pytest.raises(MessagingError) as caught:
        call(*args)  # type: ignore[operator]
    return caught.value.code


# -- handler choice -------------------------------------------------------------------------


def test_the_most_specific_registered_path_wins() -> None:
    r = HandlerRegistry()
    r.add("g/1", "a", "s1")
    r.add("g/2", "a/b", "s2")
    assert r.choose("a/b/c").token == "g/2"  # type: ignore[union-attr]
    assert r.choose("a/b").token == "g/2"  # type: ignore[union-attr]
    assert r.choose("a/x").token == "g/1"  # type: ignore[union-attr]
    assert r.choose("a").token == "g/1"  # type: ignore[union-attr]
    assert r.choose("ab") is None and r.choose("b/a") is None
    r.remove("g/2")
    assert r.choose("a/b/c").token == "g/1"  # type: ignore[union-attr]


def test_sessions_on_one_path_are_taken_in_turn_oldest_first() -> None:
    r = HandlerRegistry()
    r.add("g/2", "p", "s2", order=20)
    r.add("g/1", "p", "s1", order=10)
    r.add("g/3", "p", "s3", order=30)
    assert [r.choose("p/q").session_id for _ in range(7)] == [  # type: ignore[union-attr]
        "s1", "s2", "s3", "s1", "s2", "s3", "s1"]
    r.remove("g/2")
    assert {r.choose("p").session_id for _ in range(4)} == {"s1", "s3"}  # type: ignore[union-attr]


def test_one_handler_per_path_per_session_and_a_bounded_number() -> None:
    r = HandlerRegistry(per_session=3)
    r.add("g/1", "a", "s")
    assert code_of(r.add, "g/2", "a", "s") == "HANDLER_CONFLICT"
    assert code_of(r.add, "g/1", "b", "t") == "INVALID_REQUEST"  # a token is made once
    r.add("g/3", "a", "t")  # another session may
    r.add("g/4", "a/b", "s")
    r.add("g/5", "c", "s")
    assert code_of(r.add, "g/6", "d", "s") == "LIMIT_EXCEEDED"
    with pytest.raises(PathError):
        r.add("g/7", "/", "u")
    assert [h.token for h in r.remove_session("s")] == ["g/1", "g/4", "g/5"]
    assert len(r) == 1 and r.choose("a/b").session_id == "t"  # type: ignore[union-attr]
    r.add("g/8", "a", "s")  # after its registration closed, the session may register again


@given(st.lists(st.tuples(st.sampled_from(["a", "a/b", "a/b/c", "b", "a/c"]), st.sampled_from("stuv")),
                max_size=12),
       st.sampled_from(["a", "a/b", "a/b/c", "a/b/c/d", "a/c/x", "b/z", "c", "ab"]))
def test_choice_agrees_with_a_brute_force_oracle(registrations: list[tuple[str, str]], path: str) -> None:
    r = HandlerRegistry()
    held: list[tuple[str, str]] = []
    for n, (at, session) in enumerate(registrations):
        if (at, session) not in held:
            r.add(f"g/{n}", at, session)
            held.append((at, session))
    covering = [at for at, _s in held if path == at or path.startswith(at + "/")]
    chosen = r.choose(path)
    if not covering:
        assert chosen is None
    else:
        assert chosen is not None and chosen.path == max(covering, key=len)


# -- values, types, time-outs, properties ----------------------------------------------------


def test_values_are_checked_against_their_type_and_size() -> None:
    assert check_value("string", cbor2.dumps("hi"), 100) == ("STRING", cbor2.dumps("hi"))
    assert check_value("BINARY", b"\xff\x00", 100) == ("BINARY", b"\xff\x00")
    assert code_of(check_value, "INT64", cbor2.dumps("hi"), 100) == "INVALID_VALUE"
    assert code_of(check_value, "STRING", "hi", 100) == "INVALID_VALUE"
    assert code_of(check_value, "BINARY", b"x" * 101, 100) == "INVALID_VALUE"
    assert code_of(check_value, "TIME_SERIES", b"", 100) == "INVALID_TYPE"
    assert code_of(check_value, "NOPE", b"", 100) == "INVALID_TYPE"
    assert code_of(check_value, 7, b"", 100) == "INVALID_TYPE"
    assert value_type("json").value == "JSON"
    assert value_limit(1_048_576) == 1_048_576 - 65_536 and value_limit(1024) == 512


def test_a_response_of_another_type_than_expected_is_incompatible() -> None:
    check_response(None, "STRING")
    check_response("JSON", "JSON")
    assert code_of(check_response, "INT64", "STRING") == "INCOMPATIBLE_DATATYPE"


def test_timeouts_default_and_are_cut_to_the_most() -> None:
    assert timeout_for(None, 10_000, 60_000) == 10.0
    assert timeout_for(250, 10_000, 60_000) == 0.25
    assert timeout_for(10**9, 10_000, 60_000) == 60.0
    for bad in (0, -1, "5", True):
        assert code_of(timeout_for, bad, 10_000, 60_000) == "INVALID_REQUEST"


def test_the_context_carries_the_properties_asked_for() -> None:
    props = {"$Principal": "alice", "$SessionId": "g-1", "TIER": "1", "REGION": "eu"}
    assert pick(props, property_keys(["TIER", "$Principal", "TIER"])) == {"TIER": "1", "$Principal": "alice"}
    assert pick(props, ["*F"]) == {"$Principal": "alice", "$SessionId": "g-1"}
    assert pick(props, ["*U", "$SessionId"]) == {"$SessionId": "g-1", "TIER": "1", "REGION": "eu"}
    assert pick(props, ()) == {}


# -- what the sender's gateway waits for ----------------------------------------------------------


def test_a_request_ends_with_its_answer_or_its_deadline() -> None:
    p = Pending()
    one = p.start("s", now=0.0, timeout=5.0)
    two = p.start("s", now=1.0, timeout=5.0)
    assert p.next_deadline() == 5.0 and p.waiting_for("s") == 2
    assert p.answer(one.id, "r") is one
    assert p.answer(one.id, "r") is None  # once only
    assert p.expire(5.9) == [] and p.expire(6.0) == [two]
    assert len(p) == 0 and p.waiting_for("s") == 0 and p.next_deadline() is None
    assert p.answer(two.id, "r") is None  # too late


def test_a_session_waits_for_a_bounded_number_of_requests() -> None:
    p = Pending(per_session=2, limit=3)
    p.start("s", 0.0, 1.0)
    p.start("s", 0.0, 1.0)
    assert code_of(p.start, "s", 0.0, 1.0) == "LIMIT_EXCEEDED"
    p.start("t", 0.0, 1.0)
    assert code_of(p.start, "u", 0.0, 1.0) == "LIMIT_EXCEEDED"  # the gateway's limit
    assert len(p.sender_gone("s")) == 2
    p.start("s", 0.0, 1.0)


def test_a_filter_request_waits_for_every_session_it_went_to() -> None:
    p = Pending()
    entry = p.start("s", 0.0, 5.0, to_filter=True)
    assert p.answer(entry.id, "fast") is entry  # an answer may come before the dispatch finished
    p.dispatched(entry.id, ["fast", "slow", "never"])
    assert entry.waiting == {"slow", "never"}
    assert p.answer(entry.id, "stranger") is None
    assert p.answer(entry.id, "slow") is entry and p.get(entry.id) is entry
    assert p.expire(5.0) == [entry] and entry.waiting == {"never"}
    done = p.start("s", 0.0, 5.0, to_filter=True)
    p.dispatched(done.id, [])  # nobody matched: over at once
    assert p.get(done.id) is None and p.waiting_for("s") == 0


# -- what a recipient's gateway remembers -------------------------------------------------------


def test_deliveries_are_answered_once_by_their_recipient() -> None:
    d = Deliveries(limit=2)
    assert d.add(Delivery("d1", "r", "origin", "r1", None, until=10.0), now=0.0)
    assert d.add(Delivery("d2", "r", "origin", "r2", "JSON", until=1.0), now=0.0)
    assert not d.add(Delivery("d3", "q", "origin", "r3", None, until=10.0), now=0.5)  # full
    assert code_of(d.take, "d1", "q") == "INVALID_REQUEST"  # another session's
    assert d.take("d1", "r").request == "r1"
    assert code_of(d.take, "d1", "r") == "INVALID_REQUEST"  # answered already
    assert code_of(d.take, 5, "r") == "INVALID_REQUEST"
    assert d.add(Delivery("d4", "q", "origin", "r4", None, until=10.0), now=2.0)
    assert not d.add(Delivery("d5", "q", "origin", "r5", None, until=10.0), now=0.5)  # full, none late
    assert d.add(Delivery("d5", "q", "origin", "r5", None, until=10.0), now=2.0)  # d2 was late: forgotten
    assert [x.id for x in d.recipient_gone("q")] == ["d4", "d5"] and len(d) == 0
