"""Missing-topic handlers: which registration hears of a selector, and how a held-back request ends."""

from __future__ import annotations

import pytest

from sessions.missing_topics import (
    CANCEL,
    MAX_HANDLERS_PER_SESSION,
    PROCEED,
    HandlerRegistry,
    MissingTopicError,
    Notification,
    Waits,
)
from topics.errors import PathError
from topics.selectors import parse_selector


def registry(*entries: tuple[str, str, str]) -> HandlerRegistry:
    out = HandlerRegistry()
    for token, path, session in entries:
        out.add(token, path, session)
    return out


@pytest.mark.parametrize(
    ("selector", "expected"),
    [
        ("a/d", "h-a"),          # a handler on A hears of a subscription to A/D
        (">a/d", "h-a"),
        ("?a/d/", "h-a"),
        ("a/b/c", "h-ab"),       # the most specific prefix wins
        ("?a/b//", "h-ab"),
        ("a/bc", "h-a"),         # segment-wise: a/b does not prefix a/bc
        ("?a/.*", "h-a"),        # path prefix a
        ("?.*/d", None),         # path prefix empty: no handler prefixes every path
        ("x/y", None),
        ("a", "h-a"),
    ],
)
def test_the_most_specific_prefix_of_the_selectors_path_prefix_is_notified(selector: str, expected: str | None) -> None:
    handlers = registry(("h-a", "a", "s1"), ("h-ab", "a/b", "s2"), ("h-abcd", "a/b/c/d", "s3"))
    found = handlers.handler_for(parse_selector(selector))
    assert (found.token if found else None) == expected


def test_one_handler_per_path_the_oldest_open_registration() -> None:
    handlers = registry(("first", "a", "s1"), ("second", "/a/", "s2"))
    assert handlers.handler_for(parse_selector("a/x")).token == "first"  # type: ignore[union-attr]
    handlers.remove("first")
    assert handlers.handler_for(parse_selector("a/x")).token == "second"  # type: ignore[union-attr]
    assert [r.token for r in handlers.remove_session("s2")] == ["second"]
    assert handlers.handler_for(parse_selector("a/x")) is None and len(handlers) == 0
    assert handlers.remove("nope") is None


def test_registrations_are_checked_and_bounded() -> None:
    handlers = HandlerRegistry()
    with pytest.raises(PathError):
        handlers.add("t", "//", "s1")
    handlers.add("t", "a", "s1")
    with pytest.raises(MissingTopicError, match="exists already"):
        handlers.add("t", "b", "s1")
    for k in range(1, MAX_HANDLERS_PER_SESSION):
        handlers.add(f"t{k}", f"p/{k}", "s1")
    with pytest.raises(MissingTopicError) as over:
        handlers.add("one-more", "q", "s1")
    assert over.value.code == "LIMIT_EXCEEDED"
    handlers.add("other", "q", "s2")  # another session's budget is its own


def test_a_request_proceeds_when_every_handler_said_proceed_and_is_abandoned_at_the_first_cancel() -> None:
    waits = Waits()
    both = waits.start(["local", "primary"], now=0.0, timeout=5.0)
    assert both is not None
    assert waits.answer(both.id, "local", PROCEED) is None  # the primary's answer is still out
    assert waits.answer(both.id, "local", PROCEED) is None  # said twice: nothing new
    assert waits.answer(both.id, "primary", PROCEED) == PROCEED and len(waits) == 0
    second = waits.start(["local", "primary"], now=0.0, timeout=5.0)
    assert second is not None
    assert waits.answer(second.id, "primary", CANCEL) == CANCEL
    assert waits.answer(second.id, "local", PROCEED) is None  # decided already
    assert waits.answer("m-unknown", "local", PROCEED) is None
    with pytest.raises(MissingTopicError, match="proceed or cancel"):
        waits.answer(second.id, "local", "maybe")


def test_silence_and_a_vanished_handler_count_as_proceed() -> None:
    waits = Waits()
    late = waits.start(["h"], now=10.0, timeout=2.0)
    gone = waits.start(["g", "h"], now=10.0, timeout=60.0)
    assert late is not None and gone is not None
    assert waits.expire(11.9) == []
    assert waits.expire(12.0) == [late.id]
    assert waits.handler_gone("g") == []  # h is still asked
    assert waits.handler_gone("h") == [(gone.id, PROCEED)] and len(waits) == 0


def test_no_handler_or_a_full_gateway_proceeds_at_once() -> None:
    waits = Waits(limit=1)
    assert waits.start([], now=0.0, timeout=1.0) is None
    assert waits.start(["h"], now=0.0, timeout=1.0) is not None
    assert waits.start(["h"], now=0.0, timeout=1.0) is None  # bounded: the next one does not wait


def test_a_notification_says_who_asked_and_through_which_servers() -> None:
    n = Notification("m1", "?a/d/", "s9", {"$Principal": "bob"}, ("secondary", "primary"))
    assert n.to_wire() == {"id": "m1", "selector": "?a/d/", "session_id": "s9",
                           "properties": {"$Principal": "bob"}, "servers": ["secondary", "primary"]}


def test_a_forgotten_wait_is_gone() -> None:
    waits = Waits()
    wait = waits.start(["h"], 0.0, 10.0)
    assert wait is not None and len(waits) == 1
    waits.forget(wait.id)
    assert len(waits) == 0 and waits.answer(wait.id, "h", PROCEED) is None
