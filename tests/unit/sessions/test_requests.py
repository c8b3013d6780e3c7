"""Checking requests and planning them, in the pure core."""

from __future__ import annotations

from typing import Any

import pytest

from sessions import requests as check
from sessions.authorization import authorize
from sessions.limits import Limits
from sessions.registry import SessionRegistry
from sessions.security import PermissionDenied, SecurityStore
from topics.constraints import JsonWithValue, NoTopic, NoValue, Or
from topics.errors import (
    ConstraintError,
    InvalidValueError,
    PathError,
    SelectorError,
    TopicTypeError,
    UnsatisfiedConstraintError,
)
from topics.protocol import AddTopic, AppendEvent, EditEvent, FetchTopics, PatchJson, QueryEvents, SetValue

ALL_PATH = ["READ_TOPIC", "SELECT_TOPIC", "MODIFY_TOPIC", "UPDATE_TOPIC", "EXPOSE_BRANCH", "EDIT_TIME_SERIES_EVENTS"]


def registry(*commands: list[Any], limits: Limits | None = None) -> SessionRegistry:
    store = SecurityStore().apply(
        [
            ["set_default_path_permissions", "WRITER", ALL_PATH],
            ["set_global_permissions", "WRITER", ["MODIFY_SECURITY", "VIEW_SESSION"]],
            ["set_default_path_permissions", "READER", ["READ_TOPIC", "SELECT_TOPIC"]],
            ["set_path_permissions", "OWNER", "ts", ["EDIT_OWN_TIME_SERIES_EVENTS", "UPDATE_TOPIC"]],
            ["set_default_path_permissions", "UPDATER", ["UPDATE_TOPIC"]],
            *commands,
        ]
    )
    r = SessionRegistry(security=store, limits=limits)
    r.open("w", "writer", {}, frozenset({"WRITER"}))
    r.open("r", "reader", {}, frozenset({"READER"}))
    r.open("o", "owner", {}, frozenset({"OWNER"}))
    r.open("w2", "updater", {}, frozenset({"UPDATER"}))
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
        authorize(r, "r", "set", ["a", b"", False])
    with pytest.raises(PermissionDenied, match="MODIFY_TOPIC is needed on 'a'"):
        authorize(r, "r", "add", ["/a/", "STRING"])
    with pytest.raises(PermissionDenied, match="MODIFY_SECURITY"):
        authorize(r, "r", "security_update", [[]])
    with pytest.raises(PermissionDenied, match="MODIFY_TOPIC is needed on 'a'"):  # the one path add_if_missing adds
        check.set_value(r, "w2", "a", b"", False, None, True, max_size=10)


def test_remove_goes_by_selector_only_when_every_topic_below_is_permitted() -> None:
    r = registry(["set_path_permissions", "WRITER", "a/locked", ["READ_TOPIC"]])
    assert check.remove_plan(r, "w", ">x").direct
    assert check.remove_plan(r, "w", "?x//").direct  # nothing assigned below x
    assert not check.remove_plan(r, "w", "?a//").direct  # a/locked differs: list, then remove
    assert not check.remove_plan(r, "w", "*.*").direct
    with pytest.raises(PermissionDenied):
        authorize(r, "w", "remove", [">a/locked"])
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
    with pytest.raises(check.RequestError, match="years 1 and 9999"):
        check.append_event(r, "w", "ts", b"\x01", False, 10**17)
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
    r = registry()
    assert check.session_target(["filter", "TIER is '1'"]) == ("filter", "TIER is '1'")
    assert check.property_changes(r, {"TIER": "2", "OLD": None}) == {"TIER": "2", "OLD": None}
    with pytest.raises(check.RequestError, match=r"only user properties"):
        check.property_changes(r, {"$Principal": "x"})
    with pytest.raises(check.RequestError, match="string value or nil"):
        check.property_changes(r, {"TIER": 2})


# -- conditional updates and JSON patches ----------------------------------------------------


def test_a_set_carries_its_constraint_as_the_last_optional_argument() -> None:
    r = registry()
    old = check.set_value(r, "w", "a", b"\x01", False, None, True, True, b"", max_size=10)
    assert old.constraint is None  # a client that sends no constraint is unchanged
    op = check.set_value(r, "w", "a", b"\x01", False, None, True, True, b"", ["or", [["no_topic"], ["no_value"]]],
                         max_size=10)
    assert op == SetValue("a", b"\x01", False, None, True, True, "", b"", Or((NoTopic(), NoValue())))
    authorize(r, "w", "set", ["a", b"\x01", False, None, True, True, b"", ["no_topic"]])  # 8 arguments


