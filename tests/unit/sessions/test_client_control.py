"""Client control's bookkeeping: property keys, role changes, session event listeners, and the
registry's side of changing a session's roles and subscribing it on another's behalf."""

from __future__ import annotations

from typing import Any

import cbor2
import pytest

from sessions.client_control import (
    ALL_FIXED,
    ALL_USER,
    MAX_ROLES,
    Listener,
    Listeners,
    RoleChange,
    SessionEvent,
    State,
    listen_filter,
    pick,
    property_keys,
    role_change,
)
from sessions.deliveries import Subscribed, Unsubscribed
from sessions.filters import FilterSyntaxError
from sessions.limits import Limits
from sessions.registry import SessionRegistry
from sessions.requests import RequestError
from sessions.security import PathPermission, PermissionDenied, default_store
from topics.protocol import End, Snapshot
from topics.selectors import parse_selector

PROPS = {"$SessionId": "g-1", "$Principal": "ann", "tier": "1", "team": "red"}


# -- property keys --------------------------------------------------------------------------


def test_pick_names_wildcards_and_everything() -> None:
    assert pick(PROPS, None) == PROPS
    assert pick(PROPS, ()) == {}
    assert pick(PROPS, ["tier", "nope"]) == {"tier": "1"}
    assert pick(PROPS, [ALL_FIXED]) == {"$SessionId": "g-1", "$Principal": "ann"}
    assert pick(PROPS, [ALL_USER, "$Principal"]) == {"$Principal": "ann", "tier": "1", "team": "red"}


def test_property_keys_are_checked() -> None:
    assert property_keys(None) == ()
    assert property_keys(["a", "a", "b"]) == ("a", "b")
    for bad in ("a", [1], [""], ["k"] * 65):
        with pytest.raises(RequestError):
            property_keys(bad)


def test_listen_filter_is_parsed_and_bounded() -> None:
    limits = Limits(max_selector_length=20)
    assert listen_filter(limits, None) is None
    assert listen_filter(limits, "tier is '1'") == "tier is '1'"
    with pytest.raises(FilterSyntaxError):
        listen_filter(limits, "tier is")
    with pytest.raises(RequestError, match="max_selector_length") as e:
        listen_filter(limits, "tier is '" + "x" * 30 + "'")
    assert e.value.code == "INVALID_FILTER"


# -- role changes ---------------------------------------------------------------------------


def test_role_change_applies_and_ignores_what_is_already_so() -> None:
    change = role_change(["A", "X"], ["B"])
    assert change == RoleChange(frozenset({"A", "X"}), frozenset({"B"}))
    assert change.apply(frozenset({"A", "C"})) == frozenset({"B", "C"})
    assert role_change([], ["C"]).apply(frozenset({"C"})) == frozenset({"C"})


@pytest.mark.parametrize(
    ("remove", "add", "why"),
    [
        ([], [], "name roles"),
        (["A"], ["A"], "both removed and added: A"),
        (["A", ""], [], "non-empty"),
        ("A", [], "wrong type"),
        ([1], [], "non-empty string"),
        (["x" * 300], [], "at most 256"),
        ([f"r{i}" for i in range(MAX_ROLES)], ["one more"], "at most 64"),
    ],
)
def test_a_bad_role_change_is_refused(remove: Any, add: Any, why: str) -> None:
    with pytest.raises(RequestError, match=why) as e:
        role_change(remove, add)
    assert e.value.code == "INVALID_REQUEST"


# -- listeners ------------------------------------------------------------------------------


def listener(token: str = "g~1/1", session_filter: str | None = None, keys: tuple[str, ...] = ("tier",),
             session_id: str = "watcher") -> Listener:
    return Listener(token, token.split("/")[0], session_id, session_filter, keys, 7)


def test_a_listener_row_round_trips_and_the_event_encodes() -> None:
    x = listener(session_filter="tier is '1'")
    assert Listener.from_row(x.to_row()) == x
    event = SessionEvent("s", "STATE", State.CLOSED, reason="EXPIRED")
    assert event.to_wire() == {"session_id": "s", "type": "STATE", "state": "CLOSED", "properties": {},
                               "changed": {}, "reason": "EXPIRED"}


def test_listeners_per_session_are_limited() -> None:
    listeners = Listeners(most_per_session=2)
    assert listeners.add(listener("g/1")) and listeners.add(listener("g/2"))
    assert not listeners.add(listener("g/2"))
    with pytest.raises(RequestError) as e:
        listeners.add(listener("g/3"))
    assert e.value.code == "LIMIT_EXCEEDED"
    listeners.add(listener("g/4", session_id="another"))
    assert len(listeners) == 3 and [x.token for x in listeners.of_session("watcher")] == ["g/1", "g/2"]
    assert listeners.remove("g/1") is not None and listeners.remove("g/1") is None


