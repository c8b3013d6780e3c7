"""Metric collectors: named, labelled figures over topics or sessions (pure).

A collector is a definition an administrator makes (CONTROL_SERVER); the controller keeps
them in the replicated configuration (document ``collectors``) and pushes them to every
gateway, which exports them on ``/metrics`` (:mod:`actors.metrics`).

* A **topic metric collector** (:class:`TopicCollector`): a name, a topic selector and
  whether to group by topic type. It is exported as the topics the selector selects
  (counted by the partitions) and this gateway's sessions' subscriptions to them, each
  split by topic type (label ``type``) when grouped.
* A **session metric collector** (:class:`SessionCollector`): a name, a session filter, the
  session properties to group by, and whether to drop the series of groups no session
  matches now (``remove_metrics_with_no_matches``; otherwise a group keeps its series, at 0,
  once seen). It is exported as this gateway's sessions the filter matches, and those
  opened and closed since the gateway started, one series per group: the values of the
  group-by properties (``""`` for a session without one). :class:`SessionMetrics` counts.

Every series has the label ``collector`` (the name); a session collector's group-by
properties become labels too. Prometheus label names are ``[a-zA-Z_][a-zA-Z0-9_]*`` and those
starting with ``__`` are Prometheus's own, so a property name is **sanitised**
(:func:`label_name`): every character outside ``[A-Za-z0-9_]`` becomes ``_`` (``$Principal``
is ``_Principal``, ``user-tier`` is ``user_tier``), a leading digit gets a ``_`` before it, and
leading underscores shrink to one. Two group-by properties with one label name, or one named
``collector``, are refused.

Bounds: at most :data:`MAX_COLLECTORS` collectors, :data:`MAX_GROUP_BY` group-by properties
each, and :data:`MAX_GROUPS` series per session collector on a gateway (the sessions of
further groups are counted in one series whose labels all say :data:`OTHER`).

Errors: every bad definition raises :class:`CollectorError` (code ``INVALID_COLLECTOR``),
naming the collector and what is wrong.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessions.filters import FilterSyntaxError, parse_filter
from topics.errors import TopicModelError
from topics.selectors import parse_selector

NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: collectors an instance may define (topic and session collectors together)
MAX_COLLECTORS = 100
#: properties one session collector may group by
MAX_GROUP_BY = 10
#: series one session collector has on a gateway; the sessions of more groups are counted as OTHER
MAX_GROUPS = 1000
#: the label value of every group-by label of the series that counts the groups beyond MAX_GROUPS
OTHER = "<other>"
#: characters a selector or a filter of a collector may have
MAX_TEXT = 4096
#: label names a group-by property may not take (the collector's own)
RESERVED = frozenset({"collector"})
_TOPIC_KEYS = {"kind", "name", "selector", "group_by_type"}
_SESSION_KEYS = {"kind", "name", "filter", "group_by", "remove_metrics_with_no_matches"}


class CollectorError(ValueError):
    """A metric collector definition that cannot be used; the message names it and says why."""

    code = "INVALID_COLLECTOR"


def label_name(property_name: str) -> str:
    """The Prometheus label name a session property is exported under (see the module)."""
    label = re.sub(r"[^A-Za-z0-9_]", "_", property_name)
    if label[:1].isdigit():
        label = "_" + label
    if label.startswith("__"):
        label = "_" + label.lstrip("_")
    return label


@dataclass(frozen=True)
class TopicCollector:
    name: str
    selector: str
    group_by_type: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "topic", "name": self.name, "selector": self.selector, "group_by_type": self.group_by_type}


@dataclass(frozen=True)
class SessionCollector:
    name: str
    filter: str
    group_by: tuple[str, ...] = ()
    remove_metrics_with_no_matches: bool = False
    #: the Prometheus label of each group-by property, in order
    labels: tuple[str, ...] = field(default=(), compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {"kind": "session", "name": self.name, "filter": self.filter, "group_by": list(self.group_by),
                "remove_metrics_with_no_matches": self.remove_metrics_with_no_matches}

    def matches(self, properties: Mapping[str, str], roles: frozenset[str]) -> bool:
        return parse_filter(self.filter).matches(properties, roles)  # parsed once: parse_filter caches

    def group(self, properties: Mapping[str, str]) -> tuple[str, ...]:
        return tuple(properties.get(p, "") for p in self.group_by)


Collector = TopicCollector | SessionCollector


def _text(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or not value:
        raise CollectorError(f"{where}: {what} must be a non-empty string")
    if len(value) > MAX_TEXT:
        raise CollectorError(f"{where}: {what} has {len(value):,} characters; at most {MAX_TEXT:,}")
    return value


def _flag(value: Any, what: str, where: str) -> bool:
    if not isinstance(value, bool):
        raise CollectorError(f"{where}: {what} must be true or false, got {value!r}")
    return value


def from_dict(data: Any) -> Collector:
    """A collector from its map: ``kind`` ``"topic"`` (``name``, ``selector``,
    ``group_by_type``) or ``"session"`` (``name``, ``filter``, ``group_by``,
    ``remove_metrics_with_no_matches``); :class:`CollectorError` when it is not one."""
    if not isinstance(data, dict):
        raise CollectorError("a metric collector definition is a map")
    kind, name = data.get("kind"), data.get("name")
    if kind not in ("topic", "session"):
        raise CollectorError(f"metric collector {name!r}: kind must be 'topic' or 'session', got {kind!r}")
    where = f"{kind} metric collector {name!r}"
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise CollectorError(f"{where}: a name is 1-64 letters, digits, '_', '.' or '-', starting with a letter "
                             "or digit")
    known = _TOPIC_KEYS if kind == "topic" else _SESSION_KEYS
    unknown = sorted(set(data) - known)
    if unknown:
        raise CollectorError(f"{where}: unknown key(s) {', '.join(map(str, unknown))}; known: {', '.join(sorted(known))}")
    if kind == "topic":
        selector = _text(data.get("selector"), "selector", where)
        try:
            parse_selector(selector)
        except TopicModelError as e:
            raise CollectorError(f"{where}: {selector!r} is not a topic selector: {e}") from None
        return TopicCollector(name, selector, _flag(data.get("group_by_type", False), "group_by_type", where))
    text = _text(data.get("filter"), "filter", where)
    try:
        parse_filter(text)
    except FilterSyntaxError as e:
        raise CollectorError(f"{where}: {e}") from None
    group_by = data.get("group_by") or []
    if not isinstance(group_by, list) or not all(isinstance(p, str) and p for p in group_by):
        raise CollectorError(f"{where}: group_by must be a list of session property names")
    if len(group_by) > MAX_GROUP_BY:
        raise CollectorError(f"{where}: at most {MAX_GROUP_BY} group-by properties, got {len(group_by)}")
    labels: dict[str, str] = {}
    for prop in group_by:
        _text(prop, "a group-by property", where)
        label = label_name(prop)
        if label in RESERVED:
            raise CollectorError(f"{where}: group-by property {prop!r} would be exported as label {label!r}, "
                                 "which is the collector's own")
        if label in labels:
            raise CollectorError(f"{where}: group-by properties {labels[label]!r} and {prop!r} are both exported "
                                 f"as label {label!r}")
        labels[label] = prop
    remove = _flag(data.get("remove_metrics_with_no_matches", False), "remove_metrics_with_no_matches", where)
    return SessionCollector(name, text, tuple(group_by), remove, tuple(labels))


@dataclass(frozen=True)
class Collectors:
    """Every collector of an instance, by name, in the order they were first defined."""

    items: tuple[Collector, ...] = ()

    def put(self, collector: Collector) -> tuple[Collectors, bool]:
        """These collectors with ``collector`` added, or in place of the one of its name
        (whether one was replaced); :class:`CollectorError` beyond :data:`MAX_COLLECTORS`."""
        names = [c.name for c in self.items]
        if collector.name in names:
            i = names.index(collector.name)
            return Collectors((*self.items[:i], collector, *self.items[i + 1:])), True
        if len(self.items) >= MAX_COLLECTORS:
            raise CollectorError(f"at most {MAX_COLLECTORS} metric collectors; remove one before adding "
                                 f"{collector.name!r}")
        return Collectors((*self.items, collector)), False

    def remove(self, name: str) -> Collectors | None:
        """These collectors without ``name``, or ``None`` when there is none of that name."""
        kept = tuple(c for c in self.items if c.name != name)
        return Collectors(kept) if len(kept) != len(self.items) else None

    @property
    def topics(self) -> list[TopicCollector]:
        return [c for c in self.items if isinstance(c, TopicCollector)]

    @property
    def sessions(self) -> list[SessionCollector]:
        return [c for c in self.items if isinstance(c, SessionCollector)]

    def to_wire(self) -> list[dict[str, Any]]:
        return [c.to_dict() for c in self.items]

    @classmethod
    def from_wire(cls, data: Any) -> Collectors:
        return cls(tuple(from_dict(d) for d in data or []))


@dataclass
class _Counts:
    """One session collector's figures on a gateway: opened and closed per group, and the
    groups seen (each keeps its series)."""

    opened: dict[tuple[str, ...], int] = field(default_factory=dict)
    closed: dict[tuple[str, ...], int] = field(default_factory=dict)
    seen: set[tuple[str, ...]] = field(default_factory=set)


class SessionMetrics:
    """A gateway's session collectors: sessions opened and closed (counted as they happen:
    :meth:`opened`, :meth:`closed`) and open (counted when asked: :meth:`figures`)."""

    def __init__(self) -> None:
        self.collectors: tuple[SessionCollector, ...] = ()
        self._counts: dict[str, _Counts] = {}

    def set(self, collectors: Iterable[SessionCollector]) -> None:
        """The collectors now: one whose definition did not change keeps its counts."""
        before = {c.name: c for c in self.collectors}
        self.collectors = tuple(collectors)
        self._counts = {c.name: self._counts[c.name] if before.get(c.name) == c else _Counts()
                        for c in self.collectors}

    def _group(self, collector: SessionCollector, counts: _Counts, properties: Mapping[str, str]) -> tuple[str, ...]:
        group = collector.group(properties)
        if group not in counts.seen:
            if len(counts.seen) >= MAX_GROUPS:
                return (OTHER,) * len(group)
            counts.seen.add(group)
        return group

    def opened(self, properties: Mapping[str, str], roles: frozenset[str]) -> None:
        self._count(properties, roles, opened=True)

    def closed(self, properties: Mapping[str, str], roles: frozenset[str]) -> None:
        self._count(properties, roles, opened=False)

    def _count(self, properties: Mapping[str, str], roles: frozenset[str], *, opened: bool) -> None:
        for collector in self.collectors:
            if collector.matches(properties, roles):
                counts = self._counts[collector.name]
                table = counts.opened if opened else counts.closed
                group = self._group(collector, counts, properties)
                table[group] = table.get(group, 0) + 1

    def figures(
        self, sessions: Iterable[tuple[Mapping[str, str], frozenset[str]]]
    ) -> list[tuple[SessionCollector, list[tuple[tuple[str, ...], int, int, int]]]]:
        """Per collector, per group: ``(group, sessions open, opened, closed)``, ``sessions``
        being the (properties, roles) of the sessions open now. A collector that removes
        metrics with no matches forgets its groups no session matches now."""
        open_now: dict[str, dict[tuple[str, ...], int]] = {c.name: {} for c in self.collectors}
        for properties, roles in sessions:
            for collector in self.collectors:
                if collector.matches(properties, roles):
                    group = self._group(collector, self._counts[collector.name], properties)
                    table = open_now[collector.name]
                    table[group] = table.get(group, 0) + 1
        out = []
        for collector in self.collectors:
            counts, now = self._counts[collector.name], open_now[collector.name]
            if collector.remove_metrics_with_no_matches:
                for gone in [g for g in counts.seen if g not in now]:
                    counts.seen.discard(gone)
                    counts.opened.pop(gone, None)
                    counts.closed.pop(gone, None)
                groups = sorted(now)
            else:
                groups = sorted(counts.seen | set(now) | ({()} if not collector.group_by else set()))
            out.append((collector, [(g, now.get(g, 0), counts.opened.get(g, 0), counts.closed.get(g, 0))
                                    for g in groups]))
        return out
