from __future__ import annotations

import pickle
import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from topics import paths
from topics.errors import SelectorError
from topics.selectors import (
    FullPathSelector,
    PathSelector,
    Qualifier,
    SelectorSet,
    SplitPathSelector,
    any_of,
    literal_text,
    parse_selector,
)

# conformance/selectors.md: does the selector match alpha/beta? alpha/beta/gamma?
VECTORS = [
    (">alpha/beta", True, False),
    (">/alpha/beta/", True, False),
    ("/alpha/beta/", True, False),
    (">.*/.*", False, False),
    ("?.*", False, False),
    ("?.*/.*", True, False),
    ("?alpha/beta/", False, True),
    ("?alpha/beta//", True, True),
    ("?alpha/.*//", True, True),
    ("*beta", False, False),
    ("*.*beta", True, False),
    ("*.*", True, True),
    ("*alpha/beta/", False, True),
]


@pytest.mark.parametrize(("expression", "two", "three"), VECTORS)
def test_conformance_vectors(expression: str, two: bool, three: bool) -> None:
    selector = parse_selector(expression)
    assert selector.matches("alpha/beta") is two
    assert selector.matches("alpha/beta/gamma") is three


@pytest.mark.parametrize(("expression", "two", "three"), VECTORS)
def test_conformance_vectors_inside_a_selector_set(expression: str, two: bool, three: bool) -> None:
    selector = parse_selector("#>never/matches////" + expression)
    assert selector.matches("alpha/beta") is two
    assert selector.matches("alpha/beta/gamma") is three


@pytest.mark.parametrize(
    ("expression", "kind"),
    [
        (">a", PathSelector),
        ("a/b", PathSelector),
        ("?a", SplitPathSelector),
        ("*a", FullPathSelector),
        ("#>a////>b", SelectorSet),
    ],
)
def test_forms(expression: str, kind: type) -> None:
    assert isinstance(parse_selector(expression), kind)


@pytest.mark.parametrize(
    ("expression", "qualifier"),
    [
        ("?a", Qualifier.MATCH),
        ("?a/", Qualifier.DESCENDANTS),
        ("?a//", Qualifier.MATCH_AND_DESCENDANTS),
        ("*a", Qualifier.MATCH),
        ("*a/", Qualifier.DESCENDANTS),
        ("*a//", Qualifier.MATCH_AND_DESCENDANTS),
    ],
)
def test_qualifiers(expression: str, qualifier: Qualifier) -> None:
    selector = parse_selector(expression)
    assert isinstance(selector, (SplitPathSelector, FullPathSelector))
    assert selector.qualifier is qualifier


def test_path_selector_regex_characters_are_literal() -> None:
    selector = parse_selector(">a.b/c*")
    assert selector.matches("a.b/c*")
    assert not selector.matches("axb/c")


def test_path_selector_trailing_slashes_are_not_qualifiers() -> None:
    assert parse_selector(">a/b//") == parse_selector(">a/b")
    assert not parse_selector(">a/b//").matches("a/b/c")


def test_split_path_regex_matches_whole_segment() -> None:
    selector = parse_selector("?al/beta")
    assert not selector.matches("alpha/beta")
    assert parse_selector("?al.*/beta").matches("alpha/beta")


def test_split_path_leading_slash_is_ignored() -> None:
    assert parse_selector("?/alpha/beta") == parse_selector("?alpha/beta")


def test_full_path_regex_applies_to_normal_form_path() -> None:
    assert not parse_selector("*/alpha/beta").matches("alpha/beta")
    assert parse_selector("*alpha/beta").matches("alpha/beta")


def test_selector_set_is_union_and_flattens() -> None:
    selector = parse_selector("#>a////#>b////?c/.*////>a")
    assert isinstance(selector, SelectorSet)
    assert [str(m) for m in selector.members] == [">a", ">b", "?c/.*"]
    assert selector.matches("a") and selector.matches("b") and selector.matches("c/x")
    assert not selector.matches("c")


def test_selector_set_member_qualifier_before_delimiter() -> None:
    selector = parse_selector("#?a//////>b")
    assert [str(m) for m in selector.members] == ["?a//", ">b"]
    assert parse_selector(str(selector)) == selector


