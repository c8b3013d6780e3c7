"""The request handlers of the gateway, one per protocol operation.

Each ``_op_<name>`` checks its arguments and the session's permissions
synchronously, queues partition operations in order, and returns either a
partition result future (answered from a callback) or a coroutine that
finishes the request. Permissions, per the security model:

=================  ====================================================
add, remove        MODIFY_TOPIC on each topic path (remove skips topics
                   without it)
set                UPDATE_TOPIC (and MODIFY_TOPIC when it may create)
subscribe, fetch   SELECT_TOPIC on the selector's path prefix; only
                   topics with READ_TOPIC on their *session* path show
append             UPDATE_TOPIC
edit               EDIT_TIME_SERIES_EVENTS, or EDIT_OWN_TIME_SERIES_EVENTS
                   for events the session's principal wrote
range_query        READ_TOPIC on the session path
security_get       VIEW_SECURITY        security_update  MODIFY_SECURITY
tree_put           MODIFY_TOPIC on the session tree branch and
                   EXPOSE_BRANCH on every topic tree branch
tree_remove        MODIFY_TOPIC on the branch
tree_get, list     READ_TOPIC on the branch
session_get        VIEW_SESSION         session_set      MODIFY_SESSION
view_create        MODIFY_TOPIC_VIEWS and SELECT_TOPIC on the path
view_remove        prefix of the view's source selector
view_list          READ_TOPIC_VIEWS
=================  ====================================================
"""

from __future__ import annotations

import asyncio
import heapq
from typing import TYPE_CHECKING, Any

from actors.channel import PartitionUnavailable
from cluster.partitioning import partition_of, partitions_for
from sessions.filters import parse_filter
from sessions.security import GlobalPermission, PathPermission, PermissionDenied
from sessions.trees import BranchMappingTable
from topics import paths
from topics.errors import InvalidValueError
from topics.selectors import Selector, parse_selector
from topics.specification import TopicSpecification
from topics.store import (
    FAILED,
    OP_ADD,
    OP_APPEND,
    OP_EDIT,
    OP_FETCH,
    OP_QUERY,
    OP_REGISTER,
    OP_REMOVE,
    OP_SET,
    OP_UNREGISTER,
)
from topics.types import TopicType
from views.parser import parse_view

if TYPE_CHECKING:
    from actors.channel import PartitionChannel
    from sessions.registry import SessionRegistry

P, G = PathPermission, GlobalPermission
REMOVE_CHUNK = 500


class RequestError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


def expect(value: Any, kind: type | tuple[type, ...], what: str) -> Any:
    if not isinstance(value, kind) or (isinstance(value, bool) and kind is int):
        raise RequestError("INVALID_REQUEST", f"{what} has the wrong type ({type(value).__name__})")
    return value


def ok(result: list[Any]) -> Any:
    if result[0] == FAILED:
        raise RequestError(result[1], result[2])
    return result[1]


async def done(value: Any = None) -> Any:
    return value


