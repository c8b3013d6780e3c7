"""Topic selectors: parsing, matching and path prefixes.

The selector language (see ``conformance/selectors.md``) has four forms,
told apart by the first character of the expression:

``>path``
    Exactly the topic at ``path``. Leading, trailing and repeated ``/`` are
    normalised away; regular expression characters are literal. An
    expression with no prefix character is a path selector too, except
    that it may not start with one of the reserved characters ``$ % & <``.
``?re1/re2/...``
    Split-path pattern: one regular expression per path segment, each of
    which must match the whole segment. A leading ``/`` is ignored; no
    expression may be empty (so no ``//`` inside the pattern).
``*regex``
    Full-path pattern: one regular expression that must match the whole
    path (in normal form, i.e. without a leading ``/``). It may not
    contain ``////``.
``#sel1////sel2////...``
    Selector set: matches what any member matches. Nested sets are
    flattened and duplicate members dropped.

A trailing ``/`` on a ``?`` or ``*`` expression selects only the
*descendants* of the matched paths; a trailing ``//`` selects the matched
paths *and* their descendants (:class:`Qualifier`).

Regular expressions are Python :mod:`re` patterns applied with
``fullmatch``; the reference system uses Java's syntax, which agrees for
everything but exotic constructs (``\\p{Alpha}``, ``\\Q..\\E``).

Every selector has a :attr:`Selector.path_prefix`, the longest run of
leading path segments that every matching path must start with. It is what
routing, permission checks (SELECT_TOPIC) and the fan-out intersection test
use. It is computed conservatively: when in doubt (alternation at the top
level of a full-path regex, a quantifier after a literal character) the
prefix is shortened, never lengthened, so a permission check on the prefix
can never be weaker than one on every matched path.

Selectors are immutable, hashable and compare equal when their canonical
expressions (``str(selector)``) are equal; ``parse_selector(str(s)) == s``
always holds. Invalid expressions raise :class:`~topics.errors.SelectorError`
naming the problem and its position in the expression.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable
from functools import lru_cache
from typing import Any, ClassVar, NoReturn

from topics import paths
from topics.errors import PathError, SelectorError

__all__ = [
    "FullPathSelector",
    "PathSelector",
    "Qualifier",
    "Selector",
    "SelectorSet",
    "SelectorType",
    "SplitPathSelector",
    "any_of",
    "literal_text",
    "parse_selector",
]

SET_DELIMITER = "////"
_RESERVED_FIRST = frozenset("$%&<")
_META = frozenset(".^$*+?{}[]\\|()")
_QUANTIFIERS = frozenset("*+?{")
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f]")
# A set delimiter is four slashes not followed by a fifth: "?a//" + "////" +
# ">b" must split after the member's own "//" qualifier.
_SET_SPLIT = re.compile(r"////(?!/)")


class Qualifier(enum.Enum):
    """What a ``?`` or ``*`` pattern selects relative to the paths it matches."""

    MATCH = ""
    DESCENDANTS = "/"
    MATCH_AND_DESCENDANTS = "//"

    @property
    def includes_self(self) -> bool:
        return self is not Qualifier.DESCENDANTS

    @property
    def includes_descendants(self) -> bool:
        return self is not Qualifier.MATCH


class SelectorType(enum.Enum):
    """The four selector forms, valued by their prefix character."""

    PATH = ">"
    SPLIT_PATH_PATTERN = "?"
    FULL_PATH_PATTERN = "*"
    SELECTOR_SET = "#"


class Selector:
    """Base of the immutable selector objects; build them with :func:`parse_selector`."""

    __slots__ = ("expression", "path_prefix")
    type: ClassVar[SelectorType]
    expression: str
    path_prefix: str

    def _init(self, expression: str, path_prefix: str) -> None:
        object.__setattr__(self, "expression", expression)
        object.__setattr__(self, "path_prefix", path_prefix)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError(f"{type(self).__name__} is immutable")

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (parse_selector, (self.expression,))

    def matches(self, path: str) -> bool:
        """True when the selector selects ``path`` (a path in normal form)."""
        raise NotImplementedError

    @property
    def members(self) -> tuple[Selector, ...]:
        """The non-set selectors this selector is the union of."""
        return (self,)

    @property
    def literal_path(self) -> str | None:
        """The single path this selector can match, or ``None`` if it may match several."""
        return None

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Selector):
            return self.expression == other.expression
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.expression)

    def __str__(self) -> str:
        return self.expression

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expression!r})"


class PathSelector(Selector):
    """Selects exactly one path."""

    __slots__ = ("path",)
    type = SelectorType.PATH
    path: str

    def __init__(self, path: str) -> None:
        object.__setattr__(self, "path", path)
        self._init(">" + path, path)

    def matches(self, path: str) -> bool:
        return path == self.path

    @property
    def literal_path(self) -> str | None:
        return self.path


class SplitPathSelector(Selector):
    """One regular expression per segment, plus a :class:`Qualifier`."""

    __slots__ = ("patterns", "qualifier", "regexes", "literals")
    type = SelectorType.SPLIT_PATH_PATTERN
    patterns: tuple[str, ...]
    qualifier: Qualifier
    regexes: tuple[re.Pattern[str], ...]
    #: for each segment, the exact text it matches when its regex is a plain
    #: literal, else ``None`` (the subscription index uses it as a trie key)
    literals: tuple[str | None, ...]

    def __init__(
        self,
        patterns: tuple[str, ...],
        qualifier: Qualifier,
        regexes: tuple[re.Pattern[str], ...],
    ) -> None:
        literals = tuple(literal_text(p) for p in patterns)
        prefix: list[str] = []
        for lit in literals:
            if lit is None:
                break
            prefix.append(lit)
        object.__setattr__(self, "patterns", patterns)
        object.__setattr__(self, "qualifier", qualifier)
        object.__setattr__(self, "regexes", regexes)
        object.__setattr__(self, "literals", literals)
        self._init("?" + "/".join(patterns) + qualifier.value, "/".join(prefix))

    def matches(self, path: str) -> bool:
        parts = path.split("/")
        n = len(self.regexes)
        q = self.qualifier
        if q is Qualifier.MATCH:
            if len(parts) != n:
                return False
        elif q is Qualifier.DESCENDANTS:
            if len(parts) <= n:
                return False
        elif len(parts) < n:
            return False
        for rx, part in zip(self.regexes, parts):
            if rx.fullmatch(part) is None:
                return False
        return True

    @property
    def literal_path(self) -> str | None:
        if self.qualifier is Qualifier.MATCH and None not in self.literals:
            return self.path_prefix
        return None


class FullPathSelector(Selector):
    """One regular expression over the whole path, plus a :class:`Qualifier`."""

    __slots__ = ("pattern", "qualifier", "regex", "qualified", "_whole_literal")
    type = SelectorType.FULL_PATH_PATTERN
    pattern: str
    qualifier: Qualifier
    regex: re.Pattern[str]
    #: one regex for the pattern *and* its qualifier, or ``None`` when the
    #: pattern cannot be wrapped (global inline flags); see :meth:`matches`
    qualified: re.Pattern[str] | None
    _whole_literal: str | None

    def __init__(self, pattern: str, qualifier: Qualifier, regex: re.Pattern[str]) -> None:
        head, whole = _literal_head(pattern)
        if _has_top_level_alternation(pattern):
            prefix = ""
        else:
            cut = head if whole else head[: max(head.rfind("/"), 0)]
            prefix = "/".join(s for s in cut.split("/") if s)
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "qualifier", qualifier)
        object.__setattr__(self, "regex", regex)
        object.__setattr__(self, "_whole_literal", head if whole else None)
        object.__setattr__(self, "qualified", _qualify(pattern, qualifier))
        self._init("*" + pattern + qualifier.value, prefix)

    def matches(self, path: str) -> bool:
        if self.qualified is not None:
            return self.qualified.fullmatch(path) is not None
        rx = self.regex
        q = self.qualifier
        if q.includes_self and rx.fullmatch(path) is not None:
            return True
        if q.includes_descendants:
            # A descendant of a matched path is a path one of whose proper
            # ancestors matches: try each ancestor (each "/" position).
            cut = path.find("/")
            while cut >= 0:
                if rx.fullmatch(path, 0, cut) is not None:
                    return True
                cut = path.find("/", cut + 1)
        return False

    @property
    def literal_path(self) -> str | None:
        lit = self._whole_literal
        if self.qualifier is Qualifier.MATCH and lit is not None and paths.is_normal(lit):
            return lit
        return None


class SelectorSet(Selector):
    """The union of several non-set selectors."""

    __slots__ = ("selectors",)
    type = SelectorType.SELECTOR_SET
    selectors: tuple[Selector, ...]

    def __init__(self, selectors: Iterable[Selector]) -> None:
        flat: list[Selector] = []
        seen: set[Selector] = set()
        for sel in selectors:
            for member in sel.members:
                if member not in seen:
                    seen.add(member)
                    flat.append(member)
        if not flat:
            raise ValueError("a selector set needs at least one member")
        object.__setattr__(self, "selectors", tuple(flat))
        self._init(
            "#" + SET_DELIMITER.join(s.expression for s in flat),
            paths.common_prefix(s.path_prefix for s in flat),
        )

    def matches(self, path: str) -> bool:
        return any(s.matches(path) for s in self.selectors)

    @property
    def members(self) -> tuple[Selector, ...]:
        return self.selectors

    @property
    def literal_path(self) -> str | None:
        if len(self.selectors) == 1:
            return self.selectors[0].literal_path
        return None


# --------------------------------------------------------------------------
# regular expression analysis

_QUALIFIED_TAIL = {
    Qualifier.MATCH: "",
    Qualifier.DESCENDANTS: "/.+",
    Qualifier.MATCH_AND_DESCENDANTS: "(?:/.+)?",
}


def _qualify(pattern: str, qualifier: Qualifier) -> re.Pattern[str] | None:
    """``pattern`` followed by what its qualifier adds, as one regex.

    A path is a descendant of a path matching ``P`` exactly when it matches
    ``(?:P)/.+`` (segments are never empty), which one C-level match tests
    faster than trying ``P`` against every ancestor. Patterns that cannot be
    wrapped in a group (global inline flags must come first) return ``None``
    and are matched ancestor by ancestor instead.
    """
    try:
        return re.compile(f"(?:{pattern}){_QUALIFIED_TAIL[qualifier]}")
    except re.error:
        return None


def _literal_head(regex: str) -> tuple[str, bool]:
    """The text every match of ``regex`` must start with, and whether that is all of it.

    Plain characters and escaped punctuation (``\\.``) are literal; any other
    metacharacter ends the head. A quantifier removes the character it
    applies to, since that character may then be absent or repeated.
    """
    out: list[str] = []
    i, n = 0, len(regex)
    while i < n:
        c = regex[i]
        if c == "\\":
            nxt = regex[i + 1] if i + 1 < n else ""
            if nxt and not (nxt.isascii() and nxt.isalnum()):
                out.append(nxt)
                i += 2
                continue
            return "".join(out), False
        if c in _META:
            if c in _QUANTIFIERS and out:
                out.pop()
            return "".join(out), False
        out.append(c)
        i += 1
    return "".join(out), True


def literal_text(regex: str) -> str | None:
    """The only string ``regex`` matches if it is a plain literal, else ``None``."""
    head, whole = _literal_head(regex)
    return head if whole else None


def _has_top_level_alternation(regex: str) -> bool:
    depth = 0
    i, n = 0, len(regex)
    in_class = False
    while i < n:
        c = regex[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            # "[]...]" and "[^]...]": a leading "]" is a literal member
            if regex[i + 1 : i + 2] == "^":
                i += 1
            if regex[i + 1 : i + 2] == "]":
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            return True
        i += 1
    return False


# --------------------------------------------------------------------------
# parsing


def parse_selector(expression: object) -> Selector:
    """Parse a selector expression; raise :class:`SelectorError` if it is invalid.

    A :class:`Selector` passed in is returned unchanged.
    """
    if isinstance(expression, Selector):
        return expression
    if not isinstance(expression, str):
        raise SelectorError(f"expected a string, got {type(expression).__name__}", repr(expression), 0)
    return _parse_cached(expression)


@lru_cache(maxsize=4096)
def _parse_cached(expression: str) -> Selector:
    bad = _CONTROL.search(expression)
    if bad is not None:
        raise SelectorError(
            f"control character U+{ord(bad.group()):04X}", expression, bad.start()
        )
    return _parse(expression, expression, 0)


def _parse(text: str, whole: str, offset: int) -> Selector:
    if not text:
        raise SelectorError("empty selector expression", whole, offset)
    head = text[0]
    if head == ">":
        return _parse_path(text[1:], whole, offset + 1)
    if head == "?":
        return _parse_split(text[1:], whole, offset + 1)
    if head == "*":
        return _parse_full(text[1:], whole, offset + 1)
    if head == "#":
        return _parse_set(text[1:], whole, offset + 1)
    if head in _RESERVED_FIRST:
        raise SelectorError(
            f"an expression may not start with {head!r} (reserved); "
            "use '>' to select a path that starts with it",
            whole,
            offset,
        )
    return _parse_path(text, whole, offset)


def _parse_path(body: str, whole: str, offset: int) -> Selector:
    try:
        path = paths.normalise(body)
    except PathError as e:
        raise SelectorError(e.reason, whole, offset + (e.position or 0)) from None
    return PathSelector(path)


def _split_qualifier(body: str) -> tuple[str, Qualifier]:
    if body.endswith("//"):
        return body[:-2], Qualifier.MATCH_AND_DESCENDANTS
    if body.endswith("/"):
        return body[:-1], Qualifier.DESCENDANTS
    return body, Qualifier.MATCH


def _compile(pattern: str, whole: str, offset: int) -> re.Pattern[str]:
    try:
        return re.compile(pattern)
    except re.error as e:
        pos = e.pos if e.pos is not None else 0
        raise SelectorError(
            f"invalid regular expression {pattern!r}: {e.msg}", whole, offset + pos
        ) from None


def _parse_split(body: str, whole: str, offset: int) -> Selector:
    body, qualifier = _split_qualifier(body)
    if body.startswith("/"):
        body = body[1:]
        offset += 1
    if not body:
        raise SelectorError(
            "a split-path pattern needs at least one regular expression", whole, offset
        )
    patterns: list[str] = []
    regexes: list[re.Pattern[str]] = []
    pos = offset
    for index, part in enumerate(body.split("/")):
        if not part:
            raise SelectorError(
                f"empty regular expression for path segment {index}", whole, pos
            )
        patterns.append(part)
        regexes.append(_compile(part, whole, pos))
        pos += len(part) + 1
    return SplitPathSelector(tuple(patterns), qualifier, tuple(regexes))


def _parse_full(body: str, whole: str, offset: int) -> Selector:
    body, qualifier = _split_qualifier(body)
    if not body:
        raise SelectorError("a full-path pattern needs a regular expression", whole, offset)
    bad = body.find(SET_DELIMITER)
    if bad >= 0:
        raise SelectorError(
            "a full-path pattern may not contain '////'", whole, offset + bad
        )
    return FullPathSelector(body, qualifier, _compile(body, whole, offset))


def _parse_set(body: str, whole: str, offset: int) -> Selector:
    if not body:
        raise SelectorError("a selector set needs at least one member", whole, offset)
    members: list[Selector] = []
    pos = 0
    for match in [*_SET_SPLIT.finditer(body), None]:
        end = match.start() if match is not None else len(body)
        part = body[pos:end]
        if not part:
            raise SelectorError("empty member in selector set", whole, offset + pos)
        members.append(_parse(part, whole, offset + pos))
        if match is not None:
            pos = match.end()
    return SelectorSet(members)


def any_of(*selectors: Selector | str) -> Selector:
    """A selector matching what any of ``selectors`` matches (a one-member set is the member)."""
    parsed = [parse_selector(s) for s in selectors]
    result = SelectorSet(parsed)
    return result.selectors[0] if len(result.selectors) == 1 else result
