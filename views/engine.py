"""The view engine: every topic view of an instance, kept up to date from
topic events (pure; driven by :class:`actors.views.ViewEvaluatorActor`).

The engine reads the partitions' event stream (the events of
:mod:`topics.protocol`) for the selectors it asks to register: each view's
source selector and, as literal paths, the topics its inserts read. It keeps
the topics it has seen, re-derives a source when it or a topic it inserts
from changes (:func:`views.evaluate.derive`), and turns the difference into
reference-topic claims for the partitions (:class:`~topics.protocol.RefPut`,
``RefDrop``, ``RefReserve``, ``RefDropView``): only what changed is sent.

Rules kept here (topic views, ARCHITECTURE.md):

* Precedence: every view has a number fixed at its first creation (lower
  wins); replacing a view keeps it, and its claims are replaced in place
  (only paths the new specification no longer makes are dropped).
  Partitions settle conflicts between views and with normal topics.
* Within a view, several sources (or expansions) mapping to one path: the
  first one claims it; when it lets go, the next claimant takes over.
* Security context: a source counts only if the view's roles have
  READ_TOPIC on its path, an insert reads only topics they may read, and a
  reference topic is made only where they have MODIFY_TOPIC. :meth:`ViewEngine.set_permissions` re-evaluates all.
* ``preserve topics``: reference topics a source made stay (with their last
  value) when its value moves it elsewhere, until the source or the view
  goes.
* ``throttle``: updates of an existing reference topic pass through a
  :class:`~views.throttle.Throttle`; held values come out of
  :meth:`ViewEngine.release`. Creations and removals are never held
  (a creation counts against the rate);
  TIME_SERIES reference topics are never throttled.
* ``delay``: every claim of a delayed view is returned in
  :attr:`Changes.delayed` with its due time, for the caller to keep on disk
  and send when due; a path it claims for the first time is reserved at
  once, so the reference topic exists unpublished.
* A view ignores the reference topics it made itself as sources (no
  self-feeding loop). A TIME_SERIES source's edits are not propagated:
  each appended event appends to the reference topic.
* Remote views (``from NAME``): their sources are the topics of the remote
  server NAME, kept apart from the local tree (:attr:`ViewEngine.remote`,
  fed by :meth:`ViewEngine.on_events` with ``server``), matched only by
  that server's views; their inserts read the local tree. Losing the server
  (:meth:`ViewEngine.remote_lost`) removes its views' reference topics.
* Figures: :attr:`ViewEngine.evaluations` counts the sources derived, and
  :attr:`ViewEngine.errors` those whose derivation failed in a way the evaluation
  does not foresee (a bug): such a source makes no reference topics, and
  :attr:`ViewEngine.last_error` says which view and source it was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sessions.security import PathPermission
from topics.selectors import parse_selector
from topics.specification import TopicSpecification
from topics.protocol import (
    Added,
    Appended,
    Changed,
    Operation,
    RefDrop,
    RefDropView,
    RefEvent,
    RefPut,
    RefReserve,
    Removed,
    Snapshot,
    TopicEvent,
)
from topics.sublist import SubscriptionIndex
from topics.types import TopicType
from views.evaluate import Output, Source, derive
from views.parser import parse_view
from views.spec import ViewSpec
from views.throttle import Throttle

__all__ = ["Changes", "ViewDefinition", "ViewEngine"]

Permitted = Callable[[frozenset[str], PathPermission, str], bool]


@dataclass(frozen=True)
class ViewDefinition:
    name: str
    text: str
    precedence: int
    principal: str
    roles: frozenset[str]

    @property
    def spec(self) -> ViewSpec:
        return parse_view(self.text)

    def to_wire(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "specification": self.text,
            "precedence": self.precedence,
            "principal": self.principal,
            "roles": sorted(self.roles),
        }

    @classmethod
    def from_wire(cls, data: dict[str, Any]) -> ViewDefinition:
        return cls(data["name"], data["specification"], int(data["precedence"]), data["principal"], frozenset(data["roles"]))


@dataclass
class Changes:
    """What the caller must do after an engine call."""

    register: list[str] = field(default_factory=list)
    unregister: list[str] = field(default_factory=list)
    #: (routing path or None for every partition, operation)
    operations: list[tuple[str | None, Operation]] = field(default_factory=list)
    #: (due ms, view name, routing path, operation) for delayed views
    delayed: list[tuple[int, str, str, Operation]] = field(default_factory=list)


@dataclass
class _View:
    definition: ViewDefinition
    spec: ViewSpec
    throttle: Throttle[str, Output] | None
    #: source path -> reference path -> output, as last derived
    derived: dict[str, dict[str, Output]] = field(default_factory=dict)
    #: reference path -> source path -> output (insertion order: the first claims)
    claimants: dict[str, dict[str, Output]] = field(default_factory=dict)
    #: reference path -> what the partitions were last told
    emitted: dict[str, Output] = field(default_factory=dict)
    #: source path -> insertion paths its derivation read
    reads: dict[str, set[str]] = field(default_factory=dict)

    @property
    def server(self) -> str | None:
        """The remote server whose tree holds this view's sources (``from NAME``), or None."""
        return self.spec.remote


