"""Session trees through the client: sessions of different tiers see
different data at the same session path, and every trigger re-evaluates."""

from __future__ import annotations

import pytest

import canopy
from canopy import errors
from canopy.client import Subscription, TopicEvent
from tests.actors.conftest import ADMIN

pytestmark = pytest.mark.asyncio


async def drain(sub: Subscription, n: int) -> list[TopicEvent]:
    return [await sub.next(15) for _ in range(n)]


def mappings(prefix: str) -> list[tuple[str, str]]:
    return [
        ("USER_TIER is '1' or $Country is 'DE'", f"{prefix}/backend/discounted_prices"),
        ("USER_TIER is '2'", f"{prefix}/backend/standard_prices"),
        ("$Principal is ''", f"{prefix}/backend/delayed_prices"),
    ]


async def setup_prices(admin: canopy.Session, prefix: str) -> str:
    for branch, price in (("discounted_prices", 1.0), ("standard_prices", 2.0), ("delayed_prices", 3.0)):
        await admin.topics.add_and_set(f"{prefix}/backend/{branch}/fish/cod", price)
    await admin.topics.add_and_set(f"{prefix}/market/prices/fish/cod", 9.0)
    await admin.session_trees.put_table(f"{prefix}/market/prices", mappings(prefix))
    return f"{prefix}/market/prices/fish/cod"


