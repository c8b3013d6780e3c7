"""Topic specifications: a topic type plus validated properties.

Build them with :meth:`TopicSpecification.of`, which validates and
normalises every property and returns a shared instance for equal
specifications (a million topics of one kind share one object). Two
specifications are equal when their types and normalised properties are.

Rules beyond the single property values:

* TIME_SERIES topics need TIME_SERIES_EVENT_VALUE_TYPE; the other
  ``TIME_SERIES_*`` properties are refused on any other type.
* CONFLATION ``conflate`` and ``always`` are refused for TIME_SERIES topics:
  conflating would drop events of the series.

:func:`check_honoured` refuses, when a topic is created, the properties canopy
accepts in the reference system's syntax but does not act on (SCHEMA), so that
none is silently ignored.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from topics import properties as P
from topics.errors import SpecificationError
from topics.properties import Conflation, TimeSeriesRange
from topics.types import TopicType

__all__ = ["TopicSpecification", "check_honoured", "check_honoured_property"]

#: why a property (with any value but those listed) is refused on a topic being created
_NOT_HONOURED: dict[str, tuple[frozenset[str], str]] = {
    P.SCHEMA: (frozenset(), "SCHEMA belongs to RecordV2 topics, which canopy does not have; "
               "use a JSON topic with VALIDATE_VALUES true"),
}


def check_honoured(spec: TopicSpecification) -> None:
    """Raise :class:`SpecificationError` if ``spec`` has a property canopy would not honour.

    Call it where a topic is created from a client's specification (an add); a topic already
    stored (restored from a journal) is not checked again."""
    for name, value in spec.items:
        check_honoured_property(name, value)


def check_honoured_property(name: str, value: str) -> None:
    """:func:`check_honoured` for one property's normal value."""
    refused = _NOT_HONOURED.get(name)
    if refused is not None and value not in refused[0]:
        raise SpecificationError(f"property {name}={value!r} is not supported: {refused[1]}")


@dataclass(frozen=True, slots=True)
class TopicSpecification:
    """A topic type and its properties (sorted ``(name, value)`` pairs)."""

    type: TopicType
    items: tuple[tuple[str, str], ...] = ()

    @staticmethod
    def of(
        topic_type: TopicType | str, properties: Mapping[str, Any] | None = None
    ) -> TopicSpecification:
        """Validate and build a specification; raise :class:`SpecificationError` if invalid."""
        t = TopicType.parse(topic_type)
        pairs = tuple(
            sorted(P.validate_property(k, v) for k, v in (properties or {}).items())
        )
        return _build(t, pairs)

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.items)

    def get(self, name: str, default: str | None = None) -> str | None:
        for key, value in self.items:
            if key == name:
                return value
        return default

    def with_properties(self, changes: Mapping[str, Any]) -> TopicSpecification:
        """A copy with ``changes`` applied; a value of ``None`` removes the property."""
        merged: dict[str, Any] = dict(self.items)
        for key, value in changes.items():
            if value is None:
                merged.pop(key, None)
            else:
                merged[key] = value
        return TopicSpecification.of(self.type, merged)

    def _flag(self, name: str) -> bool:
        return self.get(name) == "true"

    @property
    def event_type(self) -> TopicType | None:
        """The event value type of a TIME_SERIES topic, else ``None``."""
        value = self.get(P.TIME_SERIES_EVENT_VALUE_TYPE)
        return TopicType(value) if value is not None else None

    @property
    def value_type(self) -> TopicType:
        """The type values (or events) of this topic are encoded with."""
        return self.event_type or self.type

    @property
    def retained_range(self) -> TimeSeriesRange:
        value = self.get(P.TIME_SERIES_RETAINED_RANGE)
        return TimeSeriesRange.parse(value) if value else P.DEFAULT_RETAINED_RANGE

    @property
    def subscription_range(self) -> TimeSeriesRange | None:
        value = self.get(P.TIME_SERIES_SUBSCRIPTION_RANGE)
        return TimeSeriesRange.parse(value) if value else None

    @property
    def conflation(self) -> Conflation:
        """The CONFLATION policy: ``conflate`` when unset, but ``off`` for a
        TIME_SERIES topic, whose events may not be merged."""
        value = self.get(P.CONFLATION)
        if value:
            return Conflation(value)
        return Conflation.OFF if self.type is TopicType.TIME_SERIES else Conflation.CONFLATE

    @property
    def dont_retain_value(self) -> bool:
        return self._flag(P.DONT_RETAIN_VALUE)

    @property
    def publish_values_only(self) -> bool:
        return self._flag(P.PUBLISH_VALUES_ONLY)

    @property
    def validate_values(self) -> bool:
        """VALIDATE_VALUES: a value must be plain (:func:`topics.types.check_plain`)."""
        return self._flag(P.VALIDATE_VALUES)

    @property
    def tidy_on_unsubscribe(self) -> bool:
        return self._flag(P.TIDY_ON_UNSUBSCRIBE)

    @property
    def priority(self) -> P.Priority:
        return P.Priority(self.get(P.PRIORITY, "default"))

    @property
    def persistent(self) -> bool:
        return self.get(P.PERSISTENT, "true") == "true"

    def __str__(self) -> str:
        if not self.items:
            return self.type.value
        inner = ", ".join(f"{k}={v}" for k, v in self.items)
        return f"{self.type.value}{{{inner}}}"


@lru_cache(maxsize=1024)
def _build(t: TopicType, pairs: tuple[tuple[str, str], ...]) -> TopicSpecification:
    props = dict(pairs)
    if t is TopicType.TIME_SERIES:
        if P.TIME_SERIES_EVENT_VALUE_TYPE not in props:
            raise SpecificationError(
                "a TIME_SERIES topic needs the property TIME_SERIES_EVENT_VALUE_TYPE"
            )
        if props.get(P.CONFLATION) in (Conflation.CONFLATE.value, Conflation.ALWAYS.value):
            raise SpecificationError(
                f"CONFLATION {props[P.CONFLATION]} is not supported for TIME_SERIES topics; "
                "use off or unsubscribe"
            )
    else:
        wrong = sorted(P.TIME_SERIES_ONLY & props.keys())
        if wrong:
            raise SpecificationError(
                f"{', '.join(wrong)} only applies to TIME_SERIES topics, not {t.value}"
            )
    return TopicSpecification(t, pairs)
