"""RFC 6902 JSON Patch with a byte-exact ``test``: parsing and applying.

jsonpatch, the reference implementation, is the oracle for the last property.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import cbor2
import jsonpatch
import jsonpointer
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.unit.topics.test_pointer import _containers, _drawn_pointer, _pointers
from topics.types import MAX_JSON_DEPTH
from topics.patch import (
    OPS,
    PatchFailed,
    PatchOperation,
    PatchSyntaxError,
    apply_patch,
    parse_patch,
)
from topics.pointer import format_pointer, nests_deeper_than


def patched(document: Any, patch: list[dict[str, Any]] | str) -> Any:
    """Apply ``patch`` (text or a list to encode), checking the input is not mutated."""
    text = patch if isinstance(patch, str) else json.dumps(patch)
    before = copy.deepcopy(document)
    try:
        return apply_patch(document, parse_patch(text))
    finally:
        assert document == before
        assert json.dumps(document) == json.dumps(before)  # member order too


def fails(document: Any, patch: list[dict[str, Any]] | str) -> PatchFailed:
    """The :class:`PatchFailed` of applying ``patch``; the input is not mutated."""
    with pytest.raises(PatchFailed) as info:
        patched(document, patch)
    return info.value


# -- RFC 6902 appendix A --------------------------------------------------------------


def test_a1_adding_an_object_member() -> None:
    result = patched({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux"}])
    assert result == {"baz": "qux", "foo": "bar"}
    assert list(result) == ["foo", "baz"]


def test_a2_adding_an_array_element() -> None:
    result = patched({"foo": ["bar", "baz"]}, [{"op": "add", "path": "/foo/1", "value": "qux"}])
    assert result == {"foo": ["bar", "qux", "baz"]}


def test_a3_removing_an_object_member() -> None:
    result = patched({"baz": "qux", "foo": "bar"}, [{"op": "remove", "path": "/baz"}])
    assert result == {"foo": "bar"}


def test_a4_removing_an_array_element() -> None:
    result = patched({"foo": ["bar", "qux", "baz"]}, [{"op": "remove", "path": "/foo/1"}])
    assert result == {"foo": ["bar", "baz"]}


def test_a5_replacing_a_value() -> None:
    result = patched({"baz": "qux", "foo": "bar"}, [{"op": "replace", "path": "/baz", "value": "boo"}])
    assert list(result.items()) == [("baz", "boo"), ("foo", "bar")]


def test_a6_moving_a_value() -> None:
    document = {"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}
    result = patched(document, [{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}])
    assert result == {"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}}


def test_a7_moving_an_array_element() -> None:
    document = {"foo": ["all", "grass", "cows", "eat"]}
    result = patched(document, [{"op": "move", "from": "/foo/1", "path": "/foo/3"}])
    assert result == {"foo": ["all", "cows", "eat", "grass"]}


def test_a8_testing_a_value_success() -> None:
    document = {"baz": "qux", "foo": ["a", 2, "c"]}
    patch = [{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}]
    assert patched(document, patch) == document


def test_a9_testing_a_value_error() -> None:
    error = fails({"baz": "qux"}, [{"op": "test", "path": "/baz", "value": "bar"}])
    assert error.index == 0


def test_a10_adding_a_nested_member_object() -> None:
    result = patched({"foo": "bar"}, [{"op": "add", "path": "/child", "value": {"grandchild": {}}}])
    assert result == {"foo": "bar", "child": {"grandchild": {}}}


def test_a11_ignoring_unrecognized_elements() -> None:
    result = patched({"foo": "bar"}, [{"op": "add", "path": "/baz", "value": "qux", "xyz": 123}])
    assert result == {"foo": "bar", "baz": "qux"}


def test_a12_adding_to_a_nonexistent_target() -> None:
    error = fails({"foo": "bar"}, [{"op": "add", "path": "/baz/bat", "value": "qux"}])
    assert error.index == 0
    assert "does not exist" in error.reason


def test_a13_invalid_json_patch_document() -> None:
    with pytest.raises(PatchSyntaxError, match='"op" twice'):
        parse_patch('[{"op": "add", "path": "/baz", "value": "qux", "op": "remove"}]')


def test_a14_escape_ordering() -> None:
    document = {"/": 9, "~1": 10}
    assert patched(document, [{"op": "test", "path": "/~01", "value": 10}]) == document


def test_a15_comparing_strings_and_numbers() -> None:
    error = fails({"/": 9, "~1": 10}, [{"op": "test", "path": "/~01", "value": "10"}])
    assert error.index == 0


def test_a16_adding_an_array_value() -> None:
    result = patched({"foo": ["bar"]}, [{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}])
    assert result == {"foo": ["bar", ["abc", "def"]]}


# -- byte-exact test ------------------------------------------------------------------


def test_test_compares_member_order() -> None:
    document = {"a": {"foo": "bar", "count": 43}}
    same = '[{"op": "test", "path": "/a", "value": {"foo": "bar", "count": 43}}]'
    other = '[{"op": "test", "path": "/a", "value": {"count": 43, "foo": "bar"}}]'
    assert patched(document, same) == document
    assert fails(document, other).index == 0


def test_test_of_the_whole_document_compares_member_order() -> None:
    document = {"foo": "bar", "count": 43}
    assert patched(document, '[{"op": "test", "path": "", "value": {"foo": "bar", "count": 43}}]') == document
    fails(document, '[{"op": "test", "path": "", "value": {"count": 43, "foo": "bar"}}]')


@pytest.mark.parametrize(
    ("actual", "expected"),
    [(22, 22.0), (22.0, 22), (1, True), (0, False), (0.0, -0.0), (None, False), ("1", 1), ([1], [1.0])],
)
def test_test_compares_types_exactly(actual: Any, expected: Any) -> None:
    error = fails({"v": actual}, [{"op": "test", "path": "/v", "value": expected}])
    assert "differs" in error.reason


@pytest.mark.parametrize("value", [22, 22.0, 1.5, -0.0, True, None, "", [], {}, {"a": [1, {"b": None}]}, 2**70])
def test_test_passes_on_identical_values(value: Any) -> None:
    assert patched({"v": value}, [{"op": "test", "path": "/v", "value": value}]) == {"v": value}


def test_test_of_a_missing_path_fails() -> None:
    for path in ["/nope", "/l/1", "/l/-", "/l/00", "/l/0/x"]:
        error = fails({"l": [None]}, [{"op": "test", "path": path, "value": None}])
        assert "does not exist" in error.reason


# -- the other operations -------------------------------------------------------------


def test_add_overwrites_an_existing_member() -> None:
    result = patched({"a": 1, "b": 2}, [{"op": "add", "path": "/a", "value": 3}])
    assert list(result.items()) == [("a", 3), ("b", 2)]


def test_add_at_the_array_end_index() -> None:
    assert patched([1, 2], [{"op": "add", "path": "/2", "value": 3}]) == [1, 2, 3]
    assert patched([], [{"op": "add", "path": "/0", "value": 3}]) == [3]


@pytest.mark.parametrize(("path", "reason"), [("/3", "past the end"), ("/01", "not an array index"), ("/x", "not an array index")])
def test_add_bad_array_index(path: str, reason: str) -> None:
    assert reason in fails([1, 2], [{"op": "add", "path": path, "value": 0}]).reason


def test_add_into_a_scalar_fails() -> None:
    assert "scalar" in fails({"a": 1}, [{"op": "add", "path": "/a/b", "value": 0}]).reason


def test_add_and_replace_at_the_root() -> None:
    assert patched({"a": 1}, [{"op": "add", "path": "", "value": [1]}]) == [1]
    assert patched({"a": 1}, [{"op": "replace", "path": "", "value": {"b": 2}}]) == {"b": 2}


def test_remove_and_replace_need_an_existing_target() -> None:
    for op in ["remove", "replace"]:
        for path in ["/x", "/l/2", "/l/-"]:
            error = fails({"l": [1, 2]}, [{"op": op, "path": path, "value": 0}])
            assert "does not exist" in error.reason


def test_remove_keeps_member_order() -> None:
    result = patched({"a": 1, "b": 2, "c": 3}, [{"op": "remove", "path": "/b"}])
    assert list(result) == ["a", "c"]


def test_remove_the_whole_document_fails() -> None:
    assert "whole document" in fails({"a": 1}, [{"op": "remove", "path": ""}]).reason


def test_move_into_its_own_child_fails() -> None:
    error = fails({"a": {"b": {}}}, [{"op": "move", "from": "/a", "path": "/a/b/c"}])
    assert "own child" in error.reason


def test_move_to_itself_and_to_a_sibling_with_a_shared_prefix() -> None:
    document = {"a": {"b": 1}, "ab": 2}
    assert patched(document, [{"op": "move", "from": "/a", "path": "/a"}]) == document
    assert patched(document, [{"op": "move", "from": "/a", "path": "/ab"}]) == {"ab": {"b": 1}}


def test_move_up_to_an_ancestor() -> None:
    assert patched({"a": {"b": [1]}}, [{"op": "move", "from": "/a/b", "path": "/a"}]) == {"a": [1]}


def test_move_from_must_exist() -> None:
    error = fails({"a": 1}, [{"op": "move", "from": "/x", "path": "/y"}])
    assert 'from "/x" does not exist' in error.reason


def test_copy() -> None:
    result = patched({"a": {"b": [1]}, "l": [0]}, [{"op": "copy", "from": "/a", "path": "/l/0"}])
    assert result == {"a": {"b": [1]}, "l": [{"b": [1]}, 0]}
    assert "does not exist" in fails({"a": 1}, [{"op": "copy", "from": "/x", "path": "/y"}]).reason


def test_copy_then_change_the_copy_leaves_the_original() -> None:
    patch = [{"op": "copy", "from": "/a", "path": "/c"}, {"op": "add", "path": "/c/x", "value": 1}]
    assert patched({"a": {}}, patch) == {"a": {}, "c": {"x": 1}}


def test_a_scalar_document_fails_as_operation_0() -> None:
    for document in [1, "s", None, True, 2.5]:
        error = fails(document, [{"op": "test", "path": "", "value": document}])
        assert error.index == 0
        assert fails(document, []).index == 0


def test_empty_patch_returns_the_document() -> None:
    assert patched({"a": 1}, []) == {"a": 1}


# -- atomicity and immutability -------------------------------------------------------


def test_failing_second_operation_is_atomic() -> None:
    document = {"a": 1, "l": [1, 2]}
    before = copy.deepcopy(document)
    operations = parse_patch(
        '[{"op": "add", "path": "/b", "value": 2}, {"op": "remove", "path": "/nope"}, {"op": "add", "path": "/c", "value": 3}]'
    )
    with pytest.raises(PatchFailed) as info:
        apply_patch(document, operations)
    assert info.value.index == 1
    assert str(info.value).startswith("operation 1: ")
    assert document == before
    assert "b" not in document


def test_the_input_is_never_mutated_and_untouched_parts_are_shared() -> None:
    document: dict[str, Any] = {"a": {"b": [1, 2]}, "keep": {"deep": [1]}}
    before = copy.deepcopy(document)
    patch = [
        {"op": "add", "path": "/a/b/0", "value": 0},
        {"op": "replace", "path": "/a/b/2", "value": 9},
        {"op": "remove", "path": "/a/b/1"},
        {"op": "move", "from": "/a/b", "path": "/moved"},
        {"op": "copy", "from": "/moved", "path": "/a/copied"},
    ]
    result = apply_patch(document, parse_patch(json.dumps(patch)))
    assert document == before
    assert result == {"a": {"copied": [0, 9]}, "keep": {"deep": [1]}, "moved": [0, 9]}
    assert result["keep"] is document["keep"]


def test_the_operation_value_is_not_shared_with_the_result() -> None:
    operations = parse_patch('[{"op": "add", "path": "/a", "value": {"x": [1]}}]')
    result = apply_patch({}, operations)
    result["a"]["x"].append(2)
    assert operations[0].value == {"x": [1]}


# -- parsing --------------------------------------------------------------------------


def test_parse_builds_operations() -> None:
    text = json.dumps(
        [
            {"op": "add", "path": "/a~1b", "value": {"z": 1, "a": 2}},
            {"op": "remove", "path": "/x"},
            {"op": "move", "from": "/m~0", "path": ""},
            {"op": "copy", "from": "/", "path": "/-"},
        ]
    )
    add, remove, move, copy_ = parse_patch(text)
    assert add == PatchOperation("add", ("a/b",), None, {"z": 1, "a": 2})
    assert list(add.value) == ["z", "a"]
    assert remove == PatchOperation("remove", ("x",), None, None)
    assert move == PatchOperation("move", (), ("m~",), None)
    assert copy_ == PatchOperation("copy", ("-",), ("",), None)


def test_operations_are_frozen_and_unhashable() -> None:
    operation = PatchOperation("test", ("a",), None, 1)
    with pytest.raises(AttributeError):
        operation.op = "add"  # type: ignore[misc]
    with pytest.raises(TypeError):
        hash(operation)


def test_null_value_is_kept() -> None:
    (operation,) = parse_patch('[{"op": "test", "path": "/a", "value": null}]')
    assert operation.value is None
    assert patched({"a": None}, [{"op": "test", "path": "/a", "value": None}]) == {"a": None}


@pytest.mark.parametrize(
    ("text", "index", "message"),
    [
        ("{}", None, "a patch must be a JSON array of operations, not an object"),
        ("1", None, "must be a JSON array"),
        ("[1]", 0, "operation 0: an operation must be a JSON object, not a number"),
        ('[{"op": "test", "path": "", "value": 1}, []]', 1, "operation 1: an operation must be a JSON object, not an array"),
        ('[{"path": "/a"}]', 0, 'operation 0: needs an "op" member'),
        ('[{"op": 1, "path": "/a"}]', 0, 'operation 0: "op" must be a string, not a number'),
        ('[{"op": "jump", "path": "/a"}]', 0, 'operation 0: unknown op "jump"'),
        ('[{"op": "remove"}]', 0, 'operation 0: "remove" needs a "path" pointer'),
        ('[{"op": "remove", "path": null}]', 0, 'operation 0: "path" must be a JSON pointer string, not null'),
        ('[{"op": "remove", "path": ["a"]}]', 0, '"path" must be a JSON pointer string, not an array'),
        ('[{"op": "remove", "path": "a"}]', 0, 'operation 0: invalid "path" pointer "a"'),
        ('[{"op": "remove", "path": "/a~2"}]', 0, "position 2"),
        ('[{"op": "test", "path": "/a", "value": 1}, {"op": "move", "path": "/b"}]', 1, 'operation 1: "move" needs a "from" pointer'),
        ('[{"op": "copy", "from": 3, "path": "/b"}]', 0, '"from" must be a JSON pointer string, not a number'),
        ('[{"op": "copy", "from": "x", "path": "/b"}]', 0, 'invalid "from" pointer "x"'),
        ('[{"op": "add", "path": "/b"}]', 0, 'operation 0: "add" needs a "value"'),
        ('[{"op": "replace", "path": "/b"}]', 0, '"replace" needs a "value"'),
        ('[{"op": "test", "path": "/b"}]', 0, '"test" needs a "value"'),
    ],
)
def test_syntax_errors(text: str, index: int | None, message: str) -> None:
    with pytest.raises(PatchSyntaxError) as info:
        parse_patch(text)
    assert isinstance(info.value, ValueError)
    assert info.value.index == index
    assert message in str(info.value)
    assert info.value.reason in str(info.value)


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("", "line 1 column 1"),
        ("[", "line 1 column 2"),
        ('[\n  {"op": "add",\n   "path": "/a" "value": 1}]', "line 3 column 17"),
        ("[{'op': 'remove'}]", "line 1 column 3"),
    ],
)
def test_invalid_json_names_line_and_column(text: str, where: str) -> None:
    with pytest.raises(PatchSyntaxError) as info:
        parse_patch(text)
    assert info.value.index is None
    assert str(info.value).startswith(f"invalid JSON at {where}: ")


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_non_json_numbers_are_rejected(constant: str) -> None:
    with pytest.raises(PatchSyntaxError, match=f"{constant} is not a JSON number"):
        parse_patch(f'[{{"op": "add", "path": "/a", "value": {constant}}}]')


def test_duplicate_members_inside_a_value_are_rejected() -> None:
    with pytest.raises(PatchSyntaxError, match='"k" twice'):
        parse_patch('[{"op": "add", "path": "/a", "value": {"k": 1, "k": 2}}]')


def _nested(depth: int, inner: Any = 1) -> Any:
    """``inner`` inside ``depth`` arrays and objects, alternating."""
    for level in range(depth):
        inner = {"k": inner} if level % 2 else [inner]
    return inner


@given(st.integers(min_value=0, max_value=20_000), st.sampled_from(["[", "{", '{"k":']))
def test_json_text_nesting_is_a_syntax_error_past_the_limit(depth: int, opener: str) -> None:
    """Unbalanced text too: ``json.loads`` recursed into ``'[' * 100000`` until RecursionError."""
    deep = opener * depth
    text = f'[{{"op":"add","path":"/x","value":{deep}'
    opened = 2 + depth  # the patch array, the operation object, then the value's own
    if opened <= MAX_JSON_DEPTH:
        with pytest.raises(PatchSyntaxError, match="invalid JSON at line 1"):  # unterminated
            parse_patch(text)
        return
    with pytest.raises(PatchSyntaxError) as info:
        parse_patch(text)
    assert info.value.index is None
    assert f"nested deeper than {MAX_JSON_DEPTH} levels of arrays and objects" in info.value.reason
    position = len('[{"op":"add","path":"/x","value":') + (MAX_JSON_DEPTH - 2) * len(opener)
    assert info.value.reason.endswith(f"at position {position}")


@given(st.integers(min_value=0, max_value=MAX_JSON_DEPTH + 40))
def test_nested_values_parse_up_to_the_limit(depth: int) -> None:
    text = json.dumps([{"op": "add", "path": "/x", "value": _nested(depth)}])
    if depth + 2 > MAX_JSON_DEPTH:
        with pytest.raises(PatchSyntaxError, match="nested deeper"):
            parse_patch(text)
        return
    assert parse_patch(text)[0].value == _nested(depth)


def test_brackets_inside_strings_do_not_nest() -> None:
    text = json.dumps([{"op": "add", "path": "/x", "value": "[" * 1000 + "\\\"{" * 500}])
    assert parse_patch(text)[0].value == "[" * 1000 + "\\\"{" * 500


@pytest.mark.parametrize(
    "operation",
    [
        PatchOperation("add", ("a", "a", "k"), None, _nested(MAX_JSON_DEPTH - 2)),
        PatchOperation("replace", ("a",), None, _nested(MAX_JSON_DEPTH)),
        PatchOperation("copy", ("a", "k"), ()),
        PatchOperation("move", ("a", "a", "k"), ("b",)),
    ],
    ids=lambda o: o.op,
)
def test_operations_may_not_nest_the_document_past_the_limit(operation: PatchOperation) -> None:
    """Nothing then walks the result (``test``'s CBOR encoder crashes far deeper)."""
    document = {"a": {"a": {}}, "b": _nested(MAX_JSON_DEPTH - 1)}
    with pytest.raises(PatchFailed, match=f"would nest the document deeper than {MAX_JSON_DEPTH} levels") as info:
        apply_patch(document, [operation])
    assert json.dumps(format_pointer(operation.path)) in info.value.reason


def test_operations_may_nest_the_document_up_to_the_limit() -> None:
    document = {"a": {}, "b": _nested(MAX_JSON_DEPTH - 2)}
    operations = [
        {"op": "add", "path": "/a/k", "value": _nested(MAX_JSON_DEPTH - 2)},
        {"op": "copy", "from": "/b", "path": "/a/j"},
        {"op": "move", "from": "/a/j", "path": "/c"},
        {"op": "test", "path": "/a/k", "value": _nested(MAX_JSON_DEPTH - 2)},
    ]
    result = apply_patch(document, parse_patch(json.dumps(operations)))
    assert nests_deeper_than(result, MAX_JSON_DEPTH - 1) and not nests_deeper_than(result, MAX_JSON_DEPTH)


@settings(max_examples=30)
@given(st.integers(min_value=1, max_value=40), st.integers(min_value=MAX_JSON_DEPTH - 60, max_value=MAX_JSON_DEPTH - 1))
def test_copying_the_document_into_itself_stops_at_the_limit(copies: int, start: int) -> None:
    """Each copy of the whole document to ``/a/c`` nests it two levels deeper."""
    document: Any = {"a": {}, "n": _nested(start)}
    depth = 1 + max(1, start)
    operations = parse_patch('[{"op": "copy", "from": "", "path": "/a/c"}]')
    for _ in range(copies):
        if depth + 2 > MAX_JSON_DEPTH:
            with pytest.raises(PatchFailed, match="would nest the document deeper"):
                apply_patch(document, operations)
            break
        document = apply_patch(document, operations)
        depth += 2
    assert nests_deeper_than(document, depth - 1) and not nests_deeper_than(document, depth)


# -- properties -----------------------------------------------------------------------

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=5)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=12,
)
OBJECTS = st.dictionaries(st.text(max_size=4), JSON, max_size=5)




