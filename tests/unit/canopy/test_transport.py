"""WebSocket streams on websockets' sans-I/O core, over real loopback TCP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

from canopy import transport
from canopy.transport import Handler, WebSocketStream
from tests.conftest import until as wait_until

DEADLINE = 5.0


async def until(condition: Callable[[], Any], what: str) -> None:
    await wait_until(condition, DEADLINE, what)


class Recorder(Handler):
    def __init__(self) -> None:
        self.streams: list[WebSocketStream] = []
        self.messages: list[bytes | str] = []
        self.writable_calls = 0
        self.closed_calls = 0

    def on_open(self, stream: WebSocketStream) -> None:
        self.streams.append(stream)

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        self.messages.append(data)

    def on_writable(self, stream: WebSocketStream) -> None:
        self.writable_calls += 1

    def on_closed(self, stream: WebSocketStream) -> None:
        self.closed_calls += 1


class Echo(Recorder):
    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        super().on_message(stream, data)
        stream.send(data if isinstance(data, bytes) else data.encode())


Server = tuple[str, list[Recorder]]


async def serve(handler: type[Recorder] = Recorder, **options: Any) -> tuple[asyncio.Server, str, list[Recorder]]:
    handlers: list[Recorder] = []

    def make() -> Handler:
        handlers.append(handler())
        return handlers[-1]

    server = await asyncio.get_running_loop().create_server(
        transport.serve_stream(make, **{"max_size": 1 << 20, **options}), "127.0.0.1", 0
    )
    port = server.sockets[0].getsockname()[1]
    return server, f"ws://127.0.0.1:{port}", handlers


@pytest.fixture
async def echo() -> AsyncIterator[tuple[str, list[Recorder]]]:
    server, url, handlers = await serve(Echo)
    yield url, handlers
    server.close()
    for h in handlers:
        for s in h.streams:
            s.abort()


async def adopt(stream: WebSocketStream) -> Recorder:
    recorder = Recorder()
    early = transport.take_messages(stream)
    stream.handler = recorder
    recorder.messages += early
    return recorder


async def test_messages_round_trip_in_order(echo: tuple[str, list[Recorder]]) -> None:
    url, _ = echo
    stream = await transport.connect(url)
    client = await adopt(stream)
    for i in range(50):
        assert stream.send(b"m%d" % i)
    await until(lambda: len(client.messages) == 50, "the echoes")
    assert client.messages == [b"m%d" % i for i in range(50)]
    await stream.aclose()
    assert stream.close_code == 1000 and not stream.open


async def test_a_standard_client_interoperates(echo: tuple[str, list[Recorder]]) -> None:
    url, handlers = echo
    async with ws_connect(url, compression=None) as ws:
        await ws.send(b"binary")
        assert await ws.recv() == b"binary"
        # a fragmented text message is reassembled
        await ws.send(iter(["frag", "mented"]))
        assert await ws.recv() == b"fragmented"
    await until(lambda: handlers[0].closed_calls == 1, "the server to see the close")
    assert handlers[0].messages == [b"binary", "fragmented"]


async def test_a_message_over_max_size_fails_with_1009() -> None:
    server, url, _ = await serve(max_size=1024)
    try:
        async with ws_connect(url, compression=None, max_size=None) as ws:
            await ws.send(b"x" * 2048)
            with pytest.raises(ConnectionClosed) as info:
                await ws.recv()
            assert info.value.rcvd is not None and info.value.rcvd.code == 1009
    finally:
        server.close()


async def test_a_peer_that_stops_answering_pings_is_dropped_with_1011() -> None:
    server, url, handlers = await serve(ping_interval=0.05, ping_timeout=0.2)
    try:
        stream = await transport.connect(url, ping_interval=None)
        await adopt(stream)
        assert stream.transport is not None
        stream.transport.pause_reading()  # it no longer reads, so it never answers a ping
        await until(lambda: handlers and handlers[0].closed_calls == 1, "the server to drop the silent peer")
        server_stream = handlers[0].streams[0]
        assert server_stream.protocol.close_sent is not None and server_stream.protocol.close_sent.code == 1011
        stream.abort()
    finally:
        server.close()


async def test_an_idle_but_live_peer_is_kept() -> None:
    server, url, handlers = await serve(ping_interval=0.05, ping_timeout=0.2)
    try:
        stream = await transport.connect(url, ping_interval=None)
        await adopt(stream)
        await asyncio.sleep(0.6)  # many ping intervals: the client's protocol answers each ping
        assert handlers[0].closed_calls == 0 and stream.open
        await stream.aclose()
    finally:
        server.close()


async def test_back_pressure_pauses_and_resumes_the_writer(echo: tuple[str, list[Recorder]]) -> None:
    url, handlers = echo
    stream = await transport.connect(url)
    client = await adopt(stream)
    await until(lambda: handlers and handlers[0].streams, "the server side")
    server_stream = handlers[0].streams[0]
    assert stream.transport is not None
    stream.transport.pause_reading()
    chunk = b"y" * 65536
    sent = 0
    while not server_stream.paused and sent < 2000:
        server_stream.send(chunk)
        sent += 1
        await asyncio.sleep(0)
    assert server_stream.paused, "the server's buffer never filled"
    stream.transport.resume_reading()
    await until(lambda: handlers[0].writable_calls >= 1 and not server_stream.paused, "the buffer to drain")
    await until(lambda: len(client.messages) == sent, "every chunk")
    await stream.aclose()


async def test_a_refused_handshake_is_an_invalid_handshake() -> None:
    async def http(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(http, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        with pytest.raises(transport.InvalidHandshake):
            await transport.connect(f"ws://127.0.0.1:{port}")
    finally:
        server.close()


async def test_sending_after_close_is_refused(echo: tuple[str, list[Recorder]]) -> None:
    url, _ = echo
    stream = await transport.connect(url)
    await adopt(stream)
    await stream.aclose()
    assert stream.send(b"late") is False
