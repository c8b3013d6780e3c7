"""RFC 6901 JSON pointers: parsing, formatting, resolving and inserting.

jsonpointer, the reference implementation, is the oracle for the properties at the end.
"""

from __future__ import annotations

import copy
import json
import pickle
from typing import Any

import jsonpointer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from topics.pointer import (
    MISSING,
    InsertError,
    PointerError,
    array_index,
    format_pointer,
    insert_at,
    is_scalar,
    nests_deeper_than,
    parse_pointer,
    replace_at,
    resolve,
)

# RFC 6901 section 5.
RFC_DOCUMENT: dict[str, Any] = {
    "foo": ["bar", "baz"],
    "": 0,
    "a/b": 1,
    "c%d": 2,
    "e^f": 3,
    "g|h": 4,
    "i\\j": 5,
    'k"l': 6,
    " ": 7,
    "m~n": 8,
}

RFC_EXAMPLES: list[tuple[str, Any]] = [
    ("", RFC_DOCUMENT),
    ("/foo", ["bar", "baz"]),
    ("/foo/0", "bar"),
    ("/", 0),
    ("/a~1b", 1),
    ("/c%d", 2),
    ("/e^f", 3),
    ("/g|h", 4),
    ("/i\\j", 5),
    ('/k"l', 6),
    ("/ ", 7),
    ("/m~0n", 8),
]


# -- parse / format -------------------------------------------------------------------


@pytest.mark.parametrize(("text", "expected"), RFC_EXAMPLES)
def test_rfc6901_section5_examples(text: str, expected: Any) -> None:
    assert resolve(RFC_DOCUMENT, parse_pointer(text)) == expected


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("", ()),
        ("/", ("",)),
        ("//", ("", "")),
        ("/a/b", ("a", "b")),
        ("/a~1b", ("a/b",)),
        ("/m~0n", ("m~n",)),
        ("/~01", ("~1",)),
        ("/~10", ("/0",)),
        ("/~0~1~0", ("~/~",)),
        ("/-", ("-",)),
    ],
)
def test_parse_and_format(text: str, tokens: tuple[str, ...]) -> None:
    assert parse_pointer(text) == tokens
    assert format_pointer(tokens) == text


@pytest.mark.parametrize(
    ("text", "position"),
    [
        ("a", 0),
        ("a/b", 0),
        ("~0", 0),
        ("/~", 1),
        ("/a~", 2),
        ("/a~2", 2),
        ("/a/b~x", 4),
        ("/~0/~~1", 4),
        ("/~01/x~", 6),
    ],
)
def test_malformed_pointer_names_the_position(text: str, position: int) -> None:
    with pytest.raises(PointerError) as info:
        parse_pointer(text)
    assert isinstance(info.value, ValueError)
    assert info.value.pointer == text
    assert info.value.position == position
    assert f"position {position}" in str(info.value)


def test_malformed_pointer_messages() -> None:
    with pytest.raises(PointerError, match='start with "/"'):
        parse_pointer("foo")
    with pytest.raises(PointerError, match='"~" must be followed by "0" or "1"'):
        parse_pointer("/~2")


@given(st.lists(st.text(), max_size=5).map(tuple))
def test_format_then_parse_round_trips(tokens: tuple[str, ...]) -> None:
    assert parse_pointer(format_pointer(tokens)) == tokens


@given(st.lists(st.text(alphabet="ab~/01-", max_size=4), max_size=4).map(tuple))
def test_format_then_parse_round_trips_on_escape_heavy_tokens(tokens: tuple[str, ...]) -> None:
    text = format_pointer(tokens)
    assert parse_pointer(text) == tokens
    assert format_pointer(parse_pointer(text)) == text


# -- MISSING and is_scalar ------------------------------------------------------------


def test_missing_is_a_readable_singleton() -> None:
    assert repr(MISSING) == "MISSING"
    assert type(MISSING)() is MISSING
    assert copy.copy(MISSING) is MISSING
    assert copy.deepcopy(MISSING) is MISSING
    assert pickle.loads(pickle.dumps(MISSING)) is MISSING
    assert not MISSING


@pytest.mark.parametrize("value", ["", "x", 0, -3, 2.5, True, False, None])
def test_scalars(value: Any) -> None:
    assert is_scalar(value)


@pytest.mark.parametrize("value", [[], [1], {}, {"a": 1}, MISSING])
def test_non_scalars(value: Any) -> None:
    assert not is_scalar(value)