def test_any_of() -> None:
    assert any_of(">a") == parse_selector(">a")
    assert str(any_of(">a", "?b/")) == "#>a////?b/"


# -- path prefix ------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "prefix"),
    [
        (">alpha/beta", "alpha/beta"),
        ("/alpha/beta/", "alpha/beta"),
        ("?alpha/beta/", "alpha/beta"),
        ("?alpha/.*//", "alpha"),
        ("?.*/beta", ""),
        ("?a\\.b/c", "a.b/c"),
        ("?alpha/be+ta", "alpha"),
        ("*alpha/beta/", "alpha/beta"),
        ("*alpha/be.*", "alpha"),
        ("*alpha/beta.*", "alpha"),
        ("*alpha/beta/.*", "alpha/beta"),
        ("*.*beta", ""),
        ("*a/bc*", "a"),
        ("*a/b/?c", "a"),
        ("*a/b|c/d", ""),
        ("*a/(b|c)/d", "a"),
        ("*a/[|]/d", "a"),
        ("*a\\/b/c.*", "a/b"),
        ("#>a/b/c////?a/b/.*", "a/b"),
        ("#>a/b////>c", ""),
    ],
)
def test_path_prefix(expression: str, prefix: str) -> None:
    assert parse_selector(expression).path_prefix == prefix


def test_literal_text() -> None:
    assert literal_text("abc") == "abc"
    assert literal_text("a\\.b") == "a.b"
    assert literal_text("a.b") is None
    assert literal_text("a\\d") is None


@pytest.mark.parametrize(
    ("expression", "literal"),
    [
        (">a/b", "a/b"),
        ("?a/b", "a/b"),
        ("?a/b/", None),
        ("?a/.*", None),
        ("*a/b", "a/b"),
        ("*a/b//", None),
        ("#>a", "a"),
        ("#>a////>b", None),
    ],
)
def test_literal_path(expression: str, literal: str | None) -> None:
    assert parse_selector(expression).literal_path == literal


# -- identity ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "canonical"),
    [
        ("alpha/beta", ">alpha/beta"),
        (">/alpha//beta/", ">alpha/beta"),
        ("?/a/b//", "?a/b//"),
        ("*a.*/", "*a.*/"),
        ("#a////?b", "#>a////?b"),
    ],
)
def test_canonical_expression(expression: str, canonical: str) -> None:
    selector = parse_selector(expression)
    assert str(selector) == canonical
    assert parse_selector(canonical) == selector
    assert hash(parse_selector(canonical)) == hash(selector)


def test_selectors_are_immutable_and_picklable() -> None:
    selector = parse_selector("#?a/.*//////*b.*")
    with pytest.raises(AttributeError):
        selector.expression = "x"  # type: ignore[misc]
    clone = pickle.loads(pickle.dumps(selector))
    assert clone == selector and clone.matches("a/x")


def test_equal_selectors_are_interchangeable_in_sets() -> None:
    assert len({parse_selector("a"), parse_selector(">a"), parse_selector(">/a/")}) == 1


# -- errors -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "position", "fragment"),
    [
        ("", 0, "empty selector"),
        (">", 1, "at least one non-empty segment"),
        (">//", 1, "at least one non-empty segment"),
        ("$a", 0, "reserved"),
        ("%a", 0, "reserved"),
        ("&a", 0, "reserved"),
        ("<a", 0, "reserved"),
        ("?", 1, "at least one regular expression"),
        ("?/", 1, "at least one regular expression"),
        ("?a//b", 3, "empty regular expression for path segment 1"),
        ("?a/b[", 4, "unterminated character set"),
        ("?a/(b", 3, "missing )"),
        ("*", 1, "needs a regular expression"),
        ("*a////b", 2, "may not contain '////'"),
        ("*a(", 2, "missing )"),
        ("#", 1, "at least one member"),
        ("#>a////", 7, "empty member"),
        ("#>a////$b", 7, "reserved"),
        ("#>a////?x(", 9, "missing )"),
        (">a\tb", 2, "control character"),
    ],
)
def test_invalid_selectors_name_problem_and_position(
    expression: str, position: int, fragment: str
) -> None:
    with pytest.raises(SelectorError) as info:
        parse_selector(expression)
    assert info.value.position == position, str(info.value)
    assert fragment in str(info.value)
    assert info.value.expression == expression


