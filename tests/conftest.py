"""Shared test helpers: polling with a deadline, free ports, Ray settings."""

from __future__ import annotations

import asyncio
import os
import random
import socket
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import pytest

T = TypeVar("T")

# Local test clusters run without Ray's token authentication.
os.environ.setdefault("RAY_AUTH_MODE", "disabled")
# the history tests run short Spark jobs on small journals: the driver's JIT stops at its first tier
# (about 40 % less CPU a job on this machine; history/spark.py)
os.environ.setdefault("CANOPY_HISTORY_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


# Ports handed to servers come from below the kernel's ephemeral range (32768-60999 here) and
# above Ray's worker ports (10002-19999): a port the kernel picked (bind to 0) can be taken by
# an outgoing connection of Ray's, dozens of which open while `canopy serve` starts, before
# the gateway listens on it (CI saw "address already in use"). A cluster's gateways listen on
# port+k, so a span of ports is checked, and no span is handed out twice in one test run.
_PORTS = (20000, 32000)
_SPAN = 8
_handed: set[int] = set()


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    for _ in range(1000):
        base = random.randrange(_PORTS[0], _PORTS[1] - _SPAN)
        span = range(base, base + _SPAN)
        if _handed.isdisjoint(span) and all(_bindable(p) for p in span):
            _handed.update(span)
            return base
    raise RuntimeError(f"no {_SPAN} free ports in a row between {_PORTS[0]} and {_PORTS[1]}")


class Hopeless(AssertionError):
    """Raised by a polled check when waiting longer cannot help (the process exited): fails at once."""


def wait_for(
    check: Callable[[], T], timeout: float = 30.0, what: str = "condition", interval: float = 0.05,
    describe: Callable[[], Any] | None = None,
) -> T:
    """Poll ``check`` until it returns something truthy; fail with the last observation
    (``describe()``'s answer, when given, says more than a falsy result can)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = check()
            if last:
                return last
        except Hopeless:
            raise
        except Exception as e:  # keep polling; report it if time runs out
            last = e
        if time.monotonic() > deadline:
            if describe is not None:
                last = describe()
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last observation: {last!r}")
        time.sleep(interval)


async def await_for(
    check: Callable[[], Awaitable[T]], timeout: float = 30.0, what: str = "condition", interval: float = 0.05
) -> T:
    """Async :func:`wait_for`."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = await check()
            if last:
                return last
        except Exception as e:
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}; last observation: {last!r}")
        await asyncio.sleep(interval)

async def until(check: Callable[[], T], timeout: float = 10.0, what: str = "condition", interval: float = 0.005) -> T:
    """:func:`wait_for` of a plain condition, from a coroutine (the loop keeps running)."""

    async def probe() -> T:
        return check()

    return await await_for(probe, timeout, what, interval)


# Hypothesis: no per-example deadline. The suite shares two cores with Ray and
# `canopy serve` subprocesses, so wall-clock limits would only measure the load.
from hypothesis import settings  # noqa: E402

settings.register_profile("canopy", deadline=None)
settings.load_profile("canopy")


# -- markers by what a test needs, so that a developer can run a subset ---------------------------
# (`make test` runs every test whatever its markers; e.g. `pytest -m "not cluster and not docker"`)

#: (path prefix, markers) of the tests under it
_NEEDS = (
    ("tests/unit/", ("unit",)),
    ("tests/simulation/", ("unit",)),
    ("tests/actors/", ("ray",)),
    ("tests/cluster/", ("ray", "cluster")),
    ("tests/e2e/test_console.py", ("ray", "server", "browser")),
    ("tests/e2e/", ("ray", "server")),
    ("tests/history/test_served.py", ("ray", "server", "spark")),
    ("tests/history/", ("spark",)),
    ("tests/deploy/test_containers.py", ("docker", "cluster")),
    ("tests/deploy/", ("unit",)),
)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects by them
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = str(config.rootpath)
    for item in items:
        where = str(item.path).removeprefix(root).lstrip("/")
        for prefix, markers in _NEEDS:
            if where.startswith(prefix):
                for marker in markers:
                    item.add_marker(marker)
                break
