"""Evaluate a topic view for one source topic, as a pure function.

:func:`derive` takes a :class:`~views.spec.ViewSpec`, a :class:`Source`
(the source topic as the view sees it) and a ``lookup`` for the topics that
``insert`` clauses read, and returns the reference topics that source maps
to (:class:`Output`, first-wins on duplicate paths) together with the
insertion paths it consulted (so the caller can re-derive when one of them
changes).

The chain, as topic views define it:

1. *Which sources count.* A view that reads values (``scalar``/``expand``
   directives, ``insert``, ``patch``, ``as <value()>``) takes only JSON
   sources; a ``type`` clause takes only sources whose type converts
   (:func:`topics.conversions.is_supported`); anything else makes nothing.
2. *Path.* The template's literal text, ``<path(start[, number])>``
   segments of the source path (out of range: nothing), ``<scalar()>`` text
   of a scalar in the current value (strings as they are, ``null`` as
   "null", numbers and booleans in JSON form; a missing or non-scalar value:
   no reference topic) and ``<expand()>`` children (object keys in order,
   array indices, or the scalar at the path pointer inside each child), each
   expand making the child the current value for what follows. A ``/`` in
   extracted text adds levels unless a ``separator`` replaces it. A path that
   normalises to nothing or has a forbidden character makes nothing.
3. *Value.* ``insert``, ``patch`` and ``as <value()>`` in written order. An
   insert reads the whole value of a JSON, STRING, INT64 or DOUBLE topic (or
   the part at its ``key`` pointer) and puts it at its ``at`` pointer; when
   that fails (no topic, another type, no such key, missing parent, scalar
   parent, bad index, a result nested deeper than
   :data:`~topics.types.MAX_JSON_DEPTH`) the ``default`` constant is put
   there instead, if there is one, else the value goes on unchanged. A
   failing patch, or an ``as <value()>`` pointer that selects nothing, makes
   no reference topic.
4. *Type.* The ``type`` clause converts the value
   (:func:`topics.conversions.convert`); a value that does not convert makes
   no reference topic. To TIME_SERIES the value becomes an event to append.
5. *Properties.* Copied from the source except PERSISTENT, REMOVAL,
   VALIDATE_VALUES and SLAVE_MASTER_TOPIC, then the ``with properties``
   pairs; a retained range can only narrow the source's.

Values stay within :data:`~topics.types.MAX_JSON_DEPTH` all along the
chain (inserts and patch operations that would go deeper fail), so nothing
that walks them recurses further than that.

A source without a value (not yet set) mirrors as a reference topic without
a value when the view does not read values, and makes nothing otherwise.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from topics import paths
from topics import types as codec
from topics.conversions import convert, event_type_after, is_supported
from topics.errors import ConversionError, InvalidValueError, PathError, SpecificationError
from topics.properties import (
    DEFAULT_RETAINED_RANGE,
    TIME_SERIES_EVENT_VALUE_TYPE,
    TIME_SERIES_ONLY,
    TIME_SERIES_RETAINED_RANGE,
    TimeSeriesRange,
)
from topics.specification import TopicSpecification
from topics.types import MAX_JSON_DEPTH, TopicType
from topics.patch import PatchFailed, apply_patch
from topics.pointer import MISSING, InsertError, insert_at, is_scalar, nests_deeper_than, resolve
from views.spec import NO_DEFAULT, Expand, Insert, Patch, PathPart, Scalar, Template, ValueStep, ViewSpec

__all__ = ["Output", "Source", "derive"]

NOT_COPIED = frozenset({"PERSISTENT", "REMOVAL", "VALIDATE_VALUES", "SLAVE_MASTER_TOPIC"})
INSERTABLE = (TopicType.JSON, TopicType.STRING, TopicType.INT64, TopicType.DOUBLE)


@dataclass(frozen=True)
class Source:
    """A topic as a view reads it: ``value`` is the stored bytes (for a
    TIME_SERIES topic, the event value being processed), or ``None``."""

    path: str
    specification: TopicSpecification
    value: bytes | None = None

    @property
    def type(self) -> TopicType:
        return self.specification.type


@dataclass(frozen=True)
class Output:
    """A reference topic: for TIME_SERIES, ``value`` is the event value to append."""

    path: str
    specification: TopicSpecification
    value: bytes | None


Lookup = Callable[[str], Source | None]


class _Drop(Exception):
    """This branch of the evaluation makes no reference topic."""


def derive(spec: ViewSpec, source: Source, lookup: Lookup) -> tuple[list[Output], set[str]]:
    """The reference topics ``source`` maps to, and the insertion paths read."""
    consulted: set[str] = set()
    value_type = source.specification.event_type if source.type is TopicType.TIME_SERIES else source.type
    if spec.json_only and value_type is not TopicType.JSON:
        return [], consulted
    target_type = spec.topic_type or source.type
    if spec.topic_type is not None and not is_supported(source.type, spec.topic_type, source.specification.event_type):
        return [], consulted
    try:
        properties = _properties(spec, source, target_type)
    except (SpecificationError, ConversionError):
        return [], consulted
    if not spec.json_only and target_type is source.type:
        # a mirror with another path: the bytes pass through untouched
        path = _plain_path(spec, source.path)
        return ([Output(path, properties, source.value)] if path is not None else []), consulted
    if source.value is None:
        if spec.target.reads_value or spec.steps:
            return [], consulted
        path = _plain_path(spec, source.path)
        return ([Output(path, properties, None)] if path is not None else []), consulted
    assert value_type is not None
    current = codec.decode(value_type, source.value)
    outputs: dict[str, Output] = {}
    for path, value in _expand(spec, spec.target, source.path, current):
        if path in outputs:
            continue  # duplicate paths from one expansion: the first wins
        try:
            for step in spec.steps:
                value = _step(spec, step, source.path, value, lookup, consulted)
            outputs[path] = Output(path, properties, _encode(value, source, target_type))
        except _Drop:
            continue
    return list(outputs.values()), consulted


# -- paths ------------------------------------------------------------------------------


def _plain_path(spec: ViewSpec, source_path: str) -> str | None:
    try:
        return _finish_path(
            "".join(_path_part(p, source_path) if isinstance(p, PathPart) else str(p) for p in spec.target.parts)
        )
    except _Drop:
        return None


def _path_part(part: PathPart, source_path: str) -> str:
    segments = source_path.split("/")
    if part.start >= len(segments):
        raise _Drop
    end = len(segments) if part.number is None else part.start + part.number
    if end > len(segments):
        raise _Drop
    return "/".join(segments[part.start : end])


def _finish_path(text: str) -> str:
    try:
        return paths.normalise(text)
    except PathError:
        raise _Drop from None


def _scalar_text(value: Any, separator: str | None) -> str:
    if isinstance(value, str):
        text = value
    elif isinstance(value, float) and not math.isfinite(value):
        text = str(value)
    else:
        text = json.dumps(value)
    if separator is not None:
        text = text.replace("/", separator)
    return text


def _scalar(pointer: tuple[str, ...], value: Any, separator: str | None) -> str:
    found = resolve(value, pointer)
    if found is MISSING or not is_scalar(found):
        raise _Drop
    return _scalar_text(found, separator)


def _expand(spec: ViewSpec, template: Template, source_path: str, value: Any) -> list[tuple[str, Any]]:
    """Every (path, current value) the template makes, in order."""
    branches: list[tuple[list[str], Any]] = [([], value)]
    for part in template.parts:
        grown: list[tuple[list[str], Any]] = []
        for text, current in branches:
            try:
                if isinstance(part, str):
                    grown.append(([*text, part], current))
                elif isinstance(part, PathPart):
                    grown.append(([*text, _path_part(part, source_path)], current))
                elif isinstance(part, Scalar):
                    grown.append(([*text, _scalar(part.pointer, current, spec.separator)], current))
                else:
                    grown += [([*text, name], child) for name, child in _children(part, current, spec.separator)]
            except _Drop:
                continue
        branches = grown
    made: list[tuple[str, Any]] = []
    for text, current in branches:
        try:
            made.append((_finish_path("".join(text)), current))
        except _Drop:
            continue
    return made


def _children(part: Expand, value: Any, separator: str | None) -> list[tuple[str, Any]]:
    container = resolve(value, part.source)
    if isinstance(container, dict):
        items = [(str(k), v) for k, v in container.items()]
    elif isinstance(container, list):
        items = [(str(i), v) for i, v in enumerate(container)]
    else:
        raise _Drop
    named = []
    for key, child in items:
        name = _scalar_text(key, separator)
        if part.path is not None:
            found = resolve(child, part.path)
            if found is not MISSING and is_scalar(found):
                name = _scalar_text(found, separator)
        named.append((name, child))
    return named


# -- values -----------------------------------------------------------------------------


def _step(spec: ViewSpec, step: Any, source_path: str, value: Any, lookup: Lookup, consulted: set[str]) -> Any:
    if isinstance(step, Insert):
        return _insert(spec, step, source_path, value, lookup, consulted)
    if isinstance(step, Patch):
        try:
            return apply_patch(value, step.operations)
        except PatchFailed:
            raise _Drop from None
    assert isinstance(step, ValueStep)
    found = resolve(value, step.pointer)
    if found is MISSING:
        raise _Drop
    return found


def insertion_path(step: Insert, source_path: str, value: Any, separator: str | None) -> str | None:
    """The path of the topic an insert reads, or ``None`` if it cannot be made."""
    try:
        text = "".join(
            _path_part(p, source_path)
            if isinstance(p, PathPart)
            else _scalar(p.pointer, value, separator)
            if isinstance(p, Scalar)
            else str(p)
            for p in step.path.parts
        )
        return _finish_path(text)
    except _Drop:
        return None


def _insert(spec: ViewSpec, step: Insert, source_path: str, value: Any, lookup: Lookup, consulted: set[str]) -> Any:
    item: Any = MISSING
    path = insertion_path(step, source_path, value, spec.separator)
    if path is not None:
        consulted.add(path)
        other = lookup(path)
        if other is not None and other.value is not None and other.type in INSERTABLE:
            try:
                item = codec.decode(other.type, other.value)
            except InvalidValueError:
                item = MISSING
            if item is not MISSING and step.key is not None:
                item = resolve(item, step.key)
            if isinstance(item, float) and not math.isfinite(item):
                item = MISSING  # NaN and infinities have no JSON form: the insertion fails
            elif item is not MISSING and nests_deeper_than(item, MAX_JSON_DEPTH - len(step.at)):
                item = MISSING  # no topic could hold the result: the insertion fails
    if item is not MISSING:
        try:
            return insert_at(value, step.at, item)
        except InsertError:
            pass
    if step.default is not NO_DEFAULT:
        try:
            return insert_at(value, step.at, step.default)
        except InsertError:
            pass
    return value


def _encode(value: Any, source: Source, target: TopicType) -> bytes:
    value_type = source.specification.event_type if source.type is TopicType.TIME_SERIES else source.type
    assert value_type is not None
    if target is TopicType.TIME_SERIES:
        out_type = event_type_after(source.type, target, source.specification.event_type)
        assert out_type is not None
    else:
        out_type = target
    try:
        converted = convert(value, value_type, out_type)
        return codec.encode(out_type, converted)
    except (ConversionError, InvalidValueError):
        raise _Drop from None


# -- properties -------------------------------------------------------------------------


def _properties(spec: ViewSpec, source: Source, target: TopicType) -> TopicSpecification:
    copied = {k: v for k, v in source.specification.properties.items() if k not in NOT_COPIED}
    source_range = (
        TimeSeriesRange.parse(copied[TIME_SERIES_RETAINED_RANGE])
        if TIME_SERIES_RETAINED_RANGE in copied
        else DEFAULT_RETAINED_RANGE
    )
    if target is not TopicType.TIME_SERIES:
        copied = {k: v for k, v in copied.items() if k not in TIME_SERIES_ONLY}
    elif source.type is not TopicType.TIME_SERIES:
        copied[TIME_SERIES_EVENT_VALUE_TYPE] = source.type.value
    for key, value in spec.properties:
        if key in TIME_SERIES_ONLY and target is not TopicType.TIME_SERIES:
            continue
        if key == TIME_SERIES_RETAINED_RANGE and source.type is TopicType.TIME_SERIES:
            value = str(TimeSeriesRange.parse(value).narrowed_to(source_range))
        copied[key] = value
    return TopicSpecification.of(target, copied)
