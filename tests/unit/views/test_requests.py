"""Checking topic view requests: the source selector is held to the limits."""

from __future__ import annotations

import pytest

from sessions.limits import Limits
from sessions.registry import SessionRegistry
from topics.errors import SelectorError
from views import requests as check
from views.parser import ViewSpecError


def test_a_view_source_selector_is_held_to_the_limits() -> None:
    r = SessionRegistry(limits=Limits(max_selector_length=16, max_path_segments=3))
    r.open("s", "someone", {}, frozenset({"ALL"}))
    assert check.check_create(r, "s", "v", "map ?a/b// to c/<path(1)>") == ("v", "map ?a/b// to c/<path(1)>")
    with pytest.raises(SelectorError, match="selector has 17 characters; at most 16") as info:
        check.check_create(r, "s", "v", "map ?" + "a" * 16 + " to c/<path(0)>")
    assert info.value.code == "INVALID_SELECTOR"
    with pytest.raises(SelectorError, match="split-path pattern has 4 segments; at most 3"):
        check.check_create(r, "s", "v", "map ?a/b/c/d to c/<path(0)>")


def test_a_view_source_regex_re2_cannot_run_is_refused_where_it_is() -> None:
    r = SessionRegistry()
    r.open("s", "someone", {}, frozenset({"ALL"}))
    with pytest.raises(ViewSpecError, match="lookahead '\\(\\?=...\\)' is not supported") as info:
        check.check_create(r, "s", "v", "map *a(?=b) to c/<path(0)>")
    assert (info.value.line, info.value.column) == (1, 7)
