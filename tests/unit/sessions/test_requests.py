"""Checking requests and planning them, in the pure core."""

from __future__ import annotations

from typing import Any

import pytest

from sessions import requests as check
from sessions.registry import SessionRegistry
from sessions.security import PermissionDenied, SecurityStore
from topics.errors import InvalidValueError, PathError, SelectorError, TopicTypeError
from topics.protocol import AddTopic, AppendEvent, EditEvent, FetchTopics, QueryEvents, SetValue

ALL_PATH = ["READ_TOPIC", "SELECT_TOPIC", "MODIFY_TOPIC", "UPDATE_TOPIC", "EXPOSE_BRANCH", "EDIT_TIME_SERIES_EVENTS"]


def registry(*commands: list[Any]) -> SessionRegistry:
    store = SecurityStore().apply(
        [
            ["set_default_path_permissions", "WRITER", ALL_PATH],
            ["set_global_permissions", "WRITER", ["MODIFY_SECURITY", "VIEW_SESSION"]],
            ["set_default_path_permissions", "READER", ["READ_TOPIC", "SELECT_TOPIC"]],
            ["set_path_permissions", "OWNER", "ts", ["EDIT_OWN_TIME_SERIES_EVENTS", "UPDATE_TOPIC"]],
            *commands,
        ]
    )
    r = SessionRegistry(security=store)
    r.open("w", "writer", {}, frozenset({"WRITER"}))
    r.open("r", "reader", {}, frozenset({"READER"}))
    r.open("o", "owner", {}, frozenset({"OWNER"}))
    return r


def test_add_and_set_become_partition_operations() -> None:
    r = registry()
    assert check.add_topic(r, "w", "/a//b/", "json", {"CONFLATION": "off"}) == AddTopic("a/b", "JSON", {"CONFLATION": "off"})
    assert check.set_value(r, "w", "a/b", b"\x01", False, "int64", True, max_size=10) == SetValue(
        "a/b", b"\x01", False, "INT64", True
    )


@pytest.mark.parametrize(
    "args, error, fragment",
    [
        (("", b"", False), PathError, "non-empty"),
        (("a", "text", False), check.RequestError, "value has the wrong type (str)"),
        (("a", b"", 1), check.RequestError, "raw has the wrong type (int)"),
        (("a", b"", False, "NOPE"), TopicTypeError, "unknown topic type"),
        (("a", b"", False, None, "yes"), check.RequestError, "add_if_missing has the wrong type"),
        (("a", b"x" * 11, False), InvalidValueError, "larger than the maximum frame size"),
    ],
)
def test_bad_set_arguments_say_what(args: tuple[Any, ...], error: type[Exception], fragment: str) -> None:
    with pytest.raises(error) as info:
        check.set_value(registry(), "w", *args, max_size=10)
    assert fragment in str(info.value)


def test_permissions_are_checked_on_the_path() -> None:
    r = registry()
    with pytest.raises(PermissionDenied, match="UPDATE_TOPIC is needed on 'a'"):
        check.set_value(r, "r", "a", b"", False, max_size=10)
    with pytest.raises(PermissionDenied, match="MODIFY_TOPIC is needed on 'a'"):
        check.add_topic(r, "r", "a", "STRING")
    with pytest.raises(PermissionDenied, match="MODIFY_SECURITY"):
        check.security_commands(r, "r", [])


def test_remove_goes_by_selector_only_when_every_topic_below_is_permitted() -> None:
    r = registry(["set_path_permissions", "WRITER", "a/locked", ["READ_TOPIC"]])
    assert check.remove_plan(r, "w", ">x").direct
    assert check.remove_plan(r, "w", "?x//").direct  # nothing assigned below x
    assert not check.remove_plan(r, "w", "?a//").direct  # a/locked differs: list, then remove
    assert not check.remove_plan(r, "w", "*.*").direct
    with pytest.raises(PermissionDenied):
        check.remove_plan(r, "w", ">a/locked")
    assert not check.remove_plan(r, "r", "?x//").direct  # no MODIFY_TOPIC at the prefix: list first
    with pytest.raises(SelectorError):
        check.remove_plan(r, "w", "?a//b")


def test_fetch_plan_checks_select_and_carries_the_options() -> None:
    r = registry()
    plan = check.fetch_plan(r, "r", "?a//", True, True, ["string"], 3)
    assert plan.limit == 3 and [op for _, op in plan.operations] == [FetchTopics("?a//", True, True, ["STRING"], None)]
    with pytest.raises(check.RequestError, match="must not be negative"):
        check.fetch_plan(r, "r", "?a//", limit=-1)
    with pytest.raises(check.RequestError, match="limit has the wrong type"):
        check.fetch_plan(r, "r", "?a//", limit="3")


def test_time_series_requests() -> None:
    r = registry()
    assert check.append_event(r, "w", "ts", b"\x01", False, 5) == AppendEvent("ts", b"\x01", False, 5, "writer")
    assert check.edit_event(r, "w", "ts", 1, b"\x02", False) == EditEvent("ts", 1, b"\x02", False, "writer", False)
    # only its own events: the partition checks the author
    assert check.edit_event(r, "o", "ts", 1, b"\x02", False).own_only
    with pytest.raises(PermissionDenied, match="EDIT_TIME_SERIES_EVENTS"):
        check.edit_event(r, "r", "ts", 1, b"\x02", False)
    assert check.query_events(r, "r", "ts", "start", 0, "end", 0, "values") == QueryEvents(
        "ts", "start", 0, "end", 0, "values", None
    )
    with pytest.raises(check.RequestError, match="anchor value has the wrong type"):
        check.query_events(r, "r", "ts", "start", "0", "end", 0, "values")


@pytest.mark.parametrize(
    "target, fragment",
    [(["id"], "a target is"), (["name", "x"], "a target is"), ("id", "target has the wrong type")],
)
def test_bad_session_targets(target: Any, fragment: str) -> None:
    with pytest.raises(check.RequestError, match=fragment):
        check.session_target(target)


def test_session_targets_and_property_changes() -> None:
    assert check.session_target(["filter", "TIER is '1'"]) == ("filter", "TIER is '1'")
    assert check.property_changes({"TIER": "2", "OLD": None}) == {"TIER": "2", "OLD": None}
    with pytest.raises(check.RequestError, match=r"only user properties"):
        check.property_changes({"$Principal": "x"})
    with pytest.raises(check.RequestError, match="string value or nil"):
        check.property_changes({"TIER": 2})
