"""The sessions of one gateway and the fan-out of topic events to them.

A gateway hosts many client sessions but registers each distinct selector
with the partitions only once. :class:`SessionRegistry` is the bookkeeping
behind that, free of any I/O so that it can be tested on its own:

* ``index`` maps session selectors to session ids (a
  :class:`~topics.sublist.SubscriptionIndex`); a selector's first session
  makes the gateway register it with the partitions, its last session
  unregisters it;
* ``cache`` holds every topic some local selector matches, with its
  specification and current value, fed by the partitions' ordered event
  streams. A session that subscribes to a selector the gateway already
  watches is served from the cache without asking any partition;
* each session has an :class:`~sessions.queue.OutboundQueue`; an update is
  encoded once and the same bytes are queued for every subscribed session,
  under the topic's CONFLATION policy.

The driver (the gateway actor) calls the methods below and then drains
:meth:`SessionRegistry.take_dirty` to wake the writers of sessions with new
messages and :meth:`SessionRegistry.take_closing` to end sessions that
overflowed their queue.

A session is *subscribed* to a topic when one of its selectors matches it;
it is told so by a SUBSCRIBED message (alias, path, specification, value),
then gets VALUE messages, and an UNSUBSCRIBED message with a reason:
``REQUESTED`` (it unsubscribed), ``REMOVED`` (the topic went away) or
``BACK_PRESSURE`` (CONFLATION unsubscribe under back pressure; it stays
unsubscribed from that topic until it subscribes again to a selector
matching it).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from canopy import protocol as wire
from sessions.queue import Outcome, OutboundQueue
from topics.properties import Conflation
from topics.selectors import Selector
from topics.specification import TopicSpecification
from topics.store import EV_ADD, EV_END, EV_EVENT, EV_REMOVE, EV_SNAPSHOT, EV_VALUE
from topics.timeseries import DEFAULT_SUBSCRIPTION_RANGE, Event, EventWindow
from topics.sublist import SubscriptionIndex
from topics.tree import TopicTree

REQUESTED, REMOVED, BACK_PRESSURE = "REQUESTED", "REMOVED", "BACK_PRESSURE"


@dataclass(eq=False)
class Session:
    id: str
    principal: str
    properties: dict[str, str]
    queue: OutboundQueue
    selectors: set[Selector] = field(default_factory=set)
    #: path -> alias of every topic the session is subscribed to
    topics: dict[str, int] = field(default_factory=dict)
    #: topics it was unsubscribed from by back pressure
    suppressed: set[str] = field(default_factory=set)


@dataclass(eq=False)
class _TopicState:
    alias: int
    spec: TopicSpecification
    policy: Conflation
    subscribed: bytes  # SUBSCRIBED message minus value, see _subscribed_prefix
    sessions: set[str] = field(default_factory=set)
    #: a TIME_SERIES topic's newest events, what a new subscriber gets first
    window: EventWindow | None = None


@dataclass(eq=False)
class _Registration:
    token: int
    outstanding: int  # END markers still expected from partitions


class SessionRegistry:
    """Sessions, their selectors and subscriptions, and the topic cache of one gateway."""

    def __init__(self, queue_limit: int = 10_000, backpressure: int = 1_000) -> None:
        self.queue_limit = queue_limit
        self.backpressure = backpressure
        self.sessions: dict[str, Session] = {}
        self.index: SubscriptionIndex[str] = SubscriptionIndex()
        self.cache = TopicTree()
        self._topics: dict[str, _TopicState] = {}
        self._registrations: dict[Selector, _Registration] = {}
        self._pending_tokens: dict[int, Selector] = {}
        self._tokens = itertools.count(1)
        self._aliases = itertools.count(1)
        self._specs: dict[tuple[str, tuple[tuple[str, str], ...]], TopicSpecification] = {}
        self._dirty: set[str] = set()
        self._closing: dict[str, tuple[str, str]] = {}

    # -- sessions ----------------------------------------------------------

    def open(self, session_id: str, principal: str, properties: dict[str, str]) -> Session:
        session = Session(
            session_id, principal, dict(properties), OutboundQueue(self.queue_limit, self.backpressure)
        )
        self.sessions[session_id] = session
        return session

    def close(self, session_id: str) -> list[Selector]:
        """Forget a session; return the selectors the gateway must now unregister."""
        session = self.sessions.pop(session_id, None)
        self._dirty.discard(session_id)
        self._closing.pop(session_id, None)
        if session is None:
            return []
        for path in session.topics:
            state = self._topics.get(path)
            if state is not None:
                state.sessions.discard(session_id)
        unregister = []
        for selector in session.selectors:
            if self.index.remove(selector, session_id):
                unregister.append(selector)
                self._forget_registration(selector)
        return unregister

    def send(self, session_id: str, message: bytes) -> None:
        """Queue a control message (a response, an error) for a session."""
        session = self.sessions.get(session_id)
        if session is not None:
            session.queue.push_control(message)
            self._dirty.add(session_id)

    def take_dirty(self) -> set[str]:
        dirty, self._dirty = self._dirty, set()
        return dirty

    def take_closing(self) -> dict[str, tuple[str, str]]:
        closing, self._closing = self._closing, {}
        return closing

    # -- subscriptions -----------------------------------------------------

    def subscribe(self, session_id: str, selector: Selector, partitions: int) -> tuple[int | None, int | None]:
        """Add a selector to a session.

        Returns ``(register, wait)``: ``register`` is a new token when the
        gateway must register the selector with ``partitions`` partitions;
        ``wait`` is the token whose END markers the subscription must wait
        for (``None`` when the selector is already live at this gateway).
        Topics already cached are subscribed at once.
        """
        session = self.sessions[session_id]
        session.selectors.add(selector)
        if session.suppressed:
            session.suppressed = {p for p in session.suppressed if not selector.matches(p)}
        self.index.add(selector, session_id)
        register = None
        registration = self._registrations.get(selector)
        if registration is None:
            token = next(self._tokens)
            registration = _Registration(token, partitions)
            self._registrations[selector] = registration
            self._pending_tokens[token] = selector
            register = token
        for topic in list(self.cache.select(selector)):
            self._subscribe_session(session, topic.path)
        wait = registration.token if registration.outstanding > 0 else None
        return register, wait

    def unsubscribe(self, session_id: str, selector: Selector) -> Selector | None:
        """Remove a selector from a session; return it if the gateway must unregister it."""
        session = self.sessions.get(session_id)
        if session is None or selector not in session.selectors:
            return None
        session.selectors.discard(selector)
        last = self.index.remove(selector, session_id)
        for path in [p for p in session.topics if selector.matches(p)]:
            if not any(s.matches(path) for s in session.selectors):
                self._unsubscribe_session(session, path, REQUESTED)
        if last:
            self._forget_registration(selector)
            return selector
        return None

    def _forget_registration(self, selector: Selector) -> None:
        registration = self._registrations.pop(selector, None)
        if registration is not None:
            self._pending_tokens.pop(registration.token, None)
        for topic in list(self.cache.select(selector)):
            if not self.index.match(topic.path):
                self.cache.remove(topic.path)
                self._topics.pop(topic.path, None)

    def is_live(self, token: int) -> bool:
        return token not in self._pending_tokens

    # -- partition events ----------------------------------------------------

    def on_events(self, events: Iterable[list[Any]]) -> list[int]:
        """Apply one ordered batch from a partition; return the registration
        tokens that became live."""
        live: list[int] = []
        for event in events:
            code = event[0]
            if code == EV_VALUE:
                self._value(event[1], event[2])
            elif code == EV_SNAPSHOT:
                self._appeared(event[2], event[3], event[4], event[5], snapshot=True)
            elif code == EV_ADD:
                self._appeared(event[1], event[2], event[3], event[4], snapshot=False)
            elif code == EV_EVENT:
                self._event(event[1], event[2:])
            elif code == EV_REMOVE:
                self._removed(event[1])
            elif code == EV_END:
                selector = self._pending_tokens.get(event[1])
                if selector is not None:
                    registration = self._registrations[selector]
                    registration.outstanding -= 1
                    if registration.outstanding <= 0:
                        del self._pending_tokens[event[1]]
                        live.append(event[1])
        return live

    def _spec(self, type_name: str, props: list[list[str]]) -> TopicSpecification:
        key = (type_name, tuple((k, v) for k, v in props))
        spec = self._specs.get(key)
        if spec is None:
            spec = self._specs[key] = TopicSpecification.of(type_name, dict(key[1]))
        return spec

    def _appeared(
        self, path: str, type_name: str, props: list[list[str]], value: bytes | None, *, snapshot: bool
    ) -> None:
        sessions = self.index.match(path)
        if not sessions:
            return
        state = self._topics.get(path)
        if state is None:
            spec = self._spec(type_name, props)
            self.cache.add(path, spec)
            alias = next(self._aliases)
            state = self._topics[path] = _TopicState(
                alias, spec, spec.conflation, _subscribed_prefix(alias, path, type_name, props)
            )
            if spec.event_type is not None:
                state.window = EventWindow(spec.subscription_range or DEFAULT_SUBSCRIPTION_RANGE)
            if value is not None and not spec.dont_retain_value:
                self.cache.set_value(path, value, check=False)
        elif value is not None:
            if not snapshot:
                self._value(path, value)
            elif not state.spec.dont_retain_value:
                self.cache.set_value(path, value, check=False)
        for session_id in sessions:
            session = self.sessions.get(session_id)
            if session is not None:
                self._subscribe_session(session, path, value if state.spec.dont_retain_value else None)

    def _subscribe_session(self, session: Session, path: str, fresh: bytes | None = None) -> None:
        if path in session.topics or path in session.suppressed:
            return
        state = self._topics[path]
        topic = self.cache.get(path)
        value = topic.value if topic is not None else None
        session.topics[path] = state.alias
        state.sessions.add(session.id)
        session.queue.push_control(state.subscribed + wire.pack(value if value is not None else fresh))
        if state.window is not None:
            for event in state.window.events():
                session.queue.push_control(_event_message(state.alias, event))
        self._dirty.add(session.id)

    def _unsubscribe_session(self, session: Session, path: str, reason: str) -> None:
        alias = session.topics.pop(path, None)
        if alias is None:
            return
        state = self._topics.get(path)
        if state is not None:
            state.sessions.discard(session.id)
        session.queue.drop_topic(alias)
        session.queue.push_control(wire.pack([wire.UNSUBSCRIBED, alias, reason]))
        self._dirty.add(session.id)

    def _value(self, path: str, value: bytes) -> None:
        state = self._topics.get(path)
        if state is None:
            return
        if not state.spec.dont_retain_value:
            self.cache.set_value(path, value, check=False)
        if not state.sessions:
            return
        message = wire.pack([wire.VALUE, state.alias, value])
        for session_id in list(state.sessions):
            session = self.sessions.get(session_id)
            if session is not None:
                self._queue_value(session, state, path, message)

    def _queue_value(self, session: Session, state: _TopicState, path: str, message: bytes) -> None:
        outcome = session.queue.push_value(state.alias, message, state.policy)
        if outcome is Outcome.QUEUED or outcome is Outcome.CONFLATED:
            self._dirty.add(session.id)
        elif outcome is Outcome.UNSUBSCRIBE:
            session.suppressed.add(path)
            self._unsubscribe_session(session, path, BACK_PRESSURE)
        elif session.id not in self._closing:
            self._closing[session.id] = (
                "QUEUE_LIMIT",
                f"more than {session.queue.limit} values queued for a session that is not "
                f"reading them (topic {path!r} has CONFLATION {state.policy.value})",
            )

    def _event(self, path: str, fields: list[Any]) -> None:
        state = self._topics.get(path)
        if state is None or state.window is None:
            return
        event = Event(*fields)
        if not state.window.add(event):
            return  # seen already, through another registration
        message = _event_message(state.alias, event)
        for session_id in list(state.sessions):
            session = self.sessions.get(session_id)
            if session is not None:
                self._queue_value(session, state, path, message)

    def _removed(self, path: str) -> None:
        state = self._topics.pop(path, None)
        self.cache.remove(path)
        if state is None:
            return
        for session_id in list(state.sessions):
            session = self.sessions.get(session_id)
            if session is not None:
                self._unsubscribe_session(session, path, REMOVED)
        for session in self.sessions.values():
            session.suppressed.discard(path)


def _subscribed_prefix(alias: int, path: str, type_name: str, props: list[list[str]]) -> bytes:
    """A SUBSCRIBED message without its last field: append the packed value."""
    full = wire.pack([wire.SUBSCRIBED, alias, path, type_name, props, None])
    # the array header says 6 elements; drop the trailing nil (0xc0)
    assert full[-1:] == b"\xc0"
    return full[:-1]


def _event_message(alias: int, event: Event) -> bytes:
    return wire.pack(
        [
            wire.EVENT,
            alias,
            event.sequence,
            event.timestamp,
            event.author,
            event.value,
            event.original_sequence,
            event.original_timestamp,
            event.original_author,
        ]
    )
