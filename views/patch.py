"""RFC 6902 JSON Patch with a byte-exact ``test``: :mod:`topics.patch`, where the partition's
topic store can use it (the views' code and ``bench/json_patch.py`` import it from here as well)."""

from __future__ import annotations

from topics.patch import (
    OPS,
    PatchFailed,
    PatchOperation,
    PatchSyntaxError,
    apply_patch,
    parse_patch,
)

__all__ = [
    "OPS",
    "PatchFailed",
    "PatchOperation",
    "PatchSyntaxError",
    "apply_patch",
    "parse_patch",
]
