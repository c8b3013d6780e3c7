"""Topic selectors: parsing, matching and path prefixes.

The selector language has four forms, told apart by the first character of
the expression (its specification cases are ``tests/unit/topics/test_selectors.py``):

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
    flattened and duplicate members dropped; sets may nest at most
    :data:`MAX_SELECTOR_DEPTH` deep (``##>a`` nests two).

A trailing ``/`` on a ``?`` or ``*`` expression selects only the
*descendants* of the matched paths; a trailing ``//`` selects the matched
paths *and* their descendants (:class:`Qualifier`).

Regular expressions use RE2's syntax (:class:`Regex`) and must match the
whole segment or path; matching takes time linear in the path, whatever
the pattern. The reference system uses Java's syntax, which agrees for
everyday patterns; what RE2 cannot run in linear time (backreferences,
lookaround, possessive quantifiers, atomic groups) is refused when the
selector is parsed, never when it is matched, and ``\\d``, ``\\w``, ``\\s``
and ``\\b`` are ASCII-only, as in Java.

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
from collections.abc import Iterable, Iterator
from functools import lru_cache
from typing import Any, ClassVar, Literal, NoReturn

import re2  # type: ignore[import-untyped]

from topics import paths
from topics.errors import PathError, SelectorError

__all__ = [
    "MAX_SELECTOR_DEPTH",
    "FullPathSelector",
    "PathSelector",
    "Qualifier",
    "Regex",
    "Selector",
    "SelectorSet",
    "SelectorType",
    "SplitPathSelector",
    "any_of",
    "compile_regex",
    "literal_text",
    "parse_selector",
]

SET_DELIMITER = "////"
#: how deep selector sets may nest inside one another; parsing recurses once per
#: level, so this keeps a hostile ``'#' * 2000 + '>a'`` far from Python's limit
MAX_SELECTOR_DEPTH = 32
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
    regexes: tuple[Regex, ...]
    #: for each segment, the exact text it matches when its regex is a plain
    #: literal, else ``None`` (the subscription index uses it as a trie key)
    literals: tuple[str | None, ...]

    def __init__(
        self,
        patterns: tuple[str, ...],
        qualifier: Qualifier,
        regexes: tuple[Regex, ...],
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

    @classmethod
    def of(cls, patterns: Iterable[str], qualifier: Qualifier) -> SplitPathSelector:
        """The selector of ``patterns`` (one regex per segment, at least one);
        raise :class:`SelectorError` for an invalid one. :func:`re.escape`
        makes a segment's literal pattern: its escapes are valid RE2."""
        patterns = tuple(patterns)
        return cls(patterns, qualifier, tuple(compile_regex(p) for p in patterns))

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
        for rx, literal, part in zip(self.regexes, self.literals, parts):
            if literal is not None:
                if part != literal:
                    return False
            elif rx.fullmatch(part) is None:
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
    regex: Regex
    #: one regex for the pattern *and* its qualifier, or ``None`` when the
    #: pattern cannot be wrapped (``\\Q`` quoting to its end); see :meth:`matches`
    qualified: Regex | None
    _whole_literal: str | None

    def __init__(self, pattern: str, qualifier: Qualifier, regex: Regex) -> None:
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
                if rx.fullmatch(path[:cut]) is not None:
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


def _qualify(pattern: str, qualifier: Qualifier) -> Regex | None:
    """``pattern`` followed by what its qualifier adds, as one regex.

    A path is a descendant of a path matching ``P`` exactly when it matches
    ``(?:P)/.+`` (segments are never empty), which one C-level match tests
    faster than trying ``P`` against every ancestor. A pattern that cannot be
    wrapped in a group (``\\Q`` quoting to its end would swallow the ``)``, and
    the wrapped pattern then does not compile) returns ``None`` and is matched
    ancestor by ancestor instead.
    """
    try:
        return compile_regex(f"(?:{pattern}){_QUALIFIED_TAIL[qualifier]}")
    except SelectorError:
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
    for _, token in _scan(regex):
        if token == "(":
            depth += 1
        elif token == ")":
            depth -= 1
        elif token == "|" and depth == 0:
            return True
    return False


# --------------------------------------------------------------------------
# the regular expression engine (RE2)

# Users' patterns run on RE2, whose matching time is linear in the text
# (Python's re backtracks: "(?:(?:[^!]*)*)*!" takes exponential time), and
# which parses and compiles with explicit stacks: deeply nested groups cost
# program memory (bounded below), never Python or C recursion.
# Matching calls the extension's RE2 object directly: the module's
# re-compatible wrapper maps UTF-8 offsets back to characters and builds a
# match object, 4-8x the cost of the direct call, which is itself 3-5x
# Python re's on short texts (bench/selector_regex.py).
_MAX_PROGRAM_BYTES = 1 << 20  # bounds each pattern's memory and compile time
_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # errors become SelectorErrors, not lines on stderr
_OPTIONS.never_capture = True  # only "does it match" is ever asked
_OPTIONS.max_mem = _MAX_PROGRAM_BYTES
_ANCHOR_BOTH = re2._re2.RE2.Anchor.ANCHOR_BOTH

