"""What a request may name: the limits and the errors they give."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from cluster.config import ServerConfig
from sessions.limits import Limits, PropertyLimitError
from topics.errors import PathError, SelectorError
from topics.selectors import parse_selector


def test_the_defaults_are_the_settings_defaults() -> None:
    assert Limits() == Limits.from_settings(ServerConfig())
    assert Limits.from_settings(SimpleNamespace(max_path_length=100, queue_limit=5)) == Limits(max_path_length=100)


def test_a_path_is_normalised_then_measured() -> None:
    limits = Limits(max_path_length=16, max_path_segments=2)
    assert limits.path("//a//" + "b" * 14 + "//") == "a/" + "b" * 14
    with pytest.raises(PathError) as info:
        limits.path("a/b/c")
    assert info.value.reason == "path has 3 segments; at most 2 (max_path_segments)"
    with pytest.raises(PathError, match="non-empty segment"):
        limits.path("///")  # an invalid path is still refused as invalid


def test_errors_show_the_start_of_long_text_and_how_long_it_is() -> None:
    limits = Limits(max_path_length=16)
    with pytest.raises(PathError) as info:
        limits.path("p" * 50_000)
    assert info.value.path == "p" * 40 + "... (50,000 characters)"
    with pytest.raises(SelectorError) as selector_info:
        limits.selector(">" + "s" * 50_000)
    assert selector_info.value.expression.endswith("... (50,001 characters)")
    assert selector_info.value.position == 4096


def test_a_parsed_selector_is_measured_by_its_canonical_expression() -> None:
    limits = Limits(max_selector_length=16)
    limits.check_selector(parse_selector("#a////b"))  # "#>a////>b"
    with pytest.raises(SelectorError, match="selector has 17 characters; at most 16"):
        limits.check_selector(parse_selector("?" + "a" * 16))


def test_selector_members_may_not_name_paths_over_the_limits() -> None:
    limits = Limits(max_path_length=16, max_path_segments=2)
    limits.selector("#>a/b////?a/b//////*a/b/c/d")  # a full-path regex names no segments
    with pytest.raises(SelectorError, match="path has 17 characters; at most 16"):
        limits.selector(">" + "x" * 17)
    with pytest.raises(SelectorError, match="split-path pattern has 3 segments; at most 2"):
        limits.selector("?a/b/c//")


@pytest.mark.parametrize("name", ["", "$Principal", "$anything"])
def test_a_client_may_not_name_the_servers_properties(name: str) -> None:
    with pytest.raises(PropertyLimitError, match="may not be empty or start with"):
        Limits().user_properties({name: "x"})
    Limits().user_properties({"tier": "gold"})  # its own are fine