# -- resolve --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "/nope",
        "/foo/2",
        "/foo/-",
        "/foo/01",
        "/foo/00",
        "/foo/+1",
        "/foo/-1",
        "/foo/ 1",
        "/foo/1 ",
        "/foo/1.0",
        "/foo/\u0661",  # ARABIC-INDIC DIGIT ONE is a digit, not an index
        "/foo/0/x",  # into a string
        "/a~1b/0",  # into a number
        "/foo/",
    ],
)
def test_resolve_missing(text: str) -> None:
    assert resolve(RFC_DOCUMENT, parse_pointer(text)) is MISSING


def test_resolve_null_is_not_missing() -> None:
    assert resolve({"a": None}, ("a",)) is None
    assert resolve([None], ("0",)) is None
    assert resolve(None, ()) is None


def test_resolve_into_scalar_roots() -> None:
    assert resolve("abc", ("0",)) is MISSING
    assert resolve(5, ()) == 5


@pytest.mark.parametrize(("token", "index"), [("0", 0), ("7", 7), ("10", 10), ("01", None), ("-", None), ("", None), ("a", None)])
def test_array_index(token: str, index: int | None) -> None:
    assert array_index(token) == index


# -- insert_at ------------------------------------------------------------------------


def test_insert_root_returns_the_item() -> None:
    item = {"x": 1}
    assert insert_at({"a": 1}, (), item) is item


def test_insert_sets_a_new_object_member_last() -> None:
    document = {"a": 1, "b": {"c": 2}}
    result = insert_at(document, ("b", "d"), [3])
    assert result == {"a": 1, "b": {"c": 2, "d": [3]}}
    assert list(result["b"]) == ["c", "d"]


def test_insert_overwrites_an_object_member_in_place() -> None:
    result = insert_at({"a": 1, "b": 2, "c": 3}, ("b",), "x")
    assert list(result.items()) == [("a", 1), ("b", "x"), ("c", 3)]


def test_insert_replaces_an_array_element() -> None:
    assert insert_at({"l": [1, 2, 3]}, ("l", "1"), "x") == {"l": [1, "x", 3]}


def test_insert_dash_appends() -> None:
    assert insert_at({"l": [1]}, ("l", "-"), 2) == {"l": [1, 2]}
    assert insert_at([], ("-",), "a") == ["a"]


def test_insert_copies_only_along_the_path_and_never_mutates() -> None:
    document: dict[str, Any] = {"a": {"b": [1, {"c": 2}]}, "other": {"big": [1, 2, 3]}}
    before = copy.deepcopy(document)
    result = insert_at(document, ("a", "b", "1", "d"), 4)
    assert document == before
    assert result == {"a": {"b": [1, {"c": 2, "d": 4}]}, "other": {"big": [1, 2, 3]}}
    assert result is not document
    assert result["a"] is not document["a"]
    assert result["a"]["b"] is not document["a"]["b"]
    assert result["other"] is document["other"]


@pytest.mark.parametrize(
    ("document", "tokens", "reason"),
    [
        ({"a": 1}, ("x", "y"), "does not exist"),
        ({"a": 1}, ("a", "y"), "is a scalar"),
        ({"a": "s"}, ("a", "0"), "is a scalar"),
        ({"a": None}, ("a", "y"), "is a scalar"),
        ("doc", ("a",), "is a scalar"),
        ({"l": [1, 2]}, ("l", "2"), "out of range"),
        ({"l": [1, 2]}, ("l", "01"), "not an array index"),
        ({"l": [1, 2]}, ("l", "x"), "not an array index"),
        ({"l": []}, ("l", "0"), "out of range"),
        ({"l": [1]}, ("l", "-", "x"), "does not exist"),
    ],
)
def test_insert_errors(document: Any, tokens: tuple[str, ...], reason: str) -> None:
    before = copy.deepcopy(document)
    with pytest.raises(InsertError, match=reason) as info:
        insert_at(document, tokens, "item")
    assert isinstance(info.value, ValueError)
    assert reason in info.value.reason
    assert document == before


# -- replace_at -----------------------------------------------------------------------


def test_replace_at_existing_values() -> None:
    document = {"a": [1, {"b": 2}]}
    assert replace_at(document, ("a", "1", "b"), 3) == {"a": [1, {"b": 3}]}
    assert replace_at(document, (), 7) == 7
    assert document == {"a": [1, {"b": 2}]}


@pytest.mark.parametrize("tokens", [("x",), ("a", "2"), ("a", "-"), ("a", "0", "z")])
def test_replace_at_needs_an_existing_value(tokens: tuple[str, ...]) -> None:
    with pytest.raises(InsertError, match="nothing at"):
        replace_at({"a": [1, 2]}, tokens, 0)


# -- properties -----------------------------------------------------------------------

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)


