from __future__ import annotations

import pickle
import re

import pytest
import re2  # type: ignore[import-untyped]
from hypothesis import assume, given
from hypothesis import strategies as st

from topics import paths
from topics.errors import SelectorError
from topics.selectors import (
    MAX_SELECTOR_DEPTH,
    FullPathSelector,
    PathSelector,
    Qualifier,
    SelectorSet,
    SplitPathSelector,
    any_of,
    compile_regex,
    literal_text,
    parse_selector,
)

# The selector language's specification cases: does the selector match alpha/beta? alpha/beta/gamma?
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
        ("?a/b[", 4, "unterminated character class"),
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


def test_inline_flags_stay_inside_the_qualified_pattern() -> None:
    selector = parse_selector("*(?i)ALPHA/beta/")
    assert isinstance(selector, FullPathSelector)
    assert selector.qualified is not None
    assert selector.matches("alpha/beta/gamma")
    assert not selector.matches("alpha/beta")
    both = parse_selector("*(?i)ALPHA/beta//")
    assert both.matches("alpha/beta") and both.matches("Alpha/Beta/x")
    assert not both.matches("alpha/betax")


def test_quoting_to_the_end_uses_ancestor_matching() -> None:
    """``\\Q`` without ``\\E`` would swallow the group's ``)``: no qualified form."""
    selector = parse_selector("*\\Qalpha.x/beta/")
    assert isinstance(selector, FullPathSelector)
    assert selector.qualified is None
    assert selector.matches("alpha.x/beta/gamma")
    assert not selector.matches("alpha.x/beta") and not selector.matches("alphaxx/beta/gamma")
    both = parse_selector("*\\Qalpha.x/beta//")
    assert both.matches("alpha.x/beta") and both.matches("alpha.x/beta/c/d")
    assert not both.matches("alpha.x/betax")


# -- the linear-time engine (RE2) -------------------------------------------


@pytest.mark.parametrize(
    ("expression", "position", "fragment"),
    [
        ("*a(?=b)", 2, "lookahead '(?=...)' is not supported"),
        ("*a(?!b)", 2, "negative lookahead"),
        ("*(?<=a)b", 1, "lookbehind '(?<=...)' is not supported"),
        ("*(?<!a)b", 1, "negative lookbehind"),
        ("?x/(a)\\1", 6, "backreference '\\1' is not supported"),
        ("*(?P<n>a)(?P=n)", 9, "backreference '(?P=name)'"),
        ("*(?<n>a)\\k<n>", 8, "backreference '\\k<name>'"),
        ("*a*+", 2, "possessive quantifier '*+'"),
        ("*ab?+c", 3, "possessive quantifier '?+'"),
        ("*a{2,3}+", 2, "possessive quantifier '{2,3}+'"),
        ("*(?>ab)c", 1, "atomic group"),
        ("*(?(1)a|b)", 1, "conditional"),
        ("*(?#note)a", 1, "comment"),
        ("*(?x)a b", 3, "inline flag 'x' is not supported"),
        ("*a{,3}", 2, "write '{0,3}'"),
        ("*a\\Z", 2, "use '\\z'"),
        ("*\\u0041", 1, "write '\\x{HHHH}'"),
        ("*a(", 2, "missing ): unterminated group"),
        ("*a)", 2, "unexpected )"),
        ("*\\p{Foo}", 1, "invalid character class range"),
        ("*a{1001}", 2, "invalid repetition size"),
        ("*\\p{L}{200}", 1, "the pattern is too large"),
        ("#>a////?b/x(?=y)//", 11, "lookahead"),
    ],
)
def test_what_re2_cannot_run_in_linear_time_is_refused_when_parsed(
    expression: str, position: int, fragment: str
) -> None:
    with pytest.raises(SelectorError) as info:
        parse_selector(expression)
    assert fragment in info.value.reason
    assert info.value.position == position, str(info.value)


@pytest.mark.parametrize(
    ("expression", "path"),
    [
        ("*[(?=]x", "=x"),  # in a class, "(?=" is three characters
        ("*\\(?=", "(="),  # an optional "(" (escaped), then "="
        ("*\\Qa(?=*\\E", "a(?=*"),  # quoted text is literal (Java has \Q..\E too)
        ("*a+?b??", "aab"),  # lazy quantifiers
        ("*\\x{41}+", "AA"),  # a braced escape followed by a quantifier is not possessive
        ("*(?i)ABC", "abc"),
        ("*(?P<n>a)(?<m>b)", "ab"),
        ("*\\pL\\p{Greek}", "xλ"),
        ("*[[:digit:]]+", "42"),
    ],
)
def test_lookalikes_of_unsupported_syntax_parse_and_match(expression: str, path: str) -> None:
    assert parse_selector(expression).matches(path)


