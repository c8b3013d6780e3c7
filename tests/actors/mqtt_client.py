"""paho-mqtt (a client nobody here wrote) with blocking calls that return what the broker answered."""

from __future__ import annotations

import queue
import threading
import uuid
from typing import Any

import paho.mqtt.client as paho
from paho.mqtt.enums import CallbackAPIVersion
from paho.mqtt.properties import Properties
from paho.mqtt.packettypes import PacketTypes

TIMEOUT = 20.0


class MQTT:
    """One paho client on its network thread; ``messages`` receives every PUBLISH it is sent."""

    def __init__(
        self, address: tuple[str, int], version: int = 5, *, username: str | None = None,
        password: str | None = None, client_id: str | None = None, user_properties: dict[str, str] | None = None,
        connect: bool = True, transport: str = "tcp", tls_ca: str | None = None,
        clean_start: bool = True, session_expiry: int | None = None, bind_address: str = "",
        topic_alias_maximum: int | None = None,
    ) -> None:
        self.address = address
        self.version = version
        protocol = paho.MQTTv5 if version == 5 else paho.MQTTv311
        self.client = paho.Client(
            CallbackAPIVersion.VERSION2, client_id=client_id if client_id is not None else f"t-{uuid.uuid4().hex[:8]}",
            protocol=protocol, transport=transport,  # type: ignore[arg-type]
            **({} if version == 5 else {"clean_session": clean_start}),
        )
        self.clean_start = clean_start
        self.bind_address = bind_address
        self.session_expiry = session_expiry
        self.topic_alias_maximum = topic_alias_maximum
        #: the session present flag of the last CONNACK
        self.session_present: bool | None = None
        if transport == "websockets":
            self.client.ws_set_options(path="/mqtt")
        if tls_ca is not None:
            self.client.tls_set(ca_certs=tls_ca)
        if username is not None:
            self.client.username_pw_set(username, password)
        self.messages: queue.Queue[paho.MQTTMessage] = queue.Queue()
        self.connected: queue.Queue[Any] = queue.Queue()
        self.disconnected: queue.Queue[Any] = queue.Queue()
        self._acks: dict[int, queue.Queue[Any]] = {}
        self._lock = threading.Lock()
        self.client.on_message = lambda c, u, message: self.messages.put(message)
        self.client.on_connect = lambda c, u, flags, code, properties: self._connected(flags, code, properties)
        self.client.on_disconnect = lambda c, u, flags, code, properties: self.disconnected.put(code)
        self.client.on_publish = lambda c, u, mid, code, properties: self._ack(mid, code)
        self.client.on_subscribe = lambda c, u, mid, codes, properties: self._ack(mid, codes)
        self.client.on_unsubscribe = lambda c, u, mid, codes, properties: self._ack(mid, codes)
        self.user_properties = user_properties
        if connect:
            code = self.connect()
            assert not code.is_failure, f"CONNECT refused: {code}"

    def connect(self) -> Any:
        """Connect; the CONNACK's reason code."""
        properties = None
        if self.version == 5 and (self.user_properties or self.session_expiry is not None
                                  or self.topic_alias_maximum is not None):
            properties = Properties(PacketTypes.CONNECT)
            if self.topic_alias_maximum is not None:
                properties.TopicAliasMaximum = self.topic_alias_maximum
            if self.user_properties:
                properties.UserProperty = list(self.user_properties.items())
            if self.session_expiry is not None:
                properties.SessionExpiryInterval = self.session_expiry
        extra = {"clean_start": self.clean_start} if self.version == 5 else {}
        self.client.connect(
            self.address[0], self.address[1], keepalive=30, properties=properties, bind_address=self.bind_address,
            **extra,
        )
        self.client.loop_start()
        code, _ = self.connected.get(timeout=TIMEOUT)
        return code

    def _connected(self, flags: Any, code: Any, properties: Any) -> None:
        self.session_present = bool(flags.session_present)
        self.connected.put((code, properties))

    def drop(self) -> None:
        """End the connection without DISCONNECT (the network went away)."""
        self.client.loop_stop()
        sock = self.client.socket()
        if sock is not None:
            sock.close()

    def _waiter(self, mid: int) -> queue.Queue[Any]:
        with self._lock:
            return self._acks.setdefault(mid, queue.Queue())

    def _ack(self, mid: int, code: Any) -> None:
        self._waiter(mid).put(code)

    def publish(
        self, topic: str, payload: bytes | str, qos: int = 1, retain: bool = False, *, expiry: int | None = None
    ) -> Any:
        """Publish (with ``expiry``, an MQTT 5 Message Expiry Interval); for QoS 1 and 2 the
        broker's reason code (PUBACK / PUBREC), for QoS 0 once written."""
        properties = None
        if expiry is not None:
            properties = Properties(PacketTypes.PUBLISH)
            properties.MessageExpiryInterval = expiry
        info = self.client.publish(topic, payload, qos, retain, properties)
        code = self._waiter(info.mid).get(timeout=TIMEOUT)
        with self._lock:
            del self._acks[info.mid]
        return code

    def subscribe(self, topic_filter: str, qos: int = 1, **options: Any) -> list[Any]:
        """Subscribe; the SUBACK's codes."""
        if self.version == 5:
            result, mid = self.client.subscribe(topic_filter, options=paho.SubscribeOptions(qos=qos, **options))
        else:
            result, mid = self.client.subscribe(topic_filter, qos)
        assert result == paho.MQTT_ERR_SUCCESS, result
        return list(self._waiter(mid).get(timeout=TIMEOUT))

    def unsubscribe(self, topic_filter: str) -> Any:
        result, mid = self.client.unsubscribe(topic_filter)
        assert result == paho.MQTT_ERR_SUCCESS, result
        return self._waiter(mid).get(timeout=TIMEOUT)

    def next(self, timeout: float = TIMEOUT) -> paho.MQTTMessage:
        try:
            return self.messages.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no message within {timeout} s") from None

    def close(self) -> None:
        self.client.disconnect()
        self.client.loop_stop()

    def __enter__(self) -> MQTT:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
