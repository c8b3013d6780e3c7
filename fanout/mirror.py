"""What a fan-out link mirrors, and the claims that put it into the secondary's tree.

Pure (no I/O): a :class:`Mirror` is fed the notifications of the link's
subscription on the primary (each topic announced, its values, its removal)
and answers the partition operations that make the local tree follow.

Replica topics are *claims* on their paths, as topic views' reference topics
are (:mod:`topics.store`), with a precedence below every view's
(:func:`precedence`): so a replica wins a path over any reference topic, a
normal topic made locally wins over a replica, replicas are read-only to
local clients and never journaled (after a restart, the link's subscription
brings them back), and dropping a link drops all its topics at once
(``RefDropView``). Of two links that mirror one path the lower precedence
(the earlier configured) wins; the mirror reports each such path
(:attr:`Mirror.contested`), it does not race.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from topics import paths

from topics.protocol import RefDrop, RefDropView, RefEvent, RefPut
from topics.selectors import Selector
from topics.specification import TopicSpecification
from topics.types import TopicType, encode

#: precedences of fan-out claims start here: below every view's (views count up from 0)
FANOUT_BASE = -1_000_000
#: links per instance (each takes one precedence)
MAX_LINKS = 10_000
#: the first precedence ordinal of links added at run time (those of the configuration file
#: count from 0 and may be renumbered when the file changes; these never are)
RUNTIME_ORDINALS = 5_000


def precedence(ordinal: int) -> int:
    """The claim precedence of the ``ordinal``-th link of the instance (0 is the first made)."""
    if not 0 <= ordinal < MAX_LINKS:
        raise ValueError(f"a link ordinal is 0..{MAX_LINKS - 1}, got {ordinal}")
    return FANOUT_BASE + ordinal


def claim_name(connection: str, link: str) -> str:
    """What a replica's claim says it is (an error on a local write names it)."""
    return f"fan-out {connection} link {link}"


@dataclass
class Mirror:
    """One link's replicas: path -> specification."""

    precedence: int
    name: str
    topics: dict[str, TopicSpecification] = field(default_factory=dict)
    #: path -> the value last claimed (to claim it again on a restarted partition)
    values: dict[str, bytes | None] = field(default_factory=dict)
    #: paths another link of the instance mirrors too (the earlier link holds them)
    contested: set[str] = field(default_factory=set)
    #: updates mirrored since the link started
    updates: int = 0

    def announced(self, path: str, spec: TopicSpecification, value: Any) -> RefPut:
        """The primary has (or now shows) the topic: claim it with its current value."""
        self.topics[path] = spec
        self.updates += 1
        data = self.values[path] = _encoded(spec, value)
        return RefPut(path, self.precedence, self.name, spec.type.value, spec.properties or None, data)

    def reclaim(self, path: str) -> RefPut | None:
        """The claim again, as last made (a partition that restarted has no claims)."""
        spec = self.topics.get(path)
        if spec is None:
            return None
        return RefPut(path, self.precedence, self.name, spec.type.value, spec.properties or None,
                      self.values.get(path))

    def value(
        self, path: str, value: Any, event: tuple[Any, int, str] | None = None, *, retained: bool = True
    ) -> RefPut | None:
        """A new value (or, for a time series, an event ``(value, timestamp ms, author)``).
        A value not ``retained`` (an MQTT publish without RETAIN) is passed on to the
        replica's subscribers without becoming its value, as on the primary."""
        spec = self.topics.get(path)
        if spec is None:
            return None
        self.updates += 1
        if not retained and event is None:
            return RefPut(path, self.precedence, self.name, spec.type.value, spec.properties or None,
                          _encoded(spec, value), retain=False)
        if event is not None and spec.event_type is not None:
            appended = encode(spec.event_type, event[0])
            return RefPut(path, self.precedence, self.name, spec.type.value, spec.properties or None, None,
                          RefEvent(appended, event[1], event[2]))
        data = self.values[path] = _encoded(spec, value)
        return RefPut(path, self.precedence, self.name, spec.type.value, spec.properties or None, data)

    def removed(self, path: str) -> RefDrop | None:
        if self.topics.pop(path, None) is None:
            return None
        self.values.pop(path, None)
        self.contested.discard(path)
        return RefDrop(path, self.precedence)

    def clear(self) -> RefDropView:
        """The link stops (or lost its session for good): every replica goes."""
        self.topics.clear()
        self.values.clear()
        self.contested.clear()
        return RefDropView(self.precedence)


def _encoded(spec: TopicSpecification, value: Any) -> bytes | None:
    if value is None or spec.type is TopicType.TIME_SERIES:
        return None
    return encode(spec.type, value)


def crosses(selector: Selector, link: Selector) -> bool:
    """Whether a request selector intersects a link, by path prefix only, as the
    missing-topic propagation conditions (ARCHITECTURE.md) judge it: one prefix lies at or
    under the other; regular expressions are not looked at. A selector with no prefix
    (``*.*``) crosses nothing, as no missing-topic handler hears of it."""
    mine, theirs = selector.path_prefix, link.path_prefix
    if not mine:
        return False
    return paths.is_prefix(theirs, mine) or paths.is_prefix(mine, theirs)


def propagates(selector: Selector, links: list[Selector], replicas: Iterable[str]) -> bool:
    """The missing-topic propagation conditions 2 and 3 (ARCHITECTURE.md) for one fan-out
    connection: the request selector intersects one of its links, and no topic replicated
    on this server (by any connection: ``replicas``, the paths the request matched here
    that are replicas) matches both the selector and such a link. Conditions 1 (a live
    session), 4 and 5 (on the primary) are checked where they can be."""
    crossing = [link for link in links if crosses(selector, link)]
    if not crossing:
        return False
    return not any(selector.matches(p) and link.matches(p) for p in replicas for link in crossing)


def overlapping(links: dict[str, list[str]]) -> list[tuple[str, str, str]]:
    """Pairs of links whose selectors' path prefixes nest (one may mirror the other's topics):
    ``(link, other link, the shorter prefix)``, each pair once. ``links``: link name -> path prefixes."""
    found = []
    names = sorted(links)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            for pa in links[a]:
                for pb in links[b]:
                    if paths.is_prefix(pa, pb) or paths.is_prefix(pb, pa):
                        found.append((a, b, pa if len(pa) <= len(pb) else pb))
    return found
