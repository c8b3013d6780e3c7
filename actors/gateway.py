"""GatewayActor: client sessions over WebSocket, one gateway per node.

The gateway is an async Ray actor whose event loop runs a ``websockets``
server (:mod:`actors.connections`) and one :class:`~actors.link.PartitionLink`
to every partition. The bookkeeping (sessions, groups, interest, topic
cache, views, outbound queues) lives in the pure
:class:`~sessions.registry.SessionRegistry`; requests are checked by the
pure core and carried out by the handlers of :mod:`actors.requests`.

Partition events arrive on the link, in each partition's order, and go
straight to the registry; the writers of the sessions they concern are
woken at once. The controller pushes new security stores
(:meth:`GatewayActor.set_security`) and the session tree actor new branch
mapping tables (:meth:`GatewayActor.set_session_trees`); both re-evaluate
every session at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import functools
import gc
import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import ray

from topics.partitioning import partition_of
from actors.client_control import ClientControl
from actors.connections import CLOSE_BY_CLIENT_CONTROL, Connections
from actors import routes
from actors.link import PartitionLink, PartitionUnavailable
from actors.locks import GatewayLocks
from actors.missing_topics import MissingTopics
from actors.requests import HANDLERS, Context, Routed
from actors.settings import InstanceSettings
from sessions.authorization import MATRIX, authorize
from sessions.incidents import IncidentLog
from actors.tracing import TraceRecord
from actors.supervision import announce_start, new_incarnation
from canopy import protocol as wire
from actors.configuration import NotCommitted
from canopy.transport import serve_stream
from sessions.client_control import RoleChange, pick
from sessions.collectors import CollectorError, Collectors
from sessions.filters import FilterSyntaxError, parse_filter
from sessions.limits import Limits, PropertyLimitError, shown
from fanout.config import FanoutConfigError
from fanout.servers import RemoteServerError
from sessions.messaging import MessagingError
from sessions.missing_topics import MissingTopicError
from sessions.registry import SessionRegistry
from sessions.requests import RequestError
from sessions.security import (
    AuthenticationFailed,
    PathPermission,
    PermissionDenied,
    SecurityCommandError,
    SecurityStore,
)
from sessions.trees import SessionTrees, TreeError
from topics.errors import TopicModelError
from actors.mqtt import SYS
from topics.protocol import AddTopic, Failed, ProtocolError, RemoveTopics, Result, SetValue, TopicEvent
from topics.types import TopicType
from topics.types import encode as encode_value
from views.parser import ViewSpecError

log = logging.getLogger("canopy.gateway")
#: seconds between two log lines about one session's requests that failed unexpectedly
UNEXPECTED_LOG_INTERVAL = 10.0
#: the requests a topic's OWNER may make without its roles' permission, and that permission
OWNER_GRANTS = {
    "set": PathPermission.UPDATE_TOPIC, "json_patch": PathPermission.UPDATE_TOPIC,
    "append": PathPermission.UPDATE_TOPIC, "remove": PathPermission.MODIFY_TOPIC,
}
#: seconds after a session closed before the gateway hands freed memory back (once for a burst)
TRIM_DELAY = 2.0
#: errors a request can end with that are the request's fault, each with a ``code``
REQUEST_ERRORS = (
    RequestError,
    PropertyLimitError,
    TopicModelError,
    PermissionDenied,
    SecurityCommandError,
    TreeError,
    FilterSyntaxError,
    PartitionUnavailable,
    ViewSpecError,
    ProtocolError,
    AuthenticationFailed,
    NotCommitted,
    MissingTopicError,
    MessagingError,
    FanoutConfigError,
    RemoteServerError,
    CollectorError,
)


class Gateway:
    """The gateway's work, in a plain object: Ray wraps every method of an
    actor class for tracing, which the per-message paths here must not pay."""

    def __init__(
        self,
        gateway_id: str,
        partitions: list[Any],
        config: InstanceSettings,
        host: str,
        port: int,
        security: dict[str, Any],
        session_trees: list[Any],
        session_tree_actor: Any,
    ) -> None:
        self.gateway_id = gateway_id
        self.config = config
        self.host = host
        self.port = port
        self.link = PartitionLink(
            gateway_id, partitions, self._on_events, resolve=routes.from_controller(),
            max_in_flight=config.max_in_flight, max_batch=config.max_batch,
            window=config.batch_window_ms / 1000,
            on_reset=self._partition_reset, on_resynced=self._partition_resynced,
        )
        count = len(partitions)
        self.registry = SessionRegistry(
            config.queue_limit,
            config.backpressure_threshold,
            security=SecurityStore.from_dict(security),
            trees=SessionTrees.from_wire(session_trees),
            partitions_for=lambda selector: len(self.link.partitions_for(selector)) if count else 1,
            session_buffer=config.session_buffer,
            limits=Limits.from_settings(config),
            partition_of=lambda path: partition_of(path, count) if count else 0,
        )
        self.ctx = Context(self.registry, self.link, config, session_trees=session_tree_actor)
        self.ctx.missing = self.missing = MissingTopics(
            gateway_id, self._send, self._properties, config.missing_topic_timeout_ms / 1000,
            server_name=config.server_name or f"{config.host}:{config.port}",
            instance=config.instance_id,
        )
        self.missing.views = lambda: self.ctx.views
        from actors.messaging import Messaging

        self.ctx.messaging = self.messaging = Messaging(
            self.missing.gateway_id, self._send, self._properties, self._select, lambda: self.missing.peers, config,
        )
        self.incidents = IncidentLog(UNEXPECTED_LOG_INTERVAL)
        #: requests that failed in a way no check foresaw (each answered INTERNAL)
        self.unexpected = 0
        self._trim: asyncio.TimerHandle | None = None
        self.connections = Connections(
            gateway_id, self.registry, config, self._dispatch, self.ctx.unregister,
            after_write=self._written, after_receive=self.link.flush, closed=self._session_closed,
        )
        #: other sessions' roles and subscriptions, and session event listeners (actors/client_control.py)
        self.ctx.clients = self.clients = ClientControl(
            self.missing.gateway_id, self.registry, lambda: self.missing.peers, self._select,
            self.ctx.apply_changes, self.ctx, self.connections.internal, self._send,
        )
        self.connections.life = self._life
        from actors.notifications import TopicNotifications

        #: topic notification listeners (structure registrations, NOTIFY topic_notification)
        self.ctx.notifications = self.notifications = TopicNotifications(self.registry, self.link, self._send)
        #: session locks: the controller's table, this gateway's waiting requests (actors/locks.py)
        self.ctx.locks = self.locks = GatewayLocks(
            self.missing.gateway_id, self._connected, lambda: self.ctx.controller)
        self.server: asyncio.Server | None = None
        self.url = ""
        from actors.mqtt import MQTTServer

        self.mqtt = MQTTServer(self.connections, config)
        if count:
            from actors.mqtt_records import SessionRecords

            self.mqtt.store = SessionRecords(self.link)
        if config.mqtt_port:
            from actors.mqtt_websocket import WebSocketMQTT

            self.connections.websocket_mqtt = lambda stream, release: WebSocketMQTT(self.mqtt, stream, release)
        self.mqtt_server: asyncio.Server | None = None
        self._sys_task: asyncio.Future[None] | None = None
        self.mqtt_url = ""
        from actors.http_endpoints import Endpoints

        self.connections.http = Endpoints(self, anonymous=config.metrics_anonymous)
        #: the instance's metric collectors (the controller pushes them: set_collectors)
        self.collectors = Collectors()
        from actors.removal_reports import RemovalReports

        #: this gateway's figures for the partitions' removal policies
        self.removal_reports = RemovalReports(self.link, self.registry, lambda: self.connections.internal)

    # -- lifecycle -----------------------------------------------------------

    async def start(self, controller: Any, views: Any) -> dict[str, Any]:
        self.ctx.controller = controller
        self.ctx.views = views
        await self.link.attach()
        factory = serve_stream(self.connections.handler, max_size=self.config.max_frame_size, subprotocols=("mqtt",))
        from actors import tls

        context = tls.context_for(self.config.tls_cert, self.config.tls_key)  # with TLS configured, wss:// only
        self.server = await asyncio.get_running_loop().create_server(factory, self.host, self.port, ssl=context)
        port = self.server.sockets[0].getsockname()[1]
        self.url = f"{'wss' if context is not None else 'ws'}://{self.host}:{port}"
        if not self.config.server_name and not self.config.port:
            self.missing.server_name = f"{self.host}:{port}"  # a port chosen at run time: the one bound
        mqtt_port = self._mqtt_port(self.config.mqtt_tls_port if context is not None else self.config.mqtt_port)
        if mqtt_port is not None:
            self.mqtt_server = await asyncio.get_running_loop().create_server(
                self.mqtt.protocol, self.host, mqtt_port, ssl=context
            )
            scheme = "mqtts" if context is not None else "mqtt"
            self.mqtt_url = f"{scheme}://{self.host}:{self.mqtt_server.sockets[0].getsockname()[1]}"
            if self.mqtt.store is not None:
                self.mqtt.watch_announcements(self.link)
        interval = self.config.sys_interval
        if interval:
            self._sys_task = asyncio.ensure_future(self._publish_figures(interval))
        self.removal_reports.start()
        gc.freeze()  # what start-up made lives as long as the process: keep it out of every collection
        return {"gateway": self.gateway_id, "url": self.url, "host": self.host, "port": port, "mqtt": self.mqtt_url}

    def _mqtt_port(self, base: int) -> int | None:
        """Where this gateway serves MQTT over TCP (``base`` is ``mqtt_port``) or TLS (``base`` is
        ``mqtt_tls_port``, when TLS is configured): ``base`` plus the offset of the gateway's own
        port from ``port`` (the same port with ``gateway_ports = "same"``; one chosen at run time
        when ``port`` is 0), or ``None``: ``base`` or ``mqtt_port`` is 0, MQTT is off."""
        if not base or not self.config.mqtt_port:
            return None
        if self.config.gateway_ports == "same":
            return base
        if not self.config.port:
            return 0
        return base + (self.port - self.config.port)

    async def _publish_figures(self, interval: float) -> None:
        """Every ``interval`` seconds, this gateway's figures as topics under
        ``$SYS/broker/gateways/NAME/`` (not persistent; ``$SYS/broker/version`` too), where MQTT
        tools look for them; any session that may read ``$SYS`` sees them."""
        from canopy import __version__

        name = self.gateway_id.split("-", 1)[0]
        base = f"{SYS}/broker/gateways/{name}"
        started = time.monotonic()
        added: set[str] = set()

        def put(path: str, type_name: str, value: Any) -> None:
            if path not in added:
                added.add(path)
                self.link.route(path, AddTopic(path, type_name, {"PERSISTENT": "false"}))
            self.link.route(path, SetValue(path, encode_value(TopicType.parse(type_name), value), False))

        while True:
            try:
                stats = self.mqtt.stats()
                put(f"{SYS}/broker/version", "STRING", f"canopy {__version__}")
                put(f"{base}/uptime", "INT64", int(time.monotonic() - started))
                put(f"{base}/clients/connected", "INT64", len(self.connections.streams) + self.connections.others)
                put(f"{base}/clients/mqtt", "INT64", stats["mqtt_connections"])
                put(f"{base}/sessions", "INT64", len(self.registry.sessions) - len(self.connections.internal))
                put(f"{base}/sessions/mqtt_kept", "INT64", stats["mqtt_kept_sessions"])
                put(f"{base}/sessions/mqtt_taken_over", "INT64", stats["mqtt_taken_over_elsewhere"])
                put(f"{base}/sessions/mqtt_replayed", "INT64", stats["mqtt_sessions_replayed"])
                put(f"{base}/sessions/mqtt_replay_gaps", "INT64", stats["mqtt_replay_gaps"])
                put(f"{base}/messages/mqtt/received", "INT64", stats["mqtt_publishes_received"])
                put(f"{base}/messages/mqtt/sent", "INT64", stats["mqtt_publishes_sent"])
                put(f"{base}/messages/mqtt/refused", "INT64", stats["mqtt_publishes_refused"])
                put(f"{base}/messages/mqtt/expired", "INT64", stats["mqtt_publishes_expired"])
                self.link.flush()
            except Exception as e:  # a partition away: the next round
                log.debug("could not publish the $SYS figures: %s", e)
            await asyncio.sleep(interval)

    async def stop(self) -> None:
        self.removal_reports.stop()
        if self._sys_task is not None:
            self._sys_task.cancel()
        if self.server is not None:
            self.server.close()
        if self.mqtt_server is not None:
            self.mqtt_server.close()
        self.mqtt.close_all()
        await self.connections.close_all()
        self.link.close()

    def stats(self) -> dict[str, Any]:
        return {
            "gateway": self.gateway_id,
            "pid": os.getpid(),
            "url": self.url,
            "rss_bytes": _rss_bytes(),
            "heap_in_use_bytes": _heap_in_use(),
            "connections": len(self.connections.streams),
            "connection_addresses": len(self.connections.per_address),
            "resume_tokens": len(self.connections.tokens),
            **self.connections.logins.stats(),
            "logins_refused_not_logged": self.connections.refusals.suppressed,
            "login_verified_matches": self.connections.verified.matched,
            "unexpected_errors": self.unexpected,
            "unexpected_errors_not_logged": self.incidents.suppressed,
            "sessions": len(self.registry.sessions) - len(self.connections.internal),
            "kept_sessions": len(self.connections.kept),
            "groups": len(self.registry.groups),
            "interest": len(self.registry.interest),
            "cached_topics": len(self.registry.cache),
            **self.mqtt.stats(),
            **self.link.stats(),
            **self.missing.stats(),
            **self.messaging.stats(),
            **self.notifications.stats(),
        }

    def _session_closed(self, session_id: str) -> None:
        self.missing.session_closed(session_id)
        self.messaging.session_closed(session_id)
        self.clients.session_closed(session_id)
        self.locks.session_closed(session_id)
        self.notifications.session_closed(session_id)
        self.removal_reports.session_closed()
        self.incidents.forget(session_id)
        if self._trim is None:  # give what closed sessions held back to the system, a little later, once
            self._trim = asyncio.get_running_loop().call_later(TRIM_DELAY, self._trim_memory)

    def _trim_memory(self) -> None:
        """Hand the heap's free memory back to the operating system. CPython keeps what
        it freed for reuse: without this, the memory of sessions that closed (their
        properties, queues and frames) stayed with the gateway."""
        self._trim = None
        if _malloc_trim is not None:  # off the loop: the call walks the heap, releasing the GIL
            asyncio.get_running_loop().run_in_executor(None, _malloc_trim, 0)

    def _send(self, session_id: str, message: bytes) -> None:
        self.registry.send(session_id, message)
        self.connections.wake()

    def _life(self, what: str, session: Any, reason: str) -> None:
        self.clients.life(what, session, reason)
        if what == "disconnected":  # an UNLOCK_ON_CONNECTION_LOSS lock goes, and every wait
            self.locks.connection_lost(session.id)

    def _connected(self, session_id: str) -> bool | None:
        """Whether a session has a connection now (``None``: no such session)."""
        if session_id not in self.registry.sessions:
            return None
        return session_id in self.connections.by_session

    def _properties(self, session_id: str) -> dict[str, str] | None:
        session = self.registry.sessions.get(session_id)
        return dict(session.properties) if session is not None else None

    # -- configuration pushed to the gateway ---------------------------------------

    def set_security(self, store: dict[str, Any]) -> None:
        with _no_gc():
            self.ctx.apply_changes(self.registry.set_security(SecurityStore.from_dict(store)))
        self.connections.wake()

    def set_session_trees(self, trees: list[Any]) -> float:
        started = time.perf_counter()
        with _no_gc():  # a re-evaluation makes many short-lived objects in a large heap
            self.ctx.apply_changes(self.registry.set_trees(SessionTrees.from_wire(trees)))
        elapsed = time.perf_counter() - started
        self.connections.wake()
        return elapsed

    def set_collectors(self, collectors: list[dict[str, Any]]) -> None:
        """The metric collectors now (see :mod:`sessions.collectors`); a session collector
        whose definition did not change keeps its counts."""
        self.collectors = Collectors.from_wire(collectors)
        self.connections.session_metrics.set(self.collectors.sessions)

    def session_properties(
        self, kind: str, value: str, keys: list[str] | None = None
    ) -> dict[str, dict[str, str]]:
        """The properties of this gateway's sessions a target names (those ``keys`` name, or all)."""
        return {sid: pick(self.registry.sessions[sid].properties, keys) for sid in self._select(kind, value)}

    def change_session_properties(self, kind: str, value: str, changes: dict[str, str | None]) -> int:
        """Change the user properties of this gateway's sessions a target names; a session
        the changes would take over ``max_session_properties`` is left as it is (not counted)."""
        most = self.registry.limits.max_session_properties
        changed = 0
        for sid in self._select(kind, value):
            own = {k for k in self.registry.sessions[sid].properties if not k.startswith("$")}
            after = (own | {k for k, v in changes.items() if v is not None}) - {k for k, v in changes.items() if v is None}
            if len(after) > most:
                continue
            before = dict(self.registry.sessions[sid].properties)
            self.ctx.apply_changes(self.registry.set_properties(sid, changes))
            self.clients.properties_changed(sid, before)
            changed += 1
        self.connections.wake()
        return changed

    def close_sessions(self, kind: str, value: str) -> int:
        """End this gateway's sessions a target names (``session_close``): each client is
        told ``CLOSED_BY_CLIENT_CONTROL`` and its connection closed, so that it does not
        reconnect; return how many ended."""
        closed = 0
        for sid in self._select(kind, value):
            closed += self.connections.end_session(
                sid, "CLOSED_BY_CLIENT_CONTROL", "the session was closed by another session",
                CLOSE_BY_CLIENT_CONTROL,
            )
        self.connections.wake()
        return closed

    def _select(self, kind: str, value: str) -> list[str]:
        """This gateway's sessions a target names (its own internal ones never: they are
        not clients' sessions)."""
        internal = self.connections.internal
        if kind == "id":
            return [value] if value in self.registry.sessions and value not in internal else []
        session_filter = parse_filter(value)
        return [s.id for s in self.registry.sessions.values()
                if s.id not in internal and session_filter.matches(s.properties, s.roles)]

    # -- events from partitions ----------------------------------------------

    def _partition_reset(self, partition: int) -> None:
        self.registry.resync_begin(self.link.owned_by(partition))
        self.notifications.reset(self.link.owned_by(partition))

    def _partition_resynced(self, partition: int) -> None:
        self.registry.resync_end(self.link.owned_by(partition))
        self.notifications.resynced(self.link.owned_by(partition))
        self.connections.wake()

    def _on_events(self, partition: int, events: list[TopicEvent]) -> None:
        self.registry.set_mark(partition, self.link.channels[partition].position)
        for token in self.registry.on_events(events):
            self.ctx.token_live(token)
        self.notifications.on_events(events)
        self.connections.wake()

    # -- requests --------------------------------------------------------------

    def _dispatch(self, sid: str, request: wire.Request, received_ns: int = 0) -> None:
        """Carry out a request: the authorization matrix first (its arguments and the
        permissions it needs, :func:`sessions.authorization.authorize`), then its handler."""
        handler = HANDLERS.get(request.op) if request.op in MATRIX else None
        if handler is None:
            known = ", ".join(sorted(MATRIX))
            self.connections.error(
                sid, request.cid, "UNKNOWN_OPERATION", f"unknown operation {shown(request.op)!r}; known: {known}",
                request.op,
            )
            return
        try:
            try:
                authorize(self.registry, sid, request.op, request.args)
            except PermissionDenied as denied:
                outcome = self._as_owner(sid, request, denied)
            else:
                outcome = handler(self.ctx, sid, *request.args)
        except REQUEST_ERRORS as e:
            self.connections.error(sid, request.cid, e.code, str(e), request.op)
            return
        except TypeError:  # the count was right (authorize): an argument of a type no check foresaw
            names = ", ".join(MATRIX[request.op].arguments)
            self.connections.error(
                sid, request.cid, "INVALID_REQUEST", f"{request.op}: an argument has the wrong type ({names})",
                request.op,
            )
            return
        except Exception as e:  # a bug, or input no check foresaw: the session goes on
            self._unexpected(sid, request.cid, request.op, e)
            return
        if isinstance(outcome, Routed):
            # one partition result: answer from the link's callback, no task, no future
            if request.op == "set" and self.ctx.tracer.sample():
                answer = functools.partial(self._traced, sid, request.cid, outcome, received_ns)
            else:
                answer = functools.partial(self._answer, sid, request.cid, request.op)
            self.link.route(outcome.path, outcome.operation, answer)
        elif asyncio.iscoroutine(outcome):
            self.connections.spawn(self._finish(sid, request.cid, request.op, outcome))
        else:
            self.connections.respond(sid, request.cid, outcome, request.op)

    def _as_owner(self, sid: str, request: wire.Request, denied: PermissionDenied) -> Any:
        """An update or a removal of one topic refused for the session's roles may still be
        the topic's owner's: routed with the session's principal, for the partition to apply
        only if the topic's OWNER names it (:mod:`topics.owner`; the partition refuses it as
        this gateway would have). Anything else stays refused."""
        permission = OWNER_GRANTS.get(request.op)
        if permission is None or denied.permission is not permission or denied.path is None:
            raise denied
        principal = self.registry.sessions[sid].principal
        if not principal:
            raise denied
        if request.op == "remove":
            path = denied.path
            return Routed(path, RemoveTopics(">" + path, principal))
        outcome = HANDLERS[request.op](self.ctx, sid, *request.args)
        assert isinstance(outcome, Routed)
        # every operation the reference API routes has an owner (the union of all of them does not)
        return Routed(outcome.path, outcome.operation._replace(owner=principal))  # type: ignore[call-arg]

    def _answer(self, sid: str, cid: int, op: str, result: Result) -> None:
        if isinstance(result, Failed):
            self.connections.error(sid, cid, result.code, result.message, op)
        else:
            self.connections.respond(sid, cid, result.value, op)
        self.connections.wake()

    def _traced(self, sid: str, cid: int, routed: Routed, received_ns: int, result: Result) -> None:
        # the update's events came first in the same answer; they are written
        # (with this answer) in the write pass this call schedules
        forwarded, applied, returned = self.link.last_done(routed.path)
        op = routed.operation
        assert isinstance(op, SetValue)
        self.ctx.tracer.unwritten.append(TraceRecord(op.path, op.data, received_ns, forwarded, applied, returned, 0))
        self._answer(sid, cid, "set", result)

    def _written(self) -> None:
        tracer = self.ctx.tracer
        if tracer.unwritten:
            now = time.perf_counter_ns()
            tracer.records += [r._replace(written_ns=now) for r in tracer.unwritten]
            tracer.unwritten.clear()

    async def _finish(self, sid: str, cid: int, op: str, work: Any) -> None:
        try:
            result = await work
        except REQUEST_ERRORS as e:
            self.connections.error(sid, cid, e.code, str(e), op)
        except ray.exceptions.RayTaskError as e:
            cause = e.cause if e.cause is not None else e
            code = getattr(cause, "code", None)
            if isinstance(code, str) and isinstance(cause, Exception):  # one of canopy's typed errors
                self.connections.error(sid, cid, code, str(cause), op)
            elif sid in self.registry.sessions:
                self._unexpected(sid, cid, op, cause if isinstance(cause, Exception) else e)
        except Exception as e:  # never let a bug kill the session silently
            if sid not in self.registry.sessions:
                return  # the session ended while the request was under way: nobody to answer
            self._unexpected(sid, cid, op, e)
        else:
            self.connections.respond(sid, cid, result, op)
        self.connections.wake()

    def _unexpected(self, sid: str, cid: int, op: str, error: Exception) -> None:
        """Answer a request that failed in a way no check foresaw: INTERNAL, with no
        internal detail for the client; the log has the traceback, once per session per
        :data:`UNEXPECTED_LOG_INTERVAL` (the rest are counted in the next line)."""
        self.unexpected += 1
        incident = self.incidents.record(sid, time.monotonic())
        if incident is not None:
            log.error(
                "request %s (%s) of session %s failed unexpectedly%s", cid, op, sid, incident,
                exc_info=(type(error), error, error.__traceback__),
            )
        self.connections.error(sid, cid, "INTERNAL", f"the server could not carry out this {op} request (see its log)", op)