def _wire(spec: TopicSpecification) -> tuple[str, dict[str, str]]:
    return spec.type.value, spec.properties


class ViewEngine:
    def __init__(self, permitted: Permitted) -> None:
        self.permitted = permitted
        self.views: dict[str, _View] = {}
        self.topics: dict[str, Source] = {}
        self._index: SubscriptionIndex[str] = SubscriptionIndex()
        self._interest: dict[str, int] = {}
        self._registered: set[str] = set()
        #: insertion path -> {(view, source path)}
        self._readers: dict[str, set[tuple[str, str]]] = {}
        self._changes = Changes()
        self._now = 0
        #: sources of a restarted partition not seen again yet
        self._doubtful: set[str] = set()
        #: remote server -> its topics that remote views' selectors match (see on_events)
        self.remote: dict[str, dict[str, Source]] = {}
        #: remote server -> the remote views' selectors, by view
        self._remote_index: dict[str, SubscriptionIndex[str]] = {}
        #: sources derived, and derivations that failed unexpectedly (the last one's account)
        self.evaluations = 0
        self.errors = 0
        self.last_error = ""

    # -- views -----------------------------------------------------------------------

    def put_view(self, definition: ViewDefinition, now: int) -> Changes:
        """Create or replace a view (a replacement must keep its precedence)."""
        self._now = now
        spec = definition.spec
        old = self.views.get(definition.name)
        throttle = Throttle[str, Output](spec.throttle.updates, spec.throttle.period_ms) if spec.throttle else None
        view = _View(definition, spec, throttle)
        if view.server is None:
            self._want(str(spec.selector))
        if old is not None:
            self._retire(old, drop=False)
        self.views[definition.name] = view
        self._index_of(view.server).add(spec.selector, definition.name)
        for path, source in list(self._topics_of(view.server).items()):
            if spec.selector.matches(path):
                self._derive(view, path, source)
        if old is not None:
            # the replacement keeps the precedence: its claims overwrite the old ones in
            # place, and only the paths it no longer claims are dropped
            for path in old.emitted.keys() - view.emitted.keys():
                self._changes.operations.append((path, RefDrop(path, definition.precedence)))
        return self._take()

    def remove_view(self, name: str, now: int) -> Changes:
        self._now = now
        view = self.views.pop(name, None)
        if view is not None:
            self._retire(view)
            if view.server is not None:  # the server's topics no remaining view matches: no longer followed
                index, topics = self._index_of(view.server), self._topics_of(view.server)
                for path in [p for p in topics if not index.match(p)]:
                    del topics[path]
        return self._take()

    def _retire(self, view: _View, drop: bool = True) -> None:
        name = view.definition.name
        self._index_of(view.server).remove(view.spec.selector, name)
        if view.server is None:
            self._unwant(str(view.spec.selector))
        for source_path, reads in view.reads.items():
            for path in reads:
                self._unread(path, name, source_path)
        if drop:
            self._changes.operations.append((None, RefDropView(view.definition.precedence)))

    def definitions(self) -> list[ViewDefinition]:
        return sorted((v.definition for v in self.views.values()), key=lambda d: d.precedence)

    def server_of(self, name: str) -> str | None:
        """The remote server a view takes its sources from (None: the local tree)."""
        return self.views[name].server

    def remote_selectors(self) -> dict[str, list[str]]:
        """Remote server -> the selectors its views need (what to subscribe to there)."""
        wanted: dict[str, set[str]] = {}
        for view in self.views.values():
            if view.server is not None:
                wanted.setdefault(view.server, set()).add(str(view.spec.selector))
        return {server: sorted(selectors) for server, selectors in wanted.items()}

    def _topics_of(self, server: str | None) -> dict[str, Source]:
        return self.topics if server is None else self.remote.setdefault(server, {})

    def _index_of(self, server: str | None) -> SubscriptionIndex[str]:
        if server is None:
            return self._index
        index = self._remote_index.get(server)
        if index is None:
            index = self._remote_index[server] = SubscriptionIndex()
        return index

    def _source(self, view: _View, path: str) -> Source | None:
        return self._topics_of(view.server).get(path)

    def set_permitted(self, permitted: Permitted, now: int) -> Changes:
        """New security rules: re-evaluate every source of every view."""
        self.permitted = permitted
        self._now = now
        for view in self.views.values():
            topics = self._topics_of(view.server)
            for path in [p for p in topics if view.spec.selector.matches(p)]:
                self._derive(view, path, topics[path])
            for path in [p for p in view.derived if p not in topics]:
                self._derive(view, path, None)
        return self._take()

    # -- events ------------------------------------------------------------------------

    def resync_begin(self, owned: Callable[[str], bool]) -> None:
        """A partition came back (restarted): the source topics it owns are in
        doubt until its snapshots arrive again (see :meth:`resync_end`)."""
        self._doubtful |= {path for path in self.topics if owned(path)}

    def resync_end(self, owned: Callable[[str], bool], now: int) -> Changes:
        """Forget the doubtful sources that did not come back, and claim again
        every reference topic the partition owns (claims are not journaled: a
        restarted partition has none)."""
        self._now = now
        gone = [path for path in self._doubtful if owned(path)]
        self._doubtful -= set(gone)
        for path in gone:
            self._topic(path, None)
        for view in self.views.values():
            for path, output in view.emitted.items():
                if owned(path):
                    if view.spec.delay_ms is not None:
                        self._changes.operations.append(
                            (path, RefReserve(path, view.definition.precedence, view.definition.name))
                        )
                    self._changes.operations.append((path, self._put(view, output, None)))
        return self._take()

    def on_events(self, events: list[TopicEvent], now: int, server: str | None = None) -> Changes:
        """Apply a batch of partition events (:mod:`topics.protocol`), or, with ``server``, of
        that remote server's topics (the remote views' sources: the actor subscribes to
        :meth:`remote_selectors` there and turns what it hears into the same events)."""
        self._now = now
        topics = self._topics_of(server)
        for event in events:
            if isinstance(event, Changed):
                if not event.retained:
                    continue  # delivered, not a value (an MQTT publish without retain): views derive from values
                known = topics.get(event.path)
                if known is not None:
                    source = Source(event.path, known.specification, event.value)
                    self._topic(event.path, source, RefEvent(event.value, now, ""), server)
            elif isinstance(event, (Snapshot, Added)):
                if server is None:
                    self._doubtful.discard(event.path)
                spec = TopicSpecification.of(event.type, dict(event.properties))
                self._topic(event.path, Source(event.path, spec, event.value), None, server)
            elif isinstance(event, Removed):
                self._topic(event.path, None, None, server)
            elif isinstance(event, Appended):
                known = topics.get(event.path)
                appended = event.event
                if known is not None and appended.original_sequence is None:
                    self._topic(
                        event.path,
                        Source(event.path, known.specification, appended.value),
                        RefEvent(appended.value, appended.timestamp, appended.author),
                        server,
                    )
        return self._take()

    def remote_lost(self, server: str, now: int) -> Changes:
        """The connection to a remote server is gone (or its definition is): its topics go,
        and with them the reference topics its views made; they come back with the topics."""
        self._now = now
        for path in list(self.remote.get(server, {})):
            self._topic(path, None, None, server)
        self.remote.pop(server, None)
        return self._take()

    def _topic(self, path: str, source: Source | None, event: RefEvent | None = None, server: str | None = None) -> None:
        topics = self._topics_of(server)
        if source is None:
            if topics.pop(path, None) is None:
                return
        else:
            topics[path] = source
        for name in self._index_of(server).match(path):
            view = self.views[name]
            if path in view.emitted and source is not None and server is None:
                continue  # the view's own reference topic
            self._derive(view, path, source, event)
        if server is not None:
            return  # inserts read the local tree only
        for name, source_path in list(self._readers.get(path, ())):
            reader = self.views.get(name)
            if reader is not None and (source_path != path or reader.server is not None):
                self._derive(reader, source_path, self._source(reader, source_path))

    # -- derivation --------------------------------------------------------------------

    def _derive(self, view: _View, source_path: str, source: Source | None, event: RefEvent | None = None) -> None:
        name = view.definition.name
        roles = view.definition.roles
        outputs: list[Output] = []
        reads: set[str] = set()
        if source is not None and self.permitted(roles, PathPermission.READ_TOPIC, source_path):

            def lookup(path: str) -> Source | None:
                # the view's security context must be able to read what it inserts
                return self.topics.get(path) if self.permitted(roles, PathPermission.READ_TOPIC, path) else None

            self.evaluations += 1
            try:
                outputs, reads = derive(view.spec, source, lookup)
            except Exception as e:  # a bug: this source makes nothing, the other sources and views go on
                self.errors += 1
                self.last_error = f"view {name!r}, source {source_path!r}: {type(e).__name__}: {e}"
                outputs, reads = [], set()
            outputs = [o for o in outputs if self.permitted(roles, PathPermission.MODIFY_TOPIC, o.path)]
        old_reads = view.reads.get(source_path, set())
        for path in reads - old_reads:
            self._read(path, name, source_path)
        for path in old_reads - reads:
            self._unread(path, name, source_path)
        if reads:
            view.reads[source_path] = reads
        else:
            view.reads.pop(source_path, None)
        old = view.derived.get(source_path, {})
        new = {o.path: o for o in outputs}
        if view.spec.preserve_topics and source is not None:
            new = {**old, **new}
        for path in old.keys() - new.keys():
            claimants = view.claimants[path]
            del claimants[source_path]
            if not claimants:
                del view.claimants[path]
            self._publish(view, path, None)
        for path, output in new.items():
            view.claimants.setdefault(path, {})[source_path] = output
            self._publish(view, path, event if output.specification.type is TopicType.TIME_SERIES else None)
        if new:
            view.derived[source_path] = new
        else:
            view.derived.pop(source_path, None)

    def _publish(self, view: _View, path: str, event: RefEvent | None) -> None:
        claimants = view.claimants.get(path)
        output = next(iter(claimants.values())) if claimants else None
        emitted = view.emitted.get(path)
        if output is None:
            if emitted is not None:
                del view.emitted[path]
                if view.throttle is not None:
                    view.throttle.forget(path)
                self._send(view, path, RefDrop(path, view.definition.precedence))
            return
        ts = output.specification.type is TopicType.TIME_SERIES
        if emitted == output and event is None:
            return
        if ts and emitted is None and event is None and output.value is not None:
            event = RefEvent(output.value, self._now, "")  # a new time series starts with the current value
        view.emitted[path] = output
        if view.throttle is not None and not ts:
            # a creation is never held, but it counts as a publication
            if not view.throttle.offer(path, output, self._now) and emitted is not None:
                return
        if emitted is None and view.spec.delay_ms is not None:
            self._changes.operations.append((path, RefReserve(path, view.definition.precedence, view.definition.name)))
        self._send(view, path, self._put(view, output, event if ts else None))

    def _put(self, view: _View, output: Output, event: RefEvent | None) -> RefPut:
        type_name, properties = _wire(output.specification)
        ts = output.specification.type is TopicType.TIME_SERIES
        if ts and event is not None:
            assert output.value is not None
            event = RefEvent(output.value, event.timestamp, event.author)
        return RefPut(
            output.path, view.definition.precedence, view.definition.name,
            type_name, properties, None if ts else output.value, event,
        )

    def _send(self, view: _View, path: str, operation: Operation) -> None:
        delay = view.spec.delay_ms
        if delay is None:
            self._changes.operations.append((path, operation))
        else:
            self._changes.delayed.append((self._now + delay, view.definition.name, path, operation))

    def release(self, now: int) -> Changes:
        """Throttled values whose period has ended."""
        self._now = now
        for view in self.views.values():
            if view.throttle is None:
                continue
            for path, output in view.throttle.due(now):
                if view.emitted.get(path) is output:
                    self._send(view, path, self._put(view, output, None))
        return self._take()

    def next_release(self) -> int | None:
        due = [v.throttle.next_due() for v in self.views.values() if v.throttle is not None]
        times = [d for d in due if d is not None]
        return min(times) if times else None

    # -- interest ------------------------------------------------------------------------

    def _want(self, selector: str) -> None:
        self._interest[selector] = self._interest.get(selector, 0) + 1

    def _unwant(self, selector: str) -> None:
        count = self._interest.get(selector, 0) - 1
        if count <= 0:
            self._interest.pop(selector, None)
        else:
            self._interest[selector] = count

    def _wanted(self, path: str) -> bool:
        return bool(self._index.match(path)) or path in self._readers

    def _read(self, path: str, view: str, source_path: str) -> None:
        readers = self._readers.setdefault(path, set())
        if not readers:
            self._want(">" + path)
        readers.add((view, source_path))

    def _unread(self, path: str, view: str, source_path: str) -> None:
        readers = self._readers.get(path)
        if readers is None:
            return
        readers.discard((view, source_path))
        if not readers:
            del self._readers[path]
            self._unwant(">" + path)

    def _take(self) -> Changes:
        """Hand out the changes, with the registrations that changed since the last call."""
        changes, self._changes = self._changes, Changes()
        wanted = set(self._interest)
        changes.register = sorted(wanted - self._registered)
        changes.unregister = sorted(self._registered - wanted)
        self._registered = wanted
        for text in changes.unregister:
            sel = parse_selector(text)
            for path in [p for p in self.topics if sel.matches(p) and not self._wanted(p)]:
                del self.topics[path]
        return changes
