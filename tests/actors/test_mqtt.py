"""The MQTT front door, driven by paho-mqtt (3.1.1 and 5.0) beside canopy's own client.

Each test names the MQTT specification statements it checks where there is one.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any
from concurrent.futures import ThreadPoolExecutor

import pytest
from paho.mqtt.reasoncodes import ReasonCode

import canopy
from canopy import errors
from tests.actors.conftest import ADMIN
from tests.actors.mqtt_client import MQTT
from tests.conftest import wait_for

VERSIONS = [pytest.param(4, id="3.1.1"), pytest.param(5, id="5.0")]


def admin_mqtt(address: tuple[str, int], version: int = 5, **kw: object) -> MQTT:
    return MQTT(address, version, username=ADMIN[0], password=ADMIN[1], **kw)  # type: ignore[arg-type]


def code(value: object) -> int:
    """A reason code as a number (paho hands out ReasonCode objects, or ints for 3.1.1)."""
    return value.value if isinstance(value, ReasonCode) else int(value)  # type: ignore[arg-type]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_retained_publish_sets_the_value_a_native_client_reads(
    broker: str, mqtt_address: tuple[str, int], prefix: str, version: int
) -> None:
    with canopy.connect_sync(broker, *ADMIN) as native, admin_mqtt(mqtt_address, version) as client:
        native.topics.add(f"{prefix}/n", "INT64")
        native.topics.add(f"{prefix}/j", "JSON")
        native.topics.add(f"{prefix}/s", "STRING")
        for topic, payload in ((f"{prefix}/n", "42"), (f"{prefix}/j", '{"a": [1, 2.5]}'), (f"{prefix}/s", "hé")):
            assert code(client.publish(topic, payload, qos=1, retain=True)) == 0
        client.publish(f"{prefix}/new", b"\x00\x01", qos=1, retain=True)  # no topic: a BINARY one is added
        rows = {r.path: (r.type.value, r.value) for r in native.topics.fetch(f"?{prefix}//")}
        assert rows == {
            f"{prefix}/n": ("INT64", 42), f"{prefix}/j": ("JSON", {"a": [1, 2.5]}),
            f"{prefix}/s": ("STRING", "hé"), f"{prefix}/new": ("BINARY", b"\x00\x01"),
        }


@pytest.mark.parametrize("version", VERSIONS)
def test_subscribing_delivers_the_value_as_retained_then_every_update(
    broker: str, mqtt_address: tuple[str, int], prefix: str, version: int
) -> None:
    """MQTT-3.3.1-6 (retained messages on subscribe carry RETAIN 1), MQTT-3.3.1-9 (live ones 0)."""
    with canopy.connect_sync(broker, *ADMIN) as native, admin_mqtt(mqtt_address, version) as client:
        native.topics.add_and_set(f"{prefix}/d", 1.5)
        native.topics.add_and_set(f"{prefix}/j", {"k": "v"})
        assert [code(c) for c in client.subscribe(f"{prefix}/#", qos=1)] == [1]
        first = sorted((client.next() for _ in range(2)), key=lambda m: m.topic)
        assert [(m.topic, m.payload, m.retain) for m in first] == [
            (f"{prefix}/d", b"1.5", True), (f"{prefix}/j", b'{"k":"v"}', True)
        ]
        for i in range(5):
            native.topics.set(f"{prefix}/d", float(i))
        updates = [client.next() for _ in range(5)]
        assert [(m.payload, m.retain, m.qos) for m in updates] == [(f"{float(i)}".encode(), False, 1) for i in range(5)]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_publish_without_retain_is_delivered_and_not_kept(
    broker: str, mqtt_address: tuple[str, int], prefix: str, version: int
) -> None:
    """MQTT-3.3.1-12: a message without RETAIN is not stored, nor does it replace the retained one."""
    topic = f"{prefix}/t"
    with admin_mqtt(mqtt_address, version) as publisher, admin_mqtt(mqtt_address, version) as early:
        publisher.publish(topic, "kept", qos=1, retain=True)
        early.subscribe(topic, qos=1)
        assert early.next().payload == b"kept"
        publisher.publish(topic, "passing", qos=1, retain=False)
        live = early.next()
        assert (live.payload, live.retain) == (b"passing", False)
        with admin_mqtt(mqtt_address, version) as late:
            late.subscribe(topic, qos=1)
            retained = late.next()
            assert (retained.payload, retained.retain) == (b"kept", True)


def test_publish_and_subscribe_are_checked_against_the_principal_s_permissions(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """PUBACK 0x87 and SUBACK 0x87 (MQTT 5) when the session may not; nothing changes."""
    with canopy.connect_sync(broker, *ADMIN) as admin:
        name = f"{prefix.replace('/', '-')}-reader"
        admin.security.update(
            ["add_principal", name, "reader-password", [name]],
            ["set_path_permissions", name, prefix, ["SELECT_TOPIC", "READ_TOPIC"]],
            ["set_path_permissions", name, f"{prefix}/secret", []],
        )
        admin.topics.add_and_set(f"{prefix}/x", "before")
        with MQTT(mqtt_address, 5, username=name, password="reader-password") as reader:
            assert code(reader.publish(f"{prefix}/x", "after", qos=1, retain=True)) == 0x87
            assert code(reader.publish(f"{prefix}/new", "x", qos=1, retain=True)) == 0x87
            assert [code(c) for c in reader.subscribe(f"{prefix}/secret/#")] == [0x87]
            assert [code(c) for c in reader.subscribe(f"{prefix}/x")] == [1]
            assert reader.next().payload == b"before"
        assert [r.value for r in admin.topics.fetch(f"?{prefix}//")] == ["before"]


def test_a_payload_that_does_not_convert_is_refused_and_changes_nothing(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    with canopy.connect_sync(broker, *ADMIN) as native, admin_mqtt(mqtt_address, 5) as client:
        native.topics.add_and_set(f"{prefix}/n", 7)
        assert code(client.publish(f"{prefix}/n", "seven", qos=1, retain=True)) == 0x99
        assert code(client.publish(f"{prefix}/n", "8", qos=2, retain=True)) == 0
        assert native.topics.fetch(f">{prefix}/n")[0].value == 8


def test_a_publish_to_a_time_series_appends_and_subscribers_receive_each_event(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    path = f"{prefix}/series"
    with canopy.connect_sync(broker, *ADMIN) as native, admin_mqtt(mqtt_address, 5) as client:
        native.topics.add(path, "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "JSON"})
        client.subscribe(path, qos=1)
        for i in range(3):
            assert code(client.publish(path, json.dumps({"i": i}), qos=1)) == 0
        assert [json.loads(client.next().payload) for _ in range(3)] == [{"i": 0}, {"i": 1}, {"i": 2}]
        assert [e.value for e in native.time_series.range_query(path).events] == [{"i": 0}, {"i": 1}, {"i": 2}]


def test_qos_2_both_ways_delivers_each_message_once(broker: str, mqtt_address: tuple[str, int], prefix: str) -> None:
    with admin_mqtt(mqtt_address, 5) as publisher, admin_mqtt(mqtt_address, 5) as subscriber:
        publisher.publish(f"{prefix}/q", "0", qos=2, retain=True)
        assert [code(c) for c in subscriber.subscribe(f"{prefix}/q", qos=2)] == [2]
        assert subscriber.next().qos == 2
        for i in range(1, 21):
            assert code(publisher.publish(f"{prefix}/q", str(i), qos=2)) == 0
        got = [subscriber.next() for _ in range(20)]
        assert [(m.payload, m.qos) for m in got] == [(str(i).encode(), 2) for i in range(1, 21)]


def test_mqtt_5_user_properties_become_session_properties(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    with canopy.connect_sync(broker, *ADMIN) as native, admin_mqtt(
        mqtt_address, 5, user_properties={"tier": "gold"}, client_id=f"{prefix.replace('/', '-')}-c"
    ):
        found = wait_for(
            lambda: native.sessions.get_properties(filter=f"$ClientId is '{prefix.replace('/', '-')}-c'"), 10,
            "the MQTT session",
        )
        (properties,) = found.values()
        assert properties["tier"] == "gold" and properties["$Transport"] == "MQTT"
        assert properties["$Principal"] == "admin"


def test_the_gateway_s_own_session_is_no_client_s(broker: str) -> None:
    """The session through which a gateway hears the others' MQTT announcements is not a
    client's: no session query finds it and no session change reaches it."""
    with canopy.connect_sync(broker, *ADMIN) as admin:
        assert admin.sessions.get_properties(filter="$Transport is 'INTERNAL'") == {}
        assert all(p["$Transport"] != "INTERNAL" for p in admin.sessions.get_properties(filter="$Principal is ''").values())


