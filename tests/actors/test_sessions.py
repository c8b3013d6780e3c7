"""Requests about other sessions (actors/requests/sessions.py) against the real broker:
``session_close`` ends sessions by id or filter, on their gateway, connected or kept for their
client; the closed client is told why and does not reconnect."""

from __future__ import annotations

from typing import Any

import pytest
from websockets.asyncio.client import connect as ws_connect

import canopy
from canopy import errors
from canopy import protocol as wire
from tests.actors.conftest import ADMIN
from tests.conftest import until


async def test_a_closed_session_is_told_why_and_does_not_reconnect(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        other = await canopy.connect(broker, properties={"TAG": prefix}, reconnect_timeout=30)
        try:
            assert await admin.sessions.close(other.session_id) == 1
            await until(lambda: other.closed, 10, "the closed session's client to notice")
            assert isinstance(other.close_reason, errors.SessionClosedError)
            assert other.close_reason.code == "CLOSED_BY_CLIENT_CONTROL" and other.reconnects == 0
            with pytest.raises(errors.SessionClosedError):
                await other.topics.fetch(">nothing/here")
            assert other.session_id not in await admin.sessions.get_properties(other.session_id)
            assert await admin.sessions.close(other.session_id) == 0  # gone already
        finally:
            await other.close()


async def test_a_filter_closes_every_session_it_matches_and_no_other(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        tagged = [await canopy.connect(broker, properties={"TAG": prefix}) for _ in range(2)]
        async with canopy.connect(broker, properties={"TAG": f"{prefix}-not"}) as spared:
            try:
                assert await admin.sessions.close(filter=f"TAG is '{prefix}'") == 2
                await until(lambda: all(s.closed for s in tagged), 10, "both tagged sessions to close")
                assert spared.connected and not spared.closed
                assert await spared.topics.fetch(f">{prefix}/nothing") == []
            finally:
                for s in tagged:
                    await s.close()
        with pytest.raises(errors.InvalidFilterError, match="line 1, column"):
            await admin.sessions.close(filter="TAG is")
        with pytest.raises(errors.InvalidRequestError):
            await admin.sessions.close()


async def binary(ws: Any) -> bytes:
    data = await ws.recv()
    assert isinstance(data, bytes), data
    return data


def kept_sessions(ray: Any) -> int:
    from actors import names

    stats = ray.get(ray.get_actor(names.CONTROLLER).stats.remote(), timeout=30)["gateways"][0]
    return int(stats["kept_sessions"])


async def test_a_session_kept_for_its_client_is_closed_and_cannot_be_resumed(
    broker: str, ray_node: Any, prefix: str
) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        before = kept_sessions(ray_node)
        ws = await ws_connect(broker)
        await ws.send(wire.ClientProtocol().hello(*ADMIN, {"TAG": prefix}, None))
        welcome = wire.decode(await binary(ws))[0]
        assert isinstance(welcome, wire.Welcome)
        ws.transport.abort()  # dropped without a close: the gateway keeps the session
        await until(lambda: kept_sessions(ray_node) > before, 10, "the gateway to keep the dropped session")
        assert await admin.sessions.close(welcome.session_id) == 1
        assert kept_sessions(ray_node) == before
        again = await ws_connect(broker)
        try:
            await again.send(wire.ClientProtocol().hello(*ADMIN, None, wire.Resume(welcome.session_id,
                                                                                   welcome.resume_token)))
            answer = wire.decode(await binary(again))[0]
            assert isinstance(answer, wire.Welcome) and not answer.resumed
        finally:
            await again.close()


async def test_closing_needs_view_session_and_modify_session(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.security.set_global_permissions(f"{prefix}-viewer", ["VIEW_SESSION"])
        await admin.security.set_global_permissions(f"{prefix}-modifier", ["MODIFY_SESSION"])
        await admin.security.add_principal(f"{prefix}-v", "password-v", [f"{prefix}-viewer"])
        await admin.security.add_principal(f"{prefix}-m", "password-m", [f"{prefix}-modifier"])
        async with canopy.connect(broker, properties={"TAG": prefix}) as target:
            for principal, password in ((f"{prefix}-v", "password-v"), (f"{prefix}-m", "password-m")):
                async with canopy.connect(broker, principal, password) as s:
                    with pytest.raises(errors.PermissionDeniedError):
                        await s.sessions.close(target.session_id)
            assert target.connected