async def test_the_specification_prices_example(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        path = await setup_prices(admin, prefix)
        assert await admin.session_trees.get_table(f"{prefix}/market/prices") == mappings(prefix)
        await admin.security.update(
            ["add_principal", f"{prefix}-t1", "tier-one-pw", ["CLIENT"]],
            ["add_principal", f"{prefix}-t2", "tier-two-pw", ["CLIENT"]],
        )
        tier1 = await canopy.connect(broker, f"{prefix}-t1", "tier-one-pw", {"USER_TIER": "1"})
        tier2 = await canopy.connect(broker, f"{prefix}-t2", "tier-two-pw", {"USER_TIER": "2"})
        anonymous = await canopy.connect(broker)
        try:
            seen = {}
            for name, session in (("tier1", tier1), ("tier2", tier2), ("anonymous", anonymous), ("admin", admin)):
                sub = await session.topics.subscribe(f">{path}")
                event = await sub.next(15)
                assert event.path == path  # the session never sees the topic path
                seen[name] = event.value
                fetched = await session.topics.fetch(f"?{prefix}/market//")
                assert [(r.path, r.value) for r in fetched] == [(path, event.value)]
            # admin has no USER_TIER and a principal: no mapping applies, identity
            assert seen == {"tier1": 1.0, "tier2": 2.0, "anonymous": 3.0, "admin": 9.0}
        finally:
            for s in (tier1, tier2, anonymous):
                await s.close()


async def test_reevaluation_on_every_trigger(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        path = await setup_prices(admin, prefix)
        async with canopy.connect(broker, properties={"USER_TIER": "2", "TAG": prefix}) as user:
            sub = await user.topics.subscribe(f"?{prefix}/market/prices//")
            assert [(e.kind, e.value) for e in await drain(sub, 1)] == [("subscribed", 2.0)]

            # 1. a topic appears, and disappears, under the mapped branch
            await admin.topics.add_and_set(f"{prefix}/backend/standard_prices/veg/leek", 4.0)
            await admin.topics.add_and_set(f"{prefix}/backend/discounted_prices/veg/leek", 0.5)  # not this tier
            event = await sub.next(15)
            assert (event.kind, event.path, event.value) == ("subscribed", f"{prefix}/market/prices/veg/leek", 4.0)
            await admin.topics.remove(f">{prefix}/backend/standard_prices/veg/leek")
            event = await sub.next(15)
            assert (event.kind, event.path, event.reason) == ("unsubscribed", f"{prefix}/market/prices/veg/leek", "REMOVED")

            # 2. the session's properties change (by filter, from a control session)
            changed = await admin.sessions.set_properties({"USER_TIER": "1"}, filter=f"TAG is '{prefix}'")
            assert changed == 1
            events = await drain(sub, 3)
            assert [(e.kind, e.reason) for e in events[:1]] == [("unsubscribed", "BRANCH_MAPPINGS")]
            assert sorted((e.path, e.value) for e in events[1:]) == [
                (path, 1.0), (f"{prefix}/market/prices/veg/leek", 0.5)
            ]
            props = await admin.sessions.get_properties(user.session_id)
            assert props[user.session_id]["USER_TIER"] == "1"

            # 3. the table changes
            await admin.session_trees.put_table(
                f"{prefix}/market/prices", [("has USER_TIER", f"{prefix}/backend/standard_prices")]
            )
            events = await drain(sub, 3)
            assert sorted((e.kind, e.reason or "") for e in events) == [
                ("subscribed", ""), ("unsubscribed", "BRANCH_MAPPINGS"), ("unsubscribed", "BRANCH_MAPPINGS")
            ]
            assert [e.value for e in events if e.kind == "subscribed"] == [2.0]

            # 4. an empty table removes the mapping: identity again
            await admin.session_trees.put_table(f"{prefix}/market/prices", [])
            events = await drain(sub, 2)
            assert [(e.kind, e.value) for e in events] == [("unsubscribed", None), ("subscribed", 9.0)]
            assert await admin.session_trees.get_table(f"{prefix}/market/prices") is None


async def test_range_query_through_a_session_path(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        real = f"{prefix}/real/series"
        await admin.topics.add(real, "TIME_SERIES", {"TIME_SERIES_EVENT_VALUE_TYPE": "INT64"})
        for i in range(3):
            await admin.time_series.append(real, i)
        await admin.session_trees.put_table(f"{prefix}/virtual", [("all", f"{prefix}/real")])
        async with canopy.connect(broker) as user:
            result = await user.time_series.range_query(f"{prefix}/virtual/series")
            assert [e.value for e in result.events] == [0, 1, 2]


async def test_putting_tables_is_checked(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        with pytest.raises(errors.InvalidBranchMappingError, match="mapping 0: invalid session filter"):
            await admin.session_trees.put_table(f"{prefix}/x", [("USER_TIER is", "y")])
        with pytest.raises(errors.InvalidBranchMappingError, match="topic tree branch"):
            await admin.session_trees.put_table(f"{prefix}/x", [("all", "//")])
        await admin.security.update(
            ["add_principal", f"{prefix}-ctl", "control-pw", [f"{prefix}-R"]],
            ["set_default_path_permissions", f"{prefix}-R", ["MODIFY_TOPIC", "READ_TOPIC"]],
            ["set_path_permissions", f"{prefix}-R", f"{prefix}/exposed", ["EXPOSE_BRANCH"]],
        )
        async with canopy.connect(broker, f"{prefix}-ctl", "control-pw") as ctl:
            with pytest.raises(errors.PermissionDeniedError, match=f"EXPOSE_BRANCH is needed on '{prefix}/hidden'"):
                await ctl.session_trees.put_table(f"{prefix}/s", [("all", f"{prefix}/hidden")])
            await ctl.session_trees.put_table(f"{prefix}/s", [("all", f"{prefix}/exposed")])
            assert f"{prefix}/s" in await ctl.session_trees.list_tables()
        async with canopy.connect(broker) as anonymous:
            with pytest.raises(errors.PermissionDeniedError, match="MODIFY_TOPIC"):
                await anonymous.session_trees.put_table(f"{prefix}/t", [("all", "x")])


async def test_tables_are_hidden_from_sessions_that_cannot_change_them(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as admin:
        branch = f"{prefix}/market/prices"
        await admin.session_trees.put_table(branch, mappings(prefix))
        await admin.security.update(["add_principal", f"{prefix}-client", "client-pw", ["CLIENT"]])
        async with canopy.connect(broker) as anonymous, canopy.connect(broker, f"{prefix}-client", "client-pw") as client:
            for session in (anonymous, client):
                # READ_TOPIC on the branch, as every subscriber has, does not show the table
                with pytest.raises(errors.PermissionDeniedError, match=f"MODIFY_TOPIC is needed on '{branch}'"):
                    await session.session_trees.get_table(branch)
                assert branch not in await session.session_trees.list_tables()
        assert await admin.session_trees.get_table(branch) == mappings(prefix)
        assert (await admin.session_trees.list_tables())[branch] == mappings(prefix)