# Constructs of Python's re, Java or PCRE that RE2 does not have, each
# refused with what it is rather than RE2's terser message.
_UNSUPPORTED_GROUPS = (
    ("(?=", "lookahead '(?=...)'"),
    ("(?!", "negative lookahead '(?!...)'"),
    ("(?<=", "lookbehind '(?<=...)'"),
    ("(?<!", "negative lookbehind '(?<!...)'"),
    ("(?>", "atomic group '(?>...)'"),
    ("(?P=", "backreference '(?P=name)'"),
    ("(?P>", "recursion '(?P>name)'"),
    ("(?R", "recursion '(?R)'"),
    ("(?(", "conditional '(?(...)...)'"),
    ("(?#", "comment '(?#...)'"),
    ("(?|", "branch reset group '(?|...)'"),
)
_INLINE_FLAGS = re.compile(r"\(\?([A-Za-z-]+)[:)]")
_RE2_FLAGS = frozenset("imsU-")
_REPETITION = re.compile(r"\{(?:\d+(?:,\d*)?|,\d+)\}")
_BRACED_ESCAPE = frozenset("xpPN")
_WHY = "regular expressions use RE2 syntax, which always matches in linear time"


class Regex:
    """A user's regular expression compiled by RE2: :meth:`fullmatch` takes
    time linear in the text, whatever the pattern.

    Build it with :func:`compile_regex`. Regexes are immutable, compare
    equal by pattern and pickle as their pattern.
    """

    __slots__ = ("pattern", "_match")
    pattern: str
    _match: Any  # the RE2 object's Match method

    def __init__(self, pattern: str, program: Any) -> None:
        object.__setattr__(self, "pattern", pattern)
        object.__setattr__(self, "_match", program.Match)

    def __setattr__(self, name: str, value: Any) -> NoReturn:
        raise AttributeError("Regex is immutable")

    def fullmatch(self, text: str) -> Literal[True] | None:
        """``True`` when the whole of ``text`` matches, else ``None`` (the
        shape of :meth:`re.Pattern.fullmatch`, so ``is not None`` reads the same)."""
        # surrogatepass: a lone surrogate (no wire decoder lets one through)
        # does not match rather than raising
        data = text.encode("utf-8", "surrogatepass")
        if self._match(_ANCHOR_BOTH, data, 0, len(data))[0][0] >= 0:
            return True
        return None

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (compile_regex, (self.pattern,))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Regex):
            return self.pattern == other.pattern
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self.pattern)

    def __repr__(self) -> str:
        return f"Regex({self.pattern!r})"


def compile_regex(pattern: str) -> Regex:
    """Compile a user's regular expression (RE2 syntax) for :meth:`Regex.fullmatch`.

    Raises :class:`SelectorError` whose ``expression`` is ``pattern`` and
    whose ``position`` is where in it the problem is; constructs RE2 cannot
    run in linear time (backreferences, lookaround, possessive quantifiers,
    atomic groups...) are named as such. Callers outside selectors re-raise
    it as their own syntax error.
    """
    return _compile_cached(pattern)


@lru_cache(maxsize=1024)  # selectors share segment patterns (".*"); each program may be ~100 KiB
def _compile_cached(pattern: str) -> Regex:
    found = _unsupported(pattern)
    if found is not None:
        raise SelectorError(found[1], pattern, found[0])
    try:
        encoded = pattern.encode("utf-8")
    except UnicodeEncodeError as e:
        raise SelectorError(f"lone surrogate U+{ord(pattern[e.start]):04X}", pattern, e.start) from None
    program = re2._re2.RE2(encoded, _OPTIONS)
    if not program.ok():
        message = program.error()
        if isinstance(message, bytes):
            message = message.decode("utf-8", "replace")
        reason, position = _explain(pattern, str(message))
        raise SelectorError(reason, pattern, position)
    return Regex(pattern, program)


def _scan(regex: str) -> Iterator[tuple[int, str]]:
    """The syntax of ``regex`` as RE2 reads it: ``(position, token)`` pairs.

    A token is an escape (``\\d``; ``\\x{41}``, ``\\p{Greek}`` whole), quoted
    text (``\\Q...\\E``), a character class (``[...]``, ``[[:alpha:]]`` whole), a
    counted repetition (``{2,3}``) or one character. So ``(``, ``)`` and ``|``
    tokens are always syntax, never text.
    """
    i, n = 0, len(regex)
    while i < n:
        c = regex[i]
        start = i
        if c == "\\":
            nxt = regex[i + 1 : i + 2]
            if nxt == "Q":
                end = regex.find("\\E", i + 2)
                i = n if end < 0 else end + 2
            elif nxt in _BRACED_ESCAPE and regex[i + 2 : i + 3] == "{":
                end = regex.find("}", i + 3)
                i = n if end < 0 else end + 1
            elif nxt in ("p", "P"):
                i += 3
            else:
                i += 2
        elif c == "[":
            i += 1
            if regex[i : i + 1] == "^":
                i += 1
            if regex[i : i + 1] == "]":  # a leading "]" is a member
                i += 1
            while i < n and regex[i] != "]":
                if regex[i] == "\\":
                    i += 2
                elif regex.startswith("[:", i):
                    end = regex.find(":]", i + 2)
                    i = i + 1 if end < 0 else end + 2
                else:
                    i += 1
            i += 1
        elif c == "{" and (rep := _REPETITION.match(regex, i)) is not None:
            i = rep.end()
        else:
            i += 1
        yield start, regex[start:i]