def test_wrong_credentials_are_refused_with_the_connack_code(mqtt_address: tuple[str, int]) -> None:
    """MQTT 5 CONNACK 0x86; MQTT 3.1.1 return code 4 (bad user name or password), then the
    connection is closed (MQTT-3.2.2-5)."""
    # from an address of its own: the actor tests' logins from 127.0.0.1 share its failure count
    client = MQTT(mqtt_address, 5, username="admin", password="wrong", connect=False, bind_address="127.0.0.71")
    try:
        assert code(client.connect()) == 0x86
    finally:
        client.close()
    connect = (bytes([0x10, 0x1E, 0x00, 0x04]) + b"MQTT" + bytes([0x04, 0xC2, 0x00, 0x3C, 0x00, 0x01]) + b"c"
               + bytes([0x00, 0x05]) + b"admin" + bytes([0x00, 0x08]) + b"wrong-pw")
    with socket.create_connection(mqtt_address, timeout=10, source_address=("127.0.0.71", 0)) as raw:
        raw.sendall(connect)
        assert raw.recv(16) == bytes([0x20, 0x02, 0x00, 0x04])
        assert raw.recv(16) == b""


def test_a_fleet_sharing_one_account_connects_at_once(mqtt_address: tuple[str, int]) -> None:
    """Twenty MQTT clients CONNECT as one principal from one address at the same moment: every
    CONNACK is a success (the login guard lets a principal's attempts from one address take
    turns instead of counting the ones still being checked as failures)."""
    address = "127.0.0.72"  # an address of its own, so that no other test's logins count here
    clients = [MQTT(mqtt_address, 5, username="admin", password=ADMIN[1], connect=False, bind_address=address)
               for _ in range(20)]
    try:
        together = threading.Barrier(len(clients))

        def connect(client: MQTT) -> int:
            together.wait(timeout=30)
            return code(client.connect())

        with ThreadPoolExecutor(len(clients)) as pool:
            codes = list(pool.map(connect, clients))
        assert codes == [0] * len(clients), f"CONNACK codes: {codes}"
    finally:
        for client in clients:
            client.close()