def _pointer_text(tokens: tuple[str, ...]) -> str:
    return "".join("/" + t.replace("~", "~0").replace("/", "~1") for t in tokens)


@given(OBJECTS, st.text(max_size=6), JSON)
def test_add_then_remove_of_a_fresh_key_gives_back_the_document(document: dict[str, Any], key: str, value: Any) -> None:
    assume(key not in document)
    pointer = _pointer_text((key,))
    patch = [{"op": "add", "path": pointer, "value": value}, {"op": "remove", "path": pointer}]
    result = patched(document, patch)
    assert result == document
    assert json.dumps(result) == json.dumps(document)


@given(OBJECTS, st.data(), st.text(max_size=6), JSON)
def test_add_then_remove_of_a_fresh_key_anywhere(document: dict[str, Any], data: st.DataObject, key: str, value: Any) -> None:
    objects = [p for p in _pointers(document) if isinstance(_at(document, p), dict)]
    parent = data.draw(st.sampled_from(objects))
    assume(key not in _at(document, parent))
    pointer = _pointer_text((*parent, key))
    result = patched(document, [{"op": "add", "path": pointer, "value": value}, {"op": "remove", "path": pointer}])
    assert json.dumps(result) == json.dumps(document)


@given(OBJECTS, st.data())
def test_test_of_a_value_against_itself_passes(document: dict[str, Any], data: st.DataObject) -> None:
    tokens = data.draw(st.sampled_from(_pointers(document)))
    patch = [{"op": "test", "path": _pointer_text(tokens), "value": _at(document, tokens)}]
    assert patched(document, patch) is document