def _pointers(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every pointer that resolves in ``value``."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _pointers(item, (*prefix, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _pointers(item, (*prefix, str(index)))
    return found


@given(JSON, st.data())
def test_every_walked_pointer_resolves_and_round_trips(document: Any, data: st.DataObject) -> None:
    tokens = data.draw(st.sampled_from(_pointers(document)))
    found = resolve(document, parse_pointer(format_pointer(tokens)))
    assert found is not MISSING


@given(JSON, st.data(), JSON)
def test_insert_then_resolve_gives_the_item_and_leaves_input_alone(document: Any, data: st.DataObject, item: Any) -> None:
    tokens = data.draw(st.sampled_from(_pointers(document)))
    before = copy.deepcopy(document)
    result = insert_at(document, tokens, item)
    assert resolve(result, tokens) is item
    assert document == before


# -- depth --------------------------------------------------------------------------------


def _depth(value: Any) -> int:
    """The oracle: arrays and objects inside one another, by recursion (small values only)."""
    if isinstance(value, dict):
        return 1 + max((_depth(v) for v in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((_depth(v) for v in value), default=0)
    return 0


@given(JSON, st.integers(min_value=-1, max_value=8))
def test_nests_deeper_than_agrees_with_a_recursive_oracle(document: Any, levels: int) -> None:
    assert nests_deeper_than(document, levels) is (_depth(document) > levels)


def _chain(depth: int) -> Any:
    value: Any = "leaf"
    for level in range(depth):
        value = {"k": value} if level % 2 else [value]
    return value


@settings(max_examples=30)
@given(st.integers(min_value=0, max_value=50_000))
def test_deep_documents_and_long_pointers_do_not_recurse(depth: int) -> None:
    document = _chain(depth)
    assert nests_deeper_than(document, depth - 1) and not nests_deeper_than(document, depth)
    path = tuple("k" if level % 2 else "0" for level in reversed(range(depth)))
    assert resolve(document, path) == "leaf"
    replaced = replace_at(document, path, "new")
    assert resolve(replaced, path) == "new" and resolve(document, path) == "leaf"
    if depth:
        assert resolve(insert_at(document, path, 1), path) == 1


# -- against the RFC 6901 reference implementation (jsonpointer) -----------------------

PAST = ["-", "0", "1", "01", "x", ""]
PAST_LEAVES = st.lists(st.sampled_from(PAST), max_size=2).map(tuple)


def _containers(value: Any, prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Every pointer in ``value`` to an object or array."""
    if isinstance(value, dict):
        return [prefix, *(p for key, item in value.items() for p in _containers(item, (*prefix, key)))]
    if isinstance(value, list):
        return [prefix, *(p for index, item in enumerate(value) for p in _containers(item, (*prefix, str(index))))]
    return []


def _drawn_pointer(document: Any, data: st.DataObject) -> tuple[str, ...]:
    """A pointer to a child, maybe missing, of a container in ``document``; or to any value, maybe with tokens past it."""
    containers = _containers(document)
    if data.draw(st.booleans()) and containers:
        return data.draw(st.sampled_from(containers)) + (data.draw(st.sampled_from(PAST)),)
    return data.draw(st.sampled_from(_pointers(document))) + data.draw(PAST_LEAVES)


def _oracle_resolve(document: Any, tokens: tuple[str, ...]) -> Any:
    """jsonpointer's answer in views' terms: ``-`` (past the end of an array) reaches no value."""
    found = jsonpointer.JsonPointer(format_pointer(tokens)).resolve(document, MISSING)
    return MISSING if isinstance(found, jsonpointer.EndOfList) else found


@given(st.text(alphabet="ab~/01\n", max_size=8))
def test_parse_accepts_and_decodes_what_jsonpointer_does(text: str) -> None:
    try:
        expected: tuple[str, ...] | None = tuple(jsonpointer.JsonPointer(text).parts)
    except jsonpointer.JsonPointerException:
        expected = None
    try:
        found: tuple[str, ...] | None = parse_pointer(text)
    except PointerError:
        found = None
    assert found == expected


@given(JSON, st.data())
def test_resolve_agrees_with_jsonpointer(document: Any, data: st.DataObject) -> None:
    tokens = _drawn_pointer(document, data)
    assert resolve(document, tokens) is _oracle_resolve(document, tokens)


@given(JSON, st.data(), JSON)
def test_insert_agrees_with_jsonpointer_set(document: Any, data: st.DataObject, item: Any) -> None:
    tokens = _drawn_pointer(document, data)
    try:
        expected = json.dumps(jsonpointer.JsonPointer(format_pointer(tokens)).set(document, item, inplace=False))
    except jsonpointer.JsonPointerException:
        expected = None
    try:
        found = json.dumps(insert_at(document, tokens, item))
    except InsertError:
        found = None
    assert found == expected  # member order included
