"""The syntax tree of a topic view specification (topic views).

:func:`views.parser.parse_view` turns the text into a :class:`ViewSpec`;
everything here is immutable and holds already-checked values (parsed
selector, decoded pointers, numbers in milliseconds). ``str(spec)`` gives a
canonical specification text that parses back to an equal spec.

The processing chain of a source value is: the target template's
``expand``/``scalar`` directives pick the current value(s), then the
:attr:`ViewSpec.steps` (``insert``, ``patch`` and ``as <value()>``) apply in
the order they were written, then ``type`` converts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Union

from topics.selectors import Selector
from topics.types import TopicType
from topics.patch import PatchOperation
from topics.pointer import format_pointer

__all__ = [
    "Expand",
    "Insert",
    "NO_DEFAULT",
    "Patch",
    "PathPart",
    "Scalar",
    "Template",
    "Throttle",
    "ValueStep",
    "ViewSpec",
]


@dataclass(frozen=True)
class PathPart:
    """``<path(start[, number])>``: segments of the source path."""

    start: int
    number: int | None = None

    def __str__(self) -> str:
        return f"<path({self.start})>" if self.number is None else f"<path({self.start}, {self.number})>"


@dataclass(frozen=True)
class Scalar:
    """``<scalar(/pointer)>``: a scalar of the current value."""

    pointer: tuple[str, ...]

    def __str__(self) -> str:
        return f"<scalar({format_pointer(self.pointer)})>"


@dataclass(frozen=True)
class Expand:
    """``<expand([source[, path]])>``: one reference topic per child of the value at ``source``."""

    source: tuple[str, ...] = ()
    path: tuple[str, ...] | None = None

    def __str__(self) -> str:
        if self.path is not None:
            return f"<expand({format_pointer(self.source)}, {format_pointer(self.path)})>"
        return f"<expand({format_pointer(self.source)})>" if self.source else "<expand()>"


Part = Union[str, PathPart, Scalar, Expand]


def _quote(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


@dataclass(frozen=True)
class Template:
    """A path template: literal text and directives, in order."""

    parts: tuple[Part, ...]

    @property
    def reads_value(self) -> bool:
        return any(isinstance(p, (Scalar, Expand)) for p in self.parts)

    def __str__(self) -> str:
        text = "".join(p.replace("\\", "\\\\").replace("<", "\\<") if isinstance(p, str) else str(p) for p in self.parts)
        return "'" + text.replace("'", "\\'") + "'"


class _NoDefault:
    def __repr__(self) -> str:
        return "NO_DEFAULT"


NO_DEFAULT: Any = _NoDefault()


@dataclass(frozen=True)
class Insert:
    """``insert PATH [key /pointer] at /pointer [default CONSTANT]``."""

    path: Template
    at: tuple[str, ...]
    key: tuple[str, ...] | None = None
    default: Any = NO_DEFAULT

    def __str__(self) -> str:
        text = f"insert {self.path}"
        if self.key is not None:
            text += f" key {_quote(format_pointer(self.key))}"
        text += f" at {_quote(format_pointer(self.at))}"
        if self.default is not NO_DEFAULT:
            default = self.default
            text += f" default {_quote(default) if isinstance(default, str) else json.dumps(default)}"
        return text


@dataclass(frozen=True)
class Patch:
    """``patch '[...]'``: an RFC 6902 patch applied atomically."""

    text: str
    operations: tuple[PatchOperation, ...] = field(compare=False)

    def __str__(self) -> str:
        return f"patch {_quote(self.text)}"


@dataclass(frozen=True)
class ValueStep:
    """``as <value(/pointer)>``: the current value becomes the part at the pointer."""

    pointer: tuple[str, ...]

    def __str__(self) -> str:
        return f"as <value({format_pointer(self.pointer)})>"


Step = Union[Insert, Patch, ValueStep]


@dataclass(frozen=True)
class Throttle:
    updates: int
    period_ms: int

    def __str__(self) -> str:
        return f"throttle to {self.updates} updates every {_duration(self.period_ms)}"


def _duration(ms: int) -> str:
    for unit, size in (("hours", 3_600_000), ("minutes", 60_000)):
        if ms % size == 0:
            return f"{ms // size} {unit}"
    return f"{ms // 1000} seconds"


@dataclass(frozen=True)
class ViewSpec:
    """A checked topic view specification."""

    selector: Selector
    target: Template
    remote: str | None = None
    steps: tuple[Step, ...] = ()
    properties: tuple[tuple[str, str], ...] = ()
    throttle: Throttle | None = None
    delay_ms: int | None = None
    preserve_topics: bool = False
    separator: str | None = None
    topic_type: TopicType | None = None

    @property
    def json_only(self) -> bool:
        """Whether only JSON sources (and JSON time series) produce reference topics:
        value directives, inserts, patches and ``as <value()>`` read JSON."""
        return self.target.reads_value or bool(self.steps)

    @property
    def inserts(self) -> tuple[Insert, ...]:
        return tuple(s for s in self.steps if isinstance(s, Insert))

    def __str__(self) -> str:
        words = [f"map {_quote(str(self.selector))}"]
        if self.remote is not None:
            words.append(f"from {_quote(self.remote)}")
        words.append(f"to {self.target}")
        words += [str(s) for s in self.steps]
        if self.properties:
            words.append("with properties " + ", ".join(f"{k}:{_quote(v)}" for k, v in self.properties))
        if self.throttle is not None:
            words.append(str(self.throttle))
        if self.delay_ms is not None:
            words.append(f"delay by {_duration(self.delay_ms)}")
        if self.preserve_topics:
            words.append("preserve topics")
        if self.separator is not None:
            words.append(f"separator {_quote(self.separator)}")
        if self.topic_type is not None:
            words.append(f"type {self.topic_type.value}")
        return " ".join(words)