class GatewayActor:
    """The Ray shell: lifecycle, statistics and what the controller and the
    session tree actor push; everything else happens in :class:`Gateway`."""

    def __init__(self, *args: Any) -> None:
        self.core = Gateway(*args)
        self._peers_task: asyncio.Future[None] | None = None
        self._incarnation = new_incarnation()
        announce_start()
        self._started: dict[str, Any] | None = None

    async def incarnation(self) -> str:
        """A token made when this process started: a new one means Ray restarted it."""
        return self._incarnation

    async def start(self) -> dict[str, Any]:
        """Attach to the partitions and listen (once; again after a restart)."""
        from actors import names

        if self._started is None:
            self._started = await self.core.start(ray.get_actor(names.CONTROLLER), ray.get_actor(names.VIEWS))
        return self._started

    async def set_controller(self, controller: Any) -> None:
        """The controller serve made after Ray gave the last one up for good (a new actor under
        the same name: the old handle answers nothing any more)."""
        self.core.ctx.controller = controller

    async def set_services(self, views: Any, session_trees: Any) -> None:
        """The view evaluator and the session tree actor, after one moved to another node."""
        self.core.ctx.views = views
        self.core.ctx.session_trees = session_trees

    async def node(self) -> str:
        """The Ray id of the node this gateway runs on (a restarted controller asks)."""
        return str(ray.get_runtime_context().get_node_id())

    async def set_routes(self, routes: list[Any]) -> None:
        """The controller's new partition map (see :meth:`actors.link.PartitionLink.set_routes`)."""
        self.core.link.set_routes(routes)

    async def set_peers(self, peers: list[Any]) -> None:
        """Every gateway of the instance (this one included), for session-wide operations.

        Answered at once: what the missing-topic handlers learn from the peers (and the fan-out
        links from the controller, which is waiting for this answer) is fetched afterwards, by
        one task at a time, the newest peer list winning."""
        self.core.ctx.peers = peers
        previous = self._peers_task
        self._peers_task = asyncio.ensure_future(self._learn_peers(peers, previous))

    async def _learn_peers(self, peers: list[Any], previous: asyncio.Future[None] | None) -> None:
        if previous is not None and not previous.done():
            previous.cancel()
            with contextlib.suppress(BaseException):
                await previous
        try:
            await self.core.missing.set_peers(peers, self.core.missing.gateway_id)
            await self.core.messaging.learn_peers()
        except Exception as e:
            log.warning("could not learn the other gateways' missing-topic and request handlers: %s", e)
        try:
            await self.core.clients.learn()
        except Exception as e:
            log.warning("could not learn the other gateways' session event listeners: %s", e)
        if self.core.ctx.controller is not None:  # after a restart: learn the fan-out links again
            await self._refresh_fanouts()

    async def _refresh_fanouts(self) -> None:
        """What is pushed to every gateway on a change, asked for again (a gateway that
        starts missed the pushes): the metric collectors, the fan-out links and the remote
        servers' missing-topic filters."""
        try:
            self.core.set_collectors(await self.core.ctx.controller.collector_list.remote())
            self.core.locks.set_table(await self.core.ctx.controller.lock_table.remote())
            self.core.missing.set_fanouts(await self.core.ctx.controller.fanout_routes.remote())
            if self.core.ctx.views is not None:
                self.core.missing.set_remote_filters(await self.core.ctx.views.remote_filters.remote())
        except Exception as e:
            log.warning("could not learn this server's fan-out links, remote servers and metric collectors: %s", e)

    async def set_remote_filters(self, filters: list[Any]) -> None:
        """The remote servers' missing-topic notification filters (see actors/missing_topics.py)."""
        self.core.missing.set_remote_filters(filters)

    async def set_locks(self, table: dict[str, Any]) -> None:
        """The session lock table, after a change (see :mod:`actors.locks`)."""
        self.core.locks.set_table(table)

    async def set_collectors(self, collectors: list[dict[str, Any]]) -> None:
        """The instance's metric collectors, after a change (see :meth:`Gateway.set_collectors`)."""
        self.core.set_collectors(collectors)

    async def set_fanouts(self, fanouts: list[Any]) -> None:
        """This server's fan-out connections (name, actor, link selectors), for missing-topic propagation."""
        self.core.missing.set_fanouts(fanouts)

    async def gateway_id(self) -> str:
        """This gateway process's id among its peers (another after a restart)."""
        return str(self.core.missing.gateway_id)

    # -- missing-topic handlers on other gateways (see actors/missing_topics.py) ---------------

    async def missing_topic_handlers(self) -> list[list[Any]]:
        return self.core.missing.own()

    async def missing_topic_handlers_changed(self, added: list[list[Any]], removed: list[str]) -> None:
        self.core.missing.changed(added, removed)

    async def missing_topic_notify(self, body: dict[str, Any], token: str, origin: str) -> bool:
        return self.core.missing.notify(body, token, origin)

    async def missing_topic_answered(self, wait_id: str, token: str, response: str) -> None:
        self.core.missing.answered(wait_id, token, response)

    # -- request/response messaging across gateways (see actors/messaging.py) -------------------

    async def message_handlers(self) -> list[list[Any]]:
        return self.core.messaging.own()

    async def message_handlers_changed(self, added: list[list[Any]], removed: list[str]) -> None:
        self.core.messaging.changed(added, removed)

    async def message_deliver(self, body: dict[str, Any], kind: str, value: str, origin: str, most: int) -> list[str]:
        return self.core.messaging.deliver(body, kind, value, origin, most)

    async def message_answered(self, request_id: str, responder: str, outcome: list[Any]) -> None:
        self.core.messaging.answered(request_id, responder, outcome)

    async def stop(self) -> None:
        await self.core.stop()

    async def stats(self) -> dict[str, Any]:
        return self.core.stats()

    async def set_security(self, store: dict[str, Any]) -> None:
        self.core.set_security(store)

    async def set_session_trees(self, trees: list[Any]) -> float:
        """Apply new tables; return how long re-evaluating the sessions took (s)."""
        return self.core.set_session_trees(trees)

    async def session_properties(
        self, kind: str, value: str, keys: list[str] | None = None
    ) -> dict[str, dict[str, str]]:
        return self.core.session_properties(kind, value, keys)

    async def change_session_properties(self, kind: str, value: str, changes: dict[str, str | None]) -> int:
        return self.core.change_session_properties(kind, value, changes)

    async def close_sessions(self, kind: str, value: str) -> int:
        return self.core.close_sessions(kind, value)

    # -- client control across gateways (see actors/client_control.py) -------------------------

    async def change_session_roles(self, kind: str, value: str, remove: list[str], add: list[str]) -> int:
        count = self.core.clients.change_roles(kind, value, RoleChange(frozenset(remove), frozenset(add)))
        self.core.connections.wake()
        return count

    async def control_subscriptions(self, kind: str, value: str, selector: str, subscribe: bool) -> int:
        count = await self.core.clients.control_subscriptions(
            kind, value, self.core.registry.limits.selector(selector), subscribe)
        self.core.connections.wake()
        return count

    async def session_listeners(self) -> list[list[Any]]:
        return self.core.clients.own()

    async def session_listeners_changed(self, added: list[list[Any]], removed: list[str]) -> None:
        self.core.clients.changed(added, removed)

    async def session_events(self, token: str, events: list[dict[str, Any]]) -> None:
        self.core.clients.received(token, events)
        self.core.connections.wake()


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector for one bounded burst of work."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def remote_class() -> Any:
    return ray.remote(num_cpus=0, max_restarts=-1)(GatewayActor)


def _rss_bytes() -> int:
    """This process's resident memory (0 where /proc does not tell)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def _libc_malloc_trim() -> Any:
    """glibc's ``malloc_trim``, or ``None`` where the C library has none."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):
        return None


_malloc_trim = _libc_malloc_trim()


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]


def _libc_mallinfo2() -> Any:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        function = libc.mallinfo2
    except (OSError, AttributeError):
        return None
    function.restype = _MallInfo2
    return function


_mallinfo2 = _libc_mallinfo2()


def _heap_in_use() -> int:
    """Bytes the C heap has handed out and not had back (glibc's ``mallinfo2``: every
    arena's chunks in use and the mmapped ones; 0 where there is no such call). Unlike
    the resident size it does not depend on how much freed memory the heap keeps."""
    if _mallinfo2 is None:
        return 0
    info = _mallinfo2()
    return int(info.uordblks + info.hblkhd)
