"""OpenAjax names: every example name of the OpenAjax Hub 2.0 specification, valid and
invalid, and what the wildcards match."""

from __future__ import annotations

import pytest

from topics.errors import OpenAjaxNameError
from topics.openajax import name_to_path, parse_pattern, path_to_name, validate_name
from topics.tree import TopicTree
from topics.specification import TopicSpecification

# "Examples of valid topic names" with their token counts
VALID_NAMES = [
    ("org.openajax.example.token.one", ("org", "openajax", "example", "token", "one")),
    ("ABC", ("ABC",)),
    ("z", ("z",)),
    ("ABC.d.Efg.11.$.X_Y_Z", ("ABC", "d", "Efg", "11", "$", "X_Y_Z")),
    ("org.openajax.hub.registerLibrary", ("org", "openajax", "hub", "registerLibrary")),
]

VALID_PATTERNS = [
    "*",
    "**",
    "AA.BB.*",
    "AA.BB.**",
    "AA.BB.*.DD",
    "AA.*.CC.*.EE",
    "AA.*.CC.**",
    "org.example.*",
    "org.*.foo",
    "org.example.**",
    "org.example.module1.*",
    "org.example.*.log",
]

# (pattern, name, matches?) from the OpenAjax Hub 2.0 specification's prose and table
MATCHES = [
    ("*", "ABC", True),
    ("*", "a.b", False),
    ("**", "a", True),
    ("**", "a.b.c.d", True),
    ("AA.BB.*", "AA.BB.CC", True),
    ("AA.BB.*", "AA.BB", False),
    ("AA.BB.*", "AA.BB.CC.DD", False),
    ("AA.BB.*", "AA.XX.CC", False),
    ("AA.BB.**", "AA.BB.CC", True),
    ("AA.BB.**", "AA.BB.CC.DD.EE", True),
    ("AA.BB.**", "AA.BB", False),
    ("AA.BB.*.DD", "AA.BB.x.DD", True),
    ("AA.BB.*.DD", "AA.BB.x.EE", False),
    ("AA.BB.*.DD", "AA.BB.x.DD.y", False),
    ("AA.*.CC.*.EE", "AA.1.CC.2.EE", True),
    ("AA.*.CC.*.EE", "AA.1.CX.2.EE", False),
    ("AA.*.CC.*.EE", "AA.1.CC.2", False),
    ("AA.*.CC.**", "AA.1.CC.2", True),
    ("AA.*.CC.**", "AA.1.CC.2.3.4", True),
    ("AA.*.CC.**", "AA.1.CC", False),
    ("org.example.module1.*", "org.example.module1.x", True),
    ("org.example.module1.*", "org.example.module1", False),
    ("org.example.*.log", "org.example.type1.log", True),
    ("org.example.*.log", "org.example.type99.log", True),
    ("org.example.*.log", "org.example.type1.trace", False),
    ("org.example.**", "org.example.m", True),
    ("org.example.**", "org.example.abcdef.ghijkl.mnopqr", True),
    ("org.example.**", "org.example", False),
    ("org.example.**", "org.other.m", False),
]

INVALID = [
    ("a..b", "empty token"),
    ("", "at least one token"),
    (".a", "empty token"),
    ("a.", "empty token"),
    ("aaa.bb*cc", "mixed"),
    ("org.**.foo", "only be the last"),
    ("a.***", "mixed"),
    ("a/b.c", "'/'"),
    ("a.\x01", "control character"),
]


@pytest.mark.parametrize(("name", "tokens"), VALID_NAMES)
def test_valid_names(name: str, tokens: tuple[str, ...]) -> None:
    assert validate_name(name) == tokens
    assert parse_pattern(name).tokens == tokens


@pytest.mark.parametrize("pattern", VALID_PATTERNS)
def test_valid_wildcard_patterns(pattern: str) -> None:
    assert str(parse_pattern(pattern)) == pattern


@pytest.mark.parametrize("pattern", VALID_PATTERNS)
def test_publishing_to_a_wildcard_name_is_rejected(pattern: str) -> None:
    with pytest.raises(OpenAjaxNameError, match="not when publishing"):
        validate_name(pattern)


@pytest.mark.parametrize(("name", "fragment"), INVALID)
def test_invalid_names(name: str, fragment: str) -> None:
    with pytest.raises(OpenAjaxNameError, match=fragment.replace("*", r"\*").replace("(", r"\(")):
        parse_pattern(name)
    with pytest.raises(OpenAjaxNameError):
        validate_name(name)


def test_invalid_name_error_says_which_token() -> None:
    with pytest.raises(OpenAjaxNameError) as info:
        parse_pattern("org.**.foo")
    assert info.value.token_index == 1


@pytest.mark.parametrize(("pattern", "name", "expected"), MATCHES)
def test_matching(pattern: str, name: str, expected: bool) -> None:
    assert parse_pattern(pattern).matches(name) is expected


@pytest.mark.parametrize("root", ["", "hub", "apps/hub"])
@pytest.mark.parametrize(("pattern", "name", "expected"), MATCHES)
def test_selector_mapping_agrees_with_matching(
    root: str, pattern: str, name: str, expected: bool
) -> None:
    selector = parse_pattern(pattern).to_selector(root)
    assert selector.matches(name_to_path(name, root)) is expected
    assert selector.path_prefix == root or selector.path_prefix.startswith(root)


def test_mapping_onto_the_tree() -> None:
    assert name_to_path("org.example.a", "hub") == "hub/org/example/a"
    assert name_to_path("org.example.a") == "org/example/a"
    assert path_to_name("hub/org/example/a", "hub") == "org.example.a"
    assert path_to_name("other/org", "hub") is None
    assert path_to_name("hub", "hub") is None
    assert path_to_name("hub/a.b", "hub") is None


def test_selecting_names_in_a_tree() -> None:
    tree = TopicTree()
    spec = TopicSpecification.of("STRING")
    names = ["org.example.m", "org.example.a.b", "org.example", "org.other.x", "AA.BB.CC"]
    for name in names:
        tree.add(name_to_path(name, "hub"), spec)
    tree.add("elsewhere/org/example/m", spec)
    chosen = {path_to_name(t.path, "hub") for t in tree.select(parse_pattern("org.example.**").to_selector("hub"))}
    assert chosen == {"org.example.m", "org.example.a.b"}
    chosen = {path_to_name(t.path, "hub") for t in tree.select(parse_pattern("*.*.*").to_selector("hub"))}
    assert chosen == {"org.example.m", "org.other.x", "AA.BB.CC"}


def test_literal_tokens_with_regex_characters_are_literal() -> None:
    selector = parse_pattern("ABC.$.X_Y_Z.*").to_selector("hub")
    assert selector.matches("hub/ABC/$/X_Y_Z/q")
    assert not selector.matches("hub/ABC/x/X_Y_Z/q")
