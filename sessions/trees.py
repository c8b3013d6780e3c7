"""Session trees: branch mapping tables and how a session's paths resolve.

A :class:`BranchMappingTable` belongs to a *session tree branch* and lists
``(session filter, topic tree branch)`` mappings in order. For one session
and one session path the **single mapping rule** picks at most one mapping:

1. every table whose session tree branch is a prefix of the session path is
   considered; in each, the *first* mapping whose filter matches the
   session's properties applies (a table may have none that applies);
2. of the tables with an applicable mapping, the one with the *longest*
   session tree branch wins;
3. with none, the session path is the topic path (identity).

The winning mapping replaces the session tree branch at the front of the
session path with its topic tree branch.

What applies depends only on a session's properties and roles, so sessions
that agree on every property the filters read share one
:class:`Resolution`, computed once: :meth:`SessionTrees.resolution_for`.
A resolution translates session paths to topic paths (:meth:`resolve`),
topic paths back to the session paths that show them
(:meth:`session_paths`), and a session selector to the topic selectors whose
topics could show through it (:meth:`interest`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessions.filters import ROLES_KEY, FilterSyntaxError, SessionFilter, parse_filter
from topics import paths
from topics.errors import PathError
from topics.selectors import PathSelector, Qualifier, Selector, SplitPathSelector

__all__ = ["BranchMapping", "BranchMappingTable", "Resolution", "SessionTrees", "TreeError"]


class TreeError(ValueError):
    """An invalid branch mapping table; says which part and why."""

    code = "INVALID_BRANCH_MAPPING"


@dataclass(frozen=True)
class BranchMapping:
    filter: SessionFilter
    topic_tree_branch: str


@dataclass(frozen=True)
class BranchMappingTable:
    session_tree_branch: str
    mappings: tuple[BranchMapping, ...]

    @classmethod
    def of(cls, session_tree_branch: Any, mappings: Iterable[Any]) -> BranchMappingTable:
        """Validate and build a table from ``[(filter text, topic tree branch), ...]``."""
        try:
            branch = paths.normalise(session_tree_branch)
        except PathError as e:
            raise TreeError(f"session tree branch: {e}") from None
        built = []
        for index, item in enumerate(mappings):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise TreeError(f"mapping {index}: expected [session filter, topic tree branch], got {item!r}")
            text, target = item
            try:
                session_filter = parse_filter(text)
            except FilterSyntaxError as e:
                raise TreeError(f"mapping {index}: {e}") from None
            try:
                built.append(BranchMapping(session_filter, paths.normalise(target)))
            except PathError as e:
                raise TreeError(f"mapping {index}: topic tree branch: {e}") from None
        return cls(branch, tuple(built))

    def to_wire(self) -> list[Any]:
        return [self.session_tree_branch, [[m.filter.text, m.topic_tree_branch] for m in self.mappings]]

    @classmethod
    def from_wire(cls, data: Any) -> BranchMappingTable:
        if not isinstance(data, (list, tuple)) or len(data) != 2 or not isinstance(data[1], (list, tuple)):
            raise TreeError(f"a table is [session tree branch, [[filter, topic tree branch], ...]], got {data!r}")
        return cls.of(data[0], data[1])

    def applicable(self, properties: Mapping[str, str], roles: frozenset[str]) -> str | None:
        """The topic tree branch of the first mapping whose filter matches, if any."""
        for mapping in self.mappings:
            if mapping.filter.matches(properties, roles):
                return mapping.topic_tree_branch
        return None


def _depth(path: str) -> int:
    return paths.depth(path)


def branch_selector(branch: str) -> Selector:
    """A selector for ``branch`` and everything below it."""
    return SplitPathSelector.of((re.escape(s) for s in branch.split("/")), Qualifier.MATCH_AND_DESCENDANTS)


def _translate(member: Selector, session_branch: str, topic_branch: str) -> Selector:
    """``member`` (whose path prefix lies under ``session_branch``) in topic space."""
    if isinstance(member, PathSelector):
        return PathSelector(paths.join(topic_branch, paths.relative(member.path, session_branch)))
    if isinstance(member, SplitPathSelector):
        k = _depth(session_branch)
        head = tuple(re.escape(s) for s in topic_branch.split("/"))
        return SplitPathSelector.of(head + member.patterns[k:], member.qualifier)
    return branch_selector(topic_branch)  # a full-path regex cannot be rewritten: take the branch


@dataclass(frozen=True)
class Resolution:
    """The applicable mappings for one group of sessions: ``(session branch,
    topic branch)`` pairs, longest session branch first."""

    mappings: tuple[tuple[str, str], ...] = ()

    def resolve(self, session_path: str) -> str:
        for session_branch, topic_branch in self.mappings:
            if paths.is_prefix(session_branch, session_path):
                return paths.join(topic_branch, paths.relative(session_path, session_branch))
        return session_path

    def session_paths(self, topic_path: str) -> list[str]:
        """Every session path that resolves to ``topic_path``."""
        out = []
        if self.resolve(topic_path) == topic_path:
            out.append(topic_path)
        for session_branch, topic_branch in self.mappings:
            if paths.is_prefix(topic_branch, topic_path):
                candidate = paths.join(session_branch, paths.relative(topic_path, topic_branch))
                if candidate not in out and self.resolve(candidate) == topic_path:
                    out.append(candidate)
        return out

    def interest(self, selector: Selector) -> list[Selector]:
        """Topic selectors that together cover every topic the session selector can show.

        They may select more (the caller filters by :meth:`session_paths`),
        never less.
        """
        out: list[Selector] = []
        for member in selector.members:
            prefix = member.path_prefix
            under = [(b, t) for b, t in self.mappings if paths.is_prefix(b, prefix) and prefix]
            if not under:
                out.append(member)  # some matches may resolve to themselves
            for session_branch, topic_branch in self.mappings:
                if prefix and paths.is_prefix(session_branch, prefix):
                    out.append(_translate(member, session_branch, topic_branch))
                elif paths.is_prefix(prefix, session_branch):
                    out.append(branch_selector(topic_branch))
        unique: list[Selector] = []
        for s in out:
            if s not in unique:
                unique.append(s)
        return unique


IDENTITY = Resolution()


@dataclass(frozen=True)
class SessionTrees:
    """Every branch mapping table, by session tree branch, with a version."""

    tables: Mapping[str, BranchMappingTable] = field(default_factory=dict)
    version: int = 0

    def put(self, table: BranchMappingTable) -> SessionTrees:
        """Replace the table for its branch; an empty table removes it."""
        tables = dict(self.tables)
        if table.mappings:
            tables[table.session_tree_branch] = table
        else:
            tables.pop(table.session_tree_branch, None)
        return SessionTrees(tables, self.version + 1)

    def remove(self, session_tree_branch: str) -> SessionTrees:
        tables = dict(self.tables)
        tables.pop(session_tree_branch, None)
        return SessionTrees(tables, self.version + 1)

    def relevant_keys(self) -> frozenset[str]:
        """The session property keys any filter reads (``$Roles`` for role tests)."""
        return frozenset().union(*(m.filter.keys() for t in self.tables.values() for m in t.mappings))

    def resolution_for(self, properties: Mapping[str, str], roles: frozenset[str]) -> Resolution:
        found = []
        for table in self.tables.values():
            target = table.applicable(properties, roles)
            if target is not None:
                found.append((table.session_tree_branch, target))
        found.sort(key=lambda pair: -_depth(pair[0]))
        return Resolution(tuple(found)) if found else IDENTITY

    def to_wire(self) -> list[Any]:
        return [self.version, [t.to_wire() for t in sorted(self.tables.values(), key=lambda t: t.session_tree_branch)]]

    @classmethod
    def from_wire(cls, data: Any) -> SessionTrees:
        version, tables = data
        built = [BranchMappingTable.from_wire(t) for t in tables]
        return cls({t.session_tree_branch: t for t in built}, int(version))


def group_key(
    relevant: frozenset[str], properties: Mapping[str, str], roles: frozenset[str]
) -> tuple[tuple[tuple[str, str | None], ...], frozenset[str]]:
    """What sessions must agree on to share a resolution (and permissions)."""
    return tuple(sorted((k, properties.get(k)) for k in relevant if k != ROLES_KEY)), roles
