from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sessions.trees import BranchMappingTable, Resolution, SessionTrees, TreeError
from topics import paths
from topics.selectors import parse_selector

PRICES = BranchMappingTable.of(
    "market/prices",
    [
        ("USER_TIER is '1' or $Country is 'DE'", "backend/discounted_prices"),
        ("USER_TIER is '2'", "backend/standard_prices"),
        ("$Principal is ''", "backend/delayed_prices"),
    ],
)


def test_the_specification_example() -> None:
    trees = SessionTrees().put(PRICES)
    tier2 = trees.resolution_for({"USER_TIER": "2", "$Principal": "bob"}, frozenset())
    assert tier2.resolve("market/prices/fish/cod") == "backend/standard_prices/fish/cod"
    assert tier2.resolve("market/other") == "market/other"
    german = trees.resolution_for({"$Country": "DE", "USER_TIER": "2"}, frozenset())
    assert german.resolve("market/prices/X") == "backend/discounted_prices/X"  # first matching mapping
    anonymous = trees.resolution_for({"$Principal": ""}, frozenset())
    assert anonymous.resolve("market/prices/X") == "backend/delayed_prices/X"
    nobody = trees.resolution_for({"$Principal": "carol", "USER_TIER": "3"}, frozenset())
    assert nobody.resolve("market/prices/X") == "market/prices/X"


def test_longest_applicable_prefix_wins() -> None:
    trees = SessionTrees().put(BranchMappingTable.of("a", [("all", "x")])).put(
        BranchMappingTable.of("a/b", [("T is '1'", "y"), ("T is '2'", "z")])
    )
    one = trees.resolution_for({"T": "1"}, frozenset())
    assert one.resolve("a/b/c") == "y/c" and one.resolve("a/q") == "x/q" and one.resolve("a/b") == "y"
    three = trees.resolution_for({"T": "3"}, frozenset())
    assert three.resolve("a/b/c") == "x/b/c"  # the longer table has no applicable mapping


def test_session_paths_inverts_resolve() -> None:
    r = Resolution((("market/prices", "backend/std"),))
    assert r.session_paths("backend/std/fish") == ["backend/std/fish", "market/prices/fish"]
    assert r.session_paths("market/prices/fish") == []  # hidden: that session path maps elsewhere
    assert r.session_paths("backend/std") == ["backend/std", "market/prices"]


def test_interest_translates_or_widens() -> None:
    r = Resolution((("market/prices", "backend/std"),))
    assert [str(s) for s in r.interest(parse_selector(">market/prices/fish"))] == [">backend/std/fish"]
    assert [str(s) for s in r.interest(parse_selector("?market/prices/.*"))] == ["?backend/std/.*"]
    assert [str(s) for s in r.interest(parse_selector("?market//"))] == ["?market//", "?backend/std//"]
    assert [str(s) for s in r.interest(parse_selector("*market/prices/.*"))] == ["?backend/std//"]
    assert [str(s) for s in r.interest(parse_selector(">other"))] == [">other"]


def test_put_replace_remove_and_relevant_keys() -> None:
    trees = SessionTrees().put(PRICES)
    assert trees.relevant_keys() == {"USER_TIER", "$Country", "$Principal"}
    replaced = trees.put(BranchMappingTable.of("market/prices", [("hasRoles 'VIP'", "vip")]))
    assert replaced.relevant_keys() == {"$Roles"} and replaced.version == 2
    assert replaced.put(BranchMappingTable.of("market/prices", [])).tables == {}
    assert trees.remove("market/prices").tables == {}
    assert SessionTrees.from_wire(trees.to_wire()).tables == trees.tables


@pytest.mark.parametrize(
    ("branch", "mappings", "fragment"),
    [
        ("", [("all", "x")], "session tree branch"),
        ("a", [("a is", "x")], "mapping 0: invalid session filter"),
        ("a", [("all", "x"), ("all", "//")], "mapping 1: topic tree branch"),
        ("a", [("all",)], "mapping 0: expected"),
    ],
)
def test_invalid_tables(branch: str, mappings: list[object], fragment: str) -> None:
    with pytest.raises(TreeError, match=fragment):
        BranchMappingTable.of(branch, mappings)


# -- the single mapping rule against a brute-force reading of it ----------------------

SEGS = st.sampled_from(["a", "b", "c"])
BRANCHES = st.lists(SEGS, min_size=1, max_size=3).map("/".join)
FILTERS = st.sampled_from(["all", "T is '1'", "T is '2'", "not T is '1'", "has U"])
TABLES = st.lists(
    st.tuples(BRANCHES, st.lists(st.tuples(FILTERS, BRANCHES), min_size=1, max_size=3)),
    max_size=4,
    unique_by=lambda t: t[0],
)
PROPS = st.fixed_dictionaries({}, optional={"T": st.sampled_from(["1", "2"]), "U": st.just("u")})


def brute_force(tables: list[tuple[str, list[tuple[str, str]]]], props: dict[str, str], session_path: str) -> str:
    from sessions.filters import parse_filter

    best: tuple[int, str, str] | None = None
    for branch, mappings in tables:
        if not paths.is_prefix(branch, session_path):
            continue
        for text, target in mappings:
            if parse_filter(text).matches(props):
                if best is None or paths.depth(branch) > best[0]:
                    best = (paths.depth(branch), branch, target)
                break
    if best is None:
        return session_path
    return paths.join(best[2], paths.relative(session_path, best[1]))


@settings(max_examples=300)
@given(TABLES, PROPS, BRANCHES)
def test_resolution_agrees_with_the_rule(
    tables: list[tuple[str, list[tuple[str, str]]]], props: dict[str, str], session_path: str
) -> None:
    trees = SessionTrees()
    for branch, mappings in tables:
        trees = trees.put(BranchMappingTable.of(branch, mappings))
    resolution = trees.resolution_for(props, frozenset())
    expected = brute_force(tables, props, session_path)
    assert resolution.resolve(session_path) == expected
    assert session_path in resolution.session_paths(expected)


@settings(max_examples=200)
@given(TABLES, PROPS, st.lists(BRANCHES, max_size=8), st.sampled_from(["?a//", ">a/b", "?.*/b", "*a.*", "?b/.*//", "?c"]))
def test_interest_covers_every_visible_topic(
    tables: list[tuple[str, list[tuple[str, str]]]], props: dict[str, str], topics: list[str], selector: str
) -> None:
    trees = SessionTrees()
    for branch, mappings in tables:
        trees = trees.put(BranchMappingTable.of(branch, mappings))
    resolution = trees.resolution_for(props, frozenset())
    sel = parse_selector(selector)
    interest = resolution.interest(sel)
    for topic in topics:
        if any(sel.matches(p) for p in resolution.session_paths(topic)):
            assert any(i.matches(topic) for i in interest), (topic, [str(i) for i in interest])
