from __future__ import annotations

import pytest

from sessions.notifications import IDENTITY, Lens, Notification, NotificationBook, NotificationType
from sessions.requests import RequestError
from sessions.trees import BranchMappingTable, SessionTrees
from topics.protocol import Absent, End, Present, TopicEvent
from topics.selectors import Selector, parse_selector

ADDED, SELECTED, REMOVED, DESELECTED = (
    NotificationType.ADDED, NotificationType.SELECTED, NotificationType.REMOVED, NotificationType.DESELECTED,
)


def sel(text: str) -> Selector:
    return parse_selector(text)


class Driver:
    """A book and what the partitions hold: registrations are answered with snapshots at once
    unless ``hold`` is set."""

    def __init__(self, *paths: str, lens: Lens = IDENTITY) -> None:
        self.book = NotificationBook()
        self.topics: dict[str, str] = {p: "STRING" for p in paths}
        self.lens = lens
        self.registered: dict[Selector, int] = {}
        self.hold = False
        self.held: list[TopicEvent] = []

    def feed(self, events: list[TopicEvent]) -> list[tuple[str, str, bool]]:
        out, _ = self.book.on_events(events, lambda _: self.lens)
        return shown(out)

    def select(self, text: str, listener: int = 1, *, descendants: bool = True,
               session: str = "s") -> list[tuple[str, str, bool]]:
        out, registrations, _ = self.book.select(session, listener, sel(text), self.lens, descendants=descendants)
        events: list[TopicEvent] = []
        for selector, token in registrations:
            self.registered[selector] = token
            events += [Present(token, p, t, []) for p, t in sorted(self.topics.items()) if selector.matches(p)]
            events.append(End(token))
        if self.hold:
            self.held += events
            return shown(out)
        return shown(out) + self.feed(events)

    def deselect(self, text: str, listener: int = 1) -> list[tuple[str, str, bool]]:
        out, gone = self.book.deselect("s", listener, sel(text), self.lens)
        for selector in gone:
            del self.registered[selector]
        return shown(out)

    def add(self, path: str, type_name: str = "STRING") -> list[tuple[str, str, bool]]:
        self.topics[path] = type_name
        if not any(s.matches(path) for s in self.registered):
            return []
        return self.feed([Present(0, path, type_name, [])])

    def remove(self, path: str) -> list[tuple[str, str, bool]]:
        del self.topics[path]
        if not any(s.matches(path) for s in self.registered):
            return []
        return self.feed([Absent(path)])


def shown(out: list[Notification]) -> list[tuple[str, str, bool]]:
    return [(n.type.value, n.path, n.descendant) for n in out]


def topic(kind: NotificationType, path: str) -> tuple[str, str, bool]:
    return (kind.value, path, False)


def below(kind: NotificationType, path: str) -> tuple[str, str, bool]:
    return (kind.value, path, True)


def test_selected_for_what_is_there_added_removed_deselected() -> None:
    d = Driver("a/x", "a/y", "b/z")
    assert d.select("?a/", descendants=False) == [topic(SELECTED, "a/x"), topic(SELECTED, "a/y")]
    assert d.add("a/w") == [topic(ADDED, "a/w")]
    assert d.add("b/q") == []
    assert d.remove("a/x") == [topic(REMOVED, "a/x")]
    assert sorted(d.deselect("?a/")) == [topic(DESELECTED, "a/w"), topic(DESELECTED, "a/y")]
    assert d.registered == {} and len(d.book.cache) == 0


def test_notifications_carry_the_specification() -> None:
    d = Driver()
    d.select(">j", descendants=False)
    out, _ = d.book.on_events([Present(0, "j", "JSON", [["PERSISTENT", "false"]])], lambda _: IDENTITY)
    assert out[0].specification is not None and out[0].specification.type.value == "JSON"
    assert out[0].specification.properties == {"PERSISTENT": "false"}


def test_a_second_selector_of_the_same_topics_tells_nothing_twice() -> None:
    d = Driver("a/x")
    assert d.select("?a/", descendants=False) == [topic(SELECTED, "a/x")]
    assert d.select(">a/x", descendants=False) == []
    assert d.deselect("?a/") == []  # still selected by >a/x
    assert d.deselect(">a/x") == [topic(DESELECTED, "a/x")]


def test_the_reference_systems_example_of_immediate_descendants() -> None:
    d = Driver("a/b", "a/c", "a/c/d", "a/e/f/g")
    assert d.select(">a") == [below(SELECTED, "a/b"), below(SELECTED, "a/c"), below(SELECTED, "a/e/f/g")]
    assert d.add("a/b/c") == []  # a/b is the first bound topic on its branch
    assert d.select(">a/b") == [topic(SELECTED, "a/b"), below(DESELECTED, "a/b"), below(SELECTED, "a/b/c")]
    assert d.add("a/e") == [below(ADDED, "a/e"), below(REMOVED, "a/e/f/g")]
    assert d.remove("a/c") == [below(REMOVED, "a/c"), below(ADDED, "a/c/d")]
    assert d.deselect(">a/b") == [topic(DESELECTED, "a/b"), below(DESELECTED, "a/b/c"), below(SELECTED, "a/b")]


