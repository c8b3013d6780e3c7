"""The topic tree: topics by path, selectable by selector.

:class:`TopicTree` keeps every topic twice over: in a dict by path (O(1)
``get``) and in a trie of path segments, which is what :meth:`select`
walks. A path selector is one dict lookup; a split-path pattern descends the
trie one segment at a time, following literal segments directly and testing
regular expressions only against the children of the nodes it reached; a
full-path pattern walks to the node of its path prefix and tests the topics
below it. Intermediate trie nodes exist only while some topic lies below
them.

Values are stored as bytes (see :mod:`topics.types`) and checked against the
topic's type when set; TIME_SERIES topics hold an
:class:`~topics.timeseries.EventLog` instead of a value.
"""

from __future__ import annotations

from collections.abc import Iterator

from topics import paths
from topics import types as values
from topics.errors import InvalidValueError, TopicConflictError
from topics.selectors import (
    FullPathSelector,
    Selector,
    SelectorSet,
    SplitPathSelector,
    parse_selector,
)
from topics.specification import TopicSpecification
from topics.timeseries import EventLog
from topics.types import TopicType

__all__ = ["Topic", "TopicTree"]


class Topic:
    """A topic: its path, specification and current value (or event log)."""

    __slots__ = ("path", "specification", "value", "log")

    def __init__(self, path: str, specification: TopicSpecification) -> None:
        self.path = path
        self.specification = specification
        self.value: bytes | None = None
        self.log: EventLog | None = (
            EventLog(specification.retained_range)
            if specification.type is TopicType.TIME_SERIES
            else None
        )

    @property
    def type(self) -> TopicType:
        return self.specification.type

    def __repr__(self) -> str:
        return f"Topic({self.path!r}, {self.specification})"


class _Node:
    """An interior trie node. A topic with nothing below it is stored in its
    parent's ``children`` directly, without a node (most topics are leaves,
    and a node per leaf would cost ~60 bytes a topic)."""

    __slots__ = ("children", "topic")

    def __init__(self, topic: Topic | None = None) -> None:
        self.children: dict[str, _Node | Topic] = {}
        self.topic: Topic | None = topic


def _topic_of(entry: _Node | Topic) -> Topic | None:
    return entry if isinstance(entry, Topic) else entry.topic


