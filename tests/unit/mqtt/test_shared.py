"""Shared subscriptions: each message to exactly one member, in turn."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mqtt.shared import ShareDirectory, SharedGroup


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


# -- across gateways ---------------------------------------------------------------------


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


GROUP = ("workers", "jobs/#")


def directories(names: list[str], clock: Clock, members: dict[str, set[tuple[str, str]]]) -> dict[str, ShareDirectory]:
    """One directory per gateway, each having heard every other's announcement."""
    found = {name: ShareDirectory(name, clock) for name in names}
    for name, directory in found.items():
        for other in names:
            if other != name:
                directory.heard(other, members.get(other, set()))
    return found


@given(st.lists(st.text(min_size=1, max_size=30), min_size=1, max_size=50))
def test_each_message_goes_to_exactly_one_gateway_with_members(paths: list[str]) -> None:
    clock = Clock()
    names = ["gw-0", "gw-1", "gw-2"]
    members = {"gw-0": {GROUP}, "gw-2": {GROUP}}  # gw-1 has none: it never owns a message
    found = directories(names, clock, members)
    for path in paths:
        owners = [name for name in ("gw-0", "gw-2") if found[name].owns(GROUP, path)]
        assert len(owners) == 1, (path, owners)
    assert found["gw-0"].gateways(GROUP) == ("gw-0", "gw-2")


def test_messages_spread_over_the_gateways_and_stick_per_topic() -> None:
    clock = Clock()
    found = directories(["a", "b"], clock, {"a": {GROUP}, "b": {GROUP}})
    owned = [found["a"].owns(GROUP, f"jobs/{k}") for k in range(200)]
    assert 60 < sum(owned) < 140  # both get a fair share
    assert owned == [found["a"].owns(GROUP, f"jobs/{k}") for k in range(200)]  # the same answer again


def test_a_gateway_not_heard_from_for_the_ttl_has_no_members() -> None:
    clock = Clock()
    directory = ShareDirectory("a", clock, ttl=6)
    directory.heard("b", [GROUP])
    assert directory.gateways(GROUP) == ("a", "b")
    clock.now += 6
    assert directory.gateways(GROUP) == ("a", "b")
    clock.now += 0.5
    assert directory.gateways(GROUP) == ("a",)
    assert all(directory.owns(GROUP, f"p{k}") for k in range(20))
    directory.heard("b", [GROUP])  # back
    assert directory.gateways(GROUP) == ("a", "b")
    directory.heard("b", [])  # its last member left
    assert directory.gateways(GROUP) == ("a",) and directory.gateways(("other", "#")) == ("a",)


def test_a_gateway_s_own_announcements_change_nothing() -> None:
    directory = ShareDirectory("a", Clock())
    directory.heard("a", [("x", "#")])
    assert directory.gateways(("x", "#")) == ("a",)
