"""Authentication and every enforced permission, through the client."""

from __future__ import annotations

import pytest

import canopy
from canopy import errors
from tests.actors.conftest import ADMIN

pytestmark = pytest.mark.asyncio


async def principal(admin: canopy.Session, name: str, *commands: list[object]) -> tuple[str, str]:
    """A principal with a role of its own, named after it, set up by ``commands``."""
    await admin.security.update(["add_principal", name, f"{name}-password", [name]], *commands)
    return name, f"{name}-password"


async def test_authentication(broker: str, prefix: str) -> None:
    with pytest.raises(errors.AuthenticationError):
        await canopy.connect(broker, "admin", "not-the-password")
    with pytest.raises(errors.AuthenticationError):
        await canopy.connect(broker, f"{prefix}-nobody", "whatever1")
    async with canopy.connect(broker, *ADMIN) as admin:
        user = await principal(admin, f"{prefix}-u")
        async with canopy.connect(broker, *user) as s:
            assert s.properties["$Principal"] == user[0] and s.properties["$Roles"] == f'"{user[0]}"'
        await admin.security.set_anonymous(False, ["ANONYMOUS"])
        try:
            with pytest.raises(errors.AuthenticationError, match="anonymous"):
                await canopy.connect(broker)
        finally:
            await admin.security.set_anonymous(True, ["ANONYMOUS"])
        async with canopy.connect(broker) as anonymous:
            assert anonymous.properties["$Principal"] == ""


async def test_repeated_failures_back_off_and_look_alike(broker: str, prefix: str) -> None:
    """Keep this test's failures few: every login of the actor tests comes from
    127.0.0.1, and the address counts failures too (it slows logins beyond 100,
    sessions/logins.py). The backoff is counted (the gateway's ``login_delayed``: attempts
    admitted after a wait), not timed: a loaded machine stretches every login alike."""
    from tests.actors.test_hostile_input import gateway_stats

    async with canopy.connect(broker, *ADMIN) as admin:
        name, _ = await principal(admin, f"{prefix}-p")
    messages = []

    async def fail() -> int:
        with pytest.raises(errors.AuthenticationError) as info:
            await canopy.connect(broker, name, "a wrong password")
        messages.append(str(info.value).replace(name, "NAME"))
        return int(gateway_stats()["login_delayed"])

    before = gateway_stats()["login_delayed"]
    free = [await fail() for _ in range(3)]  # a known principal: 3 free failures, then a wait
    assert free == [before] * 3, (before, free)
    # the backoff (0.25 s, doubling) runs from the last failure: the next attempt waits unless
    # the last answer and a new connection took longer than that, so up to 4 more tries
    later = []
    while len(later) < 4 and (not later or later[-1] == before):
        later.append(await fail())
    assert later[-1] == before + 1, (before, later)
    with pytest.raises(errors.AuthenticationError) as info:
        await canopy.connect(broker, f"{prefix}-nobody-at-all", "a wrong password")
    assert str(info.value).replace(f"{prefix}-nobody-at-all", "NAME") == messages[0]  # nothing tells them apart
    assert len(set(messages)) == 1


