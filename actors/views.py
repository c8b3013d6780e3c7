"""ViewEvaluatorActor: the Ray shell around the :class:`~views.engine.ViewEngine`.

It holds one :class:`~actors.link.PartitionLink` (link id ``views``), so the
partitions stream it the events of the selectors the engine registers, each
partition's in order, and it sends the engine's reference-topic claims back
over the same streams. It owns the topic views: validates, numbers (precedence),
commits them to the replicated configuration log (:mod:`actors.configuration`)
before applying them, and restores them from it at start. Timers release throttled values and the delayed claims of delayed
views, which wait in a :class:`~actors.delay_store.DelayStore` on disk
(``delay_store/`` in the data directory; emptied at start: a view's delayed
events are not kept over a restart).
"""

from __future__ import annotations

import asyncio
import builtins
import logging
import time
from pathlib import Path
from typing import Any

import msgpack
import ray

from actors.delay_store import DelayStore
from actors import configuration, remote_servers, routes
from actors.remote_servers import RemoteConnection
from fanout.servers import MAX_SERVERS, RemoteServer, RemoteServerError
from actors.link import PartitionLink
from actors.settings import InstanceSettings
from actors.supervision import announce_start, new_incarnation
from sessions.incidents import IncidentLog
from sessions.security import PathPermission, SecurityStore
from topics.protocol import Operation, Register, TopicEvent, Unregister, decode_operation, encode_operation
from topics.selectors import parse_selector
from views.engine import Changes, ViewDefinition, ViewEngine
from views.parser import parse_view

log = logging.getLogger("canopy.views")
#: one warning a minute per remote server about missing-topic requests it did not answer
UNANSWERED = IncidentLog(60.0, max_keys=1000)
#: one line a minute about views whose evaluation failed unexpectedly
EVALUATION_FAILED = IncidentLog(60.0, max_keys=1)
GATEWAY_ID = "views"
TICK = 0.5


def _now() -> int:
    return time.time_ns() // 1_000_000


def _permitted(store: SecurityStore) -> Any:
    evaluator = store.evaluator()

    def permitted(roles: frozenset[str], permission: PathPermission, path: str) -> bool:
        return evaluator.has(roles, permission, path)

    return permitted


class _Feed:
    """Feeds the engine the partitions' events and carries its changes back
    (a plain object: Ray wraps every method of an actor class for tracing,
    which the per-event path must not pay)."""

    def __init__(self, engine: ViewEngine, partitions: list[Any], config: InstanceSettings, delay: DelayStore) -> None:
        self.engine = engine
        self.delay = delay
        self.link = PartitionLink(
            GATEWAY_ID, partitions, self.on_events, resolve=routes.from_controller(),
            max_in_flight=config.max_in_flight, max_batch=config.max_batch,
            on_reset=self.on_reset, on_resynced=self.on_resynced,
        )
        self.tokens = 0
        self.wakeup: asyncio.Event | None = None
        self._errors_said = 0

    def on_events(self, partition: int, events: list[TopicEvent]) -> None:
        self.carry(self.engine.on_events(events, _now()))
        if self.engine.errors != self._errors_said:
            self._say_errors()

    def _say_errors(self) -> None:
        self._errors_said = self.engine.errors
        held = EVALUATION_FAILED.record("evaluation", time.monotonic())
        if held is not None:
            log.error("a topic view's evaluation failed (%d so far): %s%s", self.engine.errors,
                      self.engine.last_error, held)

    def on_reset(self, partition: int) -> None:
        self.engine.resync_begin(self.link.owned_by(partition))

    def on_resynced(self, partition: int) -> None:
        """The partition is back: drop the sources that did not come back and claim
        its reference topics again (claims are not journaled)."""
        self.carry(self.engine.resync_end(self.link.owned_by(partition), _now()))

    def carry(self, changes: Changes) -> None:
        link = self.link
        for text in changes.unregister:
            for i in link.partitions_for(parse_selector(text)):
                link.submit(i, Unregister(text))
        for text in changes.register:
            self.tokens += 1
            for i in link.partitions_for(parse_selector(text)):
                link.submit(i, Register(text, self.tokens))
        for path, operation in changes.operations:
            self.submit(path, operation)
        if changes.delayed:
            self.delay.push_many(
                (due, view, msgpack.packb([path, encode_operation(operation)], use_bin_type=True))
                for due, view, path, operation in changes.delayed
            )
        if (changes.delayed or self.engine.next_release() is not None) and self.wakeup is not None:
            self.wakeup.set()

    def submit(self, path: str | None, operation: Operation) -> None:
        if path is None:
            for i in range(self.link.count):
                self.link.submit(i, operation)
        else:
            self.link.route(path, operation)


