"""Per-hop tracing of updates through a gateway (the ``trace`` request)."""

from __future__ import annotations

import pytest

import canopy
from canopy import errors
from tests.actors.conftest import ADMIN


async def test_every_nth_set_is_timed_at_each_hop_in_order(broker: str, prefix: str) -> None:
    async with canopy.connect(broker, *ADMIN) as pub, canopy.connect(broker, *ADMIN) as sub:
        await pub.topics.add(f"{prefix}/t", "BINARY")
        subscription = await sub.topics.subscribe(f">{prefix}/t")
        assert (await subscription.next(10)).kind == "subscribed"
        assert await pub.server.trace(every=3) == []  # nothing was traced before
        for i in range(12):
            await pub.topics.set(f"{prefix}/t", b"v%d" % i)
        records = await pub.server.trace(every=0)  # stop, and take what was traced
        assert [r.value for r in records] == [b"v2", b"v5", b"v8", b"v11"]
        for r in records:
            assert r.path == f"{prefix}/t"
            assert 0 < r.received_ns <= r.forwarded_ns <= r.applied_ns <= r.returned_ns <= r.written_ns, r
        await pub.topics.set(f"{prefix}/t", b"after")
        assert await pub.server.trace(every=0) == []  # stopped


async def test_tracing_needs_control_server_and_sane_arguments(broker: str) -> None:
    async with canopy.connect(broker) as anonymous:
        with pytest.raises(errors.PermissionDeniedError, match="CONTROL_SERVER"):
            await anonymous.server.trace(every=1)
    async with canopy.connect(broker, *ADMIN) as admin:
        with pytest.raises(errors.InvalidRequestError, match="every must be >= 0"):
            await admin.server.trace(every=-1)
        with pytest.raises(errors.InvalidRequestError, match="every has the wrong type"):
            await admin.server.trace(every="1")  # type: ignore[arg-type]
