"""The gateway's MQTT front door: MQTT 3.1.1 and 5.0 clients over TCP, as canopy sessions.

Each TCP connection is an :class:`MQTTConnection` (an :class:`asyncio.Protocol`): bytes go
through the sans-I/O codec (:class:`mqtt.codec.Reader`), and each packet becomes what a
native client would have sent. CONNECT authenticates the username and password as a
canopy principal (anonymous without a username) and opens a session in the gateway's
registry (:meth:`actors.connections.Connections.open`), with the MQTT 5 user properties as
session properties and ``$Transport`` ``MQTT``; PUBLISH becomes a ``set`` request with the
payload as text (``raw = "text"``, converted to the topic's type where the topic lives:
:func:`topics.types.from_text`), SUBSCRIBE a ``subscribe`` request per topic filter
(:func:`mqtt.mapping.selector_of`), UNSUBSCRIBE ``unsubscribe``. The requests go through the
gateway's dispatcher, so the authorization matrix, the session's request limits and its
budget apply as to every session; the answers come back as PUBACK, PUBREC, SUBACK and
UNSUBACK reason codes. What the session's queue delivers (a topic's value when a
subscription first sees it, then every update and time series event) is written as PUBLISH
packets: the first as a retained message, at the highest QoS of the session's subscriptions
that match the topic, QoS 1 and 2 ones at most ``mqtt_receive_maximum`` (or the client's
Receive Maximum, if lower) unacknowledged at a time; the rest wait in the session's queue,
where the topics' conflation policies and the session's byte budget bound them.

A session with an expiry outlives its connection: kept at its gateway, its queue filling,
and recorded (:mod:`actors.mqtt_records`) so that any gateway takes it up again; a will is
published when the connection ends without a DISCONNECT (after its delay). MQTT over
WebSocket is :mod:`actors.mqtt_websocket`; what a publish carries to its subscribers besides
the payload, :mod:`mqtt.attributes`. A
malformed packet closes the connection (MQTT 5: after a DISCONNECT with the codec's reason
code). Keep-alive: a client silent for one and a half times its keep-alive is cut off
(MQTT-3.1.2-24).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import functools
import json
import logging
import secrets
import time
from collections import deque
from dataclasses import replace
from typing import TYPE_CHECKING, Any, NamedTuple, cast

from actors.connections import Connections
from actors.settings import InstanceSettings
from canopy import protocol as wire
from mqtt import codec as m
from mqtt.attributes import decode_attributes, encode_attributes, for_subscriber
from mqtt.properties import EMPTY
from mqtt.mapping import MappingError, has_topic_name, parse_shared, path_of, selector_of, topic_of
from mqtt.shared import ShareDirectory, SharedGroup
from sessions.deliveries import SeriesUpdate, Subscribed, Unsubscribed, Update
from sessions.incidents import IncidentLog
from sessions.limits import PropertyLimitError
from sessions.security import AuthenticationFailed, PathPermission
from topics.selectors import Selector
from topics.specification import TopicSpecification
from topics.protocol import AddTopic, Ok, ReadRecent, RecentAnswer, SetValue
from topics.types import TEXT, TopicType, to_text
from topics.types import decode as decode_value
from topics.types import encode as encode_value

if TYPE_CHECKING:
    from actors.mqtt_records import SessionRecords

log = logging.getLogger("canopy.mqtt")

#: the branch of the broker's own figures (each gateway's under gateways/NAME), read-only to MQTT
SYS = "$SYS"
#: where each gateway announces to the others the client identifiers its MQTT CONNECTs take and
#: the shared subscriptions it has members of
ANNOUNCEMENTS = "$MQTT/announcements"
#: seconds between two announcements of a gateway's shared subscriptions (a third of how long
#: the others believe one: mqtt.shared.ShareDirectory.ttl)
SHARES_EVERY = 2.0
#: the largest Topic Alias a client may use towards the gateway (MQTT 5's Topic Alias Maximum)
TOPIC_ALIAS_MAXIMUM = 64
#: seconds between two looks at the session records for sessions whose gateway is gone (a
#: record found so twice in a row, unchanged, is adopted: :meth:`MQTTServer.adopt`)
SWEEP_EVERY = 5.0
#: gateways whose announcements one gateway keeps track of
MAX_GATEWAYS_HEARD = 1024
#: seconds a session taken up from its record waits for a partition's recent messages before it
#: takes the current values of its topics there instead
RECENT_TIMEOUT = 10.0
#: seconds after which an idle session's record is brought up to date anyway (so that the
#: partitions' recent messages still reach back to it)
IDLE_CHECKPOINT = 60.0
WRITE_HIGH = 256 * 1024
WRITE_LOW = 64 * 1024
#: entries of the caches that let many sessions share one message's payload and packet
SHARED_CACHE = 4096
#: seconds between two log lines about one client's refused QoS 0 publishes
REFUSED_LOG_INTERVAL = 10.0
#: canopy error code -> the MQTT 5 reason code of a refused publish or subscription
REASONS = {
    "PERMISSION_DENIED": 0x87, "INVALID_VALUE": 0x99, "NO_SUCH_TOPIC": 0x87, "REFERENCE_TOPIC": 0x87,
    "LIMIT_EXCEEDED": 0x97, "INVALID_SELECTOR": 0x8F, "INVALID_PATH": 0x90,
}
#: MQTT 3.1.1 CONNACK return codes for a refused login
V311_BAD_CREDENTIALS, V311_NOT_AUTHORIZED, V311_UNSUPPORTED, V311_IDENTIFIER_REJECTED = 4, 5, 1, 2


class MQTTServer:
    """The MQTT clients of one gateway: the protocol factory of its TCP listener."""

    def __init__(self, connections: Connections, config: InstanceSettings) -> None:
        self.connections = connections
        self.config = config
        self.create_type = config.mqtt_create_type
        self.receive_maximum = config.mqtt_receive_maximum
        self.max_subscriptions = config.mqtt_max_subscriptions
        self.max_keep_alive = config.mqtt_max_keep_alive
        self.max_packet_size = config.max_frame_size
        self.max_session_expiry = config.mqtt_max_session_expiry
        #: seconds between two records of where a kept session's messages stand (its positions)
        self.checkpoint_interval = config.mqtt_checkpoint_ms / 1000
        #: client identifier -> the connection object still holding its session, gone itself
        self.kept: dict[str, MQTTConnection] = {}
        #: (share name, topic filter) -> the members of that shared subscription here
        self.shares: dict[tuple[str, str], SharedGroup[Any]] = {}
        #: where sessions kept for absent clients are recorded for every gateway (None: nowhere)
        self.store: SessionRecords | None = None
        self.open: set[MQTTConnection] = set()
        #: client identifier -> its connection (a second CONNECT with the identifier takes over)
        self.clients: dict[str, MQTTConnection] = {}
        #: the partition link announcements go through (:meth:`watch_announcements`)
        self.link: Any = None
        self._share_timer: asyncio.TimerHandle | None = None
        #: sessions ended here because another gateway took their client identifier
        self.taken_elsewhere = 0
        self.refused = IncidentLog(REFUSED_LOG_INTERVAL)
        #: this gateway as the others hear of it and its records name it: its name and a token
        #: of this run (a gateway restarted under the same name is another run: the sessions its
        #: records name from before are no one's)
        self.run = f"{connections.gateway_id}.{secrets.token_hex(4)}"
        #: the gateways (runs) with members of each shared subscription, this one's included
        self.directory = ShareDirectory(self.run, time.monotonic, ttl=3 * SHARES_EVERY)
        #: run -> when it was last heard (every gateway announces itself every SHARES_EVERY)
        self.heard_at: dict[str, float] = {}
        #: when this gateway last heard its own announcement (the topic they go by works)
        self._heard_self = 0.0
        #: client identifier -> when another gateway announced a CONNECT of it
        self.connected_elsewhere: dict[str, float] = {}
        #: client identifier -> a record whose gateway is gone, as the last sweep found it
        self._orphans: dict[str, str] = {}
        self._sweep_timer: asyncio.TimerHandle | None = None
        #: sessions whose gateway was lost, adopted here from their records
        self.adopted = 0
        #: id(value) -> (value, its type, its payload); (message, version, ...) -> (its token, its
        #: QoS 0 PUBLISH bytes): what many sessions' deliveries of one message share
        self._payloads: dict[int, tuple[bytes, TopicType, bytes]] = {}
        self.packets: dict[tuple[Any, ...], tuple[object, bytes, m.Properties]] = {}
        self.publishes_refused = 0
        #: PUBLISH packets received from clients and sent to them
        self.received = 0
        self.sent = 0
        #: bytes of MQTT packets read from and written to the clients (over TCP, TLS or WebSocket)
        self.bytes_received = self.bytes_sent = 0
        #: messages dropped for a session because their Message Expiry Interval passed first
        self.expired = 0
        #: sessions taken up from their record whose missed messages came from the partitions'
        #: recent messages, and those for which some partition no longer had them all
        self.replayed = 0
        self.replay_gaps = 0
        self._assigned = 0

    # -- what the gateways tell each other: client identifiers taken, shared subscriptions --------

    def watch_announcements(self, link: Any) -> None:
        """Hear what the other gateways announce (:data:`ANNOUNCEMENTS`): the client identifiers
        their CONNECTs take (a session held here for one ends: MQTT-3.1.4-3), and the shared
        subscriptions they have members of (:class:`~mqtt.shared.ShareDirectory`). An internal
        session of this gateway subscribes to the topic they are announced on."""
        self.link = link
        link.route(ANNOUNCEMENTS, AddTopic(ANNOUNCEMENTS, "JSON", {"CONFLATION": "off", "PERSISTENT": "false"}))
        link.flush()
        session = self.connections.open({}, "", frozenset({"ADMINISTRATOR"}), "", "INTERNAL")
        watch = _AnnouncementWatch(self, session.id)
        self.connections.by_session[session.id] = watch
        self.connections.internal.add(session.id)
        self.connections.submit(watch, wire.Request(1, "subscribe", [">" + ANNOUNCEMENTS]), time.perf_counter_ns())
        self.connections.received()
        self._share_timer = asyncio.get_running_loop().call_later(SHARES_EVERY, self._shares_due)
        self._sweep_timer = asyncio.get_running_loop().call_later(SWEEP_EVERY, self._sweep_due)

    def _tell(self, announcement: dict[str, Any]) -> None:
        """Announce to every gateway (a value of :data:`ANNOUNCEMENTS` not retained: delivered,
        kept nowhere)."""
        if self.link is None:
            return
        data = encode_value(TopicType.JSON, {**announcement, "gateway": self.run})
        self.link.route(ANNOUNCEMENTS, SetValue(ANNOUNCEMENTS, data, False, None, False, False))
        self.link.flush()

    def announce(self, client_id: str, principal: str, resumed: bool) -> None:
        """Tell the other gateways this one has just taken ``client_id``."""
        self._tell({"kind": "connect", "client": client_id, "principal": principal, "resumed": resumed})

    def _announce_shares(self) -> None:
        """Tell the other gateways which shared subscriptions this one has members of (every
        time, so that they know this gateway is there: see :meth:`_sweep`)."""
        self._tell({"kind": "shares", "groups": [list(g) for g in sorted(self.shares)]})

    def _shares_due(self) -> None:
        self._announce_shares()
        self._share_timer = asyncio.get_running_loop().call_later(SHARES_EVERY, self._shares_due)

    def _shares_changed(self) -> None:
        if self.link is not None:
            asyncio.get_running_loop().call_soon(self._announce_shares)

    def heard(self, announced: Any) -> None:
        """An announcement of a gateway (this one's own included, which change nothing)."""
        if not isinstance(announced, dict):
            return
        gateway = announced.get("gateway")
        if not isinstance(gateway, str):
            return
        now = time.monotonic()
        if gateway == self.run:
            self._heard_self = now
            return
        if len(self.heard_at) < MAX_GATEWAYS_HEARD or gateway in self.heard_at:
            self.heard_at[gateway] = now
        kind = announced.get("kind")
        client = announced.get("client")
        if kind == "connect" and isinstance(client, str):
            if len(self.connected_elsewhere) >= MAX_GATEWAYS_HEARD * 16:
                self.connected_elsewhere = {c: t for c, t in self.connected_elsewhere.items()
                                            if now - t <= 3 * SWEEP_EVERY}
            self.connected_elsewhere[client] = now
        if kind == "connect":
            self._taken_over(announced)
        elif kind == "shares":
            groups = announced.get("groups")
            if isinstance(groups, list):
                self.directory.heard(gateway, [
                    (g[0], g[1]) for g in groups
                    if isinstance(g, list) and len(g) == 2 and all(isinstance(x, str) for x in g)
                ])

    def _taken_over(self, announced: dict[str, Any]) -> None:
        """Another gateway took a client identifier: a session of the same principal held
        here for it ends, its connection with DISCONNECT 0x8E; its will is published unless the
        session was resumed there (its record is the other gateway's now: left alone)."""
        client_id = announced.get("client")
        holder = self.clients.get(client_id) if isinstance(client_id, str) else None
        if holder is None or holder.session_id is None:
            holder = self.kept.get(client_id) if isinstance(client_id, str) else None
        if holder is None or holder.principal != announced.get("principal"):
            return
        self.taken_elsewhere += 1
        holder._recorded = False  # the record is the other gateway's now
        holder.ended = True
        if announced.get("resumed"):  # the session goes on there: no will
            holder.disconnected = True
            if holder._will_timer is not None:
                holder._will_timer.cancel()
                holder._will_timer = None
        if holder.transport is not None:
            holder._disconnect(0x8E, "another connection took over this client identifier, at another gateway")
        else:
            holder._expire()

    # -- sessions whose gateway is gone ----------------------------------------------------------

    def _sweep_due(self) -> None:
        self._sweep_timer = asyncio.get_running_loop().call_later(SWEEP_EVERY, self._sweep_due)
        self.connections.spawn(self._sweep())

    async def _sweep(self) -> None:
        """Adopt the sessions whose gateway is gone: a record whose gateway has not been heard
        for ``3 * SHARES_EVERY`` (or is this gateway's own from before it restarted), found so
        unchanged by two sweeps in a row. One gateway sweeps: the first by name of those heard."""
        me = self.run
        now = time.monotonic()
        ttl = 3 * SHARES_EVERY
        alive = {g for g, at in self.heard_at.items() if now - at <= ttl} | {me}
        # only while its own announcements come back (else it would take every gateway for gone)
        if self.store is None or min(alive) != me or now - self._heard_self > ttl:
            self._orphans = {}
            return
        try:
            records = await self.store.every()
        except Exception as e:  # the next sweep
            log.debug("could not read the MQTT session records: %s", e)
            return
        orphans: dict[str, str] = {}
        for client_id, record in records:
            try:
                owner = record.get("gateway")
                if (owner in alive or client_id in self.clients or client_id in self.kept
                        or now - self.connected_elsewhere.get(client_id, -1e9) <= 3 * SWEEP_EVERY
                        or (owner is None and record.get("left") is None)):  # a record of an older version
                    continue
                seen = json.dumps(record, sort_keys=True)
                if self._orphans.get(client_id) != seen:
                    orphans[client_id] = seen
                    continue
                again = await self.store.load(client_id)  # as it is now, not as the sweep began
                if again is not None and json.dumps(again, sort_keys=True) == seen and client_id not in self.clients \
                        and client_id not in self.kept:
                    self.adopt(client_id, again)
            except Exception:  # one bad record must not stop the others, nor later sweeps
                log.exception("the MQTT session record of client %r could not be adopted", client_id)
        self._orphans = orphans

    def adopt(self, client_id: str, record: dict[str, Any]) -> bool:
        """Hold here a session whose gateway is gone, as if its connection had just ended:
        subscribed again (missing nothing: :meth:`MQTTConnection._restore`), kept until its
        expiry (from when its client left, or now), its will published when due, for its client
        to resume at any gateway. ``False`` when it had expired or its principal is no more."""
        if client_id in self.clients or client_id in self.kept or self.store is None:
            return False
        security = self.connections.registry.security
        principal = record.get("principal") or ""
        known = security.principals.get(principal) if principal else None
        if (principal and known is None) or (not principal and not security.anonymous_allowed):
            self.store.drop(client_id)
            return False
        roles = known.roles if known is not None else security.anonymous_roles
        properties = record.get("properties")
        user = {k: v for k, v in properties.items() if isinstance(k, str) and isinstance(v, str)} \
            if isinstance(properties, dict) else {}
        connection = MQTTConnection(self)
        connection.version = m.MQTT_5 if record.get("version") == m.MQTT_5 else m.MQTT_3_1_1
        connection.address = str(record.get("address") or "")
        session = self.connections.open(user, principal, roles, connection.address, "MQTT", **{"$ClientId": client_id})
        connection.session_id = session.id
        self.connections.by_session[session.id] = connection
        connection.client_id, connection.principal, connection.user_properties = client_id, principal, user
        connection.expiry = min(int(record.get("expiry") or 0), self.max_session_expiry)
        now = time.time() * 1000
        recorded = record.get("left")
        left = recorded if isinstance(recorded, (int, float)) else now
        if not connection.expiry or not connection._restore({**record, "left": left}):
            self.connections.forget(connection)
            connection.session_id = None
            self.store.drop(client_id)
            return False
        connection.will = _will_of(record.get("will"))
        connection._keep(left)
        if connection.will is not None:
            delay = (connection.will.properties.will_delay_interval or 0) - (now - left) / 1000
            if delay > 0:
                connection._will_timer = asyncio.get_running_loop().call_later(
                    min(delay, 2**31 // 1000), connection._will_due)
            else:
                connection._will_due()
        self.adopted += 1
        log.warning("MQTT session of client %r adopted from its record: its gateway %s is gone",
                    client_id, record.get("gateway"))
        self.connections.wake()
        return True

    def group(self, share: str, topic_filter: str) -> SharedGroup[Any]:
        """The shared subscription group ``$share/share/topic_filter`` at this gateway."""
        key = (share, topic_filter)
        group = self.shares.get(key)
        if group is None:
            group = self.shares[key] = SharedGroup(key=key)
            self._shares_changed()
        return group

    def leave(self, group: SharedGroup[Any] | None, member: MQTTConnection) -> None:
        if group is None:
            return
        group.leave(member)
        if not len(group):
            self.shares = {k: g for k, g in self.shares.items() if g is not group}
            self._shares_changed()

    def payload(self, value_type: TopicType, value: bytes) -> bytes:
        """A value as MQTT payload text; one conversion for every session it goes to."""
        key = id(value)
        known = self._payloads.get(key)
        if known is not None and known[0] is value and known[1] is value_type:
            return known[2]
        payload = to_text(value_type, value)
        if len(self._payloads) >= SHARED_CACHE:
            self._payloads.clear()
        self._payloads[key] = (value, value_type, payload)
        return payload

    def remember_packet(self, key: tuple[Any, ...], token: object, data: bytes, properties: m.Properties) -> None:
        if len(self.packets) >= SHARED_CACHE:
            self.packets.clear()
        self.packets[key] = (token, data, properties)

    def protocol(self) -> MQTTConnection:
        return MQTTConnection(self)

    def assign_client_id(self) -> str:
        self._assigned += 1
        return f"canopy-{self.connections.gateway_id}-{self._assigned:x}"

    def close_all(self) -> None:
        for timer in (self._share_timer, self._sweep_timer):
            if timer is not None:
                timer.cancel()
        self._share_timer = self._sweep_timer = None
        for connection in list(self.open):
            if connection.session_id is None:
                connection.abort()

    def stats(self) -> dict[str, Any]:
        return {
            "mqtt_connections": len(self.open), "mqtt_kept_sessions": len(self.kept),
            "mqtt_publishes_received": self.received, "mqtt_publishes_sent": self.sent,
            "mqtt_publishes_refused": self.publishes_refused, "mqtt_publishes_expired": self.expired,
            "mqtt_taken_over_elsewhere": self.taken_elsewhere,
            "mqtt_sessions_replayed": self.replayed, "mqtt_replay_gaps": self.replay_gaps,
            "mqtt_sessions_adopted": self.adopted,
        }


class MQTTConnection(asyncio.Protocol):
    """One MQTT client: its packets in, its session's deliveries out."""

    def __init__(self, server: MQTTServer) -> None:
        self.server = server
        self.connections = server.connections
        self.reader = m.Reader(server.max_packet_size)
        #: where the bytes go: the TCP (or TLS) transport, or a :class:`WebSocketPipe`
        self.transport: Any = None
        self.version = m.MQTT_3_1_1
        self.address = ""
        self.counted = False
        self.session_id: str | None = None
        self.client_id = ""
        self.closing = False
        self.ended = False  # the session ended with the connection, or moved to another
        self.disconnected = False  # a DISCONNECT came: no will
        self.will: m.Will | None = None
        #: the MQTT 5 user properties of its CONNECT (its session's properties), for its record
        self.user_properties: dict[str, str] = {}
        # what Connections keeps for every session's connection
        self.in_flight = 0
        self.wide_in_flight = 0
        self.waiting: deque[tuple[wire.Request, int]] = deque()
        self.outstanding: dict[int, int] = {}
        self._cid = 0
        #: request cid -> what it was for: ("publish", qos, packet id), ("subscribe", packet id, index), ...
        self.pending: dict[int, tuple[Any, ...]] = {}
        self.subacks: dict[int, list[int]] = {}
        self.unsubacks: dict[int, list[int]] = {}
        self.acks_left: dict[int, int] = {}
        #: topic filter -> (its selector, its options)
        #: topic filter -> (its selector, its options, its subscription identifier or 0, the
        #: shared subscription group it makes the session a member of, or None)
        self.subscriptions: dict[str, tuple[Selector, m.SubscriptionOptions, int, SharedGroup[Any] | None]] = {}
        #: the filters whose first answer (the topics there were then) has been written
        self.established: set[str] = set()
        #: the message (token) a shared subscription's decision was asked for last, and the answer
        self._shared_answer: tuple[object, bool] | None = None
        #: delivery alias -> [session path, topic name, value type, QoS, retained message wanted,
        #: the PUBLISH properties (MQTT 5: the matching subscriptions' identifiers), the shared
        #: subscription groups when only those match]
        self.topics: dict[int, list[Any]] = {}
        self.inbound_aliases: dict[int, str] = {}
        #: topic aliases this server may still assign on this connection (MQTT 5: the client's
        #: Topic Alias Maximum, at most 64), and those assigned: topic name bytes -> alias
        self.alias_room = 0
        self.outbound_aliases: dict[bytes, int] = {}
        self.received_qos2: set[int] = set()
        #: packet id -> the QoS 1 or 2 PUBLISH sent and not acknowledged (True once PUBREC came)
        self.inflight: dict[int, bool] = {}
        #: packet id -> that PUBLISH, to send again (DUP) when a kept session is resumed
        self.unacked: dict[int, m.Publish] = {}
        #: packet id -> where that PUBLISH's message stands in its partition (Update.mark)
        self.unacked_marks: dict[int, tuple[int, int]] = {}
        #: partition -> message position: every message there up to it that this session was
        #: to get has been delivered (as last recorded; see :meth:`_positions`)
        self.positions: dict[int, int] = {}
        self._checkpoint_timer: asyncio.TimerHandle | None = None
        self._left: float | None = None
        #: a session taken up from its record: partition -> the recorded position it reads that
        #: partition's recent messages from, until the partition answers (:meth:`_read_recent`)
        self.replaying: dict[int, int] = {}
        #: the values that came with its subscriptions from those partitions, kept back meanwhile
        #: restore subscriptions not answered yet; -1 once the recent messages were asked for
        self._restoring = 0
        self._gapped = False
        #: set once a session taken up from its record has what it missed (a CONNECT that
        #: resumes it waits for that: :meth:`_connect`)
        self.restored: asyncio.Event | None = None
        #: a message (or an ack) went since the last record: its positions may have moved
        self._moved = False
        self._saved_at = 0.0
        #: seconds the session outlives its connection (MQTT 5's Session Expiry Interval; MQTT
        #: 3.1.1's clean session 0: mqtt_max_session_expiry); 0: it ends with the connection
        self.expiry = 0
        self._expiry_timer: asyncio.TimerHandle | None = None
        self._will_timer: asyncio.TimerHandle | None = None
        self.principal = ""
        self._recorded = False  # the session is in the replicated records
        self.send_quota = server.receive_maximum
        self.client_max_packet = m.MAX_PACKET_SIZE
        self._next_pid = 0
        self.backlog: deque[object] = deque()
        #: PUBLISH packets of this write pass, written together (:meth:`_flush`)
        self._chunks: list[bytes] = []
        self.paused = False
        self.keep_alive = 0.0
        self.last_heard = time.monotonic()
        self._timer: asyncio.TimerHandle | None = None

    # -- asyncio.Protocol ------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        transport.set_write_buffer_limits(WRITE_HIGH, WRITE_LOW)
        peer = transport.get_extra_info("peername")
        address = str(peer[0]) if peer else ""
        self.attach(transport, address)
        refusal = self.connections.admit_connection(address)
        if refusal is not None:
            log.info("MQTT connection from %s refused: %s", address, refusal)
            transport.abort()
            return
        self.counted = True
        self.connections.others += 1

    def attach(self, transport: Any, address: str) -> None:
        """Start on ``transport`` (TCP's, or a :class:`WebSocketPipe`): CONNECT is due
        within ``hello_timeout_ms``."""
        self.transport = transport
        self.address = address
        self.server.open.add(self)
        self._timer = asyncio.get_running_loop().call_later(self.connections.hello_timeout, self._no_connect)

    def _no_connect(self) -> None:
        if self.session_id is None and not self.closing:
            self.abort()

    def data_received(self, data: bytes) -> None:
        self.last_heard = time.monotonic()
        self.server.bytes_received += len(data)
        try:
            packets = self.reader.feed(data)
        except m.MQTTError as e:
            for packet in e.packets:
                if self.closing:
                    break
                self._packet(cast(m.Packet, packet))
            self._malformed(e)
            self.connections.received()
            return
        for packet in packets:
            if self.closing:
                break
            try:
                self._packet(packet)
            except Exception as e:  # a bug, or input no check foresaw: this connection ends, no other
                log.exception("MQTT packet %s of %s failed unexpectedly", type(packet).__name__, self.address)
                self._disconnect(0x83, f"the server could not handle this {type(packet).__name__.upper()}: {e}")
        self.connections.received()

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        session = self.connections.registry.sessions.get(self.session_id or "")
        if session is not None:
            self.write(session)
            self.connections.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.open.discard(self)
        if self._timer is not None:
            self._timer.cancel()
        if self.counted:
            self.counted = False
            self.connections.others -= 1
            self.connections.connection_closed(self.address)
        if self.server.clients.get(self.client_id) is self:
            del self.server.clients[self.client_id]
        keep = self.session_id is not None and self.expiry > 0 and not self.ended
        if keep and len(self.server.kept) >= self.connections.max_connections:
            log.warning("MQTT session %s ends with its connection: this gateway keeps %d sessions already "
                        "(max_connections)", self.session_id, len(self.server.kept))
            keep = False
        if self.session_id is not None and not self.disconnected and self.will is not None:
            delay = self.will.properties.will_delay_interval or 0
            if delay and keep:  # MQTT 5's Will Delay Interval: unless the session is resumed first
                self._will_timer = asyncio.get_running_loop().call_later(
                    min(delay, self.expiry, 2**31 // 1000), self._will_due
                )
            else:
                self._publish_will(self.will)
                self.will = None  # published: not again by a gateway that adopts the session
        self.connections.received()  # the will's request goes out
        if keep:
            self._keep()
        else:
            if self.session_id is not None:
                self._leave_groups()
                self._drop_record()
            self.connections.dropped(self)
        self.connections.wake()

    def _keep(self, left: float | None = None) -> None:
        """The connection is gone (at ``left``, ms, or now), its session stays for ``expiry``
        seconds from then: subscribed, its queue filling within its budget, for a CONNECT with
        the client identifier and clean start 0 to resume (:meth:`_adopt`)."""
        now = time.time() * 1000
        left = now if left is None else left
        self.transport = None
        self.closing = False  # ends as a connection's session would: over its budget, at shutdown
        # what its client asked and was not started goes, not the re-subscriptions of a restore
        self.waiting = deque(r for r in self.waiting if self.pending.get(r[0].cid, ("",))[0] == "restore")
        previous = self.server.kept.get(self.client_id)
        if previous is not None and previous is not self:
            previous._expire()
        self.server.kept[self.client_id] = self
        self._save(left=left)  # where its messages stand, too (it still gets them)
        remaining = max(self.expiry - (now - left) / 1000, 0)
        self._expiry_timer = asyncio.get_running_loop().call_later(min(remaining, 2**31 // 1000), self._expire)
        log.info("MQTT session %s (client %r) kept %d s for its client to resume it",
                 self.session_id, self.client_id, self.expiry)

    def _will_due(self) -> None:
        self._will_timer = None
        if self.will is not None and self.session_id is not None:
            self._publish_will(self.will)
            self.will = None  # published: not again by a gateway that adopts the session
            self._save()
            self.connections.received()

    def _expire(self) -> None:
        """A kept session's time is up (or another took its client identifier): it ends (its
        delayed will, if any, is published first: MQTT-3.1.3-9)."""
        if self._will_timer is not None:
            self._will_timer.cancel()
            self._will_due()
        if self._expiry_timer is not None:
            self._expiry_timer.cancel()
            self._expiry_timer = None
        if self.server.kept.get(self.client_id) is self:
            del self.server.kept[self.client_id]
        if self.restored is not None:
            self.restored.set()  # nothing more to wait for
        if self.session_id is not None and self.connections.by_session.get(self.session_id) is self:
            self.closing = True
            self._leave_groups()
            self._drop_record()
            self.connections.forget(self)
            self.connections.wake()

    def _adopt(self, old: MQTTConnection) -> None:
        """Resume the session ``old`` holds (kept, or still connected: taken over); a will
        still waiting for its delay is not published."""
        if old._will_timer is not None:
            old._will_timer.cancel()
            old._will_timer = None
        if old._expiry_timer is not None:
            old._expiry_timer.cancel()
            old._expiry_timer = None
        if self.server.kept.get(old.client_id) is old:
            del self.server.kept[old.client_id]
        if old.replaying and old.session_id is not None:  # it waited its time: the rest as current values
            for partition, since in list(old.replaying.items()):
                old._recent_answer(partition, since, None)
        for name in ("session_id", "subscriptions", "established", "topics", "inflight", "unacked", "received_qos2",
                     "backlog", "_next_pid", "principal", "_recorded", "unacked_marks", "positions",
                     "user_properties", "_left"):
            setattr(self, name, getattr(old, name))
        old.session_id = None
        old.ended = True
        for entry in self.subscriptions.values():
            if entry[3] is not None:
                entry[3].replace(old, self)
        self.connections.by_session[self.session_id or ""] = self

    def _leave_groups(self) -> None:
        for entry in self.subscriptions.values():
            self.server.leave(entry[3], self)

    # -- what Connections asks of a session's connection --------------------------------------

    def pause_reading(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.transport is not None and not self.closing:
            self.transport.resume_reading()

    def kept_on_drop(self) -> bool:
        return False

    def end(self, code: str, message: str, ws_code: int) -> None:
        """The session ended (its queue over its budget, the server stopping, another session
        closed it): say why, close."""
        reason = (0x8B if code == "SERVER_SHUTDOWN" else 0x97 if code in ("QUEUE_LIMIT", "LIMIT_EXCEEDED")
                  else 0x98 if code == "CLOSED_BY_CLIENT_CONTROL" else 0x80)  # 0x98: Administrative action
        self.ended = True
        self._leave_groups()
        if self.transport is None:  # a kept session: nobody to tell
            self._expire()
            return
        self._disconnect(reason, f"{code}: {message}")

    def respond(self, cid: int, result: Any) -> None:
        self._answered(cid, 0x00, "")

    def refuse(self, cid: int, code: str, message: str) -> None:
        self._answered(cid, REASONS.get(code, 0x80), f"{code}: {message}")

    def write(self, session: Any) -> None:
        """Write what the session's queue holds, as far as the socket and the QoS window allow."""
        if self.transport is None or self.closing:
            return
        queue = session.queue
        try:
            while not self.paused:
                if not self.backlog:
                    if not len(queue):
                        return
                    self.backlog.extend(queue.take())
                    if not self.backlog:
                        return
                item = self.backlog[0]
                if not self._deliver(item):
                    return  # the QoS window is full: on when the client acknowledges
                self.backlog.popleft()
                if len(self._chunks) >= 256:
                    self._flush()
        except Exception as e:  # a bug, or a value no check foresaw: this connection ends, no other
            log.exception("writing to MQTT session %s failed unexpectedly", self.session_id)
            self._chunks.clear()
            self._disconnect(0x83, f"the server could not deliver a message: {type(e).__name__}")
        finally:
            self._flush()

    def _flush(self) -> None:
        """Write the PUBLISH packets gathered by a write pass, as one write."""
        if self._chunks:
            data = b"".join(self._chunks) if len(self._chunks) > 1 else self._chunks[0]
            self._chunks.clear()
            if self.transport is not None:
                self.server.bytes_sent += len(data)
                self.transport.write(data)

    # -- packets in ---------------------------------------------------------------------------

    def _packet(self, packet: m.Packet) -> None:
        if self.session_id is None:
            if isinstance(packet, m.Connect):
                if self.transport is not None:
                    self.transport.pause_reading()  # nothing more until the session is open
                self.connections.spawn(self._connect(packet))
            else:
                self.abort()  # MQTT-3.1.0-1: the first packet is CONNECT
            return
        if isinstance(packet, m.Publish):
            self._publish(packet)
        elif isinstance(packet, m.Puback):
            self._acknowledged(packet.packet_id)
        elif isinstance(packet, m.Pubrec):
            if packet.reason_code >= 0x80:
                self._acknowledged(packet.packet_id)
            elif packet.packet_id in self.inflight:
                self.inflight[packet.packet_id] = True
                self.unacked.pop(packet.packet_id, None)
                self.unacked_marks.pop(packet.packet_id, None)
                self._send(m.Pubrel(packet.packet_id))
            else:
                self._send(m.Pubrel(packet.packet_id, 0x92 if self.version == m.MQTT_5 else 0))
        elif isinstance(packet, m.Pubcomp):
            self._acknowledged(packet.packet_id)
        elif isinstance(packet, m.Pubrel):
            known = packet.packet_id in self.received_qos2
            self.received_qos2.discard(packet.packet_id)
            self._send(m.Pubcomp(packet.packet_id, 0 if known or self.version != m.MQTT_5 else 0x92))
        elif isinstance(packet, m.Subscribe):
            self._subscribe(packet)
        elif isinstance(packet, m.Unsubscribe):
            self._unsubscribe(packet)
        elif isinstance(packet, m.Pingreq):
            self._send(m.Pingresp())
        elif isinstance(packet, m.Disconnect):
            self.disconnected = packet.reason_code != 0x04  # 0x04: disconnect with will message
            if self.version == m.MQTT_5 and packet.properties.session_expiry_interval is not None:
                self.expiry = min(packet.properties.session_expiry_interval, self.server.max_session_expiry)
            self.closing = True
            if self.transport is not None:
                self.transport.close()
        else:  # CONNECT again, or a packet only a server sends
            self._disconnect(0x82, f"a client may not send {type(packet).__name__.upper()} now")

    async def _connect(self, connect: m.Connect) -> None:
        self.version = connect.protocol_level
        v5 = self.version == m.MQTT_5
        client_id = connect.client_id
        assigned = None
        if not client_id:
            if not connect.clean_start and not v5:
                self._refuse_connect(V311_IDENTIFIER_REJECTED, 0x85, "an empty client identifier needs a clean session")
                return
            client_id = assigned = self.server.assign_client_id()
        user = {k: v for k, v in connect.properties.user_properties} if v5 else {}
        try:
            self.connections.registry.limits.user_properties(user)
            password = connect.password.decode() if connect.password is not None else None
        except (PropertyLimitError, UnicodeDecodeError) as e:
            self._refuse_connect(V311_NOT_AUTHORIZED, 0x99 if isinstance(e, UnicodeDecodeError) else 0x83, str(e))
            return
        try:
            roles = await self.connections.authenticate(
                lambda: not self.closing, connect.username, password, self.address
            )
        except AuthenticationFailed as e:
            bad = connect.username is not None
            self._refuse_connect(
                V311_BAD_CREDENTIALS if bad else V311_NOT_AUTHORIZED, 0x86 if bad else 0x87, str(e)
            )
            return
        if self.closing or self.transport is None:
            return
        principal = connect.username or ""
        record = None
        if (not connect.clean_start and self.server.store is not None and client_id not in self.server.kept
                and client_id not in self.server.clients):
            record = await self.server.store.load(client_id)  # a session another gateway (or this one) kept
            if self.closing or self.transport is None:
                return
            if record is not None and record.get("principal") != principal:
                self._refuse_connect(V311_IDENTIFIER_REJECTED, 0x85, "this client identifier is another principal's")
                return
        holder = self.server.kept.get(client_id) or self.server.clients.get(client_id)
        if holder is not None and holder.restored is not None and not holder.restored.is_set():
            # a session being taken up from its record is resumed once it has what it missed
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(holder.restored.wait(), 3 * RECENT_TIMEOUT)
            if self.closing or self.transport is None:
                return
        previous = self.server.clients.get(client_id)
        if previous is self:
            previous = None
        kept = previous if previous is not None and previous.session_id is not None else self.server.kept.get(client_id)
        if kept is not None and kept.principal != principal:
            # another principal's session: neither taken over nor ended by this login
            self._refuse_connect(V311_IDENTIFIER_REJECTED, 0x85, "this client identifier is another principal's")
            return
        if previous is not None:
            previous.ended = True  # its session is resumed here, or ended below: not kept
            previous._disconnect(0x8E, "another connection took over this client identifier")
        self.server.clients[client_id] = self
        self.client_id = client_id
        self.principal = principal
        resumed = kept is not None and not connect.clean_start
        if resumed:
            assert kept is not None
            self._adopt(kept)
        else:
            if kept is not None:
                kept.ended = True
                kept._expire()
            session = self.connections.open(
                user, principal, roles, self.address, "MQTT", **{"$ClientId": client_id}
            )
            self.session_id = session.id
            self.connections.by_session[session.id] = self
        asked = connect.properties.session_expiry_interval if v5 else (0 if connect.clean_start else 2**32 - 1)
        self.expiry = min(asked or 0, self.server.max_session_expiry)
        self.user_properties = user
        self.will = connect.will
        if record is not None and not resumed:  # (a session adopted here meanwhile was resumed above)
            resumed = self._restore(record)
        if self.server.store is not None:
            if self.expiry:
                self._save()
            elif (connect.clean_start and assigned is None) or record is not None:
                self.server.store.drop(client_id)  # a session recorded before ends (clean start), or it expired
        keep_alive = connect.keep_alive
        properties = connect.properties
        if v5:
            if properties.receive_maximum:
                self.send_quota = min(self.send_quota, properties.receive_maximum)
            if properties.maximum_packet_size:
                self.client_max_packet = properties.maximum_packet_size
            # topic aliases for what this server sends: as many as the client takes, at most 64
            self.alias_room = min(properties.topic_alias_maximum or 0, TOPIC_ALIAS_MAXIMUM)
        server_keep_alive = None
        if keep_alive == 0 or keep_alive > self.server.max_keep_alive:
            if v5:
                server_keep_alive = keep_alive = self.server.max_keep_alive
        self.keep_alive = keep_alive * 1.5
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self.keep_alive:
            self._timer = asyncio.get_running_loop().call_later(self.keep_alive, self._check_alive)
        if v5:
            ack = m.Connack(resumed, 0, m.Properties(
                receive_maximum=self.server.receive_maximum, maximum_packet_size=self.server.max_packet_size,
                topic_alias_maximum=TOPIC_ALIAS_MAXIMUM, assigned_client_identifier=assigned,
                server_keep_alive=server_keep_alive, retain_available=1, wildcard_subscription_available=1,
                subscription_identifier_available=1, shared_subscription_available=1,
            ))
        else:
            ack = m.Connack(resumed, 0)
        self._send(ack)
        self.server.announce(client_id, principal, resumed)
        if resumed:
            self._resend()
        self.transport.resume_reading()

    def _restore(self, record: dict[str, Any]) -> bool:
        """Take up a session kept in the replicated record (its gateway restarted or was lost):
        subscribe again to its filters (their topics' values come as retained messages: what
        was published while no gateway held the session is not queued anywhere). ``False``
        when the record had expired."""
        left = record.get("left")
        expiry = int(record.get("expiry") or 0)
        if left is not None and time.time() * 1000 > left + expiry * 1000:
            return False
        channels = self._channels()
        replaying: dict[int, int] = {}
        positions = record.get("positions")
        for key, value in (positions.items() if isinstance(positions, dict) else ()):
            try:
                partition, position = int(key), int(value)
            except (TypeError, ValueError):
                continue
            if 0 <= partition < len(channels) and position > 0:
                replaying[partition] = position
        if replaying and self.session_id is not None:
            # what it missed comes from those partitions' recent messages, nothing meanwhile
            self.replaying = replaying
            self.restored = asyncio.Event()
            self.connections.registry.hold(self.session_id, replaying)
            # its subscriptions answered or not, it reads what it missed after this long
            asyncio.get_running_loop().call_later(RECENT_TIMEOUT, self._read_recent)
        self._restoring += 1  # (a filter refused at once must not start the reading early)
        for entry in record.get("subscriptions") or []:
            try:
                topic_filter, qos, rh, identifier = entry
                share, plain = parse_shared(topic_filter)
                selector = selector_of(plain)
            except (MappingError, TypeError, ValueError):
                continue
            options = m.SubscriptionOptions(int(qos), retain_handling=int(rh))
            group = self.server.group(share, plain) if share is not None else None
            if group is not None:
                group.join(self)
            self.subscriptions[topic_filter] = (selector, options, int(identifier), group)
            self._restoring += 1
            self._request("subscribe", [str(selector)], ("restore", topic_filter))
        self._matched()
        self._restoring -= 1
        if not self._restoring:
            self._read_recent()
        # recorded again a little later: a late checkpoint of the gateway that held it before
        # (before it heard this one took it) must not be the record's last word
        asyncio.get_running_loop().call_later(SHARES_EVERY, self._reclaim)
        log.info("MQTT session of client %r taken up from its record (%d subscriptions)",
                 self.client_id, len(self.subscriptions))
        return True

    def _save(self, left: float | None = None) -> None:
        """Record the session for another gateway to take up (``left``: when its client went),
        with where its messages stand in each partition (:meth:`_positions`), recorded again
        every ``mqtt_checkpoint_ms`` while they move."""
        if self.server.store is None or not self.expiry or self.session_id is None:
            return
        if left is not None:
            self._left = left
        self._recorded = True
        self._moved = False
        self._saved_at = time.monotonic()
        self.positions = self._positions()
        will = self.will if not self.disconnected else None
        self.server.store.save(self.client_id, {
            "principal": self.principal, "expiry": self.expiry, "left": self._left,
            "subscriptions": [[f, e[1].qos, e[1].retain_handling, e[2]] for f, e in self.subscriptions.items()],
            "positions": {str(p): position for p, position in self.positions.items()},
            # what a gateway adopting the session after this one is lost needs (MQTTServer.adopt)
            "gateway": self.server.run, "version": self.version, "address": self.address,
            "properties": self.user_properties,
            "will": None if will is None else {
                "topic": will.topic, "payload": base64.b64encode(will.payload).decode(), "qos": will.qos,
                "retain": will.retain, "delay": will.properties.will_delay_interval or 0,
            },
        })
        if self._checkpoint_timer is None:
            self._checkpoint_timer = asyncio.get_running_loop().call_later(
                self.server.checkpoint_interval, self._checkpoint)

    def _reclaim(self) -> None:
        if self.session_id is not None and not self.ended and self._recorded:
            self._save()

    def _checkpoint(self) -> None:
        self._checkpoint_timer = None
        if self.session_id is None or self.ended or not self._recorded or not self.expiry:
            return
        # only when its messages moved (or, idle, once a minute): a record write is a message too
        due = self._moved or time.monotonic() - self._saved_at >= IDLE_CHECKPOINT
        if due and self._positions() != self.positions:
            self._save()
        else:
            self._checkpoint_timer = asyncio.get_running_loop().call_later(
                self.server.checkpoint_interval, self._checkpoint)

    def _channels(self) -> list[Any]:
        store = self.server.store
        return getattr(getattr(store, "link", None), "channels", None) or []

    def _positions(self) -> dict[int, int]:
        """Per partition, a message position up to which this session has been given every
        message it was to get there (QoS 1 and 2 ones acknowledged): the oldest mark of what
        still waits for it (queued, or sent and not acknowledged), else how far this gateway
        has heard the partition. A gateway taking the session up reads each partition's
        recent messages from there; some may come twice, as QoS 1 allows."""
        low: dict[int, int] = {}

        def note(mark: Any) -> None:
            if mark is not None and mark[1] < low.get(mark[0], mark[1] + 1):
                low[mark[0]] = mark[1]

        for mark in self.unacked_marks.values():
            note(mark)
        for item in self.backlog:
            note(getattr(item, "mark", None))
        session = self.connections.registry.sessions.get(self.session_id or "")
        if session is not None:
            for item in session.queue.messages():
                note(getattr(item, "mark", None))
        out: dict[int, int] = {}
        for partition, channel in enumerate(self._channels()):
            position = self.replaying.get(partition) or low.get(partition, channel.position)
            if position:
                out[partition] = position
        return out

    # -- a session taken up from its record: what it missed -----------------------------------

    def _read_recent(self) -> None:
        """Every subscription of a session taken up from its record is in place: read what it
        missed from the recent messages of each partition it has a position for."""
        sid = self.session_id
        if sid is None or not self.replaying or self._restoring < 0 or self.ended:
            return
        self._restoring = -1  # asked once
        registry = self.connections.registry
        chosen: set[str] = set()
        for entry in self.subscriptions.values():
            try:
                chosen.update(str(t) for t in registry.fetch_plan(sid, entry[0]))
            except Exception:  # not permitted any more: that filter's topics send it nothing
                continue
        selectors = sorted(chosen)
        link = self.server.store.link if self.server.store is not None else None
        for partition, since in list(self.replaying.items()):
            if not selectors or link is None:
                self._recent_answer(partition, since, Ok(RecentAnswer(0, since, [])))
            else:
                link.submit(partition, ReadRecent(selectors, since),
                            functools.partial(self._recent_answer, partition, since))
        if self.replaying:
            asyncio.get_running_loop().call_later(RECENT_TIMEOUT, self._recent_timeout)

    def _recent_timeout(self) -> None:
        for partition, since in list(self.replaying.items()):
            self._recent_answer(partition, since, None)

    def _recent_answer(self, partition: int, since: int, result: Any) -> None:
        """A partition's recent messages after ``since``, as the link hands them over (before
        any later event of that partition): they go to the session's queue, and the messages
        of the partition after them come as usual. When the partition no longer has them all
        (or did not answer), the current values of the session's topics there come instead."""
        sid = self.session_id
        if sid is None or self.replaying.pop(partition, None) is None:
            return
        registry = self.connections.registry
        answer = result.value if isinstance(result, Ok) and isinstance(result.value, RecentAnswer) else None
        replayed: set[str] | None = None
        try:
            # all of it: kept from just after ``since`` (a numbering that ends before it is another one)
            if answer is not None and answer.first <= since + 1 and since <= answer.last:
                registry.replay(sid, answer.events, (partition, since))
                replayed = {event.path for event in answer.events}
            else:
                if not self._gapped:  # a session counted once, however many partitions miss some
                    self._gapped = True
                    self.server.replay_gaps += 1
                log.warning("MQTT session of client %r: partition %d no longer has every message after %d (%s); "
                            "its topics' current values instead", self.client_id, partition, since,
                            f"it keeps {answer.first} to {answer.last}" if answer is not None else result)
        finally:
            registry.finish(sid, partition, replayed, (partition, answer.last if answer is not None else since))
        if not self.replaying:
            self.server.replayed += 1
            if self.restored is not None:
                self.restored.set()
            self._moved = True
            self._save()
        session = registry.sessions.get(sid)
        if session is not None:
            self.write(session)
        self.connections.wake()

    def _drop_record(self) -> None:
        if self._recorded and self.server.store is not None:
            self._recorded = False
            self.server.store.drop(self.client_id)

    def _resend(self) -> None:
        """After a resume: every QoS 1/2 PUBLISH not acknowledged again, DUP set, and PUBREL for
        those whose PUBREC came (MQTT-4.4.0-1); then what the session's queue holds."""
        for packet_id, released in list(self.inflight.items()):
            if released:
                self._send(m.Pubrel(packet_id))
            else:
                sent = self.unacked.get(packet_id)
                if sent is not None:
                    self._send(replace(sent, dup=True))
        session = self.connections.registry.sessions.get(self.session_id or "")
        if session is not None:
            self.write(session)
            self.connections.wake()

    def _refuse_connect(self, v311_code: int, v5_code: int, why: str) -> None:
        if self.transport is None or self.closing:
            return
        v5 = self.version == m.MQTT_5
        ack = m.Connack(False, v5_code, m.Properties(reason_string=why[:200])) if v5 else m.Connack(False, v311_code)
        self._send(ack)
        self.closing = True
        self.transport.close()

    def _check_alive(self) -> None:
        self._timer = None
        if self.closing or self.transport is None:
            return
        silent = time.monotonic() - self.last_heard
        if silent >= self.keep_alive:
            self._disconnect(0x8D, f"nothing heard for {silent:.1f} s (keep-alive)")
            return
        self._timer = asyncio.get_running_loop().call_later(self.keep_alive - silent, self._check_alive)

    def _request(self, op: str, args: list[Any], what: tuple[Any, ...]) -> None:
        self._cid += 1
        cid = self._cid
        self.pending[cid] = what
        self.connections.submit(self, wire.Request(cid, op, args), time.perf_counter_ns())
        if self.waiting:
            self.pause_reading()

    def _publish(self, p: m.Publish) -> None:
        self.server.received += 1
        topic = p.topic
        alias = p.properties.topic_alias if self.version == m.MQTT_5 else None
        if alias is not None:
            if not 0 < alias <= TOPIC_ALIAS_MAXIMUM:
                self._disconnect(0x94, f"topic alias {alias} is not between 1 and {TOPIC_ALIAS_MAXIMUM}")
                return
            if topic:
                self.inbound_aliases[alias] = topic
            else:
                known = self.inbound_aliases.get(alias)
                if known is None:
                    self._disconnect(0x82, f"topic alias {alias} was never given a topic name")
                    return
                topic = known
        if p.qos == 2 and p.packet_id in self.received_qos2:
            self._send(m.Pubrec(p.packet_id or 0))  # a resend of one already taken: once only
            return
        if p.qos and self.inbound_unacknowledged() >= self.server.receive_maximum:
            # more QoS 1/2 publishes unacknowledged than CONNACK's Receive Maximum allows (3.1.1: the same bound)
            self._disconnect(0x93, f"more than {self.server.receive_maximum} QoS 1 and 2 publishes unacknowledged")
            return
        try:
            path = path_of(topic)
        except MappingError as e:
            self._publish_refused(p, 0x90, str(e))
            return
        if path == SYS or path.startswith(SYS + "/"):
            self._publish_refused(p, 0x87, "$SYS topics are the broker's own: read-only")
            return
        registry = self.connections.registry
        sid = self.session_id or ""
        may_add = registry.has(sid, PathPermission.MODIFY_TOPIC, path)
        args = [path, p.payload, TEXT, self.server.create_type if may_add else None, may_add, p.retain]
        lifetime = p.properties.message_expiry_interval
        attributes = encode_attributes(
            p.qos, p.retain, self.session_id or "", p.properties,
            None if lifetime is None else int(time.time() * 1000) + lifetime * 1000,
        )
        if attributes:
            args.append(attributes)
        self._request("set", args, ("publish", p.qos, p.packet_id, topic))

    def inbound_unacknowledged(self) -> int:
        """QoS 1 and 2 publishes of the client not acknowledged yet (PUBACK, or PUBCOMP)."""
        return len(self.received_qos2) + sum(1 for what in self.pending.values() if what[0] == "publish" and what[1])

    def _publish_refused(self, p: m.Publish, reason: int, why: str) -> None:
        if p.qos == 0 or self.version != m.MQTT_5:
            # QoS 0 has no answer, and MQTT 3.1.1 none that refuses (MQTT-3.3.5-2): acknowledged, counted
            self.server.publishes_refused += 1
            suffix = self.server.refused.record(self.session_id or "", time.monotonic())
            if suffix is not None:
                log.warning("MQTT publish of session %s to %r refused: %s%s", self.session_id, p.topic, why, suffix)
            if p.qos == 1:
                self._send(m.Puback(p.packet_id or 0))
            elif p.qos == 2:
                self._send(m.Pubrec(p.packet_id or 0))
                self.received_qos2.add(p.packet_id or 0)
            return
        properties = m.Properties(reason_string=why[:200])
        if p.qos == 1:
            self._send(m.Puback(p.packet_id or 0, reason, properties))
        else:
            self._send(m.Pubrec(p.packet_id or 0, reason, properties))

    def _subscribe(self, s: m.Subscribe) -> None:
        codes = self.subacks[s.packet_id] = [0x80] * len(s.subscriptions)
        self.acks_left[s.packet_id] = 1  # until every filter is handed on: answers may come at once
        for index, (topic_filter, options) in enumerate(s.subscriptions):
            if topic_filter not in self.subscriptions and len(self.subscriptions) >= self.server.max_subscriptions:
                codes[index] = 0x97
                continue
            try:
                share, plain = parse_shared(topic_filter)
                selector = selector_of(plain)
            except MappingError:
                codes[index] = 0x8F
                continue
            # in force at once: the topics it brings may come before the answer does
            before = self.subscriptions.get(topic_filter)
            identifiers = s.properties.subscription_identifiers
            group = self.server.group(share, plain) if share is not None else None
            if group is not None:
                group.join(self)
            self.subscriptions[topic_filter] = (selector, options, identifiers[0] if identifiers else 0, group)
            self._matched()
            self.acks_left[s.packet_id] += 1
            self._request(
                "subscribe", [str(selector)], ("subscribe", s.packet_id, index, topic_filter, before, options)
            )
        self.acks_left[s.packet_id] -= 1
        self._suback_if_done(s.packet_id)

    def _suback_if_done(self, packet_id: int) -> None:
        if self.acks_left.get(packet_id):
            return
        self.acks_left.pop(packet_id, None)
        codes = self.subacks.pop(packet_id)
        if self.version != m.MQTT_5:
            codes = [c if c <= 2 else 0x80 for c in codes]
        self._send(m.Suback(packet_id, tuple(codes)))

    def _unsubscribe(self, u: m.Unsubscribe) -> None:
        codes = self.unsubacks[u.packet_id] = [0x11] * len(u.filters)
        self.acks_left[-u.packet_id] = 1  # until every filter is handed on
        for index, topic_filter in enumerate(u.filters):
            found = self.subscriptions.pop(topic_filter, None)
            if found is None:
                continue
            self.established.discard(topic_filter)
            self.server.leave(found[3], self)
            self._matched()
            if any(other[0] == found[0] for other in self.subscriptions.values()):
                codes[index] = 0  # another filter maps to the same selector: it stays
                continue
            self.acks_left[-u.packet_id] += 1
            self._request("unsubscribe", [str(found[0])], ("unsubscribe", u.packet_id, index))
        self.acks_left[-u.packet_id] -= 1
        self._unsuback_if_done(u.packet_id)

    def _unsuback_if_done(self, packet_id: int) -> None:
        if self.acks_left.get(-packet_id):
            return
        self.acks_left.pop(-packet_id, None)
        codes = self.unsubacks.pop(packet_id)
        self._send(m.Unsuback(packet_id, tuple(codes) if self.version == m.MQTT_5 else ()))

    def _answered(self, cid: int, reason: int, why: str) -> None:
        what = self.pending.pop(cid, None)
        if what is None or self.closing:
            return
        kind = what[0]
        if kind == "publish":
            _, qos, packet_id, topic = what
            if reason:
                self._publish_refused(m.Publish(topic, b"", qos, False, False, packet_id), reason, why)
            elif qos == 1:
                self._send(m.Puback(packet_id))
            elif qos == 2:
                self.received_qos2.add(packet_id)
                self._send(m.Pubrec(packet_id))
        elif kind == "subscribe":
            _, packet_id, index, topic_filter, before, options = what
            if not reason:  # the topics it brought so far are queued: those after it are new ones
                self.connections.registry.send(self.session_id or "", _Established(topic_filter))
                self._save()
            if reason:  # refused: the filter is as it was
                refused = self.subscriptions.pop(topic_filter, None)
                if refused is not None and (before is None or before[3] is not refused[3]):
                    self.server.leave(refused[3], self)
                if before is not None:
                    self.subscriptions[topic_filter] = before
                self._matched()
            self.subacks[packet_id][index] = min(options.qos, 2) if reason == 0 else reason
            self.acks_left[packet_id] -= 1
            self._suback_if_done(packet_id)
        elif kind == "restore":
            if not reason:
                self.connections.registry.send(self.session_id or "", _Established(what[1]))
            else:  # no longer permitted: the filter goes
                dropped = self.subscriptions.pop(what[1], None)
                if dropped is not None:
                    self.server.leave(dropped[3], self)
                    self._matched()
                self._save()
            if self._restoring > 0:
                self._restoring -= 1
                if not self._restoring:
                    self._read_recent()
        elif kind == "unsubscribe":
            self._save()
            _, packet_id, index = what
            self.unsubacks[packet_id][index] = 0 if reason == 0 else 0x80
            self.acks_left[-packet_id] -= 1
            self._unsuback_if_done(packet_id)

    def _publish_will(self, will: m.Will) -> None:
        try:
            path = path_of(will.topic)
        except MappingError as e:
            log.info("the will of MQTT session %s was not published: %s", self.session_id, e)
            return
        may_add = self.connections.registry.has(self.session_id or "", PathPermission.MODIFY_TOPIC, path)
        self._request(
            "set", [path, will.payload, TEXT, self.server.create_type if may_add else None, may_add, will.retain],
            ("will",),
        )

    # -- deliveries out -----------------------------------------------------------------------

    def _deliver(self, item: object) -> bool:
        """Write one queued item; ``False`` when it must wait for the QoS window."""
        if isinstance(item, Update):
            return self._out(item.alias, item.value, False, item.value, item.attributes, item.mark)
        if isinstance(item, Subscribed):
            self._learn(item)
            if item.value is None:
                return True
            return self._out(item.alias, item.value, True, item, item.attributes)
        if isinstance(item, SeriesUpdate):
            return self._out(item.alias, item.event.value, False, item.event, b"", item.mark)
        if isinstance(item, Unsubscribed):
            self.topics.pop(item.alias, None)
        elif isinstance(item, _Established):
            self.established.add(item.topic_filter)
        return True  # a native protocol message (an answer or a notification): not for MQTT

    def _learn(self, item: Subscribed) -> None:
        spec = TopicSpecification.of(item.type, dict(item.properties))
        value_type = spec.event_type or spec.type
        name = topic_of(item.path) if has_topic_name(item.path) else ""
        # a topic of a subscription's first answer comes as a retained message; one that appears
        # under an established subscription later is a new message (RETAIN 0: MQTT-3.3.1-9)
        initial = any(
            f not in self.established and entry[0].matches(item.path)
            for f, entry in self.subscriptions.items()
        )
        self.topics[item.alias] = [item.path, name, value_type, *self._match(item.path), initial,
                                   m.topic_bytes(name) if name else b""]

    def _match(self, path: str) -> tuple[int, bool, m.Properties, list[SharedGroup[Any]] | None, bool, bool]:
        """The QoS to deliver the topic at ``path`` with (the highest of the subscriptions that
        match it; -1: none does), whether a retained message is wanted (retain handling), the
        properties of its PUBLISH packets (the matching subscriptions' identifiers,
        MQTT-3.3.4-3), when only shared subscriptions match it, their groups (one member of
        each delivers a message), whether every subscription that matches it is No Local
        (MQTT-3.8.3-3: the session's own publishes are not sent back) and whether one is Retain
        As Published (MQTT-3.3.1-13)."""
        qos, retained, identifiers, own, groups = -1, False, [], False, []
        no_local, as_published = True, False
        for selector, options, identifier, group in self.subscriptions.values():
            if selector.matches(path):
                qos = max(qos, options.qos)
                no_local = no_local and options.no_local
                as_published = as_published or options.retain_as_published
                if group is None:
                    own = True
                    retained = retained or options.retain_handling != 2
                else:  # no retained messages for a shared subscription (MQTT 5, 4.8.2)
                    groups.append(group)
                if identifier:
                    identifiers.append(identifier)
        properties = m.Properties(subscription_identifiers=tuple(identifiers)) if identifiers else EMPTY
        return qos, retained, properties, None if own else groups, no_local and qos >= 0, as_published

    def _matched(self) -> None:
        """The subscriptions changed: work out again which match each topic."""
        for known in self.topics.values():
            known[3:9] = self._match(known[0])

    def _out(
        self, alias: int, value: bytes, first: bool, token: object, attributes: bytes = b"",
        mark: tuple[int, int] | None = None,
    ) -> bool:
        """Write one value of a subscribed topic (``token``: what every session offered this
        message shares, for shared subscriptions); ``False`` when the QoS window is full."""
        known = self.topics.get(alias)
        if known is None:
            return True
        path, name, value_type, qos, retained, properties, groups, no_local, as_published, initial, topic = known
        if not name or qos < 0 or (first and initial and not retained):
            return True
        if first and initial and groups is not None:
            return True  # no retained message for a shared subscription (MQTT 5, 4.8.2)
        published_retain = False
        if attributes:
            published_qos, published_retain, origin, forwarded, deadline = decode_attributes(attributes)
            if no_local and origin == self.session_id:
                return True  # its own publish, and every matching subscription is No Local
            left = None
            if deadline is not None:
                left = deadline - time.time() * 1000
                if left <= 0:  # expired while it waited for this session (MQTT-3.3.2-5)
                    self.server.expired += 1
                    return True
            if published_qos < qos:  # at the lower of the two (MQTT-3.8.4-8; 3.1.1: MQTT-3.8.4-6)
                qos = published_qos
            if self.version == m.MQTT_5 and forwarded is not EMPTY:
                # the expiry interval less the time it waited (MQTT-3.3.2-6)
                properties = for_subscriber(properties, forwarded, left)
        if groups is not None:
            answer = self._shared_answer
            if answer is None or answer[0] is not token:  # asked once per message, however often retried
                # the gateway whose members take the message, then the member here
                owns = self.server.directory.owns
                taken = any([group.takes(self, token, _connected) for group in groups if owns(group.key, path)])
                answer = self._shared_answer = (token, taken)
            if not answer[1]:
                return True
        server = self.server
        payload = server.payload(value_type, value)
        if first and not payload:
            return True  # no value: no retained message
        retain = (first and initial) or (as_published and published_retain and not first)
        kept_properties = properties
        aliased = bool(self.alias_room or self.outbound_aliases)
        if aliased:
            # a topic alias: the first PUBLISH of a topic carries its name and the alias it gets,
            # the later ones the alias alone (MQTT 5, 3.3.2.3.4); per connection, so not shared
            given = self.outbound_aliases.get(topic)
            if given is None and self.alias_room:
                self.alias_room -= 1
                given = self.outbound_aliases[topic] = len(self.outbound_aliases) + 1
                properties = replace(properties, topic_alias=given)
            elif given is not None:
                properties = replace(properties, topic_alias=given)
                topic = b"\x00\x00"
        if qos > 0:
            if len(self.inflight) >= self.send_quota:
                return False
            packet_id = self._packet_id()
            data = m.publish_bytes(topic, payload, qos, retain, packet_id, self._block(properties))
        elif aliased:  # this connection's own packet
            packet_id = None
            data = m.publish_bytes(topic, payload, 0, retain, None, self._block(properties))
        else:
            packet_id = None
            # the same message to many sessions: built once (the value object is what they share)
            key = (id(token), self.version, retain, topic, id(properties))
            shared = server.packets.get(key)
            if shared is not None and shared[0] is token and shared[2] is properties:
                data = shared[1]
            else:
                data = m.publish_bytes(topic, payload, 0, retain, None, self._block(properties))
                server.remember_packet(key, token, data, properties)
        if len(data) > self.client_max_packet:
            return True  # larger than the client takes (MQTT-3.1.2-25): dropped
        if packet_id is not None:
            self.inflight[packet_id] = False
            if self.expiry:  # sent again on another connection: by its name, without this one's alias
                self.unacked[packet_id] = m.Publish(name, payload, qos, retain, False, packet_id, kept_properties)
                if mark is not None:
                    self.unacked_marks[packet_id] = mark
        self._chunks.append(data)
        server.sent += 1
        self._moved = True
        return True

    def _block(self, properties: m.Properties) -> bytes | None:
        if self.version != m.MQTT_5:
            return None
        return b"\x00" if properties is EMPTY else _property_block(properties)

    def _packet_id(self) -> int:
        while True:
            self._next_pid = self._next_pid % 65535 + 1
            if self._next_pid not in self.inflight:
                return self._next_pid

    def _acknowledged(self, packet_id: int) -> None:
        self.unacked.pop(packet_id, None)
        if self.unacked_marks.pop(packet_id, None) is not None:
            self._moved = True
        if self.inflight.pop(packet_id, None) is not None and self.backlog:
            session = self.connections.registry.sessions.get(self.session_id or "")
            if session is not None:
                self.write(session)

    # -- closing --------------------------------------------------------------------------

    def _send(self, packet: m.Packet) -> None:
        if self.transport is not None and not self.transport.is_closing():
            data = m.encode(packet, self.version)
            self.server.bytes_sent += len(data)
            self.transport.write(data)

    def _malformed(self, error: m.MQTTError) -> None:
        if self.session_id is None and error.protocol_level is not None:  # CONNECT of a version we lack
            self.version = m.MQTT_5 if error.protocol_level == 5 else m.MQTT_3_1_1
            self._refuse_connect(V311_UNSUPPORTED, 0x84, str(error))
            return
        log.info("MQTT connection from %s closed: %s", self.address, error)
        self._disconnect(error.reason_code, str(error))

    def _disconnect(self, reason: int, why: str) -> None:
        """Close the connection, telling an MQTT 5 client why (a DISCONNECT with ``reason``)."""
        if self.closing:
            return
        self.closing = True
        if self.session_id is not None and self.version == m.MQTT_5:
            self._send(m.Disconnect(reason, m.Properties(reason_string=why[:200])))
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.abort()


def _connected(member: MQTTConnection) -> bool:
    """Whether a shared subscription's member has a connection (not a kept session)."""
    return member.transport is not None


class _AnnouncementWatch:
    """The internal session through which a gateway hears the others' announcements: what
    :class:`~actors.connections.Connections` asks of a session's connection, its deliveries
    handed to :meth:`MQTTServer.heard`."""

    closing = False

    def __init__(self, server: MQTTServer, session_id: str) -> None:
        self.server = server
        self.session_id: str | None = session_id
        self.in_flight = 0
        self.wide_in_flight = 0
        self.waiting: deque[tuple[wire.Request, int]] = deque()
        self.outstanding: dict[int, int] = {}

    def write(self, session: Any) -> None:
        queue = session.queue
        while len(queue):
            items = queue.take()
            if not items:
                return
            for item in items:
                if isinstance(item, Update):
                    try:
                        announced = decode_value(TopicType.JSON, item.value)
                    except Exception:  # not an announcement: nothing to do
                        continue
                    self.server.heard(announced)

    def respond(self, cid: int, result: Any) -> None:
        pass

    def refuse(self, cid: int, code: str, message: str) -> None:
        log.warning("this gateway cannot hear the other gateways' MQTT announcements: %s %s", code, message)

    def end(self, code: str, message: str, ws_code: int) -> None:
        if code != "SERVER_SHUTDOWN":
            log.warning("this gateway no longer hears the other gateways' MQTT announcements: %s %s", code, message)

    def kept_on_drop(self) -> bool:
        return False

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass


class _Established(NamedTuple):
    """Queued after the topics a subscription's first answer brought (see ``_learn``)."""

    topic_filter: str


def _will_of(recorded: Any) -> m.Will | None:
    """The will a session record keeps (see ``MQTTConnection._save``), or None."""
    if not isinstance(recorded, dict):
        return None
    try:
        delay = int(recorded.get("delay") or 0)
        return m.Will(str(recorded["topic"]), base64.b64decode(recorded.get("payload") or ""),
                      int(recorded.get("qos") or 0), bool(recorded.get("retain")),
                      m.Properties(will_delay_interval=delay) if delay else EMPTY)
    except (KeyError, TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=1024)
def _property_block(properties: m.Properties) -> bytes:
    return m.properties_bytes(properties)
