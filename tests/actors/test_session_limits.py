"""No session can hurt another: every byte a session causes counts against its
own budget, requests in flight are flow-controlled, frames and protocol errors
are bounded. (The test broker's limits are in tests/actors/conftest.py.)"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

import msgpack
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import canopy
from canopy import protocol as wire
from tests.actors.conftest import ADMIN, BROKER_SETTINGS
from tests.conftest import until

LIMITS: dict[str, Any] = BROKER_SETTINGS


async def raw_session(url: str, *, reading: bool = True) -> Any:
    ws = await ws_connect(url, max_size=None, compression=None)
    await ws.send(wire.ClientProtocol().hello(*ADMIN))
    assert isinstance(wire.decode(await ws.recv())[0], wire.Welcome)
    return ws


def fetches(first_cid: int, count: int, selector: str) -> bytes:
    return msgpack.packb(
        [[wire.REQUEST, first_cid + i, "fetch", [selector, True, False, None, None]] for i in range(count)],
        use_bin_type=True,
    )


async def close_of(ws: Any, deadline: float = 30.0) -> tuple[int | None, str]:
    """Read until the server closes; the CLOSE message's code (or the close frame's)."""
    code = None
    try:
        async with asyncio.timeout(deadline):
            while True:
                for m in wire.decode(await ws.recv()):
                    if isinstance(m, wire.Close):
                        code = m.code
    except ConnectionClosed as e:
        return (e.rcvd.code if e.rcvd else None), code or ""
    raise AssertionError("the server did not close the session")


def gateway_stats(ray: Any) -> dict[str, Any]:
    from actors import names

    stats: dict[str, Any] = ray.get(ray.get_actor(names.CONTROLLER).stats.remote(), timeout=30)["gateways"][0]
    return stats


def gateway_rss(ray: Any) -> int:
    with open(f"/proc/{gateway_stats(ray)['pid']}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_a_session_that_never_reads_is_closed_by_its_budget_and_others_go_on(
    broker: str, prefix: str, ray_node: Any
) -> None:
    async with canopy.connect(broker, *ADMIN) as admin, canopy.connect(broker, *ADMIN) as other:
        for i in range(40):  # ~80 KB of values per fetch answer
            await admin.topics.add_and_set(f"{prefix}/t{i}", os.urandom(1000).hex())
        sessions = gateway_stats(ray_node)["sessions"]
        before = gateway_rss(ray_node)
        flood = await raw_session(broker)
        flood.transport.pause_reading()  # it never reads what it asked for
        latencies = []
        for frame in range(20):  # 2,000 fetches: ~160 MB of answers if all were kept
            try:
                await flood.send(fetches(1 + frame * 100, 100, f"?{prefix}/"))
            except ConnectionClosed:
                break  # closed already
            started = time.monotonic()
            assert len(await other.topics.fetch(f">{prefix}/t0")) == 1  # the other session is served meanwhile
            latencies.append(time.monotonic() - started)
        # the gateway gave up on it: its session is gone, what it held released
        await until(lambda: gateway_stats(ray_node)["sessions"] == sessions, 30, "the flooding session to be closed")
        await until(lambda: gateway_rss(ray_node) < before + 32 * 1024 * 1024, 30,
                    f"the gateway's memory back (before {before >> 20} MiB, now {gateway_rss(ray_node) >> 20} MiB)")
        flood.transport.resume_reading()
        ws_code, reason = await close_of(flood)
        # the CLOSE message says why, unless the connection was dropped before the client read it
        assert reason in ("QUEUE_LIMIT", "") and ws_code in (4001, 1006, None), (ws_code, reason)
        assert max(latencies) < 10, latencies  # served, not starved (not a timing test: a wide bound)


async def test_requests_beyond_the_in_flight_limit_wait_and_are_all_answered(broker: str) -> None:
    limit = LIMITS["max_requests_in_flight"]
    ws = await raw_session(broker)
    try:
        count = 4 * limit
        for start in range(0, count, 100):  # frames of 100, well past the limit in flight
            await ws.send(fetches(start + 1, 100, ">nothing/here"))
        answered: list[int] = []
        async with asyncio.timeout(30):
            while len(answered) < count:
                answered += [m.cid for m in wire.decode(await ws.recv()) if isinstance(m, wire.Response)]
        assert answered == list(range(1, count + 1))
    finally:
        await ws.close()


async def test_a_frame_with_too_many_messages_closes_the_session(broker: str) -> None:
    ws = await raw_session(broker)
    await ws.send(fetches(1, LIMITS["max_messages_per_frame"] + 1, ">nothing"))
    ws_code, reason = await close_of(ws)
    assert (ws_code, reason) == (1008, "PROTOCOL_ERROR")


async def test_repeated_protocol_errors_close_the_session(broker: str) -> None:
    ws = await raw_session(broker)
    errors = 0
    for _ in range(LIMITS["max_protocol_errors"]):
        await ws.send(b"\xc1 not msgpack")
        reply = wire.decode(await ws.recv())
        errors += sum(isinstance(m, wire.Error) and m.code == "PROTOCOL_ERROR" for m in reply)
    assert errors == LIMITS["max_protocol_errors"]  # each answered, the session kept so far
    await ws.send(b"\xc1 one too many")
    ws_code, reason = await close_of(ws)
    assert (ws_code, reason) == (1008, "PROTOCOL_ERROR")


@pytest.mark.parametrize("count", [1, 7])
async def test_the_client_splits_frames_at_the_servers_message_limit(broker: str, prefix: str, count: int) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        assert s.max_messages == LIMITS["max_messages_per_frame"]
        n = count * LIMITS["max_messages_per_frame"] + 3
        await asyncio.gather(*(s.topics.add_and_set(f"{prefix}/x{i % 5}", i) for i in range(n)))
        assert not s.closed
