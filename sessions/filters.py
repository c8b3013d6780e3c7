"""Session filters: which sessions a rule applies to, by their properties.

The language (grammar in ``filter.lark``)::

    KEY is 'v'    KEY eq 'v'      the property has exactly this value
    KEY ne 'v'                    it does not (true when the property is absent)
    KEY matches 'regex'           the whole value matches (RE2 syntax, linear time;
                                  see :func:`topics.selectors.compile_regex`)
    has KEY                       the property is present
    KEY in ['a', 'b']             the value is one of these
    hasRoles 'r1' 'r2'            the session has every listed role
    all                           every session
    not F      F and G      F or G      ( F )

``and`` binds tighter than ``or``; ``not``, ``and`` and ``or`` may nest at most
:data:`MAX_FILTER_DEPTH` deep (redundant parentheses do not count, and a chain
``F and G and H`` is one level); operators are case-insensitive, keys and
values case-sensitive; values take single or double quotes with backslash
escapes (``'it\\'s'``). Fixed properties start with ``$`` (``$Principal``,
``$Country``, ...); roles are tested with ``hasRoles``, which reads the
session's role set rather than the ``$Roles`` text.

:func:`parse_filter` returns an immutable :class:`SessionFilter` (cached);
syntax errors raise :class:`FilterSyntaxError` with the line, the column and
the offending line under a caret.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from lark import Lark, Token, Transformer, Tree, v_args
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken, VisitError

from topics.errors import SelectorError, excerpt
from topics.selectors import Regex, compile_regex

__all__ = ["MAX_FILTER_DEPTH", "FilterSyntaxError", "SessionFilter", "parse_filter"]

ROLES_KEY = "$Roles"
#: how deep ``not``, ``and`` and ``or`` may nest inside one another: building,
#: printing and evaluating the syntax tree recurse once per level
MAX_FILTER_DEPTH = 32


class FilterSyntaxError(ValueError):
    """An invalid session filter; says what is wrong, where, and shows it."""

    code = "INVALID_FILTER"

    def __init__(self, message: str, text: str, line: int, column: int) -> None:
        self.text = text
        self.line = line
        self.column = column
        self.reason = message
        super().__init__(f"invalid session filter at line {line}, column {column}: {message}\n{excerpt(text, line, column)}")


# -- the syntax tree -------------------------------------------------------------


class Node:
    """Base of the filter syntax tree."""

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        raise NotImplementedError

    def keys(self) -> frozenset[str]:
        """The property keys the filter reads (``$Roles`` for role tests)."""
        return frozenset()


@dataclass(frozen=True)
class All(Node):
    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return True

    def __str__(self) -> str:
        return "all"


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Equal(Node):
    key: str
    value: str

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return properties.get(self.key) == self.value

    def keys(self) -> frozenset[str]:
        return frozenset({self.key})

    def __str__(self) -> str:
        return f"{self.key} is {_quote(self.value)}"


@dataclass(frozen=True)
class NotEqual(Node):
    key: str
    value: str

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return properties.get(self.key) != self.value

    def keys(self) -> frozenset[str]:
        return frozenset({self.key})

    def __str__(self) -> str:
        return f"{self.key} ne {_quote(self.value)}"


@dataclass(frozen=True)
class Matches(Node):
    key: str
    pattern: str
    regex: Regex

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        value = properties.get(self.key)
        return value is not None and self.regex.fullmatch(value) is not None

    def keys(self) -> frozenset[str]:
        return frozenset({self.key})

    def __str__(self) -> str:
        return f"{self.key} matches {_quote(self.pattern)}"


@dataclass(frozen=True)
class Has(Node):
    key: str

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return self.key in properties

    def keys(self) -> frozenset[str]:
        return frozenset({self.key})

    def __str__(self) -> str:
        return f"has {self.key}"


@dataclass(frozen=True)
class Within(Node):
    key: str
    values: tuple[str, ...]

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return properties.get(self.key) in self.values

    def keys(self) -> frozenset[str]:
        return frozenset({self.key})

    def __str__(self) -> str:
        return f"{self.key} in [{', '.join(_quote(v) for v in self.values)}]"


@dataclass(frozen=True)
class HasRoles(Node):
    roles: tuple[str, ...]

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return all(r in roles for r in self.roles)

    def keys(self) -> frozenset[str]:
        return frozenset({ROLES_KEY})

    def __str__(self) -> str:
        return "hasRoles " + " ".join(_quote(r) for r in self.roles)


@dataclass(frozen=True)
class Not(Node):
    operand: Node

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return not self.operand.evaluate(properties, roles)

    def keys(self) -> frozenset[str]:
        return self.operand.keys()

    def __str__(self) -> str:
        return f"not ({self.operand})"


@dataclass(frozen=True)
class And(Node):
    operands: tuple[Node, ...]

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return all(o.evaluate(properties, roles) for o in self.operands)

    def keys(self) -> frozenset[str]:
        return frozenset().union(*(o.keys() for o in self.operands))

    def __str__(self) -> str:
        return " and ".join(f"({o})" for o in self.operands)


@dataclass(frozen=True)
class Or(Node):
    operands: tuple[Node, ...]

    def evaluate(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return any(o.evaluate(properties, roles) for o in self.operands)

    def keys(self) -> frozenset[str]:
        return frozenset().union(*(o.keys() for o in self.operands))

    def __str__(self) -> str:
        return " or ".join(f"({o})" for o in self.operands)


@dataclass(frozen=True)
class SessionFilter:
    """A parsed filter: its source text and syntax tree."""

    text: str
    tree: Node

    def matches(self, properties: Mapping[str, str], roles: frozenset[str] = frozenset()) -> bool:
        return self.tree.evaluate(properties, roles)

    def keys(self) -> frozenset[str]:
        return self.tree.keys()

    def __str__(self) -> str:
        return self.text


# -- parsing -------------------------------------------------------------------------


class _FilterError(Exception):
    def __init__(self, message: str, token: Token, offset: int = 0) -> None:
        super().__init__(message)
        self.token = token
        self.offset = offset  # characters from the token's start to the problem


def _unquote(token: Token) -> str:
    body = str(token)[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def _source_offset(token: Token, position: int) -> int:
    """Where character ``position`` of the unquoted value is in the quoted ``token``."""
    quoted = str(token)
    i = 1
    for _ in range(position):
        i += 2 if quoted[i] == "\\" else 1
    return i


def _advance(text: str, token: Token, offset: int) -> tuple[int, int]:
    """The 1-based line and column ``offset`` characters into ``token``."""
    if token.start_pos is None:
        return token.line or 1, token.column or 1
    at = token.start_pos + offset
    line_start = text.rfind("\n", 0, at) + 1
    return text.count("\n", 0, at) + 1, at - line_start + 1


@v_args(inline=True)
class _Build(Transformer[Token, Node]):
    def value(self, token: Token) -> tuple[str, Token]:
        return (_unquote(token), token)

    def equal(self, key: Token, _op: Token, value: tuple[str, Token]) -> Node:
        return Equal(str(key), value[0])

    def not_equal(self, key: Token, _op: Token, value: tuple[str, Token]) -> Node:
        return NotEqual(str(key), value[0])

    def matches(self, key: Token, _op: Token, value: tuple[str, Token]) -> Node:
        try:
            compiled = compile_regex(value[0])
        except SelectorError as e:
            raise _FilterError(
                f"invalid regular expression {value[0]!r}: {e.reason}", value[1], _source_offset(value[1], e.position)
            ) from None
        return Matches(str(key), value[0], compiled)

    def has(self, _op: Token, key: Token) -> Node:
        return Has(str(key))

    def within(self, key: Token, _op: Token, *values: tuple[str, Token] | None) -> Node:
        return Within(str(key), tuple(v[0] for v in values if v is not None))

    def has_roles(self, _op: Token, *values: tuple[str, Token]) -> Node:
        return HasRoles(tuple(v[0] for v in values))

    def everything(self, _token: Token) -> Node:
        return All()

    def negation(self, _op: Token, operand: Node) -> Node:
        return Not(operand)

    def disjunction(self, *items: Any) -> Node:
        return Or(tuple(i for i in items if isinstance(i, Node)))

    def conjunction(self, *items: Any) -> Node:
        return And(tuple(i for i in items if isinstance(i, Node)))


@cache
def _parser() -> Lark:
    """The grammar's LALR parser, built when first needed: building it is a tenth of a second,
    which every process importing this module (each of canopy's actors, through the controller's
    class) would otherwise pay at start-up, parsing a filter or not."""
    return Lark.open_from_package(
        "sessions", "filter.lark", parser="lalr", propagate_positions=True, maybe_placeholders=True
    )


_EXPECTED_NAMES = {
    "KEY": "a property key",
    "STRING": "a quoted value",
    "IS": "'is'",
    "NE": "'ne'",
    "MATCHES": "'matches'",
    "IN": "'in'",
    "AND": "'and'",
    "OR": "'or'",
    "NOT": "'not'",
    "HAS": "'has'",
    "HASROLES": "'hasRoles'",
    "ALL": "'all'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "$END": "the end of the filter",
}


def _expected(names: Any) -> str:
    if not names:
        return ""
    shown = sorted({_EXPECTED_NAMES.get(str(n), str(n)) for n in names})
    return "; expected " + ", ".join(shown)


_OPERATORS = frozenset({"negation", "conjunction", "disjunction"})


def _too_deep(tree: Tree[Token]) -> Tree[Token] | None:
    """The first operator (in the text) nested deeper than :data:`MAX_FILTER_DEPTH`, or ``None``.

    Walks with its own stack: the parse tree may be as deep as the text is long.
    """
    stack: list[tuple[Tree[Token], int]] = [(tree, 0)]
    while stack:
        node, depth = stack.pop()
        if node.data in _OPERATORS:
            depth += 1
            if depth > MAX_FILTER_DEPTH:
                return node
        # reversed: the leftmost child comes off the stack first
        stack.extend((child, depth) for child in reversed(node.children) if isinstance(child, Tree))
    return None


@lru_cache(maxsize=1024)
def parse_filter(text: str) -> SessionFilter:
    """Parse a session filter or raise :class:`FilterSyntaxError`."""
    if not isinstance(text, str):
        raise FilterSyntaxError(f"expected a string, got {type(text).__name__}", repr(text), 1, 1)
    if not text.strip():
        raise FilterSyntaxError("empty filter (use 'all' for every session)", text, 1, 1)
    try:
        parsed = _parser().parse(text)  # LALR: a loop over an explicit stack, never recursion
        deep = _too_deep(parsed)
        if deep is not None:
            raise FilterSyntaxError(
                f"'not', 'and' and 'or' may nest at most {MAX_FILTER_DEPTH} deep",
                text,
                deep.meta.line,
                deep.meta.column,
            )
        tree = _Build().transform(parsed)
    except UnexpectedEOF as e:
        lines = text.splitlines() or [""]
        raise FilterSyntaxError(
            "the filter ends too early" + _expected(e.expected), text, len(lines), len(lines[-1]) + 1
        ) from None
    except UnexpectedToken as e:
        if e.token.type == "$END":
            lines = text.splitlines() or [""]
            raise FilterSyntaxError(
                "the filter ends too early" + _expected(e.expected), text, len(lines), len(lines[-1]) + 1
            ) from None
        raise FilterSyntaxError(
            f"unexpected {str(e.token)!r}" + _expected(e.expected), text, e.line, e.column
        ) from None
    except UnexpectedCharacters as e:
        raise FilterSyntaxError(
            f"unexpected character {text[e.pos_in_stream or 0]!r}" + _expected(e.allowed), text, e.line, e.column
        ) from None
    except UnexpectedInput as e:  # pragma: no cover - the cases above are exhaustive for LALR
        raise FilterSyntaxError(str(e), text, e.line, e.column) from None
    except VisitError as e:
        inner = e.orig_exc
        if isinstance(inner, _FilterError):
            token = inner.token
            line, column = _advance(text, token, inner.offset)
            raise FilterSyntaxError(str(inner), text, line, column) from None
        raise
    return SessionFilter(text, tree)