def test_a_malformed_packet_closes_only_its_connection(mqtt_address: tuple[str, int], prefix: str) -> None:
    """MQTT-3.1.2-3 (a reserved CONNECT flag set is malformed): the connection is closed."""
    with socket.create_connection(mqtt_address, timeout=10) as raw:
        raw.sendall(bytes([0x10, 0x0C, 0x00, 0x04]) + b"MQTT" + bytes([0x04, 0x03, 0x00, 0x3C, 0x00, 0x00]))
        assert raw.recv(16) == b""  # closed, nothing said (MQTT 3.1.1 has no way to)
    with admin_mqtt(mqtt_address, 4) as fine:
        assert code(fine.publish(f"{prefix}/after", "x", qos=1, retain=True)) == 0


@pytest.mark.parametrize("version", VERSIONS)
def test_mqtt_over_websocket_on_the_gateway_port(
    broker: str, mqtt_address: tuple[str, int], prefix: str, version: int
) -> None:
    """MQTT over WebSocket at /mqtt (subprotocol mqtt) on the gateway's own port, beside the
    native protocol on the same port."""
    host, port = broker.removeprefix("ws://").rsplit(":", 1)
    with canopy.connect_sync(broker, *ADMIN) as native, admin_mqtt(
        (host, int(port)), version, transport="websockets"
    ) as client:
        assert [code(c) for c in client.subscribe(f"{prefix}/#", qos=1)] == [1]
        native.topics.add_and_set(f"{prefix}/s", "from native")
        got = client.next()
        assert (got.topic, got.payload) == (f"{prefix}/s", b"from native")
        assert code(client.publish(f"{prefix}/s", "from mqtt", qos=1, retain=True)) == 0
        assert native.topics.fetch(f">{prefix}/s")[0].value == "from mqtt"


