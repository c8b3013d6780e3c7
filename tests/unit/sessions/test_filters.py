from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sessions.filters import MAX_FILTER_DEPTH, FilterSyntaxError, parse_filter

ROLES = frozenset({"TRADER", "ADMIN"})


@pytest.mark.parametrize(
    ("text", "properties", "expected"),
    [
        # the specification's examples
        ("USER_TIER is '1' or $Country is 'DE'", {"USER_TIER": "1"}, True),
        ("USER_TIER is '1' or $Country is 'DE'", {"$Country": "DE"}, True),
        ("USER_TIER is '1' or $Country is 'DE'", {"USER_TIER": "2", "$Country": "FR"}, False),
        ("USER_TIER is '2'", {"USER_TIER": "2"}, True),
        ("USER_TIER is '2'", {}, False),
        ("$Principal is ''", {"$Principal": ""}, True),
        ("$Principal is ''", {"$Principal": "alice"}, False),
        # every operator
        ("a eq 'x'", {"a": "x"}, True),
        ("a ne 'x'", {"a": "y"}, True),
        ("a ne 'x'", {}, True),
        ("a ne 'x'", {"a": "x"}, False),
        ("a matches 'x[0-9]+'", {"a": "x12"}, True),
        ("a matches 'x[0-9]+'", {"a": "x12y"}, False),
        ("a matches '.*'", {}, False),
        ("has a", {"a": ""}, True),
        ("has a", {}, False),
        ("a in ['x', \"y\"]", {"a": "y"}, True),
        ("a in ['x', 'y']", {"a": "z"}, False),
        ("a in []", {"a": "z"}, False),
        ("hasRoles 'TRADER'", {}, True),
        ("hasRoles 'TRADER' 'ADMIN'", {}, True),
        ("hasRoles 'TRADER' 'AUDITOR'", {}, False),
        ("all", {}, True),
        ("not all", {}, False),
        ("not a is 'x'", {"a": "x"}, False),
        # precedence and grouping
        ("a is '1' or b is '1' and c is '1'", {"a": "1"}, True),
        ("(a is '1' or b is '1') and c is '1'", {"a": "1"}, False),
        ("a is '1' and b is '1' or c is '1'", {"c": "1"}, True),
        # case: operators no, keys and values yes
        ("a IS 'x' AND HAS b Or NOT all", {"a": "x", "b": "1"}, True),
        ("A is 'x'", {"a": "x"}, False),
        ("a is 'X'", {"a": "x"}, False),
        # quoting
        ("a is 'it\\'s'", {"a": "it's"}, True),
        ('a is "say \\"hi\\""', {"a": 'say "hi"'}, True),
        ("a is 'back\\\\slash'", {"a": "back\\slash"}, True),
        ("$Country is 'DE'\nor\n$Country is 'FR'", {"$Country": "FR"}, True),
    ],
)
def test_evaluation(text: str, properties: dict[str, str], expected: bool) -> None:
    assert parse_filter(text).matches(properties, ROLES) is expected


@pytest.mark.parametrize(
    ("text", "line", "column", "fragment"),
    [
        ("", 1, 1, "empty filter"),
        ("a is", 1, 5, "ends too early"),
        ("a is 'x", 1, 6, "unexpected character"),
        ("a == 'x'", 1, 3, "expected 'in', 'is', 'matches', 'ne'"),
        ("a is 'x' b is 'y'", 1, 10, "unexpected 'b'"),
        ("(a is 'x'", 1, 10, "expected ')'"),
        ("a matches '('", 1, 12, "invalid regular expression"),
        ("a matches 'x(?<=y)'", 1, 13, "lookbehind '(?<=...)' is not supported"),
        ("a is 'x' and\n b matches 'p\\\\2'", 2, 14, "backreference '\\2' is not supported"),
        ("a is 'x' and\n\nb", 3, 2, "ends too early"),
        ("hasRoles", 1, 9, "a quoted value"),
    ],
)
def test_syntax_errors_say_where(text: str, line: int, column: int, fragment: str) -> None:
    with pytest.raises(FilterSyntaxError) as info:
        parse_filter(text)
    error = info.value
    assert (error.line, error.column) == (line, column), str(error)
    assert fragment in str(error)
    rendered = str(error).splitlines()
    assert rendered[-1].endswith("^") and len(rendered[-1]) == column


def test_keys_read() -> None:
    f = parse_filter("USER_TIER is '1' or $Country is 'DE' and hasRoles 'X' and not has Y")
    assert f.keys() == {"USER_TIER", "$Country", "$Roles", "Y"}


KEYS = st.sampled_from(["a", "b", "$P"])
VALUES = st.sampled_from(["", "x", "y", "it's", 'q"'])


def _quote(v: str) -> str:
    return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"


ATOMS = st.one_of(
    st.builds(lambda k, v: (f"{k} is {_quote(v)}", lambda p: p.get(k) == v), KEYS, VALUES),
    st.builds(lambda k, v: (f"{k} ne {_quote(v)}", lambda p: p.get(k) != v), KEYS, VALUES),
    st.builds(lambda k: (f"has {k}", lambda p: k in p), KEYS),
    st.just(("all", lambda p: True)),
)


