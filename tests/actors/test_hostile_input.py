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
from actors import names

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
    baseline = (await asyncio.to_thread(gateway_stats))["connections"]
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
    await await_for(lambda: _address_released(baseline), what="the address's connections uncounted")


async def test_connections_that_never_finish_the_handshake_count_and_are_dropped(broker: str) -> None:
    """A TCP connection that never sends its WebSocket handshake counts against the
    limits like any other, and is dropped after hello_timeout_ms."""
    port = int(broker.rsplit(":", 1)[1])
    most = BROKER_SETTINGS["max_connections_per_address"]
    silent = [await asyncio.open_connection("127.0.0.1", port, local_addr=("127.0.0.81", 0)) for _ in range(most)]
    try:
        refused = await open_raw(broker, "127.0.0.81")
        (error,) = wire.decode(await asyncio.wait_for(refused.recv(), 10))
        assert isinstance(error, wire.Error) and error.code == "LIMIT_EXCEEDED", error
        await refused.close()
        for reader, _writer in silent:  # each is dropped once its time to say HELLO is up
            assert await asyncio.wait_for(reader.read(), 15) == b""
    finally:
        for _reader, writer in silent:
            writer.close()
            await writer.wait_closed()
    again = await _admitted(broker, "127.0.0.81")
    assert again is not None
    await again.close()


async def _admitted(url: str, address: str) -> Any:
    ws = await open_raw(url, address)
    await ws.send(wire.ClientProtocol().hello())
    first = wire.decode(await asyncio.wait_for(ws.recv(), 10))[0]
    if isinstance(first, wire.Welcome):
        return ws
    await ws.close()
    return None


async def _address_released(baseline: int) -> bool:
    stats = await asyncio.to_thread(gateway_stats)
    return stats["connections"] <= baseline


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
    gateway's bookkeeping returns to where it was, and so does the memory the sessions
    took (the C heap's bytes in use, which unlike the resident size do not depend on
    how much freed memory earlier tests left the heap holding)."""
    count = 90
    baseline = await asyncio.to_thread(gateway_stats)
    for round_ in range(3):
        before = (await asyncio.to_thread(gateway_stats))["heap_in_use_bytes"]
        addresses = [f"127.0.1.{1 + i // 30}" for i in range(count)]  # within the per-address limit
        sessions = []
        for i, address in enumerate(addresses):
            ws = await open_raw(broker, address)
            await ws.send(wire.ClientProtocol().hello(properties=maximal_properties(f"r{round_}-{i}")))
            assert isinstance(wire.decode(await ws.recv())[0], wire.Welcome)
            sessions.append(ws)
        peak = (await asyncio.to_thread(gateway_stats))["heap_in_use_bytes"]
        took = peak - before
        assert took > count * 32 * 1024, f"round {round_}: {count} sessions took {took:,} bytes of the heap"
        for ws in sessions:
            await ws.close()
        await await_for(lambda: _settled(baseline), what="the sessions' bookkeeping gone", timeout=20)
        await await_for(
            lambda: _heap_below(before + took // 4),
            what=f"round {round_}: the heap back from {peak:,} towards {before:,} bytes in use",
            timeout=20,
        )


async def _heap_below(limit: int) -> int | None:
    used: int = (await asyncio.to_thread(gateway_stats))["heap_in_use_bytes"]
    return used if used <= limit else None


async def _settled(baseline: dict[str, Any]) -> dict[str, Any] | None:
    stats = await asyncio.to_thread(gateway_stats)
    keys = ("sessions", "kept_sessions", "resume_tokens", "connections", "connection_addresses", "groups")
    return stats if all(stats[k] <= baseline[k] for k in keys) else None