def _unsupported(regex: str) -> tuple[int, str] | None:
    """Where ``regex`` uses a construct RE2 lacks, and the reason to give."""
    previous = ""
    after_quantifier = False
    for position, token in _scan(regex):
        if token[0] == "\\" and len(token) > 1:
            c = token[1]
            if c in "123456789":
                return position, f"backreference '\\{c}' is not supported; {_WHY}"
            if c == "k":
                return position, f"backreference '\\k<name>' is not supported; {_WHY}"
            if c == "Z":
                return position, "'\\Z' is not supported; use '\\z' for the end of the text"
            if c == "u":
                return position, "'\\uHHHH' is not supported; write '\\x{HHHH}'"
        elif token == "(":
            for opening, what in _UNSUPPORTED_GROUPS:
                if regex.startswith(opening, position):
                    return position, f"{what} is not supported; {_WHY}"
            flags = _INLINE_FLAGS.match(regex, position)
            if flags is not None:
                for k, flag in enumerate(flags.group(1)):
                    if flag not in _RE2_FLAGS:
                        return position + 2 + k, f"inline flag {flag!r} is not supported (RE2 has i, m, s and U)"
        elif token.startswith("{,"):
            return position, f"'{token}' is not supported; write '{{0{token[1:]}'"
        elif token == "+" and after_quantifier:
            return position - len(previous), f"possessive quantifier '{previous}+' is not supported; {_WHY}"
        # a "?" after "(" opens a group extension, one after a quantifier makes it lazy
        after_quantifier = (token in ("*", "+", "?") or token[0] == "{" and len(token) > 1) and not (
            token == "?" and (previous == "(" or after_quantifier)
        )
        previous = token
    return None


def _explain(regex: str, message: str) -> tuple[str, int]:
    """RE2's error ``message`` for ``regex`` as a reason and a position."""
    what, _, fragment = message.partition(": ")
    if what == "missing )" or what == "unexpected )":
        open_at: list[int] = []
        for position, token in _scan(regex):
            if token == "(":
                open_at.append(position)
            elif token == ")":
                if not open_at:
                    return "unexpected ): no group to close", position
                open_at.pop()
        return "missing ): unterminated group", open_at[-1] if open_at else len(regex)
    if what == "missing ]":  # the fragment is the rest of the pattern from the "["
        where = len(regex) - len(fragment) if regex.endswith(fragment) else 0
        return "missing ]: unterminated character class", where
    if what == "trailing \\":
        return "trailing '\\'", len(regex) - 1
    if what.startswith("pattern too large"):
        return f"the pattern is too large (compiled, more than {_MAX_PROGRAM_BYTES >> 20} MiB)", 0
    return message, max(regex.find(fragment), 0) if fragment else 0


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
    return _parse(expression, expression, 0, 0)


def _parse(text: str, whole: str, offset: int, depth: int) -> Selector:
    """Parse ``text``, found at ``offset`` in ``whole`` inside ``depth`` selector sets."""
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
        if depth >= MAX_SELECTOR_DEPTH:
            raise SelectorError(f"selector sets may nest at most {MAX_SELECTOR_DEPTH} deep", whole, offset)
        return _parse_set(text[1:], whole, offset + 1, depth + 1)
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


def _compile(pattern: str, whole: str, offset: int) -> Regex:
    try:
        return compile_regex(pattern)
    except SelectorError as e:
        raise SelectorError(
            f"invalid regular expression {pattern!r}: {e.reason}", whole, offset + e.position
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
    regexes: list[Regex] = []
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


def _parse_set(body: str, whole: str, offset: int, depth: int) -> Selector:
    if not body:
        raise SelectorError("a selector set needs at least one member", whole, offset)
    members: list[Selector] = []
    pos = 0
    for match in [*_SET_SPLIT.finditer(body), None]:
        end = match.start() if match is not None else len(body)
        part = body[pos:end]
        if not part:
            raise SelectorError("empty member in selector set", whole, offset + pos)
        members.append(_parse(part, whole, offset + pos, depth))
        if match is not None:
            pos = match.end()
    return SelectorSet(members)


def any_of(*selectors: Selector | str) -> Selector:
    """A selector matching what any of ``selectors`` matches (a one-member set is the member)."""
    parsed = [parse_selector(s) for s in selectors]
    result = SelectorSet(parsed)
    return result.selectors[0] if len(result.selectors) == 1 else result