class TopicTree:
    """Topics by path, with selection by :class:`~topics.selectors.Selector`."""

    def __init__(self) -> None:
        self._root = _Node()
        self._topics: dict[str, Topic] = {}

    # -- lookup ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._topics)

    def __contains__(self, path: object) -> bool:
        return path in self._topics

    def __iter__(self) -> Iterator[Topic]:
        return iter(self._topics.values())

    def get(self, path: str) -> Topic | None:
        return self._topics.get(path)

    def paths(self) -> Iterator[str]:
        return iter(self._topics)

    # -- changes -----------------------------------------------------------

    def add(self, path: str, specification: TopicSpecification) -> tuple[Topic, bool]:
        """Bind ``path`` to a new topic; return ``(topic, created)``.

        Adding a path that exists with an equal specification returns the
        existing topic and ``False``; a different specification raises
        :class:`TopicConflictError`.
        """
        path = paths.normalise(path)
        existing = self._topics.get(path)
        if existing is not None:
            if existing.specification == specification:
                return existing, False
            raise TopicConflictError(path, existing.specification, specification)
        node = self._root
        *inner, last = path.split("/")
        for segment in inner:
            child = node.children.get(segment)
            if child is None:
                child = node.children[segment] = _Node()
            elif isinstance(child, Topic):
                child = node.children[segment] = _Node(child)
            node = child
        topic = Topic(path, specification)
        existing_node = node.children.get(last)
        if existing_node is None:
            node.children[last] = topic
        else:
            assert isinstance(existing_node, _Node) and existing_node.topic is None
            existing_node.topic = topic
        self._topics[path] = topic
        return topic, True

    def set_value(self, path: str, data: bytes, *, check: bool = True) -> Topic:
        """Replace the value of the topic at ``path`` (which must exist).

        With ``check`` the bytes are validated against the topic type first,
        so a bad value never replaces a good one.
        """
        topic = self._topics.get(path)
        if topic is None:
            raise KeyError(path)
        if topic.log is not None:
            raise InvalidValueError(
                f"{path!r} is a TIME_SERIES topic: append events instead of setting a value"
            )
        if check:
            data = values.validate(topic.specification.type, data)
        topic.value = data
        return topic

    def remove(self, path: str) -> Topic | None:
        """Unbind ``path``; descendants stay. Returns the removed topic, if any."""
        topic = self._topics.pop(path, None)
        if topic is None:
            return None
        trail: list[tuple[_Node, str]] = []
        node = self._root
        *inner, last = path.split("/")
        for segment in inner:
            trail.append((node, segment))
            child = node.children[segment]
            assert isinstance(child, _Node)
            node = child
        entry = node.children[last]
        if isinstance(entry, Topic):
            del node.children[last]
        elif entry.children:
            entry.topic = None
        else:
            del node.children[last]
        # prune nodes that no longer lead to any topic; a node left with only
        # its own topic becomes a leaf entry again
        while trail and not node.children:
            parent, segment = trail.pop()
            if node.topic is None:
                del parent.children[segment]
            else:
                parent.children[segment] = node.topic
            node = parent
        return topic

    def remove_selected(self, selector: Selector | str) -> list[Topic]:
        """Remove every topic the selector selects and return them."""
        chosen = list(self.select(selector))
        for topic in chosen:
            self.remove(topic.path)
        return chosen

    # -- selection ---------------------------------------------------------

    def select(self, selector: Selector | str) -> Iterator[Topic]:
        """Every topic the selector selects, each once (in no particular order)."""
        sel = parse_selector(selector)
        if isinstance(sel, SelectorSet):
            seen: set[str] = set()
            for member in sel.selectors:
                for topic in self._select_one(member):
                    if topic.path not in seen:
                        seen.add(topic.path)
                        yield topic
        else:
            yield from self._select_one(sel)

    def descendants(self, path: str) -> Iterator[Topic]:
        """Topics strictly below ``path`` (``""`` for every topic)."""
        node = self._node(path)
        if node is not None:
            yield from _subtree(node, include_self=False)

    def first_below(self, path: str) -> Iterator[Topic]:
        """The first topic on each branch strictly below ``path`` (``""``: the root): for
        topics a/b, a/c, a/c/d and a/e/f/g, those below a are a/b, a/c and a/e/f/g."""
        node = self._node(path)
        if node is None or isinstance(node, Topic):
            return
        stack = [node]
        while stack:
            for child in stack.pop().children.values():
                if isinstance(child, Topic):
                    yield child
                elif child.topic is not None:
                    yield child.topic
                else:
                    stack.append(child)

    def _node(self, path: str) -> _Node | Topic | None:
        node: _Node | Topic = self._root
        if path:
            for segment in path.split("/"):
                if isinstance(node, Topic):
                    return None
                child = node.children.get(segment)
                if child is None:
                    return None
                node = child
        return node

    def _select_one(self, sel: Selector) -> Iterator[Topic]:
        literal = sel.literal_path
        if literal is not None:
            topic = self._topics.get(literal)
            if topic is not None:
                yield topic
            return
        if isinstance(sel, SplitPathSelector):
            yield from self._select_split(sel)
        elif isinstance(sel, FullPathSelector):
            node = self._node(sel.path_prefix)
            if node is not None:
                for topic in _subtree(node, include_self=True):
                    if sel.matches(topic.path):
                        yield topic

    def _select_split(self, sel: SplitPathSelector) -> Iterator[Topic]:
        n = len(sel.regexes)
        qualifier = sel.qualifier
        stack: list[tuple[_Node | Topic, int]] = [(self._root, 0)]
        while stack:
            node, d = stack.pop()
            if d == n:
                if qualifier.includes_self:
                    topic = _topic_of(node)
                    if topic is not None:
                        yield topic
                if qualifier.includes_descendants:
                    yield from _subtree(node, include_self=False)
                continue
            if isinstance(node, Topic):
                continue
            children = node.children
            literal = sel.literals[d]
            if literal is not None:
                child = children.get(literal)
                if child is not None:
                    stack.append((child, d + 1))
            else:
                fullmatch = sel.regexes[d].fullmatch
                for segment, child in children.items():
                    if fullmatch(segment) is not None:
                        stack.append((child, d + 1))


def _subtree(node: _Node | Topic, *, include_self: bool) -> Iterator[Topic]:
    if isinstance(node, Topic):
        if include_self:
            yield node
        return
    if include_self and node.topic is not None:
        yield node.topic
    stack = [node]
    while stack:
        current = stack.pop()
        for child in current.children.values():
            if isinstance(child, Topic):
                yield child
            else:
                if child.topic is not None:
                    yield child.topic
                stack.append(child)
