"""The client always finishes: when its connection ends, however it ends,
and it does not reconnect (``reconnect_timeout=0``), every pending request
fails with SessionClosedError and every subscription ends with the reason,
at once. (Reconnecting, it finishes when the reconnect timeout passes:
test_client_reconnect.py.) The server here is a scripted one on the client's
own WebSocket shell, over real loopback TCP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

import canopy
from canopy import errors
from canopy import protocol as wire
from canopy import transport
from canopy.transport import Handler, WebSocketStream


class Scripted(Handler):
    """Welcomes, answers ``subscribe`` with one topic, and then does ``ending``
    to the connection when it gets a ``set``."""

    def __init__(self, ending: Callable[[WebSocketStream], None], streams: list[WebSocketStream]) -> None:
        self.ending = ending
        self.streams = streams

    def on_open(self, stream: WebSocketStream) -> None:
        self.streams.append(stream)

    def on_message(self, stream: WebSocketStream, data: bytes | str) -> None:
        assert isinstance(data, bytes)
        for m in wire.decode(data):
            if isinstance(m, wire.Hello):
                stream.send(wire.encode_frame([wire.Welcome(wire.PROTOCOL_VERSION, "s1", {}, 1 << 20, "hub", 100)]))
            elif isinstance(m, wire.Request) and m.op == "subscribe":
                stream.send(wire.encode_frame([
                    wire.Subscribed(1, "a/b", "INT64", [], b"\x01"), wire.Response(m.cid, None),
                ]))
            elif isinstance(m, wire.Request) and m.op == "set":
                self.ending(stream)


def abort(stream: WebSocketStream) -> None:
    stream.abort()  # the server's process died: no close frame


def close_with_reason(stream: WebSocketStream) -> None:
    stream.send(wire.encode_frame([wire.Close("SERVER_SHUTDOWN", "the server is shutting down")]))
    stream.close(1001, "SERVER_SHUTDOWN")


def fail_protocol(stream: WebSocketStream) -> None:
    stream.protocol.fail(1011, "internal error")
    stream._flush()


@pytest.fixture
async def server() -> AsyncIterator[Callable[[Callable[[WebSocketStream], None]], Any]]:
    servers: list[asyncio.Server] = []
    streams: list[WebSocketStream] = []

    async def start(ending: Callable[[WebSocketStream], None]) -> str:
        factory = transport.serve_stream(lambda: Scripted(ending, streams), max_size=1 << 20)
        srv = await asyncio.get_running_loop().create_server(factory, "127.0.0.1", 0)
        servers.append(srv)
        return f"ws://127.0.0.1:{srv.sockets[0].getsockname()[1]}"

    yield start
    for stream in streams:
        stream.abort()
    for srv in servers:
        srv.close()
        await srv.wait_closed()


@pytest.mark.parametrize("ending", [abort, close_with_reason, fail_protocol], ids=lambda f: f.__name__)
async def test_pending_requests_fail_and_subscriptions_end_at_once(server: Any, ending: Any) -> None:
    session = await canopy.connect(await server(ending), reconnect_timeout=0)
    iterated = await session.topics.subscribe("?a//")
    called: list[canopy.TopicEvent] = []
    await session.topics.subscribe("?a//", callback=called.append)
    assert (await iterated.next(5)).kind == "subscribed"
    pending = [session.topics.set("a/b", i) for i in range(3)]
    fetch = asyncio.ensure_future(session.topics.fetch("?a//"))
    async with asyncio.timeout(5):  # at once: well within any keepalive timeout
        for future in [*pending, fetch]:
            with pytest.raises(errors.SessionClosedError) as info:
                await future
        with pytest.raises(errors.SessionClosedError) as ended:
            while True:  # what arrived before the end, then the end
                await iterated.next()
    assert ended.value is info.value  # one reason for everything
    if ending is close_with_reason:
        assert info.value.code == "SERVER_SHUTDOWN"
    assert session.closed and called and called[0].kind == "subscribed"
    with pytest.raises(errors.SessionClosedError):
        await session.topics.fetch("?a//")  # and anything later fails at once too
    await session.close()


async def test_a_server_that_never_answers_the_handshake_times_out() -> None:
    writers: list[asyncio.StreamWriter] = []

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writers.append(writer)
        await reader.read(65536)  # takes the HTTP upgrade, answers nothing

    srv = await asyncio.start_server(silent, "127.0.0.1", 0)
    try:
        port = srv.sockets[0].getsockname()[1]
        with pytest.raises(errors.ConnectError):
            await canopy.connect(f"ws://127.0.0.1:{port}", timeout=0.5)
    finally:
        for writer in writers:
            writer.close()
        srv.close()
        await srv.wait_closed()


async def test_a_hello_that_cannot_be_encoded_never_leaves() -> None:
    with pytest.raises(errors.InvalidRequestError, match="UTF-8"):
        await canopy.connect("ws://127.0.0.1:9", "user", "pass\udcff")  # a lone surrogate
