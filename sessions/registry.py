"""The sessions of one gateway and the fan-out of topic events to them.

A gateway hosts many client sessions; :class:`SessionRegistry` is the
bookkeeping behind them, free of I/O so that it can be tested on its own.

**Groups.** Sessions that agree on their roles and on every property the
branch mapping tables' filters read form a *group*: they share one
:class:`~sessions.trees.Resolution` (session path ↔ topic path), one
permission cache and one index of their selectors (session paths). 10,000
sessions in 10 groups cost 10 resolutions, not 10,000.

**Interest.** For each selector a group uses, the resolution names the
*topic-space* selectors that cover what it can show (the selector itself
when nothing is mapped). The gateway registers each distinct topic-space
selector with the partitions once (:attr:`SessionRegistry.interest`) and
unregisters it when no group needs it; the partitions' snapshots and updates
fill a cache of topics (:attr:`cache`).

**Views.** A topic is shown to a session at a *session path*; a topic may
show at several (two tables mapping to one branch). Each (topic, session
path) pair is a *view* with its own alias, and each update becomes one
:mod:`~sessions.deliveries` value per view, queued (the same object) for
every session subscribed to it (:class:`~sessions.queue.OutboundQueue`,
CONFLATION policies). The registry knows no wire format: the driver turns
deliveries into protocol messages as it writes them.

A session is subscribed to a view when one of its selectors matches the
session path and it may READ_TOPIC there (permissions are checked on session
paths only; SELECT_TOPIC on a selector's path prefix is checked when it is
subscribed). Changes to the tables, to a session's properties, or to the
security store re-evaluate the affected sessions: views they no longer have
are unsubscribed (reason ``BRANCH_MAPPINGS`` or ``AUTHORIZATION``) and new
ones subscribed, without the client doing anything. Other reasons:
``REQUESTED``, ``REMOVED``, ``BACK_PRESSURE`` (see the queue). The values
still queued for a view it leaves go out before its ``Unsubscribed``, unless
the topic has TIDY_ON_UNSUBSCRIBE ``true`` (or back pressure is the reason):
then they are dropped from the queue. A topic's PRIORITY is the lane of the
queue its values and notifications go in.

The driver (the gateway actor) sends the registrations these methods return
to the partitions, feeds partition events (:mod:`topics.protocol`) to
:meth:`on_events`, and drains :meth:`take_dirty` and :meth:`take_closing` to
wake writers and end sessions.

**Connections come and go.** The registry knows nothing of them: a session
whose connection dropped stays registered, subscribed and queued for (its
byte budget still applies) until the driver closes it. When the driver gives
the session a new connection, :meth:`refresh` drops what was queued for the
old one (messages that may or may not have reached the client) and queues
the session's current state instead.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sessions.deliveries import SeriesUpdate, Subscribed, Unsubscribed, Update
from sessions.filters import ROLES_KEY
from sessions.limits import Limits
from sessions.queue import Outcome, OutboundQueue
from sessions.security import PathPermission, PermissionDenied, SecurityStore
from sessions.trees import Resolution, SessionTrees, group_key
from topics.errors import SpecificationError
from topics.owner import parse_owner
from topics.properties import OWNER, Conflation, Priority
from topics.selectors import Selector
from topics.specification import TopicSpecification
from topics.protocol import Added, Appended, Changed, End, Removed, Snapshot, TopicEvent
from topics.sublist import SubscriptionIndex
from topics.timeseries import DEFAULT_SUBSCRIPTION_RANGE, EventWindow
from topics.tree import TopicTree

REQUESTED, REMOVED, BACK_PRESSURE = "REQUESTED", "REMOVED", "BACK_PRESSURE"
_QUEUED = Outcome.QUEUED
AUTHORIZATION, BRANCH_MAPPINGS = "AUTHORIZATION", "BRANCH_MAPPINGS"

#: a registration the driver must send: (topic-space selector, token)
Registration = tuple[Selector, int]


def roles_text(roles: Iterable[str]) -> str:
    """``$Roles`` as the reference system writes it: ``"A","B"``."""
    return ",".join(f'"{r}"' for r in sorted(roles))


@dataclass(eq=False)
class Session:
    id: str
    principal: str
    properties: dict[str, str]
    roles: frozenset[str]
    queue: OutboundQueue
    group: Group | None = None
    selectors: set[Selector] = field(default_factory=set)
    #: session path -> (alias, topic path) of every view the session is subscribed to
    views: dict[str, tuple[int, str]] = field(default_factory=dict)
    #: session paths it was unsubscribed from by back pressure
    suppressed: set[str] = field(default_factory=set)


_group_serials = itertools.count(1)


@dataclass(eq=False)
class Group:
    key: Any
    roles: frozenset[str]
    resolution: Resolution
    serial: int = field(default_factory=lambda: next(_group_serials))
    sessions: set[str] = field(default_factory=set)
    #: session selectors -> sessions of this group using them
    index: SubscriptionIndex[str] = field(default_factory=SubscriptionIndex)
    #: session selector -> the topic-space selectors it needs
    owned: dict[Selector, list[Selector]] = field(default_factory=dict)
    _paths: dict[str, list[str]] = field(default_factory=dict)
    _read: dict[str, bool] = field(default_factory=dict)

    def session_paths(self, topic_path: str) -> list[str]:
        found = self._paths.get(topic_path)
        if found is None:
            if len(self._paths) > 200_000:
                self._paths.clear()
            found = self._paths[topic_path] = self.resolution.session_paths(topic_path)
        return found


@dataclass(eq=False)
class _View:
    alias: int
    session_path: str
    type: str
    properties: list[list[str]]
    sessions: set[str] = field(default_factory=set)

    def subscribed(self, value: bytes | None, attributes: bytes = b"") -> Subscribed:
        return Subscribed(self.alias, self.session_path, self.type, self.properties, value, attributes)


@dataclass(eq=False)
class _TopicState:
    path: str
    spec: TopicSpecification
    policy: Conflation
    #: the queue lane of its messages: None for PRIORITY default (the common case)
    priority: Priority | None = None
    views: dict[str, _View] = field(default_factory=dict)
    #: a TIME_SERIES topic's newest events, what a new subscriber gets first
    window: EventWindow | None = None


@dataclass(eq=False)
class _Interest:
    token: int
    outstanding: int  # END markers still expected from partitions
    owners: set[tuple[int, Selector]] = field(default_factory=set)


def _open_store() -> SecurityStore:
    """Every permission for everyone: the registry on its own, in tests."""
    from sessions.security import GlobalPermission

    return SecurityStore().apply(
        [
            ["set_global_permissions", "ALL", [p.value for p in GlobalPermission]],
            ["set_default_path_permissions", "ALL", [p.value for p in PathPermission]],
            ["set_anonymous", True, ["ALL"]],
        ]
    )


class SessionRegistry:
    """Sessions, groups, interest, the topic cache and the views of one gateway.

    ``partitions_for(selector)`` says how many partitions a registration of
    that selector goes to (how many END markers complete it).
    """

    def __init__(
        self,
        queue_limit: int = 10_000,
        backpressure: int = 1_000,
        *,
        security: SecurityStore | None = None,
        trees: SessionTrees | None = None,
        partitions_for: Callable[[Selector], int] = lambda _: 1,
        session_buffer: int | None = None,
        limits: Limits | None = None,
        partition_of: Callable[[str], int] = lambda _: 0,
    ) -> None:
        self.queue_limit = queue_limit
        #: what a request may name; the request checks read it
        self.limits = limits or Limits()
        self.session_buffer = session_buffer
        self.backpressure = backpressure
        self.security = security or _open_store()
        self.permissions = self.security.evaluator()
        self.trees = trees or SessionTrees()
        self._relevant = self.trees.relevant_keys()
        self._partitions_for = partitions_for
        #: the partition of a topic path
        self.partition_of = partition_of
        self.sessions: dict[str, Session] = {}
        self.groups: dict[Any, Group] = {}
        self.cache = TopicTree()
        self._topics: dict[str, _TopicState] = {}
        #: topic path -> the principal its OWNER names, for the topics that have one: that
        #: principal's sessions read the topic whatever their roles (:mod:`topics.owner`)
        self._owners: dict[str, str] = {}
        self.interest: dict[Selector, _Interest] = {}
        self._interest_index: SubscriptionIndex[Selector] = SubscriptionIndex()
        self._pending: dict[int, Selector] = {}
        self._tokens = itertools.count(1)
        self._aliases = itertools.count(1)
        self._specs: dict[tuple[str, tuple[tuple[str, str], ...]], TopicSpecification] = {}
        self._dirty: set[str] = set()
        self._closing: dict[str, tuple[str, str]] = {}
        #: topics of a restarted partition not seen again yet (see resync_begin)
        self._doubtful: set[str] = set()
        #: topic path -> what its cached value was published with (see Subscribed.attributes)
        self.attributes: dict[str, bytes] = {}
        #: where the events being applied come from (see :meth:`set_mark`)
        self.mark: tuple[int, int] | None = None
        #: session -> partitions whose messages it takes from their recent messages instead
        #: (:meth:`hold`); partition -> those sessions; the sessions held for the partition
        #: of the events being applied (the set itself: a release shows at once)
        self._held: dict[str, set[int]] = {}
        self._held_by: dict[int, set[str]] = {}
        self._skip: frozenset[str] | set[str] = frozenset()
        #: session -> the topics of held partitions whose current value it was not sent
        self._withheld: dict[str, set[str]] = {}
        #: values and time series events offered to the sessions (one per session subscribed;
        #: conflation may merge some before they are written), since the registry was made
        self.updates_delivered = 0

    # -- groups -------------------------------------------------------------------

    def _group_of(self, session: Session, pool: dict[Any, Group] | None = None) -> Group:
        pool = self.groups if pool is None else pool
        props = {**session.properties, ROLES_KEY: roles_text(session.roles)}
        key = group_key(self._relevant, props, session.roles)
        group = pool.get(key)
        if group is None:
            group = pool[key] = Group(key, session.roles, self.trees.resolution_for(props, session.roles))
        return group

    def can_read(self, group: Group, session_path: str) -> bool:
        found = group._read.get(session_path)
        if found is None:
            if len(group._read) > 200_000:
                group._read.clear()
            found = group._read[session_path] = self.permissions.has(
                group.roles, PathPermission.READ_TOPIC, session_path
            )
        return found

    def _own(self, group: Group, selector: Selector) -> list[Registration]:
        """Record that ``group`` needs ``selector``'s interest; return new registrations."""
        owner = (group.serial, selector)
        wanted = group.owned.get(selector)
        if wanted is None:
            wanted = group.owned[selector] = group.resolution.interest(selector)
        out = []
        for topic_selector in wanted:
            interest = self.interest.get(topic_selector)
            if interest is None:
                token = next(self._tokens)
                interest = self.interest[topic_selector] = _Interest(token, self._partitions_for(topic_selector))
                self._pending[token] = topic_selector
                self._interest_index.add(topic_selector, topic_selector)
                out.append((topic_selector, token))
            interest.owners.add(owner)
        return out

    def _disown(self, group: Group, selector: Selector) -> list[Selector]:
        """``group`` no longer needs ``selector``; return topic selectors to unregister."""
        owner = (group.serial, selector)
        out = []
        for topic_selector in group.owned.pop(selector, ()):
            interest = self.interest.get(topic_selector)
            if interest is None:
                continue
            interest.owners.discard(owner)
            if not interest.owners:
                del self.interest[topic_selector]
                self._pending.pop(interest.token, None)
                self._interest_index.remove(topic_selector, topic_selector)
                out.append(topic_selector)
                for topic in list(self.cache.select(topic_selector)):
                    if not self._interest_index.match(topic.path):
                        self._drop_topic(topic.path)
        return out

    def pending_tokens(self, session_id: str, selector: Selector) -> list[int]:
        """The registrations a session's selector still waits for."""
        session = self.sessions.get(session_id)
        if session is None or session.group is None:
            return []
        tokens = []
        for topic_selector in session.group.owned.get(selector, ()):
            interest = self.interest.get(topic_selector)
            if interest is not None and interest.outstanding > 0:
                tokens.append(interest.token)
        return tokens

    def is_live(self, token: int) -> bool:
        return token not in self._pending

    # -- sessions -----------------------------------------------------------------

    def open(
        self, session_id: str, principal: str, properties: dict[str, str], roles: frozenset[str] | None = None
    ) -> Session:
        """Register a session; without ``roles`` it gets the store's anonymous roles."""
        if roles is None:
            roles = self.security.anonymous_roles
        props = dict(properties)
        props["$Roles"] = roles_text(roles)
        session = Session(session_id, principal, props, roles, self._new_queue())
        group = self._group_of(session)
        group.sessions.add(session_id)
        session.group = group
        self.sessions[session_id] = session
        return session

    def _new_queue(self) -> OutboundQueue:
        return OutboundQueue(self.queue_limit, self.backpressure, self.session_buffer)

    def refresh(self, session_id: str) -> int | None:
        """Start a session's outbound stream afresh, for a new connection.

        Everything queued for the session is dropped (values, notifications,
        answers alike); queued instead, in its place, is one
        :class:`~sessions.deliveries.Subscribed` per view the session is
        subscribed to, with the view's alias and the topic's current value
        (a TIME_SERIES view's followed by the events of its window). Returns
        how many deliveries were queued (Subscribed and events), or ``None``
        when the session is unknown or already being closed (over its budget):
        it cannot be resumed.
        """
        session = self.sessions.get(session_id)
        if session is None or session_id in self._closing:
            return None
        session.queue = self._new_queue()
        count = 0
        for session_path, (alias, topic_path) in session.views.items():
            state = self._topics.get(topic_path)
            view = state.views.get(session_path) if state is not None else None
            if state is None or view is None or view.alias != alias:
                continue  # cannot happen: a view goes from session.views when its topic goes
            topic = self.cache.get(topic_path)
            value = topic.value if topic is not None else None
            self._control(session, view.subscribed(value, self.attributes.get(topic_path, b"") if value else b""),
                          state.priority)
            count += 1
            if state.window is not None:
                for event in state.window.events():
                    self._control(session, SeriesUpdate(alias, event), state.priority)
                    count += 1
        self._dirty.add(session_id)
        return count

    def close(self, session_id: str) -> list[Selector]:
        """Forget a session; return the topic selectors to unregister."""
        session = self.sessions.pop(session_id, None)
        self._dirty.discard(session_id)
        self._closing.pop(session_id, None)
        for partition in self._held.pop(session_id, ()):
            sessions = self._held_by.get(partition)
            if sessions is not None:
                sessions.discard(session_id)
                if not sessions:
                    del self._held_by[partition]
        self._withheld.pop(session_id, None)
        if session is None or session.group is None:
            return []
        for session_path in list(session.views):
            self._drop_view(session, session_path)
        group = session.group
        unregister = []
        for selector in session.selectors:
            if group.index.remove(selector, session_id):
                unregister += self._disown(group, selector)
        group.sessions.discard(session_id)
        if not group.sessions and self.groups.get(group.key) is group:
            del self.groups[group.key]
        return unregister

    def send(self, session_id: str, message: object) -> None:
        """Queue a control message (a response, an error) for a session; it
        leaves in order with the session's deliveries."""
        session = self.sessions.get(session_id)
        if session is not None:
            self._control(session, message)

    def _control(self, session: Session, message: object, priority: Priority | None = None) -> None:
        """Queue a control message (about a topic of ``priority``); a session over its byte
        budget is closed."""
        if not session.queue.push_control(message, priority):
            self._overflowed(session, "")
        self._dirty.add(session.id)

    def _overflowed(self, session: Session, detail: str) -> None:
        if session.id not in self._closing:
            self._closing[session.id] = (
                "QUEUE_LIMIT", f"{session.queue.overflow_reason()} for a session that is not reading them{detail}"
            )

    def take_dirty(self) -> set[str]:
        dirty, self._dirty = self._dirty, set()
        return dirty

    def take_closing(self) -> dict[str, tuple[str, str]]:
        closing, self._closing = self._closing, {}
        return closing

    # -- subscriptions ------------------------------------------------------------------

    def subscribe(
        self, session_id: str, selector: Selector, *, controlled: bool = False
    ) -> tuple[list[Registration], list[int]]:
        """Add a selector to a session.

        Returns the registrations the driver must send and the tokens the
        subscription must wait for. Raises :class:`PermissionDenied` without
        SELECT_TOPIC on the selector's path prefix, unless the subscription is
        ``controlled``: made by another session, which was checked instead
        (READ_TOPIC still decides what this one receives).
        """
        session = self.sessions[session_id]
        group = session.group
        assert group is not None
        if not controlled:
            self.permissions.check(group.roles, PathPermission.SELECT_TOPIC, selector.path_prefix)
        session.selectors.add(selector)
        if session.suppressed:
            session.suppressed = {p for p in session.suppressed if not selector.matches(p)}
        group.index.add(selector, session_id)
        registrations = self._own(group, selector)
        for session_path, topic_path in self._desired(group, selector).items():
            self._subscribe_view(session, session_path, topic_path)
        for session_path, topic_path in self._owned_views(session, group, selector).items():
            self._subscribe_view(session, session_path, topic_path)
        return registrations, self.pending_tokens(session_id, selector)

    def unsubscribe(self, session_id: str, selector: Selector) -> list[Selector]:
        """Remove a selector from a session; return topic selectors to unregister."""
        session = self.sessions.get(session_id)
        if session is None or session.group is None or selector not in session.selectors:
            return []
        group = session.group
        session.selectors.discard(selector)
        for session_path in [p for p in session.views if selector.matches(p)]:
            if not any(s.matches(session_path) for s in session.selectors):
                self._unsubscribe_view(session, session_path, REQUESTED)
        if group.index.remove(selector, session_id):
            return self._disown(group, selector)
        return []

    def _desired(self, group: Group, selector: Selector) -> dict[str, str]:
        """Session path -> topic path of every cached topic ``selector`` shows the group."""
        out: dict[str, str] = {}
        for topic_selector in group.owned.get(selector, ()):
            for topic in self.cache.select(topic_selector):
                for session_path in group.session_paths(topic.path):
                    if selector.matches(session_path) and self.can_read(group, session_path):
                        out[session_path] = topic.path
        return out

    def _owned_views(self, session: Session, group: Group, selector: Selector) -> dict[str, str]:
        """Session path -> topic path of the cached topics ``selector`` shows ``session`` only
        because their OWNER is its principal."""
        out: dict[str, str] = {}
        if self._owners and session.principal:
            for path, owner in self._owners.items():
                if owner == session.principal:
                    for session_path in group.session_paths(path):
                        if selector.matches(session_path) and not self.can_read(group, session_path):
                            out[session_path] = path
        return out

    def owns(self, session_id: str, topic_path: str) -> bool:
        """Whether the topic's OWNER names the session's principal."""
        owner = self._owners.get(topic_path)
        return owner is not None and owner == self.sessions[session_id].principal

    def resolve(self, session_id: str, session_path: str) -> str:
        """The topic path a session sees at ``session_path``."""
        group = self.sessions[session_id].group
        assert group is not None
        return group.resolution.resolve(session_path)

    def visible(self, session_id: str, selector: Selector, topic_path: str) -> list[str]:
        """The session paths at which ``selector`` shows this session the topic (fetch)."""
        group = self.sessions[session_id].group
        assert group is not None
        owner = self.owns(session_id, topic_path)
        return [
            p for p in group.session_paths(topic_path)
            if selector.matches(p) and (owner or self.can_read(group, p))
        ]

    def fetch_plan(self, session_id: str, selector: Selector) -> list[Selector]:
        """The topic selectors a fetch over ``selector`` must read (SELECT_TOPIC checked)."""
        group = self.sessions[session_id].group
        assert group is not None
        self.permissions.check(group.roles, PathPermission.SELECT_TOPIC, selector.path_prefix)
        return group.resolution.interest(selector)

    def check(self, session_id: str, permission: Any, path: str | None = None) -> None:
        """Raise :class:`PermissionDenied` unless the session has the permission."""
        session = self.sessions[session_id]
        self.permissions.check(session.roles, permission, path)

    def has(self, session_id: str, permission: Any, path: str | None = None) -> bool:
        return self.permissions.has(self.sessions[session_id].roles, permission, path)

    # -- re-evaluation ------------------------------------------------------------------

    def set_trees(self, trees: SessionTrees) -> tuple[list[Registration], list[Selector]]:
        """New branch mapping tables: regroup and re-evaluate every session."""
        if trees.version <= self.trees.version and self.trees.tables:
            return [], []
        relevant = trees.relevant_keys()
        if relevant == self._relevant and all(
            trees.resolution_for(self._representative(g), g.roles) == g.resolution
            for g in self.groups.values()
            if g.sessions
        ):
            self.trees = trees  # no session's resolution changes: nothing to re-evaluate
            return [], []
        self.trees = trees
        self._relevant = relevant
        return self._regroup(list(self.sessions.values()), BRANCH_MAPPINGS)

    def _representative(self, group: Group) -> dict[str, str]:
        """The properties a group's filters see (any member's will do)."""
        session = self.sessions[next(iter(group.sessions))]
        return {**session.properties, ROLES_KEY: roles_text(session.roles)}

    def set_security(self, store: SecurityStore) -> tuple[list[Registration], list[Selector]]:
        """A new security store: permissions change for every session."""
        if store.version <= self.security.version:
            return [], []
        self.security = store
        self.permissions = store.evaluator()
        return self._regroup(list(self.sessions.values()), AUTHORIZATION)

    def set_properties(
        self, session_id: str, changes: Mapping[str, str | None]
    ) -> tuple[list[Registration], list[Selector]]:
        """Change a session's user properties (``None`` removes one) and re-evaluate it."""
        session = self.sessions[session_id]
        for key, value in changes.items():
            if value is None:
                session.properties.pop(key, None)
            else:
                session.properties[key] = value
        return self._regroup([session], BRANCH_MAPPINGS, rebuild=False)

    def set_roles(self, session_id: str, roles: frozenset[str]) -> tuple[list[Registration], list[Selector]]:
        """Give a session other roles (``$Roles`` follows) and re-evaluate it at once: views it
        may no longer read are unsubscribed (``AUTHORIZATION``), views it now may are subscribed,
        and its later requests are checked against the new roles."""
        session = self.sessions[session_id]
        session.roles = frozenset(roles)
        session.properties["$Roles"] = roles_text(session.roles)
        return self._regroup([session], AUTHORIZATION, rebuild=False)

    def _regroup(
        self, sessions: list[Session], reason: str, *, rebuild: bool = True
    ) -> tuple[list[Registration], list[Selector]]:
        """Move sessions to the groups their properties now call for and
        re-evaluate their views. With ``rebuild`` every group is made afresh
        (the tables or the permissions changed); without it existing groups
        are reused (one session's properties changed)."""
        pool: dict[Any, Group] = {} if rebuild else self.groups
        moves = []
        for session in sessions:
            new = self._group_of(session, pool)
            if new is not session.group:
                moves.append((session, session.group, new))
        # own the new interests before dropping any old one, so shared ones stay
        registrations: list[Registration] = []
        for session, _old, new in moves:
            new.sessions.add(session.id)
            for selector in session.selectors:
                registrations += self._own(new, selector)
                new.index.add(selector, session.id)
        desired_cache: dict[tuple[int, Selector], dict[str, str]] = {}
        for session, _old, new in moves:
            session.group = new
            desired: dict[str, str] = {}
            for selector in session.selectors:
                key = (new.serial, selector)
                if key not in desired_cache:
                    desired_cache[key] = self._desired(new, selector)
                desired.update(desired_cache[key])
                desired.update(self._owned_views(session, new, selector))
            self._sync(session, desired, reason)
        unregister: list[Selector] = []
        for session, old, _new in moves:
            if old is None:
                continue
            old.sessions.discard(session.id)
            for selector in session.selectors:
                if old.index.remove(selector, session.id):
                    unregister += self._disown(old, selector)
        if rebuild:
            self.groups = pool
        else:
            for key in [k for k, g in self.groups.items() if not g.sessions]:
                del self.groups[key]
        return registrations, unregister

    def _sync(self, session: Session, desired: dict[str, str], reason: str) -> None:
        for session_path, (_alias, topic_path) in list(session.views.items()):
            if desired.get(session_path) != topic_path:
                self._unsubscribe_view(session, session_path, reason)
        for session_path, topic_path in desired.items():
            self._subscribe_view(session, session_path, topic_path)

    # -- views ------------------------------------------------------------------------------

    def _view(self, state: _TopicState, session_path: str) -> _View:
        view = state.views.get(session_path)
        if view is None:
            spec = state.spec
            view = state.views[session_path] = _View(
                next(self._aliases), session_path, spec.type.value, [list(i) for i in spec.items]
            )
        return view

    def _subscribe_view(
        self, session: Session, session_path: str, topic_path: str, fresh: bytes | None = None
    ) -> None:
        if session_path in session.views or session_path in session.suppressed:
            return
        state = self._topics.get(topic_path)
        if state is None:
            return
        view = self._view(state, session_path)
        topic = self.cache.get(topic_path)
        value = topic.value if topic is not None and topic.value is not None else fresh
        session.views[session_path] = (view.alias, topic_path)
        view.sessions.add(session.id)
        if self._held and self._held_at(session.id, topic_path):
            # what it missed comes first (replay), then this value if the replay had none (finish)
            self._withheld.setdefault(session.id, set()).add(topic_path)
            self._control(session, view.subscribed(None), state.priority)
            self._dirty.add(session.id)
            return
        attributes = self.attributes
        self._control(session, view.subscribed(value, attributes.get(topic_path, b"") if attributes and value else b""),
                      state.priority)
        if state.window is not None:
            for event in state.window.events():
                self._control(session, SeriesUpdate(view.alias, event), state.priority)
        self._dirty.add(session.id)

    def _drop_view(self, session: Session, session_path: str) -> tuple[int, _TopicState | None] | None:
        entry = session.views.pop(session_path, None)
        if entry is None:
            return None
        alias, topic_path = entry
        state = self._topics.get(topic_path)
        view = state.views.get(session_path) if state is not None else None
        if state is not None and view is not None and view.alias == alias:
            view.sessions.discard(session.id)
            if not view.sessions:
                del state.views[session_path]
            return alias, state
        return alias, None

    def _unsubscribe_view(self, session: Session, session_path: str, reason: str) -> None:
        """Unsubscribe a session from a view. The values still queued for it are dropped when
        its topic has TIDY_ON_UNSUBSCRIBE true, or when back pressure is the reason (that is
        what unsubscribing is for); otherwise they go out before the UNSUBSCRIBED."""
        dropped = self._drop_view(session, session_path)
        if dropped is None:
            return
        alias, state = dropped
        if reason == BACK_PRESSURE or state is None or state.spec.tidy_on_unsubscribe:
            session.queue.drop_topic(alias)
        else:  # what is queued stays; a later value (a new subscription's) may not merge into it
            session.queue.seal_topic(alias)
        self._control(session, Unsubscribed(alias, reason), state.priority if state is not None else None)
        self._dirty.add(session.id)

    # -- partition events ----------------------------------------------------------------

    def on_events(self, events: Iterable[TopicEvent]) -> list[int]:
        """Apply one ordered batch from a partition; return the registration
        tokens that became live."""
        live: list[int] = []
        for event in events:
            if isinstance(event, Changed):
                self._value(event.path, event.value, event.retained, event.attributes)
            elif isinstance(event, Appended):
                self._event(event)
            elif isinstance(event, Snapshot):
                self._appeared(event.path, event.type, event.properties, event.value, snapshot=True,
                               attributes=event.attributes)
            elif isinstance(event, Added):
                self._appeared(event.path, event.type, event.properties, event.value, snapshot=False)
            elif isinstance(event, Removed):
                self._removed(event.path)
            elif isinstance(event, End):
                selector = self._pending.get(event.token)
                if selector is not None:
                    interest = self.interest[selector]
                    interest.outstanding -= 1
                    if interest.outstanding <= 0:
                        del self._pending[event.token]
                        live.append(event.token)
        return live

    def subscriptions(self, selector: Selector) -> dict[str, int]:
        """The sessions' subscriptions to the topics ``selector`` selects among those this
        gateway holds, by topic type (a session that sees a topic under two session paths
        counts twice); the cost is that of the selection."""
        counts: dict[str, int] = {}
        for topic in self.cache.select(selector):
            state = self._topics.get(topic.path)
            if state is not None:
                name = topic.type.value
                counts[name] = counts.get(name, 0) + sum(len(v.sessions) for v in state.views.values())
        return counts

    def subscribers(self, topic_path: str) -> int:
        """How many of this gateway's sessions are subscribed to the topic (once each, however
        many session paths show it to them): what a removal policy's ``subscriptions <`` counts."""
        state = self._topics.get(topic_path)
        if state is None:
            return 0
        views = list(state.views.values())
        if len(views) == 1:
            return len(views[0].sessions)
        return len(set().union(*(v.sessions for v in views)))

    def _spec(self, type_name: str, props: list[list[str]]) -> TopicSpecification:
        key = (type_name, tuple((k, v) for k, v in props))
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = TopicSpecification.of(type_name, dict(key[1]))
        return spec

    def resync_begin(self, owned: Callable[[str], bool]) -> None:
        """A partition came back (restarted, its state recovered): every cached
        topic it owns (``owned(path)``) is in doubt until its registrations'
        snapshots arrive again; :meth:`resync_end` drops those that did not."""
        self._doubtful |= {path for path in self._topics if owned(path)}

    def resync_end(self, owned: Callable[[str], bool]) -> None:
        gone = [path for path in self._doubtful if owned(path)]
        self._doubtful -= set(gone)
        for path in gone:
            self._removed(path)

    def _appeared(
        self, path: str, type_name: str, props: list[list[str]], value: bytes | None, *, snapshot: bool,
        attributes: bytes = b"",
    ) -> None:
        self._doubtful.discard(path)
        if not self._interest_index.match(path):
            return
        if snapshot and value is not None:  # what the value was published with, as the partition keeps it
            if attributes:
                self.attributes[path] = attributes
            elif self.attributes:
                self.attributes.pop(path, None)
        state = self._topics.get(path)
        if state is None:
            spec = self._spec(type_name, props)
            self.cache.add(path, spec)
            priority = spec.priority
            state = self._topics[path] = _TopicState(
                path, spec, spec.conflation, None if priority is Priority.DEFAULT else priority
            )
            owner = spec.get(OWNER)
            if owner is not None:
                with contextlib.suppress(SpecificationError):  # a topic older than the check: no owner
                    self._owners[path] = parse_owner(owner)
            if spec.event_type is not None:
                state.window = EventWindow(spec.subscription_range or DEFAULT_SUBSCRIPTION_RANGE)
            if value is not None and not spec.dont_retain_value:
                self.cache.set_value(path, value, check=False)
        elif value is not None:
            if not snapshot:
                self._value(path, value)
            elif not state.spec.dont_retain_value:
                cached = self.cache.get(path)
                if cached is not None and cached.value is not None and cached.value != value:
                    # a value this gateway missed (its partition failed over between the write
                    # and its event): the subscribers get it now, as an update
                    self._value(path, value, True, attributes)
                else:
                    self.cache.set_value(path, value, check=False)
        fresh = value if state.spec.dont_retain_value else None
        owner = self._owners.get(path)
        for group in self.groups.values():
            for session_path in group.session_paths(path):
                if not self.can_read(group, session_path):
                    if owner is not None:  # its owner's sessions read it whatever their roles
                        for session_id in group.index.match(session_path):
                            session = self.sessions.get(session_id)
                            if session is not None and session.principal == owner:
                                self._subscribe_view(session, session_path, path, fresh)
                    continue
                for session_id in group.index.match(session_path):
                    session = self.sessions.get(session_id)
                    if session is not None:
                        self._subscribe_view(session, session_path, path, fresh)

    def _value(self, path: str, value: bytes, retained: bool = True, attributes: bytes = b"") -> None:
        """Deliver a topic's new value; a value not ``retained`` (an MQTT publish without
        the retain flag) leaves the cached one as it was."""
        state = self._topics.get(path)
        if state is None:
            return
        if retained and not state.spec.dont_retain_value:
            self.cache.set_value(path, value, check=False)
            if attributes:
                self.attributes[path] = attributes
            elif self.attributes:
                self.attributes.pop(path, None)
        sessions, dirty, policy, mark, skip = self.sessions, self._dirty, state.policy, self.mark, self._skip
        priority = state.priority
        for view in list(state.views.values()):
            alias = view.alias
            message = Update(alias, value, attributes, retained, mark)
            self.updates_delivered += len(view.sessions)
            others: list[Session] = []
            for session_id in view.sessions:
                session = sessions.get(session_id)
                if session is None or (skip and session_id in skip):
                    continue
                # the common outcome inline; the others (which may unsubscribe,
                # changing view.sessions) after the loop, in _queue_value
                if session.queue.push_value(alias, message, policy, priority) is _QUEUED:
                    dirty.add(session_id)
                else:
                    others.append(session)
            for session in others:
                self._queue_value(session, state, view, message, pushed=True)

    def _event(self, appended: Appended) -> None:
        state = self._topics.get(appended.path)
        if state is None or state.window is None:
            return
        event = appended.event
        if not state.window.add(event):
            return  # seen already, through another registration
        skip = self._skip
        for view in list(state.views.values()):
            message = SeriesUpdate(view.alias, event, self.mark)
            self.updates_delivered += len(view.sessions)
            for session_id in list(view.sessions):
                session = self.sessions.get(session_id)
                if session is not None and not (skip and session_id in skip):
                    self._queue_value(session, state, view, message)

    # -- a session's messages from a partition's recent messages -------------------------

    def set_mark(self, partition: int, position: int) -> None:
        """The events applied next come from ``partition``, every message of them above
        ``position`` (the deliveries carry it as their ``mark``)."""
        self.mark = (partition, position)
        self._skip = self._held_by.get(partition) or frozenset() if self._held_by else frozenset()

    def hold(self, session_id: str, partitions: Iterable[int]) -> None:
        """Deliver the session nothing from ``partitions`` until :meth:`finish`: neither
        messages (it takes them from those partitions' recent messages, :meth:`replay`) nor
        the current values of topics it subscribes to there meanwhile."""
        for partition in partitions:
            self._held.setdefault(session_id, set()).add(partition)
            self._held_by.setdefault(partition, set()).add(session_id)

    def _held_at(self, session_id: str, topic_path: str) -> bool:
        held = self._held.get(session_id)
        return held is not None and self.partition_of(topic_path) in held

    def finish(self, session_id: str, partition: int, replayed: set[str] | None, mark: tuple[int, int]) -> int:
        """The session's messages from ``partition`` come as usual again. ``replayed``: the
        topics its replay had messages for; those it subscribed to meanwhile without getting
        their values now get their current values, as updates. ``None`` (the replay could
        not be had, or not all of it): every topic of the session in that partition gets its
        current value (time series their window). How many were queued."""
        held = self._held.get(session_id)
        if held is not None:
            held.discard(partition)
            if not held:
                del self._held[session_id]
        sessions = self._held_by.get(partition)
        if sessions is not None:
            sessions.discard(session_id)
            if not sessions:
                del self._held_by[partition]
        session = self.sessions.get(session_id)
        withheld = self._withheld.get(session_id, set())
        mine = [path for path in withheld if self.partition_of(path) == partition]
        withheld.difference_update(mine)
        if not withheld:
            self._withheld.pop(session_id, None)
        if session is None:
            return 0
        if replayed is None:
            chosen = {topic for _, topic in session.views.values() if self.partition_of(topic) == partition}
        else:
            chosen = {path for path in mine if path not in replayed}
        queued = 0
        for topic_path in chosen:
            state = self._topics.get(topic_path)
            if state is None:
                continue
            cached = self.cache.get(topic_path)
            value = cached.value if cached is not None else None
            for view in list(state.views.values()):
                if session_id not in view.sessions:
                    continue
                if value is not None:
                    self._queue_value(session, state, view, Update(
                        view.alias, value, self.attributes.get(topic_path, b""), True, mark))
                    queued += 1
                if state.window is not None:
                    for event in state.window.events():
                        self._queue_value(session, state, view, SeriesUpdate(view.alias, event, mark))
                        queued += 1
        return queued

    def replay(self, session_id: str, events: Iterable[TopicEvent], mark: tuple[int, int]) -> int:
        """Queue for one session the messages of ``events`` (a partition's recent messages)
        on the topics it is subscribed to, as their updates were queued then; how many."""
        session = self.sessions.get(session_id)
        if session is None:
            return 0
        queued = 0
        for event in events:
            path = event.path  # type: ignore[union-attr]
            state = self._topics.get(path)
            if state is None:
                continue
            for view in list(state.views.values()):
                if session_id not in view.sessions:
                    continue
                message: object
                if isinstance(event, Changed):
                    message = Update(view.alias, event.value, event.attributes, event.retained, mark)
                elif isinstance(event, Appended):
                    message = SeriesUpdate(view.alias, event.event, mark)
                elif isinstance(event, Added) and event.value is not None:
                    message = Update(view.alias, event.value, b"", True, mark)
                else:
                    continue
                self._queue_value(session, state, view, message)
                queued += 1
        return queued

    def _queue_value(
        self, session: Session, state: _TopicState, view: _View, message: object, *, pushed: bool = False
    ) -> None:
        queue = session.queue
        outcome = queue.last_outcome if pushed else queue.push_value(view.alias, message, state.policy,
                                                                     state.priority)
        if outcome is Outcome.QUEUED or outcome is Outcome.CONFLATED:
            self._dirty.add(session.id)
        elif outcome is Outcome.UNSUBSCRIBE:
            session.suppressed.add(view.session_path)
            self._unsubscribe_view(session, view.session_path, BACK_PRESSURE)
        else:
            self._overflowed(
                session, f" (topic {view.session_path!r} has CONFLATION {state.policy.value})"
            )

    def _removed(self, path: str) -> None:
        self._drop_topic(path)

    def _drop_topic(self, path: str) -> None:
        state = self._topics.get(path)
        if state is not None:
            for view in list(state.views.values()):
                for session_id in list(view.sessions):
                    session = self.sessions.get(session_id)
                    if session is not None:
                        self._unsubscribe_view(session, view.session_path, REMOVED)
        self._topics.pop(path, None)
        if self._owners:
            self._owners.pop(path, None)
        if self.attributes:
            self.attributes.pop(path, None)
        self.cache.remove(path)


__all__ = ["PermissionDenied", "Session", "SessionRegistry", "roles_text"]
