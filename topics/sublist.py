"""The subscription index: which subscribers does an update to a path reach?

:class:`SubscriptionIndex` answers ``match(path) -> subscribers`` without
scanning every registered selector. It is built the way NATS builds its
sublist:

* A trie of path segments. A selector is decomposed into members and each
  member is stored at the trie node its literal part leads to:

  - ``>a/b`` ends at node ``a → b`` in the *exact* slot;
  - a split-path pattern follows literal segments as literal children and
    regular-expression segments as *pattern children* (one per distinct
    regex) and ends in the *exact* slot, the *descendants* slot, or both,
    as its qualifier says;
  - a full-path pattern is parked at the node of its path prefix and its
    regex is tried only for paths that pass through that node.

* Matching walks the trie along the path: at every node it follows the
  literal child for the next segment and each pattern child whose regex
  matches it, collecting descendant slots on the way and the exact slot at
  the end.

* A bounded cache maps recently matched paths to their result. Adding a
  subscription patches the cached results it affects; removing one drops
  them. :attr:`SubscriptionIndex.generation` grows with every change, so a
  reader holding a result can tell it is stale.

Subscribers are any hashable values; the same subscriber may register
several selectors and is reported once. :meth:`add` and :meth:`remove`
return whether the selector gained its first or lost its last subscriber,
the only moments a partition needs to tell anyone that interest changed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Generic, TypeVar

from topics.selectors import (
    FullPathSelector,
    PathSelector,
    Regex,
    Selector,
    SplitPathSelector,
    parse_selector,
)

__all__ = ["SubscriptionIndex"]

S = TypeVar("S", bound=Hashable)


def _count_up(slot: dict[S, int], subscriber: S) -> None:
    slot[subscriber] = slot.get(subscriber, 0) + 1


def _count_down(slot: dict[S, int], subscriber: S) -> None:
    left = slot[subscriber] - 1
    if left:
        slot[subscriber] = left
    else:
        del slot[subscriber]


class _Node(Generic[S]):
    __slots__ = ("literal", "patterns", "exact", "descendants", "full")

    def __init__(self) -> None:
        self.literal: dict[str, _Node[S]] = {}
        self.patterns: dict[str, tuple[Regex, _Node[S]]] = {}
        # subscriber -> how many registered members put it in this slot
        self.exact: dict[S, int] = {}
        self.descendants: dict[S, int] = {}
        self.full: dict[FullPathSelector, dict[S, int]] = {}

    def is_empty(self) -> bool:
        return not (self.literal or self.patterns or self.exact or self.descendants or self.full)


class SubscriptionIndex(Generic[S]):
    """Subscribers by selector, matched by path.

    ``cache_size=0`` disables the match cache (tests run both ways).
    """

    def __init__(self, cache_size: int = 4096) -> None:
        self._root: _Node[S] = _Node()
        self._subscriptions: dict[Selector, set[S]] = {}
        self._cache: dict[str, frozenset[S]] = {}
        self._cache_size = cache_size
        self.generation = 0

    # -- registration ------------------------------------------------------

    def __len__(self) -> int:
        """The number of (selector, subscriber) registrations."""
        return sum(len(s) for s in self._subscriptions.values())

    def selectors(self) -> Iterator[Selector]:
        """The selectors that have at least one subscriber."""
        return iter(self._subscriptions)

    def subscribers(self, selector: Selector | str) -> frozenset[S]:
        return frozenset(self._subscriptions.get(parse_selector(selector), ()))

    def add(self, selector: Selector | str, subscriber: S) -> bool:
        """Register ``subscriber`` for ``selector``; True if it is the selector's first."""
        sel = parse_selector(selector)
        subs = self._subscriptions.get(sel)
        first = subs is None
        if subs is None:
            subs = self._subscriptions[sel] = set()
        elif subscriber in subs:
            return False
        subs.add(subscriber)
        for member in sel.members:
            self._insert(member, subscriber)
        self.generation += 1
        if self._cache:
            for path, result in self._cache.items():
                if subscriber not in result and sel.matches(path):
                    self._cache[path] = result | {subscriber}
        return first

    def remove(self, selector: Selector | str, subscriber: S) -> bool:
        """Unregister; True if the selector has no subscriber left."""
        sel = parse_selector(selector)
        subs = self._subscriptions.get(sel)
        if subs is None or subscriber not in subs:
            return False
        subs.discard(subscriber)
        last = not subs
        if last:
            del self._subscriptions[sel]
        for member in sel.members:
            self._delete(member, subscriber)
        self.generation += 1
        if self._cache:
            # the subscriber may still be matched through another selector,
            # so drop the affected entries rather than patch them
            stale = [p for p, r in self._cache.items() if subscriber in r and sel.matches(p)]
            for path in stale:
                del self._cache[path]
        return last

    def _insert(self, member: Selector, subscriber: S) -> None:
        node = self._root
        if isinstance(member, PathSelector):
            for segment in member.path.split("/"):
                node = node.literal.setdefault(segment, _Node())
            _count_up(node.exact, subscriber)
        elif isinstance(member, SplitPathSelector):
            for literal, pattern, regex in zip(member.literals, member.patterns, member.regexes):
                if literal is not None:
                    node = node.literal.setdefault(literal, _Node())
                else:
                    entry = node.patterns.get(pattern)
                    if entry is None:
                        entry = node.patterns[pattern] = (regex, _Node())
                    node = entry[1]
            if member.qualifier.includes_self:
                _count_up(node.exact, subscriber)
            if member.qualifier.includes_descendants:
                _count_up(node.descendants, subscriber)
        elif isinstance(member, FullPathSelector):
            if member.path_prefix:
                for segment in member.path_prefix.split("/"):
                    node = node.literal.setdefault(segment, _Node())
            _count_up(node.full.setdefault(member, {}), subscriber)
        else:  # pragma: no cover - members are never sets
            raise TypeError(member)

    def _delete(self, member: Selector, subscriber: S) -> None:
        trail: list[tuple[_Node[S], str, bool]] = []  # (parent, key, is_pattern)
        node = self._root

        def down_literal(segment: str) -> _Node[S]:
            trail.append((node, segment, False))
            return node.literal[segment]

        if isinstance(member, PathSelector):
            for segment in member.path.split("/"):
                node = down_literal(segment)
            _count_down(node.exact, subscriber)
        elif isinstance(member, SplitPathSelector):
            for literal, pattern in zip(member.literals, member.patterns):
                if literal is not None:
                    node = down_literal(literal)
                else:
                    trail.append((node, pattern, True))
                    node = node.patterns[pattern][1]
            if member.qualifier.includes_self:
                _count_down(node.exact, subscriber)
            if member.qualifier.includes_descendants:
                _count_down(node.descendants, subscriber)
        elif isinstance(member, FullPathSelector):
            if member.path_prefix:
                for segment in member.path_prefix.split("/"):
                    node = down_literal(segment)
            slot = node.full[member]
            _count_down(slot, subscriber)
            if not slot:
                del node.full[member]
        # prune empty nodes bottom-up
        while trail and node.is_empty():
            parent, key, is_pattern = trail.pop()
            if is_pattern:
                del parent.patterns[key]
            else:
                del parent.literal[key]
            node = parent

    # -- matching ----------------------------------------------------------

    def match(self, path: str) -> frozenset[S]:
        """Every subscriber with a selector that selects ``path`` (normal form)."""
        if self._cache_size:
            hit = self._cache.get(path)
            if hit is not None:
                return hit
        result = frozenset(self._walk(path))
        if self._cache_size:
            if len(self._cache) >= self._cache_size:
                # evict the oldest quarter; cheaper than LRU bookkeeping on every hit
                for key in list(self._cache)[: max(1, self._cache_size // 4)]:
                    del self._cache[key]
            self._cache[path] = result
        return result

    def _walk(self, path: str) -> set[S]:
        segments = path.split("/")
        n = len(segments)
        out: set[S] = set()
        stack: list[tuple[_Node[S], int]] = [(self._root, 0)]
        while stack:
            node, d = stack.pop()
            if node.full:
                for selector, subs in node.full.items():
                    if selector.matches(path):
                        out.update(subs)
            if d == n:
                out.update(node.exact)
                continue
            if node.descendants:
                out.update(node.descendants)
            segment = segments[d]
            child = node.literal.get(segment)
            if child is not None:
                stack.append((child, d + 1))
            for regex, pchild in node.patterns.values():
                if regex.fullmatch(segment) is not None:
                    stack.append((pchild, d + 1))
        return out

    def match_brute_force(self, path: str) -> frozenset[S]:
        """The same answer as :meth:`match` by testing every selector (the oracle)."""
        out: set[S] = set()
        for selector, subs in self._subscriptions.items():
            if selector.matches(path):
                out.update(subs)
        return frozenset(out)
