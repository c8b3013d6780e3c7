"""Bad input gets a typed error; the session survives where that is safe,
the broker keeps running and no stored value changes."""

from __future__ import annotations

from typing import Any

import msgpack
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import canopy
from canopy import errors
from canopy import protocol as wire

from tests.actors.conftest import ADMIN

pytestmark = pytest.mark.asyncio


class Raw:
    """A bare protocol client for sending what the real client never would."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws

    @classmethod
    async def open(cls, url: str) -> Raw:
        ws = await ws_connect(url, max_size=None)
        await ws.send(wire.ClientProtocol().hello())
        welcome = wire.decode(await ws.recv())
        assert isinstance(welcome[0], wire.Welcome)
        return cls(ws)

    async def send_messages(self, *items: Any) -> None:
        await self.ws.send(msgpack.packb(list(items), use_bin_type=True))

    async def reply(self, timeout: float = 10.0) -> Any:
        import asyncio

        messages = wire.decode(await asyncio.wait_for(self.ws.recv(), timeout))
        assert len(messages) == 1, messages
        return messages[0]


async def test_invalid_arguments_are_typed_errors(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        await s.topics.add_and_set(f"{prefix}/s", "good")
        cases = [
            (s.topics.add("", "STRING"), errors.InvalidPathError, "at least one non-empty segment"),
            (s.topics.add(f"{prefix}/\x01", "STRING"), errors.InvalidPathError, "control character"),
            (s.topics.add(f"{prefix}/t", "ROUTING"), errors.InvalidTypeError, "unknown topic type"),
            (s.topics.add(f"{prefix}/t", "STRING", {"CONFLATION": "sometimes"}), errors.InvalidSpecificationError, "CONFLATION"),
            (s.topics.add(f"{prefix}/t", "STRING", {"NOPE": "1"}), errors.InvalidSpecificationError, "unknown topic property"),
            (s.topics.set(f"{prefix}/s", 5), errors.InvalidValueError, "cannot hold"),
            (s.topics.set(f"{prefix}/s", b"raw"), errors.InvalidValueError, "raw bytes"),
            (s.topics.set(f"{prefix}/s", 5, "INT64"), errors.InvalidValueError, "is a STRING topic"),
            (s.topics.set(f"{prefix}/s", {1: 2}), errors.InvalidValueError, "keys must be strings"),
            (s.topics.set(f"{prefix}/missing", 1), errors.NoSuchTopicError, "no topic"),
            (s.topics.fetch("?a//b"), errors.InvalidSelectorError, "position 3"),
            (s.topics.remove("$x"), errors.InvalidSelectorError, "reserved"),
            (s.topics.fetch(">a", types=["NOPE"]), errors.InvalidTypeError, "unknown topic type"),
        ]
        for call, kind, fragment in cases:
            with pytest.raises(kind) as info:
                await call
            assert fragment in str(info.value), (kind, str(info.value))
        with pytest.raises(errors.InvalidSelectorError, match="missing"):
            await s.topics.subscribe("*a((")
        assert [r.value for r in await s.topics.fetch(f">{prefix}/s")] == ["good"]


async def test_protocol_level_garbage_keeps_the_session(broker: str, prefix: str) -> None:
    raw = await Raw.open(broker)
    await raw.ws.send(b"\xc1 not msgpack")
    error = await raw.reply()
    assert isinstance(error, wire.Error) and error.cid == 0 and error.code == "PROTOCOL_ERROR"
    await raw.ws.send("text frame")
    assert (await raw.reply()).code == "PROTOCOL_ERROR"
    await raw.send_messages([wire.REQUEST, 5, "explode", []])
    error = await raw.reply()
    assert (error.cid, error.code) == (5, "UNKNOWN_OPERATION")
    await raw.send_messages([wire.REQUEST, 6, "fetch", [f"?{prefix}//", "not a bool"]])
    error = await raw.reply()
    assert (error.cid, error.code) == (6, "INVALID_REQUEST")
    await raw.send_messages([wire.REQUEST, 7, "fetch", []])
    assert (await raw.reply()).code == "INVALID_REQUEST"
    await raw.send_messages([wire.REQUEST, 8])
    error = await raw.reply()
    assert (error.cid, error.code) == (8, "PROTOCOL_ERROR")
    await raw.send_messages([wire.HELLO, 1, None, None, {}])
    assert (await raw.reply()).code == "PROTOCOL_ERROR"
    # still a working session
    await raw.send_messages([wire.REQUEST, 9, "fetch", [">nothing/here", True, False, None, None]])
    assert await raw.reply() == wire.Response(9, [])
    await raw.ws.close()


async def test_oversized_frame_closes_only_that_connection(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as good:
        await good.topics.add_and_set(f"{prefix}/v", "kept")
        with pytest.raises(errors.FrameTooLargeError):
            await good.topics.set(f"{prefix}/v", "x" * 300_000)  # refused before sending
        raw = await Raw.open(broker)
        await raw.ws.send(b"\x00" * 300_000)
        with pytest.raises(ConnectionClosed) as info:
            await raw.ws.recv()
        assert info.value.rcvd is not None and info.value.rcvd.code == 1009
        assert [r.value for r in await good.topics.fetch(f">{prefix}/v")] == ["kept"]


@pytest.mark.parametrize(
    ("first", "code"),
    [
        (msgpack.packb([[wire.REQUEST, 1, "fetch", [">a"]]]), "PROTOCOL_ERROR"),
        (msgpack.packb([[wire.HELLO, 99, None, None, {}]]), "UNSUPPORTED_VERSION"),
        (b"\xff\xff", "PROTOCOL_ERROR"),
        (msgpack.packb([[wire.HELLO, wire.PROTOCOL_VERSION, None, None, {"$Principal": "root"}]]), "INVALID_PROPERTIES"),
    ],
)
async def test_bad_handshakes_are_refused(broker: str, first: bytes, code: str) -> None:
    ws = await ws_connect(broker)
    await ws.send(first)
    reply = wire.decode(await ws.recv())
    assert isinstance(reply[0], wire.Error) and reply[0].code == code
    with pytest.raises(ConnectionClosed):
        await ws.recv()


async def test_client_validates_before_sending(broker: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        with pytest.raises(errors.InvalidValueError):
            await s.topics.set("a", object())
        with pytest.raises(errors.InvalidSelectorError):
            await s.topics.subscribe("")
        with pytest.raises(errors.InvalidTypeError):
            await s.topics.set("a", 1, "NOPE")
        assert not s.closed
    with pytest.raises(errors.ConnectError):
        await canopy.connect("ws://127.0.0.1:1", timeout=5)
