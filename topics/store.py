"""The topic store: one partition's topics, the gateways interested in them,
and the operations a partition applies.

A :class:`TopicStore` owns a :class:`~topics.tree.TopicTree` and a
:class:`~topics.sublist.SubscriptionIndex` whose subscribers are *gateway
ids*: a gateway registers a selector once, however many of its sessions use
it, and fans updates out to those sessions itself.

Operations arrive in batches of plain lists (what msgpack decodes to) and
:meth:`TopicStore.apply` returns one result per operation, in order. Every
change produces events for the gateways whose selectors match; they
accumulate until :meth:`TopicStore.drain_events` hands them out, one list
per gateway, so a partition makes one call per gateway per batch.

Operations (``[code, ...]``)::

    [OP_ADD, path, type, properties | None]
    [OP_SET, path, data, raw, type | None, add_if_missing]
    [OP_REMOVE, selector]
    [OP_FETCH, selector, with_values, with_properties, types | None, limit | None]
    [OP_REGISTER, selector, token]
    [OP_UNREGISTER, selector]

Results are ``[OK, payload]`` or ``[FAILED, code, message]``; ``add`` answers
``"CREATED"`` or ``"EXISTS"``, ``set`` ``"CREATED"`` or ``None``, ``remove``
the number of topics removed and ``fetch`` a list of
``[path, type, properties | None, value | None]`` sorted by path.

Events (``[code, ...]``), in the order the changes happened::

    [EV_SNAPSHOT, token, path, type, properties, value | None]  current state for a registration
    [EV_END, token]                                               that registration's snapshot is complete
    [EV_ADD, path, type, properties, value | None]               a topic matching a registration appeared
    [EV_VALUE, path, value]                                       its value changed
    [EV_REMOVE, path]                                             it was removed

``properties`` is a list of ``[name, value]`` pairs. Values are the stored
bytes. A topic with DONT_RETAIN_VALUE keeps no value: updates are delivered
but snapshots and fetches carry none.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from topics import types as values
from topics.errors import InvalidValueError, NoSuchTopicError, TopicModelError
from topics.selectors import Selector, parse_selector
from topics.specification import TopicSpecification
from topics.sublist import SubscriptionIndex
from topics.tree import Topic, TopicTree
from topics.types import TopicType

OP_ADD, OP_SET, OP_REMOVE, OP_FETCH, OP_REGISTER, OP_UNREGISTER = 1, 2, 3, 4, 5, 6
EV_SNAPSHOT, EV_END, EV_ADD, EV_VALUE, EV_REMOVE = 1, 2, 3, 4, 5
OK, FAILED = 0, 1
CREATED, EXISTS = "CREATED", "EXISTS"


class OperationError(TopicModelError):
    """A malformed operation (wrong arity or argument types)."""

    code = "INVALID_REQUEST"


def _spec_wire(spec: TopicSpecification) -> list[list[str]]:
    return [list(item) for item in spec.items]


class TopicStore:
    """Topics of one partition plus the gateway registrations over them."""

    def __init__(self) -> None:
        self.tree = TopicTree()
        self.index: SubscriptionIndex[str] = SubscriptionIndex()
        self._registrations: dict[str, set[Selector]] = {}
        self._events: dict[str, list[list[Any]]] = {}

    # -- batches -----------------------------------------------------------

    def apply(self, gateway: str, operations: Iterable[Any]) -> list[list[Any]]:
        """Apply a batch in order; a failing operation changes nothing and
        does not stop the ones after it."""
        results: list[list[Any]] = []
        for op in operations:
            try:
                results.append([OK, self._dispatch(gateway, op)])
            except TopicModelError as e:
                results.append([FAILED, e.code, str(e)])
            except (TypeError, ValueError, IndexError, KeyError, AttributeError) as e:
                results.append([FAILED, OperationError.code, f"malformed operation: {e}"])
        return results

    def _dispatch(self, gateway: str, op: Any) -> Any:
        if not isinstance(op, (list, tuple)) or not op:
            raise OperationError("an operation is a non-empty list")
        code, *args = op
        if code == OP_SET:
            return self.set(*args)
        if code == OP_ADD:
            return self.add(*args)
        if code == OP_REMOVE:
            return self.remove(*args)
        if code == OP_FETCH:
            return self.fetch(*args)
        if code == OP_REGISTER:
            return self.register(gateway, *args)
        if code == OP_UNREGISTER:
            return self.unregister(gateway, *args)
        raise OperationError(f"unknown operation code {code!r}")

    def drain_events(self) -> dict[str, list[list[Any]]]:
        """The events accumulated since the last drain, by gateway id."""
        events, self._events = self._events, {}
        return events

    def _emit(self, path: str, event: list[Any]) -> None:
        for gateway in self.index.match(path):
            self._events.setdefault(gateway, []).append(event)

    # -- topics ------------------------------------------------------------

    def add(
        self, path: str, type_name: str, properties: dict[str, Any] | None = None
    ) -> str:
        spec = TopicSpecification.of(type_name, properties)
        topic, created = self.tree.add(path, spec)
        if not created:
            return EXISTS
        self._emit(topic.path, [EV_ADD, topic.path, spec.type.value, _spec_wire(spec), None])
        return CREATED

    def set(
        self,
        path: str,
        data: bytes,
        raw: bool,
        type_name: str | None = None,
        add_if_missing: bool = False,
    ) -> str | None:
        if not isinstance(data, (bytes, bytearray)):
            raise InvalidValueError(f"a value travels as bytes, got {type(data).__name__}")
        wanted = TopicType.parse(type_name) if type_name is not None else None
        topic = self.tree.get(path)
        created = False
        if topic is None:
            if not add_if_missing:
                raise NoSuchTopicError(f"no topic at {path!r}")
            topic_type = wanted or values.infer(data, raw=raw)
            if topic_type is TopicType.TIME_SERIES:
                raise InvalidValueError("a TIME_SERIES topic cannot be created by setting a value")
            stored = values.accept(topic_type, data, raw=raw)
            spec = TopicSpecification.of(topic_type)
            topic, created = self.tree.add(path, spec)
        else:
            spec = topic.specification
            if wanted is not None and wanted is not spec.type:
                raise InvalidValueError(
                    f"topic {topic.path!r} is a {spec.type.value} topic, not {wanted.value}"
                )
            if spec.type is TopicType.TIME_SERIES:
                raise InvalidValueError(
                    f"topic {topic.path!r} is a TIME_SERIES topic: append events instead of setting a value"
                )
            stored = values.accept(spec.type, data, raw=raw)
        if created:
            self._store(topic, stored)
            self._emit(topic.path, [EV_ADD, topic.path, spec.type.value, _spec_wire(spec), stored])
            return CREATED
        self._store(topic, stored)
        self._emit(topic.path, [EV_VALUE, topic.path, stored])
        return None

    def _store(self, topic: Topic, stored: bytes) -> None:
        if not topic.specification.dont_retain_value:
            self.tree.set_value(topic.path, stored, check=False)

    def remove(self, selector: str) -> int:
        sel = parse_selector(selector)
        removed = self.tree.remove_selected(sel)
        for topic in removed:
            self._emit(topic.path, [EV_REMOVE, topic.path])
        return len(removed)

    def fetch(
        self,
        selector: str,
        with_values: bool = True,
        with_properties: bool = False,
        types: list[str] | None = None,
        limit: int | None = None,
    ) -> list[list[Any]]:
        sel = parse_selector(selector)
        wanted = {TopicType.parse(t) for t in types} if types else None
        if limit is not None and (not isinstance(limit, int) or limit < 0):
            raise OperationError(f"limit must be a non-negative integer, got {limit!r}")
        chosen = sorted(
            (t for t in self.tree.select(sel) if wanted is None or t.type in wanted),
            key=lambda t: t.path,
        )
        if limit is not None:
            chosen = chosen[:limit]
        return [
            [
                t.path,
                t.type.value,
                _spec_wire(t.specification) if with_properties else None,
                t.value if with_values else None,
            ]
            for t in chosen
        ]

    # -- registrations -----------------------------------------------------

    def register(self, gateway: str, selector: str, token: int) -> None:
        sel = parse_selector(selector)
        self.index.add(sel, gateway)
        self._registrations.setdefault(gateway, set()).add(sel)
        out = self._events.setdefault(gateway, [])
        for topic in self.tree.select(sel):
            spec = topic.specification
            out.append(
                [EV_SNAPSHOT, token, topic.path, spec.type.value, _spec_wire(spec), topic.value]
            )
        out.append([EV_END, token])

    def unregister(self, gateway: str, selector: str) -> None:
        sel = parse_selector(selector)
        self.index.remove(sel, gateway)
        registered = self._registrations.get(gateway)
        if registered is not None:
            registered.discard(sel)
            if not registered:
                del self._registrations[gateway]

    def drop_gateway(self, gateway: str) -> int:
        """Forget every registration of a gateway that went away."""
        selectors = self._registrations.pop(gateway, set())
        for sel in selectors:
            self.index.remove(sel, gateway)
        self._events.pop(gateway, None)
        return len(selectors)

    def gateways(self) -> list[str]:
        return sorted(self._registrations)