def test_a_bad_constraint_is_refused_at_the_gateway_naming_where() -> None:
    r = registry()
    with pytest.raises(ConstraintError, match=r"at and\[0\]: unknown kind 'maybe'") as info:
        check.set_value(r, "w", "a", b"", False, None, False, True, b"", ["and", [["maybe"]]], max_size=10)
    assert info.value.code == "INVALID_CONSTRAINT"


def test_lock_terms_are_decided_at_the_gateway_and_none_is_held_yet() -> None:
    r = registry()
    lock = ["locked", "door", 2]
    with pytest.raises(UnsatisfiedConstraintError, match="does not hold lock 'door' at sequence 2") as info:
        check.set_value(r, "w", "a", b"", False, None, False, True, b"", lock, max_size=10)
    assert info.value.code == "UNSATISFIED_CONSTRAINT"
    # what cannot hold is refused; what is left of an or goes on to the partition
    op = check.set_value(r, "w", "a", b"", False, None, False, True, b"", ["or", [lock, ["no_value"]]], max_size=10)
    assert op.constraint == NoValue()

    def held(name: str, sequence: int) -> bool:
        return (name, sequence) == ("door", 2)

    held_set = check.set_value(r, "w", "a", b"", False, None, False, True, b"", lock, max_size=10, locks=held)
    assert held_set.constraint is None
    assert check.update_constraint(["and", [lock, ["no_topic"]]], held) == NoTopic()
    with pytest.raises(UnsatisfiedConstraintError, match="sequence 3"):
        check.update_constraint(["locked", "door", 3], held)


def test_json_patch_takes_text_or_the_operations_and_checks_them_first() -> None:
    r = registry()
    text = '[{"op": "add", "path": "/a", "value": 1}]'
    assert check.json_patch(r, "w", "/j/", text, max_size=100) == PatchJson("j", text)
    listed = check.json_patch(r, "w", "j", [{"op": "test", "path": "/a", "value": [1, "x"]}],
                              ["json_with_value", "/a", b"\x01"], max_size=100)
    assert listed.path == "j" and listed.constraint == JsonWithValue(("a",), b"\x01")
    assert listed.patch == '[{"op": "test", "path": "/a", "value": [1, "x"]}]'
    with pytest.raises(InvalidValueError, match="invalid JSON patch: operation 0: unknown op"):
        check.json_patch(r, "w", "j", '[{"op": "jump", "path": ""}]', max_size=100)
    with pytest.raises(InvalidValueError, match="not a JSON value"):
        check.json_patch(r, "w", "j", [{"op": "add", "path": "/a", "value": b"\x00"}], max_size=100)
    with pytest.raises(InvalidValueError, match="nests deeper than 256"):
        deep: list[Any] = []
        for _ in range(300):
            deep = [deep]
        check.json_patch(r, "w", "j", deep, max_size=100)
    with pytest.raises(InvalidValueError, match="larger than the maximum frame size"):
        check.json_patch(r, "w", "j", "[" + " " * 200 + "]", max_size=100)
    with pytest.raises(check.RequestError, match="patch has the wrong type"):
        check.json_patch(r, "w", "j", 5, max_size=100)
    with pytest.raises(UnsatisfiedConstraintError):
        check.json_patch(r, "w", "j", "[]", ["locked", "l", 1], max_size=100)


def test_json_patch_needs_update_topic_on_the_path() -> None:
    r = registry()
    authorize(r, "w2", "json_patch", ["j", "[]"])
    authorize(r, "w2", "json_patch", ["j", "[]", None])
    with pytest.raises(PermissionDenied, match="UPDATE_TOPIC is needed on 'j'"):
        authorize(r, "r", "json_patch", ["j", "[]"])
    with pytest.raises(check.RequestError, match="json_patch takes 2 to 3 arguments"):
        authorize(r, "w", "json_patch", ["j"])


# -- limits on what a request may name (issue 11) ------------------------------------------

SMALL = Limits(max_path_length=20, max_path_segments=3, max_selector_length=30)