@pytest.mark.parametrize("version", VERSIONS)
def test_a_session_with_an_expiry_outlives_its_connection_and_is_resumed(
    broker: str, mqtt_address: tuple[str, int], prefix: str, version: int
) -> None:
    """MQTT-3.1.2-4/-5 (clean start 0 resumes the session), MQTT-3.2.2-2 (session present 1),
    MQTT-4.4.0-1 (unacknowledged messages sent again): what was published while the client was
    away is delivered when it comes back, at QoS 1, nothing lost."""
    client_id = f"{prefix.replace('/', '-')}-{version}"
    options = dict(client_id=client_id, clean_start=False, session_expiry=60 if version == 5 else None)
    with canopy.connect_sync(broker, *ADMIN) as native:
        native.topics.add(f"{prefix}/q", "INT64", {"CONFLATION": "off"})
        first = admin_mqtt(mqtt_address, version, **options)
        first.subscribe(f"{prefix}/q", qos=1)
        first.drop()  # the network went away: no DISCONNECT
        for i in range(10):
            native.topics.set(f"{prefix}/q", i)
        with admin_mqtt(mqtt_address, version, **options) as again:
            assert again.session_present is True
            got = [int(again.next().payload) for _ in range(10)]
            assert got == list(range(10))
            native.topics.set(f"{prefix}/q", 10)
            assert int(again.next().payload) == 10  # still subscribed, as it was
        with admin_mqtt(mqtt_address, version, client_id=client_id) as clean:  # clean start: a new session
            assert clean.session_present is False
            native.topics.set(f"{prefix}/q", 11)
            native.topics.add_and_set(f"{prefix}/marker", "m")
            clean.subscribe(f"{prefix}/marker", qos=1)
            assert clean.next().topic == f"{prefix}/marker"  # and not q: its subscription went with the old session


def test_MQTT_3_3_2_5_and_6_a_message_expires_in_the_queue_and_goes_out_with_what_is_left(
    mqtt_address: tuple[str, int], prefix: str
) -> None:
    """A message whose Message Expiry Interval passes while it waits for an absent session is
    not delivered to it (MQTT-3.3.2-5); one that is delivered carries the interval less the
    time it waited (MQTT-3.3.2-6)."""
    client_id = f"{prefix.replace('/', '-')}-expiry"
    options = dict(client_id=client_id, clean_start=False, session_expiry=60)
    topic = f"{prefix}/e"
    with admin_mqtt(mqtt_address, 5) as publisher:
        away = admin_mqtt(mqtt_address, 5, **options)
        away.subscribe(topic, qos=1)
        away.drop()  # gone without a DISCONNECT: its session is kept, its messages queued
        publisher.publish(topic, "short-lived", qos=1, expiry=1)
        published = time.monotonic()
        publisher.publish(topic, "long-lived", qos=1, expiry=100)
        # the first message's interval must pass while it waits: that is what is tested
        time.sleep(max(0.0, published + 1.5 - time.monotonic()))
        with admin_mqtt(mqtt_address, 5, **options) as back:
            assert back.session_present is True
            got = back.next()
            waited = time.monotonic() - published
            assert got.payload == b"long-lived", got.payload  # the expired one, queued first, was dropped
            left = got.properties.MessageExpiryInterval
            assert 0 < left <= 100 - int(waited), (left, waited)
            publisher.publish(topic, "fresh", qos=1, expiry=30)
            fresh = back.next()
            assert fresh.payload == b"fresh" and 28 <= fresh.properties.MessageExpiryInterval <= 30


