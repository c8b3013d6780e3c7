from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.topics.strategies import SELECTORS, TOPIC_PATHS
from topics.errors import InvalidValueError, PathError, TopicConflictError
from topics.selectors import parse_selector
from topics.specification import TopicSpecification
from topics.tree import Topic, TopicTree, _Node
from topics.types import TopicType, encode

JSON = TopicSpecification.of("JSON")
STRING = TopicSpecification.of("STRING")


def check_structure(tree: TopicTree) -> None:
    """Every topic sits at its path; no interior node is left without children."""
    found = 0
    stack: list[tuple[_Node | Topic, str]] = [(tree._root, "")]
    while stack:
        entry, path = stack.pop()
        if isinstance(entry, Topic):
            assert entry.path == path and tree.get(path) is entry
            found += 1
            continue
        if entry is not tree._root:
            assert entry.children, f"empty interior node at {path!r}"
        if entry.topic is not None:
            assert entry.topic.path == path and tree.get(path) is entry.topic
            found += 1
        for segment, child in entry.children.items():
            stack.append((child, f"{path}/{segment}" if path else segment))
    assert found == len(tree)


def tree_of(*paths: str) -> TopicTree:
    tree = TopicTree()
    for p in paths:
        tree.add(p, JSON)
    return tree


def selected(tree: TopicTree, selector: str) -> list[str]:
    return sorted(t.path for t in tree.select(selector))


def test_add_get_and_exists() -> None:
    tree = TopicTree()
    topic, created = tree.add("/a/b/", JSON)
    assert created and topic.path == "a/b" and tree.get("a/b") is topic
    again, created = tree.add("a/b", JSON)
    assert again is topic and not created
    assert len(tree) == 1 and "a/b" in tree and "a" not in tree


def test_add_with_a_different_specification_is_a_conflict() -> None:
    tree = tree_of("a")
    with pytest.raises(TopicConflictError, match="already exists"):
        tree.add("a", STRING)
    assert tree.get("a").specification == JSON  # type: ignore[union-attr]


def test_add_rejects_bad_paths() -> None:
    with pytest.raises(PathError):
        TopicTree().add("//", JSON)


def test_set_value_validates() -> None:
    tree = tree_of("a")
    tree.set_value("a", encode(TopicType.JSON, {"x": 1}))
    with pytest.raises(InvalidValueError):
        tree.set_value("a", b"\xff")
    assert tree.get("a").value == encode(TopicType.JSON, {"x": 1})  # type: ignore[union-attr]
    with pytest.raises(KeyError):
        tree.set_value("missing", b"")


def test_time_series_topics_hold_a_log() -> None:
    tree = TopicTree()
    spec = TopicSpecification.of("TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "DOUBLE"})
    topic, _ = tree.add("ts", spec)
    assert topic.log is not None
    with pytest.raises(InvalidValueError, match="append events"):
        tree.set_value("ts", encode(TopicType.DOUBLE, 1.0))


def test_select_forms() -> None:
    tree = tree_of("a", "a/b", "a/b/c", "a/x", "b/b")
    assert selected(tree, ">a/b") == ["a/b"]
    assert selected(tree, "?a/.*") == ["a/b", "a/x"]
    assert selected(tree, "?a/") == ["a/b", "a/b/c", "a/x"]
    assert selected(tree, "?a//") == ["a", "a/b", "a/b/c", "a/x"]
    assert selected(tree, "*.*/b") == ["a/b", "b/b"]
    assert selected(tree, "*a/b//") == ["a/b", "a/b/c"]
    assert selected(tree, "#>a////?.*/b") == ["a", "a/b", "b/b"]
    assert selected(tree, ">missing") == []


def test_remove_keeps_descendants_and_prunes_nodes() -> None:
    tree = tree_of("a", "a/b/c")
    assert tree.remove("a") is not None
    assert selected(tree, "?.*//") == ["a/b/c"]
    tree.remove("a/b/c")
    assert len(tree) == 0
    assert tree._root.children == {}  # no dangling intermediate nodes
    assert tree.remove("a/b/c") is None


def test_leaf_and_interior_topics_change_places() -> None:
    tree = tree_of("a")
    tree.add("a/b/c", JSON)
    check_structure(tree)
    tree.remove("a/b/c")
    check_structure(tree)
    assert isinstance(tree._root.children["a"], Topic)
    tree.add("a/b", JSON)
    tree.remove("a")
    check_structure(tree)
    assert selected(tree, "?.*//") == ["a/b"]


def test_remove_selected() -> None:
    tree = tree_of("a", "a/b", "a/c", "d")
    removed = tree.remove_selected("?a//")
    assert sorted(t.path for t in removed) == ["a", "a/b", "a/c"]
    assert list(tree.paths()) == ["d"]


def test_descendants() -> None:
    tree = tree_of("a", "a/b", "a/b/c", "ab")
    assert sorted(t.path for t in tree.descendants("a")) == ["a/b", "a/b/c"]
    assert sorted(t.path for t in tree.descendants("")) == ["a", "a/b", "a/b/c", "ab"]
    assert list(tree.descendants("zz")) == []


@settings(max_examples=300)
@given(st.lists(TOPIC_PATHS, max_size=25, unique=True), SELECTORS)
def test_select_agrees_with_brute_force(paths: list[str], expression: str) -> None:
    tree = tree_of(*paths)
    check_structure(tree)
    selector = parse_selector(expression)
    chosen = [t.path for t in tree.select(selector)]
    assert len(chosen) == len(set(chosen)), "each topic is selected once"
    assert sorted(chosen) == sorted(p for p in paths if selector.matches(p))


@settings(max_examples=200)
@given(
    st.lists(TOPIC_PATHS, max_size=25, unique=True),
    st.lists(TOPIC_PATHS, max_size=10),
    SELECTORS,
)
def test_select_after_removals_agrees_with_brute_force(
    paths: list[str], removed: list[str], expression: str
) -> None:
    tree = tree_of(*paths)
    for p in removed:
        tree.remove(p)
    check_structure(tree)
    left = [p for p in paths if p not in set(removed)]
    selector = parse_selector(expression)
    assert sorted(t.path for t in tree.select(selector)) == sorted(
        p for p in left if selector.matches(p)
    )


def test_first_below_is_the_first_topic_on_each_branch() -> None:
    tree = tree_of("a/b", "a/c", "a/c/d", "a/e/f/g", "x")
    assert sorted(t.path for t in tree.first_below("a")) == ["a/b", "a/c", "a/e/f/g"]
    assert sorted(t.path for t in tree.first_below("")) == ["a/b", "a/c", "a/e/f/g", "x"]
    assert [t.path for t in tree.first_below("a/c")] == ["a/c/d"]
    assert list(tree.first_below("a/b")) == [] and list(tree.first_below("nowhere")) == []


@settings(max_examples=100, deadline=None)
@given(st.lists(TOPIC_PATHS, max_size=20, unique=True))
def test_first_below_agrees_with_its_definition(paths: list[str]) -> None:
    tree = tree_of(*paths)
    for top in {""} | {p.rsplit("/", 1)[0] for p in paths if "/" in p}:
        def between(path: str) -> bool:
            parts = path.split("/")
            start = len(top.split("/")) if top else 0
            return any("/".join(parts[:k]) in tree for k in range(start + 1, len(parts)))
        below = [p for p in paths if (not top or p.startswith(top + "/")) and p != top]
        assert sorted(t.path for t in tree.first_below(top)) == sorted(p for p in below if not between(p))
