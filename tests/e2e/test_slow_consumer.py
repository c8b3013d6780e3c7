"""Two sessions, one deliberately slow: what each CONFLATION policy does to the
slow one, while the publisher and the fast session are unaffected.

The server runs with --queue-limit 40 --backpressure-threshold 8. The slow
session is a bare WebSocket client that subscribes and then stops reading, so
the server's writes to it block and its queue grows; the fast session reads
everything.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import cbor2
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import canopy
from canopy import protocol as wire
from tests.e2e.conftest import ADMIN, Server

pytestmark = pytest.mark.asyncio
UPDATES = 300
PAYLOAD = "x" * 60_000  # large values fill the socket buffers quickly


async def slow_session(url: str, selector: str) -> Any:
    ws = await ws_connect(url, max_size=None, max_queue=1)
    await ws.send(wire.ClientProtocol().hello())
    assert isinstance(wire.decode(await ws.recv())[0], wire.Welcome)
    await ws.send(wire.frame([wire.pack([wire.REQUEST, 1, "subscribe", [selector]])]))
    # wait for the subscribe response, then stop reading
    while True:
        messages = wire.decode(await ws.recv())
        if any(isinstance(m, wire.Response) and m.cid == 1 for m in messages):
            return ws


def finished(policy: str, messages: list[Any]) -> bool:
    """Whether the slow session has read what its policy must finally bring it."""
    if policy == "off":
        return any(isinstance(m, wire.Close) for m in messages)
    if policy == "unsubscribe":
        return any(isinstance(m, wire.Unsubscribed) for m in messages)
    return UPDATES - 1 in values_of(messages)


async def read_all(ws: Any, policy: str, timeout: float = 60.0) -> list[Any]:
    """What the slow session reads once it reads again: until its policy's final
    message arrives, the connection closes, or ``timeout`` passes."""
    out: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while not finished(policy, out) and time.monotonic() < deadline:
            out.extend(wire.decode(await asyncio.wait_for(ws.recv(), deadline - time.monotonic())))
    except (TimeoutError, ConnectionClosed):
        pass
    return out


async def run(server: Server, policy: str) -> tuple[list[Any], list[int], float]:
    path = f"slow/{policy}"
    async with canopy.connect(server.url, *ADMIN) as publisher, canopy.connect(server.url) as fast:
        await publisher.topics.add(path, "JSON", {"CONFLATION": policy})
        await publisher.topics.set(path, {"n": -1, "pad": PAYLOAD})
        fast_sub = await fast.topics.subscribe(f">{path}")
        assert (await fast_sub.next(10)).value["n"] == -1
        slow = await slow_session(server.url, f">{path}")
        started = time.monotonic()
        fast_values: list[int] = []
        for n in range(UPDATES):
            await publisher.topics.set(path, {"n": n, "pad": PAYLOAD})
            # the fast session keeps up (it has each value before the next is published),
            # so nothing is ever pending for it, while the slow session reads nothing at all
            event = await fast_sub.next(30)
            fast_values.append(event.value["n"])
        publish_seconds = time.monotonic() - started
        slow_messages = await read_all(slow, policy)
        await slow.close()
        return slow_messages, fast_values, publish_seconds


def values_of(messages: list[Any]) -> list[int]:
    return [cbor2.loads(m.value)["n"] for m in messages if isinstance(m, (wire.Value, wire.Subscribed)) and m.value]


async def test_off_closes_the_slow_session(server: Server) -> None:
    slow, fast, _ = await run(server, "off")
    assert fast == list(range(UPDATES))
    closes = [m for m in slow if isinstance(m, wire.Close)]
    assert [c.code for c in closes] == ["QUEUE_LIMIT"], slow[-3:]
    got = values_of(slow)
    assert got == sorted(got) and len(got) < UPDATES + 1


async def test_conflate_drops_intermediate_values_for_the_slow_session(server: Server) -> None:
    slow, fast, _ = await run(server, "conflate")
    assert fast == list(range(UPDATES))
    got = values_of(slow)
    assert not any(isinstance(m, wire.Close) for m in slow)
    assert got == sorted(got), "values stay in order"
    assert got[-1] == UPDATES - 1, "the latest value always gets through"
    assert len(got) < UPDATES, "some values were conflated away"


async def test_always_conflates_to_the_latest(server: Server) -> None:
    slow, fast, _ = await run(server, "always")
    got = values_of(slow)
    assert got == sorted(got) and got[-1] == UPDATES - 1 and len(got) < UPDATES
    assert fast == list(range(UPDATES))


async def test_unsubscribe_drops_the_slow_session_from_the_topic(server: Server) -> None:
    slow, fast, _ = await run(server, "unsubscribe")
    assert fast == list(range(UPDATES))
    reasons = [m.reason for m in slow if isinstance(m, wire.Unsubscribed)]
    assert reasons == ["BACK_PRESSURE"]
    assert not any(isinstance(m, wire.Close) for m in slow)
    got = values_of(slow)
    assert got == sorted(got) and got[-1] < UPDATES - 1
