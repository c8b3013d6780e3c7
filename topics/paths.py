"""Topic paths.

A topic path is a ``/``-separated string of non-empty segments. Paths are
kept as plain ``str`` in their *normal form*: no leading or trailing ``/`` and
no repeated ``/`` (``"/a//b/"`` normalises to ``"a/b"``). Every function
here that takes a path expects the normal form unless it says otherwise;
:func:`normalise` produces it and rejects what cannot be a topic path.

The empty string is not a topic path, but it is the *root* and is a valid
prefix: the path prefix of ``*.*`` is ``""``, and ``is_prefix("", p)`` holds
for every path.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from topics.errors import PathError

SEPARATOR = "/"


# Control characters (Unicode category Cc: C0, DEL and C1) would break logs,
# terminals and protocols that print paths.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def normalise(path: object) -> str:
    """Return the normal form of ``path`` or raise :class:`PathError`.

    Leading, trailing and repeated separators are removed. A path with no
    segment left, or containing a control character, is rejected.
    """
    if not isinstance(path, str):
        raise PathError(f"expected a string, got {type(path).__name__}", path)
    bad = _CONTROL.search(path)
    if bad is not None:
        raise PathError(f"control character U+{ord(bad.group()):04X}", path, bad.start())
    if SEPARATOR * 2 in path or path.startswith(SEPARATOR) or path.endswith(SEPARATOR):
        normal = SEPARATOR.join(s for s in path.split(SEPARATOR) if s)
    else:
        normal = path
    if not normal:
        raise PathError("a topic path needs at least one non-empty segment", path)
    return normal


def is_normal(path: str) -> bool:
    """True when ``path`` is already a valid path in normal form."""
    try:
        return normalise(path) == path
    except PathError:
        return False


def segments(path: str) -> tuple[str, ...]:
    """The segments of a normal path (``()`` for the root ``""``)."""
    return tuple(path.split(SEPARATOR)) if path else ()


def depth(path: str) -> int:
    """Number of segments of a normal path."""
    return path.count(SEPARATOR) + 1 if path else 0


def join(*parts: str) -> str:
    """Join path fragments and normalise; empty fragments are skipped."""
    return normalise(SEPARATOR.join(p for p in parts if p))


def parent(path: str) -> str:
    """The parent of a normal path; the parent of a top-level path is ``""``."""
    cut = path.rfind(SEPARATOR)
    return path[:cut] if cut >= 0 else ""


def ancestors(path: str) -> list[str]:
    """Proper ancestors of a normal path, shortest first, root excluded."""
    out: list[str] = []
    cut = path.find(SEPARATOR)
    while cut >= 0:
        out.append(path[:cut])
        cut = path.find(SEPARATOR, cut + 1)
    return out


def is_prefix(prefix: str, path: str) -> bool:
    """True when ``prefix`` is ``path`` or one of its ancestors (segment-wise).

    ``is_prefix("a/b", "a/b/c")`` and ``is_prefix("a/b", "a/b")`` hold;
    ``is_prefix("a/b", "a/bc")`` does not. The root ``""`` prefixes everything.
    """
    if not prefix:
        return True
    if not path.startswith(prefix):
        return False
    return len(path) == len(prefix) or path[len(prefix)] == SEPARATOR


def is_descendant(path: str, ancestor: str) -> bool:
    """True when ``path`` lies strictly below ``ancestor``."""
    return path != ancestor and is_prefix(ancestor, path)


def relative(path: str, prefix: str) -> str:
    """``path`` with ``prefix`` removed; ``prefix`` must be a prefix of it."""
    if not is_prefix(prefix, path):
        raise PathError(f"{prefix!r} is not a prefix of the path", path)
    if not prefix:
        return path
    return path[len(prefix) + 1 :]


def common_prefix(paths: Iterable[str]) -> str:
    """The longest segment-wise common prefix of the given normal paths."""
    result: list[str] | None = None
    for path in paths:
        segs = path.split(SEPARATOR) if path else []
        if result is None:
            result = segs
            continue
        n = 0
        for a, b in zip(result, segs):
            if a != b:
                break
            n += 1
        del result[n:]
        if not result:
            break
    return SEPARATOR.join(result or [])
