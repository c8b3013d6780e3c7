"""MQTT over WebSocket on the gateway's own port: path ``/mqtt``, subprotocol ``mqtt``.

The gateway's WebSocket server hands a connection whose handshake asked for ``/mqtt`` to a
:class:`WebSocketMQTT` handler (``Connections.websocket_mqtt``), which drives an
:class:`~actors.mqtt.MQTTConnection` with the bytes of its binary messages, through a
:class:`WebSocketPipe` that stands in for the TCP transport.
"""

from __future__ import annotations

from typing import Any

from actors.mqtt import MQTTConnection, MQTTServer
from canopy.transport import Handler, WebSocketStream


class WebSocketPipe:
    """MQTT over WebSocket (the gateway's port, path ``/mqtt``, subprotocol ``mqtt``): each
    MQTT packet goes out as one binary message; the connection reads what the messages carry
    as one byte stream (a packet may span messages)."""

    def __init__(self, stream: WebSocketStream, connection: MQTTConnection) -> None:
        self.stream = stream
        self.connection = connection

    def write(self, data: bytes) -> None:
        self.stream.send(data)
        if self.stream.paused and not self.connection.paused:
            self.connection.pause_writing()

    def close(self) -> None:
        self.stream.close(1000)

    def abort(self) -> None:
        self.stream.abort()

    def is_closing(self) -> bool:
        return not self.stream.open

    def pause_reading(self) -> None:
        if self.stream.transport is not None:
            self.stream.transport.pause_reading()

    def resume_reading(self) -> None:
        if self.stream.transport is not None:
            self.stream.transport.resume_reading()


class WebSocketMQTT(Handler):
    """The handler of a gateway WebSocket connection whose handshake asked for ``/mqtt``:
    it drives an :class:`MQTTConnection` with the messages' bytes. ``release`` is called
    once when the connection is gone (the native handler counted it against the limits)."""

    def __init__(self, server: MQTTServer, stream: WebSocketStream, release: Any) -> None:
        self.connection = MQTTConnection(server)
        self.release = release

    def on_open(self, stream: WebSocketStream) -> None:
        address = str(stream.remote_address[0]) if stream.remote_address else ""
        self.connection.attach(WebSocketPipe(stream, self.connection), address)

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        if isinstance(data, str):  # MQTT over WebSocket is binary only (MQTT-6.0.0-1)
            self.connection.abort()
            return
        self.connection.data_received(data)

    def on_writable(self, stream: WebSocketStream) -> None:
        self.connection.resume_writing()

    def on_closed(self, stream: WebSocketStream) -> None:
        self.connection.connection_lost(None)
        self.release(stream)