class ViewEvaluatorActor:
    def __init__(
        self, partitions: list[Any], config: InstanceSettings, security: dict[str, Any], config_log: Any
    ) -> None:
        self.partitions = partitions
        self.config = config
        self.config_log = config_log
        #: one view change at a time: each is committed to the configuration log before it is applied
        self._changing = asyncio.Lock()
        self.engine = ViewEngine(_permitted(SecurityStore.from_dict(security)))
        self.delay = DelayStore(Path(config.data_dir) / "delay_store")
        self.feed = _Feed(self.engine, partitions, config, self.delay)
        self.link = self.feed.link
        self._carry = self.feed.carry
        self._next_precedence = 1
        #: remote server definitions, and the connections of those some view needs
        self.servers: dict[str, RemoteServer] = {}
        self.remote: dict[str, RemoteConnection] = {}
        self._timer: asyncio.Task[None] | None = None
        self._incarnation = new_incarnation()
        announce_start()

    async def incarnation(self) -> str:
        """A token made when this process started: a new one means Ray restarted it."""
        return self._incarnation

    async def set_config_log(self, config_log: Any) -> None:
        """The configuration log's new writer (a controller that took the instance over made
        it again: the old one went with the head and Ray gave it up)."""
        self.config_log = config_log

    async def start(self) -> int:
        """Attach to the partitions and restore the stored views (once; again after a
        restart: the views rebuild their reference topics from the partitions); return
        how many views there are."""
        if self._timer is not None:
            return len(self.engine.views)
        await self.link.attach()
        documents = await self.config_log.get_documents.remote()
        for data in documents.get("servers") or []:
            try:
                server = RemoteServer.from_dict(data)
            except RemoteServerError as e:
                log.error("could not restore a remote server definition: %s", e)
                continue
            self.servers[server.name] = server
        stored = documents.get("views") or []
        for data in stored:
            definition = ViewDefinition.from_wire(data)
            self._next_precedence = max(self._next_precedence, definition.precedence + 1)
            try:
                self._carry(self.engine.put_view(definition, _now()))
            except ValueError as e:  # a stored view that no longer parses: keep the rest going
                log.error("could not restore topic view %r: %s", definition.name, e)
        self.feed.wakeup = asyncio.Event()
        self._timer = asyncio.ensure_future(self._tick())
        await self._sync_remote()
        return len(stored)

    # -- the view API ---------------------------------------------------------------

    async def create(self, name: str, text: str, principal: str, roles: list[str]) -> dict[str, Any]:
        parse_view(text)  # the gateway checked it already; never store a bad view
        async with self._changing:
            return await self._create(name, text, principal, roles)

    async def _create(self, name: str, text: str, principal: str, roles: list[str]) -> dict[str, Any]:
        old = self.engine.views.get(name)
        if old is not None:
            precedence = old.definition.precedence
        else:
            precedence = self._next_precedence
            self._next_precedence += 1
        definition = ViewDefinition(name, text, precedence, principal, frozenset(roles))
        try:
            await self._save({**{d.name: d for d in self.engine.definitions()}, name: definition})
        except BaseException:
            if old is None:
                self._next_precedence -= 1
            raise
        if old is not None:
            self.delay.drop_view(name)
        self._carry(self.engine.put_view(definition, _now()))
        await self._sync_remote()
        return self._describe(definition)

    async def remove(self, name: str) -> bool:
        async with self._changing:
            if name not in self.engine.views:
                return False
            await self._save({d.name: d for d in self.engine.definitions() if d.name != name})
            self.delay.drop_view(name)
            self._carry(self.engine.remove_view(name, _now()))
            await self._sync_remote()
            return True

    async def list(self) -> list[dict[str, Any]]:
        return [self._describe(d) for d in self.engine.definitions()]

    def _describe(self, definition: ViewDefinition) -> dict[str, Any]:
        return {
            "name": definition.name,
            "specification": definition.text,
            "roles": sorted(definition.roles),
            "principal": definition.principal,
            "precedence": definition.precedence,
            "state": self._state(definition.name),
        }

    def _state(self, name: str) -> str:
        """``active``, or why not: a remote view waits for its server's definition and session."""
        server = self.engine.server_of(name)
        if server is None:
            return "active"
        if server not in self.servers:
            return f"inactive: no remote server {server!r} is defined"
        connection = self.remote.get(server)
        if connection is None or connection.state not in ("connected", "reconnecting"):
            why = f" ({connection.error})" if connection is not None and connection.error else ""
            return f"inactive: connecting to remote server {server!r}{why}"
        return "active" if connection.state == "connected" else f"active: reconnecting to remote server {server!r}"

    # -- remote servers (remote topic views) ------------------------------------------------

    async def _sync_remote(self) -> None:
        """One connection per defined remote server some view needs, subscribed to those
        views' selectors; the others closed (their views' reference topics go)."""
        wanted = self.engine.remote_selectors()
        for name, connection in list(self.remote.items()):
            if name not in wanted or self.servers.get(name) != connection.server:
                del self.remote[name]
                await connection.stop()
                self._carry(self.engine.remote_lost(name, _now()))
        for name, selectors in wanted.items():
            server = self.servers.get(name)
            if server is None:
                continue
            found = self.remote.get(name)
            if found is None:
                found = self.remote[name] = RemoteConnection(server, self._remote_events, self._remote_lost)
                found.start()
            connection = found
            await connection.want(set(selectors))

    def _remote_events(self, server: str, events: builtins.list[Any]) -> None:
        self._carry(self.engine.on_events(events, _now(), server))

    def _remote_lost(self, server: str) -> None:
        self._carry(self.engine.remote_lost(server, _now()))

    async def server_add(self, definition: dict[str, Any]) -> dict[str, Any]:
        server = RemoteServer.from_dict(definition)
        async with self._changing:
            if server.name in self.servers:
                raise RemoteServerError(f"remote server {server.name!r} exists already; remove it first")
            if len(self.servers) >= MAX_SERVERS:
                raise RemoteServerError(f"at most {MAX_SERVERS} remote servers")
            await self._save_servers({**self.servers, server.name: server})
            self.servers[server.name] = server
            await self._sync_remote()
        return server.shown()

    async def server_remove(self, name: str) -> bool:
        async with self._changing:
            if name not in self.servers:
                return False
            await self._save_servers({n: s for n, s in self.servers.items() if n != name})
            del self.servers[name]
            await self._sync_remote()
        return True

    async def server_list(self) -> builtins.list[dict[str, Any]]:
        users: dict[str, list[str]] = {}
        for definition in self.engine.definitions():
            named = self.engine.server_of(definition.name)
            if named is not None:
                users.setdefault(named, []).append(definition.name)
        out = []
        for name, server in sorted(self.servers.items()):
            connection = self.remote.get(name)
            state = connection.describe() if connection is not None else {"state": "not in use", "error": ""}
            out.append({**server.shown(), "views": users.get(name, []), **state})
        return out

    async def server_check(self, name: str) -> dict[str, Any]:
        server = self.servers.get(name)
        if server is None:
            raise RemoteServerError(f"no remote server {name!r} is defined")
        return await remote_servers.check(server)

    async def remote_filters(self) -> builtins.list[tuple[str, str]]:
        """The remote servers with a missing-topic notification filter: (name, filter)."""
        return [(n, s.missing_topic_filter) for n, s in sorted(self.servers.items()) if s.missing_topic_filter]

    async def missing(self, name: str, selector: str, session_id: str, properties: dict[str, str],
                      servers: builtins.list[str], hops: builtins.list[str]) -> str:
        """Pass a missing-topic notification on to a remote server whose filter it intersects,
        over the session remote views keep to it; ``proceed`` without one (or when it is lost)."""
        connection = self.remote.get(name)
        session = connection.session if connection is not None else None
        if session is None or connection is None or connection.state != "connected":
            return "proceed"
        try:
            answer = await session._call("missing_topic_fwd", selector, session_id, properties, servers, hops)
        except Exception as e:  # e.g. PERMISSION_DENIED: the principal lacks SERVER_LINK there
            held = UNANSWERED.record(name, time.monotonic())
            if held is not None:
                log.warning("remote server %s: the missing-topic notification for %s got no answer (%s); "
                            "proceeding%s", name, selector, e, held)
            return "proceed"
        return "cancel" if answer == "cancel" else "proceed"

    async def _save_servers(self, servers: dict[str, RemoteServer]) -> None:
        await configuration.commit(self.config_log, "servers", [s.to_dict() for _n, s in sorted(servers.items())])

    async def _save(self, definitions: dict[str, ViewDefinition]) -> None:
        """Commit the views to the configuration log (a majority of the nodes)."""
        ordered = sorted(definitions.values(), key=lambda d: d.precedence)
        await configuration.commit(self.config_log, "views", [d.to_wire() for d in ordered])

    async def set_routes(self, routes: builtins.list[Any]) -> None:
        """The controller's new partition map (see :meth:`actors.link.PartitionLink.set_routes`)."""
        self.link.set_routes(routes)

    async def set_security(self, store: dict[str, Any]) -> None:
        self._carry(self.engine.set_permitted(_permitted(SecurityStore.from_dict(store)), _now()))

    async def stats(self) -> dict[str, Any]:
        return {
            "views": len(self.engine.views),
            "topics": len(self.engine.topics),
            "references": sum(len(v.emitted) for v in self.engine.views.values()),
            "delayed": len(self.delay),
            "evaluations": self.engine.evaluations,
            "evaluation_errors": self.engine.errors,
            "remote_servers": {n: c.describe() for n, c in self.remote.items()},
            **self.link.stats(),
        }

    async def _tick(self) -> None:
        wakeup = self.feed.wakeup
        assert wakeup is not None
        while True:
            wakeup.clear()
            now = _now()
            try:
                self._carry(self.engine.release(now))
                for _view, payload in self.delay.pop_due(now):
                    path, operation = msgpack.unpackb(payload, raw=False, use_list=True)
                    self.feed.submit(path, decode_operation(operation))
            except Exception:
                log.exception("releasing throttled or delayed view updates failed")
            due = [d for d in (self.engine.next_release(), self.delay.next_due()) if d is not None]
            wait = TICK if not due else min(TICK, max(0.0, (min(due) - _now()) / 1000))
            try:
                await asyncio.wait_for(wakeup.wait(), wait)
            except TimeoutError:
                pass

    async def stop(self) -> None:
        for connection in self.remote.values():
            await connection.stop()
        if self._timer is not None:
            self._timer.cancel()
        self.link.close()
        self.delay.close()


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(ViewEvaluatorActor)