def test_perl_classes_are_ascii_as_in_java() -> None:
    """``\\d``, ``\\w``, ``\\s`` and ``\\b`` are ASCII-only (Python's re would match ``٣``)."""
    assert parse_selector("?\\d+").matches("42")
    assert not parse_selector("?\\d+").matches("٣")
    assert not parse_selector("?\\w").matches("é")
    assert parse_selector("?\\pL").matches("é")


@pytest.mark.parametrize(
    "expression",
    ["*a/b\\Q(\\E|z", "*a/b[[:alpha:](]|z", "*a/b[]|(]|z"],
)
def test_top_level_alternation_is_found_past_quoting_and_classes(expression: str) -> None:
    """A missed top-level ``|`` would give a prefix ("a") that "z" does not start
    with: a permission check on the prefix would not cover every match."""
    selector = parse_selector(expression)
    assert selector.matches("z")
    assert selector.path_prefix == ""


REDOS = "(?:(?:[^!]*)*)*!"  # exponential for a backtracking engine on a path without "!"


@pytest.mark.parametrize(
    ("expression", "separator"),
    [
        ("*redos/" + REDOS, "x"),
        ("*redos/" + REDOS + "//", "/"),
        ("?redos/" + REDOS, "x"),
        ("#>a////*redos/" + REDOS + "/", "/"),
    ],
)
@pytest.mark.timeout(120)
def test_the_redos_selector_matches_in_linear_time(expression: str, separator: str) -> None:
    """Issue 11: ``*redos/(?:(?:[^!]*)*)*!`` stalled a partition for seconds on 12-character paths
    (a backtracking engine takes on the order of 4^n steps on a path of n characters without "!").
    Selectors run on RE2, whose matching is linear in the path: 1,000 paths of 12, 200 and 800
    characters are each answered, none matching. No time is asserted (the machine may be busy):
    a backtracking engine would not end within the test's timeout, which fails it."""
    selector = parse_selector(expression)

    def paths_of(length: int) -> list[str]:
        out = []
        for i in range(1000):
            head = f"redos/{i:04d}"
            body = ("xxxxxxxx" + separator) * length
            out.append((head + body)[: length - 1] + "x")
        return out

    for length in (12, 200, 800):
        for path in paths_of(length):
            assert not selector.matches(path), path


@pytest.mark.timeout(120)
def test_the_redos_selector_through_the_subscription_index() -> None:
    """The same selectors through the subscription index (no cache): every path answered, within
    the test's timeout, which a backtracking engine would never meet."""
    from topics.sublist import SubscriptionIndex

    index: SubscriptionIndex[str] = SubscriptionIndex(cache_size=0)
    index.add("*redos/" + REDOS + "//", "s")
    index.add("?redos/" + REDOS, "s")
    for i in range(1000):
        assert index.match(f"redos/{i:04d}" + "x" * 190) == frozenset()


# the oracle: on syntax both engines share, RE2 and Python's re agree
ORACLE_PIECES = st.sampled_from(
    ["a", "b", "é", ".", "*", "+", "?", "|", "(", ")", "(?:", "[ab]", "[^a]", "{1,2}", "{2}", "\\.", "^", "$"]
)
ORACLE_TEXTS = st.text(alphabet="abé.x", max_size=6)


@given(st.lists(ORACLE_PIECES, min_size=1, max_size=7).map("".join), st.lists(ORACLE_TEXTS, min_size=1, max_size=5))
def test_re2_agrees_with_python_re_where_both_apply(pattern: str, texts: list[str]) -> None:
    try:
        expected = re.compile(pattern)
    except re.error:
        assume(False)
        return
    try:
        compiled = compile_regex(pattern)
    except SelectorError as e:
        # what Python runs and RE2 does not is refused with a reason, never RE2's bare message
        assert "is not supported" in e.reason, e.reason
        return
    for text in texts:
        assert (compiled.fullmatch(text) is not None) == (expected.fullmatch(text) is not None), (pattern, text)


@given(
    st.lists(st.sampled_from(["a", "é", "日", "😀", ".", "[^a]", "\\pL", "\\w", "(a|é)", "*", "?"]), min_size=1, max_size=5).map("".join),
    st.text(alphabet="aé日😀x1", max_size=5),
)
def test_direct_matching_agrees_with_the_re2_module(pattern: str, text: str) -> None:
    """:class:`Regex` calls RE2's extension object directly (4-8x cheaper than
    the module's wrapper); the module's own ``fullmatch`` is the oracle."""
    options = re2.Options()
    options.log_errors = False
    try:
        expected = re2.fullmatch(pattern, text, options)
    except re2.error:
        assume(False)
        return
    assert (compile_regex(pattern).fullmatch(text) is not None) == (expected is not None)