class Operations:
    """Mixed into :class:`~actors.gateway.GatewayActor`."""

    registry: SessionRegistry
    channels: list[PartitionChannel]
    config: dict[str, Any]
    controller: Any
    session_trees: Any
    peers: list[Any]
    views: Any
    _waiters: dict[int, asyncio.Future[None]]

    # -- plumbing -------------------------------------------------------------------

    def _route(self, path: str, operation: list[Any]) -> asyncio.Future[list[Any]]:
        return self.channels[partition_of(path, len(self.channels))].submit(operation)

    def _everywhere(self, selector: Selector, operation: list[Any]) -> list[asyncio.Future[list[Any]]]:
        return [self.channels[i].submit(operation) for i in partitions_for(selector, len(self.channels))]

    async def _all(self, futures: list[asyncio.Future[list[Any]]]) -> list[Any]:
        return [ok(r) for r in await asyncio.gather(*futures)]

    def _register(self, registrations: list[tuple[Selector, int]]) -> list[asyncio.Future[list[Any]]]:
        futures = []
        loop = asyncio.get_running_loop()
        for selector, token in registrations:
            self._waiters.setdefault(token, loop.create_future())
            futures += self._everywhere(selector, [OP_REGISTER, str(selector), token])
        return futures

    def _unregister(self, selectors: list[Selector]) -> None:
        for selector in selectors:
            for future in self._everywhere(selector, [OP_UNREGISTER, str(selector)]):
                detached(future)

    def _apply_changes(self, changes: tuple[list[tuple[Selector, int]], list[Selector]]) -> None:
        registrations, unregistrations = changes
        for future in self._register(registrations):
            detached(future)
        self._unregister(unregistrations)

    def _check(self, sid: str, permission: Any, path: str | None = None) -> None:
        self.registry.check(sid, permission, path)

    # -- topics -----------------------------------------------------------------------

    def _op_add(self, sid: str, path: Any, type_name: Any, properties: Any = None) -> Any:
        path = paths.normalise(path)
        spec = TopicSpecification.of(expect(type_name, str, "type"), expect(properties or {}, dict, "properties"))
        self._check(sid, P.MODIFY_TOPIC, path)
        return self._route(path, [OP_ADD, path, spec.type.value, spec.properties])

    def _op_set(
        self, sid: str, path: Any, data: Any, raw: Any, type_name: Any = None, add_if_missing: Any = False
    ) -> Any:
        path = paths.normalise(path)
        expect(data, bytes, "value")
        expect(raw, bool, "raw")
        expect(add_if_missing, bool, "add_if_missing")
        if type_name is not None:
            type_name = TopicType.parse(expect(type_name, str, "type")).value
        if len(data) > self.config["max_frame_size"]:
            raise InvalidValueError("value larger than the maximum frame size")
        self._check(sid, P.UPDATE_TOPIC, path)
        if add_if_missing:
            self._check(sid, P.MODIFY_TOPIC, path)
        return self._route(path, [OP_SET, path, data, raw, type_name, add_if_missing])

    def _op_remove(self, sid: str, selector: Any) -> Any:
        sel = parse_selector(expect(selector, str, "selector"))
        literal = sel.literal_path
        if literal is not None:
            self._check(sid, P.MODIFY_TOPIC, literal)
            return self._remove_all(self._everywhere(sel, [OP_REMOVE, str(sel)]))
        if self.registry.has(sid, P.MODIFY_TOPIC, sel.path_prefix) and not self._restricted_below(sid):
            return self._remove_all(self._everywhere(sel, [OP_REMOVE, str(sel)]))
        listing = self._everywhere(sel, [OP_FETCH, str(sel), False, False, None, None])

        async def permitted() -> int:
            rows = [row for part in await self._all(listing) for row in part]
            allowed = [row[0] for row in rows if self.registry.has(sid, P.MODIFY_TOPIC, row[0])]
            total = 0
            for start in range(0, len(allowed), REMOVE_CHUNK):
                chunk = "#" + "////".join(">" + p for p in allowed[start : start + REMOVE_CHUNK])
                total += await self._remove_all(self._everywhere(parse_selector(chunk), [OP_REMOVE, chunk]))
            return total

        return permitted()

    def _restricted_below(self, sid: str) -> bool:
        """Whether any role of the session has path assignments (so that a
        permission at a prefix may not hold further down)."""
        roles = self.registry.sessions[sid].roles
        store = self.registry.security
        seen, todo = set(), list(roles)
        while todo:
            name = todo.pop()
            if name in seen:
                continue
            seen.add(name)
            role = store.roles.get(name)
            if role is not None:
                if role.path_permissions:
                    return True
                todo.extend(role.includes)
        return False

    async def _remove_all(self, futures: list[asyncio.Future[list[Any]]]) -> int:
        return sum(await self._all(futures))

    def _op_fetch(
        self, sid: str, selector: Any, with_values: Any = True, with_properties: Any = False,
        types: Any = None, limit: Any = None,
    ) -> Any:
        sel = parse_selector(expect(selector, str, "selector"))
        expect(with_values, bool, "with_values")
        expect(with_properties, bool, "with_properties")
        if types is not None:
            types = [TopicType.parse(expect(t, str, "type")).value for t in expect(types, list, "types")]
        if limit is not None and expect(limit, int, "limit") < 0:
            raise RequestError("INVALID_REQUEST", "limit must not be negative")
        plan = self.registry.fetch_plan(sid, sel)
        futures = [
            f
            for topic_selector in plan
            for f in self._everywhere(
                topic_selector, [OP_FETCH, str(topic_selector), with_values, with_properties, types, None]
            )
        ]

        async def merged() -> list[Any]:
            shown: dict[str, list[Any]] = {}
            for part in await self._all(futures):
                for row in part:
                    for session_path in self.registry.visible(sid, sel, row[0]):
                        shown.setdefault(session_path, [session_path, *row[1:]])
            rows = [shown[p] for p in sorted(shown)]
            return rows[:limit] if limit is not None else rows

        return merged()

    def _op_subscribe(self, sid: str, selector: Any) -> Any:
        sel = parse_selector(expect(selector, str, "selector"))
        registrations, waits = self.registry.subscribe(sid, sel)
        futures = self._register(registrations)

        async def subscribed() -> None:
            try:
                await self._all(futures)
            except (RequestError, PartitionUnavailable) as e:
                self._unregister(self.registry.unsubscribe(sid, sel))
                for _selector, token in registrations:
                    waiter = self._waiters.pop(token, None)
                    if waiter is not None and not waiter.done():
                        waiter.set_exception(e)
                        waiter.exception()  # retrieved: other sessions waiting on it see it too
                raise
            for token in waits:
                if not self.registry.is_live(token):
                    waiter = self._waiters.setdefault(token, asyncio.get_running_loop().create_future())
                    await waiter

        return subscribed()

    def _op_unsubscribe(self, sid: str, selector: Any) -> Any:
        sel = parse_selector(expect(selector, str, "selector"))
        self._unregister(self.registry.unsubscribe(sid, sel))
        return done()

    # -- time series ------------------------------------------------------------------

    def _op_append(self, sid: str, path: Any, data: Any, raw: Any, timestamp: Any = None) -> Any:
        path = paths.normalise(path)
        expect(data, bytes, "value")
        expect(raw, bool, "raw")
        if timestamp is not None:
            expect(timestamp, int, "timestamp")
        self._check(sid, P.UPDATE_TOPIC, path)
        author = self.registry.sessions[sid].principal
        return self._route(path, [OP_APPEND, path, data, raw, timestamp, author])

    def _op_edit(self, sid: str, path: Any, original: Any, data: Any, raw: Any) -> Any:
        path = paths.normalise(path)
        expect(original, int, "original sequence")
        expect(data, bytes, "value")
        expect(raw, bool, "raw")
        own_only = False
        if not self.registry.has(sid, P.EDIT_TIME_SERIES_EVENTS, path):
            if not self.registry.has(sid, P.EDIT_OWN_TIME_SERIES_EVENTS, path):
                raise PermissionDenied(P.EDIT_TIME_SERIES_EVENTS, path)
            own_only = True
        author = self.registry.sessions[sid].principal
        return self._route(path, [OP_EDIT, path, original, data, raw, author, own_only])

    def _op_range_query(
        self, sid: str, path: Any, anchor: Any, anchor_value: Any, span: Any, span_value: Any,
        view: Any, limit: Any = None,
    ) -> Any:
        session_path = paths.normalise(path)
        expect(anchor, str, "anchor")
        expect(anchor_value, int, "anchor value")
        expect(span, str, "span")
        expect(span_value, int, "span value")
        expect(view, str, "view")
        if limit is not None:
            expect(limit, int, "limit")
        self._check(sid, P.READ_TOPIC, session_path)
        topic_path = self.registry.resolve(sid, session_path)
        return self._route(topic_path, [OP_QUERY, topic_path, anchor, anchor_value, span, span_value, view, limit])

    # -- security ---------------------------------------------------------------------

    def _op_security_get(self, sid: str) -> Any:
        self._check(sid, G.VIEW_SECURITY)
        return done(self.registry.security.to_dict(with_secrets=False))

    def _op_security_update(self, sid: str, commands: Any) -> Any:
        self._check(sid, G.MODIFY_SECURITY)
        expect(commands, list, "commands")
        self.registry.security.apply(commands)  # refuse bad commands here, with their reason

        async def updated() -> int:
            version: int = await self.controller.update_security.remote(commands)
            return version

        return updated()

    # -- session trees ----------------------------------------------------------------

    def _op_tree_put(self, sid: str, branch: Any, mappings: Any) -> Any:
        table = BranchMappingTable.of(branch, expect(mappings, list, "mappings"))
        self._check(sid, P.MODIFY_TOPIC, table.session_tree_branch)
        for mapping in table.mappings:
            self._check(sid, P.EXPOSE_BRANCH, mapping.topic_tree_branch)

        async def put() -> int:
            version: int = await self.session_trees.put.remote(table.to_wire())
            return version

        return put()

    def _op_tree_remove(self, sid: str, branch: Any) -> Any:
        branch = paths.normalise(branch)
        self._check(sid, P.MODIFY_TOPIC, branch)

        async def removed() -> int:
            version: int = await self.session_trees.remove.remote(branch)
            return version

        return removed()

    def _op_tree_get(self, sid: str, branch: Any) -> Any:
        branch = paths.normalise(branch)
        self._check(sid, P.READ_TOPIC, branch)
        table = self.registry.trees.tables.get(branch)
        return done(table.to_wire() if table is not None else None)

    def _op_tree_list(self, sid: str) -> Any:
        tables = sorted(self.registry.trees.tables.values(), key=lambda t: t.session_tree_branch)
        return done([t.to_wire() for t in tables if self.registry.has(sid, P.READ_TOPIC, t.session_tree_branch)])

    # -- sessions ---------------------------------------------------------------------

    @staticmethod
    def _target(target: Any) -> tuple[str, str]:
        expect(target, list, "target")
        if len(target) != 2 or target[0] not in ("id", "filter") or not isinstance(target[1], str):
            raise RequestError("INVALID_REQUEST", "a target is ['id', SESSION_ID] or ['filter', FILTER]")
        if target[0] == "filter":
            parse_filter(target[1])  # refuse a bad filter with its position
        return target[0], target[1]

    def _op_session_get(self, sid: str, target: Any) -> Any:
        self._check(sid, G.VIEW_SESSION)
        kind, value = self._target(target)

        async def gathered() -> dict[str, dict[str, str]]:
            found: dict[str, dict[str, str]] = {}
            for part in await asyncio.gather(*(p.session_properties.remote(kind, value) for p in self.peers)):
                found.update(part)
            return found

        return gathered()

    def _op_session_set(self, sid: str, target: Any, changes: Any) -> Any:
        self._check(sid, G.MODIFY_SESSION)
        kind, value = self._target(target)
        expect(changes, dict, "properties")
        for key, new in changes.items():
            if not isinstance(key, str) or not key or key.startswith("$"):
                raise RequestError("INVALID_PROPERTIES", f"only user properties can change, not {key!r}")
            if new is not None and not isinstance(new, str):
                raise RequestError("INVALID_PROPERTIES", f"property {key!r} needs a string value or nil")

        async def changed() -> int:
            counts = await asyncio.gather(
                *(p.change_session_properties.remote(kind, value, changes) for p in self.peers)
            )
            return sum(counts)

        return changed()

    # -- topic views ------------------------------------------------------------------

    @staticmethod
    def _view_name(name: Any) -> str:
        expect(name, str, "view name")
        if not name or not name.isprintable():
            raise RequestError("INVALID_REQUEST", f"a view name is non-empty printable text, not {name!r}")
        return str(name)

    def _op_view_create(self, sid: str, name: Any, specification: Any) -> Any:
        name = self._view_name(name)
        spec = parse_view(expect(specification, str, "specification"))
        self._check(sid, G.MODIFY_TOPIC_VIEWS)
        self._check(sid, P.SELECT_TOPIC, spec.selector.path_prefix)
        session = self.registry.sessions[sid]

        async def created() -> dict[str, Any]:
            view: dict[str, Any] = await self.views.create.remote(
                name, specification, session.principal, sorted(session.roles)
            )
            return view

        return created()

    def _op_view_list(self, sid: str) -> Any:
        self._check(sid, G.READ_TOPIC_VIEWS)

        async def listed() -> list[dict[str, Any]]:
            views: list[dict[str, Any]] = await self.views.list.remote()
            return views

        return listed()

    def _op_view_remove(self, sid: str, name: Any) -> Any:
        name = self._view_name(name)
        self._check(sid, G.MODIFY_TOPIC_VIEWS)

        async def removed() -> bool:
            for view in await self.views.list.remote():
                if view["name"] == name:
                    self._check(sid, P.SELECT_TOPIC, parse_view(view["specification"]).selector.path_prefix)
            found: bool = await self.views.remove.remote(name)
            return found

        return removed()

    def select_sessions(self, kind: str, value: str) -> list[str]:
        """This gateway's sessions a target names."""
        if kind == "id":
            return [value] if value in self.registry.sessions else []
        session_filter = parse_filter(value)
        return [
            s.id for s in self.registry.sessions.values() if session_filter.matches(s.properties, s.roles)
        ]


def detached(future: asyncio.Future[Any]) -> None:
    """Nobody waits for this result: log a failure instead of warning about it."""
    import logging

    def finished(f: asyncio.Future[Any]) -> None:
        if not f.cancelled() and f.exception() is not None:
            logging.getLogger("canopy.gateway").warning("background operation failed: %s", f.exception())

    future.add_done_callback(finished)
