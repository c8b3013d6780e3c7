"""Parse topic view specifications (grammar in ``view.lark``).

:func:`parse_view` returns a :class:`~views.spec.ViewSpec` or raises a
:class:`ViewSpecError` that says what is wrong and where (line, column, the
offending line under a caret)::

    ViewSpecError (ValueError)
    ├── ViewSyntaxError     the text does not follow the grammar
    └── ViewSemanticError   it parses but means nothing valid: a bad selector,
                            pointer, directive, property, number, duplicate clause

The grammar has no recursive rule, so the parse tree is as flat as the clause
list. What nests is inside free text and bounded there, each excess being a
:class:`ViewSemanticError` that names its limit: selector sets in the source
selector (:data:`~topics.selectors.MAX_SELECTOR_DEPTH`) and the JSON of a
patch (:data:`~topics.types.MAX_JSON_DEPTH`).

Choices the reference system's documentation leaves open:

* Clauses after ``to`` may come in any order. ``insert``, ``patch`` and
  ``as <value()>`` form the processing chain in the order written; every
  other clause may appear once.
* Selectors and templates may be quoted with single or double quotes.
* ``default`` takes a quoted string, a number, ``true``, ``false`` or ``null``.
* Only the properties a view may set on its reference topics may be set:
  COMPRESSION, CONFLATION, DONT_RETAIN_VALUE, PUBLISH_VALUES_ONLY,
  TIDY_ON_UNSUBSCRIBE, TIME_SERIES_RETAINED_RANGE and
  TIME_SERIES_SUBSCRIPTION_RANGE.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from topics.errors import SelectorError, SpecificationError, TopicTypeError, excerpt
from topics.properties import validate_property
from topics.specification import check_honoured_property
from topics.selectors import parse_selector
from topics.types import TopicType
from topics.patch import PatchSyntaxError, parse_patch
from topics.pointer import PointerError, parse_pointer
from views.spec import (
    NO_DEFAULT,
    Expand,
    Insert,
    Part,
    Patch,
    PathPart,
    Scalar,
    Step,
    Template,
    Throttle,
    ValueStep,
    ViewSpec,
)

__all__ = ["ViewSemanticError", "ViewSpecError", "ViewSyntaxError", "parse_view"]

SETTABLE = {
    "COMPRESSION",
    "CONFLATION",
    "DONT_RETAIN_VALUE",
    "PUBLISH_VALUES_ONLY",
    "TIDY_ON_UNSUBSCRIBE",
    "TIME_SERIES_RETAINED_RANGE",
    "TIME_SERIES_SUBSCRIPTION_RANGE",
}
NOT_SETTABLE = {
    "OWNER": "it is copied from the source topic",
    "PERSISTENT": "reference topics are never persisted",
    "REMOVAL": "reference topics cannot be removed directly",
    "SCHEMA": "it is copied from the source topic",
    "SLAVE_MASTER_TOPIC": "reference topics have no master topic",
    "TIME_SERIES_EVENT_VALUE_TYPE": "a time series reference topic has its source's event type",
    "VALIDATE_VALUES": "a reference topic reflects its source and cannot reject updates",
    "PRIORITY": "it is not derived by topic views",
}
UNIT_MS = {"second": 1000, "minute": 60_000, "hour": 3_600_000}
#: the largest number of updates in a throttle clause
MAX_COUNT = 1_000_000
#: the longest throttle period or delay: ten years
MAX_DURATION_MS = 10 * 366 * 24 * 3_600_000
EXPECTED_NAMES = {
    "MAP": "'map'", "FROM": "'from'", "TO": "'to'", "INSERT": "'insert'", "KEY": "'key'", "AT": "'at'",
    "DEFAULT": "'default'", "PATCH": "'patch'", "AS": "'as'", "WITH": "'with'", "PROPERTIES": "'properties'",
    "THROTTLE": "'throttle'", "UPDATES": "'update' or 'updates'", "EVERY": "'every'", "DELAY": "'delay'",
    "BY": "'by'", "PRESERVE": "'preserve'", "TOPICS": "'topics'", "SEPARATOR": "'separator'", "TYPE": "'type'",
    "UNIT": "a time unit (seconds, minutes, hours)", "QUOTED": "a quoted string", "SELECTOR": "a topic selector",
    "TEMPLATE": "a path template", "POINTER": "a JSON pointer", "NAME": "a remote server name",
    "VALUE_DIRECTIVE": "<value(/pointer)>", "PROPERTY_NAME": "a property name",
    "PROPERTY_VALUE": "a property value", "TYPE_NAME": "a topic type", "INT": "a whole number",
    "NUMBER": "a number", "LITERAL": "true, false or null", "COMMA": "','", "COLON": "':'", "$END": "the end",
}


class ViewSpecError(ValueError):
    """An invalid topic view specification."""

    code = "INVALID_VIEW"
    kind = "invalid topic view specification"

    def __init__(self, message: str, text: str, line: int, column: int) -> None:
        self.text = text
        self.line = line
        self.column = column
        self.reason = message
        super().__init__(f"{self.kind} at line {line}, column {column}: {message}\n{excerpt(text, line, column)}")


class ViewSyntaxError(ViewSpecError):
    code = "VIEW_SYNTAX"
    kind = "topic view syntax error"


class ViewSemanticError(ViewSpecError):
    pass


@cache
def _grammar() -> Lark:
    """The grammar's LALR parser, built when first needed (a tenth of a second that every process
    importing this module would otherwise pay at start-up)."""
    return Lark.open_from_package(
        "views", "view.lark", parser="lalr", lexer="contextual", propagate_positions=True, maybe_placeholders=True
    )


#: what a backslash escapes in quoted text; any other backslash stays as it is
ESCAPABLE = frozenset("'\"<\\")


def _blank_comments(text: str) -> str:
    """Blank out comment lines (those starting with '#' outside quoted text), keeping positions."""
    out = list(text)
    quote: str | None = None
    line_start = True
    i = 0
    while i < len(text):
        c = text[i]
        if quote is not None:
            if c == "\\":
                i += 2
                continue
            if c == quote:
                quote = None
        elif line_start and c == "#":
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
            continue
        elif c in "'\"":
            quote = c
        if c == "\n":
            line_start = True
        elif c not in " \t\r":
            line_start = False
        i += 1
    return "".join(out)


@lru_cache(maxsize=512)
def parse_view(text: str) -> ViewSpec:
    """Parse and check a specification; raise :class:`ViewSpecError` if it is invalid."""
    if not isinstance(text, str):
        raise ViewSyntaxError(f"a specification is text, not {type(text).__name__}", "", 1, 1)
    blanked = _blank_comments(text)
    try:
        tree = _grammar().parse(blanked)
    except UnexpectedEOF as e:
        line, column = _end(text)
        raise ViewSyntaxError(f"the specification ends early; expected {_expected(e.expected)}", text, line, column) from None
    except UnexpectedToken as e:
        if e.token.type == "$END":
            line, column = _end(text)
            raise ViewSyntaxError(f"the specification ends early; expected {_expected(e.expected)}", text, line, column) from None
        raise ViewSyntaxError(
            f"unexpected {str(e.token)!r}; expected {_expected(e.expected)}", text, e.line, e.column
        ) from None
    except UnexpectedCharacters as e:
        allowed = _expected(e.allowed) if e.allowed else "something else"
        found = text[e.pos_in_stream] if e.pos_in_stream is not None else "?"
        raise ViewSyntaxError(f"unexpected {found!r}; expected {allowed}", text, e.line, e.column) from None
    except UnexpectedInput as e:  # pragma: no cover - the cases above are exhaustive for LALR
        raise ViewSyntaxError(str(e), text, getattr(e, "line", 1), getattr(e, "column", 1)) from None
    return _Builder(text).build(tree)


def _end(text: str) -> tuple[int, int]:
    lines = text.split("\n")
    return len(lines), len(lines[-1]) + 1


def _expected(names: Any) -> str:
    shown = sorted({EXPECTED_NAMES.get(n, n.lower()) for n in names})
    return " or ".join(shown) if len(shown) < 4 else ", ".join(shown[:-1]) + " or " + shown[-1]


@dataclass
class _Text:
    """A free-text token with escapes resolved; ``offsets[i]`` is where char i was in the source."""

    value: str
    offsets: list[int]
    escaped: list[bool]
    token: Token


class _Builder:
    def __init__(self, text: str) -> None:
        self.text = text
        self.seen: dict[str, Token] = {}

    # -- positions and errors ---------------------------------------------------------

    def _where(self, offset: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, offset) + 1
        column = offset - (self.text.rfind("\n", 0, offset) + 1) + 1
        return line, column

    def error(self, message: str, offset: int) -> ViewSemanticError:
        line, column = self._where(offset)
        return ViewSemanticError(message, self.text, line, column)

    def free(self, token: Token) -> _Text:
        raw = str(token)
        start = token.start_pos or 0
        if token.type != "QUOTED":
            return _Text(raw, [start + i for i in range(len(raw))], [False] * len(raw), token)
        chars: list[str] = []
        offsets: list[int] = []
        escaped: list[bool] = []
        i = 1
        while i < len(raw) - 1:
            if raw[i] == "\\" and raw[i + 1] in ESCAPABLE:
                chars.append(raw[i + 1])
                offsets.append(start + i)
                escaped.append(True)
                i += 2
            else:
                chars.append(raw[i])
                offsets.append(start + i)
                escaped.append(False)
                i += 1
        return _Text("".join(chars), offsets, escaped, token)

    def _offset(self, text: _Text, index: int) -> int:
        if index < len(text.offsets):
            return text.offsets[index]
        return (text.token.end_pos or 1) - 1

    # -- clauses ----------------------------------------------------------------------

    def build(self, tree: Tree[Token]) -> ViewSpec:
        fields: dict[str, Any] = {}
        steps: list[Step] = []
        for node in tree.children:
            assert isinstance(node, Tree)
            kind = str(node.data)
            tokens = node.children
            if kind in ("insert", "patch", "value"):
                steps.append(getattr(self, f"_{kind}")(tokens))
                if kind == "value":
                    assert isinstance(tokens[0], Token)
                    self._once(kind, tokens[0])
                continue
            first = tokens[0]
            assert isinstance(first, Token)
            self._once(kind, first)
            fields.update(getattr(self, f"_{kind}")(tokens))
        return ViewSpec(steps=tuple(steps), **fields)

    def _once(self, kind: str, token: Token) -> None:
        if kind in self.seen:
            raise self.error(f"the {kind} clause may appear only once", token.start_pos or 0)
        self.seen[kind] = token

    def _source(self, tokens: list[Any]) -> dict[str, Any]:
        text = self.free(tokens[1])
        try:
            selector = parse_selector(text.value)
        except SelectorError as e:
            raise self.error(f"invalid source selector: {e}", self._offset(text, e.position or 0)) from None
        return {"selector": selector}

    def _remote(self, tokens: list[Any]) -> dict[str, Any]:
        name = self.free(tokens[1])
        if not name.value.strip():
            raise self.error("a remote server name may not be empty", tokens[1].start_pos or 0)
        return {"remote": name.value}

    def _target(self, tokens: list[Any]) -> dict[str, Any]:
        template = self.template(self.free(tokens[1]), allow_expand=True)
        if not any(isinstance(p, str) and p.strip("/") for p in template.parts) and not any(
            not isinstance(p, str) for p in template.parts
        ):
            raise self.error("the path mapping makes an empty path", tokens[1].start_pos or 0)
        return {"target": template}

    def _insert(self, tokens: list[Any]) -> Insert:
        _, path, _key_kw, key, _, at, _default_kw, constant = tokens
        template = self.template(self.free(path), allow_expand=False)
        key_pointer = self.pointer(self.free(key)) if key is not None else None
        at_pointer = self.pointer(self.free(at))
        if not at_pointer:
            raise self.error("an insertion point cannot be the root ('')", at.start_pos or 0)
        default = NO_DEFAULT if constant is None else self.constant(constant)
        return Insert(template, at_pointer, key_pointer, default)

    def constant(self, node: Tree[Token]) -> Any:
        token = node.children[0]
        assert isinstance(token, Token)
        if token.type == "QUOTED":
            return self.free(token).value
        if token.type == "LITERAL":
            return {"true": True, "false": False, "null": None}[str(token)]
        number = str(token)
        value: int | float = float(number) if any(c in number for c in ".eE") else int(number)
        if isinstance(value, float) and not math.isfinite(value) or isinstance(value, int) and abs(value) >= 2**63:
            raise self.error(f"the default {number} is out of range", token.start_pos or 0)
        return value

    def _patch(self, tokens: list[Any]) -> Patch:
        text = self.free(tokens[1])
        try:
            operations = parse_patch(text.value)
        except PatchSyntaxError as e:
            raise self.error(f"invalid patch: {e}", text.offsets[0] if text.offsets else tokens[1].start_pos) from None
        return Patch(text.value, operations)

    def _value(self, tokens: list[Any]) -> ValueStep:
        token = tokens[1]
        match = re.fullmatch(r"<\s*value\s*\(\s*([^)\s]*)\s*\)\s*>", str(token))
        if match is None:
            raise self.error("a value mapping is <value(/pointer)>", token.start_pos or 0)
        start = (token.start_pos or 0) + match.start(1)
        return ValueStep(self._pointer_at(match.group(1), start))

    def _properties(self, tokens: list[Any]) -> dict[str, Any]:
        pairs: dict[str, str] = {}
        for node in tokens[2:]:
            name_token, value_token = node.children
            name = str(name_token).upper()
            where = name_token.start_pos or 0
            if name in NOT_SETTABLE:
                raise self.error(f"property {name} cannot be set by a topic view: {NOT_SETTABLE[name]}", where)
            if name not in SETTABLE:
                raise self.error(f"unknown topic property {str(name_token)!r}", where)
            if name in pairs:
                raise self.error(f"property {name} is set twice", where)
            try:
                pairs[name] = validate_property(name, self.free(value_token).value)[1]
                check_honoured_property(name, pairs[name])
            except SpecificationError as e:
                raise self.error(str(e), value_token.start_pos or 0) from None
        return {"properties": tuple(pairs.items())}

    def _number(self, token: Token, what: str, limit: int = MAX_COUNT) -> int:
        value = int(str(token))
        if value <= 0:
            raise self.error(f"{what} must be a positive whole number", token.start_pos or 0)
        if value > limit:
            raise self.error(f"{what} may be at most {limit}", token.start_pos or 0)
        return value

    def _duration(self, amount: Token, unit: Token, what: str) -> int:
        size = UNIT_MS[str(unit).lower().rstrip("s")]
        return self._number(amount, what, MAX_DURATION_MS // size) * size

    def _throttle(self, tokens: list[Any]) -> dict[str, Any]:
        _, _, updates, _, _, count, unit = tokens
        n = self._number(updates, "the number of updates")
        period = self._duration(count, unit, "the period") if count is not None else UNIT_MS[str(unit).lower().rstrip("s")]
        return {"throttle": Throttle(n, period)}

    def _delay(self, tokens: list[Any]) -> dict[str, Any]:
        _, _, amount, unit = tokens
        return {"delay_ms": self._duration(amount, unit, "the delay")}

    def _preserve(self, tokens: list[Any]) -> dict[str, Any]:
        return {"preserve_topics": True}

    def _separator(self, tokens: list[Any]) -> dict[str, Any]:
        text = self.free(tokens[1]).value
        if "//" in text:
            raise self.error("a separator may not contain an empty path segment ('//')", tokens[1].start_pos or 0)
        return {"separator": text}

    def _type(self, tokens: list[Any]) -> dict[str, Any]:
        try:
            topic_type = TopicType.parse(str(tokens[1]).upper())
        except TopicTypeError:
            topic_type = None
        allowed = ("STRING", "INT64", "DOUBLE", "JSON", "TIME_SERIES", "BINARY")
        if topic_type is None or topic_type.value not in allowed:
            raise self.error(f"unknown topic type {str(tokens[1])!r}; one of {', '.join(allowed)}", tokens[1].start_pos or 0)
        return {"topic_type": topic_type}

    # -- pointers and templates -------------------------------------------------------

    def pointer(self, text: _Text) -> tuple[str, ...]:
        return self._pointer_at(text.value, self._offset(text, 0), text)

    def _pointer_at(self, value: str, offset: int, text: _Text | None = None) -> tuple[str, ...]:
        try:
            return parse_pointer(value)
        except PointerError as e:
            where = self._offset(text, e.position) if text is not None else offset + e.position
            raise self.error(f"invalid JSON pointer {value!r}: {e}", where) from None

    def template(self, text: _Text, *, allow_expand: bool) -> Template:
        parts: list[Part] = []
        literal: list[str] = []
        value, i = text.value, 0
        while i < len(value):
            if value[i] == "<" and not text.escaped[i]:
                end = value.find(">", i)
                if end < 0:
                    raise self.error("a directive is not closed with '>'", self._offset(text, i))
                if literal:
                    parts.append("".join(literal))
                    literal = []
                parts.append(self.directive(text, i, end, allow_expand=allow_expand))
                i = end + 1
            else:
                literal.append(value[i])
                i += 1
        if literal:
            parts.append("".join(literal))
        return Template(tuple(parts))

    def directive(self, text: _Text, start: int, end: int, *, allow_expand: bool) -> Part:
        body = text.value[start + 1 : end]
        match = re.fullmatch(r"\s*([A-Za-z]+)\s*\((.*)\)\s*", body, re.DOTALL)
        here = self._offset(text, start)
        if match is None:
            raise self.error(f"a directive is <name(arguments)>, not <{body}>", here)
        name = match.group(1)
        inner_start = start + 1 + match.start(2)
        raw_args = match.group(2)
        args: list[tuple[str, int]] = []
        if raw_args.strip():
            position = inner_start
            for piece in raw_args.split(","):
                lead = len(piece) - len(piece.lstrip())
                args.append((piece.strip(), position + lead))
                position += len(piece) + 1
        if name == "path":
            if not 1 <= len(args) <= 2:
                raise self.error("<path()> takes a start index and an optional number of segments", here)
            numbers = []
            for arg, at in args:
                if not re.fullmatch(r"[0-9]{1,9}", arg):
                    raise self.error(f"<path()> takes whole numbers, not {arg!r}", self._offset(text, at))
                numbers.append(int(arg))
            if len(numbers) == 2 and numbers[1] < 1:
                raise self.error("<path()> needs at least one segment", self._offset(text, args[1][1]))
            return PathPart(numbers[0], numbers[1] if len(numbers) == 2 else None)
        if name not in ("scalar", "expand"):
            known = "path, scalar and expand" if allow_expand else "path and scalar"
            raise self.error(f"unknown directive <{name}()>; known: {known}", here)
        pointers = [self._pointer_at(arg, self._offset(text, at)) for arg, at in args]
        if name == "scalar":
            if len(pointers) > 1:
                raise self.error("<scalar()> takes one JSON pointer", here)
            return Scalar(pointers[0] if pointers else ())
        if not allow_expand:
            raise self.error("<expand()> can only be used in the path mapping ('to') clause", here)
        if len(pointers) > 2:
            raise self.error("<expand()> takes at most two JSON pointers", here)
        return Expand(pointers[0] if pointers else (), pointers[1] if len(pointers) == 2 else None)