def test_regexes_compare_by_pattern_and_pickle() -> None:
    regex = compile_regex("a.c")
    assert regex == compile_regex("a.c") and hash(regex) == hash(compile_regex("a.c"))
    clone = pickle.loads(pickle.dumps(regex))
    assert clone == regex and clone.fullmatch("abc") and clone.fullmatch("ab") is None
    with pytest.raises(AttributeError):
        regex.pattern = "x"  # type: ignore[misc]


def test_a_lone_surrogate_is_refused_in_a_pattern_and_harmless_in_a_path() -> None:
    """No wire decoder lets a lone surrogate through; a Python caller gets an answer, not an error."""
    assert parse_selector("*a.*").matches("a\ud800") in (True, False)
    assert not parse_selector("*ab").matches("a\ud800")
    with pytest.raises(SelectorError, match="lone surrogate U\\+D800"):
        parse_selector("*a\ud800")


@given(st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs"), blacklist_characters="/"), min_size=1))
def test_escaped_literals_are_literal_segments(text: str) -> None:
    """Session trees and OpenAjax names build segment patterns with re.escape."""
    selector = SplitPathSelector.of([re.escape(text)], Qualifier.MATCH)
    assert selector.literals == (text,)
    assert selector.regexes[0].fullmatch(text) is not None
    assert selector.matches(text)


# -- nesting ------------------------------------------------------------------


def test_the_hostile_probe_is_a_selector_error_not_a_recursion_error() -> None:
    """A fetch with this selector (under the 4,096-character limit) cut the connection."""
    expression = "#" * 2000 + ">a"
    with pytest.raises(SelectorError) as info:
        parse_selector(expression)
    assert info.value.position == MAX_SELECTOR_DEPTH  # the first "#" too many
    assert f"at most {MAX_SELECTOR_DEPTH} deep" in info.value.reason
    assert info.value.expression == expression


def test_sets_nest_exactly_as_deep_as_the_limit() -> None:
    assert parse_selector("#" * MAX_SELECTOR_DEPTH + ">a") == parse_selector("#>a")
    assert parse_selector("#>b////" + "#" * (MAX_SELECTOR_DEPTH - 1) + ">a") == parse_selector("#>b////>a")
    with pytest.raises(SelectorError, match=f"at most {MAX_SELECTOR_DEPTH} deep at position {7 + MAX_SELECTOR_DEPTH - 1}"):
        parse_selector("#>b////" + "#" * MAX_SELECTOR_DEPTH + ">a")  # the member's last "#"


@given(
    st.lists(SIMPLE_SELECTORS, min_size=1, max_size=3),
    st.data(),
    st.integers(min_value=0, max_value=3000),
)
def test_nesting_is_refused_past_the_limit_and_flattened_within_it(
    members: list[str], data: st.DataObject, extra: int
) -> None:
    """One member of a set is wrapped in ``extra`` more sets: ``#m1////###...m2``."""
    assume(_valid("#" + "////".join(members)))  # "*a//" + "//" is a selector, not a member
    at = data.draw(st.integers(min_value=0, max_value=len(members) - 1))
    wrapped = [("#" * extra + m if i == at else m) for i, m in enumerate(members)]
    expression = "#" + "////".join(wrapped)
    if 1 + extra <= MAX_SELECTOR_DEPTH:
        assert parse_selector(expression) == parse_selector("#" + "////".join(members))
        return
    with pytest.raises(SelectorError) as info:
        parse_selector(expression)
    start = 1 + sum(len(m) + 4 for m in members[:at])
    assert info.value.position == start + MAX_SELECTOR_DEPTH - 1, str(info.value)
    assert f"at most {MAX_SELECTOR_DEPTH} deep" in info.value.reason


@given(
    st.lists(
        st.one_of(
            st.integers(min_value=1, max_value=1500).map(lambda n: "#" * n),
            st.integers(min_value=1, max_value=300).map(lambda n: "(" * n),
            st.sampled_from([">a", "?a", "*a", "////", "/", "//", ")", "a", "[", "\\"]),
        ),
        max_size=8,
    ).map("".join)
)
def test_no_selector_text_raises_anything_but_a_selector_error(expression: str) -> None:
    try:
        parse_selector(expression[:4096])
    except SelectorError:
        pass


def test_deeply_nested_groups_are_left_to_re2() -> None:
    """RE2 parses with explicit stacks: nesting costs memory, not recursion."""
    for depth in (100, 2000):
        selector = parse_selector("*" + "(" * depth + "a" + ")" * depth + "//")
        assert selector.matches("a/b") and not selector.matches("b")
