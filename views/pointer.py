"""RFC 6901 JSON pointers: :mod:`topics.pointer`, where the partition's topic store can use them
(the views' code and ``bench/json_patch.py`` import them from here as well)."""

from __future__ import annotations

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