def test_snapshot_gives_an_open_event_for_each_matching_session() -> None:
    x = listener(session_filter="tier is '1'")
    sessions = [("a", {"tier": "1", "team": "red"}, frozenset()), ("b", {"tier": "2"}, frozenset())]
    assert Listeners().snapshot(x, sessions) == [SessionEvent("a", "STATE", State.ACTIVE, {"tier": "1"})]


def test_state_events_follow_the_filter_and_a_closed_one_carries_no_properties() -> None:
    listeners = Listeners()
    listeners.add(listener("g/1", session_filter="hasRoles 'R'"))
    listeners.add(listener("g/2"))
    opened = listeners.state("s", {"tier": "1"}, frozenset(), State.ACTIVE)
    assert [(x.token, e.state, e.properties) for x, e in opened] == [("g/2", State.ACTIVE, {"tier": "1"})]
    closed = listeners.state("s", {"tier": "1"}, frozenset({"R"}), State.CLOSED, "CLOSED_BY_CLIENT")
    assert [(x.token, e.properties, e.reason) for x, e in closed] == [
        ("g/1", {}, "CLOSED_BY_CLIENT"), ("g/2", {}, "CLOSED_BY_CLIENT")]


def test_property_events_only_for_keys_asked_for() -> None:
    listeners = Listeners()
    listeners.add(listener("g/1", keys=("tier",)))
    listeners.add(listener("g/2", keys=()))
    listeners.add(listener("g/3", keys=(ALL_FIXED,)))
    heard = listeners.changed("s", {"tier": "1", "x": "a"}, {"tier": "2", "x": "a", "new": "n"}, frozenset())
    assert [(x.token, e.type, e.properties, e.changed) for x, e in heard] == [
        ("g/1", "PROPERTIES", {"tier": "2"}, {"tier": "1"})]
    roles = listeners.changed("s", {"$Roles": ""}, {"$Roles": '"R"'}, frozenset({"R"}))
    assert [(x.token, e.changed) for x, e in roles] == [("g/3", {"$Roles": ""})]
    assert listeners.changed("s", {"a": "1"}, {"a": "1"}, frozenset()) == []


# -- the registry: new roles, subscriptions made by another session --------------------------


def cb(value: Any) -> bytes:
    return bytes(cbor2.dumps(value))


def store() -> Any:
    return default_store("adminpassword").apply([
        ["set_path_permissions", "ANONYMOUS", "secret", []],
        ["set_path_permissions", "READER", "secret", ["READ_TOPIC"]],
    ])


def answer(r: SessionRegistry, regs: list[Any], topics: dict[str, str]) -> None:
    for selector, token in regs:
        r.on_events([*(Snapshot(token, p, "STRING", [], cb(v)) for p, v in topics.items() if selector.matches(p)),
                     End(token)])


def kinds(r: SessionRegistry, sid: str) -> list[tuple[str, str]]:
    out = []
    while batch := r.sessions[sid].queue.take():
        for m in batch:
            if isinstance(m, Subscribed):
                out.append(("sub", m.path))
            elif isinstance(m, Unsubscribed):
                out.append(("unsub", m.reason))
    return out


def test_a_controlled_subscription_needs_no_select_topic_but_read_topic_filters_it() -> None:
    s = store()
    r = SessionRegistry(security=s)
    r.open("t", "", {}, s.anonymous_roles)
    with pytest.raises(PermissionDenied):
        r.subscribe("t", parse_selector("?secret/.*"))
    regs, _ = r.subscribe("t", parse_selector("?secret/.*"), controlled=True)
    answer(r, regs, {"secret/a": "s"})
    assert kinds(r, "t") == []  # may select it now, still may not read it
    r.set_roles("t", frozenset({"ANONYMOUS", "READER"}))
    assert kinds(r, "t") == [("sub", "secret/a")]


def test_new_roles_change_properties_permissions_and_subscriptions_at_once() -> None:
    s = store()
    r = SessionRegistry(security=s)
    r.open("t", "", {}, frozenset({"ANONYMOUS", "READER"}))
    r.open("u", "", {}, frozenset({"ANONYMOUS", "READER"}))
    regs, _ = r.subscribe("t", parse_selector("?secret/.*"), controlled=True)
    answer(r, regs, {"secret/a": "s"})
    assert kinds(r, "t") == [("sub", "secret/a")]
    registrations, unregistrations = r.set_roles("t", frozenset({"ANONYMOUS"}))
    assert registrations == [] and unregistrations == []  # the group it joined owns the interest
    assert kinds(r, "t") == [("unsub", "AUTHORIZATION")]
    assert r.sessions["t"].properties["$Roles"] == '"ANONYMOUS"'
    assert not r.has("t", PathPermission.READ_TOPIC, "secret/a")
    assert r.sessions["u"].group is not r.sessions["t"].group
