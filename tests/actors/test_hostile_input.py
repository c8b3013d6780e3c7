"""What a hostile client can make a gateway hold, and what it can make it say:
bounded HELLO properties, connections per address, a reason for a silent
connection, requests cut off mid-way, error texts without internal names, and
memory that comes back after sessions close."""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack
import pytest
from websockets.asyncio.client import connect as ws_connect
from websockets.exceptions import ConnectionClosed

import canopy
from canopy import errors
from canopy import protocol as wire
from cluster import names

from tests.actors.conftest import ADMIN, BROKER_SETTINGS
from tests.conftest import await_for

pytestmark = pytest.mark.asyncio

MOST_PROPERTIES = 32
NAME_LENGTH, VALUE_LENGTH = 64, 1024


def gateway_stats() -> dict[str, Any]:
    import ray

    stats: dict[str, Any] = ray.get(ray.get_actor(names.CONTROLLER).stats.remote(), timeout=30)["gateways"][0]
    return stats


def maximal_properties(tag: str) -> dict[str, str]:
    """As many user properties as a session may have, each as long as it may be."""
    return {f"{tag}-{i:03d}".ljust(NAME_LENGTH, "n"): "v" * VALUE_LENGTH for i in range(MOST_PROPERTIES)}


async def test_hello_properties_are_bounded(broker: str) -> None:
    async with canopy.connect(broker, properties=maximal_properties("ok")) as s:
        assert sum(not k.startswith("$") for k in s.properties) == MOST_PROPERTIES
    too_many = {**maximal_properties("many"), "one-more": "x"}
    with pytest.raises(errors.InvalidPropertiesError, match=r"33 session properties; at most 32 \(max_session_properties\)"):
        await canopy.connect(broker, properties=too_many)
    with pytest.raises(errors.InvalidPropertiesError, match=r"65 characters; at most 64 \(max_property_name_length\)"):
        await canopy.connect(broker, properties={"k" * 65: "v"})
    with pytest.raises(errors.InvalidPropertiesError, match=r"a value of 200,000 characters; at most 1,024"):
        await canopy.connect(broker, properties={"big": "v" * 200_000})
    # changes cannot take a session past the limits either
    async with canopy.connect(broker, *ADMIN) as admin, canopy.connect(broker, properties={"TAG": "x"}) as s:
        with pytest.raises(errors.InvalidPropertiesError, match="max_property_value_length"):
            await admin.sessions.set_properties({"TAG": "v" * 2000}, s.session_id)


async def open_raw(url: str, address: str) -> Any:
    """A WebSocket connection from ``address`` (a loopback address of the test's own) that sends nothing."""
    return await ws_connect(url, max_size=None, local_addr=(address, 0))


async def test_connections_per_address_are_bounded(broker: str) -> None:
    most = BROKER_SETTINGS["max_connections_per_address"]
    held = [await open_raw(broker, "127.0.0.77") for _ in range(most)]
    try:
        refused = await open_raw(broker, "127.0.0.77")
        (error,) = wire.decode(await asyncio.wait_for(refused.recv(), 10))
        assert isinstance(error, wire.Error) and error.code == "LIMIT_EXCEEDED", error
        assert "at most 40 (max_connections_per_address)" in error.message
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(refused.recv(), 10)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1013
        await refused.close()
        # another address is not affected, and the typed error reaches the client library
        async with canopy.connect(broker) as other:
            assert other.session_id
        await held.pop().close()
        replacement = await await_for(
            lambda: _admitted(broker, "127.0.0.77"), what="a connection once one of the address's closed")
        held.append(replacement)
    finally:
        for ws in held:
            await ws.close()
    await await_for(lambda: _address_released(), what="the address's connections uncounted")


async def _admitted(url: str, address: str) -> Any:
    ws = await open_raw(url, address)
    await ws.send(wire.ClientProtocol().hello())
    first = wire.decode(await asyncio.wait_for(ws.recv(), 10))[0]
    if isinstance(first, wire.Welcome):
        return ws
    await ws.close()
    return None


async def _address_released() -> bool:
    stats = await asyncio.to_thread(gateway_stats)
    return stats["connections"] <= 5