@given(st.lists(JSON, max_size=5), st.data())
def test_test_of_a_value_against_itself_passes_in_arrays(document: list[Any], data: st.DataObject) -> None:
    tokens = data.draw(st.sampled_from(_pointers(document)))
    operation = PatchOperation("test", tokens, None, copy.deepcopy(_at(document, tokens)))
    assert apply_patch(document, (operation,)) is document


def _at(document: Any, tokens: tuple[str, ...]) -> Any:
    node = document
    for token in tokens:
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


# -- against the RFC 6902 reference implementation (jsonpatch) -------------------------

CONTAINERS = OBJECTS | st.lists(JSON, max_size=4)


def _loosened(value: Any) -> Any:
    """``value`` as RFC 6902 still calls it equal but with other CBOR bytes: ints as floats, members reversed."""
    if isinstance(value, dict):
        return {key: _loosened(value[key]) for key in reversed(value)}
    if isinstance(value, list):
        return [_loosened(item) for item in value]
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) < 2**53:
        return float(value)
    return value


def _drawn_target(document: Any, data: st.DataObject, *, new: bool) -> str:
    """Mostly a pointer the operation can use on ``document`` (``new``: a place to add at); sometimes any pointer."""
    if data.draw(st.integers(0, 4)) == 0:
        return format_pointer(_drawn_pointer(document, data))
    containers = _containers(document)
    if not new or not containers:
        return format_pointer(data.draw(st.sampled_from(_pointers(document))))
    parent = data.draw(st.sampled_from(containers))
    node = _at(document, parent)
    token = data.draw(st.sampled_from(["-", "0", str(len(node))] if isinstance(node, list) else ["x", ""]))
    return format_pointer((*parent, token))