def test_a_bound_selected_path_has_descendants_too() -> None:
    d = Driver("x", "x/y", "x/y/z", "x/q/r")
    assert d.select(">x") == [topic(SELECTED, "x"), below(SELECTED, "x/q/r"), below(SELECTED, "x/y")]
    assert d.remove("x") == [topic(REMOVED, "x")]  # x is still a selected path, if not bound


def test_descendants_wait_for_the_snapshot_to_be_complete() -> None:
    d = Driver("a/e/f/g", "a/e")
    d.hold = True
    assert d.select(">a") == []
    # the snapshot in pieces: a/e/f/g first would look like a descendant for a moment
    first, rest = d.held[:1], d.held[1:]
    assert d.feed(first) == []
    assert d.feed(rest) == [below(SELECTED, "a/e")]


def test_without_descendants_nothing_below_is_told() -> None:
    d = Driver("a/b", "a/c/d")
    assert d.select(">a", descendants=False) == []
    assert d.add("a/x") == []


class Unreadable:
    """Everything readable but ``secret/...``."""

    def session_paths(self, topic_path: str) -> list[str]:
        return [topic_path]

    def resolve(self, session_path: str) -> str:
        return session_path

    def interest(self, selector: Selector) -> list[Selector]:
        return [selector]

    def can_read(self, session_path: str) -> bool:
        return not session_path.startswith("a/secret")


def test_read_topic_filters_topics_and_descendants() -> None:
    d = Driver("a/open", "a/secret", "a/secret/x", lens=Unreadable())
    assert d.select("?a/") == [topic(SELECTED, "a/open")]
    assert d.add("a/secret/y") == []
    d2 = Driver("a/open", "a/secret", "a/secret/deeper", lens=Unreadable())
    assert d2.select(">a") == [below(SELECTED, "a/open")]  # a/secret still hides what is below it


def test_session_paths_name_the_topics_and_unmapped_paths_stay_hidden() -> None:
    trees = SessionTrees().put(BranchMappingTable.of("view", [("all", "real")]))
    resolution = trees.resolution_for({}, frozenset())

    class Mapped:
        def session_paths(self, topic_path: str) -> list[str]:
            return resolution.session_paths(topic_path)

        def resolve(self, session_path: str) -> str:
            return resolution.resolve(session_path)

        def interest(self, selector: Selector) -> list[Selector]:
            return resolution.interest(selector)

        def can_read(self, session_path: str) -> bool:
            return True

    d = Driver("real/x", "real/y/z", "view/hidden", lens=Mapped())
    assert d.select(">view") == [below(SELECTED, "view/x"), below(SELECTED, "view/y/z")]
    assert d.select(">view/x") == [topic(SELECTED, "view/x"), below(DESELECTED, "view/x")]
    assert all("real" not in path for _, path, _ in d.add("real/w"))


def test_limits_and_a_listener_keeps_its_kind() -> None:
    book = NotificationBook(max_listeners=2, max_selectors=3)
    book.select("s", 1, sel(">a"), IDENTITY)
    book.select("s", 1, sel(">b"), IDENTITY)
    book.select("s", 2, sel(">c"), IDENTITY)
    with pytest.raises(RequestError) as e:
        book.select("s", 2, sel(">d"), IDENTITY)
    assert e.value.code == "LIMIT_EXCEEDED"
    with pytest.raises(RequestError) as e:
        book.select("s", 3, sel(">d"), IDENTITY)
    assert e.value.code == "LIMIT_EXCEEDED"
    with pytest.raises(RequestError) as e:
        book.select("s", 1, sel(">d"), IDENTITY, descendants=True)
    assert e.value.code == "INVALID_REQUEST"
    book.select("t", 1, sel(">a"), IDENTITY)  # another session: its own limits
    assert book.close_session("s") == [sel(">b"), sel(">c")]  # >a is still the other session's
    assert book.close_session("t") == [sel(">a")]
    assert book.interest == {} and book.listeners == {}


def test_registrations_are_shared_and_completed_by_every_partition() -> None:
    book = NotificationBook(partitions_for=lambda _: 2)
    _, registrations, waits = book.select("s", 1, sel("?a/"), IDENTITY)
    [(selector, token)] = registrations
    assert token < 0 and waits == [token]
    _, again, waits2 = book.select("t", 1, sel("?a/"), IDENTITY)
    assert again == [] and waits2 == [token]
    assert book.on_events([End(token)], lambda _: IDENTITY) == ([], [])
    assert book.on_events([End(token)], lambda _: IDENTITY) == ([], [token])
    assert book.close("s", 1) == [] and book.close("t", 1) == [selector]


def test_a_restarted_partition_removes_what_it_no_longer_has() -> None:
    d = Driver("a/x", "a/y")
    d.select("?a/", descendants=False)
    d.book.resync_begin(lambda path: True)
    token = d.registered[sel("?a/")]
    assert d.feed([Present(token, "a/x", "STRING", []), End(token)]) == []
    assert shown(d.book.resync_end(lambda path: True, lambda _: IDENTITY)) == [topic(REMOVED, "a/y")]