async def test_a_silent_connection_is_told_why_it_is_closed(broker: str) -> None:
    ws = await open_raw(broker, "127.0.0.78")
    try:
        (error,) = wire.decode(await asyncio.wait_for(ws.recv(), 15))
        assert isinstance(error, wire.Error) and error.code == "PROTOCOL_ERROR"
        assert "no HELLO within 2 s" in error.message
        with pytest.raises(ConnectionClosed) as closed:
            await asyncio.wait_for(ws.recv(), 15)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert closed.value.rcvd.reason == "no HELLO in time"
    finally:
        await ws.close()


async def test_error_texts_name_arguments_not_internals(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as s:
        with pytest.raises(errors.InvalidRequestError) as info:
            await s._call("fetch")
        message = str(info.value)
        assert "fetch takes 1 to 5 arguments: selector" in message and "got 0" in message
        assert "fetch_plan" not in message and "positional" not in message
        with pytest.raises(errors.InvalidRequestError, match=r"add takes 2 to 3 arguments: path, type"):
            await s._call("add", f"{prefix}/x", "STRING", {}, "extra")
        with pytest.raises(errors.InvalidRequestError) as info:
            await s._call("trace", 0, 0, 0)
        assert "trace takes 1 to 2 arguments" in str(info.value)
        with pytest.raises(errors.UnknownOperationError) as unknown:
            await s._call("x" * 5000)
        assert len(str(unknown.value)) < 2000
        assert await s.topics.fetch(f"?{prefix}//") == []  # the session goes on


async def test_requests_cut_off_by_a_close_are_not_failures(broker: str, prefix: str) -> None:
    """A client that closes while its fetches are under way makes no unexpected error
    (formerly a KeyError with its traceback in the log for each one)."""
    async with canopy.connect(broker, *ADMIN) as admin:
        for i in range(50):
            await admin.topics.add_and_set(f"{prefix}/t{i}", "x" * 100)
    before = (await asyncio.to_thread(gateway_stats))["unexpected_errors"]
    for _ in range(10):
        ws = await open_raw(broker, "127.0.0.79")
        await ws.send(wire.ClientProtocol().hello())
        await ws.recv()
        requests = [[wire.REQUEST, cid, "fetch", [f"?{prefix}//", True, True]] for cid in range(1, 21)]
        await ws.send(msgpack.packb(requests, use_bin_type=True))
        await ws.close()
    async with canopy.connect(broker, *ADMIN) as admin:  # after every fetch above was answered or dropped
        assert len(await admin.topics.fetch(f"?{prefix}//")) == 50
    stats = await asyncio.to_thread(gateway_stats)
    assert stats["unexpected_errors"] == before, stats


async def test_memory_comes_back_after_sessions_close(broker: str) -> None:
    """Sessions with maximal HELLO properties, opened and closed three times: the
    gateway's bookkeeping returns to where it was and its memory does not keep growing."""
    count = 30
    baseline = await asyncio.to_thread(gateway_stats)
    peaks, after = [], []
    for round_ in range(3):
        addresses = [f"127.0.1.{1 + i // 20}" for i in range(count)]  # within the per-address limit
        sessions = []
        for i, address in enumerate(addresses):
            ws = await open_raw(broker, address)
            await ws.send(wire.ClientProtocol().hello(properties=maximal_properties(f"r{round_}-{i}")))
            assert isinstance(wire.decode(await ws.recv())[0], wire.Welcome)
            sessions.append(ws)
        peaks.append(await asyncio.to_thread(gateway_stats))
        for ws in sessions:
            await ws.close()
        closed = await await_for(
            lambda: _settled(baseline), what="the sessions' bookkeeping gone", timeout=20)
        after.append(closed)
    per_session = (peaks[0]["rss_bytes"] - baseline["rss_bytes"]) / count
    print(f"gateway memory per session with maximal HELLO properties: {per_session / 1024:.0f} KiB")
    growth = after[2]["rss_bytes"] - after[0]["rss_bytes"]
    assert growth < 8 * 1024 * 1024, (growth, [a["rss_bytes"] for a in after])


async def _settled(baseline: dict[str, Any]) -> dict[str, Any] | None:
    stats = await asyncio.to_thread(gateway_stats)
    keys = ("sessions", "kept_sessions", "resume_tokens", "connections", "connection_addresses", "groups")
    return stats if all(stats[k] <= baseline[k] for k in keys) else None