def test_non_string_selector() -> None:
    with pytest.raises(SelectorError, match="expected a string"):
        parse_selector(None)


# -- properties -------------------------------------------------------------

SEGMENTS = st.sampled_from(["a", "b", "ab", "a.b", "c"])
TOPIC_PATHS = st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join)
REGEX_PIECES = st.sampled_from(
    ["a", "b", "ab", ".", ".*", "[ab]", "a?", "b+", "(a|b)", "a|b", "\\.", "/", "c", "(ab)*", "[^/]+"]
)
REGEXES = st.lists(REGEX_PIECES, min_size=1, max_size=5).map("".join)
SEGMENT_REGEXES = st.lists(
    st.sampled_from(["a", "b", "ab", ".", ".*", "[ab]", "a?", "b+", "(a|b)", "a|b", "a\\.b", "c"]),
    min_size=1,
    max_size=3,
).map("".join)
QUALIFIERS = st.sampled_from(["", "/", "//"])


def _valid(expression: str) -> bool:
    try:
        parse_selector(expression)
    except SelectorError:
        return False
    return True


SIMPLE_SELECTORS = st.one_of(
    TOPIC_PATHS.map(lambda p: ">" + p),
    st.builds(lambda rs, q: "?" + "/".join(rs) + q, st.lists(SEGMENT_REGEXES, min_size=1, max_size=3), QUALIFIERS),
    st.builds(lambda r, q: "*" + r + q, REGEXES, QUALIFIERS),
).filter(_valid)
SELECTORS = st.one_of(
    SIMPLE_SELECTORS,
    st.lists(SIMPLE_SELECTORS, min_size=1, max_size=3).map(lambda ms: "#" + "////".join(ms)),
).filter(_valid)


@given(SELECTORS)
def test_round_trip(expression: str) -> None:
    selector = parse_selector(expression)
    again = parse_selector(str(selector))
    assert again == selector
    assert str(again) == str(selector)


@given(SELECTORS, TOPIC_PATHS)
def test_path_prefix_prefixes_every_match(expression: str, path: str) -> None:
    selector = parse_selector(expression)
    if selector.matches(path):
        assert paths.is_prefix(selector.path_prefix, path), (selector.path_prefix, path)


@given(SELECTORS, TOPIC_PATHS)
def test_matching_agrees_with_a_regex_oracle(expression: str, path: str) -> None:
    """Each form against an independent formulation of its meaning."""
    selector = parse_selector(expression)
    expected = False
    for member in selector.members:
        if isinstance(member, PathSelector):
            hit = member.path == path
        elif isinstance(member, SplitPathSelector):
            parts = path.split("/")
            n = len(member.patterns)
            candidates = []
            if member.qualifier.includes_self:
                candidates.append(n == len(parts))
            if member.qualifier.includes_descendants:
                candidates.append(len(parts) > n)
            hit = any(candidates) and all(
                re.fullmatch(p, s) for p, s in zip(member.patterns, parts)
            )
        else:
            assert isinstance(member, FullPathSelector)
            body = f"(?:{member.pattern})"
            tail = {"": "", "/": "/.+", "//": "(?:/.+)?"}[member.qualifier.value]
            try:
                hit = re.fullmatch(body + tail, path) is not None
            except re.error:
                assume(False)
                return
        expected = expected or hit
    assert selector.matches(path) is expected


@given(SELECTORS)
def test_literal_path_means_exactly_one_path(expression: str) -> None:
    selector = parse_selector(expression)
    literal = selector.literal_path
    if literal is not None:
        assert selector.matches(literal)
        assert not selector.matches(literal + "/x")


def test_full_path_with_global_flags_uses_ancestor_matching() -> None:
    selector = parse_selector("*(?i)ALPHA/beta/")
    assert isinstance(selector, FullPathSelector)
    assert selector.qualified is None
    assert selector.matches("alpha/beta/gamma")
    assert not selector.matches("alpha/beta")
    both = parse_selector("*(?i)ALPHA/beta//")
    assert both.matches("alpha/beta") and both.matches("Alpha/Beta/x")
    assert not both.matches("alpha/betax")