#: every check that takes a path from the client, with the path in place of "{}"
PATH_CHECKS: list[tuple[str, Any]] = [
    ("add", lambda r, p: check.add_topic(r, "w", p, "STRING")),
    ("set", lambda r, p: check.set_value(r, "w", p, b"", False, max_size=10)),
    ("json_patch", lambda r, p: check.json_patch(r, "w", p, "[]", max_size=10)),
    ("append", lambda r, p: check.append_event(r, "w", p, b"", False)),
    ("edit", lambda r, p: check.edit_event(r, "w", p, 1, b"", False)),
    ("range_query", lambda r, p: check.query_events(r, "w", p, "start", 0, "end", 0, "values")),
    ("tree branch", lambda r, p: check.tree_branch(r, p)),
    ("tree session branch", lambda r, p: check.tree_table(r, "w", p, [["all", "t"]])),
    ("tree topic branch", lambda r, p: check.tree_table(r, "w", "s", [["all", "t"], ["all", p]])),
    ("security path", lambda r, p: check.security_commands(r, "w", [["set_path_permissions", "X", p, []]])),
]
#: every check that takes a selector from the client (subscribe and unsubscribe use check.selector)
SELECTOR_CHECKS: list[tuple[str, Any]] = [
    ("subscribe", lambda r, s: check.selector(r, s)),
    ("remove", lambda r, s: check.remove_plan(r, "w", s)),
    ("fetch", lambda r, s: check.fetch_plan(r, "w", s)),
]


@pytest.mark.parametrize("name, call", PATH_CHECKS, ids=[n for n, _ in PATH_CHECKS])
def test_every_path_is_held_to_the_limits(name: str, call: Any) -> None:
    r = registry(limits=SMALL)
    call(r, "a/b/" + "c" * 16)  # 20 characters, 3 segments: at the limits
    with pytest.raises(PathError) as info:
        call(r, "a/b/" + "c" * 17)
    assert info.value.code == "INVALID_PATH"
    assert "path has 21 characters; at most 20 (max_path_length)" in str(info.value)
    with pytest.raises(PathError, match=r"path has 4 segments; at most 3 \(max_path_segments\)"):
        call(r, "a/b/c/d")
    call(r, "//a//b/c//")  # repeated separators are not segments


@pytest.mark.parametrize("name, call", SELECTOR_CHECKS, ids=[n for n, _ in SELECTOR_CHECKS])
def test_every_selector_is_held_to_the_limits(name: str, call: Any) -> None:
    r = registry(limits=SMALL)
    call(r, "?a/" + "b" * 27)  # 30 characters
    with pytest.raises(SelectorError) as info:
        call(r, "?a/" + "b" * 28)
    assert info.value.code == "INVALID_SELECTOR"
    assert "selector has 31 characters; at most 30 (max_selector_length)" in str(info.value)
    with pytest.raises(SelectorError, match=r"path has 4 segments; at most 3 \(max_path_segments\)"):
        call(r, "#>x////>a/b/c/d")
    with pytest.raises(SelectorError, match=r"split-path pattern has 4 segments; at most 3"):
        call(r, "?a/b/c/.*")


def test_the_default_limits_refuse_what_issue_11_sent() -> None:
    r = registry()
    with pytest.raises(PathError, match="path has 100,000 characters; at most 1,024") as info:
        check.add_topic(r, "w", "x" * 100_000, "STRING")
    assert len(str(info.value)) < 300  # names the limit; does not echo 100,000 characters back
    with pytest.raises(PathError, match="path has 79,999 characters"):
        check.add_topic(r, "w", "/".join(["x"] * 40_000), "STRING")
    with pytest.raises(PathError, match="path has 100 segments; at most 64"):
        check.add_topic(r, "w", "/".join(["x"] * 100), "STRING")
    with pytest.raises(SelectorError, match="selector has 5,001 characters; at most 4,096") as selector_info:
        check.selector(r, "*" + "a" * 5000)
    assert len(str(selector_info.value)) < 300
    check.add_topic(r, "w", "/".join(["abcdefghijklmno"] * 64), "STRING")  # 1,023 characters, 64 segments


def test_a_selector_over_the_limit_is_refused_before_it_is_parsed() -> None:
    """Its length alone refuses it: no regular expression is compiled for it."""
    with pytest.raises(SelectorError, match="max_selector_length"):
        check.selector(registry(limits=SMALL), "*(" * 20)