async def test_topic_permissions(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        for leaf in ("open/a", "open/b", "locked/c"):
            await admin.topics.add_and_set(f"{prefix}/{leaf}", leaf)
        role = f"{prefix}-r"
        user = await principal(
            admin,
            role,
            ["set_default_path_permissions", role, ["READ_TOPIC", "SELECT_TOPIC"]],
            ["set_path_permissions", role, f"{prefix}/open", ["READ_TOPIC", "SELECT_TOPIC", "UPDATE_TOPIC", "MODIFY_TOPIC"]],
            ["set_path_permissions", role, f"{prefix}/locked", ["SELECT_TOPIC"]],
            ["set_path_permissions", role, f"{prefix}/noselect", ["READ_TOPIC"]],
        )
        async with canopy.connect(broker, *user) as s:
            # READ_TOPIC filters what fetch and subscribe show
            assert [r.path for r in await s.topics.fetch(f"?{prefix}//")] == [f"{prefix}/open/a", f"{prefix}/open/b"]
            # SELECT_TOPIC on the selector's path prefix
            with pytest.raises(errors.PermissionDeniedError, match=f"SELECT_TOPIC is needed on '{prefix}/noselect'"):
                await s.topics.subscribe(f"?{prefix}/noselect//")
            with pytest.raises(errors.PermissionDeniedError, match="SELECT_TOPIC"):
                await s.topics.fetch(f">{prefix}/noselect/x")
            # UPDATE_TOPIC
            await s.topics.set(f"{prefix}/open/a", "changed")
            with pytest.raises(errors.PermissionDeniedError, match=f"UPDATE_TOPIC is needed on '{prefix}/locked/c'"):
                await s.topics.set(f"{prefix}/locked/c", "nope")
            # MODIFY_TOPIC for add and remove; remove skips what it may not remove
            await s.topics.add(f"{prefix}/open/new", "STRING")
            with pytest.raises(errors.PermissionDeniedError, match="MODIFY_TOPIC"):
                await s.topics.add(f"{prefix}/locked/new", "STRING")
            assert await s.topics.remove(f"?{prefix}//") == 3
            # the locked topic is still there, unchanged
            remaining = await admin.topics.fetch(f"?{prefix}//")
            assert [(r.path, r.value) for r in remaining] == [(f"{prefix}/locked/c", "locked/c")]
            # global permissions
            with pytest.raises(errors.PermissionDeniedError, match="VIEW_SECURITY"):
                await s.security.get()
            with pytest.raises(errors.PermissionDeniedError, match="MODIFY_SECURITY"):
                await s.security.set_anonymous(False, [])
            with pytest.raises(errors.PermissionDeniedError, match="VIEW_SESSION"):
                await s.sessions.get_properties(s.session_id)
            with pytest.raises(errors.PermissionDeniedError, match="MODIFY_SESSION"):
                await s.sessions.set_properties({"A": "1"}, s.session_id)


async def test_permission_changes_reach_existing_subscriptions(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.topics.add_and_set(f"{prefix}/x", 1)
        role = f"{prefix}-r"
        user = await principal(
            admin, role, ["set_default_path_permissions", role, ["SELECT_TOPIC"]]
        )
        async with canopy.connect(broker, *user) as s:
            sub = await s.topics.subscribe(f"?{prefix}//")
            await admin.security.set_default_path_permissions(role, ["SELECT_TOPIC", "READ_TOPIC"])
            event = await sub.next(15)
            assert (event.kind, event.path, event.value) == ("subscribed", f"{prefix}/x", 1)
            await admin.security.set_default_path_permissions(role, ["SELECT_TOPIC"])
            event = await sub.next(15)
            assert (event.kind, event.reason) == ("unsubscribed", "AUTHORIZATION")


async def test_time_series_edit_permissions(broker: str, prefix: str) -> None:
    path = f"{prefix}/ts"
    async with canopy.connect(broker, *ADMIN) as admin:
        await admin.topics.add(path, "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "STRING"})
        await admin.time_series.append(path, "by admin")
        role = f"{prefix}-w"
        writer = await principal(
            admin,
            role,
            ["set_default_path_permissions", role, ["READ_TOPIC", "SELECT_TOPIC", "UPDATE_TOPIC",
                                                    "EDIT_OWN_TIME_SERIES_EVENTS"]],
        )
        reader = await principal(admin, f"{prefix}-rd")
        async with canopy.connect(broker, *writer) as w:
            own = await w.time_series.append(path, "mine")
            await w.time_series.edit(path, own.sequence, "mine, edited")
            with pytest.raises(errors.PermissionDeniedError, match="EDIT_TIME_SERIES_EVENTS"):
                await w.time_series.edit(path, 0, "not mine")
        async with canopy.connect(broker, *reader) as r:
            with pytest.raises(errors.PermissionDeniedError, match=f"READ_TOPIC is needed on '{path}'"):
                await r.time_series.range_query(path)
            with pytest.raises(errors.PermissionDeniedError, match="UPDATE_TOPIC"):
                await r.time_series.append(path, "x")
        await admin.time_series.edit(path, 0, "admin may edit anyone's")  # EDIT_TIME_SERIES_EVENTS
        values = [e.value for e in (await admin.time_series.range_query(path)).events]
        assert values == ["admin may edit anyone's", "mine, edited"]


async def test_security_store_api(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        store = await admin.security.get()
        assert "admin" in store["principals"] and "password" not in str(store)
        version = await admin.security.add_principal(f"{prefix}-p", "password-1", ["CLIENT"])
        assert version > store["version"]
        with pytest.raises(errors.InvalidSecurityCommandError, match="already exists"):
            await admin.security.add_principal(f"{prefix}-p", "password-2", [])
        with pytest.raises(errors.InvalidSecurityCommandError, match="unknown PathPermission"):
            await admin.security.set_default_path_permissions(f"{prefix}-x", ["READ"])
        await admin.security.set_password(f"{prefix}-p", "password-2")
        async with canopy.connect(broker, f"{prefix}-p", "password-2"):
            pass
        async with canopy.connect(broker, properties={"K": "1"}) as other:
            assert await admin.sessions.set_properties({"K": "2", "NEW": "x"}, other.session_id) == 1
            assert await admin.sessions.set_properties({"K": None}, other.session_id) == 1
            found = await admin.sessions.get_properties(filter=f"$SessionId is '{other.session_id}'")
            assert found[other.session_id]["NEW"] == "x" and "K" not in found[other.session_id]
            with pytest.raises(errors.InvalidPropertiesError):
                await admin.sessions.set_properties({"$Principal": "x"}, other.session_id)
            with pytest.raises(errors.InvalidFilterError, match="line 1, column"):
                await admin.sessions.get_properties(filter="K is")
        await admin.security.remove_principal(f"{prefix}-p")
        with pytest.raises(errors.AuthenticationError):
            await canopy.connect(broker, f"{prefix}-p", "password-2")
