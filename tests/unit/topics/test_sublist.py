from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.unit.topics.strategies import SELECTORS, TOPIC_PATHS
from topics.sublist import SubscriptionIndex

CACHE_SIZES = [0, 4, 4096]


@pytest.fixture(params=CACHE_SIZES, ids=lambda n: f"cache{n}")
def index(request: pytest.FixtureRequest) -> SubscriptionIndex[str]:
    return SubscriptionIndex(cache_size=request.param)


def test_match_each_form(index: SubscriptionIndex[str]) -> None:
    index.add(">a/b", "path")
    index.add("?a/.*", "split")
    index.add("?a/", "desc")
    index.add("*.*/b//", "full")
    index.add("#>z////?a/b//", "set")
    assert index.match("a/b") == {"path", "split", "desc", "full", "set"}
    assert index.match("a/c") == {"split", "desc"}
    assert index.match("a/b/c") == {"desc", "full", "set"}
    assert index.match("z") == {"set"}
    assert index.match("q") == set()


def test_subscriber_reported_once_and_kept_while_any_selector_matches(
    index: SubscriptionIndex[str],
) -> None:
    index.add(">a", "s")
    index.add("?a", "s")
    assert index.match("a") == {"s"}
    index.remove(">a", "s")
    assert index.match("a") == {"s"}
    index.remove("?a", "s")
    assert index.match("a") == set()


def test_interest_transitions(index: SubscriptionIndex[str]) -> None:
    assert index.add("?a/.*", "s1") is True
    assert index.add("?a/.*", "s2") is False
    assert index.add("?a/.*", "s2") is False  # duplicate
    assert index.remove("?a/.*", "s1") is False
    assert index.remove("?a/.*", "s2") is True
    assert index.remove("?a/.*", "s2") is False  # not registered
    assert list(index.selectors()) == []


def test_cache_is_patched_on_add_and_dropped_on_remove() -> None:
    index: SubscriptionIndex[str] = SubscriptionIndex(cache_size=16)
    index.add("?a/.*", "s1")
    assert index.match("a/b") == {"s1"}
    generation = index.generation
    index.add(">a/b", "s2")
    assert index.generation > generation
    assert index.match("a/b") == {"s1", "s2"}
    index.remove("?a/.*", "s1")
    assert index.match("a/b") == {"s2"}


def test_cache_is_bounded() -> None:
    index: SubscriptionIndex[str] = SubscriptionIndex(cache_size=8)
    index.add("?.*", "s")
    for i in range(100):
        assert index.match(f"p{i}") == {"s"}
    assert len(index._cache) <= 8


def test_removal_prunes_the_trie(index: SubscriptionIndex[str]) -> None:
    for sel in [">a/b/c", "?a/.*/c//", "*a/b.*", "#>x////?y/"]:
        index.add(sel, "s")
    for sel in [">a/b/c", "?a/.*/c//", "*a/b.*", "#>x////?y/"]:
        index.remove(sel, "s")
    assert index._root.is_empty()
    assert len(index) == 0


OPS = st.lists(
    st.tuples(st.booleans(), SELECTORS, st.sampled_from(["s1", "s2", "s3"])),
    max_size=30,
)


@settings(max_examples=300)
@given(OPS, st.lists(TOPIC_PATHS, min_size=1, max_size=12))
@pytest.mark.parametrize("cache_size", CACHE_SIZES)
def test_match_agrees_with_brute_force_oracle(
    cache_size: int, ops: list[tuple[bool, str, str]], paths: list[str]
) -> None:
    index: SubscriptionIndex[str] = SubscriptionIndex(cache_size=cache_size)
    registered: set[tuple[str, str]] = set()
    from topics.selectors import parse_selector

    for add, expression, subscriber in ops:
        key = (str(parse_selector(expression)), subscriber)
        if add:
            index.add(expression, subscriber)
            registered.add(key)
        else:
            index.remove(expression, subscriber)
            registered.discard(key)
        # interleave matching so cached entries exist while the index changes
        for path in paths[:3]:
            index.match(path)
    for path in paths:
        expected = {s for e, s in registered if parse_selector(e).matches(path)}
        assert index.match(path) == expected
        assert index.match_brute_force(path) == expected
    assert len(index) == len(registered)
