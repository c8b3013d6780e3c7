"""Hypothesis strategies shared by the topic model tests: small alphabets so that
random selectors and random trees actually meet."""

from __future__ import annotations

from hypothesis import strategies as st

from topics.errors import SelectorError
from topics.selectors import parse_selector

SEGMENTS = st.sampled_from(["a", "b", "ab", "a.b", "c", "x1"])
TOPIC_PATHS = st.lists(SEGMENTS, min_size=1, max_size=4).map("/".join)
SEGMENT_REGEXES = st.one_of(
    SEGMENTS.map(lambda s: s.replace(".", "\\.")),
    st.sampled_from([".*", "[ab]", "a?b?", "b+", "(a|b)", "a|c", "x\\d", ".", "a.b"]),
)
FULL_REGEXES = st.lists(
    st.sampled_from(["a", "b", "ab", "/", ".", ".*", "[ab]", "a?", "(a|b)", "a/b|c", "\\.", "c", "x1", "[^/]+"]),
    min_size=1,
    max_size=5,
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
    st.builds(
        lambda rs, q: "?" + "/".join(rs) + q,
        st.lists(SEGMENT_REGEXES, min_size=1, max_size=3),
        QUALIFIERS,
    ),
    st.builds(lambda r, q: "*" + r + q, FULL_REGEXES, QUALIFIERS),
).filter(_valid)

SELECTORS = st.one_of(
    SIMPLE_SELECTORS,
    st.lists(SIMPLE_SELECTORS, min_size=1, max_size=3).map(lambda ms: "#" + "////".join(ms)),
).filter(_valid)
