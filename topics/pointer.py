"""RFC 6901 JSON pointers over decoded JSON values (pure).

A *document* is a decoded JSON value: ``dict`` (string keys), ``list``,
``str``, ``int``, ``float``, ``bool`` or ``None``. A pointer is held as its
tuple of decoded reference tokens; :func:`parse_pointer` and
:func:`format_pointer` convert between that tuple and the pointer text, and
``parse_pointer(format_pointer(tokens)) == tokens`` for every tuple of
strings.

Nothing here mutates a document. :func:`insert_at` and :func:`replace_at`
return a new document that copies only the containers along the pointer and
shares every other part with the input, so callers must treat documents as
immutable values. Nothing here recurses: a pointer may be as long as its
document is deep, and :func:`nests_deeper_than` measures a document with a
stack of its own.

Not built on jsonpointer: ``JsonPointer.set(inplace=False)`` deep-copies the
whole document, its ``resolve`` is 3-7x slower than ``resolve`` here, and a
miss formats the whole document into an exception unless the process-wide
``VERBOSE_EXCEPTIONS`` is cleared (figures: bench/json_patch.py).
jsonpointer is the oracle in tests/unit/topics/test_pointer.py.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final


__all__ = [
    "MISSING",
    "InsertError",
    "PointerError",
    "array_index",
    "format_pointer",
    "insert_at",
    "is_scalar",
    "nests_deeper_than",
    "parse_pointer",
    "replace_at",
    "resolve",
]

_INDEX: Final = re.compile(r"0|[1-9][0-9]*", re.ASCII)


class PointerError(ValueError):
    """The text is not a valid JSON pointer.

    ``pointer`` is the whole pointer text, ``position`` the index in it of the
    offending character and ``reason`` what is wrong there.
    """

    def __init__(self, pointer: str, position: int, reason: str) -> None:
        super().__init__(f"{reason} at position {position}")
        self.pointer = pointer
        self.position = position
        self.reason = reason


class InsertError(ValueError):
    """A value cannot be put at a pointer; ``reason`` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class _Missing:
    """The type of :data:`MISSING`; it has exactly one instance."""

    _instance: _Missing | None = None

    def __new__(cls) -> _Missing:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "MISSING"

    def __bool__(self) -> bool:
        return False

    def __copy__(self) -> _Missing:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> _Missing:
        return self

    def __reduce__(self) -> str:
        return "MISSING"


MISSING: Final = _Missing()
"""What :func:`resolve` returns when the pointer does not reach a value.

Compare with ``is``; it is falsy and copies/pickles to itself.
"""


# -- pointer text ---------------------------------------------------------------------


def parse_pointer(text: str) -> tuple[str, ...]:
    """Decode pointer ``text`` into its reference tokens.

    ``""`` is the whole document (the empty tuple); any other pointer starts
    with ``"/"``. In a token ``~0`` decodes to ``~`` and ``~1`` to ``/``.
    Raises :class:`PointerError` naming the position of a missing leading
    ``/`` (0) or of a ``~`` that does not start ``~0`` or ``~1``.
    """
    if text == "":
        return ()
    if not text.startswith("/"):
        raise PointerError(text, 0, 'a JSON pointer must be empty or start with "/"')
    tokens: list[str] = []
    start = 1
    for raw in text[1:].split("/"):
        tokens.append(_unescape(text, raw, start))
        start += len(raw) + 1
    return tuple(tokens)


def _unescape(text: str, raw: str, start: int) -> str:
    """Decode one raw token found at ``start`` in pointer ``text``."""
    tilde = raw.find("~")
    while tilde != -1:
        if raw[tilde + 1 : tilde + 2] not in ("0", "1"):
            raise PointerError(text, start + tilde, '"~" must be followed by "0" or "1"')
        tilde = raw.find("~", tilde + 2)
    return raw.replace("~1", "/").replace("~0", "~")


def format_pointer(tokens: Sequence[str]) -> str:
    """Encode reference tokens as pointer text (the inverse of :func:`parse_pointer`)."""
    return "".join("/" + token.replace("~", "~0").replace("/", "~1") for token in tokens)


# -- reading --------------------------------------------------------------------------


def nests_deeper_than(value: Any, levels: int) -> bool:
    """Whether ``value`` has more than ``levels`` arrays and objects inside one another.

    A scalar has none, ``[]`` and ``{}`` one, ``[{"a": []}]`` three. Walks the
    containers only, with its own stack, and stops at the first one too deep.
    """
    if levels < 0:
        return True
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        node, outside = stack.pop()
        if isinstance(node, dict):
            children: Any = node.values()
        elif isinstance(node, list):
            children = node
        else:
            continue
        if outside >= levels:
            return True
        stack.extend((child, outside + 1) for child in children if isinstance(child, (dict, list)))
    return False


def is_scalar(value: Any) -> bool:
    """Whether ``value`` is a JSON scalar: ``str``, ``int``, ``float``, ``bool`` or ``None``."""
    return value is None or isinstance(value, (str, int, float))


