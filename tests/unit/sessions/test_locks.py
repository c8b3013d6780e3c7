"""Session locks' state machine (sessions/locks.py)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions.limits import Limits
from sessions.locks import (
    MAX_NAME,
    MAX_PER_SESSION,
    MAX_WAITING,
    Cleanup,
    Holder,
    LockLimitError,
    LockTable,
    Scope,
    acquire,
    check_name,
    check_scope,
    cleanup,
    release,
    stale,
    sweep,
    withdraw,
)
from sessions.requests import RequestError
from topics.errors import TopicModelError

SESSION, CONNECTION = Scope.UNLOCK_ON_SESSION_LOSS, Scope.UNLOCK_ON_CONNECTION_LOSS
A = Holder("gw0-x~1", "gw0-x-1")
B = Holder("gw1-y~1", "gw1-y-1")
C = Holder("gw1-y~1", "gw1-y-2")


def test_a_free_lock_is_granted_and_a_held_one_waits() -> None:
    table, first = acquire(LockTable(), "a", A)
    assert first.granted and first.lock.sequence == 1 and first.lock.owner == A
    table, second = acquire(table, "a", B)
    assert not second.granted and table.locks["a"].waiters == (B,)
    assert table.owned(A.gateway, A.session, "a", 1) is not None
    assert table.owned(B.gateway, B.session, "a") is None and table.waiting(B.gateway, B.session, "a")


def test_locking_a_held_lock_again_answers_the_same_lock() -> None:
    table, first = acquire(LockTable(), "a", A)
    again, second = acquire(table, "a", A)
    assert again is table and second.granted and second.lock == first.lock


def test_the_weaker_scope_wins_for_one_session() -> None:
    table, _ = acquire(LockTable(), "a", A)
    table, decision = acquire(table, "a", Holder(A.gateway, A.session, CONNECTION))
    assert decision.granted and table.locks["a"].owner.scope is CONNECTION
    table, _ = acquire(table, "a", B)
    table, _ = acquire(table, "a", Holder(B.gateway, B.session, CONNECTION))
    assert table.locks["a"].waiters == (Holder(B.gateway, B.session, CONNECTION),)
    table, _ = acquire(table, "a", B)  # asking again with the stronger scope changes nothing
    assert table.locks["a"].waiters[0].scope is CONNECTION


def test_a_release_passes_the_lock_to_the_oldest_waiter_with_a_higher_sequence() -> None:
    table, _ = acquire(LockTable(), "a", A)
    table, _ = acquire(table, "a", B)
    table, _ = acquire(table, "a", C)
    table, owned = release(table, "a", A.gateway, A.session)
    assert owned and table.locks["a"].owner == B and table.locks["a"].sequence == 2
    assert table.locks["a"].waiters == (C,)
    table, owned = release(table, "a", A.gateway, A.session)
    assert not owned
    table, _ = release(table, "a", B.gateway, B.session)
    table, _ = release(table, "a", C.gateway, C.session)
    assert not table.locks and table.next_sequence == 4


def test_a_release_at_another_sequence_does_nothing() -> None:
    table, _ = acquire(LockTable(), "a", A)
    same, owned = release(table, "a", A.gateway, A.session, 7)
    assert same is table and not owned


def test_withdrawing_stops_waiting() -> None:
    table, _ = acquire(LockTable(), "a", A)
    table, _ = acquire(table, "a", B)
    table, withdrawn = withdraw(table, "a", B.gateway, B.session)
    assert withdrawn and table.locks["a"].waiters == ()
    table, withdrawn = withdraw(table, "a", A.gateway, A.session)  # the owner is no waiter
    assert not withdrawn and table.locks["a"].owner == A


def test_cleanup_follows_the_scopes() -> None:
    table, _ = acquire(LockTable(), "s", A)
    table, _ = acquire(table, "c", Holder(A.gateway, A.session, CONNECTION))
    table, _ = acquire(table, "w", B)
    table, _ = acquire(table, "w", A)
    lost = cleanup(table, A.gateway, Cleanup(disconnected=frozenset({A.session})))
    assert set(lost.locks) == {"s", "w"} and lost.locks["w"].waiters == ()
    ended = cleanup(table, A.gateway, Cleanup(ended=frozenset({A.session})))
    assert set(ended.locks) == {"w"}
    other = cleanup(table, "gw9~1", Cleanup(ended=frozenset({A.session})))
    assert other is table


def test_stale_says_what_a_gateway_no_longer_has() -> None:
    table, _ = acquire(LockTable(), "s", A)
    table, _ = acquire(table, "c", Holder(A.gateway, A.session, CONNECTION))
    table, _ = acquire(table, "w", B)
    table, _ = acquire(table, "w", A)
    assert not stale(table, A.gateway, {A.session: True}.get, {(A.session, "w")})
    assert stale(table, A.gateway, {A.session: True}.get, set()) == Cleanup(withdrawn=frozenset({(A.session, "w")}))
    assert stale(table, A.gateway, {A.session: False}.get, set()) == Cleanup(disconnected=frozenset({A.session}))
    assert stale(table, A.gateway, {}.get, set()) == Cleanup(ended=frozenset({A.session}))
    table2, _ = release(table, "c", A.gateway, A.session)
    assert not stale(table2, A.gateway, {A.session: False}.get, set()).ended
    only_session = cleanup(table2, A.gateway, Cleanup(withdrawn=frozenset({(A.session, "w")})))
    assert not stale(only_session, A.gateway, {A.session: False}.get, set())  # a SESSION_LOSS lock survives


def test_sweep_takes_away_the_holders_of_gone_processes() -> None:
    table, _ = acquire(LockTable(), "a", A)
    table, _ = acquire(table, "a", B)
    table, _ = acquire(table, "b", B)
    table, _ = acquire(table, "b", A)
    assert sweep(table, {"gw0-x": None, "gw1-y": "gw1-y~1"}) is table
    assert sweep(table, {"gw0-x": "gw0-x~1", "gw1-y": None}) is table
    swept = sweep(table, {"gw1-y": "gw1-y~1"})  # gw0 was lost: B gets a, and A's wait for b goes
    assert swept.locks["a"].owner == B and swept.locks["a"].sequence == 3 and swept.locks["b"].waiters == ()
    restarted = sweep(table, {"gw0-x": "gw0-x~2", "gw1-y": "gw1-y~1"})
    assert restarted.locks["a"].owner == B


def test_the_bounds() -> None:
    table = LockTable()
    for i in range(MAX_PER_SESSION):
        table, _ = acquire(table, f"l{i}", A)
    with pytest.raises(LockLimitError):
        acquire(table, "more", A)
    table, again = acquire(table, "l0", A)  # one held already is no more
    assert again.granted
    table = LockTable()
    for i in range(MAX_WAITING):
        table, _ = acquire(table, f"l{i}", B)
        table, _ = acquire(table, f"l{i}", A)
    table, free = acquire(table, "free", A)  # granted: not a wait
    assert free.granted
    table, _ = acquire(table, "x", B)
    with pytest.raises(LockLimitError) as raised:
        acquire(table, "x", A)
    assert raised.value.code == "LIMIT_EXCEEDED"


def test_names_and_scopes_are_checked() -> None:
    limits = Limits()
    assert check_name(limits, "/a//b/") == "a/b"
    for bad in ("", "/", 5, None, "x" * (MAX_NAME + 1), "a\x00"):
        with pytest.raises(TopicModelError) as raised:
            check_name(limits, bad)
        assert raised.value.code == "INVALID_PATH"
    assert check_scope(None) is SESSION and check_scope("UNLOCK_ON_CONNECTION_LOSS") is CONNECTION
    for bad in ("SOMETIMES", 3, ["x"]):
        with pytest.raises(RequestError) as refused:
            check_scope(bad)
        assert refused.value.code == "INVALID_REQUEST"


def test_the_wire_form_round_trips() -> None:
    table, _ = acquire(LockTable(), "a/b", A)
    table, _ = acquire(table, "a/b", Holder(B.gateway, B.session, CONNECTION))
    assert LockTable.from_wire(table.to_wire()) == table
    assert LockTable.from_wire(None) == LockTable()
    cleared = table.cleared()
    assert not cleared.locks and cleared.next_sequence == table.next_sequence
    what = Cleanup(frozenset({"s"}), frozenset({"t"}), frozenset({("u", "n")}))
    assert Cleanup.from_wire(what.to_wire()) == what


HOLDERS = [Holder(g, s, scope) for g in ("gw0~1", "gw1~1") for s in ("s1", "s2") for scope in Scope]
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("lock"), st.sampled_from(["a", "b"]), st.sampled_from(HOLDERS)),
        st.tuples(st.just("unlock"), st.sampled_from(["a", "b"]), st.sampled_from(HOLDERS)),
        st.tuples(st.just("withdraw"), st.sampled_from(["a", "b"]), st.sampled_from(HOLDERS)),
        st.tuples(st.just("close"), st.just(""), st.sampled_from(HOLDERS)),
        st.tuples(st.just("drop"), st.just(""), st.sampled_from(HOLDERS)),
        st.tuples(st.just("lose"), st.just(""), st.sampled_from(HOLDERS)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(STEPS)
def test_never_two_owners_and_sequences_only_grow(steps: list[tuple[str, str, Holder]]) -> None:
    table = LockTable()
    last = {"a": 0, "b": 0}
    for action, name, h in steps:
        before = table
        if action == "lock":
            table, _ = acquire(table, name, h)
        elif action == "unlock":
            table, _ = release(table, name, h.gateway, h.session)
        elif action == "withdraw":
            table, _ = withdraw(table, name, h.gateway, h.session)
        elif action == "close":
            table = cleanup(table, h.gateway, Cleanup(ended=frozenset({h.session})))
        elif action == "drop":
            table = cleanup(table, h.gateway, Cleanup(disconnected=frozenset({h.session})))
        else:
            table = sweep(table, {g: g + "~1" for g in ("gw0", "gw1") if g != h.gateway.partition("~")[0]})
        assert table.version >= before.version and table.next_sequence >= before.next_sequence
        for lock_name, lock in table.locks.items():
            holders = [(w.gateway, w.session) for w in (lock.owner, *lock.waiters)]
            assert len(holders) == len(set(holders)), "a session is owner or waiter once"
            before_lock = before.locks.get(lock_name)
            if before_lock is None or before_lock.sequence != lock.sequence:
                assert lock.sequence > last[lock_name], "a new grant has a higher sequence"
            assert lock.sequence < table.next_sequence
            last[lock_name] = lock.sequence
        assert LockTable.from_wire(table.to_wire()) == table
