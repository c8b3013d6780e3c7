"""RFC 6902 JSON Patch over decoded JSON values, with a byte-exact ``test`` (pure).

:func:`parse_patch` checks the patch text once and gives immutable
:class:`PatchOperation` values; :func:`apply_patch` applies them to a
document and returns the result.

Differences from a plain RFC 6902 implementation:

* ``test`` compares the CBOR encodings byte for byte (``cbor2.dumps``), so
  object member order matters (``{"a":1,"b":2}`` is not ``{"b":2,"a":1}``)
  and so does the number type (``22`` is not ``22.0``).
* A patch applies only to an array or an object; any scalar document fails
  (as operation 0), even for an empty patch.
* ``remove`` of the whole document (path ``""``) fails.
* ``NaN``/``Infinity`` and repeated member names are not accepted in patch
  text (RFC 6902 A.13 treats a repeated ``"op"`` as an invalid patch), nor
  is text nesting arrays and objects deeper than
  :data:`~topics.types.MAX_JSON_DEPTH`.
* An operation whose result would nest deeper than
  :data:`~topics.types.MAX_JSON_DEPTH` fails (no topic could hold it), so a
  document within the limit stays within it and nothing that walks it
  (``test``'s CBOR encoder among them) goes deeper than that.

Application never mutates its input and is atomic: it returns the fully
patched document or raises :class:`PatchFailed`. The result shares the parts
no operation touched with the input (see :mod:`topics.pointer`).

Not built on jsonpatch: ``JsonPatch.apply`` deep-copies the whole document
before the first operation (in place, it mutates the input), which makes a
typical view patch 3-130x slower than here, where only the containers along
each path are copied (figures: bench/json_patch.py). jsonpatch is the oracle
in tests/unit/topics/test_patch.py.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

import cbor2

from topics.errors import InvalidValueError
from topics.types import MAX_JSON_DEPTH, check_json_text_depth
from topics.pointer import (
    MISSING,
    InsertError,
    PointerError,
    array_index,
    format_pointer,
    insert_at,
    nests_deeper_than,
    parse_pointer,
    replace_at,
    resolve,
)

__all__ = [
    "OPS",
    "PatchFailed",
    "PatchOperation",
    "PatchSyntaxError",
    "apply_patch",
    "parse_patch",
]

OPS: Final = frozenset({"add", "remove", "replace", "move", "copy", "test"})
"""The operation names of RFC 6902."""

_NEEDS_FROM: Final = frozenset({"move", "copy"})
_NEEDS_VALUE: Final = frozenset({"add", "replace", "test"})


# -- errors ---------------------------------------------------------------------------


class PatchSyntaxError(ValueError):
    """The patch text is not a valid RFC 6902 patch.

    ``index`` is the offending operation's position in the array (``None``
    when the text as a whole is wrong) and ``reason`` what is wrong; the
    message is ``operation <index>: <reason>`` or just the reason.
    """

    def __init__(self, index: int | None, reason: str) -> None:
        super().__init__(reason if index is None else f"operation {index}: {reason}")
        self.index = index
        self.reason = reason


class PatchFailed(ValueError):
    """Operation ``index`` of a patch cannot apply to the document; ``reason`` says why."""

    def __init__(self, index: int, reason: str) -> None:
        super().__init__(f"operation {index}: {reason}")
        self.index = index
        self.reason = reason


# -- parsing --------------------------------------------------------------------------


@dataclass(eq=True, frozen=True, unsafe_hash=False)
class PatchOperation:
    """One checked patch operation.

    ``path`` (and ``from_`` for ``move``/``copy``, else ``None``) are decoded
    pointers. ``value`` is the decoded JSON value for ``add``/``replace``/
    ``test`` (object member order as written) and ``None`` otherwise. The
    value may be a dict or list, so operations are not hashable; treat it as
    immutable.
    """

    op: str
    path: tuple[str, ...]
    from_: tuple[str, ...] | None = None
    value: Any = None

    __hash__ = None  # type: ignore[assignment]


def parse_patch(text: str) -> tuple[PatchOperation, ...]:
    """Parse and check RFC 6902 patch ``text``.

    The text must be a JSON array of operation objects, each with a known
    ``"op"``, a ``"path"`` pointer, a ``"from"`` pointer for ``move`` and
    ``copy`` and a ``"value"`` for ``add``, ``replace`` and ``test``; other
    members are ignored. Raises :class:`PatchSyntaxError` otherwise (with the
    decoder's line and column for text that is not JSON); an object with a
    repeated member name, ``NaN``, the infinities and nesting deeper than
    :data:`~topics.types.MAX_JSON_DEPTH` count as not JSON.
    """
    document = _decode(text)
    if not isinstance(document, list):
        raise PatchSyntaxError(None, f"a patch must be a JSON array of operations, not {_json_type(document)}")
    return tuple(_operation(index, item) for index, item in enumerate(document))


def _decode(text: str) -> Any:
    """``json.loads`` that keeps member order and rejects NaN, the infinities, duplicate
    names and nesting too deep (before ``json.loads`` recurses into it)."""
    try:
        check_json_text_depth(text)
    except InvalidValueError as e:
        raise PatchSyntaxError(None, f"invalid JSON: {e}") from None
    try:
        return json.loads(text, parse_constant=_reject_constant, object_pairs_hook=_unique_members)
    except json.JSONDecodeError as e:
        raise PatchSyntaxError(None, f"invalid JSON at line {e.lineno} column {e.colno}: {e.msg}") from None
    except _NotJson as e:
        raise PatchSyntaxError(None, f"invalid JSON: {e.reason}") from None


class _NotJson(ValueError):
    """Text ``json`` accepts but a patch does not."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _reject_constant(name: str) -> NoReturn:
    """``NaN``, ``Infinity`` and ``-Infinity`` are not JSON numbers."""
    raise _NotJson(f"{name} is not a JSON number")


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members in the order written; a repeated name is an error (RFC 6902 A.13)."""
    members: dict[str, Any] = {}
    for name, value in pairs:
        if name in members:
            raise _NotJson(f"an object has the member {json.dumps(name)} twice")
        members[name] = value
    return members


def _operation(index: int, item: Any) -> PatchOperation:
    """Check one decoded array element and build its :class:`PatchOperation`."""
    if not isinstance(item, dict):
        raise PatchSyntaxError(index, f"an operation must be a JSON object, not {_json_type(item)}")
    if "op" not in item:
        raise PatchSyntaxError(index, 'needs an "op" member')
    op = item["op"]
    if not isinstance(op, str):
        raise PatchSyntaxError(index, f'"op" must be a string, not {_json_type(op)}')
    if op not in OPS:
        raise PatchSyntaxError(index, f"unknown op {json.dumps(op)}; one of {', '.join(sorted(OPS))}")
    path = _pointer_member(index, op, item, "path")
    from_ = _pointer_member(index, op, item, "from") if op in _NEEDS_FROM else None
    if op in _NEEDS_VALUE and "value" not in item:
        raise PatchSyntaxError(index, f'"{op}" needs a "value"')
    return PatchOperation(op, path, from_, item.get("value") if op in _NEEDS_VALUE else None)


def _pointer_member(index: int, op: str, item: Mapping[str, Any], name: str) -> tuple[str, ...]:
    """The decoded pointer in member ``name`` of operation ``index``."""
    if name not in item:
        raise PatchSyntaxError(index, f'"{op}" needs a "{name}" pointer')
    text = item[name]
    if not isinstance(text, str):
        raise PatchSyntaxError(index, f'"{name}" must be a JSON pointer string, not {_json_type(text)}')
    try:
        return parse_pointer(text)
    except PointerError as e:
        raise PatchSyntaxError(index, f'invalid "{name}" pointer {json.dumps(text)}: {e}') from None


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, with an article."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


# -- applying -------------------------------------------------------------------------


def apply_patch(document: Any, operations: Iterable[PatchOperation]) -> Any:
    """The result of applying ``operations`` in order to ``document``.

    ``document`` must be an array or an object. Semantics are those of RFC
    6902 except that ``test`` compares CBOR bytes (see the module docs).
    ``document`` is never mutated; if any operation cannot apply, nothing is
    returned and :class:`PatchFailed` names that operation's index.
    """
    if not isinstance(document, (dict, list)):
        raise PatchFailed(0, f"a patch applies to an array or an object, not {_json_type(document)}")
    for index, operation in enumerate(operations):
        apply = _APPLY.get(operation.op)
        if apply is None:
            raise PatchFailed(index, f"unknown op {operation.op!r}")
        try:
            document = apply(document, operation)
        except _Failure as e:
            raise PatchFailed(index, e.reason) from None
    return document


class _Failure(Exception):
    """An operation cannot apply; :func:`apply_patch` adds the index."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _add(document: Any, operation: PatchOperation) -> Any:
    """RFC 6902 4.1, with a copy of the operation's value."""
    _fits(operation.path, operation.value)
    return _added(document, operation.path, copy.deepcopy(operation.value))


def _remove(document: Any, operation: PatchOperation) -> Any:
    """RFC 6902 4.2."""
    return _removed(document, operation.path)


def _replace(document: Any, operation: PatchOperation) -> Any:
    """RFC 6902 4.3, with a copy of the operation's value."""
    _existing(document, operation.path, "path")
    _fits(operation.path, operation.value)
    return replace_at(document, operation.path, copy.deepcopy(operation.value))


def _move(document: Any, operation: PatchOperation) -> Any:
    """RFC 6902 4.4: remove at ``from`` then add at ``path``."""
    source, target = _source(operation), operation.path
    value = _existing(document, source, "from")
    if len(target) > len(source) and target[: len(source)] == source:
        raise _Failure(f"cannot move {_show(source)} into its own child {_show(target)}")
    if target == source:
        return document
    if len(target) > len(source):  # no deeper than it was, otherwise
        _fits(target, value)
    return _added(_removed(document, source), target, value)


def _copy(document: Any, operation: PatchOperation) -> Any:
    """RFC 6902 4.5: add the value at ``from`` at ``path``."""
    source, target = _source(operation), operation.path
    value = _existing(document, source, "from")
    if len(target) > len(source):  # no deeper than it was, otherwise
        _fits(target, value)
    return _added(document, target, value)


def _fits(path: tuple[str, ...], value: Any) -> None:
    """Fail unless ``value`` put at ``path`` nests at most :data:`MAX_JSON_DEPTH` deep."""
    if nests_deeper_than(value, MAX_JSON_DEPTH - len(path)):
        raise _Failure(
            f"the value at {_show(path)} would nest the document deeper than {MAX_JSON_DEPTH} levels"
            " of arrays and objects"
        )


def _test(document: Any, operation: PatchOperation) -> Any:
    """RFC 6902 4.6, comparing the CBOR encodings byte for byte."""
    actual = _existing(document, operation.path, "path")
    if _cbor(actual) != _cbor(operation.value):
        raise _Failure(f"the value at {_show(operation.path)} differs from the test value (compared as CBOR bytes)")
    return document


_APPLY: Final[Mapping[str, Callable[[Any, PatchOperation], Any]]] = {
    "add": _add,
    "remove": _remove,
    "replace": _replace,
    "move": _move,
    "copy": _copy,
    "test": _test,
}


def _added(document: Any, path: tuple[str, ...], value: Any) -> Any:
    """``document`` with ``value`` added at ``path``: set a member, or insert into an array."""
    if not path:
        return value
    parent = resolve(document, path[:-1])
    if isinstance(parent, list):
        return replace_at(document, path[:-1], _inserted(parent, path, value))
    try:
        return insert_at(document, path, value)
    except InsertError as e:
        raise _Failure(e.reason) from None


def _inserted(items: list[Any], path: tuple[str, ...], value: Any) -> list[Any]:
    """A copy of ``items`` with ``value`` inserted at index ``path[-1]`` (``-``: appended)."""
    token = path[-1]
    index = len(items) if token == "-" else array_index(token)
    if index is None:
        raise _Failure(f"{token!r} in {_show(path)} is not an array index")
    if index > len(items):
        raise _Failure(f"index {index} in {_show(path)} is past the end of an array of {len(items)}")
    return [*items[:index], value, *items[index:]]


def _removed(document: Any, path: tuple[str, ...]) -> Any:
    """``document`` without the (existing) value at ``path``."""
    _existing(document, path, "path")
    if not path:
        raise _Failure("cannot remove the whole document")
    parent, token = resolve(document, path[:-1]), path[-1]
    if isinstance(parent, dict):
        smaller: Any = {key: item for key, item in parent.items() if key != token}
    else:
        index = array_index(token)
        assert index is not None, "the path exists"
        smaller = [*parent[:index], *parent[index + 1 :]]
    return replace_at(document, path[:-1], smaller)


def _existing(document: Any, path: tuple[str, ...], member: str) -> Any:
    """The value at ``path``; fails naming the ``member`` if there is none."""
    value = resolve(document, path)
    if value is MISSING:
        raise _Failure(f"{member} {_show(path)} does not exist")
    return value


def _source(operation: PatchOperation) -> tuple[str, ...]:
    """The ``from`` pointer of a ``move`` or ``copy``."""
    if operation.from_ is None:
        raise _Failure(f'"{operation.op}" needs a "from" pointer')
    return operation.from_


def _cbor(value: Any) -> bytes:
    """The CBOR encoding ``test`` compares; fails for a value CBOR cannot hold."""
    try:
        return bytes(cbor2.dumps(value))
    except (UnicodeEncodeError, cbor2.CBOREncodeError, ValueError, TypeError) as e:
        raise _Failure(f"the value cannot be encoded as CBOR: {e}") from None


def _show(path: tuple[str, ...]) -> str:
    """A pointer for messages."""
    return json.dumps(format_pointer(path))
