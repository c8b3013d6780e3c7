"""OpenAjax Hub 2.0 dotted topic names (OpenAjax names) and their place in the topic tree.

A *name* is one or more non-empty tokens separated by ``.``. For
subscribing, a *pattern* may use wildcard tokens: ``*`` matches exactly one
token and may appear anywhere; ``**`` matches one or more tokens and may only
be the last token. A wildcard is always a whole token (``bb*cc`` is invalid)
and publishing to a name with a wildcard is rejected.

Names live in the topic tree under a configurable *root branch*: each token
becomes one path segment, so with root ``hub`` the name ``org.example.a``
is the topic ``hub/org/example/a``. Because of that mapping canopy adds one
rule the OpenAjax Hub 2.0 specification leaves open: a token may not contain ``/`` (it would silently
become two segments) nor a control character (topic paths forbid them).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from topics import paths
from topics.errors import OpenAjaxNameError, PathError
from topics.selectors import PathSelector, Qualifier, Selector, SplitPathSelector

__all__ = [
    "OpenAjaxPattern",
    "name_to_path",
    "parse_pattern",
    "path_to_name",
    "validate_name",
]

ONE = "*"
MANY = "**"
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")


def _tokens(name: object) -> tuple[str, ...]:
    if not isinstance(name, str):
        raise OpenAjaxNameError(f"expected a string, got {type(name).__name__}", name)
    if not name:
        raise OpenAjaxNameError("a topic name needs at least one token", name)
    tokens = tuple(name.split("."))
    for index, token in enumerate(tokens):
        if not token:
            raise OpenAjaxNameError("empty token", name, index)
        if "/" in token:
            raise OpenAjaxNameError("a token may not contain '/'", name, index)
        bad = _CONTROL.search(token)
        if bad is not None:
            raise OpenAjaxNameError(
                f"control character U+{ord(bad.group()):04X}", name, index
            )
    return tokens


def validate_name(name: object) -> tuple[str, ...]:
    """Validate a name for publishing (no wildcards) and return its tokens."""
    tokens = _tokens(name)
    for index, token in enumerate(tokens):
        if "*" in token:
            if token in (ONE, MANY):
                raise OpenAjaxNameError(
                    "wildcards are allowed when subscribing, not when publishing",
                    name,
                    index,
                )
            raise OpenAjaxNameError(
                "'*' may not be mixed with other characters in a token", name, index
            )
    return tokens


@dataclass(frozen=True)
class OpenAjaxPattern:
    """A validated subscription pattern; build it with :func:`parse_pattern`."""

    tokens: tuple[str, ...]

    def __str__(self) -> str:
        return ".".join(self.tokens)

    @property
    def has_wildcards(self) -> bool:
        return any(t in (ONE, MANY) for t in self.tokens)

    def matches(self, name: str) -> bool:
        """True when the (wildcard-free) ``name`` is selected by this pattern."""
        given = name.split(".")
        tokens = self.tokens
        if tokens[-1] == MANY:
            fixed = tokens[:-1]
            if len(given) <= len(fixed):
                return False
        else:
            fixed = tokens
            if len(given) != len(fixed):
                return False
        return all(t == ONE or t == g for t, g in zip(fixed, given))

    def to_selector(self, root: str = "") -> Selector:
        """The topic selector that selects this pattern's names under ``root``."""
        root_segments = list(paths.segments(paths.normalise(root))) if root else []
        if not self.has_wildcards:
            return PathSelector("/".join(root_segments + list(self.tokens)))
        qualifier = Qualifier.MATCH
        tokens = list(self.tokens)
        if tokens[-1] == MANY:
            # "**" is one or more tokens: one segment, plus its descendants
            tokens[-1] = ONE
            qualifier = Qualifier.MATCH_AND_DESCENDANTS
        patterns = [re.escape(s) for s in root_segments] + [
            ".+" if t == ONE else re.escape(t) for t in tokens
        ]
        return SplitPathSelector.of(patterns, qualifier)


def parse_pattern(pattern: object) -> OpenAjaxPattern:
    """Validate a subscription pattern (``*`` anywhere, ``**`` only last)."""
    tokens = _tokens(pattern)
    last = len(tokens) - 1
    for index, token in enumerate(tokens):
        if token == MANY:
            if index != last:
                raise OpenAjaxNameError("'**' may only be the last token", pattern, index)
        elif token != ONE and "*" in token:
            raise OpenAjaxNameError(
                "'*' may not be mixed with other characters in a token", pattern, index
            )
    return OpenAjaxPattern(tokens)


def name_to_path(name: str, root: str = "") -> str:
    """The topic path of a publishable ``name`` under ``root``."""
    tokens = validate_name(name)
    try:
        return paths.join(root, "/".join(tokens))
    except PathError as e:  # a token made only of characters paths reject
        raise OpenAjaxNameError(e.reason, name) from None


def path_to_name(path: str, root: str = "") -> str | None:
    """The dotted name of a topic ``path`` under ``root``, or ``None``.

    ``None`` when the path is not below the root or has a segment that
    cannot be a token (one containing ``.`` or a wildcard).
    """
    root = paths.normalise(root) if root else ""
    if not paths.is_descendant(path, root) and root:
        return None
    rest = paths.relative(path, root)
    segs = rest.split("/")
    for s in segs:
        if "." in s or "*" in s:
            return None
    return ".".join(segs)