def _drawn_operation(document: Any, data: st.DataObject) -> dict[str, Any]:
    """An operation of any kind, mostly on pointers that ``document`` has."""
    op = data.draw(st.sampled_from(sorted(OPS)))
    operation: dict[str, Any] = {"op": op, "path": _drawn_target(document, data, new=op in ("add", "move", "copy"))}
    if op in ("move", "copy"):
        operation["from"] = _drawn_target(document, data, new=False)
    elif op in ("add", "replace"):
        operation["value"] = data.draw(JSON)
    elif op == "test":
        here = jsonpointer.resolve_pointer(document, operation["path"], None)
        if isinstance(here, jsonpointer.EndOfList):
            here = None
        operation["value"] = data.draw(st.sampled_from([copy.deepcopy(here), _loosened(here)]) | JSON)
    return operation


def _oracle(document: Any, operations: list[dict[str, Any]]) -> tuple[int | None, Any]:
    """jsonpatch's index of the first operation that fails (or ``None``) and the document just before it (or the result)."""
    current = copy.deepcopy(document)
    for index, operation in enumerate(operations):
        try:
            current = jsonpatch.JsonPatch([operation]).apply(current, in_place=True)
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException):
            return index, current
    return None, current


@given(CONTAINERS, st.data())
def test_apply_agrees_with_jsonpatch_except_for_the_byte_exact_test(document: Any, data: st.DataObject) -> None:
    operations = [_drawn_operation(document, data) for _ in range(data.draw(st.integers(1, 4)))]
    failed_at, expected = _oracle(document, operations)
    try:
        result = patched(document, operations)
    except PatchFailed as e:
        if e.index == failed_at:
            return
        # the only operation that fails here but not under RFC 6902 is a test of RFC-equal values with other CBOR bytes
        assert failed_at is None or failed_at > e.index, f"jsonpatch failed first, at {failed_at}"
        operation = operations[e.index]
        assert operation["op"] == "test", str(e)
        _, before = _oracle(document, operations[: e.index])
        assert cbor2.dumps(jsonpointer.resolve_pointer(before, operation["path"])) != cbor2.dumps(operation["value"])
    else:
        assert failed_at is None, f"jsonpatch fails at operation {failed_at}"
        assert json.dumps(result) == json.dumps(expected)  # member order included
