"""Topic notifications: what a gateway's notification listeners hear of (pure).

A session's *notification listener* (numbered by its client) holds selectors and hears of
the topics they select: never a value, only the path and the specification, as a
:class:`Notification` of one of four :class:`NotificationType` s:

* ``SELECTED``: a topic that was there when a selector came to select it;
* ``ADDED``: a topic added since, that a selector selects;
* ``REMOVED``: a selected topic was removed;
* ``DESELECTED``: the topic is no longer selected, because a selector was taken away.

Only topics the session may READ_TOPIC (at the session path) give notifications.

A listener made with ``descendants`` also hears of the *immediate descendants* of every
path it selects (a bound topic or not) that it does not select: the first topic bound on
each branch below the path. With topics a/b, a/c, a/c/d and a/e/f/g and ``>a`` selected, they
are a/b, a/c and a/e/f/g; a/c/d is not (a/c is bound on its branch), nor would a/b/c be. A
descendant notification carries a path and a type, no specification: ``SELECTED`` and
``DESELECTED`` when the listener's selectors change, ``ADDED`` and ``REMOVED`` when the tree
does (a topic added between a selected path and a descendant takes the descendant's place:
the one is REMOVED, the other ADDED). Descendants are filtered by READ_TOPIC like topics: a
session learns no path it may not read; a topic it may not read still counts as the first
bound topic on its branch.

**Interest.** The book asks the partitions for *structure registrations*
(:attr:`topics.protocol.Register.structure`: topics added and removed, no values) and keeps
what they tell in a topic tree of specifications. Each listener selector needs the selector
itself (in topic space, :meth:`Lens.interest`) or, with descendants, the whole branch of its
path prefix; registrations are shared by every listener that needs the same topic-space
selector, sent on the first need and withdrawn after the last, with their own (negative)
tokens. Descendants are worked out once a listener's registrations are complete, so a
snapshot arriving piece by piece does not make descendants come and go.

**Session paths.** Notifications name session paths: every topic path maps to the session
paths that show it (:meth:`Lens.session_paths`, the session's branch mapping tables), a
listener's selectors match session paths, and READ_TOPIC is checked there; a topic path
that no session path shows is never told. The lens is asked at every event, so a session's
new roles or tables apply to what happens next; what was told before is not re-evaluated.

The driver sends the registrations the methods return, feeds the partitions' events to
:meth:`NotificationBook.on_events` (and :meth:`resync_begin` / :meth:`resync_end` around a
partition's restart) and delivers the notifications returned, in order.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

from sessions.requests import RequestError
from sessions.trees import branch_selector
from topics.protocol import Absent, End, Present, TopicEvent
from topics.selectors import Selector, parse_selector
from topics.specification import TopicSpecification
from topics.sublist import SubscriptionIndex
from topics.tree import TopicTree

__all__ = [
    "MAX_LISTENERS", "MAX_SELECTORS", "Lens", "Notification", "NotificationBook", "NotificationType",
    "Registration",
]

#: notification listeners one session may have
MAX_LISTENERS = 16
#: selectors one session's notification listeners may hold in all
MAX_SELECTORS = 100

#: a structure registration the driver must send: (topic-space selector, token)
Registration = tuple[Selector, int]


class NotificationType(enum.Enum):
    ADDED = "ADDED"
    SELECTED = "SELECTED"
    REMOVED = "REMOVED"
    DESELECTED = "DESELECTED"


@dataclass(frozen=True)
class Notification:
    """One notification for listener ``listener`` of session ``session_id``; a
    ``descendant`` notification has no ``specification``."""

    session_id: str
    listener: int
    type: NotificationType
    path: str
    specification: TopicSpecification | None = None
    descendant: bool = False


class Lens(Protocol):
    """How one session sees the topic tree (its group's resolution and permissions)."""

    def session_paths(self, topic_path: str) -> list[str]: ...

    def resolve(self, session_path: str) -> str: ...

    def interest(self, selector: Selector) -> list[Selector]: ...

    def can_read(self, session_path: str) -> bool: ...


class _Identity:
    """The lens of a session without tables that may read everything (tests)."""

    def session_paths(self, topic_path: str) -> list[str]:
        return [topic_path]

    def resolve(self, session_path: str) -> str:
        return session_path

    def interest(self, selector: Selector) -> list[Selector]:
        return [selector]

    def can_read(self, session_path: str) -> bool:
        return True


IDENTITY: Lens = _Identity()
_EVERYTHING = parse_selector("*.*")

ListenerKey = tuple[str, int]
LensOf = Callable[[str], "Lens | None"]


@dataclass(eq=False)
class _Listener:
    session_id: str
    id: int
    descendants: bool
    #: its selectors (session paths), in the order they came
    selectors: list[Selector] = field(default_factory=list)
    #: listener selector -> the topic-space selectors it needs
    owned: dict[Selector, list[Selector]] = field(default_factory=dict)
    #: session path -> topic path of every topic it was told is there
    topics: dict[str, str] = field(default_factory=dict)
    #: session paths it was told are immediate descendants
    below: set[str] = field(default_factory=set)

    @property
    def key(self) -> ListenerKey:
        return (self.session_id, self.id)

    def matches(self, session_path: str) -> bool:
        return any(s.matches(session_path) for s in self.selectors)


@dataclass(eq=False)
class _Interest:
    token: int
    outstanding: int  # END markers still expected
    owners: set[tuple[ListenerKey, Selector]] = field(default_factory=set)


class NotificationBook:
    """The notification listeners of one gateway's sessions and the structure they need.

    ``partitions_for(selector)`` says how many partitions a registration of that
    selector goes to (how many END markers complete it).
    """

    def __init__(
        self, partitions_for: Callable[[Selector], int] = lambda _: 1, *,
        max_listeners: int = MAX_LISTENERS, max_selectors: int = MAX_SELECTORS,
    ) -> None:
        self._partitions_for = partitions_for
        self.max_listeners = max_listeners
        self.max_selectors = max_selectors
        #: every topic some structure registration told of (specifications, no values)
        self.cache = TopicTree()
        self.listeners: dict[ListenerKey, _Listener] = {}
        self._by_session: dict[str, set[int]] = {}
        self.interest: dict[Selector, _Interest] = {}
        self._interest_index: SubscriptionIndex[Selector] = SubscriptionIndex()
        #: topic-space selector -> listeners needing it (which listeners a topic concerns)
        self._index: SubscriptionIndex[ListenerKey] = SubscriptionIndex()
        self._pending: dict[int, Selector] = {}
        self._tokens = itertools.count(-1, -1)  # the session registry's tokens are positive
        self._doubtful: set[str] = set()

    # -- listeners -------------------------------------------------------------------------

    def select(
        self, session_id: str, listener_id: int, selector: Selector, lens: Lens, *, descendants: bool = False,
    ) -> tuple[list[Notification], list[Registration], list[int]]:
        """Add ``selector`` to a listener (made by its first selector, with ``descendants``
        or not for good). Returns the notifications (SELECTED for topics known already),
        the registrations to send and the tokens whose snapshots the request should wait
        for. The caller checked SELECT_TOPIC on the selector's path prefix.
        :class:`~sessions.requests.RequestError`: ``LIMIT_EXCEEDED`` past a limit,
        ``INVALID_REQUEST`` for ``descendants`` other than the listener's."""
        key = (session_id, listener_id)
        listener = self.listeners.get(key)
        mine = self._by_session.get(session_id, set())
        if listener is None:
            if len(mine) >= self.max_listeners:
                raise RequestError("LIMIT_EXCEEDED", f"a session may have {self.max_listeners} notification listeners")
            listener = _Listener(session_id, listener_id, descendants)
        elif listener.descendants != descendants:
            raise RequestError(
                "INVALID_REQUEST",
                f"notification listener {listener_id} was made {'with' if listener.descendants else 'without'} "
                "descendant notifications",
            )
        if selector in listener.selectors:
            return [], [], self._waits(listener, selector)
        if sum(len(self.listeners[(session_id, i)].selectors) for i in mine) >= self.max_selectors:
            raise RequestError(
                "LIMIT_EXCEEDED", f"a session's notification listeners may hold {self.max_selectors} selectors in all"
            )
        if key not in self.listeners:
            self.listeners[key] = listener
            self._by_session.setdefault(session_id, set()).add(listener_id)
        before = set(listener.below)
        listener.selectors.append(selector)
        covered = _branch(selector.path_prefix) if descendants else selector
        wanted = listener.owned[selector] = lens.interest(covered)
        registrations = []
        for topic_selector in wanted:
            registrations += self._own(listener, selector, topic_selector)
        out: list[Notification] = []
        for topic_selector in wanted:
            for topic in self.cache.select(topic_selector):
                self._appeared(listener, topic.path, topic.specification, lens, NotificationType.SELECTED, out)
        self._settle(listener, lens, before, out)
        return out, registrations, self._waits(listener, selector)

    def deselect(
        self, session_id: str, listener_id: int, selector: Selector, lens: Lens,
    ) -> tuple[list[Notification], list[Selector]]:
        """Take ``selector`` from a listener: DESELECTED for what it no longer selects; the
        topic-space selectors to unregister. An unknown listener or selector changes nothing."""
        listener = self.listeners.get((session_id, listener_id))
        if listener is None or selector not in listener.selectors:
            return [], []
        before = set(listener.below)
        listener.selectors.remove(selector)
        out: list[Notification] = []
        for session_path, topic_path in list(listener.topics.items()):
            if not listener.matches(session_path):
                del listener.topics[session_path]
                topic = self.cache.get(topic_path)
                out.append(Notification(session_id, listener_id, NotificationType.DESELECTED, session_path,
                                        topic.specification if topic is not None else None))
        self._settle(listener, lens, before, out)
        return out, self._disown(listener, selector)

    def close(self, session_id: str, listener_id: int) -> list[Selector]:
        """Forget a listener (no notifications); the topic-space selectors to unregister."""
        listener = self.listeners.pop((session_id, listener_id), None)
        if listener is None:
            return []
        ids = self._by_session.get(session_id)
        if ids is not None:
            ids.discard(listener_id)
            if not ids:
                del self._by_session[session_id]
        out: list[Selector] = []
        for selector in list(listener.owned):
            out += self._disown(listener, selector)
        return out

    def close_session(self, session_id: str) -> list[Selector]:
        """Forget every listener of a session that ended."""
        out: list[Selector] = []
        for listener_id in list(self._by_session.get(session_id, ())):
            out += self.close(session_id, listener_id)
        return out

    def selectors(self, session_id: str, listener_id: int) -> list[Selector]:
        listener = self.listeners.get((session_id, listener_id))
        return list(listener.selectors) if listener is not None else []

    # -- partition events --------------------------------------------------------------------

    def on_events(self, events: Iterable[TopicEvent], lens_of: LensOf) -> tuple[list[Notification], list[int]]:
        """Apply one ordered batch from a partition (the structure events; others are
        ignored); return the notifications and the tokens whose registrations became
        complete."""
        out: list[Notification] = []
        live: list[int] = []
        for event in events:
            if type(event) is Present:
                self._present(event, lens_of, out)
            elif type(event) is Absent:
                self._absent(event.path, lens_of, out)
            elif type(event) is End:
                self._end(event.token, lens_of, live, out)
        return out, live

    def resync_begin(self, owned: Callable[[str], bool]) -> None:
        """A partition came back: its topics are in doubt until its snapshots tell of them again."""
        self._doubtful |= {path for path in self.cache.paths() if owned(path)}

    def resync_end(self, owned: Callable[[str], bool], lens_of: LensOf) -> list[Notification]:
        """The partition's registrations are back: the topics not told of again were removed."""
        gone = [path for path in self._doubtful if owned(path)]
        self._doubtful.difference_update(gone)
        out: list[Notification] = []
        for path in gone:
            self._absent(path, lens_of, out)
        return out

    def _present(self, event: Present, lens_of: LensOf, out: list[Notification]) -> None:
        path = event.path
        self._doubtful.discard(path)
        if not self._interest_index.match(path):
            return  # a registration withdrawn since
        spec = TopicSpecification.of(event.type, dict(event.properties))
        known = self.cache.get(path)
        if known is not None and known.specification != spec:
            self._absent(path, lens_of, out)
            known = None
        if known is None:
            self.cache.add(path, spec)
        kind = NotificationType.SELECTED if event.token else NotificationType.ADDED
        for key in self._index.match(path):
            listener = self.listeners.get(key)
            lens = lens_of(key[0]) if listener is not None else None
            if listener is None or lens is None:
                continue
            self._appeared(listener, path, spec, lens, kind, out)
            if known is None and listener.descendants and self._live(listener):
                self._rework(listener, path, lens, out)

    def _absent(self, path: str, lens_of: LensOf, out: list[Notification]) -> None:
        removed = self.cache.remove(path)
        if removed is None:
            return
        for key in self._index.match(path):
            listener = self.listeners.get(key)
            lens = lens_of(key[0]) if listener is not None else None
            if listener is None or lens is None:
                continue
            for session_path in lens.session_paths(path):
                if listener.topics.get(session_path) == path:
                    del listener.topics[session_path]
                    out.append(Notification(listener.session_id, listener.id, NotificationType.REMOVED, session_path,
                                            removed.specification))
            if listener.descendants and self._live(listener):
                self._rework(listener, path, lens, out)

    def _end(self, token: int, lens_of: LensOf, live: list[int], out: list[Notification]) -> None:
        selector = self._pending.get(token)
        if selector is None:
            return
        interest = self.interest[selector]
        interest.outstanding -= 1
        if interest.outstanding > 0:
            return
        del self._pending[token]
        live.append(token)
        for key in {owner for owner, _ in interest.owners}:
            listener = self.listeners.get(key)
            lens = lens_of(key[0]) if listener is not None else None
            if listener is not None and lens is not None and listener.descendants and self._live(listener):
                self._settle(listener, lens, None, out)

    # -- topics -----------------------------------------------------------------------------

    def _appeared(
        self, listener: _Listener, topic_path: str, spec: TopicSpecification, lens: Lens,
        kind: NotificationType, out: list[Notification],
    ) -> None:
        for session_path in lens.session_paths(topic_path):
            if session_path not in listener.topics and listener.matches(session_path) and lens.can_read(session_path):
                listener.topics[session_path] = topic_path
                out.append(Notification(listener.session_id, listener.id, kind, session_path, spec))

    # -- descendants ------------------------------------------------------------------------

    def _live(self, listener: _Listener) -> bool:
        """Whether every registration the listener needs has its snapshot complete."""
        return all(
            self.interest[s].outstanding <= 0 for wanted in listener.owned.values() for s in wanted if s in self.interest
        )

    def _settle(self, listener: _Listener, lens: Lens, before: set[str] | None, out: list[Notification]) -> None:
        """Work a listener's descendants out afresh (its selectors changed, or its
        registrations became complete): SELECTED for those it gains, DESELECTED for those it
        loses (compared with ``before``, or with what it was told)."""
        if not listener.descendants or not self._live(listener):
            return
        now: set[str] = set()
        for wanted in listener.owned.values():
            for topic_selector in wanted:
                for topic in self.cache.select(topic_selector):
                    for session_path in lens.session_paths(topic.path):
                        if session_path not in now and self._is_descendant(listener, session_path, lens):
                            now.add(session_path)
        told = listener.below if before is None else before
        for session_path in sorted(told - now):
            out.append(Notification(listener.session_id, listener.id, NotificationType.DESELECTED, session_path,
                                    descendant=True))
        for session_path in sorted(now - told):
            out.append(Notification(listener.session_id, listener.id, NotificationType.SELECTED, session_path,
                                    descendant=True))
        listener.below = now

    def _rework(self, listener: _Listener, topic_path: str, lens: Lens, out: list[Notification]) -> None:
        """The topic at ``topic_path`` came or went: the descendants it can change are its own
        session paths and the first bound topics below them."""
        affected: set[str] = set()
        for session_path in lens.session_paths(topic_path):
            affected.add(session_path)
            prefix = session_path + "/"
            for topic in self.cache.first_below(lens.resolve(session_path)):
                affected.update(p for p in lens.session_paths(topic.path) if p.startswith(prefix))
            affected.update(p for p in listener.below if p.startswith(prefix))
        for session_path in sorted(affected):
            now = self._bound(session_path, lens) and self._is_descendant(listener, session_path, lens)
            if now and session_path not in listener.below:
                listener.below.add(session_path)
                out.append(Notification(listener.session_id, listener.id, NotificationType.ADDED, session_path,
                                        descendant=True))
            elif not now and session_path in listener.below:
                listener.below.discard(session_path)
                out.append(Notification(listener.session_id, listener.id, NotificationType.REMOVED, session_path,
                                        descendant=True))

    def _bound(self, session_path: str, lens: Lens) -> bool:
        return lens.resolve(session_path) in self.cache

    def _is_descendant(self, listener: _Listener, session_path: str, lens: Lens) -> bool:
        """Whether the bound ``session_path`` is an unselected immediate descendant of a path
        the listener selects, that the session may read."""
        if listener.matches(session_path) or not lens.can_read(session_path):
            return False
        ancestor = session_path
        while True:
            cut = ancestor.rfind("/")
            if cut < 0:
                return False
            ancestor = ancestor[:cut]
            if listener.matches(ancestor):
                return True
            if self._bound(ancestor, lens):
                return False

    # -- interest ---------------------------------------------------------------------------

    def _own(self, listener: _Listener, selector: Selector, topic_selector: Selector) -> list[Registration]:
        interest = self.interest.get(topic_selector)
        out: list[Registration] = []
        if interest is None:
            token = next(self._tokens)
            interest = self.interest[topic_selector] = _Interest(token, self._partitions_for(topic_selector))
            self._pending[token] = topic_selector
            self._interest_index.add(topic_selector, topic_selector)
            out.append((topic_selector, token))
        interest.owners.add((listener.key, selector))
        self._index.add(topic_selector, listener.key)
        return out

    def _disown(self, listener: _Listener, selector: Selector) -> list[Selector]:
        out: list[Selector] = []
        for topic_selector in listener.owned.pop(selector, ()):
            if not any(topic_selector in wanted for wanted in listener.owned.values()):
                self._index.remove(topic_selector, listener.key)
            interest = self.interest.get(topic_selector)
            if interest is None:
                continue
            interest.owners.discard((listener.key, selector))
            if interest.owners:
                continue
            del self.interest[topic_selector]
            self._pending.pop(interest.token, None)
            self._interest_index.remove(topic_selector, topic_selector)
            out.append(topic_selector)
            for topic in list(self.cache.select(topic_selector)):
                if not self._interest_index.match(topic.path):
                    self.cache.remove(topic.path)
                    self._doubtful.discard(topic.path)
        return out

    def _waits(self, listener: _Listener, selector: Selector) -> list[int]:
        tokens = []
        for topic_selector in listener.owned.get(selector, ()):
            interest = self.interest.get(topic_selector)
            if interest is not None and interest.outstanding > 0:
                tokens.append(interest.token)
        return tokens


def _branch(prefix: str) -> Selector:
    """The branch of a path prefix (the whole tree for the root)."""
    return branch_selector(prefix) if prefix else _EVERYTHING