def test_MQTT_3_3_2_8_and_11_the_server_sends_topic_aliases_within_the_client_s_maximum(
    mqtt_address: tuple[str, int], prefix: str
) -> None:
    """A client that takes topic aliases (Topic Alias Maximum 2 in its CONNECT) gets each
    topic's first PUBLISH with its name and an alias between 1 and 2 (never 0: MQTT-3.3.2-8;
    never over its maximum: MQTT-3.3.2-11), the later ones with the alias alone; a third topic,
    with no alias left, by its name. A client that takes none gets none."""
    with admin_mqtt(mqtt_address, 5) as publisher, \
            admin_mqtt(mqtt_address, 5, topic_alias_maximum=2) as aliased, admin_mqtt(mqtt_address, 5) as plain:
        for client in (aliased, plain):
            client.subscribe(f"{prefix}/#", qos=1)
        sent = ["a", "a", "b", "c", "b", "c"]
        for k, name in enumerate(sent):
            publisher.publish(f"{prefix}/{name}", str(k), qos=1)
        got = [aliased.next() for _ in sent]
        alias_of = lambda m: getattr(m.properties, "TopicAlias", None)  # noqa: E731
        assert [(m.topic, alias_of(m), m.payload) for m in got] == [
            (f"{prefix}/a", 1, b"0"), ("", 1, b"1"), (f"{prefix}/b", 2, b"2"), (f"{prefix}/c", None, b"3"),
            ("", 2, b"4"), (f"{prefix}/c", None, b"5"),
        ]
        assert [(m.topic, alias_of(m)) for m in (plain.next() for _ in sent)] == [
            (f"{prefix}/{name}", None) for name in sent]