def _combine(children: st.SearchStrategy) -> st.SearchStrategy:  # type: ignore[type-arg]
    return st.one_of(
        st.builds(lambda a, b: (f"({a[0]}) and ({b[0]})", lambda p: a[1](p) and b[1](p)), children, children),
        st.builds(lambda a, b: (f"({a[0]}) or ({b[0]})", lambda p: a[1](p) or b[1](p)), children, children),
        st.builds(lambda a: (f"not ({a[0]})", lambda p: not a[1](p)), children),
    )


FILTERS = st.recursive(ATOMS, _combine, max_leaves=6)
PROPERTIES = st.dictionaries(KEYS, VALUES, max_size=3)


@given(FILTERS, PROPERTIES)
def test_generated_filters_agree_with_python(case: tuple[str, object], properties: dict[str, str]) -> None:
    text, oracle = case
    assert parse_filter(text).matches(properties) is oracle(properties)  # type: ignore[operator]


@given(FILTERS)
def test_printed_filters_parse_to_the_same_meaning(case: tuple[str, object]) -> None:
    tree = parse_filter(case[0]).tree
    assert parse_filter(str(tree)).tree == tree


def test_matches_runs_in_linear_time() -> None:
    """A backtracking engine takes exponential time on this pattern and value (issue 11)."""
    session_filter = parse_filter("A matches '(?:(?:[^!]*)*)*!'")
    assert not session_filter.matches({"A": "x" * 10_000})
    assert session_filter.matches({"A": "x" * 10_000 + "!"})


def test_matches_uses_re2_classes() -> None:
    assert parse_filter("A matches '[[:digit:]]+'").matches({"A": "42"})
    assert not parse_filter("A matches '\\\\d'").matches({"A": "٣"})  # ASCII digits, as in Java


# -- nesting -------------------------------------------------------------------------

# each wraps a filter in one more operator: prefix, suffix, what the wrapper does
# to the value inside (for properties {"a": "1"}), and where in the prefix the
# operator's syntax tree node starts (its first operand)
WRAPPERS = {
    "not": ("not (", ")", lambda inner: not inner, 0),
    "and": ("has a and (", ")", lambda inner: inner, 0),
    "or": ("(has b or (", "))", lambda inner: inner, 1),
}


@given(
    st.lists(st.sampled_from(sorted(WRAPPERS)), min_size=1, max_size=3),
    st.integers(min_value=1, max_value=4000),
    st.sampled_from(["all", "not all"]),
)
def test_nesting_is_refused_past_the_limit_with_its_position(kinds: list[str], depth: int, core: str) -> None:
    """``not not ... (a and (b or (...)))`` nested ``depth`` deep (``core`` adds a level if it is a ``not``)."""
    chosen = [kinds[i % len(kinds)] for i in range(depth)]
    text = "".join(WRAPPERS[k][0] for k in chosen) + core + "".join(WRAPPERS[k][1] for k in reversed(chosen))
    levels = depth + (core != "all")
    if levels <= MAX_FILTER_DEPTH:
        expected = core == "all"
        for kind in reversed(chosen):
            expected = WRAPPERS[kind][2](expected)
        session_filter = parse_filter(text)
        assert session_filter.matches({"a": "1"}) is expected
        assert parse_filter(str(session_filter.tree)).tree == session_filter.tree
        return
    with pytest.raises(FilterSyntaxError) as info:
        parse_filter(text)
    assert f"may nest at most {MAX_FILTER_DEPTH} deep" in info.value.reason
    # the error points at the start of the operator one level too deep: a wrapper, or the core's "not"
    prefix = "".join(WRAPPERS[k][0] for k in chosen[:MAX_FILTER_DEPTH])
    start = WRAPPERS[chosen[MAX_FILTER_DEPTH]][3] if depth > MAX_FILTER_DEPTH else 0
    assert (info.value.line, info.value.column) == (1, len(prefix) + start + 1), str(info.value)[:200]


def test_deep_not_chains_are_filter_syntax_errors() -> None:
    with pytest.raises(FilterSyntaxError, match=f"at most {MAX_FILTER_DEPTH} deep") as info:
        parse_filter("not " * 100_000 + "all")
    assert (info.value.line, info.value.column) == (1, 4 * MAX_FILTER_DEPTH + 1)
    assert parse_filter("not " * MAX_FILTER_DEPTH + "all").matches({}) is True


def test_long_chains_and_redundant_parentheses_are_not_nesting() -> None:
    assert parse_filter(" and ".join(["has a"] * 5000)).matches({"a": "1"})
    assert parse_filter(" or ".join(["has b"] * 5000 + ["has a"])).matches({"a": "1"})
    assert parse_filter("(" * 5000 + "has a" + ")" * 5000).matches({"a": "1"})
    and_of_ors = " and ".join(f"(has a or has b{i})" for i in range(2000))
    assert parse_filter(and_of_ors).matches({"a": "1"})


def test_the_limit_is_where_the_deep_operator_starts_on_its_line() -> None:
    text = "has a and\n  " + "not " * (MAX_FILTER_DEPTH + 1) + "all"
    with pytest.raises(FilterSyntaxError) as info:
        parse_filter(text)
    # the "and" is level 1, so the 32nd "not" (column 3 + 31 * 4) is one too many
    assert (info.value.line, info.value.column) == (2, 3 + (MAX_FILTER_DEPTH - 1) * 4)
