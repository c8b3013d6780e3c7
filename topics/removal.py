"""Automatic topic removal: the REMOVAL property's policy language and when a policy is due.

A policy says under what conditions a topic (or the topics a selector names) is removed::

    policy     := 'when' condition ['remove' QUOTED-SELECTOR]
    condition  := conjunct ('or' conjunct)*
    conjunct   := primary ('and' primary)*          'and' binds tighter than 'or'
    primary    := '(' condition ')' | term
    term       := 'time after' (MILLISECONDS | QUOTED-RFC-1123-DATE)
                | ['local'] 'subscriptions' '<' N 'for' DURATION ['after' DURATION]
                | 'no updates for' DURATION ['after' DURATION]
                | 'no session has' QUOTED-FILTER ['for' DURATION] ['after' DURATION]
                | 'this session closes'
    DURATION   := digits [spaces] ('ms' | 's' | 'm' | 'h')

What each term means at time *t*:

``time after T``
    *t* is at or past ``T`` (milliseconds since the epoch, or a date such as
    ``'Tue, 3 Jun 2008 11:05:30 GMT'`` in single or double quotes).
``subscriptions < N for D``
    the topic has had fewer than ``N`` subscriptions without a break for ``D``.
    ``local subscriptions`` counts only those not made through fan-out.
``no updates for D``
    the topic has not been updated for ``D`` (counting from its creation when it never was).
``no session has 'F' [for D]``
    no session matches the session filter ``F``, without a break for ``D`` (or just now).
``this session closes``
    the session that created the topic has closed.

``after A`` delays the checking of a term until ``A`` after the topic's creation: the
``for`` period only counts from then, so ``subscriptions < 1 for 10m after 1h`` is due
at the earliest 1h10m after creation. Keywords are case-insensitive; whitespace, newlines
included, is free between tokens. A quoted text takes ``'`` or ``"``; ``\\`` followed by
the enclosing quote stands for that quote, any other backslash is itself (so the regular
expressions of a selector keep theirs), and a quoted text cannot end with a backslash.
Without a ``remove`` clause the topic itself is removed (:func:`selector_to_remove`).

The session filter language lives in ``sessions``, above this package: a policy keeps a
filter as its text. :func:`parse_policy` checks it through an injected validator (by
default only that it is not blank, so ``sessions`` passes its real parser), and the
caller gives the number of sessions each filter matches in :class:`~topics.removal_state.TopicFacts`.

Bounds: a policy is at most :data:`MAX_POLICY_LENGTH` characters with at most
:data:`MAX_TERMS` terms and :data:`MAX_NESTING` levels of parentheses; ``N`` is from 1
to :data:`MAX_SUBSCRIPTIONS`; a duration is at most :data:`MAX_DURATION_MS` (ten years);
a time is at most :data:`MAX_TIME_MS` (the end of year 9999).

Evaluation
----------
:class:`~topics.removal_state.RemovalState` (in :mod:`topics.removal_state`) follows one topic. Every term has a *since* time: when its
condition (without its ``for`` period) started to hold, or ``None`` while it does not
(``no updates`` holds since the last update, or the creation; ``time after`` has none).
Under facts that do not change, every term becomes true at one instant and stays true::

    true from   = max(since, created + after) + for          (time after T: T)
    and         = the latest of its operands' instants, or never if one is never
    or          = the earliest of its operands' instants, or never if all are never

so :meth:`RemovalState.due_at` is exact, and :meth:`RemovalState.next_check_ms` is when
to look again. The contract with the caller: call :meth:`RemovalState.start` when the
topic is created, then :meth:`RemovalState.observe` with the topic's facts whenever one of
them changes (an update, a subscription count, a session opening or closing, the creator
closing) and at ``next_check_ms``; :meth:`RemovalState.due` then says whether to remove
:func:`selector_to_remove` now. A change the caller never reports cannot be seen: a term
that started to hold unobserved counts from its next observation (later, so safe), one
that stopped holding unobserved is not reset (the caller must not miss those).

Failover
--------
:meth:`RemovalState.to_wire` is plain msgpack-able values, so a partition's backup can
carry the since times; :meth:`RemovalState.from_wire` takes them back. A new primary
without them rebuilds with :meth:`RemovalState.start` from what the journal gives: the
creation time and the last update time make ``time after`` and ``no updates for`` exact;
the tracked terms (subscription counts, sessions, the creator) start counting at the
first observation after the rebuild. Every term's instant can then only be later than
the old primary's, never earlier, and, while the facts hold still, no later than its ``for``
period after the rebuild; ``and``/``or`` keep both bounds: a rebuilt state never removes a
topic early, and late only until the longest ``for`` period after the rebuild (a fact that
changes within that period starts the count again, as it would have on the old primary). A since time from another
node's clock that lies in the future only delays its term the same way.

Errors (:class:`~topics.errors.SpecificationError` is the topic property error, code
``INVALID_SPECIFICATION``)::

    TopicModelError
    ├── SpecificationError
    │   └── RemovalPolicyError   the text is not a policy: line, column, what was expected
    └── RemovalStateError        a wire form that is not a removal state of the policy
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import NoReturn, Protocol

from topics.dates import MAX_TIME_MS, format_rfc1123, parse_rfc1123
from topics.errors import SelectorError, SpecificationError, TopicModelError, excerpt
from topics.selectors import Selector, parse_selector

__all__ = [
    "MAX_DURATION_MS",
    "MAX_NESTING",
    "MAX_POLICY_LENGTH",
    "MAX_SUBSCRIPTIONS",
    "MAX_TERMS",
    "MAX_TIME_MS",
    "AllOf",
    "AnyOf",
    "Condition",
    "FewerSubscriptions",
    "FilterValidator",
    "NoSessionHas",
    "NoUpdates",
    "RemovalPolicy",
    "RemovalPolicyError",
    "RemovalStateError",
    "SessionCloses",
    "Term",
    "TimeAfter",
    "check_filter_text",
    "format_rfc1123",
    "parse_policy",
    "parse_rfc1123",
    "selector_to_remove",
]

MAX_POLICY_LENGTH = 1024
MAX_TERMS = 32
#: parentheses nest at most this deep: parsing recurses once per level
MAX_NESTING = 32
MAX_SUBSCRIPTIONS = 2**31 - 1
#: ten years of 366 days, as for a time series range
MAX_DURATION_MS = 10 * 366 * 24 * 3_600_000
#: 9999-12-31T23:59:59.999Z

_UNITS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


class RemovalPolicyError(SpecificationError):
    """A REMOVAL property value that is not a policy; says what is wrong, where, and shows it."""

    def __init__(self, message: str, text: str, offset: int) -> None:
        before = text[:offset]
        self.text = text
        self.line = before.count("\n") + 1
        self.column = offset - (before.rfind("\n") + 1) + 1
        self.reason = message
        super().__init__(
            f"invalid removal policy at line {self.line}, column {self.column}: {message}\n"
            + excerpt(text, self.line, self.column)
        )


class RemovalStateError(TopicModelError):
    """A wire form that is not a removal state of the policy it is decoded for."""

    code = "INVALID_STATE"


class FilterValidator(Protocol):
    """Checks a session filter's text; raises a :class:`ValueError` when it is invalid.

    ``sessions`` passes its parser. An error with ``line`` and ``column`` attributes
    (1-based, in the filter's text) and a ``reason`` is shown where it points in the policy.
    """

    def __call__(self, text: str, /) -> object: ...


def check_filter_text(text: str) -> None:
    """The default :class:`FilterValidator`: a filter must not be blank."""
    if not text.strip():
        raise ValueError("a session filter may not be empty")


# -- the syntax tree -------------------------------------------------------------


def _duration(ms: int) -> str:
    for unit in ("h", "m", "s"):
        if ms and ms % _UNITS[unit] == 0:
            return f"{ms // _UNITS[unit]}{unit}"
    return f"{ms}ms" if ms else "0s"


def _quote(text: str) -> str:
    if '"' not in text:
        return f'"{text}"'
    if "'" not in text:
        return f"'{text}'"
    return '"' + text.replace('"', '\\"') + '"'


def _check_ms(what: str, value: int, maximum: int) -> None:
    if not 0 <= value <= maximum:
        raise SpecificationError(f"{what} must be from 0 to {maximum} ms, got {value}")


def _after(after_ms: int) -> str:
    return f" after {_duration(after_ms)}" if after_ms else ""


@dataclass(frozen=True)
class TimeAfter:
    """``time after T``: from ``at_ms`` (milliseconds since the epoch) on."""

    at_ms: int
    #: written as an RFC 1123 date rather than a number: how ``str`` writes it back
    #: (when it is whole seconds), not part of the value
    as_date: bool = field(default=False, compare=False)

    def __post_init__(self) -> None:
        _check_ms("a time", self.at_ms, MAX_TIME_MS)

    def __str__(self) -> str:
        if self.as_date and self.at_ms % 1000 == 0:
            return f"time after {_quote(format_rfc1123(self.at_ms))}"
        return f"time after {self.at_ms}"


@dataclass(frozen=True)
class FewerSubscriptions:
    """``[local] subscriptions < limit for D [after A]``."""

    limit: int
    for_ms: int
    after_ms: int = 0
    local: bool = False

    def __post_init__(self) -> None:
        if not 1 <= self.limit <= MAX_SUBSCRIPTIONS:
            raise SpecificationError(f"a subscription count must be from 1 to {MAX_SUBSCRIPTIONS}, got {self.limit}")
        _check_ms("a duration", self.for_ms, MAX_DURATION_MS)
        _check_ms("a duration", self.after_ms, MAX_DURATION_MS)

    def __str__(self) -> str:
        local = "local " if self.local else ""
        return f"{local}subscriptions < {self.limit} for {_duration(self.for_ms)}{_after(self.after_ms)}"


@dataclass(frozen=True)
class NoUpdates:
    """``no updates for D [after A]``."""

    for_ms: int
    after_ms: int = 0

    def __post_init__(self) -> None:
        _check_ms("a duration", self.for_ms, MAX_DURATION_MS)
        _check_ms("a duration", self.after_ms, MAX_DURATION_MS)

    def __str__(self) -> str:
        return f"no updates for {_duration(self.for_ms)}{_after(self.after_ms)}"


@dataclass(frozen=True)
class NoSessionHas:
    """``no session has 'filter' [for D] [after A]``; the filter is kept as its text."""

    filter: str
    for_ms: int = 0
    after_ms: int = 0

    def __post_init__(self) -> None:
        _check_ms("a duration", self.for_ms, MAX_DURATION_MS)
        _check_ms("a duration", self.after_ms, MAX_DURATION_MS)

    def __str__(self) -> str:
        period = f" for {_duration(self.for_ms)}" if self.for_ms else ""
        return f"no session has {_quote(self.filter)}{period}{_after(self.after_ms)}"


@dataclass(frozen=True)
class SessionCloses:
    """``this session closes``: the session that created the topic has closed."""

    def __str__(self) -> str:
        return "this session closes"


Term = TimeAfter | FewerSubscriptions | NoUpdates | NoSessionHas | SessionCloses


@dataclass(frozen=True)
class AllOf:
    """``a and b and ...``: true once every operand is."""

    operands: tuple[Condition, ...]

    def __str__(self) -> str:
        return " and ".join(f"({o})" if isinstance(o, AnyOf) else str(o) for o in self.operands)


@dataclass(frozen=True)
class AnyOf:
    """``a or b or ...``: true once one operand is."""

    operands: tuple[Condition, ...]

    def __str__(self) -> str:
        return " or ".join(str(o) for o in self.operands)


Condition = Term | AllOf | AnyOf


def _terms(condition: Condition) -> Iterator[Term]:
    if isinstance(condition, AllOf | AnyOf):
        for operand in condition.operands:
            yield from _terms(operand)
    else:
        yield condition


@dataclass(frozen=True)
class RemovalPolicy:
    """A parsed policy: the condition and the selector of its ``remove`` clause, if any.

    ``parse_policy(str(p)) == p`` holds. ``terms`` are the condition's terms in the
    order they are written; a :class:`RemovalState` keeps one since time per term.
    """

    condition: Condition
    selector: Selector | None = None
    terms: tuple[Term, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "terms", tuple(_terms(self.condition)))

    @property
    def session_filters(self) -> tuple[str, ...]:
        """The filters whose session counts :class:`TopicFacts` must give, each once."""
        return tuple(dict.fromkeys(t.filter for t in self.terms if isinstance(t, NoSessionHas)))

    def __str__(self) -> str:
        remove = f" remove {_quote(str(self.selector))}" if self.selector is not None else ""
        return f"when {self.condition}{remove}"


def selector_to_remove(policy: RemovalPolicy, topic_path: str) -> Selector:
    """What to remove when ``policy`` is due for the topic at ``topic_path``: the
    ``remove`` clause's selector (which removes the topic itself only if it matches it),
    else the topic alone."""
    if policy.selector is not None:
        return policy.selector
    return parse_selector(">" + topic_path)


# -- parsing ---------------------------------------------------------------------

_WORD = re.compile(r"[A-Za-z]+")
_DIGITS = re.compile(r"[0-9]+")
_TERM_START = (
    "a condition: 'time after', 'subscriptions <', 'local subscriptions <', "
    "'no updates for', 'no session has' or 'this session closes'"
)


class _Parser:
    """Recursive descent over the text; every error names the offset it found."""

    def __init__(self, text: str, validate_filter: FilterValidator) -> None:
        self.text = text
        self.validate_filter = validate_filter
        self.pos = 0
        self.terms = 0

    def fail(self, message: str, at: int | None = None) -> NoReturn:
        raise RemovalPolicyError(message, self.text, self.pos if at is None else at)

    def skip(self) -> int:
        while self.pos < len(self.text) and self.text[self.pos].isspace():
            self.pos += 1
        return self.pos

    def peek_word(self) -> str | None:
        m = _WORD.match(self.text, self.skip())
        return m.group().lower() if m else None

    def accept(self, word: str) -> bool:
        if self.peek_word() != word:
            return False
        self.pos += len(word)
        return True

    def expect(self, *words: str) -> None:
        for word in words:
            if not self.accept(word):
                self.fail(f"expected '{word}'{self.found()}")

    def found(self) -> str:
        """``, found X`` for the token at the position, for error messages."""
        self.skip()
        if self.pos >= len(self.text):
            return ", found the end"
        m = _WORD.match(self.text, self.pos) or _DIGITS.match(self.text, self.pos)
        return f", found {(m.group() if m else self.text[self.pos])!r}"

    def number(self, what: str, maximum: int) -> int:
        start = self.skip()
        m = _DIGITS.match(self.text, start)
        if m is None:
            self.fail(f"expected {what}{self.found()}")
        if len(m.group().lstrip("0")) > len(str(maximum)) or int(m.group()) > maximum:
            self.fail(f"{what} out of range: at most {maximum}", start)
        self.pos = m.end()
        return int(m.group())

    def duration(self) -> int:
        start = self.skip()
        if _DIGITS.match(self.text, start) is None:
            self.fail(f"expected a duration such as 10s, 5m or 1h{self.found()}")
        digits = _DIGITS.match(self.text, start)
        assert digits is not None
        self.pos = digits.end()
        unit_at = self.skip()
        unit = self.peek_word()
        if unit not in _UNITS:
            self.fail(f"expected a duration unit (ms, s, m or h) after {digits.group()}{self.found()}", unit_at)
        self.pos += len(unit)
        if len(digits.group().lstrip("0")) > 18 or int(digits.group()) * _UNITS[unit] > MAX_DURATION_MS:
            self.fail(f"duration out of range: at most {_duration(MAX_DURATION_MS)} (ten years)", start)
        return int(digits.group()) * _UNITS[unit]

    def quoted(self, what: str) -> tuple[str, list[int]]:
        """The text of a quoted string and the offset of each of its characters."""
        start = self.skip()
        if start >= len(self.text) or self.text[start] not in "'\"":
            self.fail(f"expected {what} in quotes{self.found()}")
        quote = self.text[start]
        chars: list[str] = []
        offsets: list[int] = []
        i = start + 1
        while i < len(self.text) and self.text[i] != quote:
            if self.text[i] == "\\" and self.text[i + 1 : i + 2] == quote:
                i += 1
            chars.append(self.text[i])
            offsets.append(i)
            i += 1
        if i >= len(self.text):
            self.fail(f"unterminated quoted text: expected a closing {quote}", start)
        self.pos = i + 1
        offsets.append(i)  # the closing quote, for an error at the end of the text
        return "".join(chars), offsets

    def policy(self) -> RemovalPolicy:
        if len(self.text) > MAX_POLICY_LENGTH:
            self.fail(f"a policy may be at most {MAX_POLICY_LENGTH} characters long", MAX_POLICY_LENGTH)
        if not self.text.strip():
            self.fail("a removal policy may not be empty: expected 'when'")
        self.expect("when")
        condition = self.condition(0)
        selector = None
        if self.accept("remove"):
            selector = self.selector()
        if self.skip() < len(self.text):
            self.fail(f"expected 'and', 'or', 'remove' or the end{self.found()}")
        return RemovalPolicy(condition, selector)

    def condition(self, depth: int) -> Condition:
        operands = [self.conjunct(depth)]
        while self.accept("or"):
            operands.append(self.conjunct(depth))
        return _flat(AnyOf, operands)

    def conjunct(self, depth: int) -> Condition:
        operands = [self.primary(depth)]
        while self.accept("and"):
            operands.append(self.primary(depth))
        return _flat(AllOf, operands)

    def primary(self, depth: int) -> Condition:
        start = self.skip()
        if self.text.startswith("(", start):
            if depth >= MAX_NESTING:
                self.fail(f"parentheses may nest at most {MAX_NESTING} deep")
            self.pos += 1
            inner = self.condition(depth + 1)
            self.skip()
            if not self.text.startswith(")", self.pos):
                self.fail(f"expected ')', 'and' or 'or'{self.found()}")
            self.pos += 1
            return inner
        self.terms += 1
        if self.terms > MAX_TERMS:
            self.fail(f"a policy may have at most {MAX_TERMS} conditions")
        return self.term()

    def term(self) -> Term:
        word = self.peek_word()
        if word == "time":
            self.expect("time", "after")
            return self.time()
        if word in ("subscriptions", "local"):
            local = self.accept("local")
            self.expect("subscriptions")
            self.skip()
            if not self.text.startswith("<", self.pos):
                self.fail(f"expected '<'{self.found()}")
            self.pos += 1
            limit_at = self.skip()
            limit = self.number("a subscription count", MAX_SUBSCRIPTIONS)
            if not 1 <= limit <= MAX_SUBSCRIPTIONS:
                self.fail(f"a subscription count must be from 1 to {MAX_SUBSCRIPTIONS}", limit_at)
            self.expect("for")
            for_ms = self.duration()
            return FewerSubscriptions(limit, for_ms, self.after(), local)
        if word == "no":
            self.expect("no")
            if self.accept("updates"):
                self.expect("for")
                for_ms = self.duration()
                return NoUpdates(for_ms, self.after())
            if not self.accept("session"):
                self.fail(f"expected 'updates' or 'session'{self.found()}")
            self.expect("has")
            text = self.filter()
            for_ms = self.duration() if self.accept("for") else 0
            return NoSessionHas(text, for_ms, self.after())
        if word == "this":
            self.expect("this", "session", "closes")
            return SessionCloses()
        self.fail(f"expected {_TERM_START}{self.found()}")

    def after(self) -> int:
        return self.duration() if self.accept("after") else 0

    def time(self) -> TimeAfter:
        start = self.skip()
        if self.text[start : start + 1] in ("'", '"'):
            text, offsets = self.quoted("a date")
            try:
                return TimeAfter(parse_rfc1123(text), as_date=True)
            except ValueError as e:
                self.fail(f"invalid date: {e}", offsets[0] - 1)
        if _DIGITS.match(self.text, start) is None:
            self.fail(f"expected milliseconds since the epoch or a quoted RFC 1123 date{self.found()}")
        return TimeAfter(self.number("a time", MAX_TIME_MS))

    def filter(self) -> str:
        text, offsets = self.quoted("a session filter")
        try:
            self.validate_filter(text)
        except ValueError as e:
            line, column = getattr(e, "line", None), getattr(e, "column", None)
            at = offsets[0] - 1  # the opening quote
            if isinstance(line, int) and isinstance(column, int) and line >= 1 and column >= 1:
                lines = text.split("\n")
                index = sum(len(x) + 1 for x in lines[: line - 1]) + column - 1
                at = offsets[min(index, len(offsets) - 1)]
            self.fail(f"invalid session filter: {getattr(e, 'reason', None) or e}", at)
        return text

    def selector(self) -> Selector:
        text, offsets = self.quoted("a topic selector")
        try:
            return parse_selector(text)
        except SelectorError as e:
            self.fail(f"invalid topic selector: {e.reason}", offsets[min(max(e.position, 0), len(offsets) - 1)])


def _flat(kind: type[AllOf] | type[AnyOf], operands: list[Condition]) -> Condition:
    if len(operands) == 1:
        return operands[0]
    flat: list[Condition] = []
    for operand in operands:
        flat.extend(operand.operands if isinstance(operand, kind) else (operand,))
    return kind(tuple(flat))


def parse_policy(text: object, validate_filter: FilterValidator = check_filter_text) -> RemovalPolicy:
    """Parse a REMOVAL property value; raise :class:`RemovalPolicyError` if it is not a policy.

    ``validate_filter`` checks the filter of every ``no session has`` term.
    """
    if not isinstance(text, str):
        raise RemovalPolicyError(f"a removal policy is text, not {type(text).__name__}", "", 0)
    return _Parser(text, validate_filter).policy()