def test_a_client_identifier_of_another_principal_s_session_is_refused(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """A login may not take over, nor end, another principal's session by its client identifier."""
    client_id = f"{prefix.replace('/', '-')}-mine"
    with canopy.connect_sync(broker, *ADMIN) as admin:
        name = f"{prefix.replace('/', '-')}-other"
        admin.security.update(["add_principal", name, "other-password", ["CLIENT"]])
        with admin_mqtt(mqtt_address, 5, client_id=client_id, session_expiry=60):
            other = MQTT(mqtt_address, 5, username=name, password="other-password", client_id=client_id, connect=False)
            try:
                assert code(other.connect()) == 0x85
            finally:
                other.close()


def test_deliveries_carry_the_identifiers_of_the_subscriptions_they_match(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """MQTT-3.3.4-3: a PUBLISH carries the Subscription Identifiers of every matching subscription."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    with canopy.connect_sync(broker, *ADMIN) as native, admin_mqtt(mqtt_address, 5) as client:
        for identifier, topic_filter in ((7, f"{prefix}/#"), (9, f"{prefix}/+")):
            properties = Properties(PacketTypes.SUBSCRIBE)
            properties.SubscriptionIdentifier = identifier
            result, mid = client.client.subscribe(topic_filter, qos=1, properties=properties)
            client._waiter(mid).get(timeout=20)
        native.topics.add_and_set(f"{prefix}/a", "x")
        message = client.next()
        assert sorted(message.properties.SubscriptionIdentifier) == [7, 9]


def test_a_shared_subscription_delivers_each_message_to_one_member(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """MQTT 5 shared subscriptions (4.8.2): each message to one session of the group, in turn; a
    plain subscription beside them still receives every message; no retained message on
    subscribing (the topic has a value already)."""
    import queue

    with canopy.connect_sync(broker, *ADMIN) as native:
        native.topics.add(f"{prefix}/jobs", "INT64", {"CONFLATION": "off"})
        native.topics.set(f"{prefix}/jobs", -1)
        members = [admin_mqtt(mqtt_address, version) for version in (5, 5, 4)]
        watcher = admin_mqtt(mqtt_address, 5)
        try:
            for member in members:
                assert [code(c) for c in member.subscribe(f"$share/workers/{prefix}/jobs", qos=1)] == [1]
            watcher.subscribe(f"{prefix}/jobs", qos=1)
            assert int(watcher.next().payload) == -1  # the retained value, to the plain subscription only
            for i in range(30):
                native.topics.set(f"{prefix}/jobs", i)
            assert [int(watcher.next().payload) for _ in range(30)] == list(range(30))
            got: list[list[int]] = [[] for _ in members]

            def all_in() -> bool:
                for k, member in enumerate(members):
                    try:
                        while True:
                            got[k].append(int(member.messages.get_nowait().payload))
                    except queue.Empty:
                        pass
                return sum(map(len, got)) >= 30

            wait_for(all_in, 20, "every job delivered once", describe=lambda: got)
            assert sorted(sum(got, [])) == list(range(30))
            assert [len(g) for g in got] == [10, 10, 10]  # in turn
        finally:
            for client in (*members, watcher):
                client.close()


def test_a_will_is_published_when_the_connection_ends_without_disconnect(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """MQTT-3.1.2-8 (the will is published when the connection closes without DISCONNECT) and
    MQTT-3.1.2-10 (not after a DISCONNECT); a will with a delay is not published when the
    session is resumed within it (MQTT 5, 3.1.3.2.2)."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    with admin_mqtt(mqtt_address, 5) as watcher:
        watcher.subscribe(f"{prefix}/status/#", qos=1)
        for name, delay in (("gone", 0), ("polite", 0), ("back", 30)):
            client = admin_mqtt(mqtt_address, 5, connect=False, client_id=f"{prefix.replace('/', '-')}-{name}",
                                session_expiry=60, clean_start=False)
            will = Properties(PacketTypes.WILLMESSAGE)
            if delay:
                will.WillDelayInterval = delay
            client.client.will_set(f"{prefix}/status/{name}", "offline", qos=1, retain=True, properties=will)
            client.connect()
            if name == "polite":
                client.close()
            else:
                client.drop()
            if name == "back":  # comes back within the delay: no will
                again = admin_mqtt(mqtt_address, 5, client_id=f"{prefix.replace('/', '-')}-{name}",
                                   session_expiry=60, clean_start=False)
                assert again.session_present
                again.client.publish(f"{prefix}/status/done", "x", qos=1, retain=True).wait_for_publish(20)
                again.close()
        first = watcher.next()
        assert (first.topic, first.payload) == (f"{prefix}/status/gone", b"offline")
        second = watcher.next()
        assert second.topic == f"{prefix}/status/done"  # neither "polite" nor "back" left a will


def test_request_response_properties_travel_with_the_message(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """MQTT-3.3.2-4 (payload format indicator), -15 (response topic), -16 (correlation data),
    -17 (user properties), -20 (content type) forwarded unaltered; MQTT 5 request/response."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    with admin_mqtt(mqtt_address, 5) as requester, admin_mqtt(mqtt_address, 5) as responder:
        responder.subscribe(f"{prefix}/requests", qos=1)
        requester.subscribe(f"{prefix}/replies", qos=1)
        ask = Properties(PacketTypes.PUBLISH)
        ask.ResponseTopic = f"{prefix}/replies"
        ask.CorrelationData = b"\x01\x02"
        ask.UserProperty = [("k", "v"), ("k", "w")]
        ask.ContentType = "text/plain"
        ask.PayloadFormatIndicator = 1
        requester.client.publish(f"{prefix}/requests", "ping", qos=1, properties=ask).wait_for_publish(20)
        request = responder.next()
        p = request.properties
        assert (request.payload, p.ResponseTopic, p.CorrelationData) == (b"ping", f"{prefix}/replies", b"\x01\x02")
        assert (p.UserProperty, p.ContentType, p.PayloadFormatIndicator) == ([("k", "v"), ("k", "w")], "text/plain", 1)
        answer = Properties(PacketTypes.PUBLISH)
        answer.CorrelationData = p.CorrelationData
        responder.client.publish(p.ResponseTopic, "pong", qos=1, properties=answer).wait_for_publish(20)
        reply = requester.next()
        assert (reply.payload, reply.properties.CorrelationData) == (b"pong", b"\x01\x02")


def test_the_broker_s_figures_under_sys_are_read_only(broker: str, mqtt_address: tuple[str, int]) -> None:
    """$SYS/broker/...: each gateway's figures (MQTT's convention), not matched by '#'
    (MQTT-4.7.2-1) and not writable by clients."""
    with admin_mqtt(mqtt_address, 5) as client:
        client.subscribe("$SYS/broker/version", qos=1)
        version = client.next()
        assert version.payload.startswith(b"canopy ") and version.retain
        for figure in ("clients/mqtt", "messages/mqtt/expired", "sessions/mqtt_taken_over", "sessions/mqtt_replayed",
                       "sessions/mqtt_replay_gaps"):
            client.subscribe(f"$SYS/broker/gateways/+/{figure}", qos=1)
            got = client.next()
            assert got.topic.endswith(figure) and int(got.payload) >= 0, (got.topic, got.payload)
        assert code(client.publish("$SYS/broker/version", "forged", qos=1, retain=True)) == 0x87


def test_more_unacknowledged_publishes_than_the_receive_maximum_disconnect(mqtt_address: tuple[str, int]) -> None:
    """MQTT-3.3.4-9 (5.0: the server's Receive Maximum; 3.1.1 has the same bound here): a client
    that never sends PUBREL cannot make the server hold more QoS 2 publishes than that."""
    from mqtt import codec as m

    with socket.create_connection(mqtt_address, timeout=10) as raw:
        raw.sendall(m.encode(m.Connect(5, "", username=ADMIN[0], password=ADMIN[1].encode()), 5))
        reader = m.Reader(version=5)
        (connack,) = reader.feed(raw.recv(1024))
        assert isinstance(connack, m.Connack) and connack.reason_code == 0
        most = connack.properties.receive_maximum
        assert most is not None
        raw.sendall(b"".join(m.encode(m.Publish("rm/t", b"x", 2, packet_id=i + 1), 5) for i in range(most + 1)))
        got: list[object] = []
        while True:
            data = raw.recv(65536)
            if not data:
                break
            got += reader.feed(data)
        assert isinstance(got[-1], m.Disconnect) and got[-1].reason_code == 0x93, got[-3:]
        assert sum(isinstance(p, m.Pubrec) for p in got) <= most


def test_sessions_with_an_expiry_are_recorded_where_only_administrators_read_them(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """The replicated record another gateway takes a session up from (tests/e2e/test_supervision.py
    restarts a gateway): under $MQTT/sessions/, hidden from CLIENT and ANONYMOUS; gone when the
    session ends."""
    client_id = f"{prefix.replace('/', '-')}-rec"
    path = f"$MQTT/sessions/{client_id.encode().hex()}"
    with canopy.connect_sync(broker, *ADMIN) as admin, canopy.connect_sync(broker) as anonymous:
        with admin_mqtt(mqtt_address, 5, client_id=client_id, session_expiry=60) as client:
            client.subscribe(f"{prefix}/#", qos=1)

            def recorded() -> list[object]:
                rows = admin.topics.fetch(f">{path}")
                return rows[0].value["subscriptions"] if rows else []

            assert wait_for(recorded, 10, "the record") == [[f"{prefix}/#", 1, 0, 0]]
            with pytest.raises(errors.PermissionDeniedError):
                anonymous.topics.fetch(f">{path}")
            client.client.disconnect(properties=_expiry_zero())  # ends the session
        wait_for(lambda: admin.topics.fetch(f">{path}") == [], 10, "the record to go")


def _expiry_zero() -> object:
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    properties = Properties(PacketTypes.DISCONNECT)
    properties.SessionExpiryInterval = 0
    return properties


def test_no_local_and_retain_as_published(broker: str, mqtt_address: tuple[str, int], prefix: str) -> None:
    """MQTT-3.8.3-3 (No Local: a session's own publishes are not sent back to it) and
    MQTT-3.3.1-12/-13 (Retain As Published: live messages keep the publisher's RETAIN flag;
    without it, RETAIN 0)."""
    with admin_mqtt(mqtt_address, 5) as me, admin_mqtt(mqtt_address, 5) as other, \
            admin_mqtt(mqtt_address, 5) as plain:
        me.subscribe(f"{prefix}/chat", qos=1, noLocal=True, retainAsPublished=True)
        plain.subscribe(f"{prefix}/chat", qos=1)
        me.publish(f"{prefix}/chat", "mine", qos=1, retain=True)
        other.publish(f"{prefix}/chat", "theirs", qos=1, retain=True)
        other.publish(f"{prefix}/chat", "passing", qos=1, retain=False)
        got = [me.next() for _ in range(2)]
        assert [(m.payload, m.retain) for m in got] == [(b"theirs", True), (b"passing", False)]
        seen = [plain.next() for _ in range(3)]
        assert [(m.payload, m.retain) for m in seen] == [(b"mine", False), (b"theirs", False), (b"passing", False)]


def test_a_session_whose_partitions_no_longer_keep_what_it_missed_gets_the_current_values(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """A record as a lost gateway would have left it, with positions older than any message the
    partitions keep: the gateway taking the session up cannot give it what it missed, so it
    gives it its topics' current values (RETAIN 0: its subscriptions stand) and counts a gap."""
    client_id = f"{prefix.replace('/', '-')}-gap"
    path = f"$MQTT/sessions/{client_id.encode().hex()}"

    def gaps(admin: Any) -> int:
        return sum(g.get("mqtt_replay_gaps") or 0 for g in admin.server.cluster_status()["gateways"])

    with canopy.connect_sync(broker, *ADMIN) as admin:
        admin.topics.add(f"{prefix}/n", "INT64", {"CONFLATION": "off"})
        for n in (41, 42):
            admin.topics.set(f"{prefix}/n", n)
        before = gaps(admin)
        admin.topics.add_and_set(path, {
            "principal": ADMIN[0], "expiry": 60, "left": None, "subscriptions": [[f"{prefix}/#", 1, 0, 0]],
            "positions": {str(p): 1 for p in range(64)}, "gateway": "a-gateway-gone",
        }, "JSON")
        with admin_mqtt(mqtt_address, 5, client_id=client_id, clean_start=False, session_expiry=60) as client:
            assert client.session_present is True
            got = client.next()
            assert (got.topic, got.payload, got.retain) == (f"{prefix}/n", b"42", False)
            wait_for(lambda: gaps(admin) == before + 1, 10, "the gap to be counted", describe=lambda: gaps(admin))
            client.client.disconnect(properties=_expiry_zero())


def test_MQTT_3_3_2_4_to_6_a_retained_message_keeps_what_it_was_published_with_and_expires(
    broker: str, mqtt_address: tuple[str, int], prefix: str
) -> None:
    """A later subscriber's retained message carries the properties it was published with,
    unaltered (MQTT-3.3.2-4 payload format indicator, -15/-16 response topic, correlation data,
    -17/-18 user properties, -20 content type), its expiry interval less the time it was kept
    (MQTT-3.3.2-6), at the lower of its QoS and the subscription's (MQTT-3.8.4-8); once its
    interval has passed nobody gets it (MQTT-3.3.2-5); a value set without them has none."""
    from paho.mqtt.packettypes import PacketTypes
    from paho.mqtt.properties import Properties

    kept = Properties(PacketTypes.PUBLISH)
    kept.PayloadFormatIndicator = 1
    kept.ContentType = "text/plain"
    kept.UserProperty = [("k", "v"), ("k", "w")]
    kept.ResponseTopic = f"{prefix}/replies"
    kept.CorrelationData = b"\x01\x02"
    kept.MessageExpiryInterval = 100
    short = Properties(PacketTypes.PUBLISH)
    short.MessageExpiryInterval = 1
    with admin_mqtt(mqtt_address, 5) as publisher:
        publisher.client.publish(f"{prefix}/kept", "hello", qos=1, retain=True, properties=kept).wait_for_publish(20)
        publisher.client.publish(f"{prefix}/short", "soon gone", qos=1, retain=True,
                                 properties=short).wait_for_publish(20)
        published = time.monotonic()
        time.sleep(max(0.0, published + 1.5 - time.monotonic()))  # the short one's interval must pass

        def retained_then(client: MQTT, marker: str) -> list[Any]:
            """What a new subscription brings, up to a live message published after it."""
            assert [code(c) for c in client.subscribe(f"{prefix}/#", qos=2)] == [2]
            publisher.publish(f"{prefix}/marker", marker, qos=1)
            got: list[Any] = []
            while not got or got[-1].topic != f"{prefix}/marker":
                got.append(client.next())
            return got[:-1]

        with admin_mqtt(mqtt_address, 5) as late:
            (message,) = retained_then(late, "1")  # not the expired one
            waited = time.monotonic() - published
            p = message.properties
            assert (message.topic, message.payload, message.retain, message.qos) == (f"{prefix}/kept", b"hello", 1, 1)
            assert (p.PayloadFormatIndicator, p.ContentType, p.UserProperty, p.ResponseTopic, p.CorrelationData) == (
                1, "text/plain", [("k", "v"), ("k", "w")], f"{prefix}/replies", b"\x01\x02")
            assert 0 < p.MessageExpiryInterval <= 100 - int(waited), (p.MessageExpiryInterval, waited)
        with canopy.connect_sync(broker, *ADMIN) as native:
            native.topics.set(f"{prefix}/kept", b"plain")
        with admin_mqtt(mqtt_address, 5) as later:
            (message,) = [m for m in retained_then(later, "2") if m.topic == f"{prefix}/kept"]
            assert message.payload == b"plain" and not hasattr(message.properties, "ContentType")
