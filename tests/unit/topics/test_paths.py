from __future__ import annotations

import pytest

from topics import paths
from topics.errors import PathError


@pytest.mark.parametrize(
    ("given", "normal"),
    [
        ("a", "a"),
        ("a/b/c", "a/b/c"),
        ("/a/b/", "a/b"),
        ("//a///b//", "a/b"),
        ("a b/ c ", "a b/ c "),
        ("ünï/cødé", "ünï/cødé"),
    ],
)
def test_normalise(given: str, normal: str) -> None:
    assert paths.normalise(given) == normal
    assert paths.is_normal(normal)


@pytest.mark.parametrize("given", ["", "/", "////"])
def test_empty_paths_are_rejected(given: str) -> None:
    with pytest.raises(PathError, match="at least one non-empty segment"):
        paths.normalise(given)


@pytest.mark.parametrize(("given", "position"), [("a\x00b", 1), ("ab/\n", 3), ("x\x7f", 1), ("\x9fy", 0)])
def test_control_characters_are_rejected_with_position(given: str, position: int) -> None:
    with pytest.raises(PathError) as info:
        paths.normalise(given)
    assert info.value.position == position
    assert "control character" in str(info.value)


def test_non_string_is_rejected() -> None:
    with pytest.raises(PathError, match="expected a string"):
        paths.normalise(42)


def test_segments_depth_parent_ancestors() -> None:
    assert paths.segments("a/b/c") == ("a", "b", "c")
    assert paths.segments("") == ()
    assert paths.depth("a/b/c") == 3
    assert paths.depth("") == 0
    assert paths.parent("a/b/c") == "a/b"
    assert paths.parent("a") == ""
    assert paths.ancestors("a/b/c") == ["a", "a/b"]
    assert paths.ancestors("a") == []


def test_prefix_tests_are_segment_wise() -> None:
    assert paths.is_prefix("a/b", "a/b/c")
    assert paths.is_prefix("a/b", "a/b")
    assert not paths.is_prefix("a/b", "a/bc")
    assert not paths.is_prefix("a/b/c", "a/b")
    assert paths.is_prefix("", "anything/at/all")
    assert paths.is_descendant("a/b/c", "a/b")
    assert not paths.is_descendant("a/b", "a/b")
    assert paths.relative("a/b/c", "a") == "b/c"
    assert paths.relative("a/b", "") == "a/b"
    with pytest.raises(PathError):
        paths.relative("a/b", "x")


def test_join_and_common_prefix() -> None:
    assert paths.join("root", "a/b") == "root/a/b"
    assert paths.join("", "/a/") == "a"
    assert paths.common_prefix(["a/b/c", "a/b/d", "a/b"]) == "a/b"
    assert paths.common_prefix(["a/bc", "a/bd"]) == "a"
    assert paths.common_prefix(["x", "y"]) == ""
    assert paths.common_prefix([]) == ""
