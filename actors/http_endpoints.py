"""Plain HTTP on a gateway's own port, beside the WebSocket upgrade: health and metrics.

A request to the gateway's port that is not a WebSocket handshake (no ``Upgrade: websocket``)
is answered here, one response per connection (``Connection: close``):

* ``GET /healthz`` -- 200 ``ok``: the process serves (a liveness probe).
* ``GET /readyz`` -- 200 ``ready`` when this gateway's stream to every partition's primary is
  up, else 503 naming the partitions it cannot reach (a readiness probe: during a failover a
  gateway is unready until the partition's new primary answers).
* ``GET /metrics`` -- this gateway's figures in the Prometheus text format (0.0.4): sessions
  open by transport, sessions opened and closed, connections, what the sessions' queues hold
  and what conflation merged, the topic cache and interest, updates and bytes in and out, per
  partition the stream's state, batches, operations and newest message position, the MQTT front
  door's counters, missing-topic requests and notifications, the login guard's counters and the
  process's memory; and what :func:`actors.metrics.gather` adds: the cluster as ``canopy cluster
  status`` shows it, the view evaluator's and the fan-out links' figures and the metric
  collectors' (asked within :data:`GATHER_TIMEOUT`, so a slow controller never holds a scrape
  longer; what does not answer in time is left out). A scrape needs HTTP basic authentication as a
  principal with the global permission VIEW_SERVER (401 with a ``WWW-Authenticate`` challenge
  without credentials or with wrong ones, 403 without the permission), through the same login
  guard as every login, unless ``metrics_anonymous`` is true. Counters end in ``_total`` and
  only grow while the gateway runs (a restarted gateway starts them again, as Prometheus
  expects of a process).

``/console`` and what is under it is the web console (:mod:`actors.console`). Any other path
is 404. The handshake parser (websockets') reads a request of any method, body left unread;
anything but GET is answered 405 with ``Allow: GET`` (HEAD too: a response to it would carry
a body).
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import logging
import os
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

from websockets.datastructures import Headers
from websockets.http11 import Request, Response

from actors import console
from actors.metrics import Family, gather, status_families
from sessions.security import AuthenticationFailed, GlobalPermission

log = logging.getLogger("canopy.gateway")
#: the content type of the Prometheus text format
METRICS_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: seconds a scrape waits for the other actors' figures (the cluster's, the collectors' topic counts)
GATHER_TIMEOUT = 5.0


def _escape_label(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if value != value:  # NaN
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(int(value)) if float(value).is_integer() else repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The Prometheus text exposition of ``families`` (sans-I/O)."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            if labels:
                shown = ",".join(f'{k}="{_escape_label(v)}"' for k, v in labels.items())
                lines.append(f"{family.name}{{{shown}}} {_number(value)}")
            else:
                lines.append(f"{family.name} {_number(value)}")
    return "\n".join(lines) + "\n"


def response(status: int, reason: str, body: str, content_type: str = "text/plain; charset=utf-8",
             extra: Iterable[tuple[str, str]] = ()) -> Response:
    data = body.encode()
    headers = Headers([
        ("Content-Type", content_type), ("Content-Length", str(len(data))), ("Cache-Control", "no-store"),
        ("X-Content-Type-Options", "nosniff"), ("Connection", "close"), *extra,
    ])
    return Response(status, reason, headers, data)


def is_websocket(request: Request) -> bool:
    upgrade = request.headers.get("Upgrade", "")
    return "websocket" in upgrade.lower()


class Endpoints:
    """The plain HTTP side of one gateway (``gateway``: its :class:`~actors.gateway.Gateway`)."""

    def __init__(self, gateway: Any, anonymous: bool = False, timeout: float = GATHER_TIMEOUT) -> None:
        self.gateway = gateway
        self.anonymous = anonymous
        self.timeout = timeout
        self.requests: Counter[str] = Counter()
        #: the other actors' figures being gathered: scrapes that come meanwhile share them
        self._gathering: asyncio.Future[list[Family]] | None = None

    def handle(self, request: Request, address: str, is_open: Callable[[], bool]) -> Response | asyncio.Future[Response]:
        path = request.path.split("?", 1)[0]
        if console.is_console(path):  # the web console's static files (actors/console.py)
            self.requests[console.PREFIX] += 1
            return console.CONSOLE.serve(request)
        known = path if path in ("/healthz", "/readyz", "/metrics") else "other"
        self.requests[known] += 1
        if request.method != "GET":
            return response(405, "Method Not Allowed", f"{request.method[:16]} is not served: GET only\n",
                            extra=[("Allow", "GET")])
        if path == "/healthz":
            return response(200, "OK", "ok\n")
        if path == "/readyz":
            unreachable = self.unreachable()
            if unreachable:
                return response(503, "Service Unavailable",
                                f"not ready: partitions {', '.join(map(str, unreachable))} unreachable\n")
            return response(200, "OK", "ready\n")
        if path == "/metrics":
            if self.anonymous:
                return asyncio.ensure_future(self.metrics())
            return asyncio.ensure_future(self._scrape(request, address, is_open))
        return response(404, "Not Found", "not found: /healthz, /readyz and /metrics are served here\n")

    def unreachable(self) -> list[int]:
        return [channel.index for channel in self.gateway.link.channels
                if channel.stream is None or channel.broken is not None or channel.moving]

    async def _scrape(self, request: Request, address: str, is_open: Callable[[], bool]) -> Response:
        challenge = [("WWW-Authenticate", 'Basic realm="canopy metrics", charset="UTF-8"')]
        credentials = _basic(request.headers.get("Authorization", ""))
        if credentials is None:
            return response(401, "Unauthorized", "credentials needed: a principal with VIEW_SERVER\n", extra=challenge)
        principal, password = credentials
        connections = self.gateway.connections
        try:
            roles = await connections.authenticate(is_open, principal, password, address)
        except AuthenticationFailed:
            return response(401, "Unauthorized", "wrong credentials\n", extra=challenge)
        if not connections.registry.permissions.has(roles, GlobalPermission.VIEW_SERVER):
            return response(403, "Forbidden", f"{principal!r} lacks VIEW_SERVER\n")
        return await self.metrics()

    async def metrics(self) -> Response:
        """The exposition: this gateway's own families, then what the others answer in time.
        One gathering at a time, whatever the number of scrapes (anonymous ones too): each
        waits for the one under way, so the controller is never asked more than once at a time
        by this gateway."""
        own = self.families()
        if self._gathering is None or self._gathering.done():
            self._gathering = asyncio.ensure_future(gather(self.gateway, self.timeout))
        try:
            gathered = await asyncio.shield(self._gathering)
        except Exception:  # a bug: the gateway's own figures are still worth serving
            log.exception("gathering the cluster's figures for /metrics failed")
            gathered = status_families(None)
        return response(200, "OK", render([*own, *gathered]), METRICS_TYPE)

    def families(self) -> list[Family]:
        from canopy import __version__

        gw = self.gateway
        connections, registry, mqtt = gw.connections, gw.registry, gw.mqtt
        internal = connections.internal
        by_transport: Counter[str] = Counter()
        queued = queued_bytes = conflated = 0
        for sid, session in registry.sessions.items():
            if sid in internal:
                continue
            by_transport[session.properties.get("$Transport", "WEBSOCKET")] += 1
            queue = session.queue
            queued += len(queue)
            queued_bytes += queue.bytes
            conflated += queue.conflated
        name = gw.gateway_id
        out = [
            Family("canopy_gateway_info", "gauge", "this gateway: its name and canopy's version",
                   [({"gateway": name, "version": __version__}, 1)]),
            Family("canopy_sessions", "gauge", "sessions open, by transport (WEBSOCKET, MQTT)",
                   [({"transport": t}, n) for t, n in sorted(by_transport.items())]
                   or [({"transport": "WEBSOCKET"}, 0)]),
            Family("canopy_sessions_opened_total", "counter", "sessions opened since the gateway started",
                   [({}, connections.opened)]),
            Family("canopy_sessions_closed_total", "counter", "sessions closed since the gateway started",
                   [({}, connections.closed_count)]),
            Family("canopy_connections", "gauge", "WebSocket connections open (MQTT ones: canopy_mqtt_connections)",
                   [({}, len(connections.streams))]),
            Family("canopy_session_queued_messages", "gauge", "messages waiting in the sessions' queues",
                   [({}, queued)]),
            Family("canopy_session_queued_bytes", "gauge", "bytes waiting in the sessions' queues",
                   [({}, queued_bytes)]),
            Family("canopy_session_conflated_messages", "gauge",
                   "messages conflation merged away in the queues of the sessions open now", [({}, conflated)]),
            Family("canopy_cached_topics", "gauge", "topics this gateway holds for its sessions",
                   [({}, len(registry.cache))]),
            Family("canopy_session_groups", "gauge", "groups of sessions sharing a resolution",
                   [({}, len(registry.groups))]),
            Family("canopy_registered_selectors", "gauge", "distinct selectors registered with the partitions",
                   [({}, len(registry.interest))]),
        ]
        channels = gw.link.channels
        out += [
            Family("canopy_partition_stream_up", "gauge",
                   "whether this gateway's stream to the partition's primary is up (1) or not (0)",
                   [({"partition": str(c.index)}, 0 if c.stream is None or c.broken is not None or c.moving else 1)
                    for c in channels]),
            Family("canopy_partition_batches_total", "counter", "batches this gateway sent the partition",
                   [({"partition": str(c.index)}, c.batches) for c in channels]),
            Family("canopy_partition_operations_total", "counter", "operations this gateway sent the partition",
                   [({"partition": str(c.index)}, c.operations) for c in channels]),
            Family("canopy_partition_message_position", "gauge",
                   "the partition's newest message position as this gateway last heard it",
                   [({"partition": str(c.index)}, c.position) for c in channels]),
        ]
        if mqtt is not None:
            stats = mqtt.stats()
            gauges = {"mqtt_connections": "MQTT connections open",
                      "mqtt_kept_sessions": "MQTT sessions kept for absent clients"}
            counters = {
                "mqtt_publishes_received": "PUBLISH packets received from MQTT clients",
                "mqtt_publishes_sent": "PUBLISH packets sent to MQTT clients",
                "mqtt_publishes_refused": "MQTT publishes refused (permission, payload, limits)",
                "mqtt_publishes_expired": "messages dropped for a session once their Message Expiry Interval passed",
                "mqtt_taken_over_elsewhere": "sessions ended here because another gateway took their client id",
                "mqtt_sessions_replayed": "sessions taken up from their records with what they missed",
                "mqtt_replay_gaps": "sessions taken up whose partitions no longer had all they missed",
                "mqtt_sessions_adopted": "sessions of lost gateways adopted here",
            }
            out += [Family(f"canopy_{key}", "gauge", text, [({}, stats.get(key, 0))]) for key, text in gauges.items()]
            out += [Family(f"canopy_{key}_total", "counter", text, [({}, stats.get(key, 0))])
                    for key, text in counters.items()]
        logins = connections.logins.stats()
        for key in sorted(logins):
            value = logins[key]
            if key == "login_failures" or key in ("login_pairs", "login_addresses", "login_principals",
                                                  "login_trusted"):
                out.append(Family(f"canopy_{key}", "gauge", f"the login guard's {key.removeprefix('login_')}",
                                  [({}, value)]))
            else:
                out.append(Family(f"canopy_{key}_total", "counter",
                                  f"login attempts: {key.removeprefix('login_').replace('_', ' ')}", [({}, value)]))
        out += _traffic(gw) + _missing_topics(gw.missing.stats())
        out.append(Family("canopy_http_requests_total", "counter", "plain HTTP requests to this gateway, by path",
                          [({"path": p}, n) for p, n in sorted(self.requests.items())]))
        out.append(Family("canopy_process_resident_memory_bytes", "gauge", "the gateway process's resident memory",
                          [({}, _rss())]))
        return out


def _traffic(gw: Any) -> list[Family]:
    """Updates and bytes through the gateway (each an integer kept where the work is done)."""
    connections, mqtt = gw.connections, gw.mqtt
    received = [({"transport": "WEBSOCKET"}, connections.bytes_received)]
    sent = [({"transport": "WEBSOCKET"}, connections.bytes_sent)]
    if mqtt is not None:
        received.append(({"transport": "MQTT"}, mqtt.bytes_received))
        sent.append(({"transport": "MQTT"}, mqtt.bytes_sent))
    return [
        Family("canopy_updates_received_total", "counter",
               "sets, appends and edits this gateway's sessions sent on to the partitions (MQTT publishes too)",
               [({}, gw.ctx.updates_received)]),
        Family("canopy_updates_delivered_total", "counter",
               "values and time series events offered to this gateway's sessions, one per subscribed session "
               "(conflation may merge some before they are written)", [({}, gw.registry.updates_delivered)]),
        Family("canopy_received_bytes_total", "counter", "bytes of the clients' WebSocket frames and MQTT packets read",
               received),
        Family("canopy_sent_bytes_total", "counter", "bytes of WebSocket frames and MQTT packets written to the clients",
               sent),
        Family("canopy_delta_saved_bytes_total", "counter",
               "bytes of values not written because the sessions were sent smaller deltas instead (delta streaming)",
               [({}, connections.delta_cache.saved)]),
        Family("canopy_deltas_sent_total", "counter", "values written to sessions as deltas",
               [({}, connections.delta_cache.deltas)]),
        Family("canopy_delta_diffs_total", "counter",
               "deltas computed (one serves every session that had the same value before)",
               [({}, connections.delta_cache.made)]),
        Family("canopy_compressed_values_total", "counter",
               "values written to sessions deflated (their topics' COMPRESSION)", [({}, connections.delta_cache.compressed)]),
        Family("canopy_compression_saved_bytes_total", "counter",
               "bytes of values not written because the sessions were sent them deflated",
               [({}, connections.delta_cache.compressed_saved)]),
    ]


def _missing_topics(stats: dict[str, int]) -> list[Family]:
    figures = [
        ("canopy_missing_topic_handlers", "gauge", "missing-topic handler registrations (every gateway's)",
         "missing_topic_handlers"),
        ("canopy_missing_topic_waiting_requests", "gauge", "this gateway's requests waiting for handlers",
         "missing_topic_waits"),
        ("canopy_missing_topic_requests_held_total", "counter",
         "subscriptions and fetches of this gateway's sessions held for missing-topic handlers",
         "missing_topic_requests_held"),
        ("canopy_missing_topic_requests_cancelled_total", "counter", "held requests a handler cancelled",
         "missing_topic_requests_cancelled"),
        ("canopy_missing_topic_requests_timed_out_total", "counter",
         "held requests no handler answered in time (they proceeded)", "missing_topic_requests_timed_out"),
        ("canopy_missing_topic_notifications_total", "counter",
         "missing-topic notifications handed to this gateway's handler sessions", "missing_topic_notifications"),
    ]
    return [Family(name, kind, text, [({}, stats.get(key, 0))]) for name, kind, text, key in figures]


def _basic(header: str) -> tuple[str, str] | None:
    """The principal and password of an ``Authorization: Basic`` header, or None."""
    scheme, _, encoded = header.partition(" ")
    if scheme.lower() != "basic" or not encoded or len(encoded) > 4096:
        return None
    try:
        decoded = base64.b64decode(encoded.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    principal, colon, password = decoded.partition(":")
    return (principal, password) if colon and principal else None


def _rss() -> int:
    try:
        with open(f"/proc/{os.getpid()}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
