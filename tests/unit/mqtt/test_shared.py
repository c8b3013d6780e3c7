"""Shared subscriptions: each message to exactly one member, in turn."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqtt.shared import SharedGroup


def always(member: str) -> bool:
    return True


@given(st.lists(st.permutations(["a", "b", "c"]), min_size=1, max_size=30))
def test_each_message_is_delivered_by_exactly_one_member_whatever_the_order_members_see_it(
    orders: list[list[str]]
) -> None:
    group: SharedGroup[str] = SharedGroup()
    for m in "abc":
        group.join(m)
    tokens = [object() for _ in orders]
    for token, order in zip(tokens, orders):
        takers = [m for m in order if group.takes(m, token, always)]
        assert len(takers) == 1
    assert not group._decided  # every decision done with once all members saw the message


def test_members_take_turns() -> None:
    group: SharedGroup[str] = SharedGroup()
    for m in "ab":
        group.join(m)
    owners = []
    for _ in range(6):
        token = object()
        owners += [m for m in "ab" if group.takes(m, token, always)]
    assert owners == ["a", "b"] * 3


def test_connected_members_come_before_kept_ones() -> None:
    group: SharedGroup[str] = SharedGroup()
    for m in "ab":
        group.join(m)
    token = object()
    connected = {"b"}
    assert [m for m in "ab" if group.takes(m, token, lambda m: m in connected)] == ["b"]


def test_a_resumed_session_keeps_its_decisions() -> None:
    group: SharedGroup[str] = SharedGroup()
    for m in "ab":
        group.join(m)
    token = object()
    assert group.takes("b", token, always) is False  # "a" was chosen
    group.replace("a", "a2")
    assert group.members == ["a2", "b"]
    assert group.takes("a2", token, always) is True


def test_decisions_are_bounded() -> None:
    group: SharedGroup[str] = SharedGroup(pending=3)
    for m in "ab":
        group.join(m)
    tokens = [object() for _ in range(10)]
    for token in tokens:
        group.takes("a", token, always)  # "b" never catches up
    assert len(group._decided) == 3