def array_index(token: str) -> int | None:
    """The array index that ``token`` spells, or ``None``.

    Only ``"0"`` and ASCII digits without a leading zero are indexes; ``"-"``,
    ``"01"``, ``"+1"`` and ``" 1"`` are not.
    """
    return int(token) if _INDEX.fullmatch(token) else None


def resolve(document: Any, tokens: Sequence[str]) -> Any:
    """The value at pointer ``tokens`` in ``document``, or :data:`MISSING`.

    :data:`MISSING` when a key is absent, an array token is not an index (for
    example ``"-"`` or ``"01"``) or is out of range, or the pointer steps into
    a scalar. The empty pointer gives ``document`` itself.
    """
    node = document
    for token in tokens:
        node = _child(node, token)
        if node is MISSING:
            return MISSING
    return node


def _child(node: Any, token: str) -> Any:
    """The member or element ``token`` of ``node``, or :data:`MISSING`."""
    if isinstance(node, dict):
        return node.get(token, MISSING)
    if isinstance(node, list):
        index = array_index(token)
        return node[index] if index is not None and index < len(node) else MISSING
    return MISSING


# -- writing --------------------------------------------------------------------------


def replace_at(document: Any, tokens: Sequence[str], value: Any) -> Any:
    """A new document with the existing value at ``tokens`` replaced by ``value``.

    Copies only the containers along the pointer; ``document`` is not
    mutated. The empty pointer gives ``value``. Raises :class:`InsertError`
    if the pointer does not resolve (see :func:`resolve`).
    """
    if resolve(document, tokens) is MISSING:
        raise InsertError(f"nothing at {format_pointer(tokens)!r} to replace")
    return _rebuilt(document, tokens, value)


def _rebuilt(node: Any, tokens: Sequence[str], value: Any) -> Any:
    """``node`` with the (existing) value at ``tokens`` swapped for ``value``.

    Copies the containers along the pointer from the deepest up, in a loop.
    """
    along: list[tuple[Any, str | int]] = []  # each container on the way, and the key into it
    for token in tokens:
        if isinstance(node, dict):
            along.append((node, token))
            node = node[token]
        else:
            index = array_index(token)
            assert isinstance(node, list) and index is not None, "caller checked the path resolves"
            along.append((node, index))
            node = node[index]
    for container, key in reversed(along):
        if isinstance(container, dict):
            copy: Any = dict(container)
        else:
            copy = list(container)
        copy[key] = value
        value = copy
    return value


def insert_at(document: Any, tokens: Sequence[str], item: Any) -> Any:
    """A new document with ``item`` put at pointer ``tokens``.

    The parent (the pointer without its last token) must be an object or
    an array. In an object the last token is the key to set (an existing
    member is overwritten); in an array it is the index of an existing
    element to replace, or ``"-"`` to append. The empty pointer gives
    ``item``. ``document`` is never mutated; only the containers along the
    pointer are copied. Raises :class:`InsertError` when the parent does not
    exist or is a scalar, or the array index is not valid or out of range.
    """
    if not tokens:
        return item
    parent_tokens, last = tokens[:-1], tokens[-1]
    parent = _container(document, parent_tokens)
    if isinstance(parent, dict):
        new_parent: Any = {**parent, last: item}
    else:
        new_parent = _list_set(parent, last, item, format_pointer(tokens))
    return _rebuilt(document, parent_tokens, new_parent)


def _container(document: Any, tokens: Sequence[str]) -> dict[str, Any] | list[Any]:
    """The object or array at ``tokens``; :class:`InsertError` if absent or a scalar."""
    parent = resolve(document, tokens)
    if parent is MISSING:
        raise InsertError(f"the parent {_describe(tokens)} does not exist")
    if not isinstance(parent, (dict, list)):
        raise InsertError(f"the parent {_describe(tokens)} is a scalar ({_json_type(parent)}), not an object or array")
    return parent


def _describe(tokens: Sequence[str]) -> str:
    """A pointer for messages: ``'/a/b'`` quoted, or ``the document root``."""
    return repr(format_pointer(tokens)) if tokens else "(the document root)"


def _json_type(value: Any) -> str:
    """The JSON name of a scalar's type (the Python name for a non-JSON value)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, str):
        return "string"
    return "number" if isinstance(value, (int, float)) else type(value).__name__


def _list_set(items: list[Any], token: str, item: Any, pointer: str) -> list[Any]:
    """A copy of ``items`` with element ``token`` replaced (or ``"-"``: appended)."""
    if token == "-":
        return [*items, item]
    index = array_index(token)
    if index is None:
        raise InsertError(f"{token!r} in {pointer!r} is not an array index")
    if index >= len(items):
        raise InsertError(f"index {index} in {pointer!r} is out of range for an array of {len(items)}")
    copy = list(items)
    copy[index] = item
    return copy
